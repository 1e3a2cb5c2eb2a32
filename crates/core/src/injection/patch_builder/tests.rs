use super::presence::ENV_SEARCHES;
use super::*;
use crate::injection::pod::EnvList;

fn list(text: &str) -> EnvList {
    serde_json::from_str(text).expect("an env list")
}

#[test]
fn a_name_is_taken_only_where_an_entry_bears_it() {
    // "B" and "AB" occur in the text, but no entry is named either.
    let env = list(r#"[{"name":"A","value":"B"},{"name":"AB","value":"x"}]"#);
    let mut names = EnvNames::of_pod(Some(&env));
    assert!(!names.insert("A"));
    assert!(names.insert("B"));
    assert!(!names.insert("B"), "a name added once is taken");
    assert!(names.insert("ABC"));
    assert!(!names.insert("AB"));
    assert!(names.insert(""));
}

#[test]
fn a_list_with_escapes_is_read_as_it_reads_not_as_written() {
    let env = list(r#"[{"name":"LOG\u005fENDPOINT"},{"name":"say \"hi\""}]"#);
    let mut names = EnvNames::of_pod(Some(&env));
    assert!(
        names.unread.is_none(),
        "escapes make searching the text unsound"
    );
    assert!(!names.insert("LOG_ENDPOINT"));
    assert!(!names.insert("say \"hi\""));
    assert!(names.insert("say"));
}

#[test]
fn after_enough_searches_the_list_is_read_once() {
    let text = serde_json::to_string(
        &(0..20)
            .map(|i| serde_json::json!({"name": format!("N{i}")}))
            .collect::<Vec<_>>(),
    )
    .unwrap();
    let env = list(&text);
    let mut names = EnvNames::of_pod(Some(&env));
    for i in 0..ENV_SEARCHES {
        assert!(names.insert(["X", &i.to_string()].concat().leak()));
        assert!(names.unread.is_some(), "searched, not read, after {i}");
    }
    assert!(names.insert("X-last"));
    assert!(names.unread.is_none());
    assert!(!names.insert("N7"));
    assert!(!names.insert("X3"));
}

#[test]
fn entries_that_do_not_read_as_named_name_nothing() {
    let env = list(r#"[1, {"value":"A"}, {"name": "A", "value": 2, "name2": 3}]"#);
    let mut names = EnvNames::of_pod(Some(&env));
    // The search finds "A" and reads the list, which does not read as named entries.
    assert!(names.insert("A"));
    assert!(names.unread.is_none());
    let mut none = EnvNames::of_pod(None);
    assert!(none.insert("A"));
    assert!(!none.insert("A"));
}
