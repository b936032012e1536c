//! `iso::read_iso` on images made at run time by `genisoimage` and `xorriso` (Debian
//! packages `genisoimage`, `xorriso`): Rock Ridge only, Joliet only, both, neither; a root
//! directory spanning several sectors; names long enough to need SUSP continuation areas;
//! and mutated or truncated images, which must give an error or a result, never a panic.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::common::skipped;
use pvesim::iso::{IsoImage, read_iso};

fn on_path(tool: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| Path::new(dir).join(tool))
        .find(|candidate| candidate.is_file())
}

fn seed_files() -> BTreeMap<String, Vec<u8>> {
    let mut files = BTreeMap::new();
    files.insert(
        "user-data".to_string(),
        b"#cloud-config\npackages: [qemu-guest-agent]\n".to_vec(),
    );
    files.insert(
        "meta-data".to_string(),
        b"instance-id: edge-0\nlocal-hostname: edge-0\n".to_vec(),
    );
    // Larger than a sector, with every byte value, so extents and lengths are exercised.
    files.insert(
        "vendor-data".to_string(),
        (0..20_000u32).map(|i| (i % 251) as u8).collect(),
    );
    files.insert("network-config".to_string(), Vec::new());
    files
}

/// Writes `files` into a fresh directory and runs `tool args… -o IMAGE DIR`.
fn make_image(tool: &Path, args: &[&str], files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let work = tempfile::tempdir().expect("tempdir");
    let dir = work.path().join("root");
    std::fs::create_dir(&dir).expect("mkdir");
    for (name, data) in files {
        std::fs::write(dir.join(name), data).expect("write file");
    }
    let image = work.path().join("seed.iso");
    let output = Command::new(tool)
        .args(args)
        .arg("-o")
        .arg(&image)
        .arg(&dir)
        .output()
        .expect("run image tool");
    assert!(
        output.status.success(),
        "{} {args:?} failed: {}",
        tool.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::read(&image).expect("read image")
}

fn genisoimage() -> Option<PathBuf> {
    let found = on_path("genisoimage");
    if found.is_none() {
        skipped("genisoimage not on PATH (apt-get install genisoimage)");
    }
    found
}

fn xorriso() -> Option<PathBuf> {
    let found = on_path("xorriso");
    if found.is_none() {
        skipped("xorriso not on PATH (apt-get install xorriso)");
    }
    found
}

fn assert_files(image: &IsoImage, expected: &BTreeMap<String, Vec<u8>>) {
    assert_eq!(image.volume_id, "cidata");
    assert_eq!(
        image.files.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (name, data) in expected {
        assert_eq!(&image.files[name], data, "contents of {name}");
    }
}

#[test]
fn genisoimage_rock_ridge_and_joliet_images() {
    let Some(tool) = genisoimage() else { return };
    let files = seed_files();
    for args in [
        &["-quiet", "-V", "cidata", "-J", "-r"][..],
        &["-quiet", "-V", "cidata", "-r"][..],
        &["-quiet", "-V", "cidata", "-J"][..],
    ] {
        let image =
            read_iso(&make_image(&tool, args, &files)).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_files(&image, &files);
    }
}

#[test]
fn xorriso_rock_ridge_and_joliet_images() {
    let Some(tool) = xorriso() else { return };
    let files = seed_files();
    for args in [
        &["-as", "mkisofs", "-quiet", "-V", "cidata", "-J", "-r"][..],
        // xorriso's mkisofs emulation writes Rock Ridge unless told not to.
        &["-as", "mkisofs", "-quiet", "-V", "cidata"][..],
        &["-as", "mkisofs", "-quiet", "-V", "cidata", "--norock", "-J"][..],
    ] {
        let image =
            read_iso(&make_image(&tool, args, &files)).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        assert_files(&image, &files);
    }
}

#[test]
fn plain_iso9660_names_are_shown_lower_case_without_version() {
    let Some(tool) = genisoimage() else { return };
    let files = seed_files();
    let image =
        read_iso(&make_image(&tool, &["-quiet", "-V", "cidata"], &files)).expect("readable");
    assert_eq!(image.volume_id, "cidata");
    // Level 1 names: 8.3, upper case on disc (`USER_DAT.;1`), as Linux shows them.
    assert_eq!(image.files["user_dat"], files["user-data"]);
    assert_eq!(image.files["meta_dat"], files["meta-data"]);
    assert_eq!(image.files["vendor_d"], files["vendor-data"]);
}

#[test]
fn root_directory_over_several_sectors_and_long_rock_ridge_names() {
    let Some(tool) = genisoimage() else { return };
    let mut files = BTreeMap::new();
    for i in 0..300 {
        files.insert(
            format!("file-number-{i:04}.yaml"),
            format!("content {i}\n").into_bytes(),
        );
    }
    // Too long for one directory record: the NM entry continues in a CE area.
    files.insert("n".repeat(230), b"long".to_vec());
    let image = read_iso(&make_image(
        &tool,
        &["-quiet", "-V", "cidata", "-r"],
        &files,
    ))
    .expect("readable");
    assert_files(&image, &files);
}

#[test]
fn mutated_and_truncated_images_never_panic() {
    let Some(tool) = genisoimage() else { return };
    let original = make_image(
        &tool,
        &["-quiet", "-V", "cidata", "-J", "-r"],
        &seed_files(),
    );
    let mut rng = fastrand::Rng::with_seed(0x5eed);
    let mut errors = 0;
    for round in 0..3000 {
        let mut image = original.clone();
        // Descriptors and directories live in the first ~30 sectors: hit those hardest.
        let hot = (30 * 2048).min(image.len());
        for _ in 0..rng.usize(1..16) {
            let at = if rng.bool() {
                rng.usize(16 * 2048..hot)
            } else {
                rng.usize(0..image.len())
            };
            image[at] = rng.u8(..);
        }
        if round % 3 == 0 {
            image.truncate(rng.usize(0..image.len()));
        }
        match read_iso(&image) {
            Ok(parsed) => {
                let total: usize = parsed.files.values().map(Vec::len).sum();
                assert!(total <= image.len(), "copied more than the image holds");
            }
            Err(e) => {
                assert!(!e.to_string().is_empty());
                errors += 1;
            }
        }
    }
    assert!(errors > 0, "mutations should break some images");
}
