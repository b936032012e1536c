//! Read: where a VM is, its config and power state, and its addresses, without waiting.
//!
//! A refresh costs at most two requests per VM (`GET …/pending` for config and pending
//! changes, and the agent's interfaces only for a running VM with the agent enabled) plus one
//! cluster listing and one power listing per node, shared by all reads of the process.

use pve::qemu::{GuestInterface, VmStatus};
use pve::{Client, ErrorKind, RetryPolicy, retry_idempotent};

use super::super::model::{Observed, RunningValues};
use super::Step;
use crate::context::Configured;
use crate::ownership::{self, Mark};

/// What drift detection needs of one VM on a known node: its config as PVE holds it (with
/// what waits for a reboot, from one `GET …/pending`), status, and one agent attempt without
/// waiting. `None` when the VM is not there.
pub async fn observe(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
) -> Step<Option<Observed>> {
    observe_with(client, node, vmid, pool, None).await
}

/// [`observe`], with the agent's interfaces when the caller already has them.
pub async fn observe_with(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
    reported: Option<Vec<GuestInterface>>,
) -> Step<Option<Observed>> {
    observe_known(client, node, vmid, pool, None, reported).await
}

/// [`observe_with`], with the power state when the caller already read it live (a node's
/// listing); otherwise it is asked of the VM.
async fn observe_known(
    client: &Client,
    node: &str,
    vmid: u32,
    pool: Option<String>,
    status: Option<VmStatus>,
    reported: Option<Vec<GuestInterface>>,
) -> Step<Option<Observed>> {
    let qemu = client.node(node).qemu(vmid);
    let view = match retry_idempotent(&RetryPolicy::default(), || qemu.pending_view()).await {
        Ok(view) => view,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let config = &view.effective;
    let status = match status {
        Some(status) => status,
        None => match retry_idempotent(&RetryPolicy::default(), || qemu.status()).await {
            Ok(status) => status,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e.into()),
        },
    };
    let net = config.net(0).and_then(Result::ok);
    let mac = net.as_ref().and_then(|n| n.mac.clone());
    let (mut ipv4, mut ipv6) = (Vec::new(), Vec::new());
    if status.is_running() && config.agent_enabled() {
        // One attempt: an agent that is not up yet is not an error for a refresh.
        let interfaces = match reported {
            Some(interfaces) => Ok(interfaces),
            None => qemu.agent().network_get_interfaces().await,
        };
        if let Ok(mut interfaces) = interfaces {
            // The interface with net0's MAC first, so the primary address is on it.
            interfaces.sort_by_key(|i| {
                let same = i
                    .hardware_address
                    .as_deref()
                    .zip(mac.as_deref())
                    .is_some_and(|(a, b)| a.eq_ignore_ascii_case(b));
                !same
            });
            for interface in interfaces.iter().filter(|i| i.name != "lo") {
                for ip in &interface.ip_addresses {
                    if ip.is_usable_ipv4() {
                        ipv4.push(ip.address.clone());
                    } else if ip.kind == "ipv6" && ip.address != "::1" {
                        ipv6.push(ip.address.clone());
                    }
                }
            }
        }
    }
    let disk = config.boot_disk();
    let status_text = match status.qmpstatus.as_deref() {
        Some("paused") => "paused".to_owned(),
        _ => status.status.clone(),
    };
    Ok(Some(Observed {
        vmid,
        node: node.to_owned(),
        name: config.name().unwrap_or_default(),
        mark: config.description().as_deref().and_then(Mark::parse),
        cores: config.cores(),
        memory_mib: config.memory_mib(),
        disk_gib: disk
            .as_ref()
            .and_then(|(_, d)| d.size)
            .map(|s| s.gib_ceil()),
        disk_storage: disk
            .as_ref()
            .and_then(|(_, d)| d.storage().map(str::to_owned)),
        bridge: net.as_ref().and_then(|n| n.bridge.clone()),
        vlan_tag: net.as_ref().and_then(|n| n.tag),
        mac,
        tags: ownership::user_tags(&config.tags().join(";")),
        seed_volume: config.cdrom("ide2").and_then(Result::ok).map(|d| d.volume),
        status: status_text,
        running: status.is_running(),
        pool,
        ipv4,
        ipv6,
        pending_keys: view.pending_keys.clone(),
        running_with: RunningValues::of(&view.current),
    }))
}

impl RunningValues {
    fn of(config: &pve::qemu::VmConfig) -> RunningValues {
        let net = config.net(0).and_then(Result::ok);
        RunningValues {
            cores: config.cores(),
            memory_mib: config.memory_mib(),
            bridge: net.as_ref().and_then(|n| n.bridge.clone()),
            vlan_tag: net.as_ref().and_then(|n| n.tag),
        }
    }
}

/// Whose VM a state expects at its VMID.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The state's name; `None` on import (any name).
    pub name: Option<&'a str>,
    pub fleet: &'a str,
    /// Which create attempt's VM it must be.
    pub token: ExpectedToken<'a>,
}

/// The create token a state expects in the VM's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedToken<'a> {
    /// Import: any VM of ours (it takes the token the mark has).
    Any,
    /// The VM made (or resumed) by the create with this token. A mark without any token
    /// still matches when it carries `proof`, the state's keyed seed hash (a value only the
    /// create's own mark or state holds): the mark was edited away and put back from the
    /// provider's warning, which leaves the token out.
    Is {
        token: &'a str,
        proof: Option<&'a str>,
    },
    /// A state written before create tokens existed. Its VM was finished before tokens
    /// existed too, and nothing ever adds a token to a finished VM's mark, so only a VM
    /// whose mark has no token can be it: a same-name VM made since (by another state, after
    /// this one's was deleted) never matches.
    MadeBeforeTokens,
}

impl<'a> ExpectedToken<'a> {
    /// What a state expects: its create token (private data), if any, with its
    /// `seed_hash`.
    pub fn of_state(token: Option<&'a str>, seed_hash: Option<&'a str>) -> Self {
        match token {
            Some(token) => ExpectedToken::Is {
                token,
                proof: seed_hash.filter(|h| !h.is_empty()),
            },
            None => ExpectedToken::MadeBeforeTokens,
        }
    }
}

impl Expected<'_> {
    /// Why the VM's mark is not the expected one, or `None` when it is.
    pub fn mismatch(&self, mark: Option<&Mark>) -> Option<String> {
        let Some(mark) = mark else {
            return Some("it has no ownership mark of this provider".to_owned());
        };
        if let Some(name) = self.name
            && mark.owner != name
        {
            return Some(format!("its mark names `{}`", mark.owner));
        }
        if mark.fleet != self.fleet {
            return Some(format!(
                "it belongs to fleet `{}`, not `{}`",
                mark.fleet, self.fleet
            ));
        }
        match (self.token, mark.create_token.as_deref()) {
            (ExpectedToken::Any, _) | (ExpectedToken::MadeBeforeTokens, None) => None,
            (ExpectedToken::Is { token, .. }, Some(found)) if token == found => None,
            (
                ExpectedToken::Is {
                    proof: Some(proof), ..
                },
                None,
            ) if mark.seed_hash.as_deref() == Some(proof) => None,
            (ExpectedToken::Is { .. }, Some(_)) => Some(
                "another create (from another state or a later apply) took it over from this \
                state's create"
                    .to_owned(),
            ),
            (ExpectedToken::Is { .. }, None) => Some(
                "its mark carries no create token, so it was not made by this state's \
                create"
                    .to_owned(),
            ),
            (ExpectedToken::MadeBeforeTokens, Some(_)) => Some(
                "it was created by a newer release of the provider than this state's VM (its mark \
                carries a create token), so it is another state's VM of the same name"
                    .to_owned(),
            ),
        }
    }
}

/// What a read finds at a VMID.
#[derive(Debug)]
pub enum Found {
    /// This resource's VM.
    Ours(Box<Observed>),
    /// Still being cloned: it exists, but shows nothing to compare yet.
    Cloning,
    /// Nothing there.
    Gone,
    /// A VM that is not this state's: never touched, dropped from state with this reason.
    NotOurs {
        why: String,
        mark: Option<Box<Mark>>,
    },
    /// A VM with the state's name whose description no longer carries any mark (edited by
    /// hand): most likely this state's VM, but it cannot be proven, so it is never written to.
    MarkLost { vmid: u32, node: String },
}

/// Finds VM `vmid` through the shared listing (following a migration) and observes it.
pub async fn read(configured: &Configured, vmid: u32, expected: Expected<'_>) -> Step<Found> {
    let listing = configured.runtime.vm_listing(&configured.client).await?;
    let Some(entry) = listing.iter().find(|vm| vm.vmid == vmid) else {
        return Ok(Found::Gone);
    };
    if entry.lock.as_deref() == Some("clone") {
        return Ok(Found::Cloning);
    }
    // The power state comes from the node's listing, shared by every read of this refresh.
    // A VM missing from it (migrated since the cluster listing) is asked directly.
    let power = configured
        .runtime
        .node_power(&configured.client, &entry.node)
        .await?;
    let status = power.get(&vmid).cloned();
    let Some(observed) = observe_known(
        &configured.client,
        &entry.node,
        vmid,
        entry.pool.clone(),
        status,
        None,
    )
    .await?
    else {
        return Ok(Found::Gone);
    };
    if observed.mark.is_none()
        && expected
            .name
            .is_some_and(|name| !name.is_empty() && observed.name == name)
    {
        tracing::warn!(
            vmid,
            "the VM of this state's name carries no ownership mark"
        );
        return Ok(Found::MarkLost {
            vmid,
            node: observed.node,
        });
    }
    if let Some(why) = expected.mismatch(observed.mark.as_ref()) {
        tracing::warn!(vmid, %why, "the VM at this VMID is not this state's: treating ours as \
            gone");
        return Ok(Found::NotOurs {
            why: format!(
                "VM {vmid} on {} is not this state's VM ({why}); it was left untouched and dropped \
                from this state.",
                observed.node
            ),
            mark: observed.mark.map(Box::new),
        });
    }
    Ok(Found::Ours(Box::new(observed)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::Phase;

    fn mark(token: Option<&str>, seed_hash: Option<&str>) -> Mark {
        let mut mark = Mark::creating("edge-0", "", "t", "tpl").with_phase(Phase::Done);
        mark.create_token = token.map(str::to_owned);
        mark.seed_hash = seed_hash.map(str::to_owned);
        mark
    }

    fn expected(token: ExpectedToken<'_>) -> Expected<'_> {
        Expected {
            name: Some("edge-0"),
            fleet: "",
            token,
        }
    }

    #[test]
    fn a_state_from_before_tokens_matches_only_a_vm_from_before_tokens() {
        let state = expected(ExpectedToken::of_state(None, Some("h")));
        assert_eq!(state.mismatch(Some(&mark(None, Some("h")))), None);
        // A same-name VM made since, by another state: never this one's.
        assert!(
            state
                .mismatch(Some(&mark(Some("other"), Some("h"))))
                .is_some()
        );
        assert!(state.mismatch(None).is_some());
    }

    #[test]
    fn a_state_with_a_token_matches_its_token_or_its_keyed_seed_hash() {
        let state = expected(ExpectedToken::of_state(Some("mine"), Some("keyed")));
        assert_eq!(
            state.mismatch(Some(&mark(Some("mine"), Some("keyed")))),
            None
        );
        let other = state.mismatch(Some(&mark(Some("theirs"), Some("keyed"))));
        assert!(
            other.is_some_and(|why| !why.contains("theirs")),
            "no token in messages"
        );
        // A mark put back without the token (as the warning prints it) still proves itself
        // with the keyed hash; without it, or with another hash, it does not.
        assert_eq!(state.mismatch(Some(&mark(None, Some("keyed")))), None);
        assert!(state.mismatch(Some(&mark(None, Some("guess")))).is_some());
        assert!(state.mismatch(Some(&mark(None, None))).is_some());
        // A state whose seed hash is empty (drift) proves nothing.
        let drifted = expected(ExpectedToken::of_state(Some("mine"), Some("")));
        assert!(drifted.mismatch(Some(&mark(None, Some("")))).is_some());
    }

    #[test]
    fn an_import_takes_any_token_but_not_another_fleet() {
        let import = Expected {
            name: None,
            fleet: "",
            token: ExpectedToken::Any,
        };
        assert_eq!(import.mismatch(Some(&mark(Some("any"), None))), None);
        let mut prod = mark(Some("any"), None);
        prod.fleet = "prod".into();
        assert!(import.mismatch(Some(&prod)).is_some());
    }
}
