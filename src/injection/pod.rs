//! The pod as injection reads it: only the fields it looks at, borrowing strings where it
//! can, skipping the rest (managedFields included).

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::HostAlias;
use serde::Deserialize;
use serde::de::{Deserializer, MapAccess, SeqAccess, Visitor};

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
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub service_account_name: Option<Cow<'a, str>>,
    /// Deprecated alias the apiserver still fills; kept in step with `serviceAccountName`.
    #[serde(default, borrow, deserialize_with = "borrowed_str")]
    pub service_account: Option<Cow<'a, str>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerView<'a> {
    #[serde(borrow)]
    pub name: Cow<'a, str>,
    #[serde(default, borrow, deserialize_with = "presized_list")]
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

/// A string borrowed from the body, or copied when JSON escapes in it forced a copy. serde's
/// derive borrows a bare `Cow<str>` field this way, but copies every string of an
/// `Option<Cow<str>>` or of a map: a dozen allocations a request.
struct CowStr<'a>(Cow<'a, str>);

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
pub(crate) fn borrowed_str<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Cow<'a, str>>, D::Error> {
    Ok(Option::<CowStr<'a>>::deserialize(deserializer)?.map(|text| text.0))
}

/// An optional list read into room for [`PRESIZED`] items: serde's own reading starts empty
/// (JSON does not say how long a list is) and grows a container's hundred env entries six
/// times.
fn presized_list<'de, D, T>(deserializer: D) -> Result<Option<Vec<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct Presized<T>(Vec<T>);
    impl<'de, T: Deserialize<'de>> Deserialize<'de> for Presized<T> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            struct ListVisitor<T>(std::marker::PhantomData<T>);
            impl<'de, T: Deserialize<'de>> Visitor<'de> for ListVisitor<T> {
                type Value = Vec<T>;

                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a list")
                }

                fn visit_seq<S: SeqAccess<'de>>(self, mut items: S) -> Result<Vec<T>, S::Error> {
                    // A length a format states is believed only so far.
                    let mut list =
                        Vec::with_capacity(items.size_hint().map_or(PRESIZED, |n| n.min(4096)));
                    while let Some(item) = items.next_element()? {
                        list.push(item);
                    }
                    Ok(list)
                }
            }
            deserializer
                .deserialize_seq(ListVisitor(std::marker::PhantomData))
                .map(Presized)
        }
    }
    Ok(Option::<Presized<T>>::deserialize(deserializer)?.map(|list| list.0))
}

/// Items a presized list has room for before it grows.
const PRESIZED: usize = 32;

/// An optional string map (annotations), keys and values borrowed where they can be.
fn borrowed_map<'de: 'a, 'a, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<StringMap<'a>>, D::Error> {
    struct MapVisitor;
    impl<'de> Visitor<'de> for MapVisitor {
        type Value = StringMap<'de>;

        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a map of strings")
        }

        fn visit_map<M: MapAccess<'de>>(self, mut entries: M) -> Result<Self::Value, M::Error> {
            let mut map = BTreeMap::new();
            while let Some((key, value)) = entries.next_entry::<CowStr<'de>, CowStr<'de>>()? {
                map.insert(key.0, value.0);
            }
            Ok(map)
        }
    }
    struct OptionalMap<'a>(Option<StringMap<'a>>);
    impl<'de: 'a, 'a> Deserialize<'de> for OptionalMap<'a> {
        fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
            deserializer
                .deserialize_map(MapVisitor)
                .map(|map| OptionalMap(Some(map)))
        }
    }
    Ok(Option::<OptionalMap<'a>>::deserialize(deserializer)?.and_then(|map| map.0))
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
        let null_map: PodView =
            serde_json::from_str(r#"{"metadata": {"annotations": null}}"#).unwrap();
        assert!(null_map.metadata.annotations.is_none());
    }
}
