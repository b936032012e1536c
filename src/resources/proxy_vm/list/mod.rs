//! `list "proxmox_proxy_vm"` (Terraform 1.14+, `terraform query`): the proxy VMs of ours in
//! the cluster, each by its identity, so a lost state's VMs can be found and imported.
//!
//! One whole-cluster listing (`GET /cluster/resources`, shared with the reads of the process)
//! names the candidates, as `proxmox_proxy_vms` finds them; then each candidate's ownership
//! mark decides (`look`), read a few VMs at a time in VMID order, stopping at the client's
//! limit. Only finished VMs of the provider's fleet are listed unless the configuration asks
//! for more (`filter`); VMs without the mark are never listed: no filter asks for them, as
//! nothing of this provider may manage them.

mod filter;
mod look;

use std::sync::Arc;

use tfplugin::{
    Context, Diagnostic, Diagnostics, ListItem, ListRequest, ListResource, ListResults, Schema,
    ValidateListRequest, Value,
};

use super::identity;
use super::schema::TYPE_NAME;
use crate::context::{Configured, Shared};
use crate::ownership::{OWNER_TAG, Phase, check_tag};
use crate::schema_table::{self, Kind, Mode, Spec};
use crate::validate;
use filter::Filter;
use look::{Seen, Unread, look};

/// How many VMs are read at once: enough to hide the round trips, few enough for pveproxy's
/// three workers to serve other clients meanwhile.
const READS_AT_ONCE: u64 = 4;

/// The attribute names of the `config` block, each written once.
mod attr {
    pub const FLEET: &str = "fleet";
    pub const ALL_FLEETS: &str = "all_fleets";
    pub const NAME_PREFIX: &str = "name_prefix";
    pub const NODE: &str = "node";
    pub const TAGS: &str = "tags";
    pub const INCLUDE_UNFINISHED: &str = "include_unfinished";
}

const ATTRIBUTES: &[Spec] = &[
    Spec::new(attr::FLEET, Kind::String, Mode::Optional).description(
        "List this fleet's VMs instead of the provider's `fleet` (`\"\"` is the default \
         fleet). Only VMs of the provider's own fleet can be imported through it.",
    ),
    Spec::new(attr::ALL_FLEETS, Kind::Bool, Mode::Optional)
        .description("List the VMs of every fleet. Conflicts with `fleet`. Defaults to `false`."),
    Spec::new(attr::NAME_PREFIX, Kind::String, Mode::Optional)
        .description("Only VMs whose name starts with this prefix."),
    Spec::new(attr::NODE, Kind::String, Mode::Optional)
        .description("Only VMs on this node now (after any migration)."),
    Spec::new(attr::TAGS, Kind::StringSet, Mode::Optional).description(
        "Only VMs carrying every one of these PVE tags (compared as PVE stores them, in \
         lower case).",
    ),
    Spec::new(attr::INCLUDE_UNFINISHED, Kind::Bool, Mode::Optional).description(
        "Also list VMs whose create has not finished (ownership mark phase `creating`: a \
         create running now, or one that was interrupted) and VMs being destroyed (phase \
         `deleting`), each with a warning and the phase in its display name. Neither can be \
         imported as it is. Defaults to `false`: only finished VMs, the ones an import takes.",
    ),
];

fn schema() -> Schema {
    let description = format!(
        "Finds proxy VMs for `terraform query` (Terraform 1.14 and later): every finished VM \
         carrying this provider's ownership mark, of the provider's `fleet`, across the cluster, \
         in VMID order, from one `GET /cluster/resources` (VMs tagged `{OWNER_TAG}`) and one \
         config read per candidate (a whole read with `include_resource`). VMs without the mark \
         (made by hand or by another tool) are never listed. Each result's identity imports the \
         VM (`import {{ identity = ... }}`); `-generate-config-out` writes a configuration that \
         imports to an empty plan, without the write-only `user_data` and `network_config`."
    );
    Schema::new(schema_table::block(description, ATTRIBUTES))
}

/// Checks the filters; unknown values are left alone.
fn validate_filters(config: &Value) -> Diagnostics {
    let mut diagnostics = Diagnostics::new();
    let mut check = |name: &str, value: &Value, rule: fn(&str) -> Result<(), String>| {
        if let Some(text) = value.as_str()
            && let Err(why) = rule(text)
        {
            diagnostics.attribute_error(name, "Invalid list filter", why);
        }
    };
    check(attr::FLEET, config.get_attr(attr::FLEET), validate::fleet);
    check(attr::NODE, config.get_attr(attr::NODE), node_named);
    let tags = config
        .get_attr(attr::TAGS)
        .as_elements()
        .unwrap_or_default();
    for tag in tags {
        check(attr::TAGS, tag, check_tag);
    }
    let fleet_set = !config.get_attr(attr::FLEET).is_null();
    if fleet_set && config.get_attr(attr::ALL_FLEETS).as_bool() == Some(true) {
        diagnostics.attribute_error(
            attr::ALL_FLEETS,
            "Conflicting list filters",
            "Set either `fleet` (one fleet) or `all_fleets = true` (every fleet), not both.",
        );
    }
    diagnostics
}

fn node_named(node: &str) -> Result<(), String> {
    if node.trim().is_empty() {
        return Err("the node name is empty: name a node of the cluster, e.g. \"pve1\"".into());
    }
    Ok(())
}

#[derive(Debug)]
pub struct ProxyVmList {
    shared: Arc<Shared>,
}

impl ProxyVmList {
    pub fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }
}

#[tfplugin::async_trait]
impl ListResource for ProxyVmList {
    fn type_name(&self) -> &str {
        TYPE_NAME
    }

    fn schema(&self) -> Schema {
        schema()
    }

    async fn validate(&self, _ctx: &Context, request: ValidateListRequest) -> Diagnostics {
        validate_filters(&request.config)
    }

    async fn list(
        &self,
        _ctx: &Context,
        request: ListRequest,
        results: &mut ListResults,
    ) -> Diagnostics {
        let mut diagnostics = validate_filters(&request.config);
        if diagnostics.has_errors() {
            return diagnostics;
        }
        let configured = match self.shared.get() {
            Ok(configured) => configured,
            Err(diagnostic) => {
                diagnostics.push(diagnostic);
                return diagnostics;
            }
        };
        let filter = Filter::from_config(&request.config, &configured.fleet);
        diagnostics.extend(list_vms(configured, &filter, results).await);
        diagnostics
    }
}

/// Lists the VMs `filter` keeps into `results`, until the client's limit.
async fn list_vms(
    configured: Arc<Configured>,
    filter: &Filter,
    results: &mut ListResults,
) -> Diagnostics {
    let mut diagnostics = Diagnostics::new();
    let listing = match configured.runtime.vm_listing(&configured.client).await {
        Ok(listing) => listing,
        Err(error) => {
            diagnostics.error(
                "Unable to list proxy VMs",
                format!("Listing the cluster's VMs failed: {error}"),
            );
            return diagnostics;
        }
    };
    let whole = results.include_resource_object();
    let mut candidates = filter.candidates(&listing).into_iter().cloned();
    while !results.is_closed() {
        let batch: Vec<_> = candidates
            .by_ref()
            .take(results.remaining().min(READS_AT_ONCE) as usize)
            .map(|vm| tokio::spawn(look(configured.clone(), vm, whole)))
            .collect();
        if batch.is_empty() {
            break;
        }
        for read in batch {
            let seen = match read.await {
                Ok(Ok(Some(seen))) if filter.keeps(&seen.mark, &seen.name) => seen,
                Ok(Ok(_)) => continue,
                Ok(Err(unread)) => {
                    diagnostics.push(left_out(&unread));
                    continue;
                }
                Err(panicked) => {
                    diagnostics.error("Unable to list proxy VMs", panicked.to_string());
                    return diagnostics;
                }
            };
            if results.push(item(seen)).await.is_err() {
                return diagnostics;
            }
        }
    }
    diagnostics
}

/// One result: the identity, a display name, the state when it was read, and a warning for a
/// VM that cannot be imported as it is.
fn item(seen: Seen) -> ListItem {
    let identity = match &seen.state {
        Some(state) => identity::of_state(state),
        None => identity::of_vm(seen.vmid, &seen.name, &seen.mark.fleet),
    };
    let mut item = ListItem::new(identity, display_name(&seen));
    if let Some(warning) = unfinished_warning(&seen) {
        item.diagnostics.push(warning);
    }
    match seen.state {
        Some(state) => item.with_resource_object(state),
        None => item,
    }
}

/// `edge-0 (VM 100123 on pve1)`, with the fleet when it is not the default and the phase when
/// the VM is not finished.
fn display_name(seen: &Seen) -> String {
    let name = if seen.name.is_empty() {
        &seen.mark.owner
    } else {
        &seen.name
    };
    let fleet = if seen.mark.fleet.is_empty() {
        String::new()
    } else {
        format!("fleet {}, ", seen.mark.fleet)
    };
    let phase = match seen.mark.phase {
        Phase::Done => "",
        Phase::Creating => ", create unfinished",
        Phase::Deleting => ", being destroyed",
    };
    format!("{name} ({fleet}VM {} on {}{phase})", seen.vmid, seen.node)
}

fn unfinished_warning(seen: &Seen) -> Option<Diagnostic> {
    let vm = format!("VM {} (`{}`) on {}", seen.vmid, seen.mark.owner, seen.node);
    let detail = match seen.mark.phase {
        Phase::Done => return None,
        Phase::Creating => format!(
            "{vm} is a create that has not finished: one running now, or one that was \
             interrupted. It cannot be imported: run the apply of the configuration that \
             creates it (it resumes the create), or that configuration's destroy."
        ),
        Phase::Deleting => format!(
            "{vm} is being destroyed, or a destroy of it was interrupted (the next apply of the \
             state that holds it keeps it). Do not import it while a destroy may be running."
        ),
    };
    Some(Diagnostic::warning("Proxy VM not finished", detail))
}

fn left_out(unread: &Unread) -> Diagnostic {
    Diagnostic::warning(
        "Proxy VM left out of the list",
        format!(
            "VM {} on {} could not be read, so whether it is ours is unknown: {}",
            unread.vmid, unread.node, unread.error
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::Mark;

    #[test]
    fn every_attribute_name_has_a_spec() {
        let source = include_str!("mod.rs");
        let names = source
            .split("mod attr {")
            .nth(1)
            .unwrap()
            .split('}')
            .next()
            .unwrap();
        let mut declared: Vec<&str> = ATTRIBUTES.iter().map(|s| s.name).collect();
        declared.sort_unstable();
        let mut named = schema_table::declared_names(names);
        named.sort_unstable();
        assert_eq!(named, declared);
    }

    fn config(pairs: &[(&str, Value)]) -> Value {
        let mut config = Value::object(ATTRIBUTES.iter().map(|s| (s.name, Value::Null)));
        for (name, value) in pairs {
            config.set_attr(*name, value.clone());
        }
        config
    }

    #[test]
    fn filters_are_checked_as_the_provider_checks_them_and_unknowns_pass() {
        assert!(validate_filters(&config(&[])).is_empty());
        let both = config(&[
            (attr::FLEET, Value::string("blue")),
            (attr::ALL_FLEETS, Value::Bool(true)),
        ]);
        assert!(validate_filters(&both).has_errors());
        let bad_tag = config(&[(attr::TAGS, Value::Set(vec![Value::string("-x")]))]);
        assert!(validate_filters(&bad_tag).has_errors());
        let bad_node = config(&[(attr::NODE, Value::string(" "))]);
        assert!(validate_filters(&bad_node).has_errors());
        let unknown = config(&[(attr::FLEET, Value::Unknown), (attr::NODE, Value::Unknown)]);
        assert!(!validate_filters(&unknown).has_errors());
    }

    fn seen(phase: Phase, fleet: &str) -> Seen {
        let mut mark = Mark::creating("edge-0", fleet, "t", "tpl").with_phase(phase);
        mark.fleet = fleet.to_owned();
        Seen {
            vmid: 100123,
            node: "pve2".into(),
            name: "edge-0".into(),
            mark,
            state: None,
        }
    }

    #[test]
    fn results_name_the_vm_its_fleet_and_an_unfinished_phase() {
        let done = item(seen(Phase::Done, ""));
        assert_eq!(done.display_name, "edge-0 (VM 100123 on pve2)");
        assert!(done.diagnostics.is_empty());
        assert_eq!(done.identity, identity::of_vm(100123, "edge-0", ""));
        assert!(done.resource_object.is_null());
        let blue = item(seen(Phase::Creating, "blue"));
        assert_eq!(
            blue.display_name,
            "edge-0 (fleet blue, VM 100123 on pve2, create unfinished)"
        );
        assert_eq!(blue.diagnostics.iter().count(), 1);
        let deleting = item(seen(Phase::Deleting, ""));
        assert!(deleting.display_name.ends_with("being destroyed)"));
    }
}
