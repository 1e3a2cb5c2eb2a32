//! Server-side dry-run creates: the object the API server would store, after every mutating
//! webhook and admission policy, with nothing stored.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};

/// `pod` created in `namespace` as a dry run: the pod as admission left it.
pub(crate) async fn create_pod(
    client: &kube::Client,
    namespace: &str,
    pod: &Pod,
) -> Result<Pod, kube::Error> {
    let params = PostParams {
        dry_run: true,
        field_manager: Some("sidecar-injector-check".to_owned()),
    };
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&params, pod)
        .await
}
