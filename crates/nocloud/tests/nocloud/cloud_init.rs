//! What cloud-init itself makes of our seeds: its NoCloud datasource reads
//! the files extracted from the image, and its part handlers and config
//! merger combine user-data with our vendor-data (`nocloud_boot.py`, run with
//! Debian's cloud-init in a scratch directory; nothing is mounted or run).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    SAMPLE_NETWORK_CONFIG, SAMPLE_USER_DATA, cloud_init_python, full_seed, run, tool, write_file,
};
use nocloud::user_data::{self, UserDataKind};
use serde_json::{Value, json};

const BOOT_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/nocloud/nocloud_boot.py");

struct Tools {
    xorriso: PathBuf,
    python: PathBuf,
}

fn tools(test: &str) -> Option<Tools> {
    Some(Tools {
        xorriso: tool("xorriso", test)?,
        python: cloud_init_python(test)?,
    })
}

/// Builds the seed's image, extracts it with xorriso, and returns what
/// cloud-init concluded from the extracted files.
fn boot(tools: &Tools, seed: &nocloud::Seed) -> Value {
    boot_in(tools, seed, &tempfile::tempdir().unwrap())
}

/// [`boot`] in `dir`, which keeps cloud-init's files afterwards (`work/cloud` is its
/// `/var/lib/cloud`).
fn boot_in(tools: &Tools, seed: &nocloud::Seed, dir: &tempfile::TempDir) -> Value {
    let image = write_file(dir.path(), "seed.iso", &seed.build().unwrap().bytes);
    let extracted = dir.path().join("seed");
    run(Command::new(&tools.xorriso)
        .args(["-osirrox", "on", "-indev"])
        .arg(&image)
        .args(["-extract", "/"])
        .arg(&extracted));
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let output = run(Command::new(&tools.python)
        .arg(BOOT_SCRIPT)
        .arg(&work)
        .arg(&extracted));
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "bad JSON from {BOOT_SCRIPT}: {e}\n{}",
            String::from_utf8_lossy(&output.stdout)
        )
    })
}

/// cloud-init stored our vendor script, so its `scripts_vendor` module will
/// install and start the agent.
fn vendor_script_stored(result: &Value) -> bool {
    result["vendor_scripts"] == json!(["guest-agent.sh"])
        && result["vendor_script_text"] == json!(nocloud::render::GUEST_AGENT_SCRIPT)
}

fn agent_commands() -> Value {
    json!([
        ["systemctl", "enable", "--now", "qemu-guest-agent"],
        ["systemctl", "start", "qemu-guest-agent"]
    ])
}

#[test]
fn cloud_init_reads_identity_and_network_from_the_seed() {
    let Some(tools) = tools("cloud_init_reads_identity_and_network_from_the_seed") else {
        return;
    };
    let seed = full_seed();
    let built = seed.build().unwrap();
    let result = boot(&tools, &seed);
    assert_eq!(result["datasource"], "DataSourceNoCloud", "{result}");
    assert_eq!(result["instance_id"], json!(built.instance_id));
    assert_eq!(result["hostname"], "edge-0");
    assert_eq!(
        nocloud::network_config::validate(SAMPLE_NETWORK_CONFIG),
        Ok(nocloud::network_config::NetworkConfigKind::Version2)
    );
    assert_eq!(
        result["network_config"],
        json!({"version": 2, "ethernets": {"eth0": {"match": {"name": "e*"}, "dhcp4": true}}})
    );
}

#[test]
fn vendor_data_alone_installs_the_agent_through_both_parts() {
    let Some(tools) = tools("vendor_data_alone_installs_the_agent_through_both_parts") else {
        return;
    };
    let result = boot(
        &tools,
        &nocloud::Seed::new("edge-3", "pve1/105").user_data("#cloud-config\nwrite_files: []\n"),
    );
    assert_eq!(result["packages"], json!(["qemu-guest-agent"]), "{result}");
    assert_eq!(result["runcmd"], agent_commands(), "{result}");
    assert!(vendor_script_stored(&result), "{result}");
}

#[test]
fn a_seed_without_user_data_still_boots_with_the_agent() {
    let Some(tools) = tools("a_seed_without_user_data_still_boots_with_the_agent") else {
        return;
    };
    // NoCloud requires a user-data file; the builder writes an empty one.
    let result = boot(&tools, &nocloud::Seed::new("edge-4", "pve1/106"));
    assert_eq!(result["datasource"], "DataSourceNoCloud", "{result}");
    assert_eq!(result["packages"], json!(["qemu-guest-agent"]), "{result}");
    assert!(vendor_script_stored(&result), "{result}");
}

#[test]
fn user_data_lists_replace_ours_but_the_vendor_script_remains() {
    let Some(tools) = tools("user_data_lists_replace_ours_but_the_vendor_script_remains") else {
        return;
    };
    // SAMPLE_USER_DATA has its own `packages` and `runcmd`; cloud-init lets
    // them replace the cloud-config part's lists, which is why the vendor
    // script exists.
    let result = boot(&tools, &full_seed());
    assert_eq!(result["packages"], json!(["haproxy"]), "{result}");
    assert_eq!(
        result["runcmd"],
        json!([["systemctl", "restart", "haproxy"]]),
        "{result}"
    );
    assert_eq!(result["write_files"][0]["path"], "/etc/motd", "{result}");
    assert!(vendor_script_stored(&result), "{result}");
}

#[test]
fn merge_how_in_vendor_data_does_not_survive_the_merge() {
    let Some(tools) = tools("merge_how_in_vendor_data_does_not_survive_the_merge") else {
        return;
    };
    // The tempting fix, shown not to work: cloud-init strips merge_how from
    // vendor-data before merging it under user-data.
    let vendor = "#cloud-config\nmerge_how:\n  - name: list\n    settings: [append]\n  - name: \
        dict\n    settings: [no_replace, recurse_list]\npackages: [qemu-guest-agent]\n";
    let result = boot(&tools, &full_seed().vendor_data(vendor));
    assert_eq!(result["packages"], json!(["haproxy"]), "{result}");
}

#[test]
fn script_user_data_runs_beside_the_agent_vendor_data() {
    let Some(tools) = tools("script_user_data_runs_beside_the_agent_vendor_data") else {
        return;
    };
    let script = "#!/bin/sh\necho configured > /run/proxy-ready\n";
    assert_eq!(
        user_data::validate(script).unwrap().kind,
        UserDataKind::Script
    );
    let result = boot(
        &tools,
        &nocloud::Seed::new("edge-1", "pve1/102").user_data(script),
    );
    assert_eq!(result["packages"], json!(["qemu-guest-agent"]), "{result}");
    assert_eq!(result["runcmd"], agent_commands(), "{result}");
    // The user's script is stored to run in the final stage, after ours.
    assert_eq!(result["user_scripts"], json!(["part-001"]), "{result}");
    assert!(vendor_script_stored(&result), "{result}");
}

#[test]
fn mime_multipart_user_data_is_merged_too() {
    let test = "mime_multipart_user_data_is_merged_too";
    let (Some(tools), Some(cloud_init)) = (tools(test), tool("cloud-init", test)) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_file(dir.path(), "config", SAMPLE_USER_DATA.as_bytes());
    let script = write_file(dir.path(), "script", b"#!/bin/sh\ntrue\n");
    let mime = run(Command::new(cloud_init)
        .args(["devel", "make-mime", "-a"])
        .arg(attachment(&config, "cloud-config"))
        .arg("-a")
        .arg(attachment(&script, "x-shellscript")));
    let mime = String::from_utf8(mime.stdout).unwrap();
    assert_eq!(
        user_data::validate(&mime).unwrap().kind,
        UserDataKind::MimeMultipart
    );
    let result = boot(
        &tools,
        &nocloud::Seed::new("edge-2", "pve1/103").user_data(mime),
    );
    assert_eq!(result["packages"], json!(["haproxy"]), "{result}");
    assert_eq!(
        result["user_scripts"].as_array().map(Vec::len),
        Some(1),
        "{result}"
    );
    assert!(vendor_script_stored(&result), "{result}");
}

fn attachment(path: &Path, kind: &str) -> String {
    format!("{}:{kind}", path.display())
}

#[test]
fn validator_agrees_with_cloud_init_on_turning_vendor_data_off() {
    let Some(tools) = tools("validator_agrees_with_cloud_init_on_turning_vendor_data_off") else {
        return;
    };
    let cases = [
        "vendor_data: {enabled: false}",
        "vendor_data: {enabled: true}",
        "vendor_data: {enabled: 'no'}",
        "vendor_data: {enabled: Yes}",
        "vendor_data: {enabled: \"on\"}",
        "vendor_data: {enabled: 0}",
        "vendor_data: {prefix: []}",
        "vendor_data: false",
        "write_files: [{path: /x, content: 'vendor_data: false'}]",
    ];
    for case in cases {
        let text = format!("#cloud-config\n{case}\n");
        let ours = user_data::validate(&text).unwrap();
        let result = boot(
            &tools,
            &nocloud::Seed::new("edge", "pve1/104").user_data(text),
        );
        assert_eq!(
            !ours.disables_vendor_data,
            vendor_script_stored(&result),
            "case {case:?}: validator says disables={}, cloud-init: {result}",
            ours.disables_vendor_data,
        );
    }
}

#[test]
fn validator_agrees_with_pyyaml_on_cloud_config_syntax() {
    let Some(tools) = tools("validator_agrees_with_pyyaml_on_cloud_config_syntax") else {
        return;
    };
    let documents = [
        "a: 1\n",
        "",
        "packages: [a, b\n",
        "a: 'unclosed\n",
        "- a\n- b\n",
        "just text\n",
        "a: 1\n---\nb: 2\n",
        "a: &x {b: 1}\nc: *x\n",
        "a:\n  - b: 1\n    c: [1, {d: 2}]\n",
        "a: b: c\n",
        "key: value\n  bad indent: 1\n",
        "runcmd:\n  - |\n    echo 'multi\n    line'\n",
        "? complex\n: key\n",
        "a: \"\\x41\"\n",
        "{a: 1, b: [2, 3]}\n",
        "a: 1\n...\n",
        "\tx: 1\n",
        "a:\t1\n",
        "a: [1,\t2]\n",
        "a: \"x\ty\"\n",
        "a: |\n  x\n  \ty\n",
        "a: 1 # c\tx\n",
        "a: x\n  \ty\n",
        "a: @b\n",
        "a: `b\n",
        "a: *undefined\n",
        "a: !custom x\n",
        "a: ! x\n",
        "a: !<tag:yaml.org,2002:str> x\n",
        "a: !<tag:example.com,2000:x> y\n",
        "a: !!set {x, y}\n",
        "a: !!timestamp 2001-12-14\n",
        "!!map {a: 1}\n",
        "a: !!binary aGk=\n",
        "a: !!str 1\n",
        "a: !!python/name:os.system\n",
        "%YAML 1.2\n---\na: 1\n",
        "a: 1\na: 2\n",
        "a: {b: c\n",
        "a: 'it''s'\n",
        "a:\n- b\n- c\n",
    ];
    // cloud-init loads cloud-config with yaml.safe_load and uses it only if
    // it is a mapping (or empty).
    let probe = "import json, sys, yaml\nfor doc in json.load(sys.stdin):\n    try:\n        v = \
        yaml.safe_load(doc)\n        print(json.dumps(v is None or isinstance(v, \
        dict)))\n    except yaml.YAMLError:\n        print('false')\n";
    let dir = tempfile::tempdir().unwrap();
    let input = write_file(
        dir.path(),
        "docs.json",
        serde_json::to_string(&documents[..]).unwrap().as_bytes(),
    );
    let output = run(Command::new(&tools.python)
        .args(["-c", probe])
        .stdin(std::fs::File::open(input).unwrap()));
    let verdicts: Vec<bool> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|l| l == "true")
        .collect();
    assert_eq!(verdicts.len(), documents.len());
    for (document, pyyaml_accepts) in documents.iter().zip(verdicts) {
        let ours = user_data::validate(&format!("#cloud-config\n{document}"));
        assert_eq!(
            ours.is_ok(),
            pyyaml_accepts,
            "document {document:?}: ours {ours:?}"
        );
    }
}

/// What cloud-init made of the boot after the seed was taken away (`later_boot` in
/// `nocloud_boot.py`): the cached instance trusted, the same instance id and network config.
fn later_boot_is_quiet(result: &Value, instance_id: &str) -> bool {
    let later = &result["later_boot"];
    later["existing"] == "trust"
        && later["datasource"] == "DataSourceNoCloud"
        && later["restored_from_cache"] == json!(true)
        && later["new_instance"] == json!(false)
        && later["instance_id"] == json!(instance_id)
        && later["network_config"] == result["network_config"]
}

#[test]
fn a_detached_guest_boots_again_as_the_same_instance() {
    let Some(tools) = tools("a_detached_guest_boots_again_as_the_same_instance") else {
        return;
    };
    let seed = full_seed();
    let result = boot(&tools, &seed);
    assert_eq!(result["manual_cache_clean"], json!(true), "{result}");
    // Written at the end of the first boot, for ds-identify on the next.
    assert_eq!(result["manual_clean_marker"], json!(true), "{result}");
    assert!(
        later_boot_is_quiet(&result, &seed.build().unwrap().instance_id),
        "{result}"
    );
}

#[test]
fn user_write_files_leaves_the_detached_seed_setting_alone() {
    let Some(tools) = tools("user_write_files_leaves_the_detached_seed_setting_alone") else {
        return;
    };
    // A user cloud-config whose write_files (and every other list of ours) replaces the
    // vendor-data's keys of the same name: the top-level manual_cache_clean is not among them.
    let user_data = "#cloud-config\nwrite_files:\n  - path: /etc/proxy.conf\n    content: \
        listen 3128\n  - path: /etc/cloud/cloud.cfg.d/50-user.cfg\n    content: 'a: 1'\n\
        packages: [squid]\nruncmd: [[systemctl, restart, squid]]\n";
    assert_eq!(
        user_data::validate(user_data).unwrap().kind,
        UserDataKind::CloudConfig
    );
    let seed = nocloud::Seed::new("edge-5", "pve1/107").user_data(user_data);
    let result = boot(&tools, &seed);
    assert_eq!(result["write_files"].as_array().map(Vec::len), Some(2));
    assert_eq!(result["packages"], json!(["squid"]), "{result}");
    assert_eq!(result["manual_cache_clean"], json!(true), "{result}");
    assert_eq!(result["manual_clean_marker"], json!(true), "{result}");
    assert!(vendor_script_stored(&result), "{result}");
    assert!(
        later_boot_is_quiet(&result, &seed.build().unwrap().instance_id),
        "{result}"
    );
}

#[test]
fn without_the_setting_a_detached_guest_loses_its_datasource() {
    let test = "without_the_setting_a_detached_guest_loses_its_datasource";
    let Some(tools) = tools(test) else {
        return;
    };
    // The control, so the tests above can fail: the guest-agent vendor-data alone (what
    // seeds carried before), and a user who turns the setting off. cloud-init then checks
    // its cache against the datasource, finds none and drops the instance (on a real guest
    // with `None` on the list: a new instance, fallback network config).
    let old = full_seed().vendor_data(nocloud::render::vendor_data_guest_agent());
    let turned_off = nocloud::Seed::new("edge-6", "pve1/108")
        .user_data("#cloud-config\nmanual_cache_clean: false\nwrite_files: []\n");
    for seed in [old, turned_off] {
        let result = boot(&tools, &seed);
        assert_ne!(result["manual_cache_clean"], json!(true), "{result}");
        assert_eq!(result["manual_clean_marker"], json!(false), "{result}");
        assert_eq!(result["later_boot"]["existing"], "check", "{result}");
        assert_eq!(result["later_boot"]["datasource"], Value::Null, "{result}");
    }
}

/// Where distributions install ds-identify (Debian and Ubuntu, then Fedora and SUSE).
fn ds_identify(test: &str) -> Option<PathBuf> {
    let found = [
        "/usr/lib/cloud-init/ds-identify",
        "/usr/libexec/cloud-init/ds-identify",
    ]
    .into_iter()
    .map(PathBuf::from)
    .find(|p| p.is_file());
    if found.is_none() {
        common::skipped(
            test,
            "ds-identify is not installed (apt-get install -y cloud-init)",
        );
    }
    found
}

/// Runs ds-identify as the systemd generator does on the boot after the seed was detached:
/// `var_lib_cloud` is the guest's `/var/lib/cloud`, the guest is a PVE VM (QEMU's DMI
/// strings) whose only filesystem is its root disk (stand-ins for `systemd-detect-virt` and
/// `blkid`), and its cloud.cfg lists several datasources and None, as Debian's does. Returns
/// whether cloud-init would run (exit 0) and the config ds-identify wrote for it.
fn ds_identify_after_detach(ds_identify: &Path, var_lib_cloud: &Path) -> (bool, String) {
    let root = tempfile::tempdir().unwrap();
    let bin = root.path().join("stand-ins");
    let dmi = root.path().join("sys/class/dmi/id");
    for dir in [
        root.path().join("etc/cloud"),
        root.path().join("proc"),
        bin.clone(),
        dmi.clone(),
    ] {
        std::fs::create_dir_all(dir).unwrap();
    }
    for (name, value) in [
        ("sys_vendor", "QEMU"),
        ("product_name", "Standard PC (i440FX + PIIX, 1996)"),
        ("board_name", ""),
        ("chassis_asset_tag", ""),
        ("product_serial", ""),
        ("product_uuid", "6a1f0c4e-8d1b-4f7a-9c1e-2b3d4e5f6a7b"),
    ] {
        write_file(&dmi, name, format!("{value}\n").as_bytes());
    }
    // Not a single datasource plus None: with that list ds-identify enables cloud-init
    // whatever it finds (and cloud-init then falls back to None: a new instance).
    write_file(
        &root.path().join("etc/cloud"),
        "cloud.cfg",
        b"datasource_list: [ NoCloud, ConfigDrive, OpenStack, None ]\n",
    );
    write_file(&root.path().join("proc"), "cmdline", b"root=/dev/vda1 ro\n");
    for (name, output) in [
        ("systemd-detect-virt", "kvm"),
        ("blkid", "DEVNAME=/dev/vda1\nLABEL=root\nTYPE=ext4"),
    ] {
        let path = write_file(
            &bin,
            name,
            format!("#!/bin/sh\nprintf '%s\\n' '{output}'\n").as_bytes(),
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let status = Command::new(ds_identify)
        .arg("--force")
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("PATH_ROOT", root.path())
        .env("PATH_VAR_LIB_CLOUD", var_lib_cloud)
        .env("DI_LOG", root.path().join("ds-identify.log"))
        .status()
        .unwrap();
    let written =
        std::fs::read_to_string(root.path().join("run/cloud-init/cloud.cfg")).unwrap_or_default();
    let log = std::fs::read_to_string(root.path().join("ds-identify.log")).unwrap_or_default();
    (
        status.success(),
        format!("{written}\n--- ds-identify.log:\n{log}"),
    )
}

#[test]
fn ds_identify_keeps_cloud_init_on_for_a_detached_guest() {
    let test = "ds_identify_keeps_cloud_init_on_for_a_detached_guest";
    let (Some(tools), Some(ds_identify)) = (tools(test), ds_identify(test)) else {
        return;
    };
    let ours = full_seed();
    let old = full_seed().vendor_data(nocloud::render::vendor_data_guest_agent());
    for (seed, stays_on) in [(ours, true), (old, false)] {
        let dir = tempfile::tempdir().unwrap();
        let result = boot_in(&tools, &seed, &dir);
        let (enabled, written) =
            ds_identify_after_detach(&ds_identify, &dir.path().join("work/cloud"));
        assert_eq!(enabled, stays_on, "{written}\n{result}");
        // With the marker ds-identify leaves the datasource list alone (the cache decides);
        // without it, it finds no seed and turns cloud-init off for the boot.
        assert_eq!(
            written.contains("# manual_cache_clean."),
            stays_on,
            "{written}"
        );
    }
}
