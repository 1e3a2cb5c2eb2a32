//! The core's fixtures, and what the shell's own tests add to them.

pub(crate) use sidecar_injector_core::test_fixtures::*;

/// Polls `done` every 10 ms until it holds or `deadline` passes; how long it took.
pub(crate) async fn within(
    deadline: std::time::Duration,
    done: impl Fn() -> bool,
) -> Option<std::time::Duration> {
    let started = std::time::Instant::now();
    while started.elapsed() < deadline {
        if done() {
            return Some(started.elapsed());
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    None
}

/// A status ConfigMap holding `injectors` as its publications item, or none.
pub(crate) fn status_with_injectors(
    injectors: Option<&str>,
) -> k8s_openapi::api::core::v1::ConfigMap {
    k8s_openapi::api::core::v1::ConfigMap {
        data: injectors.map(|text| {
            [(
                crate::cluster::status::STATUS_INJECTORS_KEY.to_owned(),
                text.to_owned(),
            )]
            .into_iter()
            .collect()
        }),
        ..Default::default()
    }
}
