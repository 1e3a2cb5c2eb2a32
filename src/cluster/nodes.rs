//! The nodes' kubelet versions, for `nativeSidecars: auto`: watched by `serve`, listed once by
//! the one-shot commands. Only the name and `status.nodeInfo.kubeletVersion` of a Node are
//! kept.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use tokio::sync::watch as signal;

use super::watch::{Change, watch};
use crate::config::SidecarSet;
use crate::nodes::NodeKubelets;

/// A Node cut down to what injection needs: its name and reported kubelet version.
type NodeVersion = (String, String);

fn project(node: Node) -> Option<NodeVersion> {
    let version = node
        .status
        .and_then(|s| s.node_info)
        .map(|i| i.kubelet_version)
        .unwrap_or_default();
    Some((node.metadata.name?, version))
}

fn of_listed(listed: &[NodeVersion]) -> NodeKubelets {
    NodeKubelets::listed(listed.iter().map(|(n, v)| (n.as_str(), v.as_str())))
}

/// The nodes as they change; unknown (every `auto` config injected classic) until the first
/// list succeeds, and for as long as nodes may not be listed. A node's status is written often
/// (heartbeats): only a change of some kubelet version is published.
pub(crate) fn watch_nodes(client: Client) -> signal::Receiver<Arc<NodeKubelets>> {
    let (publish, receive) = signal::channel(Arc::new(NodeKubelets::default()));
    let api: Api<Node> = Api::all(client);
    tokio::spawn(async move {
        let mut changes = watch(api, watcher::Config::default(), "node", project);
        let mut nodes = NodeKubelets::default();
        while let Some(change) = changes.next().await {
            match change {
                Change::Listed(listed) => nodes = of_listed(&listed),
                Change::Applied((name, version)) => nodes.apply(&name, &version),
                Change::Deleted((name, _)) => nodes.delete(&name),
            }
            publish.send_if_modified(|current| {
                let changed = **current != nodes;
                if changed {
                    *current = Arc::new(nodes.clone());
                }
                changed
            });
        }
    });
    receive
}

/// `served` as it changes, each set injecting for the nodes as `nodes` last said.
pub(crate) fn served_for_nodes(
    mut served: signal::Receiver<Arc<SidecarSet>>,
    mut nodes: signal::Receiver<Arc<NodeKubelets>>,
) -> signal::Receiver<Arc<SidecarSet>> {
    let combine = |served: &signal::Receiver<Arc<SidecarSet>>,
                   nodes: &signal::Receiver<Arc<NodeKubelets>>| {
        Arc::new(served.borrow().with_nodes(nodes.borrow().clone()))
    };
    let (publish, receive) = signal::channel(combine(&served, &nodes));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                changed = served.changed() => if changed.is_err() { break },
                changed = nodes.changed() => if changed.is_err() { break },
            }
            publish.send_replace(combine(&served, &nodes));
        }
    });
    receive
}

/// The nodes, listed once for a one-shot command; unknown (with why, for the user) when they
/// may not be listed.
pub(crate) async fn list_nodes(client: &Client) -> Result<NodeKubelets, kube::Error> {
    let api: Api<Node> = Api::all(client.clone());
    let mut listed = Vec::new();
    let mut params = ListParams::default().limit(500);
    loop {
        let page = api.list(&params).await?;
        listed.extend(page.items.into_iter().filter_map(project));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    Ok(of_listed(&listed))
}

/// `sidecars` for the cluster's nodes, when a config chooses its form by them
/// (`nativeSidecars: auto`): listed once; a refusal is said, and leaves them unknown (those
/// configs judged classic), as the webhook does while it cannot list them.
pub(crate) async fn for_the_nodes(client: &Client, sidecars: SidecarSet) -> SidecarSet {
    let by_nodes = sidecars
        .iter()
        .any(|s| s.config.native_sidecars() == crate::config::NativeSidecars::Auto);
    if !by_nodes {
        return sidecars;
    }
    match list_nodes(client).await {
        Ok(nodes) => sidecars.with_nodes(std::sync::Arc::new(nodes)),
        Err(err) => {
            crate::telemetry::notice(
                tracing::Level::WARN,
                &format!(
                    "cannot list the nodes, so `nativeSidecars: auto` configs are judged classic, as the webhook injects them while it cannot list nodes either: {}",
                    crate::cluster::error_text(&err)
                ),
                &[],
            );
            sidecars
        }
    }
}
