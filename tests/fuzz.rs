//! Mutation fuzzing of the admission path and the config parser, seeded by the corpora in
//! `fuzz/corpus/`, the admission fixtures and the shipped configs. A short pass runs in the test
//! command; `FUZZ_CASES=200000 cargo test --release --test fuzz -- --nocapture` runs longer.
//!
//! Properties: nothing panics; every review that is answered echoes its uid in a well-formed
//! reply; an injection's patch applies to the pod it was made for; a config that parses loads
//! and renders.
#![allow(clippy::too_many_lines)] // a test reads as one scenario

use std::path::Path;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use base64::Engine;
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::Value;
use sidecar_injector::admission::AdmissionResult;
use sidecar_injector::config::{LoadedSidecar, SidecarSet, parse_config};
use sidecar_injector::injection::InjectionSettings;
use sidecar_injector::serve::review;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn files(dirs: &[&str]) -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    for dir in dirs {
        let mut paths: Vec<_> = std::fs::read_dir(Path::new(ROOT).join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "json" || e == "yaml"))
            .collect();
        paths.sort();
        seeds.extend(paths.iter().map(|p| std::fs::read(p).unwrap()));
    }
    assert!(!seeds.is_empty(), "no seeds in {dirs:?}");
    seeds
}

fn admission_seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| files(&["tests/fixtures/admission", "fuzz/corpus/admission"]))
}

fn config_seeds() -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEEDS.get_or_init(|| files(&["config", "fuzz/corpus/config"]))
}

fn sidecars() -> &'static SidecarSet {
    static SET: OnceLock<SidecarSet> = OnceLock::new();
    SET.get_or_init(|| {
        let report = sidecar_injector::sources::directory::load_config_directory(
            &Path::new(ROOT).join("config"),
        )
        .unwrap();
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        report.sidecar_set()
    })
}

/// One edit of an input. Tokens are the characters the parsers branch on.
#[derive(Debug, Clone)]
enum Mutation {
    Flip { at: usize, bit: u8 },
    Insert { at: usize, token: &'static str },
    Delete { at: usize, len: usize },
    Repeat { at: usize, len: usize, times: usize },
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "[",
    "]",
    "\"",
    ",",
    ":",
    "\\",
    "\\u0000",
    "\\ud800",
    "null",
    "0",
    "-1e999",
    " ",
    "\n",
    "- ",
    ": ",
    "&a ",
    "*a",
    "!!",
    "#",
    "|",
    ">",
    "'",
    "\t",
    "\u{feff}",
    "\u{ff}",
    "logger:v1",
    "injector/request",
    "metrics-agent:v1,",
    "containers",
    "initContainers",
    "default-token-x",
    "env",
    "volumeMounts",
];

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 0u8..8).prop_map(|(at, bit)| Mutation::Flip { at, bit }),
        (any::<usize>(), proptest::sample::select(TOKENS))
            .prop_map(|(at, token)| Mutation::Insert { at, token }),
        (any::<usize>(), 1usize..64).prop_map(|(at, len)| Mutation::Delete { at, len }),
        (any::<usize>(), 1usize..32, 2usize..16).prop_map(|(at, len, times)| Mutation::Repeat {
            at,
            len,
            times
        }),
    ]
}

fn mutate(seed: &[u8], mutations: &[Mutation]) -> Vec<u8> {
    let mut input = seed.to_vec();
    for mutation in mutations {
        let at = |at: usize, len: usize| if len == 0 { 0 } else { at % (len + 1) };
        match *mutation {
            Mutation::Flip { at: position, bit } => {
                if !input.is_empty() {
                    let index = position % input.len();
                    input[index] ^= 1 << bit;
                }
            }
            Mutation::Insert {
                at: position,
                token,
            } => {
                let index = at(position, input.len());
                input.splice(index..index, token.bytes());
            }
            Mutation::Delete { at: position, len } => {
                let start = at(position, input.len());
                let end = (start + len).min(input.len());
                input.drain(start..end);
            }
            Mutation::Repeat {
                at: position,
                len,
                times,
            } => {
                let start = at(position, input.len());
                let end = (start + len).min(input.len());
                let piece = input[start..end].to_vec();
                for _ in 1..times {
                    input.splice(end..end, piece.iter().copied());
                }
            }
        }
    }
    input
}

fn config() -> Config {
    let cases = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    Config {
        cases,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..Config::default()
    }
}

static ADMISSION_RUNS: AtomicU64 = AtomicU64::new(0);
static CONFIG_RUNS: AtomicU64 = AtomicU64::new(0);

/// The properties of one answered review.
fn check_review(input: &[u8]) -> Result<(), TestCaseError> {
    let Ok(answer) = review(input, sidecars(), &InjectionSettings::default()) else {
        return Ok(());
    };
    let reply: Value = serde_json::from_slice(&answer.body)
        .map_err(|e| TestCaseError::fail(format!("the reply is not JSON: {e}")))?;
    prop_assert_eq!(reply["response"]["uid"].as_str(), Some(answer.uid.as_str()));
    prop_assert!(reply["response"]["allowed"].is_boolean());
    if answer.result == AdmissionResult::Injected {
        let patch = base64::engine::general_purpose::STANDARD
            .decode(reply["response"]["patch"].as_str().unwrap_or_default())
            .map_err(|e| TestCaseError::fail(format!("patch not base64: {e}")))?;
        let patch: json_patch::Patch = serde_json::from_slice(&patch)
            .map_err(|e| TestCaseError::fail(format!("patch not a JSON patch: {e}")))?;
        // Fields the webhook skips are not validated (a lone surrogate escape in one, say):
        // the apiserver only sends valid JSON, so the check needs a document it could send.
        let Ok(request) = serde_json::from_slice::<Value>(input) else {
            return Ok(());
        };
        let mut pod = request["request"]["object"].clone();
        json_patch::patch(&mut pod, &patch)
            .map_err(|e| TestCaseError::fail(format!("the patch does not apply: {e}")))?;
        let status = pod["metadata"]["annotations"]["injector/status"].as_str();
        prop_assert_eq!(status, Some("injected"));
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mutated_reviews_never_panic_and_every_answer_is_well_formed(
        seed in 0usize..64,
        mutations in proptest::collection::vec(mutation(), 0..6),
    ) {
        let seeds = admission_seeds();
        let input = mutate(&seeds[seed % seeds.len()], &mutations);
        ADMISSION_RUNS.fetch_add(1, Ordering::Relaxed);
        check_review(&input)?;
    }

    #[test]
    fn mutated_configs_never_panic_and_what_parses_loads(
        seed in 0usize..64,
        mutations in proptest::collection::vec(mutation(), 0..6),
    ) {
        let seeds = config_seeds();
        let input = mutate(&seeds[seed % seeds.len()], &mutations);
        CONFIG_RUNS.fetch_add(1, Ordering::Relaxed);
        let Ok(text) = std::str::from_utf8(&input) else {
            return Ok(());
        };
        if let Ok(parsed) = parse_config("fuzz.yaml", text) {
            let loaded = LoadedSidecar::new(parsed.config, "fuzz.yaml");
            prop_assert!(!loaded.stamp.is_empty());
        }
    }
}

#[test]
fn every_seed_is_answered_unmutated() {
    for seed in admission_seeds() {
        check_review(seed).unwrap();
    }
    let parsed = config_seeds()
        .iter()
        .filter(|s| parse_config("seed.yaml", std::str::from_utf8(s).unwrap()).is_ok())
        .count();
    assert!(parsed >= 4, "the shipped configs parse");
    eprintln!(
        "fuzz: {} admission and {} config executions so far in this process",
        ADMISSION_RUNS.load(Ordering::Relaxed),
        CONFIG_RUNS.load(Ordering::Relaxed)
    );
}
