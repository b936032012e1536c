//! Pinned bytes. A seed's bytes are part of the provider's contract: the same
//! configuration must produce the same image on every version, or every
//! upgrade would re-upload seeds and give VMs new instance ids. A change here
//! must be deliberate (and noted in the changelog).

use nocloud::{Seed, SeedFiles, iso};
use sha2::{Digest, Sha256};

const SECTOR: usize = 2048;

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn fixed_files() -> SeedFiles {
    SeedFiles {
        meta_data: b"instance-id: iid-golden\nlocal-hostname: \"golden\"\n".to_vec(),
        user_data: b"#cloud-config\npackages: [nginx]\n".to_vec(),
        network_config: Some(b"version: 2\nethernets: {}\n".to_vec()),
        vendor_data: Some(b"#cloud-config\n{}\n".to_vec()),
    }
}

fn typical_seed() -> Seed {
    Seed::new("edge-0", "pve1/101")
        .user_data(
            "#cloud-config\npackages: [haproxy]\nruncmd:\n  - [systemctl, restart, haproxy]\n",
        )
        .network_config("version: 2\nethernets:\n  eth0:\n    dhcp4: true\n")
}

#[test]
fn iso_writer_bytes_are_pinned() {
    let image = iso::write(&fixed_files()).unwrap();
    assert_eq!(image.len(), 33 * SECTOR);
    assert_eq!(
        hex(&Sha256::digest(&image)),
        "0898f0c91227a6594983aa2c63f62ec7c1d78187d4660b78625af86b49f49fa3",
        "iso::write output changed"
    );
}

#[test]
fn typical_seed_bytes_and_instance_id_are_pinned() {
    // Changed deliberately once: the default vendor-data gained the detached-seed part
    // (`manual_cache_clean: true`), so a new seed's bytes and instance id differ from
    // earlier releases'. Seeds of VMs that exist are never rebuilt, and the legacy
    // vendor-data still gives the old bytes (below).
    let seed = typical_seed().build().unwrap();
    assert_eq!(seed.instance_id, "iid-23b6b95a5c873e53be3c670181d04eea");
    assert_eq!(seed.file_name_suggestion, "seed-edge-0-3818de86.iso");
    assert_eq!(
        seed.sha256_hex(),
        "52dd2ebd3109ea96a3661ce18c89fe786437813808cb94e538b7765753af7615",
        "seed image changed"
    );
    assert!(seed.bytes.len() < 100 * 1024, "{} bytes", seed.bytes.len());
}

#[test]
fn the_guest_agent_vendor_data_still_gives_the_seeds_of_earlier_releases() {
    // The pins of the release before the detached-seed part: `vendor_data_guest_agent`
    // must stay byte for byte what the default was (the provider's seed hash covers it).
    let seed = typical_seed()
        .vendor_data(nocloud::render::vendor_data_guest_agent())
        .build()
        .unwrap();
    assert_eq!(seed.instance_id, "iid-4466265a8b771ac626f4679ed2135fa3");
    assert_eq!(
        seed.sha256_hex(),
        "f50701852c36a29d89bfd2ce727416292a3a4b1c1b418901fa3252f183c7bbbf",
        "the guest-agent vendor-data changed"
    );
}

#[test]
fn structure_at_fixed_offsets() {
    let image = iso::write(&fixed_files()).unwrap();
    let at = |sector: usize, offset: usize, len: usize| &image[sector * SECTOR + offset..][..len];
    // Volume descriptors: primary, Joliet, terminator.
    assert_eq!(at(16, 0, 6), b"\x01CD001");
    assert_eq!(at(16, 40, 32), b"cidata                          ");
    assert_eq!(at(16, 813, 17), b"2000010100000000\0");
    assert_eq!(at(17, 0, 6), b"\x02CD001");
    assert_eq!(at(17, 88, 3), b"%/E");
    assert_eq!(at(18, 0, 6), b"\xffCD001");
    // Root directory at sector 23 (both-endian), one sector long.
    assert_eq!(at(16, 158, 8), &[23, 0, 0, 0, 0, 0, 0, 23]);
    assert_eq!(at(16, 166, 8), &[0, 8, 0, 0, 0, 0, 8, 0]);
    // Its `.` record starts the Rock Ridge SUSP area with SP.
    assert_eq!(at(23, 34, 7), b"SP\x07\x01\xbe\xef\x00");
    // The continuation area with ER, after the Joliet root.
    assert_eq!(at(25, 0, 2), b"ER");
    // File data from sector 26, in directory order.
    let files = fixed_files();
    assert_eq!(at(26, 0, files.meta_data.len()), &files.meta_data[..]);
    assert_eq!(
        at(29, 0, files.vendor_data.as_ref().unwrap().len()),
        &files.vendor_data.unwrap()[..]
    );
    // Nothing but zeros in the padding.
    assert!(image[30 * SECTOR..].iter().all(|b| *b == 0));
}
