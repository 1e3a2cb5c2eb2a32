//! What `--notify-url` is told: a campaign started restarting, paused (with the reason) or
//! completed, with its counts. Pure: the tracker remembers what it announced and returns the
//! notices a new plan calls for; the engine's notifier sends them.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::Serialize;

use super::book::{CampaignBook, CampaignCounts, CampaignState};
use super::plan::RolloutPlan;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NoticeEvent {
    Started,
    Paused,
    Completed,
}

impl NoticeEvent {
    pub fn as_str(self) -> &'static str {
        match self {
            NoticeEvent::Started => "started",
            NoticeEvent::Paused => "paused",
            NoticeEvent::Completed => "completed",
        }
    }
}

/// A campaign started, paused or completed, with its counts: what the notifier sends (the
/// rendering layer adds the sentence a person reads).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Notice {
    pub event: NoticeEvent,
    pub sidecar: String,
    pub revision: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub previous: Option<String>,
    pub counts: CampaignCounts,
    /// Why it paused, as data: the shell words it (`render::NoticePayload`).
    #[serde(skip)]
    pub pause: Option<super::pause::Pause>,
    /// What changed in the sidecar, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub changes: Option<String>,
    pub at: Time,
}

/// The state each campaign was last announced in, per sidecar and revision.
#[derive(Debug, Default)]
pub struct NoticeTracker {
    announced: BTreeMap<String, (String, NoticeEvent)>,
    /// Per sidecar, the revision and state seen last: a completion is announced on the change
    /// to complete, never for a campaign complete when this process started.
    seen: BTreeMap<String, (String, CampaignState)>,
}

impl NoticeTracker {
    /// The notices `plan` (whose book is `book`) calls for, at `now`.
    pub fn notices(&mut self, plan: &RolloutPlan, book: &CampaignBook, now: Time) -> Vec<Notice> {
        let mut notices = Vec::new();
        for (sidecar, campaign) in &book.campaigns {
            let announced = self
                .announced
                .get(sidecar)
                .filter(|(revision, _)| *revision == campaign.revision)
                .map(|(_, event)| *event);
            let was_open = self.seen.get(sidecar).is_some_and(|(revision, state)| {
                *revision == campaign.revision && *state != CampaignState::Complete
            });
            let restarting = plan
                .restarts
                .iter()
                .any(|r| r.changes.iter().any(|c| &c.sidecar == sidecar));
            let paused = plan.pauses.iter().find(|(s, _)| s == sidecar);
            let worked = campaign.counts.succeeded + campaign.counts.failed > 0;
            let event = if let Some((_, pause)) = paused {
                Some((NoticeEvent::Paused, Some(pause.clone())))
            } else if campaign.state == CampaignState::Complete
                && was_open
                && worked
                && announced != Some(NoticeEvent::Completed)
            {
                Some((NoticeEvent::Completed, None))
            } else if restarting && announced.is_none() {
                Some((NoticeEvent::Started, None))
            } else {
                None
            };
            self.seen
                .insert(sidecar.clone(), (campaign.revision.clone(), campaign.state));
            let Some((event, pause)) = event else {
                continue;
            };
            self.announced
                .insert(sidecar.clone(), (campaign.revision.clone(), event));
            let mut counts = campaign.counts.clone();
            if event == NoticeEvent::Started {
                // The restarts of this plan are made right after it: say them as rolling.
                let now_restarted = plan
                    .restarts
                    .iter()
                    .filter(|r| r.changes.iter().any(|c| &c.sidecar == sidecar))
                    .count() as u32;
                counts.pending = counts.pending.saturating_sub(now_restarted);
                counts.rolling += now_restarted;
            }
            notices.push(Notice {
                event,
                sidecar: sidecar.clone(),
                revision: campaign.revision.clone(),
                previous: campaign.previous.clone(),
                counts,
                pause,
                changes: campaign.changes.clone(),
                at: now.clone(),
            });
        }
        self.announced.retain(|s, _| book.campaigns.contains_key(s));
        self.seen.retain(|s, _| book.campaigns.contains_key(s));
        notices
    }
}
