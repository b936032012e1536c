//! The seed's content hash: keyed HMAC-SHA256, and the unkeyed SHA-256 of earlier releases.

/// The vendor-data text every seed hash covers, fixed byte for byte: the whole vendor-data
/// of the releases that stored the hashes users keep in their states and VMs' marks
/// (`nocloud::render::vendor_data_guest_agent`). Seeds carry more vendor-data now
/// (`nocloud::render::vendor_data`, with `manual_cache_clean`); hashing that would make every
/// existing state plan a replacement, and the hash only has to change with what the
/// configuration controls (`user_data`, `network_config`).
const HASHED_VENDOR_DATA: &str = include_str!("hashed_vendor_data.txt");

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The seed's content hash, known at plan time (before a VMID is) and changing exactly when
/// the seed's content does: HMAC-SHA256 of the content keyed with the create token, so the
/// value in the state, the plan and the VM's description does not confirm a guessed
/// `user_data` to whoever lacks the token, and two VMs with the same content show different
/// hashes. `None` for the key is the unkeyed SHA-256 of releases before keyed hashes (states
/// made before create tokens existed have no key).
pub fn seed_hash(
    key: Option<&str>,
    user_data: Option<&str>,
    network_config: Option<&str>,
) -> String {
    let mut message = Vec::new();
    // Lengths first, so moving bytes between fields changes the hash.
    for part in [
        user_data.unwrap_or_default().as_bytes(),
        network_config.map(str::as_bytes).unwrap_or(b"\0none"),
        HASHED_VENDOR_DATA.as_bytes(),
    ] {
        message.extend_from_slice(&(part.len() as u64).to_be_bytes());
        message.extend_from_slice(part);
    }
    let digest = match key {
        Some(key) => hmac_sha256(key.as_bytes(), &message),
        None => Sha256::digest(&message).into(),
    };
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// HMAC-SHA256 (RFC 2104).
fn hmac_sha256(key: &[u8], message: &[u8]) -> [u8; 32] {
    // HMAC takes a key of any length (a longer one is hashed first): this never fails.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(message);
    mac.finalize().into_bytes().into()
}

/// What a plan shows as `seed_hash` for the configured seed content: the prior value while
/// the content is the same (whether the prior hash was keyed or made before keyed hashes),
/// otherwise the hash keyed with the state's create token.
pub fn planned_seed_hash(
    prior: Option<&str>,
    key: Option<&str>,
    user_data: Option<&str>,
    network_config: Option<&str>,
) -> String {
    let keyed = seed_hash(key, user_data, network_config);
    match prior {
        Some(prior) if prior == keyed => keyed,
        Some(prior) if key.is_some() && prior == seed_hash(None, user_data, network_config) => {
            prior.to_owned()
        }
        _ => keyed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seed_hash_tracks_content_only() {
        for key in [None, Some("t0k3n")] {
            let a = seed_hash(key, Some("#cloud-config\n"), None);
            assert_eq!(a, seed_hash(key, Some("#cloud-config\n"), None));
            assert_ne!(a, seed_hash(key, Some("#cloud-config\n#x\n"), None));
            assert_ne!(
                a,
                seed_hash(key, Some("#cloud-config\n"), Some("version: 2\n"))
            );
            assert_ne!(
                seed_hash(key, Some("ab"), Some("")),
                seed_hash(key, Some("a"), Some("b"))
            );
            assert_eq!(a.len(), 64);
        }
    }

    #[test]
    fn the_keyed_seed_hash_differs_per_key() {
        let content = Some("#cloud-config\npassword: hunter2\n");
        let (a, b) = (
            seed_hash(Some("a"), content, None),
            seed_hash(Some("b"), content, None),
        );
        assert_ne!(
            a, b,
            "the same content under two tokens must not compare equal"
        );
        assert_ne!(a, seed_hash(None, content, None));
    }

    /// RFC 4231, section 4: every HMAC-SHA256 test case (case 5's output is truncated to 128
    /// bits there; its full value is compared by its prefix).
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        let long_key = [0xaa; 131];
        let cases: [(&[u8], &[u8], &str); 7] = [
            (
                &[0x0b; 20],
                b"Hi There",
                "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7",
            ),
            (
                b"Jefe",
                b"what do ya want for nothing?",
                "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843",
            ),
            (
                &[0xaa; 20],
                &[0xdd; 50],
                "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe",
            ),
            (
                &[
                    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22,
                    23, 24, 25,
                ],
                &[0xcd; 50],
                "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b",
            ),
            (
                &[0x0c; 20],
                b"Test With Truncation",
                "a3b6167473100ee06e0c796c2955552b",
            ),
            (
                &long_key,
                b"Test Using Larger Than Block-Size Key - Hash Key First",
                "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54",
            ),
            (
                &long_key,
                b"This is a test using a larger than block-size key and a larger than block-size \
                  data. The key needs to be hashed before being used by the HMAC algorithm.",
                "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2",
            ),
        ];
        for (number, (key, data, expected)) in cases.into_iter().enumerate() {
            let mac = hmac_sha256(key, data);
            let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
            assert!(hex.starts_with(expected), "test case {}: {hex}", number + 1);
        }
    }

    #[test]
    fn the_hashed_vendor_data_is_the_one_earlier_releases_hashed() {
        assert_eq!(
            HASHED_VENDOR_DATA,
            nocloud::render::vendor_data_guest_agent()
        );
        assert_ne!(HASHED_VENDOR_DATA, nocloud::render::vendor_data());
    }

    /// The state the `state_v0` fixture holds (tests/provider/fixtures/state_v0, made by
    /// release 953641d from its `resource.tf`: an unkeyed hash) plans no replacement.
    #[test]
    fn an_existing_states_hash_is_what_it_was() {
        let fixture = include_str!("../../../../tests/provider/fixtures/state_v0/state-v0.json");
        let state: serde_json::Value = serde_json::from_str(fixture).unwrap();
        let stored = state["resources"][0]["instances"][0]["attributes"]["seed_hash"]
            .as_str()
            .unwrap();
        let user_data = Some("#cloud-config\npackages: [nginx]\n");
        assert_eq!(seed_hash(None, user_data, None), stored);
        assert_eq!(
            planned_seed_hash(Some(stored), Some("any-token"), user_data, None),
            stored
        );
    }

    /// Seed hashes are stored in states and in VMs' descriptions: the values today's code
    /// computes must never change (pinned from the hand-written HMAC this crate had before
    /// it used `hmac`), for unkeyed, short-keyed and longer-than-a-block keys.
    #[test]
    fn seed_hashes_stay_what_earlier_releases_stored() {
        let long_key = "k".repeat(100);
        let contents = [
            (None, None),
            (Some("#cloud-config\n"), None),
            (
                Some("#cloud-config\npackages: [nginx]\n"),
                Some("version: 2\n"),
            ),
        ];
        let pinned = [
            (
                None,
                [
                    "0c6939de7127d08c774e562bf15f08c39be5cbc4bed41b976dccc7e94b47fdea",
                    "25f4a82aec2f152dcb45a69cd5732632585feea80d328a91876e60f17e0d3693",
                    "d7a8121baba10c87b19bde304e67e1de14e24a561c44e3c5a0bc3182c89e1753",
                ],
            ),
            (
                Some("t0k3n"),
                [
                    "67679750123c487de04cd00df0cf17b2a1d311169263d46a6d651f2c26318c52",
                    "afb150e2255ccf58227f7b4635931fa0ae4570740affb8f679b52bd22ff4a98c",
                    "bf6bc794d8c237f10ed94acefcc10ec4060f5321a84be29431ab10a3a0a6e950",
                ],
            ),
            (
                Some(long_key.as_str()),
                [
                    "5bd906ddc45736c7cafaf45b8b06d189d3613675f55b9347d8941b6f1de0b193",
                    "d5652c62826476b052e7977d39cffb69669c7a7d497bbb3b8f0b9268a92fe958",
                    "90f72903265909d8053ec76df7ce6bc6c6300525b300e838ab5b4715af32a007",
                ],
            ),
        ];
        for (key, hashes) in pinned {
            for ((user_data, network_config), expected) in contents.iter().zip(hashes) {
                assert_eq!(
                    seed_hash(key, *user_data, *network_config),
                    expected,
                    "{key:?} {user_data:?} {network_config:?}"
                );
            }
        }
    }

    #[test]
    fn a_plan_keeps_the_prior_hash_while_the_content_is_the_same() {
        let content = Some("#cloud-config\n");
        let legacy = seed_hash(None, content, None);
        let keyed = seed_hash(Some("t"), content, None);
        // A state from before keyed hashes: same content, no replacement.
        assert_eq!(
            planned_seed_hash(Some(&legacy), Some("t"), content, None),
            legacy
        );
        assert_eq!(
            planned_seed_hash(Some(&legacy), None, content, None),
            legacy
        );
        assert_eq!(
            planned_seed_hash(Some(&keyed), Some("t"), content, None),
            keyed
        );
        // New content: the keyed hash of it, whatever the prior was.
        let other = Some("#cloud-config\n#x\n");
        assert_eq!(
            planned_seed_hash(Some(&legacy), Some("t"), other, None),
            seed_hash(Some("t"), other, None)
        );
        assert_eq!(
            planned_seed_hash(Some(""), Some("t"), content, None),
            keyed,
            "a drifted seed (empty hash) is replaced"
        );
    }
}
