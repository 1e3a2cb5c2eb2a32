//! Sidecars other injectors put there (Istio's `istio-proxy`, Linkerd's `linkerd-proxy`,
//! Vault's `vault-agent`): what a new pod of a workload would get now, read from the API
//! server's answers to server-side dry-run creates of its template, against what its running
//! pods have. Pure: the shell asks the API server, this compares.
//!
//! What is compared, the *foreign part* of a pod spec: each named container's spec, its form
//! (classic or native) and position, and the volumes and init containers admission added
//! beside them (those the answer has and the template has not). What differs between two
//! answers for one template (a generated name, a token, a per-pod random value) is ignored,
//! and said.

mod changes;
mod part;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PodSpec;
use serde_json::Value;
use sha2::{Digest, Sha256};

pub use changes::{EntryChanges, ForeignChange};
pub use part::{ContainerForm, ForeignPart, TemplateShape};

/// The container names of the sidecars other injectors add, as the platform team names them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ForeignSidecars {
    names: BTreeSet<String>,
}

/// A name given as a foreign sidecar that cannot be a container's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a container name (lowercase letters, digits and '-', at most 63)")]
pub struct NotAContainerName {
    pub name: String,
}

impl ForeignSidecars {
    pub fn new<S: AsRef<str>>(
        names: impl IntoIterator<Item = S>,
    ) -> Result<Self, NotAContainerName> {
        let names = names
            .into_iter()
            .map(|name| {
                let name = name.as_ref().trim();
                if is_dns_label(name) {
                    Ok(name.to_owned())
                } else {
                    Err(NotAContainerName {
                        name: name.to_owned(),
                    })
                }
            })
            .collect::<Result<_, _>>()?;
        Ok(Self { names })
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    pub fn contains(&self, container: &str) -> bool {
        self.names.contains(container)
    }

    /// The named sidecars `spec` runs, as containers or init containers.
    pub fn carried_by<'s>(&self, spec: &'s PodSpec) -> BTreeSet<&'s str> {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .map(|c| c.name.as_str())
            .filter(|name| self.contains(name))
            .collect()
    }
}

fn is_dns_label(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-')
}

/// What a new pod of one template gets, from two dry-run answers: the foreign part of the
/// first, the fields where the two answers differ (ignored on both sides), and the digest of
/// the rest: the "revision" of the foreign sidecars for this template.
#[derive(Clone, Debug, PartialEq)]
pub struct Expected {
    part: ForeignPart,
    shape: TemplateShape,
    ignored: BTreeSet<String>,
    /// Names generated per admission (`kube-api-access-` for `kube-api-access-x7b2q`): the
    /// common start of the two answers' names, by the path of the ignored name.
    generated: BTreeMap<String, String>,
    revision: String,
}

/// A running pod's foreign part against its workload's [`Expected`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Judgement {
    /// The digest of the pod's foreign part, the ignored fields left out: the expected
    /// revision when nothing differs.
    pub revision: String,
    pub changes: Vec<ForeignChange>,
}

impl Judgement {
    pub fn is_current(&self) -> bool {
        self.changes.is_empty()
    }
}

impl Expected {
    /// From the template's spec and two answers of the API server to dry-run creates of it.
    pub fn from_answers(
        template: &PodSpec,
        first: &PodSpec,
        second: &PodSpec,
        names: &ForeignSidecars,
    ) -> Self {
        let shape = TemplateShape::of(template);
        let part = ForeignPart::of(first, &shape, names);
        let other = ForeignPart::of(second, &shape, names);
        let ignored = part.differing_paths(&other);
        let generated = ignored
            .iter()
            .filter(|path| path.ends_with(".name"))
            .filter_map(|path| {
                let (Some(Value::String(one)), Some(Value::String(two))) =
                    (part.leaf(path), other.leaf(path))
                else {
                    return None;
                };
                let common = one
                    .bytes()
                    .zip(two.bytes())
                    .take_while(|(a, b)| a == b)
                    .count();
                (common > 0).then(|| (path.clone(), one[..common].to_owned()))
            })
            .collect();
        let revision = digest(&part, &ignored);
        Self {
            part,
            shape,
            ignored,
            generated,
            revision,
        }
    }

    /// The digest of what a new pod gets (ignored fields left out): 12 hexadecimal digits,
    /// as our own sidecars' revisions.
    pub fn revision(&self) -> &str {
        &self.revision
    }

    /// The fields that differed between the two answers, in the form changes name them
    /// (`istio-proxy.volumeMounts[2].name`, `addedVolumes[0].name`).
    pub fn ignored(&self) -> &BTreeSet<String> {
        &self.ignored
    }

    /// The named sidecars a new pod gets.
    pub fn containers(&self) -> impl Iterator<Item = &str> {
        self.part.containers()
    }

    /// Whether a new pod of the template gets none of the named sidecars.
    pub fn is_empty(&self) -> bool {
        self.part.containers().next().is_none()
    }

    /// `pod` (a running pod of the template's workload) against what a new pod gets.
    pub fn judge(&self, pod: &PodSpec, names: &ForeignSidecars) -> Judgement {
        let running = ForeignPart::of(pod, &self.shape, names);
        let revision = digest(&running, &self.ignored);
        let changes = if revision == self.revision {
            Vec::new()
        } else {
            changes::between(&running, &self.part, &self.ignored, &self.generated)
        };
        Judgement { revision, changes }
    }
}

/// SHA-256 over the part's leaves (`path=value` lines in path order), the ignored ones left
/// out; the first 12 hexadecimal digits.
fn digest(part: &ForeignPart, ignored: &BTreeSet<String>) -> String {
    let mut hasher = Sha256::new();
    for (path, value) in part.leaves() {
        if ignored.contains(path) {
            continue;
        }
        hasher.update(path.as_bytes());
        hasher.update(b"=");
        hasher.update(value.to_string().as_bytes());
        hasher.update(b"\n");
    }
    let digest = hasher.finalize();
    digest
        .iter()
        .take(6)
        .map(|b| format!("{b:02x}"))
        .collect::<String>()
}

#[cfg(test)]
mod tests;
