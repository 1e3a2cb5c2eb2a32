//! The pod as injection reads it: only the fields it looks at, borrowing strings where it
//! can, skipping the rest (managedFields included).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::HostAlias;
use serde::Deserialize;

/// The parts of a pod (or pod template) that injection reads.
#[derive(Debug, Default, Deserialize)]
pub struct PodView<'a> {
    #[serde(default, borrow)]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub metadata: PodMetadataView<'a>,
    #[serde(default, borrow)]
    pub spec: Option<PodSpecView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMetadataView<'a> {
    #[serde(default, borrow)]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub generate_name: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub annotations: Option<BTreeMap<Cow<'a, str>, Cow<'a, str>>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpecView<'a> {
    #[serde(default, borrow)]
    pub containers: Option<Vec<ContainerView<'a>>>,
    #[serde(default, borrow)]
    pub init_containers: Option<Vec<ContainerView<'a>>>,
    #[serde(default, borrow)]
    pub volumes: Option<Vec<VolumeView<'a>>>,
    #[serde(default)]
    pub host_aliases: Option<Vec<HostAlias>>,
    #[serde(default)]
    pub host_network: Option<bool>,
    #[serde(default, rename = "hostPID")]
    pub host_pid: Option<bool>,
    #[serde(default, borrow)]
    pub service_account_name: Option<Cow<'a, str>>,
    /// Deprecated alias the apiserver still fills; kept in step with `serviceAccountName`.
    #[serde(default, borrow)]
    pub service_account: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub env: Option<Vec<NamedView<'a>>>,
    #[serde(default, borrow)]
    pub volume_mounts: Option<Vec<MountView<'a>>>,
}

#[derive(Debug, Default, Deserialize)]
pub struct NamedView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MountView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default, borrow)]
    pub mount_path: Cow<'a, str>,
}

#[derive(Debug, Default, Deserialize)]
pub struct VolumeView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default)]
    pub secret: Option<serde::de::IgnoredAny>,
}

impl PodView<'_> {
    pub(super) fn annotation(&self, key: &str) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.get(key))
            .map(|value| value.as_ref())
    }
}
