//! The annotation keys, all under one configurable namespace so that a
//! Tumblr deployment keeps `injector.tumblr.com/...` in every manifest.

pub const DEFAULT_ANNOTATION_NAMESPACE: &str = "injector";

/// The value of the status annotation on an injected pod.
pub const STATUS_INJECTED: &str = "injected";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AnnotationKeys {
    pub request: String,
    pub status: String,
    pub revision: String,
    pub rollout: String,
    pub rollout_revision: String,
    pub rollout_reason: String,
    /// On the pod template: the target of a restart made again because pods of the first
    /// were created while the webhook was bypassed (made once per target).
    pub rollout_heal: String,
    pub rolled_at: String,
    /// On a workload: an integer; lower is restarted first (staging before production).
    pub rollout_priority: String,
    /// On a workload: `"true"` accepts the downtime a restart of it causes.
    pub allow_downtime: String,
    /// On a workload: the maintenance windows its restarts start in (`;`-separated, or
    /// `always`), replacing `--maintenance-window` for it.
    pub maintenance_window: String,
    /// On a workload: `evict` restarts it by evicting its stale pods, never writing its
    /// template; `template` (the default) stamps the template.
    pub restart_method: String,
    /// On a pod (or pod template): `"false"` keeps its sidecars classic, whatever their
    /// configs' `nativeSidecars` say.
    pub native_sidecars: String,
    /// On a pod, written by the webhook: the sidecars it injected as native sidecars
    /// (`name:version`, comma-separated), so that what reads only metadata (drift) knows each
    /// pod's form.
    pub injected_native: String,
}

impl AnnotationKeys {
    pub fn new(namespace: &str) -> Self {
        let key = |suffix: &str| format!("{namespace}/{suffix}");
        Self {
            request: key("request"),
            status: key("status"),
            revision: key("revision"),
            rollout: key("rollout"),
            rollout_revision: key("rollout-revision"),
            rollout_reason: key("rollout-reason"),
            rollout_heal: key("rollout-heal"),
            rolled_at: key("rolled-at"),
            rollout_priority: key("rollout-priority"),
            allow_downtime: key("allow-downtime"),
            maintenance_window: key("maintenance-window"),
            restart_method: key("restart-method"),
            native_sidecars: key("native-sidecars"),
            injected_native: key("injected-native"),
        }
    }
}

impl Default for AnnotationKeys {
    fn default() -> Self {
        Self::new(DEFAULT_ANNOTATION_NAMESPACE)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_follow_the_namespace() {
        let tumblr = AnnotationKeys::new("injector.tumblr.com");
        assert_eq!(tumblr.request, "injector.tumblr.com/request");
        assert_eq!(
            tumblr.rollout_revision,
            "injector.tumblr.com/rollout-revision"
        );
        assert_eq!(AnnotationKeys::default().status, "injector/status");
    }
}
