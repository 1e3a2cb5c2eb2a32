//! What `explain` reads from the cluster once for a live pod or workload: the configs and
//! what the webhook serves now, the revisions in force, the namespace's reach; and the answers
//! it builds from them.

use super::*;

/// What a live answer reads from the cluster whatever it is about: the configs as the running
/// injector serves them and the revisions in force.
pub(super) struct Live {
    pub(super) client: kube::Client,
    pub(super) keys: AnnotationKeys,
    /// The configs read here.
    pub(super) sidecars: SidecarSet,
    /// What the webhook injects now: the configs with the pins and holds of the running
    /// injector's campaign book.
    pub(super) served: SidecarSet,
    pub(super) published: Option<crate::cluster::status::Publication>,
    /// Why the configs could not be read here, if they could not.
    pub(super) configs_unread: ConfigsUnread,
    /// The injector's status ConfigMap, history and Lease.
    pub(super) state: crate::cluster::status::InjectorState,
    pub(super) namespace: String,
    /// What the webhook configuration reaches and the namespace's labels, when they can be
    /// read.
    pub(super) reach: Option<NamespaceReach>,
    /// Why the engine leaves out every pod of the namespace, as `drift` says it, if it does.
    pub(super) namespace_exclusion: Option<String>,
}

impl Live {
    pub(super) async fn read(args: &ExplainArgs) -> anyhow::Result<Self> {
        let OneShot {
            client,
            keys,
            sidecars,
            configs_unread,
            state,
        } = OneShot::connect(&args.cluster, "explain").await?;
        let namespace = args
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        let book = crate::cli::connect::book_of(&state)?;
        let served = crate::render::new_pods(book, &sidecars).served;
        let served = crate::cluster::nodes::for_the_nodes(&client, served).await;
        let injectors = crate::cli::connect::injectors_of(&state)?;
        let published = revisions_in_force(injectors, &args.cluster, &configs_unread)?;
        let reach = match args.cluster.webhook_configuration() {
            Some(name) => crate::cluster::list::namespace_reach(&client, &name, &namespace).await,
            None => None,
        };
        let namespace_exclusion = policy(args)
            .namespace_exclusion(&namespace)
            .or_else(|| reach.as_ref()?.namespace().err().map(|e| e.to_string()));
        Ok(Self {
            client,
            keys,
            sidecars,
            served,
            published,
            configs_unread,
            state,
            namespace,
            reach,
            namespace_exclusion,
        })
    }

    /// The webhook's decision on a pod (or template) in this namespace, explained.
    pub(super) fn injection(
        &self,
        args: &ExplainArgs,
        pod: &Value,
    ) -> anyhow::Result<InjectionExplanation> {
        let view = PodView::deserialize(pod).context("the pod template does not read")?;
        let decided = || {
            let explained = injection(
                &view,
                Some(pod),
                &self.namespace,
                &self.served,
                &settings(args),
            );
            match &self.configs_unread.0 {
                Some(why) => without_configs(
                    explained,
                    why,
                    self.published.as_ref().map(|p| &p.revisions),
                    &self.sidecars.manual_rollouts_with(
                        self.published
                            .as_ref()
                            .map_or(&BTreeSet::new(), |p| &p.manual),
                    ),
                ),
                None => explained,
            }
        };
        let Some(reach) = &self.reach else {
            return Ok(decided());
        };
        if let Err(why) = reach.namespace() {
            return Ok(crate::explain::not_sent(&self.namespace, why.to_string()));
        }
        let labels =
            BTreeMap::<String, String>::deserialize(&pod["metadata"]["labels"]).unwrap_or_default();
        Ok(match reach.pod(&labels) {
            Ok(selected_by) => crate::explain::sent(decided(), selected_by),
            Err(why) => crate::explain::not_sent_by_labels(why.to_string()),
        })
    }

    /// The drift of each sidecar a pod asks for, from its annotations: `excluded` when its
    /// namespace, its labels or its owner (`owner_exclusion`) has the engine leave it out.
    pub(super) fn drift(
        &self,
        pod: &ObjectMeta,
        owner_exclusion: Option<&str>,
    ) -> Vec<SidecarDrift> {
        let none = BTreeMap::new();
        let annotations = pod.annotations.as_ref().unwrap_or(&none);
        let state = PodState::read(annotations, &self.keys, Vec::new());
        let wanted = |sidecar: &str| -> Option<String> {
            match &self.published {
                Some(publication) => publication.revisions.get(sidecar).map(str::to_owned),
                None => sidecar
                    .parse()
                    .ok()
                    .and_then(|name| self.sidecars.get(&name))
                    .map(|s| s.revision.to_string()),
            }
        };
        annotations
            .get(&self.keys.request)
            .map(|request| {
                let by_labels = match (&self.namespace_exclusion, &self.reach) {
                    (None, Some(reach)) => reach
                        .pod(pod.labels.as_ref().unwrap_or(&none))
                        .err()
                        .map(|e| e.to_string()),
                    _ => None,
                };
                let exclusion = self
                    .namespace_exclusion
                    .as_deref()
                    .or(by_labels.as_deref())
                    .or(owner_exclusion);
                sidecar_drift(request, &state, wanted, exclusion)
            })
            .unwrap_or_default()
    }

    /// A pod's own state: injected, the revisions it carries, its containers.
    pub(super) fn pod_state(&self, pod: &Pod) -> PodState {
        let containers = pod
            .spec
            .as_ref()
            .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default();
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let mut state = PodState::read(&annotations, &self.keys, containers);
        state.native_sidecars = pod
            .spec
            .iter()
            .flat_map(|s| s.init_containers.iter().flatten())
            .filter(|c| crate::config::is_native_sidecar(c))
            .map(|c| c.name.clone())
            .collect();
        state
    }

    /// What the engine plans for the workload now, planned as `rollout` plans.
    pub(super) async fn rollout(
        &self,
        args: &ExplainArgs,
        workload: &WorkloadRef,
        drift: &[SidecarDrift],
    ) -> anyhow::Result<WorkloadAction> {
        // The engine plans nothing for pods it leaves out: no need to list the cluster to
        // say so.
        if drift.iter().all(|sidecar| sidecar.excluded.is_some()) {
            return Ok(workload_action(&RolloutPlan::default(), workload, drift));
        }
        let plan = plan_now(
            &self.client,
            &self.state,
            args,
            self.keys.clone(),
            &self.sidecars,
            self.published.clone(),
        )
        .await;
        match plan {
            Ok(plan) => Ok(match workload_action(&plan, workload, drift) {
                // This process has not baked it: the engine's bake is in the book it writes.
                WorkloadAction::Rolling { target, checks } if checks.is_empty() => {
                    let checks = self
                        .state
                        .book()
                        .map(|book| book.bake_checks(workload))
                        .unwrap_or_default();
                    WorkloadAction::Rolling { target, checks }
                }
                action => action,
            }),
            // The rest of the answer stands without it.
            Err(err) => match err.downcast::<ListError>() {
                Ok(refused @ ListError::Refused(_)) => Ok(WorkloadAction::Unplanned {
                    why: refused.to_string(),
                }),
                Ok(err) => Err(err.into()),
                Err(err) => Err(err),
            },
        }
    }

    pub(super) async fn read_pod(&self, name: &str) -> anyhow::Result<Pod> {
        crate::cluster::owners::read(&self.client, &self.namespace, name, WorkloadKind::Pod).await
    }

    /// A workload's pods (as metadata): counted by the worst state of the sidecars each asks
    /// for, with the state and drift of the first in the worst state, read in full.
    /// `owner_exclusion` says why the engine leaves them out, when their owner is why.
    pub(super) async fn pods_of(
        &self,
        mut pods: Vec<ObjectMeta>,
        owner_exclusion: Option<&str>,
    ) -> anyhow::Result<(WorkloadPods, Option<PodState>, Vec<SidecarDrift>)> {
        pods.sort_by(|a, b| a.name.cmp(&b.name));
        let drifts: Vec<(String, Vec<SidecarDrift>)> = pods
            .iter()
            .map(|pod| {
                let name = pod.name.clone().unwrap_or_default();
                (name, self.drift(pod, owner_exclusion))
            })
            .collect();
        let (summary, shown) = WorkloadPods::of(&drifts);
        Ok(match shown {
            // Read in full for its containers, which the metadata list leaves out.
            Some(index) => (
                summary,
                Some(self.pod_state(&self.read_pod(&drifts[index].0).await?)),
                drifts[index].1.clone(),
            ),
            None => (summary, None, Vec::new()),
        })
    }
}
