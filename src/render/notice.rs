//! What `--notify-url` reads: the core's notice, with a `text` that makes the document a Slack
//! (Mattermost, Teams workflow) incoming-webhook message as it is.

use serde::Serialize;

use crate::rollout::notice::{Notice, NoticeEvent};

/// The setting of how many failures pause a campaign.
const MAX_FAILURES: &str = "--max-failures";

/// The document POSTed: `text` first, then the notice's fields for generic receivers, and
/// why it paused.
#[derive(Debug, Serialize)]
pub(crate) struct NoticePayload<'a> {
    pub(crate) text: String,
    #[serde(flatten)]
    pub(crate) notice: &'a Notice,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
}

impl<'a> NoticePayload<'a> {
    pub(crate) fn of(notice: &'a Notice) -> Self {
        Self {
            text: notice_text(notice),
            notice,
            reason: reason(notice),
        }
    }
}

/// Why `notice`'s campaign paused, in words.
fn reason(notice: &Notice) -> Option<String> {
    let pause = notice.pause.as_ref()?;
    Some(super::pause_reason(&notice.sidecar, pause))
}

/// The one line a person reads of a notice.
pub(crate) fn notice_text(notice: &Notice) -> String {
    let (sidecar, revision, c) = (&notice.sidecar, &notice.revision, &notice.counts);
    let what = format!("sidecar-injector: campaign of {sidecar} (revision {revision})");
    match notice.event {
        NoticeEvent::Started => format!(
            "{what} started: {} workload(s) restarting, {} to go",
            c.rolling, c.pending
        ),
        NoticeEvent::Paused => format!(
            "{what} paused: {}; {} succeeded, {} failed, {} not restarted (fix or revert the config, or {})",
            reason(notice).unwrap_or_else(|| format!("failures reached {MAX_FAILURES}")),
            c.succeeded,
            c.failed,
            c.pending,
            super::RESUME
        ),
        NoticeEvent::Completed => format!(
            "{what} completed: {} workload(s) restarted, {} failed",
            c.succeeded, c.failed
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rollout::CampaignCounts;
    use crate::rollout::pause::{Pause, WhilePaused};
    use crate::workload::{WorkloadKind, WorkloadRef};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    /// A pause of one workload's failure, `why`.
    fn pause(why: &str) -> Pause {
        Pause {
            revision: "bbbbbbbbbbbb".into(),
            failed: 1,
            named: vec![(
                WorkloadRef::new(WorkloadKind::Deployment, "team", "web"),
                why.into(),
            )],
            new_pods: WhilePaused::NotHeld,
        }
    }

    fn notice(event: NoticeEvent, why: Option<&str>) -> Notice {
        Notice {
            event,
            sidecar: "logger:v1".into(),
            revision: "bbbbbbbbbbbb".into(),
            previous: Some("aaaaaaaaaaaa".into()),
            counts: CampaignCounts {
                succeeded: 2,
                failed: 1,
                pending: 3,
                rolling: 1,
            },
            pause: why.map(pause),
            changes: None,
            at: Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
        }
    }

    #[test]
    fn each_notice_reads_as_one_line_with_what_to_do_about_a_pause() {
        assert_eq!(
            notice_text(&notice(NoticeEvent::Started, None)),
            "sidecar-injector: campaign of logger:v1 (revision bbbbbbbbbbbb) started: 1 workload(s) restarting, 3 to go"
        );
        assert_eq!(
            notice_text(&notice(NoticeEvent::Completed, None)),
            "sidecar-injector: campaign of logger:v1 (revision bbbbbbbbbbbb) completed: 2 workload(s) restarted, 1 failed"
        );
        assert_eq!(
            notice_text(&notice(
                NoticeEvent::Paused,
                Some("canary web not rolled out within 5m")
            )),
            format!(
                "sidecar-injector: campaign of logger:v1 (revision bbbbbbbbbbbb) paused: {}; 2 succeeded, 1 failed, 3 not restarted (fix or revert the config, or `sidecar-injector rollout --resume`)",
                crate::render::pause_reason(
                    "logger:v1",
                    &pause("canary web not rolled out within 5m")
                )
            )
        );
        assert!(
            notice_text(&notice(NoticeEvent::Paused, None))
                .contains("paused: failures reached --max-failures;")
        );
    }

    #[test]
    fn the_payload_is_a_slack_message_with_the_notice_beside_it() {
        let started = notice(NoticeEvent::Started, None);
        let notice = notice(NoticeEvent::Paused, Some("canary failed"));
        let json = serde_json::to_value(NoticePayload::of(&notice)).unwrap();
        assert_eq!(json["text"], notice_text(&notice));
        assert_eq!(json["event"], "paused");
        assert_eq!(json["sidecar"], "logger:v1");
        assert_eq!(json["previous"], "aaaaaaaaaaaa");
        assert_eq!(json["counts"]["failed"], 1);
        assert_eq!(
            json["reason"],
            crate::render::pause_reason("logger:v1", &pause("canary failed"))
        );
        let json = serde_json::to_value(NoticePayload::of(&started)).unwrap();
        assert!(json.get("reason").is_none(), "{json}");
        let text = serde_json::to_string(&NoticePayload::of(&notice)).unwrap();
        assert!(text.starts_with("{\"text\":"), "{text}");
    }
}
