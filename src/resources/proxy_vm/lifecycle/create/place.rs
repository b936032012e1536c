//! The place phase of a create: the node (the configured one, or the one placement chooses)
//! and, on it, the seed storage checked and the template found.

use super::super::super::model::Desired;
use super::super::error::{Step, StepError};
use super::super::placement;
use super::super::prechecks::{
    Template, check_seed_storage, choose_template, judge_template, resolve_template,
};
use crate::context::Configured;

/// The desired VM with its node: the configured one, or the one placement chooses (see
/// `placement`), with the index of its memory promise in the runtime.
pub(super) async fn place(
    configured: &Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
) -> Step<(Desired, Option<usize>)> {
    let mut placed = desired.clone();
    if !desired.node.is_empty() {
        return Ok((placed, None));
    }
    // One choice at a time in this process, so parallel creates spread out.
    let _turn = configured.runtime.placement_guard().await;
    // The template's config comes from the process's facts: every placed create of a fleet
    // asks for the same one.
    let vm = choose_template(listing, &desired.template, "").map_err(StepError::Unworkable)?;
    let config = configured
        .facts
        .config(&configured.client, &vm.node, vm.vmid)
        .await
        .map_err(|e| StepError::Pve(Box::new((*e).clone())))?;
    let template = judge_template(vm, &config, &desired.template).map_err(StepError::Unworkable)?;
    let views = placement::gather(configured, desired, listing, &template).await?;
    let memory_mib = desired.memory_mib.unwrap_or(template.memory_mib);
    match placement::judge(&views, memory_mib << 20) {
        Ok(node) => {
            tracing::info!(name = %desired.name, %node, "placed on the node with the most memory \
                left");
            let index = configured.runtime.place(&node, memory_mib << 20);
            placed.node = node;
            Ok((placed, Some(index)))
        }
        Err(rejected) => Err(StepError::Unworkable(placement::no_node_message(
            &rejected,
            desired.node_candidates.as_deref(),
        ))),
    }
}

/// The seed storage checked and the template found for `desired.node`, once per process:
/// neither changes during an apply, and a fleet's creates share them. A template `listing`
/// does not know yet is looked for once more in a fresh one.
pub(super) async fn checked_template(
    configured: &Configured,
    desired: &Desired,
    listing: &[pve::cluster::ClusterVm],
) -> Step<Template> {
    let (client, runtime) = (&configured.client, &configured.runtime);
    runtime
        .once(
            &format!("seed storage {}/{}", desired.node, desired.seed_storage),
            || check_seed_storage(client, &desired.node, &desired.seed_storage),
        )
        .await?;
    runtime
        .once(
            &format!("template {} for {}", desired.template, desired.node),
            || async {
                match resolve_template(client, listing, &desired.template, &desired.node).await {
                    Ok(template) => Ok(template),
                    Err(_) => {
                        let fresh = runtime.cluster_vms_once(client, true).await?;
                        resolve_template(client, &fresh, &desired.template, &desired.node).await
                    }
                }
            },
        )
        .await
}
