//! The test sweeper (`proxmox-test-sweeper`) against pve-sim: it deletes the run's marked VMs
//! and seed ISOs, and leaves everything else alone, even lookalikes on either side of the
//! rule (a prefixed VM without the mark, a marked VM without the prefix, a prefixed seed a
//! foreign VM still uses).

use crate::support;

use pve::qemu::{CloneRequest, ConfigUpdate};
use pve::wire::CdromDrive;
use serde_json::Value;
use support::{Facts, Host, SimClient, Target, start_sim};
use terraform_provider_proxmox::ownership::{Mark, OWNER_TAG, Phase};

const PREFIX: &str = "tfacc-sw1-";

fn client(target: &Target) -> pve::Client {
    let token = pve::ApiToken::parse(&target.token).unwrap();
    let tls = pve::TlsTrust::CaPem(target.ca_pem.clone().unwrap());
    pve::Client::new(pve::ClientConfig::new(&target.endpoint, token, tls)).unwrap()
}

/// A clone of the template; `marked` gives it the provider's mark and tag.
async fn make_vm(pve: &pve::Client, vmid: u32, name: &str, marked: bool) {
    let mut clone = CloneRequest::full(vmid);
    clone.name = Some(name.to_owned());
    if marked {
        clone.description = Some(
            Mark::creating(name, "", "t0", "debian-13-proxy")
                .with_phase(Phase::Done)
                .render(),
        );
    }
    let upid = pve.node("pve1").qemu(9000).clone_to(&clone).await.unwrap();
    pve.wait_for_task(&upid).await.unwrap();
    if marked {
        let tags = ConfigUpdate::new().tags(&[OWNER_TAG]);
        pve.node("pve1")
            .qemu(vmid)
            .update_config(&tags)
            .await
            .unwrap();
    }
}

async fn upload_seed(pve: &pve::Client, node: &str, file: &str) {
    let upload = pve::storage::Upload::iso(file, bytes::Bytes::from_static(b"not really an ISO"));
    let upid = pve
        .node(node)
        .storage("local")
        .upload(upload)
        .await
        .unwrap();
    pve.wait_for_task(&upid).await.unwrap();
}

async fn attach(pve: &pve::Client, vmid: u32, file: &str) {
    let drive = CdromDrive::iso("local", file);
    let update = ConfigUpdate::new().cdrom("ide2", &drive);
    pve.node("pve1")
        .qemu(vmid)
        .update_config(&update)
        .await
        .unwrap();
}

fn sweeper(target: &Target, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_proxmox-test-sweeper"))
        .args(args)
        .env("PROXMOX_VE_ENDPOINT", &target.endpoint)
        .env("PROXMOX_VE_API_TOKEN", &target.token)
        .env("PROXMOX_VE_CA_CERT", target.ca_pem.as_deref().unwrap())
        .output()
        .unwrap()
}

fn vmids(state: &Value) -> Vec<u64> {
    state["vms"]
        .as_array()
        .unwrap()
        .iter()
        .map(|vm| vm["vmid"].as_u64().unwrap())
        .collect()
}

fn local_isos(state: &Value) -> Vec<String> {
    let mut files: Vec<String> = state["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["storage"] == "local")
        .map(|v| format!("{}@{}", v["volid"].as_str().unwrap(), v["node"]))
        .collect();
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread")]
async fn sweeps_the_runs_vms_and_seeds_and_nothing_else() {
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let pve = client(&target);
    let sim = SimClient::new(&target);

    // The run's: two marked VMs with the prefix (one running) and their seeds.
    make_vm(&pve, 5001, &format!("{PREFIX}edge-0"), true).await;
    make_vm(&pve, 5002, &format!("{PREFIX}edge-1"), true).await;
    let upid = pve.node("pve1").qemu(5002).start().await.unwrap();
    pve.wait_for_task(&upid).await.unwrap();
    upload_seed(&pve, "pve1", "seed-tfacc-sw1-edge-0-0123abcd.iso").await;
    attach(&pve, 5001, "seed-tfacc-sw1-edge-0-0123abcd.iso").await;
    // A seed left by a create killed before it attached the seed, on another node.
    upload_seed(&pve, "pve2", "seed-tfacc-sw1-edge-2-89abcdef.iso").await;

    // Not the run's: the prefix without the mark, the mark without the prefix, a prefixed
    // seed that a foreign VM uses, a file that is not a seed name.
    make_vm(&pve, 5003, &format!("{PREFIX}foreign"), false).await;
    make_vm(&pve, 5004, "edge-0", true).await;
    upload_seed(&pve, "pve1", "seed-tfacc-sw1-borrowed-00000000.iso").await;
    attach(&pve, 5003, "seed-tfacc-sw1-borrowed-00000000.iso").await;
    upload_seed(&pve, "pve1", "tfacc-sw1-notes.iso").await;

    let before = sim.state().await;
    assert!(vmids(&before).contains(&5001) && vmids(&before).contains(&5002));

    // --check lists what is left and fails while anything is.
    let check = sweeper(&target, &["--prefix", PREFIX, "--check"]);
    let text = String::from_utf8_lossy(&check.stdout).into_owned();
    assert!(!check.status.success(), "{text}");
    assert!(text.contains("2 VMs and 2 seed ISOs left"), "{text}");
    assert_eq!(
        vmids(&sim.state().await),
        vmids(&before),
        "--check deleted something"
    );

    let swept = sweeper(&target, &["--prefix", PREFIX]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&swept.stdout),
        String::from_utf8_lossy(&swept.stderr)
    );
    assert!(swept.status.success(), "{text}");
    assert!(text.contains("2 VMs and 2 seed ISOs deleted"), "{text}");

    let after = sim.state().await;
    let mut expected_vmids: Vec<u64> = vmids(&before)
        .into_iter()
        .filter(|v| ![5001, 5002].contains(v))
        .collect();
    expected_vmids.sort_unstable();
    let mut left = vmids(&after);
    left.sort_unstable();
    assert_eq!(left, expected_vmids, "{after:#}");
    let isos = local_isos(&after);
    assert!(
        isos.iter()
            .all(|f| !f.contains("edge-0-0123abcd") && !f.contains("edge-2")),
        "{isos:?}"
    );
    assert!(
        isos.iter().any(|f| f.contains("seed-tfacc-sw1-borrowed")),
        "{isos:?}"
    );
    assert!(
        isos.iter().any(|f| f.contains("tfacc-sw1-notes")),
        "{isos:?}"
    );

    let check = sweeper(&target, &["--prefix", PREFIX, "--check"]);
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn refuses_a_missing_or_short_prefix_before_any_call() {
    // No endpoint at all: a refused prefix must not get as far as the API.
    let target = Target {
        endpoint: "https://127.0.0.1:1".into(),
        token: "terraform@pve!provider=00000000-0000-4000-8000-000000000000".into(),
        ca_pem: Some(String::new()),
    };
    for args in [&[][..], &["--prefix", "t"][..], &["--prefix", ""][..]] {
        let out = sweeper(&target, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_live_hosts_guard_cleans_up_after_a_failing_test() {
    // The simulator stands in for a live host here: the guard under test is what a live
    // test gets, and the simulator's state shows what is left.
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let pve = client(&target);
    let sim = SimClient::new(&target);
    let host = Host::live(target.clone(), Facts::sim());
    make_vm(&pve, 5001, &host.name("edge-0"), true).await;
    let (unmarked, _) = host.make_unmarked_vm("foreign").await;
    // Another test's VM of the same run: its prefix differs after the run's part.
    make_vm(
        &pve,
        5003,
        &format!("{}other-edge", support::run_prefix()),
        true,
    )
    .await;

    let test = tokio::spawn(async move {
        let _host = host;
        panic!("the test failed half-way");
    });
    assert!(test.await.unwrap_err().is_panic());

    let left = vmids(&sim.state().await);
    assert!(!left.contains(&5001), "the test's VM survived: {left:?}");
    assert!(
        !left.contains(&(unmarked as u64)),
        "the test's unmarked VM survived: {left:?}"
    );
    assert!(
        left.contains(&5003),
        "another test's VM was swept: {left:?}"
    );
    assert!(left.contains(&9000) && left.contains(&100), "{left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_read_of_any_vm_config_deletes_no_seed() {
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let pve = client(&target);
    let sim = SimClient::new(&target);
    // A user's VM (not the run's) boots a seed whose name looks like the run's.
    make_vm(&pve, 4343, "users-vm", false).await;
    upload_seed(&pve, "pve1", "seed-tfacc-sw1-edge-9-0123abcd.iso").await;
    attach(&pve, 4343, "seed-tfacc-sw1-edge-9-0123abcd.iso").await;
    // A seed nobody uses, which a clean run would delete.
    upload_seed(&pve, "pve1", "seed-tfacc-sw1-edge-8-89abcdef.iso").await;
    sim.set_faults(serde_json::json!({"http": [{
        "method": "GET",
        "path_regex": "/qemu/4343/config$",
        "status": 500,
    }]}))
    .await;

    let swept = sweeper(&target, &["--prefix", PREFIX]);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&swept.stdout),
        String::from_utf8_lossy(&swept.stderr)
    );
    assert!(!swept.status.success(), "{text}");
    assert!(text.contains("reading VM 4343"), "{text}");
    assert!(text.contains("no seed ISO was deleted"), "{text}");
    let isos = local_isos(&sim.state().await);
    assert!(
        isos.iter().any(|f| f.contains("edge-9-0123abcd")),
        "the seed a VM boots from was deleted: {isos:?}"
    );
    assert!(
        isos.iter().any(|f| f.contains("edge-8-89abcdef")),
        "a seed was deleted in a run that could not read every VM: {isos:?}"
    );

    // Once every config reads, the unused seed goes and the used one stays.
    sim.set_faults(serde_json::json!({})).await;
    let swept = sweeper(&target, &["--prefix", PREFIX]);
    assert!(
        swept.status.success(),
        "{}",
        String::from_utf8_lossy(&swept.stderr)
    );
    let isos = local_isos(&sim.state().await);
    assert!(
        isos.iter().any(|f| f.contains("edge-9-0123abcd")),
        "{isos:?}"
    );
    assert!(
        !isos.iter().any(|f| f.contains("edge-8-89abcdef")),
        "{isos:?}"
    );
}
