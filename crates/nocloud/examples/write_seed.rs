//! Writes a sample seed to the path given as the first argument, for looking
//! at with other tools (`isoinfo -d -i`, `xorriso -indev`, `blkid -p`).

fn main() {
    let path = std::env::args()
        .nth(1)
        .expect("usage: write_seed OUTPUT.iso");
    let files = nocloud::SeedFiles {
        meta_data: b"instance-id: iid-example\nlocal-hostname: \"example\"\n".to_vec(),
        user_data: b"#cloud-config\npackages: [curl]\n".to_vec(),
        network_config: Some(b"version: 2\nethernets: {}\n".to_vec()),
        vendor_data: Some(b"#cloud-config\npackages: [qemu-guest-agent]\n".to_vec()),
    };
    let image = nocloud::iso::write(&files).expect("small files fit");
    std::fs::write(&path, image).expect("write the image");
}
