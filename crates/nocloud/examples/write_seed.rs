//! Writes a seed image for looking at with other tools
//! (`isoinfo -d -i`, `xorriso -indev`, `blkid -p`, a test VM).
//!
//! Usage: `cargo run -p nocloud --example write_seed -- OUT.iso NAME [USER_DATA_FILE]`

fn main() {
    let mut args = std::env::args().skip(1);
    let (Some(out), Some(name)) = (args.next(), args.next()) else {
        eprintln!("usage: write_seed OUT.iso NAME [USER_DATA_FILE]");
        std::process::exit(2);
    };
    let mut seed = nocloud::Seed::new(name.as_str(), format!("example/{name}"));
    if let Some(path) = args.next() {
        let text = std::fs::read_to_string(&path).expect("read the user-data file");
        if let Err(e) = nocloud::user_data::validate(&text) {
            eprintln!("{path}: {e}");
            std::process::exit(1);
        }
        seed = seed.user_data(text);
    }
    let built = seed.build().expect("the seed fits in an ISO");
    std::fs::write(&out, &built.bytes).expect("write the image");
    println!(
        "{out}: {} bytes, instance-id {}, sha256 {}",
        built.bytes.len(),
        built.instance_id,
        built.sha256_hex()
    );
}
