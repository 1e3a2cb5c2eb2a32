//! The pod as injection reads it: only the fields it looks at, borrowing strings where it
//! can, skipping the rest (managedFields included).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::HostAlias;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

/// Annotations: keys and values borrowed from the body where they can be.
pub type StringMap<'a> = BTreeMap<Cow<'a, str>, Cow<'a, str>>;

/// The parts of a pod (or pod template) that injection reads.
#[derive(Debug, Default, Deserialize)]
pub struct PodView<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    pub metadata: PodMetadataView<'a>,
    #[serde(default, borrow)]
    pub spec: Option<PodSpecView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodMetadataView<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub generate_name: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub namespace: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed_map")]
    pub annotations: Option<StringMap<'a>>,
    #[serde(default, borrow)]
    pub owner_references: Option<Vec<OwnerView<'a>>>,
}

/// An owner of a pod, as far as injection cares: whether it is a Job.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerView<'a> {
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub api_version: Option<Cow<'a, str>>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub kind: Option<Cow<'a, str>>,
    #[serde(default)]
    pub controller: Option<bool>,
}

impl PodMetadataView<'_> {
    /// Whether the pod's controller is a Job (its pods run to completion).
    pub fn of_a_job(&self) -> bool {
        self.owner_references.iter().flatten().any(|o| {
            o.controller == Some(true)
                && o.kind.as_deref().is_some_and(|kind| {
                    crate::workload::OwnerKind::parse(kind) == crate::workload::OwnerKind::Job
                })
                && o.api_version
                    .as_deref()
                    .is_some_and(|v| v.starts_with("batch/"))
        })
    }
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
    /// A Job's pod template (in a Job's spec), read only to warn of a classic sidecar in it.
    #[serde(default, borrow)]
    pub template: Option<Box<PodView<'a>>>,
    /// A CronJob's Job template.
    #[serde(default, borrow)]
    pub job_template: Option<Box<PodView<'a>>>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub service_account_name: Option<Cow<'a, str>>,
    /// Set on a pod already scheduled (or created for a node): whose kubelet runs it.
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub node_name: Option<Cow<'a, str>>,
    /// Deprecated alias the apiserver still fills; kept in step with `serviceAccountName`.
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub service_account: Option<Cow<'a, str>>,
    /// Pod-level resources (Kubernetes 1.34+), which must cover what the containers request.
    #[serde(default, borrow)]
    pub resources: Option<ResourcesView<'a>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default)]
    pub env: Option<EnvList>,
    #[serde(default, borrow)]
    pub volume_mounts: Option<Vec<MountView<'a>>>,
    /// Read only to count what the pod requests when it sets pod-level resources.
    #[serde(default, borrow)]
    pub resources: Option<ResourcesView<'a>>,
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub restart_policy: Option<Cow<'a, str>>,
}

/// Requests and limits as written: `resource -> quantity`, a quantity a string or, in a
/// manifest, a number (`cpu: 1`).
#[derive(Debug, Default, Deserialize)]
pub struct ResourcesView<'a> {
    #[serde(default, borrow, deserialize_with = "quantities")]
    pub requests: Option<QuantityMap<'a>>,
    #[serde(default, borrow, deserialize_with = "quantities")]
    pub limits: Option<QuantityMap<'a>>,
}

/// Resource name and quantity pairs, in the order written.
pub type QuantityMap<'a> = Vec<(Cow<'a, str>, Cow<'a, str>)>;

/// A quantity: a string, or a number as YAML writes `cpu: 1`.
struct QuantityText<'a>(Cow<'a, str>);

impl<'a> From<QuantityText<'a>> for Cow<'a, str> {
    fn from(text: QuantityText<'a>) -> Self {
        text.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for QuantityText<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct QuantityVisitor;
        impl<'de> Visitor<'de> for QuantityVisitor {
            type Value = QuantityText<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a quantity")
            }

            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                text: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Borrowed(text)))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(text.to_owned())))
            }

            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(n.to_string())))
            }

            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(n.to_string())))
            }

            fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<Self::Value, E> {
                Ok(QuantityText(Cow::Owned(n.to_string())))
            }
        }
        deserializer.deserialize_any(QuantityVisitor)
    }
}

fn quantities<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<QuantityMap<'a>>, D::Error> {
    optional_map::<D, QuantityText<'a>, QuantityMap<'a>>(deserializer, "a map of quantities")
}

/// A container's env list as the body wrote it. Injection only asks whether a name is taken,
/// and a search of the text answers that for most names without reading the entries: in a
/// production pod the env lists are often half the bytes, and reading every entry cost more
/// than reading the rest of the pod.
#[derive(Debug)]
pub struct EnvList(Box<RawValue>);

impl EnvList {
    /// The list's JSON text.
    pub fn text(&self) -> &str {
        self.0.get()
    }

    /// The entries' names. A list whose entries do not read as named objects yields none: the
    /// apiserver refuses such a pod whatever is added to it.
    pub fn names(&self) -> Vec<Cow<'_, str>> {
        serde_json::from_str::<Vec<NamedView<'_>>>(self.text())
            .map(|entries| entries.into_iter().map(|entry| entry.name).collect())
            .unwrap_or_default()
    }
}

impl<'de> Deserialize<'de> for EnvList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<RawValue>::deserialize(deserializer)?;
        let found = match raw.get().trim_start().as_bytes().first() {
            Some(b'[') => return Ok(Self(raw)),
            Some(b'{') => "a map",
            Some(b'"') => "a string",
            Some(b't' | b'f') => "a boolean",
            _ => "a number",
        };
        Err(serde::de::Error::invalid_type(
            serde::de::Unexpected::Other(found),
            &"a list of env entries",
        ))
    }
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

/// A string borrowed from the body, or copied when JSON escapes in it forced a copy. serde's
/// derive borrows a bare `Cow<str>` field this way, but copies every string of an
/// `Option<Cow<str>>` or of a map: a dozen allocations a request.
struct CowStr<'a>(Cow<'a, str>);

impl<'a> From<CowStr<'a>> for Cow<'a, str> {
    fn from(text: CowStr<'a>) -> Self {
        text.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for CowStr<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct StrVisitor;
        impl<'de> Visitor<'de> for StrVisitor {
            type Value = CowStr<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }

            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                text: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Borrowed(text)))
            }

            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(text.to_owned())))
            }

            fn visit_string<E: serde::de::Error>(self, text: String) -> Result<Self::Value, E> {
                Ok(CowStr(Cow::Owned(text)))
            }
        }
        deserializer.deserialize_str(StrVisitor)
    }
}

/// An optional string, borrowed where it can be (see [`CowStr`]).
pub fn borrowed_str<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    Ok(Option::<CowStr<'a>>::deserialize(deserializer)?.map(|text| text.0))
}

/// An optional string map (annotations), keys and values borrowed where they can be.
fn borrowed_map<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<StringMap<'a>>, D::Error> {
    optional_map::<D, CowStr<'a>, StringMap<'a>>(deserializer, "a map of strings")
}

/// An optional map of borrowed string keys to values read as `V` (a string, a quantity),
/// collected into `C`; null is absent. `expecting` names the map in an error.
fn optional_map<'de: 'a, 'a, D, V, C>(
    deserializer: D,
    expecting: &'static str,
) -> Result<Option<C>, D::Error>
where
    D: Deserializer<'de>,
    V: Deserialize<'de> + Into<Cow<'a, str>>,
    C: Default + Extend<(Cow<'a, str>, Cow<'a, str>)>,
{
    struct MapVisitor<V, C>(&'static str, std::marker::PhantomData<(V, C)>);
    impl<'de: 'a, 'a, V, C> Visitor<'de> for MapVisitor<V, C>
    where
        V: Deserialize<'de> + Into<Cow<'a, str>>,
        C: Default + Extend<(Cow<'a, str>, Cow<'a, str>)>,
    {
        type Value = C;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.0)
        }

        fn visit_map<M: MapAccess<'de>>(self, mut entries: M) -> Result<C, M::Error> {
            let mut map = C::default();
            while let Some((key, value)) = entries.next_entry::<CowStr<'de>, V>()? {
                map.extend([(key.0, value.into())]);
            }
            Ok(map)
        }
    }
    struct OptionVisitor<V, C>(&'static str, std::marker::PhantomData<(V, C)>);
    impl<'de: 'a, 'a, V, C> Visitor<'de> for OptionVisitor<V, C>
    where
        V: Deserialize<'de> + Into<Cow<'a, str>>,
        C: Default + Extend<(Cow<'a, str>, Cow<'a, str>)>,
    {
        type Value = Option<C>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str(self.0)
        }

        fn visit_none<E: serde::de::Error>(self) -> Result<Option<C>, E> {
            Ok(None)
        }

        fn visit_unit<E: serde::de::Error>(self) -> Result<Option<C>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(self, map: D) -> Result<Option<C>, D::Error> {
            map.deserialize_map(MapVisitor::<V, C>(self.0, std::marker::PhantomData))
                .map(Some)
        }
    }
    deserializer.deserialize_option(OptionVisitor::<V, C>(expecting, std::marker::PhantomData))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_borrowed_unless_escapes_force_a_copy_and_null_is_absent() {
        let body = r#"{"kind": "Pod", "metadata": {"name": "web\"1\u00e9", "namespace": null,
            "annotations": {"injector/request": "logger:v1", "note\n": "a\tb"}},
            "spec": {"serviceAccountName": "runner", "serviceAccount": null}}"#;
        let pod: PodView = serde_json::from_str(body).unwrap();
        assert!(matches!(pod.kind, Some(Cow::Borrowed("Pod"))));
        assert_eq!(pod.metadata.name.as_deref(), Some("web\"1é"));
        assert!(matches!(pod.metadata.name, Some(Cow::Owned(_))));
        assert_eq!(pod.metadata.namespace, None);
        let annotations = pod.metadata.annotations.as_ref().unwrap();
        assert!(matches!(
            annotations.get("injector/request"),
            Some(Cow::Borrowed("logger:v1"))
        ));
        assert_eq!(annotations.get("note\n").map(AsRef::as_ref), Some("a\tb"));
        let spec = pod.spec.unwrap();
        assert!(matches!(
            spec.service_account_name,
            Some(Cow::Borrowed("runner"))
        ));
        assert_eq!(spec.service_account, None);

        let wrong: Result<PodView, _> =
            serde_json::from_str(r#"{"metadata": {"annotations": {"a": 1}}}"#);
        assert!(wrong.unwrap_err().to_string().contains("expected a string"));
        for (env, found) in [
            ("5", "a number"),
            (r#"{"name": "A"}"#, "a map"),
            (r#""A""#, "a string"),
        ] {
            let body =
                format!(r#"{{"spec": {{"containers": [{{"name": "app", "env": {env}}}]}}}}"#);
            let error = serde_json::from_str::<PodView>(&body)
                .unwrap_err()
                .to_string();
            assert!(
                error.contains(&format!(
                    "invalid type: {found}, expected a list of env entries"
                )),
                "{error}"
            );
        }
        let null_map: PodView =
            serde_json::from_str(r#"{"metadata": {"annotations": null}}"#).unwrap();
        assert!(null_map.metadata.annotations.is_none());
    }
}
