//! The ready phase of create and update: the guest agent reports a usable address.

use std::time::Duration;

use pve::ErrorKind;
use pve::qemu::GuestInterface;
use tokio::time::Instant;

use super::error::{Step, StepError, unworkable};
use super::guest::Guest;

/// How long one wait on a node looks for its guest's first address while the others on that
/// node wait their turn: two or three looks at an agent not up yet, 3 s each on PVE.
const BLIND_TURN: Duration = Duration::from_secs(10);

/// Polls the guest agent until it reports a usable IPv4 address or the deadline passes, and
/// returns what it reported. The timeout error says what the agent last answered: no agent,
/// or an agent without an IPv4 address (a DHCP or network-config problem). The looks are
/// paced like task polls, near the boot time learned from this process's earlier boots of
/// `template`: PVE holds each look at an agent that is not up yet for up to 3 s and answers
/// it when the agent starts, so a look aims just before the middle of the recent boots, and
/// another create's address does not bring it forward. A VM that moves meanwhile is asked
/// where it went.
pub(super) async fn wait_for_address(
    guest: Guest<'_>,
    template: &str,
    deadline: Instant,
) -> Step<Vec<GuestInterface>> {
    let (client, vmid) = (guest.client(), guest.vmid());
    // A guest boots for seconds, and each look at an agent that is not up yet holds a PVE
    // worker until the agent times out: a gentler ladder than a task's.
    let pace = pve::TaskWait {
        first_poll: Duration::from_millis(300),
        backoff: 2.0,
        ..client.config().task_wait.clone()
    };
    let mut pacer = pve::Pacer::new(client.task_times(), &address_kind(template), &pace);
    // Until one guest's address is seen, the waits on a node take turns: a first wave's blind
    // looks would otherwise fill the node's pvedaemon and queue the other creates' requests
    // behind them (#42). A turn outlasts a few failed looks and bounds what a guest whose
    // agent never answers costs the others.
    pacer.take_turns(guest.node(), BLIND_TURN);
    // qemu-server `QemuServer/Agent.pm` `qga_check_running`: `guest-ping` with a 3 s timeout,
    // in the pvedaemon worker, which QEMU answers when qemu-ga opens its port.
    pacer.looks_are_held();
    let mut last = "no answer yet".to_owned();
    let mut agent_answered = false;
    loop {
        if tokio::time::timeout_at(deadline, pacer.pause())
            .await
            .is_err()
        {
            let hint = if agent_answered {
                "The VM runs and its guest agent answers, but the guest got no IPv4 address: check \
                DHCP on the bridge/VLAN, or give a static address with `network_config`; or set \
                wait_for = \"none\"."
            } else {
                "The VM runs; check that the image can install qemu-guest-agent (the seed's \
                vendor-data does it on Debian/Ubuntu), or set wait_for = \"none\"."
            };
            return unworkable(format!(
                "no IPv4 address from the guest agent within the create timeout (last answer: \
                {last}). {hint}"
            ));
        }
        let asked = guest.node().to_owned();
        match guest.agent().network_get_interfaces().await {
            Ok(interfaces) => {
                if interfaces
                    .iter()
                    .flat_map(|i| &i.ip_addresses)
                    .any(|ip| ip.is_usable_ipv4())
                {
                    pacer.finished();
                    tracing::info!(
                        vmid,
                        duration_ms = pacer.elapsed().as_millis() as u64,
                        polls = pacer.looks(),
                        "the guest agent reports an IPv4 address"
                    );
                    return Ok(interfaces);
                }
                if !agent_answered {
                    tracing::info!(
                        vmid,
                        "the guest agent answers but reports no IPv4 address yet (waiting for DHCP \
                        or the network config)"
                    );
                }
                agent_answered = true;
                last = "the guest agent answers but reports no IPv4 address".to_owned();
            }
            // A VM that is not running has no agent to answer: stopped meanwhile (by an
            // operator, HA, its node, or a guest that powered itself off). Waiting for its
            // address would wait out the whole timeout for nothing.
            Err(e) if e.agent_failure() == Some(pve::AgentFailure::VmNotRunning) => {
                return Err(StepError::StoppedWaiting { vmid, node: asked });
            }
            // Not on the node asked: moved (asked again where it went), or gone (below).
            Err(e) if guest.moved(&asked, &e).await? => continue,
            // A token without the privilege, a VM deleted underneath, a request PVE finds
            // invalid: waiting longer changes nothing.
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::Auth | ErrorKind::NotFound | ErrorKind::Invalid
                ) =>
            {
                return Err(e.into());
            }
            Err(e) => last = e.to_string(),
        }
        pacer.still_running();
    }
}

/// What the address waits learn boot times under: one kind per template, as the image sets
/// how long a guest takes to start its agent. With one kind for all, a fleet mixing a quick
/// image with a slow one would aim every look at the middle of both: late at the quick
/// guests, early (and failed, after holding a PVE worker) at the slow ones.
fn address_kind(template: &str) -> String {
    format!("guest-address {template}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_template_learns_its_own_boot_time() {
        assert_eq!(address_kind("debian-13"), address_kind("debian-13"));
        assert_ne!(address_kind("debian-13"), address_kind("rhel-9"));
    }
}
