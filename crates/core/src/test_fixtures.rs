//! Builders shared by the unit tests of the pure modules.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};

/// Pod metadata as a metadata-only watch delivers it.
pub struct PodMeta(pub ObjectMeta);

impl PodMeta {
    pub fn new(namespace: &str, name: &str) -> Self {
        PodMeta(ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            annotations: Some(Default::default()),
            ..Default::default()
        })
    }
    pub fn annotation(mut self, key: &str, value: &str) -> Self {
        self.0
            .annotations
            .as_mut()
            .unwrap()
            .insert(key.into(), value.into());
        self
    }
    pub fn label(mut self, key: &str, value: &str) -> Self {
        self.0
            .labels
            .get_or_insert_default()
            .insert(key.into(), value.into());
        self
    }
    pub fn request(self, request: &str) -> Self {
        self.annotation("injector/request", request)
    }
    pub fn injected(self, revision: &str) -> Self {
        self.annotation("injector/status", "injected")
            .annotation("injector/revision", revision)
    }
    pub fn owner(mut self, kind: &str, name: &str) -> Self {
        self.0.owner_references = Some(vec![OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(true),
            ..Default::default()
        }]);
        self
    }
    pub fn version(mut self, resource_version: &str) -> Self {
        self.0.resource_version = Some(resource_version.into());
        self
    }
    pub fn terminating(mut self) -> Self {
        self.0.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        self
    }
}

/// A campaign at `revision` in `state` since `since`, with no failures, notes or history.
pub fn campaign(
    revision: &str,
    state: crate::rollout::CampaignState,
    since: Time,
) -> crate::rollout::Campaign {
    crate::rollout::Campaign {
        revision: revision.to_owned(),
        previous: None,
        since,
        state,
        counts: Default::default(),
        failures: Vec::new(),
        failed_workloads: Default::default(),
        acknowledged_failures: 0,
        pause_reason: None,
        changes: None,
        resumed: None,
        reverted: None,
        failed_before: Vec::new(),
        checks: Vec::new(),
        held: None,
        expected_end: None,
        completed: None,
    }
}

/// A book holding one campaign of `sidecar`: at `revision` in `state` since the epoch, as
/// `edit` leaves it.
pub fn book_of(
    sidecar: &str,
    revision: &str,
    state: crate::rollout::CampaignState,
    edit: impl FnOnce(&mut crate::rollout::Campaign),
) -> crate::rollout::CampaignBook {
    let since = Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
    let mut campaign = campaign(revision, state, since);
    edit(&mut campaign);
    let mut book = crate::rollout::CampaignBook::default();
    book.campaigns.insert(sidecar.to_owned(), campaign);
    book
}

/// The config `text` as the loaders produce it (from a file `test.yaml`).
pub fn loaded(text: &str) -> crate::config::LoadedSidecar {
    crate::config::LoadedSidecar::new(
        crate::config::parse_config("test.yaml", text)
            .expect("a valid config")
            .config,
        "test.yaml",
    )
}

/// A live pod's drift, one sidecar (`sidecar-N:v1`) in each of `states`.
pub fn drift_of(states: &[crate::drift::DriftState]) -> Vec<crate::explain::SidecarDrift> {
    states
        .iter()
        .enumerate()
        .map(|(i, state)| crate::explain::SidecarDrift {
            sidecar: format!("sidecar-{i}:v1"),
            carried: None,
            wanted: None,
            state: *state,
            excluded: None,
        })
        .collect()
}

/// A template restart of `workload` for `changes`: not a canary, one pod, no target; the
/// fields a test cares about are set over it (`Restart { canary: true, ..restart(..) }`).
pub fn restart(
    workload: crate::workload::WorkloadRef,
    changes: Vec<crate::rollout::SidecarChange>,
) -> crate::rollout::Restart {
    crate::rollout::Restart {
        workload,
        target: None,
        reason: String::new(),
        changes,
        canary: false,
        on_delete: false,
        pods: 1,
        heal: false,
        method: crate::workload::RestartMethod::Template,
        reverted: false,
        missed: 0,
        not_in_place: None,
        selected: None,
    }
}

/// `sidecar`'s stale pods going from revision `from` to `to`, with no content change known.
pub fn stale_change(sidecar: &str, from: &str, to: &str) -> crate::rollout::SidecarChange {
    crate::rollout::SidecarChange {
        sidecar: sidecar.to_owned(),
        state: crate::drift::DriftState::Stale,
        from: Some(from.to_owned()),
        to: to.to_owned(),
        what: None,
    }
}

/// A replica's publication of `logger:v1` at `revision`, renewed `seconds_ago` before
/// 1,800,000,000 s (the publication tests' now).
pub fn publication(revision: &str, seconds_ago: i64) -> crate::rollout::publication::Publication {
    crate::rollout::publication::Publication {
        revisions: [("logger:v1".to_owned(), revision.to_owned())]
            .into_iter()
            .collect(),
        manual: std::collections::BTreeSet::new(),
        at: Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000 - seconds_ago).unwrap()),
    }
}
