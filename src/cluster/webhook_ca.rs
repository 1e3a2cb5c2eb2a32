//! Keeps the `caBundle` of the injector's own MutatingWebhookConfiguration equal to the CA
//! that signed its serving certificate (`serve --webhook-configuration NAME --ca-bundle-file
//! PATH`), as cert-manager's CA injector does. The manifests then carry no `caBundle` field,
//! so `kubectl apply -k deploy/` again (an upgrade) never resets it; and should anything blank
//! it, the watch sees the change and it is set again.

use std::path::PathBuf;

use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::sync::watch as signal;
use tracing::{info, warn};

use super::watch::{Change, watch};

/// A strategic merge patch (webhooks merge by name) setting every webhook's caBundle to
/// `bundle`; `None` when they all carry it already.
pub fn ca_bundle_patch(config: &MutatingWebhookConfiguration, bundle: &[u8]) -> Option<Value> {
    let stale: Vec<Value> = config
        .webhooks
        .iter()
        .flatten()
        .filter(|w| w.client_config.ca_bundle.as_ref().map(|b| b.0.as_slice()) != Some(bundle))
        .map(|w| {
            json!({
                "name": w.name,
                "clientConfig": {"caBundle": k8s_openapi::ByteString(bundle.to_vec())},
            })
        })
        .collect();
    (!stale.is_empty()).then(|| json!({"webhooks": stale}))
}

/// Why a CA bundle file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum CaBundleError {
    #[error("cannot read --ca-bundle-file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("--ca-bundle-file {path} holds no PEM certificate")]
    NotPem { path: String },
}

async fn read_bundle(path: &PathBuf) -> Result<Vec<u8>, CaBundleError> {
    let display = path.display().to_string();
    let bundle = tokio::fs::read(path)
        .await
        .map_err(|source| CaBundleError::Read {
            path: display.clone(),
            source,
        })?;
    if !String::from_utf8_lossy(&bundle).contains("-----BEGIN CERTIFICATE-----") {
        return Err(CaBundleError::NotPem { path: display });
    }
    Ok(bundle)
}

/// Watches the webhook configuration `name` and sets its caBundle from `ca_file` whenever it
/// differs: at start, when the configuration changes, and when `reloaded` says the serving
/// certificate changed. A bad or missing file leaves the configuration as it is.
pub async fn run(
    client: Client,
    name: String,
    ca_file: PathBuf,
    mut reloaded: signal::Receiver<()>,
) {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client);
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut changes = watch(api.clone(), config, "webhook configuration", Some);
    let mut current: Option<MutatingWebhookConfiguration> = None;
    loop {
        tokio::select! {
            change = changes.next() => match change {
                Some(Change::Listed(mut listed)) => current = listed.pop(),
                Some(Change::Applied(config)) => current = Some(config),
                Some(Change::Deleted(_)) => current = None,
                None => return,
            },
            result = reloaded.changed() => if result.is_err() { return },
        }
        let Some(config) = &current else {
            continue;
        };
        let bundle = match read_bundle(&ca_file).await {
            Ok(bundle) => bundle,
            Err(err) => {
                warn!("the webhook configuration's caBundle is left as it is: {err}");
                continue;
            }
        };
        let Some(patch) = ca_bundle_patch(config, &bundle) else {
            continue;
        };
        match api
            .patch(&name, &PatchParams::default(), &Patch::Strategic(patch))
            .await
        {
            Ok(_) => info!(
                webhook_configuration = name,
                "set the caBundle of the webhook configuration"
            ),
            Err(err) => warn!(
                webhook_configuration = name,
                "cannot set the caBundle of the webhook configuration: {}",
                super::error_text(&err)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(bundles: &[Option<&[u8]>]) -> MutatingWebhookConfiguration {
        let webhooks: Vec<Value> = bundles
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let mut client = json!({"service": {"name": "s", "namespace": "n"}});
                if let Some(b) = b {
                    client["caBundle"] =
                        serde_json::to_value(k8s_openapi::ByteString(b.to_vec())).unwrap();
                }
                json!({"name": format!("w{i}.example.org"), "clientConfig": client,
                       "sideEffects": "None", "admissionReviewVersions": ["v1"]})
            })
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "x"}, "webhooks": webhooks})).unwrap()
    }

    #[test]
    fn only_webhooks_without_the_bundle_are_patched_by_name() {
        let ca: &[u8] = b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        assert_eq!(ca_bundle_patch(&config(&[Some(ca), Some(ca)]), ca), None);
        let patch = ca_bundle_patch(&config(&[Some(ca), None, Some(b"old")]), ca).unwrap();
        let names: Vec<&str> = patch["webhooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|w| w["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["w1.example.org", "w2.example.org"]);
        let encoded = patch["webhooks"][0]["clientConfig"]["caBundle"]
            .as_str()
            .unwrap();
        let decoded: k8s_openapi::ByteString =
            serde_json::from_value(Value::String(encoded.to_owned())).unwrap();
        assert_eq!(decoded.0, ca);
    }
}
