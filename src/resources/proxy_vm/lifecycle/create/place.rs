//! The place phase of a create: the node (the configured one, or the one placement chooses)
//! and, on it, the seed storage checked and the template found.

use super::super::super::model::{Desired, networks};
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

/// A `create_before_destroy` replacement pinned to a `mac_address` its predecessor holds would
/// put two VMs with one MAC on the network for the length of the roll: refused, before any
/// write, naming what to do (#41). Terraform tells a provider nothing of
/// `create_before_destroy`, so only the create can tell, when its predecessor still stands.
pub(super) async fn mac_free_beside(
    configured: &Configured,
    desired: &Desired,
    (vmid, node): &(u32, String),
    deadline: tokio::time::Instant,
) -> Step<()> {
    // net0's pinned MAC, then each pinned MAC of `networks` (#41), with its attribute.
    let further = desired.networks.iter().flatten().enumerate();
    let pinned: Vec<(String, &str)> = desired
        .mac_address
        .iter()
        .map(|mac| ("mac_address".to_owned(), mac.as_str()))
        .chain(further.filter_map(|(index, nic)| {
            let mac = nic.mac_address.as_deref()?;
            Some((format!("networks[{index}].mac_address"), mac))
        }))
        .collect();
    if pinned.is_empty() {
        return Ok(());
    }
    let op = super::super::operation::Operation::new(&configured.client, deadline);
    let qemu = configured.client.node(node).qemu(*vmid);
    let config = op.retry(|| qemu.config()).await?;
    let held_macs: Vec<String> = (0..=networks::MAX_NET_INDEX)
        .filter_map(|i| config.net(i)?.ok()?.mac)
        .collect();
    let Some((attribute, mac)) = pinned
        .into_iter()
        .find(|(_, mac)| held_macs.iter().any(|held| held.eq_ignore_ascii_case(mac)))
    else {
        return Ok(());
    };
    Err(StepError::Unworkable(format!(
        "{attribute} {mac} is held by VM {vmid} on {node}, the VM this create replaces under \
         create_before_destroy: two VMs would hold one MAC on the network until the old one is \
         destroyed. Nothing was changed. Replace it without create_before_destroy (the old VM \
         goes first, and the new one takes its MAC and its DHCP address), or leave {attribute} \
         unset for rolls."
    )))
}
