//! The real provider binary driven as Terraform 1.12 to 1.16 drive it, through the contract
//! harness `tfplugin::testing` (issue #43), against an in-process pve-sim. The harness checks
//! every answer as Terraform's client and core do and names the Terraform source of each check
//! (tags v1.14.9 and v1.16.0-rc2); what this module asserts on top is cited where it is made.
//!
//! - Identity on every RPC path: create plan and apply, read, update plan and apply, import by
//!   id and by identity, replacement, destroy.
//! - `ListResource` against a world with our VMs, another fleet's, foreign ones (one carrying
//!   our tag but no mark), a create that did not finish and a VM whose destroy failed.
//! - The configuration `GenerateResourceConfig` writes, which the real terraform (the 1.11.4
//!   of these tests, importing by ID) plans as an import and nothing else.
//!
//! No Terraform newer than 1.11.4 can be installed here: the harness stands in for it. Gated
//! by `TF_ACC` like the other acceptance tests, since the last part runs terraform.

use crate::support::{self, SimClient, Target, Workspace};

use terraform_provider_proxmox::provider::ProxmoxProvider;
use terraform_provider_proxmox::resources::proxy_vm::TYPE_NAME;
use tfplugin::testing::{Applied, ApplyChange, Client, Listed, PlanChange, Planned};
use tfplugin::{Block, Diagnostics, Provider as _, Severity, Type, Value};

/// The version the harness announces to the provider.
const TERRAFORM: &str = "1.14.9";
const TEMPLATE: &str = "debian-13-proxy";

/// One provider process with its own Terraform data directory (the journal lives there).
/// Terraform starts a provider process per command, each configured once: a test starts the
/// next one with [`Provider::next_command`].
struct Provider {
    client: Client,
    block: Block,
    target: Target,
    fleet: String,
    data_dir: tempfile::TempDir,
}

/// An object of nulls of an object type: what an empty configuration block decodes to.
fn nulls(ty: &Type) -> Value {
    match ty {
        Type::Object(fields) => Value::object(fields.keys().map(|n| (n.clone(), Value::Null))),
        other => panic!("not an object type: {other:?}"),
    }
}

async fn start_provider(target: &Target, fleet: &str) -> Provider {
    start_in(target, fleet, tempfile::tempdir().unwrap()).await
}

/// Starts the provider as a Terraform command in the working directory of `data_dir` would.
async fn start_in(target: &Target, fleet: &str, data_dir: tempfile::TempDir) -> Provider {
    let env = [("TF_DATA_DIR", data_dir.path().to_str().unwrap())];
    let binary = env!("CARGO_BIN_EXE_terraform-provider-proxmox");
    let mut client = Client::start(binary, &env).await.unwrap();
    let schemas = client.schemas().await.unwrap();
    let mut config = nulls(&schemas.provider);
    for (name, value) in [
        ("endpoint", target.endpoint.as_str()),
        ("api_token", target.token.as_str()),
        ("ca_cert", target.ca_pem.as_deref().unwrap()),
        ("fleet", fleet),
        ("seed_storage", "proxy-seeds"),
    ] {
        config.set_attr(name, Value::string(value));
    }
    let configured = client.configure(TERRAFORM, &config).await.unwrap();
    assert!(!configured.has_errors(), "{configured:?}");
    let block = ProxmoxProvider::new()
        .resources()
        .into_iter()
        .find(|r| r.type_name() == TYPE_NAME)
        .unwrap()
        .schema()
        .block;
    Provider {
        client,
        block,
        target: target.clone(),
        fleet: fleet.to_owned(),
        data_dir,
    }
}

fn identity(vmid: i64, name: &str, fleet: &str) -> Value {
    Value::object([
        ("vmid", Value::number(vmid)),
        ("name", Value::string(name)),
        ("fleet", Value::string(fleet)),
    ])
}

fn assert_same(actual: &Value, expected: &Value, what: &str) {
    assert!(
        actual.same_as(expected),
        "{what}: {actual:?}, expected {expected:?}"
    );
}

fn no_errors(diagnostics: &Diagnostics, what: &str) {
    assert!(!diagnostics.has_errors(), "{what}: {diagnostics:?}");
}

fn vmid_of(state: &Value) -> i64 {
    state.get_attr("vmid").as_i64().unwrap()
}

impl Provider {
    /// The provider process of the next Terraform command in the same working directory.
    async fn next_command(self) -> Provider {
        let Provider {
            client,
            target,
            fleet,
            data_dir,
            ..
        } = self;
        drop(client);
        start_in(&target, &fleet, data_dir).await
    }

    /// A configuration of `name` on `node` (and the given attributes).
    fn config(&self, name: &str, node: &str, more: &[(&str, Value)]) -> Value {
        let mut config = nulls(&self.block.value_type());
        config.set_attr("name", Value::string(name));
        config.set_attr("template", Value::string(TEMPLATE));
        config.set_attr("node", Value::string(node));
        config.set_attr(
            "user_data",
            Value::string("#cloud-config\npackages: [haproxy]\n"),
        );
        for (attribute, value) in more {
            config.set_attr(*attribute, value.clone());
        }
        config
    }

    /// Terraform's proposal: the configuration, and the prior value of every computed
    /// attribute it leaves unset (`objchange.ProposedNew`; a null prior is all nulls).
    fn proposed(&self, prior: &Value, config: &Value) -> Value {
        let mut proposed = config.clone();
        for attribute in &self.block.attributes {
            if attribute.computed && config.get_attr(&attribute.name).is_null() {
                proposed.set_attr(
                    attribute.name.clone(),
                    prior.get_attr(&attribute.name).clone(),
                );
            }
        }
        proposed
    }

    async fn plan(&mut self, prior: &Value, private: &[u8], id: &Value, config: &Value) -> Planned {
        let change = PlanChange {
            type_name: TYPE_NAME.into(),
            prior_state: prior.clone(),
            proposed_new_state: self.proposed(prior, config),
            config: config.clone(),
            prior_private: private.to_vec(),
            prior_identity: id.clone(),
            force_replace: false,
        };
        self.client.plan_resource_change(&change).await.unwrap()
    }

    async fn apply(&mut self, prior: &Value, planned: &Planned, config: &Value) -> Applied {
        let change = ApplyChange {
            type_name: TYPE_NAME.into(),
            prior_state: prior.clone(),
            planned_state: planned.planned_state.clone(),
            config: config.clone(),
            planned_private: planned.planned_private.clone(),
            planned_identity: planned.identity.clone(),
        };
        self.client.apply_resource_change(&change).await.unwrap()
    }

    /// Plans and applies a create; the create's diagnostics are returned with its result.
    async fn create(&mut self, config: &Value) -> Applied {
        let planned = self.plan(&Value::Null, &[], &Value::Null, config).await;
        no_errors(&planned.diagnostics, "create plan");
        self.apply(&Value::Null, &planned, config).await
    }

    /// Plans and applies a destroy of `applied`.
    async fn destroy(&mut self, applied: &Applied) -> Applied {
        let change = PlanChange {
            type_name: TYPE_NAME.into(),
            prior_state: applied.new_state.clone(),
            prior_private: applied.private.clone(),
            prior_identity: applied.identity.clone(),
            ..PlanChange::default()
        };
        let planned = self.client.plan_resource_change(&change).await.unwrap();
        assert!(planned.identity.is_null(), "{planned:?}");
        self.apply(&applied.new_state, &planned, &Value::Null).await
    }

    async fn list(&mut self, filters: &[(&str, Value)], states: bool, limit: i64) -> Listed {
        let schemas = self.client.schemas().await.unwrap();
        let mut config = nulls(&schemas.list_resources[TYPE_NAME].config_type);
        for (name, value) in filters {
            config.set_attr(*name, value.clone());
        }
        let listed = self
            .client
            .list_resource(TYPE_NAME, &config, states, limit)
            .await
            .unwrap();
        no_errors(&listed.diagnostics, "list");
        listed
    }
}

/// The schemas Terraform 1.12+ reads: an identity whose one required attribute is `vmid` (an
/// `import { identity = {...} }` block is evaluated against the identity's `ConfigType()`, in
/// which only `required_for_import` attributes must be given: `evaluateImportIdentityExpression`
/// in `internal/terraform/eval_import.go` at v1.14.9), a list resource of the same type, and
/// generated configuration.
#[tokio::test(flavor = "multi_thread")]
async fn the_schemas_announce_identity_a_list_and_generated_configuration() {
    if !support::acceptance_enabled(
        "the_schemas_announce_identity_a_list_and_generated_configuration",
    ) {
        return;
    }
    let (_sim, target) = support::start_sim(pvesim::SimConfig::default()).await;
    let mut provider = start_provider(&target, "").await;
    let schemas = provider.client.schemas().await.unwrap();
    let vm = &schemas.resources[TYPE_NAME];
    let identity = vm.identity.as_ref().expect("an identity schema");
    assert_eq!(identity.version, 0);
    assert_eq!(identity.required_for_import, ["vmid"]);
    assert_eq!(
        identity.value_type,
        Type::object([
            ("fleet", Type::String),
            ("name", Type::String),
            ("vmid", Type::Number)
        ])
    );
    let list = &schemas.list_resources[TYPE_NAME];
    assert!(!list.config_required, "every filter is optional");
    assert!(schemas.capabilities.generate_resource_config);
    assert!(!schemas.capabilities.move_resource_state);
}

/// Identity on every path of one VM's life, each answer checked by the harness as Terraform
/// checks it (wholly known on read, apply, import, update and destroy plans:
/// `validateIdentityKnown` in `internal/terraform/node_resource_abstract_instance.go`), and
/// the same identity for the same VM throughout, as a provider must keep it (Terraform stores
/// what each answer carries as the object's identity: `refresh` and `apply` there).
#[tokio::test(flavor = "multi_thread")]
async fn identity_travels_with_every_answer() {
    if !support::acceptance_enabled("identity_travels_with_every_answer") {
        return;
    }
    let (_sim, target) = support::start_sim(pvesim::SimConfig::default()).await;
    let mut provider = start_provider(&target, "").await;
    let config = provider.config("ident-0", "pve1", &[]);

    // Create: the VMID is chosen at apply, so the plan's identity may not know it yet (allowed
    // on create only: `plan` in node_resource_abstract_instance.go).
    let planned = provider
        .plan(&Value::Null, &[], &Value::Null, &config)
        .await;
    no_errors(&planned.diagnostics, "create plan");
    assert_eq!(planned.identity.get_attr("name").as_str(), Some("ident-0"));
    assert_eq!(planned.identity.get_attr("fleet").as_str(), Some(""));
    let created = provider.apply(&Value::Null, &planned, &config).await;
    no_errors(&created.diagnostics, "create");
    let vmid = vmid_of(&created.new_state);
    let expected = identity(vmid, "ident-0", "");
    assert_same(&created.identity, &expected, "create");

    // The next command (a plan and apply of a change) refreshes first.
    let mut provider = provider.next_command().await;
    let read = provider
        .client
        .read_resource(
            TYPE_NAME,
            &created.new_state,
            &created.private,
            &created.identity,
        )
        .await
        .unwrap();
    no_errors(&read.diagnostics, "read");
    assert_same(&read.identity, &expected, "read");

    // An update plan needs a known identity (`plan`), the same one.
    let update = provider.config("ident-0", "pve1", &[("cores", Value::number(2))]);
    let planned = provider
        .plan(&read.new_state, &read.private, &read.identity, &update)
        .await;
    no_errors(&planned.diagnostics, "update plan");
    assert!(!planned.replaces);
    assert_same(&planned.identity, &expected, "update plan");
    let updated = provider.apply(&read.new_state, &planned, &update).await;
    no_errors(&updated.diagnostics, "update");
    assert_same(&updated.identity, &expected, "update");

    let mut provider = provider.next_command().await;
    import_paths(&mut provider, vmid, &expected).await;

    // A replacement is a new VM: its identity may be unknown in the plan (`plan`, "On replace
    // the identity is allowed to change and be unknown").
    let renamed = provider.config("ident-1", "pve1", &[]);
    let planned = provider
        .plan(
            &updated.new_state,
            &updated.private,
            &updated.identity,
            &renamed,
        )
        .await;
    assert!(planned.replaces, "{planned:?}");
    assert_eq!(planned.identity.get_attr("name").as_str(), Some("ident-1"));

    let mut provider = provider.next_command().await;
    let destroyed = provider.destroy(&updated).await;
    no_errors(&destroyed.diagnostics, "destroy");
    assert!(destroyed.new_state.is_null() && destroyed.identity.is_null());
}

/// Import by id and by identity give the same identity; an identity naming another VM or
/// another fleet is refused (Terraform needs an identity back from an import by identity:
/// `importState` in `internal/terraform/node_resource_plan_instance.go`, which the harness
/// checks).
async fn import_paths(provider: &mut Provider, vmid: i64, expected: &Value) {
    let by_vmid = provider
        .client
        .import_resource_state(TYPE_NAME, &vmid.to_string())
        .await
        .unwrap();
    no_errors(&by_vmid.diagnostics, "import by VMID");
    assert_same(&by_vmid.identity, expected, "import by VMID");
    let by_node = provider
        .client
        .import_resource_state(TYPE_NAME, &format!("pve1/{vmid}"))
        .await
        .unwrap();
    assert_same(&by_node.identity, expected, "import by NODE/VMID");
    let only_vmid = Value::object([
        ("vmid", Value::number(vmid)),
        ("name", Value::Null),
        ("fleet", Value::Null),
    ]);
    for given in [expected.clone(), only_vmid] {
        let imported = provider
            .client
            .import_resource_state_by_identity(TYPE_NAME, &given)
            .await
            .unwrap();
        no_errors(&imported.diagnostics, "import by identity");
        assert_same(&imported.identity, expected, "import by identity");
        assert_same(&imported.state, &by_vmid.state, "import by identity");
    }
    for (given, says) in [
        (identity(vmid, "ident-9", ""), "not `ident-9`"),
        (identity(vmid, "ident-0", "blue"), "fleet `blue`"),
    ] {
        let refused = provider
            .client
            .import_resource_state_by_identity(TYPE_NAME, &given)
            .await
            .unwrap();
        let error = refused
            .diagnostics
            .iter()
            .find(|d| d.severity == Severity::Error);
        assert!(
            error.is_some_and(|e| e.detail.contains(says)),
            "{given:?}: {:?}",
            refused.diagnostics
        );
    }
}

/// The world a list looks at: our VMs, another fleet's, a create that did not finish, a VM
/// whose destroy failed, and foreign VMs (the default world's 100 to 102, and 101 tagged as
/// ours without our mark).
struct World {
    /// `list-a` (pve1, tag `web`) and `list-b` (pve2), finished, in the default fleet.
    ours: [Applied; 2],
    /// `list-a` of fleet `blue` (pve3).
    blue: Applied,
    /// `list-c` (pve1): its start failed, so its mark still says `creating`.
    unfinished: Applied,
    /// `list-d` (pve2): its destroy failed after marking it `deleting`.
    deleting: Applied,
}

async fn build_world(provider: &mut Provider, sim: &SimClient) -> World {
    let web = Value::Set(vec![Value::string("web")]);
    let a = provider.config("list-a", "pve1", &[("tags", web)]);
    let a = provider.create(&a).await;
    let b = provider.config("list-b", "pve2", &[]);
    let b = provider.create(&b).await;
    let mut blue = start_provider(&provider.target, "blue").await;
    let blue_a = blue.config("list-a", "pve3", &[]);
    let blue_a = blue.create(&blue_a).await;
    for created in [&a, &b, &blue_a] {
        no_errors(&created.diagnostics, "create");
    }
    let fail = |task: &str| {
        let failure = serde_json::json!({"task_type": task, "nth": 1, "exitstatus": "boom"});
        serde_json::json!({ "task_failures": [failure] })
    };
    sim.set_faults(fail("qmstart")).await;
    let c = provider.config("list-c", "pve1", &[]);
    let unfinished = provider.create(&c).await;
    assert!(unfinished.diagnostics.has_errors(), "the start fails");
    sim.set_faults(serde_json::json!({})).await;
    let d = provider.config("list-d", "pve2", &[]);
    let d = provider.create(&d).await;
    no_errors(&d.diagnostics, "create");
    sim.set_faults(fail("qmdestroy")).await;
    let deleting = provider.destroy(&d).await;
    assert!(deleting.diagnostics.has_errors(), "the destroy fails");
    sim.set_faults(serde_json::json!({})).await;
    sim.api("PUT", "/nodes/pve2/qemu/101/config", &[("tags", "proxyvm")])
        .await;
    World {
        ours: [a, b],
        blue: blue_a,
        unfinished,
        deleting: Applied {
            new_state: d.new_state,
            ..deleting
        },
    }
}

fn listed_identities(listed: &Listed) -> Vec<Value> {
    listed.results.iter().map(|r| r.identity.clone()).collect()
}

/// The list gives exactly the identities of `expected`, in VMID order.
fn assert_identities(listed: &Listed, expected: &[&Applied], what: &str) {
    let got = listed_identities(listed);
    let mut expected = expected.to_vec();
    expected.sort_by_key(|a| vmid_of(&a.new_state));
    let want: Vec<Value> = expected.iter().map(|a| a.identity.clone()).collect();
    let same = got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| g.same_as(w));
    assert!(same, "{what}: listed {got:?}, expected {want:?}");
}

/// What a list finds: by default our finished VMs of the provider's fleet, in VMID order, each
/// with the identity its create returned; more only when a filter asks; never a VM without our
/// mark. Terraform reads each event as the harness does (`ListResource` in
/// `internal/plugin6/grpc_provider.go`: an identity on every result, no more than `limit`).
#[tokio::test(flavor = "multi_thread")]
async fn the_list_finds_our_finished_vms_and_others_only_when_asked() {
    if !support::acceptance_enabled("the_list_finds_our_finished_vms_and_others_only_when_asked") {
        return;
    }
    let (_sim, target) = support::start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let mut provider = start_provider(&target, "").await;
    let world = build_world(&mut provider, &sim).await;
    let [a, b] = &world.ours;
    // `terraform query` is a command of its own.
    let mut provider = provider.next_command().await;

    let before = sim.journal().await.len();
    let listed = provider.list(&[], false, 100).await;
    assert_identities(&listed, &[a, b], "default");
    assert_requests_of_a_list(&sim, before).await;
    assert!(listed.ended_by_provider && listed.diagnostics.is_empty());
    assert!(listed.results.iter().all(|r| r.state.is_null()));
    let (vmid_a, vmid_b) = (vmid_of(&a.new_state), vmid_of(&b.new_state));
    let names = listed.results.iter().map(|r| r.display_name.as_str());
    let mut expected = [
        (vmid_a, format!("list-a (VM {vmid_a} on pve1)")),
        (vmid_b, format!("list-b (VM {vmid_b} on pve2)")),
    ];
    expected.sort();
    assert!(names.eq(expected.iter().map(|(_, name)| name.as_str())));
    let first = provider.list(&[], false, 1).await;
    assert_identities(&first, &[if vmid_a < vmid_b { a } else { b }], "limit 1");

    let text = Value::string;
    let blue = &world.blue;
    for (filters, expected, what) in [
        (vec![("fleet", text("blue"))], vec![blue], "fleet blue"),
        (vec![("node", text("pve2"))], vec![&world.ours[1]], "node"),
        (
            vec![("name_prefix", text("list-b"))],
            vec![&world.ours[1]],
            "name prefix",
        ),
    ] {
        let listed = provider.list(&filters, false, 100).await;
        let expected: Vec<&Applied> = expected.into_iter().collect();
        assert_identities(&listed, &expected, what);
    }
    let web = provider
        .list(&[("tags", Value::Set(vec![text("WEB")]))], false, 100)
        .await;
    assert_eq!(web.results.len(), 1);
    assert_eq!(
        web.results[0].identity.get_attr("name").as_str(),
        Some("list-a")
    );

    listed_on_request(&mut provider, &world).await;
    states_are_what_an_import_makes(&mut provider, &listed).await;
}

/// A list without states costs one cluster listing and one config read per VM tagged ours of
/// the fleet: `list-a` to `list-d`, and 101, tagged but without our mark. Nothing else, and
/// no write.
async fn assert_requests_of_a_list(sim: &SimClient, before: usize) {
    let journal = sim.journal().await;
    let mut requests: Vec<String> = journal[before..]
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["method"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    let listings = requests
        .iter()
        .filter(|r| *r == "GET /cluster/resources")
        .count();
    assert_eq!(listings, 1, "{requests:#?}");
    requests.retain(|r| r != "GET /cluster/resources");
    assert_eq!(requests.len(), 5, "{requests:#?}");
    assert!(
        requests
            .iter()
            .all(|r| r.starts_with("GET /nodes/") && r.ends_with("/config")),
        "{requests:#?}"
    );
    assert!(requests.iter().any(|r| r.ends_with("/qemu/101/config")));
}

/// Every fleet, and unfinished VMs, each with a warning; foreign VMs under no filter at all.
async fn listed_on_request(provider: &mut Provider, world: &World) {
    let everything = [
        ("all_fleets", Value::Bool(true)),
        ("include_unfinished", Value::Bool(true)),
    ];
    let listed = provider.list(&everything, false, 100).await;
    let expected = [
        &world.ours[0],
        &world.ours[1],
        &world.blue,
        &world.unfinished,
        &world.deleting,
    ];
    assert_identities(&listed, &expected, "every fleet, unfinished too");
    for foreign in [100, 101, 102] {
        assert!(
            listed
                .results
                .iter()
                .all(|r| r.identity.get_attr("vmid").as_i64() != Some(foreign))
        );
    }
    let phases: Vec<&str> = listed
        .results
        .iter()
        .filter_map(|r| r.display_name.split(", ").last())
        .filter(|tail| tail.ends_with("unfinished)") || tail.ends_with("destroyed)"))
        .collect();
    assert_eq!(phases.len(), 2, "{:?}", listed.results);
    let warnings = listed
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Warning && d.summary == "Proxy VM not finished");
    assert_eq!(warnings.count(), 2, "{:?}", listed.diagnostics);

    let schemas = provider.client.schemas().await.unwrap();
    let mut conflicting = nulls(&schemas.list_resources[TYPE_NAME].config_type);
    conflicting.set_attr("fleet", Value::string("blue"));
    conflicting.set_attr("all_fleets", Value::Bool(true));
    let both = provider
        .client
        .validate_list_resource_config(TYPE_NAME, &conflicting)
        .await
        .unwrap();
    assert!(both.has_errors(), "{both:?}");
}

/// With `include_resource` each result carries the state an import by its VMID makes.
async fn states_are_what_an_import_makes(provider: &mut Provider, default: &Listed) {
    let listed = provider.list(&[], true, 100).await;
    assert_eq!(listed_identities(&listed).len(), default.results.len());
    for (result, plain) in listed.results.iter().zip(&default.results) {
        assert_same(&result.identity, &plain.identity, "identity with the state");
        let vmid = result.identity.get_attr("vmid").as_i64().unwrap();
        let imported = provider
            .client
            .import_resource_state(TYPE_NAME, &vmid.to_string())
            .await
            .unwrap();
        assert_same(&result.state, &imported.state, "listed state");
        assert_same(&imported.identity, &result.identity, "imported identity");
    }
}

/// A value as HCL writes it (what `-generate-config-out` writes for it).
fn hcl(value: &Value) -> String {
    match value {
        Value::String(text) => serde_json::to_string(text)
            .unwrap()
            .replace("${", "$${")
            .replace("%{", "%%{"),
        Value::Bool(flag) => flag.to_string(),
        Value::Number(number) => match number.as_i64() {
            Some(whole) => whole.to_string(),
            None => number.as_f64().to_string(),
        },
        Value::List(items) | Value::Set(items) => {
            let items: Vec<String> = items.iter().map(hcl).collect();
            format!("[{}]", items.join(", "))
        }
        Value::Object(fields) => {
            let fields: Vec<String> = fields
                .iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| format!("{k} = {}", hcl(v)))
                .collect();
            format!("{{ {} }}", fields.join(", "))
        }
        other => panic!("no HCL for {other:?}"),
    }
}

/// A `resource` block of a configuration value: every non-null attribute.
fn resource_block(label: &str, config: &Value) -> String {
    let mut block = format!("resource \"{TYPE_NAME}\" \"{label}\" {{\n");
    for (name, value) in config.as_entries().unwrap() {
        if !value.is_null() {
            block.push_str(&format!("  {name} = {}\n", hcl(value)));
        }
    }
    block.push_str("}\n");
    block
}

/// The configuration `GenerateResourceConfig` writes for a listed VM imports to an empty
/// plan: for a VM whose seed is gone (`gen-a`, the default `seed_lifetime`), and for one that
/// still carries its seed (`gen-b`: the generated `seed_lifetime = "vm"`, which the import
/// records from the seed it finds attached). Checked through the provider's own plan and
/// through the real terraform (1.11.4 here, which imports by ID and writes no configuration
/// through the provider): its plan imports both and changes nothing, and the apply sends PVE
/// no write. Terraform writes every non-null value of the answer, which must be wholly known
/// (`generateResourceConfig` in `internal/terraform/node_resource_plan_instance.go`, checked by
/// the harness).
#[tokio::test(flavor = "multi_thread")]
async fn the_generated_configuration_imports_without_changing_the_vm() {
    if !support::acceptance_enabled("the_generated_configuration_imports_without_changing_the_vm") {
        return;
    }
    let (_sim, target) = support::start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let mut provider = start_provider(&target, "").await;
    let plain = provider.config("gen-a", "pve1", &[]);
    let startup = Value::object([
        ("order", Value::number(2)),
        ("up", Value::Null),
        ("down", Value::Null),
    ]);
    let custom = provider.config(
        "gen-b",
        "pve2",
        &[
            ("cores", Value::number(2)),
            (
                "tags",
                Value::Set(vec![Value::string("edge"), Value::string("web")]),
            ),
            ("started", Value::Bool(false)),
            ("seed_lifetime", Value::string("vm")),
            ("pool", Value::string("proxies")),
            ("startup", startup),
            ("start_on_boot", Value::Bool(false)),
        ],
    );
    for config in [&plain, &custom] {
        no_errors(&provider.create(config).await.diagnostics, "create");
    }
    // `terraform query -generate-config-out`: a command of its own.
    let mut provider = provider.next_command().await;
    let listed = provider
        .list(&[("name_prefix", Value::string("gen-"))], true, 100)
        .await;
    assert_eq!(listed.results.len(), 2, "{listed:?}");
    let mut main_tf = format!(
        "{}\nprovider \"proxmox\" {{\n  seed_storage = \"proxy-seeds\"\n}}\n",
        Workspace::preamble()
    );
    for (n, result) in listed.results.iter().enumerate() {
        let (config, diagnostics) = provider
            .client
            .generate_resource_config(TYPE_NAME, &result.state)
            .await
            .unwrap();
        no_errors(&diagnostics, "generate");
        assert!(diagnostics.iter().any(|d| d.summary.contains("user_data")));
        for left_out in ["vmid", "node", "user_data", "id", "status"] {
            assert!(
                config.get_attr(left_out).is_null(),
                "{left_out}: {config:?}"
            );
        }
        assert_eq!(
            plan_of(&mut provider, &result.identity, &config).await,
            Vec::<String>::new(),
            "{:?}",
            result.identity
        );
        let vmid = result.identity.get_attr("vmid").as_i64().unwrap();
        main_tf.push_str(&resource_block(&format!("vm{n}"), &config));
        main_tf.push_str(&format!(
            "import {{\n  to = {TYPE_NAME}.vm{n}\n  id = \"{vmid}\"\n}}\n"
        ));
    }
    let ws = Workspace::new(target);
    ws.init_with(&main_tf).await;
    let plan = ws
        .terraform(&["plan", "-no-color", "-input=false"])
        .await
        .success();
    let text = plan.stdout();
    assert!(
        text.contains("2 to import, 0 to add, 0 to change, 0 to destroy"),
        "{main_tf}\n{}",
        plan.all_text()
    );
    let before = sim.journal().await.len();
    ws.apply().await.success();
    assert_eq!(
        sim.writes_since(before).await,
        Vec::<serde_json::Value>::new()
    );
    ws.assert_plans_empty().await;
}

/// As Terraform imports by identity and plans with the generated configuration: import, read,
/// plan. Returns the attributes whose planned value differs from the prior one (`getAction` in
/// node_resource_abstract_instance.go: none is no change).
async fn plan_of(provider: &mut Provider, identity: &Value, config: &Value) -> Vec<String> {
    let imported = provider
        .client
        .import_resource_state_by_identity(TYPE_NAME, identity)
        .await
        .unwrap();
    no_errors(&imported.diagnostics, "import by identity");
    let read = provider
        .client
        .read_resource(
            TYPE_NAME,
            &imported.state,
            &imported.private,
            &imported.identity,
        )
        .await
        .unwrap();
    let planned = provider
        .plan(&read.new_state, &read.private, &read.identity, config)
        .await;
    no_errors(&planned.diagnostics, "plan of the generated configuration");
    assert!(!planned.replaces, "{planned:?}");
    assert_same(&planned.identity, identity, "planned identity");
    tfplugin::plan::changed_attributes(&read.new_state, &planned.planned_state)
}
