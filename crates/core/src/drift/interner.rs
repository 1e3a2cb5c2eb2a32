//! Strings and label sets the index keeps once, shared by every pod and workload entry that
//! holds them: a pod event re-reads the same namespace, owner and labels again and again.

// A fast hasher with a per-process random seed: classification hashes a few strings per pod,
// and SipHash made up most of its time.
use foldhash::HashSet;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A pod's labels, sorted by key and interned as a whole: the pods of one ReplicaSet share
/// one set. Kept for the webhook's objectSelector, which may change at any time.
pub type Labels = Arc<[(Arc<str>, Arc<str>)]>;

/// Namespaces, owner names, annotation values and labels, each stored once, and pods' label
/// sets, each stored once.
#[derive(Debug, Default)]
pub struct Interner {
    strings: HashSet<Arc<str>>,
    label_sets: HashSet<Labels>,
}

impl Interner {
    pub fn text(&mut self, text: &str) -> Arc<str> {
        intern(&mut self.strings, text)
    }

    /// A pod's labels (sorted by key, as the map keeps them), shared with every pod labelled
    /// alike. `before` (what the pod had) is taken as it is when equal: most pod events
    /// change its status only, and comparing costs less than interning.
    pub fn labels(
        &mut self,
        labels: Option<&BTreeMap<String, String>>,
        before: Option<&Labels>,
    ) -> Labels {
        if let Some(before) = before {
            let mut now = labels.into_iter().flatten();
            let same = before.len() == labels.map_or(0, BTreeMap::len)
                && before.iter().all(|(key, value)| {
                    now.next()
                        .is_some_and(|(k, v)| k == key.as_ref() && v == value.as_ref())
                });
            if same {
                return before.clone();
            }
        }
        let pairs: Vec<(Arc<str>, Arc<str>)> = labels
            .into_iter()
            .flatten()
            .map(|(key, value)| (self.text(key), self.text(value)))
            .collect();
        match self.label_sets.get(pairs.as_slice()) {
            Some(shared) => shared.clone(),
            None => {
                let shared: Labels = pairs.into();
                self.label_sets.insert(shared.clone());
                shared
            }
        }
    }

    /// Drops what no entry refers to any more: label sets first, which hold strings.
    pub(super) fn prune(&mut self) {
        self.label_sets.retain(|set| Arc::strong_count(set) > 1);
        self.strings.retain(|text| Arc::strong_count(text) > 1);
    }

    /// How many distinct strings are kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.strings.len()
    }

    /// How many distinct label sets are kept.
    #[cfg(test)]
    pub(super) fn label_sets(&self) -> usize {
        self.label_sets.len()
    }
}

/// `text`, shared with every earlier use of the same text in `interned`.
pub(super) fn intern(interned: &mut HashSet<Arc<str>>, text: &str) -> Arc<str> {
    match interned.get(text) {
        Some(shared) => shared.clone(),
        None => {
            let shared: Arc<str> = text.into();
            interned.insert(shared.clone());
            shared
        }
    }
}
