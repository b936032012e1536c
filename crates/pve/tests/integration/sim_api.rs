//! Every typed call against the simulator: reads of the default world, then a whole proxy-VM
//! lifecycle (clone, seed upload, config, resize, start, agent, stop, cleanup, destroy).

use crate::common;

use std::time::Duration;

use crate::common::{agent_seed, poll_until};
use pve::qemu::{CloneRequest, ConfigUpdate, DestroyOptions, Qemu, VmConfig};
use pve::storage::{Storage, Upload};
use pve::wire::{ByteSize, CdromDrive, NetConfig};
use pve::{AgentFailure, Client, ErrorKind, TaskExit};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_the_default_world() {
    let env = common::start().await;
    let c = &env.client;

    let version = c.version().await.unwrap();
    assert_eq!(version.major(), Some(9), "{version:?}");

    let nodes = c.nodes().await.unwrap();
    let mut names: Vec<_> = nodes.iter().map(|n| n.node.as_str()).collect();
    names.sort();
    assert_eq!(names, ["pve1", "pve2", "pve3"]);
    assert!(nodes.iter().all(|n| n.is_online()));
    let status = c.node("pve2").status().await.unwrap();
    assert!(
        status
            .pveversion
            .unwrap_or_default()
            .starts_with("pve-manager/9")
    );

    let vms = c.cluster().vm_resources().await.unwrap();
    let template = vms
        .iter()
        .find(|v| v.vmid == 9000)
        .expect("template listed");
    assert_eq!(template.node, "pve1");
    assert!(vms.iter().any(|v| v.vmid == 101 && v.node == "pve2"));
    let legacy = vms.iter().find(|v| v.vmid == 102).unwrap();
    assert_eq!(legacy.tag_list(), ["legacy", "storage"]);

    let gitlab = c
        .cluster()
        .locate_vm(101)
        .await
        .unwrap()
        .expect("VM 101 exists");
    assert_eq!(gitlab.node, "pve2");
    assert!(c.cluster().locate_vm(4321).await.unwrap().is_none());

    assert_eq!(c.cluster().next_id(None).await.unwrap(), 103);
    assert_eq!(c.cluster().next_id(Some(4242)).await.unwrap(), 4242);
    let taken = c.cluster().next_id(Some(100)).await.unwrap_err();
    assert_eq!(taken.kind(), ErrorKind::AlreadyExists, "{taken}");
    assert!(taken.param_errors()["vmid"].contains("already exists"));

    let iso_storages = c.node("pve1").storages(Some("iso")).await.unwrap();
    let seeds = iso_storages
        .iter()
        .find(|s| s.storage == "proxy-seeds")
        .expect("proxy-seeds accepts iso");
    assert!(seeds.accepts("iso") && seeds.active && seeds.enabled);
    assert!(iso_storages.iter().all(|s| s.accepts("iso")));
    let st = c.node("pve3").storage("vmdata").status().await.unwrap();
    assert!(st.shared && st.accepts("images"));
    let missing = c.node("pve1").storage("nope").status().await.unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");
    let missing = c
        .node("pve1")
        .storage("nope")
        .content(None)
        .await
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::NotFound, "{missing}");

    let perms = c.permissions(None).await.unwrap();
    assert!(
        pve::access::has_privilege(&perms, "/vms/100", "VM.Audit"),
        "{perms:?}"
    );
    let pools = c.pools().await.unwrap();
    assert!(pools.iter().any(|p| p.poolid == "proxies"));

    let dns = c.node("pve1").qemu(100);
    let st = dns.status().await.unwrap();
    assert!(st.is_running() && st.agent);
    assert_eq!(st.name.as_deref(), Some("dns1"));
    let cfg = dns.config().await.unwrap();
    assert_eq!((cfg.cores(), cfg.memory_mib()), (2, 4096));
    assert_eq!(cfg.boot_disk().unwrap().1.size, Some(ByteSize::gib(32)));

    let gone = c.node("pve1").qemu(4321).config().await.unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::NotFound, "{gone}");
    let wrong_node = c.node("pve2").qemu(100).status().await.unwrap_err();
    assert_eq!(wrong_node.kind(), ErrorKind::NotFound, "{wrong_node}");
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn whole_proxy_vm_lifecycle() {
    let env = common::start().await;
    let c = &env.client;
    let node = c.node("pve1");
    let (vmid, cloned) = clone_the_template(c).await;
    let vm = node.qemu(vmid);
    let storage = node.storage("proxy-seeds");
    upload_the_seed(c, storage).await;
    let cfg = configure_keeping_the_mac(c, vm, &cloned).await;
    grow_the_disk_and_refuse_to_shrink_it(c, vm, &cfg).await;
    start_until_the_agent_answers(c, vm).await;
    leave_a_cores_change_pending(vm).await;
    shut_down_then_stop(c, vm).await;
    clean_up_seed_and_vm(c, vm, storage, vmid).await;

    // The destroy went out with its options in the query string.
    let journal = env.admin.journal().await;
    let destroy = journal
        .iter()
        .find(|e| e.method == "DELETE" && e.path == format!("/nodes/pve1/qemu/{vmid}"))
        .expect("destroy journaled");
    assert_eq!(destroy.params["purge"], "1", "{destroy:?}");
    assert_eq!(destroy.params["destroy-unreferenced-disks"], "1");
    env.shutdown().await;
}

/// A full clone of template 9000 under the next free VMID: its VMID and its first config.
async fn clone_the_template(c: &Client) -> (u32, VmConfig) {
    let node = c.node("pve1");
    let vmid = c.cluster().next_id(None).await.unwrap();
    let mut clone = CloneRequest::full(vmid);
    clone.name = Some("edge-0".into());
    clone.description = Some("managed-by: terraform-provider-proxmox".into());
    let upid = node.qemu(9000).clone_to(&clone).await.unwrap();
    assert_eq!(
        (upid.node(), upid.task_type(), upid.id()),
        ("pve1", "qmclone", "9000")
    );
    let done = c.wait_for_task(&upid).await.unwrap();
    assert_eq!(done.exit, TaskExit::Ok);

    let vm = node.qemu(vmid);
    let cfg = vm.config().await.unwrap();
    assert_eq!(cfg.name().as_deref(), Some("edge-0"));
    assert_eq!(
        cfg.description().as_deref(),
        Some("managed-by: terraform-provider-proxmox")
    );
    assert!(cfg.lock().is_none() && !cfg.is_template());
    (vmid, cfg)
}

/// Seed upload: multipart, exact length, overwrite on re-upload.
async fn upload_the_seed(c: &Client, storage: Storage<'_>) {
    let seed = agent_seed("edge-0");
    let upid = storage
        .upload(Upload::iso("edge-0-seed.iso", seed.clone()))
        .await
        .unwrap();
    assert_eq!((upid.task_type(), upid.id()), ("imgcopy", ""));
    c.wait_for_task(&upid).await.unwrap();
    let again = storage
        .upload(Upload::iso("edge-0-seed.iso", seed.clone()))
        .await
        .unwrap();
    c.wait_for_task(&again).await.unwrap();
    let listed = storage.content(Some("iso")).await.unwrap();
    let item = listed
        .iter()
        .find(|i| i.volid == "proxy-seeds:iso/edge-0-seed.iso")
        .expect("seed listed");
    assert_eq!(item.size, Some(seed.len() as u64));
    let info = storage.volume("iso/edge-0-seed.iso").await.unwrap();
    assert_eq!(info.size, Some(seed.len() as u64));
    let bad_name = storage
        .upload(Upload::iso("seed.txt", seed.clone()))
        .await
        .unwrap_err();
    assert_eq!(bad_name.kind(), ErrorKind::Invalid, "{bad_name}");
    assert_eq!(bad_name.param_errors()["filename"], "wrong file extension");
}

/// Config: keep the MAC while moving to a VLAN; POST config is a task; a cdrom without
/// media=cdrom is refused. Returns the config after the PUT.
async fn configure_keeping_the_mac(c: &Client, vm: Qemu<'_>, cloned: &VmConfig) -> VmConfig {
    let template_mac = cloned.net(0).unwrap().unwrap().mac.unwrap();
    let mut net: NetConfig = cloned.net(0).unwrap().unwrap();
    net.tag = Some(4);
    let update = ConfigUpdate::new()
        .cores(2)
        .memory_mib(2048)
        .agent(true)
        .cdrom("ide2", &CdromDrive::iso("proxy-seeds", "edge-0-seed.iso"))
        .net(0, &net)
        .tags(&["proxy", "edge"]);
    vm.update_config(&update).await.unwrap();
    let cfg = vm.config().await.unwrap();
    assert_eq!((cfg.cores(), cfg.memory_mib()), (2, 2048));
    assert!(cfg.agent_enabled());
    let net = cfg.net(0).unwrap().unwrap();
    assert_eq!(net.mac.as_deref(), Some(template_mac.as_str()));
    assert_eq!(net.tag, Some(4));
    assert_eq!(cfg.tags(), ["edge", "proxy"]);
    assert_eq!(
        cfg.cdrom("ide2").unwrap().unwrap().iso_file(),
        Some("edge-0-seed.iso")
    );

    // POST config is a task.
    let upid = vm
        .update_config_async(&ConfigUpdate::new().onboot(true))
        .await
        .unwrap();
    assert_eq!(upid.task_type(), "qmconfig");
    c.wait_for_task(&upid).await.unwrap();
    assert_eq!(
        vm.config().await.unwrap().get_str("onboot").as_deref(),
        Some("1")
    );

    // A cdrom without media=cdrom is refused with the per-parameter message.
    let invalid = vm
        .update_config(&ConfigUpdate::new().set("ide2", "proxy-seeds:iso/edge-0-seed.iso"))
        .await
        .unwrap_err();
    assert_eq!(invalid.kind(), ErrorKind::Invalid);
    assert!(invalid.param_errors().contains_key("ide2"), "{invalid}");
    cfg
}

/// Grow the boot disk; shrinking is a task error.
async fn grow_the_disk_and_refuse_to_shrink_it(c: &Client, vm: Qemu<'_>, cfg: &VmConfig) {
    let (disk, drive) = cfg.boot_disk().unwrap();
    assert_eq!(drive.size, Some(ByteSize::gib(4)));
    let upid = vm.resize(&disk, ByteSize::gib(8)).await.unwrap();
    c.wait_for_task(&upid).await.unwrap();
    assert_eq!(
        vm.config().await.unwrap().boot_disk().unwrap().1.size,
        Some(ByteSize::gib(8))
    );
    let upid = vm.resize(&disk, ByteSize::gib(4)).await.unwrap();
    let shrink = c.wait_for_task(&upid).await.unwrap_err();
    let failure = shrink.task_failure().expect("task failure");
    assert!(
        failure
            .exitstatus
            .contains("shrinking disks is not supported"),
        "{shrink}"
    );
    assert!(
        failure.log_tail.iter().any(|l| l.starts_with("TASK ERROR")),
        "{:?}",
        failure.log_tail
    );
    assert_eq!(shrink.kind(), ErrorKind::Permanent);
}

/// Start, then the agent answers once the guest has booted.
async fn start_until_the_agent_answers(c: &Client, vm: Qemu<'_>) {
    let upid = vm.start().await.unwrap();
    c.wait_for_task(&upid).await.unwrap();
    assert!(vm.status().await.unwrap().is_running());
    let interfaces = poll_until("a guest-agent address", Duration::from_secs(10), || async {
        match vm.agent().network_get_interfaces().await {
            Ok(ifs) => Some(ifs),
            Err(e) if e.agent_failure() == Some(AgentFailure::NotRunning) => None,
            Err(e) => panic!("agent: {e}"),
        }
    })
    .await;
    let addresses: Vec<_> = interfaces
        .iter()
        .flat_map(|i| &i.ip_addresses)
        .filter(|ip| ip.is_usable_ipv4())
        .collect();
    assert!(!addresses.is_empty(), "{interfaces:?}");
    vm.agent().ping().await.unwrap();
    assert!(!vm.agent().get_host_name().await.unwrap().is_empty());
}

/// A cores change on a running VM without hotplug stays pending.
async fn leave_a_cores_change_pending(vm: Qemu<'_>) {
    vm.update_config(&ConfigUpdate::new().cores(4))
        .await
        .unwrap();
    let pending = vm.pending().await.unwrap();
    let cores = pending.iter().find(|p| p.key == "cores").unwrap();
    assert!(cores.is_pending(), "{cores:?}");
    assert_eq!(vm.config_current().await.unwrap().cores(), 2);
}

/// Graceful shutdown, then a hard stop of the stopped VM is still OK; shutting down a
/// stopped VM is refused synchronously.
async fn shut_down_then_stop(c: &Client, vm: Qemu<'_>) {
    let upid = vm.shutdown(Some(30), true).await.unwrap();
    assert_eq!(upid.task_type(), "qmshutdown");
    c.wait_for_task(&upid).await.unwrap();
    assert!(!vm.status().await.unwrap().is_running());
    let upid = vm.stop().await.unwrap();
    c.wait_for_task(&upid).await.unwrap();
    let not_running = vm.shutdown(None, false).await.unwrap_err();
    assert_eq!(not_running.kind(), ErrorKind::Permanent, "{not_running}");
    assert!(
        not_running.message().contains("not running"),
        "{not_running}"
    );
    let no_agent = vm.agent().ping().await.unwrap_err();
    assert_eq!(no_agent.kind(), ErrorKind::Permanent, "{no_agent}");
}

/// Cleanup: the seed (idempotent), then the VM.
async fn clean_up_seed_and_vm(c: &Client, vm: Qemu<'_>, storage: Storage<'_>, vmid: u32) {
    for _ in 0..2 {
        let upid = storage.delete_volume("iso/edge-0-seed.iso").await.unwrap();
        c.wait_for_task(&upid).await.unwrap();
    }
    assert!(
        !storage
            .content(Some("iso"))
            .await
            .unwrap()
            .iter()
            .any(|i| i.volid.ends_with("edge-0-seed.iso"))
    );
    let upid = vm
        .destroy(DestroyOptions {
            purge: true,
            destroy_unreferenced_disks: true,
        })
        .await
        .unwrap();
    assert_eq!(upid.task_type(), "qmdestroy");
    c.wait_for_task(&upid).await.unwrap();
    let gone = vm.status().await.unwrap_err();
    assert_eq!(gone.kind(), ErrorKind::NotFound, "{gone}");
    assert!(
        !c.cluster()
            .vm_resources()
            .await
            .unwrap()
            .iter()
            .any(|v| v.vmid == vmid)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_streams_with_exact_length_to_the_named_node() {
    let env = common::start().await;
    let c = &env.client;
    let seed = agent_seed("edge-9");
    let len = seed.len() as u64;
    // Stream the file in small chunks: the length must still be sent up front.
    let chunks: Vec<std::io::Result<bytes::Bytes>> = seed
        .chunks(1000)
        .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
        .collect();
    let upload = Upload {
        content: "iso".into(),
        filename: "edge-9.iso".into(),
        checksum: None,
        body: pve::storage::UploadBody::Stream {
            stream: Box::pin(futures_util::stream::iter(chunks)),
            len,
        },
    };
    let upid = c
        .node("pve3")
        .storage("proxy-seeds")
        .upload(upload)
        .await
        .unwrap();
    // The task runs on pve3 and is polled there.
    assert_eq!(upid.node(), "pve3");
    c.wait_for_task(&upid).await.unwrap();
    let on_pve3 = c
        .node("pve3")
        .storage("proxy-seeds")
        .content(Some("iso"))
        .await
        .unwrap();
    assert!(
        on_pve3
            .iter()
            .any(|i| i.volid == "proxy-seeds:iso/edge-9.iso" && i.size == Some(len))
    );
    // proxy-seeds is node-local: pve1 does not see it.
    let on_pve1 = c
        .node("pve1")
        .storage("proxy-seeds")
        .content(Some("iso"))
        .await
        .unwrap();
    assert!(!on_pve1.iter().any(|i| i.volid.ends_with("edge-9.iso")));
    env.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_network_lists_bridges() {
    let env = common::start().await;
    let bridges = env
        .client
        .node("pve1")
        .network(Some("any_bridge"))
        .await
        .unwrap();
    assert!(
        bridges.iter().any(|b| b.iface == "vmbr0" && b.active),
        "{bridges:?}"
    );
    assert!(
        bridges
            .iter()
            .all(|b| b.iface_type.to_lowercase().contains("bridge"))
    );
    env.shutdown().await;
}
