//! `serve --injection=policy`: the admission policies kept equal to the configs in force (the
//! sources' configs with the campaign book's holds and pins), written by server-side apply
//! under a field manager of our own. The rendering is [`crate::policy::render`]'s; this only
//! applies it, and says what is in force once the API server has it.
//!
//! Every replica writes: an apply of the same objects changes nothing, so replicas that see
//! the same configs agree, and one that lags behind writes the newer set once it sees it.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::Value;
use tokio::sync::watch;
use tracing::{error, info, warn};

use super::status::book_or_warn;
use crate::annotations::AnnotationKeys;
use crate::config::SidecarSet;
use crate::injection::MissingSidecarPolicy;
use crate::metrics::Metrics;
use crate::policy::{PolicyError, PolicySettings, render};
use crate::rollout::CampaignBook;
use crate::serve::http::{Readiness, ReadinessStep};

/// Who wrote the policies, in their `managedFields`.
pub(crate) const FIELD_MANAGER: &str = "sidecar-injector";
/// How often the policies are applied again when nothing changed, so that one deleted or
/// edited by hand comes back.
const RESYNC: Duration = Duration::from_secs(60);
/// How soon a write the API server refused is tried again.
const RETRY: Duration = Duration::from_secs(5);

/// What the policies follow of `serve`'s settings.
#[derive(Clone, Debug)]
pub(crate) struct PolicyWriterOptions {
    pub(crate) keys: AnnotationKeys,
    pub(crate) ignored_namespaces: BTreeSet<String>,
    pub(crate) on_missing_sidecar: MissingSidecarPolicy,
    /// The policies' and bindings' name.
    pub(crate) name: String,
    pub(crate) namespace_selector: Option<LabelSelector>,
}

/// Starts the writer: each change of the configs or of the campaign book is rendered (the
/// book's pins and holds applied to the configs, as the webhook serves them) and applied
/// when it changes the policies (and every [`RESYNC`] in any case). A set the policies cannot
/// express (or too large) is never written: the policies in force stay, and the reason is
/// logged and counted. Returns the configs whose policies the API server enforces (empty
/// until the first write): what the engine rolls out and replicas publish, so that no
/// restart runs ahead of the policies. Nothing is written before `readiness` says every
/// source is loaded; it learns of the first write.
pub(crate) fn spawn(
    client: kube::Client,
    options: PolicyWriterOptions,
    mut sources: watch::Receiver<Arc<SidecarSet>>,
    mut status: Option<watch::Receiver<Option<ConfigMap>>>,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> watch::Receiver<Arc<SidecarSet>> {
    let (in_force_tx, in_force) = watch::channel(Arc::new(SidecarSet::default()));
    let mut writer = Writer {
        client,
        options,
        metrics,
        applied: None,
        refused_said: None,
    };
    tokio::spawn(async move {
        let mut book = CampaignBook::default();
        let mut malformed = None;
        let mut steps = readiness.watch();
        // The book's holds and pins are part of what is written: not before its first read.
        if let Some(status) = &mut status
            && status.changed().await.is_err()
        {
            return;
        }
        loop {
            // Nothing is written before every source is loaded: a replica starting with the
            // directory's configs alone would replace the policies in force with fewer ones,
            // and the validating policy would deny every pod asking for the others.
            if !(readiness.done(ReadinessStep::ConfigsLoaded)
                && readiness.done(ReadinessStep::ConfigMapsListed))
            {
                if steps.changed().await.is_err() {
                    break;
                }
                continue;
            }
            let set = sources.borrow_and_update().clone();
            if let Some(status) = &mut status
                && let Some(read) =
                    book_or_warn(status.borrow_and_update().as_ref(), &mut malformed)
            {
                book = read.unwrap_or_default();
            }
            let served = crate::render::new_pods(&book, &set).served;
            let wait = match writer.write(&served).await {
                Ok(()) => {
                    in_force_tx.send_replace(set);
                    readiness.mark(ReadinessStep::PoliciesWritten);
                    RESYNC
                }
                Err(wait) => wait,
            };
            tokio::select! {
                changed = sources.changed() => if changed.is_err() { break },
                Some(changed) = async {
                    match &mut status {
                        Some(status) => Some(status.changed().await),
                        None => None,
                    }
                } => if changed.is_err() { break },
                () = tokio::time::sleep(wait) => {}
            }
        }
    });
    in_force
}

/// How long after it took a changed policy the API server may still admit pods with the one
/// before: its admission plugin recompiles changed policies once a second, and the compile of
/// a large policy on a busy API server took over 3 s in our tests. No API says when it is
/// done, so this is an allowance, not a proof: the engine's settle comes on top of it.
const ENFORCED_AFTER: Duration = Duration::from_secs(5);

struct Writer {
    client: kube::Client,
    options: PolicyWriterOptions,
    metrics: Arc<Metrics>,
    /// The objects last applied, and when.
    applied: Option<(Vec<Value>, tokio::time::Instant)>,
    refused_said: Option<String>,
}

impl Writer {
    /// Makes the policies say `set`, once the API server enforces them; or how soon to try
    /// again.
    async fn write(&mut self, set: &SidecarSet) -> Result<(), Duration> {
        let options = &self.options;
        let settings = PolicySettings {
            keys: &options.keys,
            ignored_namespaces: &options.ignored_namespaces,
            on_missing_sidecar: options.on_missing_sidecar,
            name: &options.name,
            namespace_selector: options.namespace_selector.as_ref(),
        };
        let objects = match render(set, &settings) {
            Ok(objects) => objects,
            Err(refused) => {
                let why = refusal(&refused);
                if self.refused_said.as_ref() != Some(&why) {
                    error!(policy = %options.name, "the policies in force stay: {why}");
                    self.refused_said = Some(why);
                }
                self.metrics.record_policy_write(false);
                return Err(RESYNC);
            }
        };
        self.refused_said = None;
        let unchanged = self
            .applied
            .as_ref()
            .is_some_and(|(last, _)| *last == objects);
        if unchanged
            && self
                .applied
                .as_ref()
                .is_some_and(|(_, at)| at.elapsed() < RESYNC)
        {
            return Ok(());
        }
        if let Err(err) = apply(&self.client, &objects).await {
            self.metrics.record_policy_write(false);
            warn!(policy = %options.name, "cannot apply the admission policies, trying again in {RETRY:?}: {err}");
            return Err(RETRY);
        }
        self.metrics.record_policy_write(true);
        if !unchanged {
            tokio::time::sleep(ENFORCED_AFTER).await;
            info!(policy = %options.name, sidecars = set.iter().count(), "admission policies applied");
        }
        self.applied = Some((objects, tokio::time::Instant::now()));
        Ok(())
    }
}

/// `--injection=policy` on an API server that does not serve MutatingAdmissionPolicy
/// (admissionregistration.k8s.io/v1, Kubernetes 1.36+) would retry its writes for ever: said
/// at start instead. A server that cannot be asked now is not held against it.
pub(crate) async fn check_served(client: &kube::Client) -> anyhow::Result<()> {
    let group = "admissionregistration.k8s.io/v1";
    let Ok(resources) = client.list_api_group_resources(group).await else {
        return Ok(());
    };
    if resources
        .resources
        .iter()
        .any(|r| r.kind == "MutatingAdmissionPolicy")
    {
        return Ok(());
    }
    let version = client
        .apiserver_version()
        .await
        .map_or_else(|_| "an older release".to_owned(), |v| v.git_version);
    anyhow::bail!(
        "--injection=policy needs an API server that serves MutatingAdmissionPolicy ({group}, Kubernetes 1.36 or later), and this one ({version}) does not: run with --injection=webhook"
    )
}

/// What is logged when `refused` keeps the policies as they are.
fn refusal(refused: &PolicyError) -> String {
    match refused {
        PolicyError::Refused(each) => {
            let each: Vec<String> = each.iter().map(ToString::to_string).collect();
            format!(
                "{refused}: {} (such a config is injected by the webhook, --injection=webhook)",
                each.join("; ")
            )
        }
        too_large => too_large.to_string(),
    }
}

/// Applies `objects` in their order (each policy before its binding).
async fn apply(client: &kube::Client, objects: &[Value]) -> Result<(), kube::Error> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind));
        api.patch(name, &params, &Patch::Apply(object)).await?;
    }
    Ok(())
}

/// The API resource of one of the four admissionregistration.k8s.io/v1 kinds rendered.
fn resource(kind: &str) -> ApiResource {
    let lower = kind.to_ascii_lowercase();
    let plural = match lower.strip_suffix('y') {
        Some(stem) => format!("{stem}ies"),
        None => format!("{lower}s"),
    };
    ApiResource {
        group: "admissionregistration.k8s.io".to_owned(),
        version: "v1".to_owned(),
        api_version: "admissionregistration.k8s.io/v1".to_owned(),
        kind: kind.to_owned(),
        plural,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn each_rendered_kind_is_written_to_its_plural() {
        let plural = |kind: &str| super::resource(kind).plural;
        assert_eq!(
            plural("MutatingAdmissionPolicy"),
            "mutatingadmissionpolicies"
        );
        assert_eq!(
            plural("MutatingAdmissionPolicyBinding"),
            "mutatingadmissionpolicybindings"
        );
        assert_eq!(
            plural("ValidatingAdmissionPolicy"),
            "validatingadmissionpolicies"
        );
    }
}
