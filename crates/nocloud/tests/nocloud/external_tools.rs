//! Our images, read by tools we did not write: xorriso (libisofs), isoinfo
//! (genisoimage), bsdtar (libarchive), blkid (util-linux, what cloud-init
//! uses to find `cidata`) and `cloud-init schema`. No mounting, no root.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use common::{full_seed, run, stdout, tool, write_file};

const NAMES: [&str; 4] = ["meta-data", "network-config", "user-data", "vendor-data"];

/// The four files as the builder meant them.
fn expected_files(seed: &nocloud::Seed) -> BTreeMap<&'static str, Vec<u8>> {
    let (files, _) = seed.files();
    BTreeMap::from([
        ("meta-data", files.meta_data),
        ("network-config", files.network_config.unwrap()),
        ("user-data", files.user_data),
        ("vendor-data", files.vendor_data.unwrap()),
    ])
}

#[test]
fn xorriso_sees_label_names_and_contents() {
    let Some(xorriso) = tool("xorriso", "xorriso_sees_label_names_and_contents") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let seed = full_seed();
    let image = write_file(dir.path(), "seed.iso", &seed.build().unwrap().bytes);

    let info = stdout(&run(Command::new(&xorriso)
        .arg("-indev")
        .arg(&image)
        .args(["-pvd_info", "-find", "/", "-type", "f"])));
    assert!(
        info.lines().any(|l| l.trim() == "Volume Id    : cidata"),
        "{info}"
    );
    let listed: Vec<&str> = info
        .lines()
        .filter_map(|l| l.strip_prefix("'/")?.strip_suffix('\''))
        .collect();
    assert_eq!(listed, NAMES, "{info}");

    let out = dir.path().join("extracted");
    run(Command::new(&xorriso)
        .args(["-osirrox", "on", "-indev"])
        .arg(&image)
        .args(["-extract", "/"])
        .arg(&out));
    assert_extracted_equal(&out, &expected_files(&seed));
}

#[test]
fn xorriso_checks_the_image_without_complaint() {
    let Some(xorriso) = tool("xorriso", "xorriso_checks_the_image_without_complaint") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let image = write_file(dir.path(), "seed.iso", &full_seed().build().unwrap().bytes);
    // -return_with WARNING: any warning while loading the tree or reading
    // every block (-check_media) fails the command; a truncated image does.
    let output = run(Command::new(&xorriso)
        .args(["-return_with", "WARNING", "32", "-indev"])
        .arg(&image)
        .args(["-check_media", "--", "-toc"]));
    let text = String::from_utf8_lossy(&output.stderr).into_owned() + &stdout(&output);
    let seed_sectors = full_seed().build().unwrap().bytes.len() / 2048;
    assert!(
        text.contains(&format!("1 session, {seed_sectors} data blocks")),
        "xorriso should see the whole volume:\n{text}"
    );
}

#[test]
fn isoinfo_reads_rock_ridge_joliet_and_plain_trees() {
    let Some(isoinfo) = tool("isoinfo", "isoinfo_reads_rock_ridge_joliet_and_plain_trees") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let seed = full_seed();
    let image = write_file(dir.path(), "seed.iso", &seed.build().unwrap().bytes);

    let descriptor = stdout(&run(Command::new(&isoinfo).arg("-d").arg("-i").arg(&image)));
    assert!(descriptor.contains("Volume id: cidata\n"), "{descriptor}");
    assert!(
        descriptor.contains("Joliet with UCS level 3 found"),
        "{descriptor}"
    );
    assert!(
        descriptor.contains("Rock Ridge signatures version 1 found"),
        "{descriptor}"
    );

    let expected = expected_files(&seed);
    for (flag, tree) in [("-R", "Rock Ridge"), ("-J", "Joliet")] {
        let listing = stdout(&run(Command::new(&isoinfo)
            .args([flag, "-f", "-i"])
            .arg(&image)));
        let names: Vec<&str> = listing.lines().map(|l| l.trim_start_matches('/')).collect();
        assert_eq!(names, NAMES, "{tree} listing:\n{listing}");
        for (name, bytes) in &expected {
            let extracted = run(Command::new(&isoinfo)
                .args([flag, "-i"])
                .arg(&image)
                .args(["-x", &format!("/{name}")]));
            assert_eq!(&extracted.stdout, bytes, "{name} through {tree}");
        }
    }
    // Without extensions the level-1 names show, which is why we write both.
    let plain = stdout(&run(Command::new(&isoinfo).args(["-f", "-i"]).arg(&image)));
    assert_eq!(
        plain.lines().collect::<Vec<_>>(),
        [
            "/META_DAT.;1",
            "/NETWORK_.;1",
            "/USER_DAT.;1",
            "/VENDOR_D.;1"
        ],
        "{plain}"
    );
}

#[test]
fn isovfy_finds_no_errors() {
    // genisoimage's structure checker: directory records, extents, sizes.
    let Some(isovfy) = tool("isovfy", "isovfy_finds_no_errors") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    for (name, seed) in [
        ("full", full_seed()),
        (
            "minimal",
            nocloud::Seed::new("m", "1").without_vendor_data(),
        ),
    ] {
        let image = write_file(dir.path(), name, &seed.build().unwrap().bytes);
        let report = stdout(&run(Command::new(&isovfy).arg(&image)));
        assert!(report.contains("No errors found"), "{name}: {report}");
    }
}

#[test]
fn multi_sector_files_round_trip() {
    let Some(isoinfo) = tool("isoinfo", "multi_sector_files_round_trip") else {
        return;
    };
    // 300 KiB of user-data spanning many sectors, ending mid-sector.
    let big: Vec<u8> = (0..300 * 1024 + 7).map(|i| b'a' + (i % 26) as u8).collect();
    let mut user_data = b"#!/bin/sh\n# ".to_vec();
    user_data.extend_from_slice(&big);
    let seed = nocloud::Seed::new("big", "pve1/200").user_data(user_data.clone());
    let dir = tempfile::tempdir().unwrap();
    let image = write_file(dir.path(), "seed.iso", &seed.build().unwrap().bytes);
    let (files, _) = seed.files();
    for (name, expected) in [
        ("user-data", &user_data),
        ("vendor-data", files.vendor_data.as_ref().unwrap()),
    ] {
        let extracted = run(Command::new(&isoinfo)
            .args(["-R", "-i"])
            .arg(&image)
            .args(["-x", &format!("/{name}")]));
        assert!(
            &extracted.stdout == expected,
            "{name} differs after extraction"
        );
    }
}

#[test]
fn libarchive_reads_rock_ridge_and_joliet() {
    // bsdtar (libarchive) is a third, independent ISO9660 reader.
    let Some(bsdtar) = tool("bsdtar", "libarchive_reads_rock_ridge_and_joliet") else {
        println!("  (bsdtar comes from Debian's libarchive-tools)");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let seed = full_seed();
    let image = write_file(dir.path(), "seed.iso", &seed.build().unwrap().bytes);
    for (options, tree) in [
        ("iso9660:rockridge", "rock-ridge"),
        ("iso9660:!rockridge", "joliet"),
    ] {
        let out = dir.path().join(tree);
        std::fs::create_dir(&out).unwrap();
        run(Command::new(&bsdtar)
            .args(["--options", options, "-xf"])
            .arg(&image)
            .arg("-C")
            .arg(&out));
        assert_extracted_equal(&out, &expected_files(&seed));
    }
}

#[test]
fn blkid_finds_the_cidata_label() {
    // cloud-init's NoCloud finds its seed with `blkid -t LABEL=cidata`.
    let Some(blkid) = tool("blkid", "blkid_finds_the_cidata_label") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let image = write_file(dir.path(), "seed.iso", &full_seed().build().unwrap().bytes);
    let probe = stdout(&run(Command::new(&blkid)
        .args(["-p", "-o", "export"])
        .arg(&image)));
    assert!(probe.lines().any(|l| l == "LABEL=cidata"), "{probe}");
    assert!(probe.lines().any(|l| l == "TYPE=iso9660"), "{probe}");
}

#[test]
fn extracted_cloud_configs_pass_cloud_init_schema() {
    let test = "extracted_cloud_configs_pass_cloud_init_schema";
    let (Some(xorriso), Some(cloud_init), Some(python)) = (
        tool("xorriso", test),
        tool("cloud-init", test),
        tool("python3", test),
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let image = write_file(dir.path(), "seed.iso", &full_seed().build().unwrap().bytes);
    let out = dir.path().join("extracted");
    run(Command::new(&xorriso)
        .args(["-osirrox", "on", "-indev"])
        .arg(&image)
        .args(["-extract", "/"])
        .arg(&out));

    // vendor-data is MIME multipart; Python's email parser takes out its
    // cloud-config parts the way cloud-init does.
    let split = "import email, json, sys\nmsg = email.message_from_file(open(sys.argv[1]))\n\
        parts = [p.get_payload() for p in msg.walk() if p.get_content_type() == \
        'text/cloud-config']\nsys.stdout.write(json.dumps(parts))\n";
    let parts = run(Command::new(&python)
        .args(["-c", split])
        .arg(out.join("vendor-data")));
    let parts: Vec<String> = serde_json::from_slice(&parts.stdout).unwrap();
    assert_eq!(
        parts,
        [
            nocloud::render::GUEST_AGENT_CLOUD_CONFIG,
            nocloud::render::DETACHED_SEED_CLOUD_CONFIG
        ]
    );
    let mut files = vec![out.join("user-data")];
    for (index, part) in parts.iter().enumerate() {
        files.push(write_file(
            dir.path(),
            &format!("vendor-cloud-config-{index}"),
            part.as_bytes(),
        ));
    }

    for file in files {
        let result = run(Command::new(&cloud_init)
            .args(["schema", "--config-file"])
            .arg(&file));
        assert!(
            stdout(&result).contains("Valid cloud-config"),
            "{}: {result:?}",
            file.display()
        );
    }

    // The same check rejects a broken cloud-config, so passing means something.
    let broken = write_file(dir.path(), "broken", b"#cloud-config\npackages: 5\n");
    let result = Command::new(&cloud_init)
        .args(["schema", "--config-file"])
        .arg(&broken)
        .output()
        .unwrap();
    assert!(
        !result.status.success(),
        "cloud-init schema accepted packages: 5"
    );
}

fn assert_extracted_equal(dir: &Path, expected: &BTreeMap<&str, Vec<u8>>) {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    found.sort();
    assert_eq!(found, NAMES);
    for (name, bytes) in expected {
        assert_eq!(&std::fs::read(dir.join(name)).unwrap(), bytes, "{name}");
    }
}

/// The packages these tests name for a missing tool are the ones
/// `scripts/install-test-deps.sh` installs.
#[test]
fn the_packages_named_are_the_ones_install_test_deps_installs() {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../scripts/install-test-deps.sh"
    );
    let script = std::fs::read_to_string(script).unwrap();
    for (tool, package) in common::PACKAGES {
        assert!(
            script.contains(&format!("\nneed {tool} {package}\n")),
            "{tool}"
        );
    }
}
