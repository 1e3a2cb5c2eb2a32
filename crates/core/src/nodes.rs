//! What the cluster's nodes can run, as far as injection cares: whether their kubelets start
//! native sidecars (`nativeSidecars: auto`). Pure: the shell lists and watches the Nodes and
//! hands each one's name and `status.nodeInfo.kubeletVersion` in.

use std::collections::BTreeMap;
use std::fmt;

/// The first kubelet minor that starts an init container with `restartPolicy: Always` as a
/// sidecar by default (the `SidecarContainers` feature, beta and on from 1.29, GA in 1.33).
pub const NATIVE_SIDECARS_SINCE: KubeletVersion = KubeletVersion {
    major: 1,
    minor: 29,
};

/// A kubelet's `major.minor`, read from what it reports (`v1.29.3`, `v1.30.1-eks-abc`,
/// `v1.28.5+k3s1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KubeletVersion {
    major: u32,
    minor: u32,
}

impl KubeletVersion {
    pub fn parse(reported: &str) -> Option<Self> {
        let text = reported.trim().trim_start_matches(['v', 'V']);
        let mut parts = text.splitn(3, '.');
        let major = parts.next()?.parse().ok()?;
        let minor: String = parts
            .next()?
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        Some(Self {
            major,
            minor: minor.parse().ok()?,
        })
    }

    pub fn runs_native_sidecars(self) -> bool {
        self >= NATIVE_SIDECARS_SINCE
    }
}

impl fmt::Display for KubeletVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// Every node's kubelet version, as last listed. Unknown until a first list is in: then
/// nothing is assumed of any node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeKubelets {
    /// `None` until the nodes were listed (or when they cannot be).
    listed: Option<BTreeMap<String, Option<KubeletVersion>>>,
    /// What every node together supports, for a pod not yet scheduled: kept as the nodes
    /// change, so that a review does not go over every node.
    unscheduled: NativeSupport,
}

/// Whether the nodes a pod may run on start native sidecars, and if not, why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NativeSupport {
    /// Its node does, or, before it is scheduled, every node does.
    Everywhere,
    /// Some nodes do, not all (`old` names one that does not).
    Somewhere { old: NodeVersion },
    /// None does (or its node does not).
    Nowhere { old: NodeVersion },
    /// The nodes are not known (not listed yet, or not allowed to be).
    #[default]
    Unknown,
}

/// A node and the kubelet version it reports (`None`: not readable).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeVersion {
    pub node: String,
    pub version: Option<KubeletVersion>,
}

impl fmt::Display for NodeVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.version {
            Some(version) => write!(
                f,
                "node {} runs kubelet {version}, before native sidecars ({NATIVE_SIDECARS_SINCE})",
                self.node
            ),
            None => write!(f, "node {} reports no kubelet version", self.node),
        }
    }
}

impl fmt::Display for NativeSupport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NativeSupport::Everywhere => write!(
                f,
                "every node's kubelet runs native sidecars ({NATIVE_SIDECARS_SINCE}+)"
            ),
            NativeSupport::Somewhere { old } | NativeSupport::Nowhere { old } => old.fmt(f),
            NativeSupport::Unknown => write!(f, "the nodes' kubelet versions are not known"),
        }
    }
}

impl NodeKubelets {
    /// The nodes as listed: name and reported kubelet version.
    pub fn listed<'a>(nodes: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let nodes: BTreeMap<_, _> = nodes
            .into_iter()
            .map(|(name, version)| (name.to_owned(), KubeletVersion::parse(version)))
            .collect();
        Self {
            unscheduled: every_node(&nodes),
            listed: Some(nodes),
        }
    }

    /// One node added or changed (after a first list).
    pub fn apply(&mut self, name: &str, version: &str) {
        let nodes = self.listed.get_or_insert_default();
        nodes.insert(name.to_owned(), KubeletVersion::parse(version));
        self.unscheduled = every_node(nodes);
    }

    pub fn delete(&mut self, name: &str) {
        if let Some(nodes) = &mut self.listed {
            nodes.remove(name);
            self.unscheduled = every_node(nodes);
        }
    }

    /// What the nodes of a pod on `node` (or not yet scheduled: `None`) support.
    pub fn native_support(&self, node: Option<&str>) -> NativeSupport {
        let (Some(nodes), Some(node)) = (&self.listed, node.filter(|n| !n.is_empty())) else {
            return self.unscheduled.clone();
        };
        match nodes.get_key_value(node) {
            Some((_, Some(v))) if v.runs_native_sidecars() => NativeSupport::Everywhere,
            Some(entry) => NativeSupport::Nowhere { old: old(entry) },
            None => NativeSupport::Unknown,
        }
    }
}

fn old((name, version): (&String, &Option<KubeletVersion>)) -> NodeVersion {
    NodeVersion {
        node: name.clone(),
        version: *version,
    }
}

/// What `nodes` together support: every one, some, none (naming one that does not).
fn every_node(nodes: &BTreeMap<String, Option<KubeletVersion>>) -> NativeSupport {
    let runs = |v: &Option<KubeletVersion>| v.is_some_and(KubeletVersion::runs_native_sidecars);
    let first_old = nodes.iter().find(|(_, v)| !runs(v)).map(old);
    match first_old {
        _ if nodes.is_empty() => NativeSupport::Unknown,
        None => NativeSupport::Everywhere,
        Some(old) if nodes.values().any(runs) => NativeSupport::Somewhere { old },
        Some(old) => NativeSupport::Nowhere { old },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_read_as_the_distributions_report_them() {
        for (reported, minor) in [
            ("v1.29.0", Some(29)),
            ("v1.36.3", Some(36)),
            ("v1.30.1-eks-e564799", Some(30)),
            ("v1.28.5+k3s1", Some(28)),
            ("1.33", Some(33)),
            ("v1.31+", Some(31)),
            ("", None),
            ("v1", None),
            ("vx.y", None),
        ] {
            assert_eq!(
                KubeletVersion::parse(reported).map(|v| v.minor),
                minor,
                "{reported}"
            );
        }
        assert!(
            KubeletVersion::parse("v1.29.0")
                .unwrap()
                .runs_native_sidecars()
        );
        assert!(
            !KubeletVersion::parse("v1.28.9")
                .unwrap()
                .runs_native_sidecars()
        );
        assert!(
            KubeletVersion::parse("v2.0.0")
                .unwrap()
                .runs_native_sidecars()
        );
    }

    #[test]
    fn a_pod_not_yet_scheduled_goes_by_every_node_and_a_scheduled_one_by_its_own() {
        assert_eq!(
            NodeKubelets::default().native_support(None),
            NativeSupport::Unknown
        );
        assert_eq!(
            NodeKubelets::listed([]).native_support(None),
            NativeSupport::Unknown,
            "no node: nothing to go by"
        );
        let new = NodeKubelets::listed([("a", "v1.33.1"), ("b", "v1.29.0")]);
        assert_eq!(new.native_support(None), NativeSupport::Everywhere);
        let mut mixed = new.clone();
        mixed.apply("old", "v1.28.4");
        let support = mixed.native_support(None);
        assert!(
            matches!(&support, NativeSupport::Somewhere { old } if old.node == "old"),
            "{support:?}"
        );
        assert_eq!(
            support.to_string(),
            "node old runs kubelet 1.28, before native sidecars (1.29)"
        );
        assert_eq!(mixed.native_support(Some("a")), NativeSupport::Everywhere);
        assert!(matches!(
            mixed.native_support(Some("old")),
            NativeSupport::Nowhere { .. }
        ));
        assert_eq!(
            mixed.native_support(Some("gone")),
            NativeSupport::Unknown,
            "a node not listed"
        );
        mixed.delete("old");
        assert_eq!(mixed.native_support(None), NativeSupport::Everywhere);
        let garbled = NodeKubelets::listed([("a", "v1.33.1"), ("x", "unknown")]);
        assert_eq!(
            garbled.native_support(None).to_string(),
            "node x reports no kubelet version"
        );
        assert!(matches!(
            NodeKubelets::listed([("old", "v1.27.0")]).native_support(None),
            NativeSupport::Nowhere { .. }
        ));
    }
}
