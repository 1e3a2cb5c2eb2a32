//! What a container of the pod holds already (env names, mount names and paths), built on
//! first use: injection adds only what is missing.

use std::borrow::Cow;

use foldhash::{HashSet, HashSetExt};

use super::super::pod::EnvList;

/// The env names, mount names and mount paths a container holds.
pub(super) struct Presence<'a> {
    pub(super) env: EnvNames<'a>,
    pub(super) mount_names: HashSet<&'a str>,
    pub(super) mount_paths: HashSet<&'a str>,
}

impl<'a> Presence<'a> {
    /// Sized once: growing a set of a hundred names rehashes it six times.
    pub(super) fn new(env: EnvNames<'a>, mounts: usize) -> Self {
        Self {
            env,
            mount_names: HashSet::with_capacity(mounts),
            mount_paths: HashSet::with_capacity(mounts),
        }
    }

    pub(super) fn insert_mount(&mut self, name: &'a str, path: &'a str) {
        self.mount_names.insert(name);
        self.mount_paths.insert(path);
    }
}

/// The env names a container holds. A pod container's list stays unread while searching its
/// text answers: when the text holds no escapes, every name in it is written as it reads, so
/// a name found nowhere between quotes is not taken. The list is read at the first search
/// that finds the name, or once searching (a scan of the whole text each time) would cost
/// more than reading it.
pub(super) struct EnvNames<'a> {
    pub(super) unread: Option<&'a EnvList>,
    searches_left: u8,
    known: HashSet<Cow<'a, str>>,
}

/// Searches of a list's text before it is read instead: a search is several times cheaper
/// than reading the list.
pub(super) const ENV_SEARCHES: u8 = 8;

impl<'a> EnvNames<'a> {
    pub(super) fn of_pod(list: Option<&'a EnvList>) -> Self {
        let mut names = Self {
            unread: list,
            searches_left: ENV_SEARCHES,
            known: HashSet::new(),
        };
        if list.is_some_and(|list| memchr::memchr(b'\\', list.text().as_bytes()).is_some()) {
            names.read();
        }
        names
    }

    pub(super) fn of_names(names: impl Iterator<Item = &'a str>) -> Self {
        Self {
            unread: None,
            searches_left: 0,
            known: names.map(Cow::Borrowed).collect(),
        }
    }

    fn read(&mut self) {
        if let Some(list) = self.unread.take() {
            self.known.extend(list.names());
        }
    }

    /// Records `name`; true when the container had no entry of that name.
    pub(super) fn insert(&mut self, name: &'a str) -> bool {
        if self.known.contains(name) {
            return false;
        }
        if let Some(list) = self.unread {
            if self.searches_left > 0 && !quoted_in(list.text(), name) {
                self.searches_left -= 1;
                return self.known.insert(Cow::Borrowed(name));
            }
            self.read();
        }
        self.known.insert(Cow::Borrowed(name))
    }
}

/// Whether `name` occurs in `text` between two quotes.
fn quoted_in(text: &str, name: &str) -> bool {
    let text = text.as_bytes();
    memchr::memmem::find_iter(text, name.as_bytes())
        .any(|at| at > 0 && text[at - 1] == b'"' && text.get(at + name.len()) == Some(&b'"'))
}
