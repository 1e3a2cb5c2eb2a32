//! Events: one recorder for the process, and limits on their text, shared by everything that
//! records them.

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};

/// The recorder every Event of this process goes through: controller `sidecar-injector`, and
/// the pod's name as the instance when it runs in one.
pub(crate) fn recorder(client: Client, instance: Option<String>) -> Recorder {
    Recorder::new(
        client,
        Reporter {
            controller: "sidecar-injector".into(),
            instance,
        },
    )
}

/// The API server rejects an Event whose note is over 1 KiB (events.k8s.io/v1 validation).
pub(crate) const EVENT_NOTE_LIMIT: usize = 1000;
/// events.k8s.io caps `action` at 128 characters.
pub(crate) const EVENT_ACTION_LIMIT: usize = 128;

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
pub(crate) fn prefix_within(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// `text` within `limit` bytes, marked with `...` when cut.
pub(crate) fn shortened(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_owned();
    }
    format!("{}...", prefix_within(text, limit - 3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_are_cut_on_a_character_boundary() {
        assert_eq!(shortened("short", 10), "short");
        let long = "é".repeat(600);
        let cut = shortened(&long, EVENT_NOTE_LIMIT);
        assert!(cut.len() <= EVENT_NOTE_LIMIT);
        assert!(cut.ends_with("..."));
        assert_eq!(prefix_within(&long, 999).len(), 998);
    }
}
