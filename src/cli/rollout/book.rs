//! The book commands of `rollout`: `--resume`, `--promote`, `--unpin`, `--release-hold` and
//! `--to`, each an edit of the campaign book the core decides, written into the status
//! ConfigMap.

use super::*;

/// `--resume`: the paused campaigns resumed in the status ConfigMap, one line each.
pub(super) async fn resume_campaigns(
    client: &kube::Client,
    namespace: &str,
    identity: &str,
) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let resumed = crate::cluster::status::resume_paused(&api, namespace, identity).await?;
    if resumed.is_empty() {
        notice(Level::INFO, "no paused campaign to resume", &[]);
    }
    for campaign in &resumed {
        notice(
            Level::INFO,
            &format!(
                "resumed the campaign of {} (revision {}): its earlier failures no longer count",
                campaign.sidecar, campaign.revision
            ),
            &[
                ("sidecar", &campaign.sidecar),
                ("revision", &campaign.revision),
            ],
        );
    }
    Ok(())
}

/// `--unpin`, `--release-hold` and `--to`: written into the status ConfigMap. Returns the exit
/// status when nothing else is left to do here (a `serve --rollout=auto` acts on a pin).
pub(super) async fn overrides(
    args: &RolloutArgs,
    one_shot: &OneShot,
    identity: &str,
    holder: Option<&LeaseHolder>,
) -> anyhow::Result<Option<ExitCode>> {
    let namespace = &args.cluster.injector_namespace;
    let client = &one_shot.client;
    if let Some(sidecar) = &args.unpin {
        edit_overrides(client, namespace, Override::Unpin(sidecar)).await?;
        return Ok(Some(ExitCode::SUCCESS));
    }
    if let Some(sidecar) = &args.release_hold {
        edit_overrides(client, namespace, Override::ReleaseHold(sidecar)).await?;
        return Ok(Some(ExitCode::SUCCESS));
    }
    if let Some(spec) = &args.promote {
        promote(client, namespace, spec, identity).await?;
        return Ok(Some(ExitCode::SUCCESS));
    }
    if let Some(spec) = &args.to {
        pin_revision(args, spec, one_shot, identity).await?;
        if let Some(holder) = holder.filter(|h| h.restarts()) {
            notice(
                Level::INFO,
                &format!(
                    "{} holds the rollout Lease (serve --rollout=auto): every replica injects the pinned revision and it rolls it out at its next plan (`sidecar-injector drift` follows it); this run restarts nothing",
                    holder.name
                ),
                &[("holder", &holder.name)],
            );
            return Ok(Some(ExitCode::SUCCESS));
        }
    }
    Ok(None)
}

/// `--promote SIDECAR[=REVISION]`: the sidecar, and the revision when one is named.
pub(super) fn promotion_spec(spec: &str) -> anyhow::Result<(String, Option<String>)> {
    let (raw, named) = match spec.split_once('=') {
        Some((sidecar, revision)) => (sidecar, Some(revision.trim().to_owned())),
        None => (spec, None),
    };
    let sidecar = crate::name::SidecarName::parse(raw)
        .with_context(|| format!("--promote {spec:?}: invalid sidecar name {raw:?}"))?
        .to_string();
    anyhow::ensure!(
        named.as_deref() != Some(""),
        "--promote {spec:?}: no revision after '='"
    );
    Ok((sidecar, named))
}

/// `--promote SIDECAR[=REVISION]`: an approval written into the status ConfigMap, where the
/// Lease holder adopts it and starts the revision's campaign.
async fn promote(
    client: &kube::Client,
    namespace: &str,
    spec: &str,
    identity: &str,
) -> anyhow::Result<()> {
    use crate::rollout::book_commands::{PromoteRefusal, Promoted};
    let (sidecar, wanted) = promotion_spec(spec)?;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now());
    let mut refusal = None;
    let promoted = crate::cluster::status::edit_book(&api, namespace, wanted.is_some(), |book| {
        book.promote_command(&sidecar, wanted.as_deref(), identity, at.clone())
            .map_err(|why| refusal = Some(why))
            .ok()
    })
    .await?;
    match (promoted, refusal) {
        (Some(promoted), _) => {
            let (revision, done) = match &promoted {
                Promoted::Now { revision } => (revision, "promoted"),
                Promoted::Already { revision } => (revision, "was promoted already"),
            };
            notice(
                Level::INFO,
                &format!(
                    "{sidecar} revision {revision} {done}: the Lease holder starts its campaign at its next plan (`sidecar-injector drift` follows it)"
                ),
                &[("sidecar", &sidecar), ("revision", revision)],
            );
        }
        (None, Some(PromoteRefusal::NotGated { revision, state })) => anyhow::bail!(
            "{sidecar} does not wait for promotion: its campaign of {revision} is {} (name a revision with --promote {sidecar}=REVISION to approve one still to come)",
            state.as_str()
        ),
        (None, Some(PromoteRefusal::NoCampaign)) => anyhow::bail!(
            "{sidecar} has no campaign in the status ConfigMap of namespace {namespace} (is serve --rollout=auto --promotion=gated running there?)"
        ),
        (None, None) => anyhow::bail!(
            "no status ConfigMap sidecar-injector-status in namespace {namespace}: nothing waits for promotion there"
        ),
    }
    Ok(())
}

/// What `--unpin` and `--release-hold` end.
enum Override<'a> {
    Unpin(&'a str),
    ReleaseHold(&'a str),
}

/// `--unpin` and `--release-hold`: the pin or hold of one sidecar removed from the book in the
/// status ConfigMap (every replica stops serving it at once; the Lease holder plans from it).
async fn edit_overrides(
    client: &kube::Client,
    namespace: &str,
    what: Override<'_>,
) -> anyhow::Result<()> {
    let (raw, verb) = match &what {
        Override::Unpin(s) => (*s, "pinned"),
        Override::ReleaseHold(s) => (*s, "held"),
    };
    let sidecar = crate::name::SidecarName::parse(raw)
        .with_context(|| format!("invalid sidecar name {raw:?}"))?
        .to_string();
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let ended = crate::cluster::status::edit_book(&api, namespace, false, |book| match &what {
        Override::Unpin(_) => book.unpin(&sidecar),
        Override::ReleaseHold(_) => book.release_hold(&sidecar),
    })
    .await?;
    match ended {
        Some(revision) => notice(
            Level::INFO,
            &format!(
                "{sidecar} is no longer {verb} at {revision}: new pods get its configured revision{}",
                match what {
                    Override::Unpin(_) => ", and the engine rolls it out",
                    Override::ReleaseHold(_) => " (its campaign stays paused)",
                }
            ),
            &[("sidecar", &sidecar), ("revision", &revision)],
        ),
        None => notice(
            Level::INFO,
            &format!("{sidecar} is not {verb}; nothing to do"),
            &[("sidecar", &sidecar)],
        ),
    }
    Ok(())
}

/// `--to SIDECAR=REVISION`: the revision looked up in the history ConfigMap and pinned in the
/// status ConfigMap over the revision in force.
async fn pin_revision(
    args: &RolloutArgs,
    spec: &str,
    one_shot: &OneShot,
    identity: &str,
) -> anyhow::Result<()> {
    let OneShot {
        client,
        sidecars,
        configs_unread,
        state,
        ..
    } = one_shot;
    let namespace = &args.cluster.injector_namespace;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    let history = state.history()?;
    let book = book_of(state)?;
    let published = revisions_in_force(injectors_of(state)?, &args.cluster, configs_unread)?
        .map(|p| p.revisions);
    let at = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now());
    let crate::rollout::book_commands::PinRequest {
        sidecar,
        entry,
        pin,
    } = crate::rollout::book_commands::pin_request(
        history,
        book,
        spec,
        published.as_ref(),
        sidecars,
        identity,
        at,
    )?;
    let over = pin.over.clone();
    let pinned = entry.revision.clone();
    crate::cluster::status::edit_book(&api, namespace, true, |book| {
        book.pins.insert(sidecar.clone(), pin.clone());
        Some(())
    })
    .await?;
    notice(
        Level::INFO,
        &format!(
            "pinned {sidecar} at {pinned} ({}, first served {}) over its configured revision {over}: new pods get it and stale workloads are restarted to it, until the config changes or `sidecar-injector rollout --unpin {sidecar}`",
            entry.outcome.as_str(),
            crate::rollout::to_the_second(entry.first_served.0)
        ),
        &[("sidecar", &sidecar), ("revision", &pinned)],
    );
    Ok(())
}
