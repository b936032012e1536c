//! Deterministic VMIDs derived from a VM's name.
//!
//! Without an explicit `vmid`, the same name must land on the same VMID in every run, so a
//! create that crashed after the clone finds its half-made VM again instead of cloning a
//! duplicate. Collisions with foreign VMs are resolved by probing forward in the range.

use std::ops::RangeInclusive;

/// The VMID range the provider may allocate in. PVE accepts 100..=999_999_999.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmidRange {
    first: u32,
    last: u32,
}

pub const PVE_VMID_MIN: u32 = 100;
pub const PVE_VMID_MAX: u32 = 999_999_999;

impl VmidRange {
    pub fn new(first: u32, last: u32) -> Result<Self, String> {
        if first < PVE_VMID_MIN || last > PVE_VMID_MAX {
            return Err(format!(
                "the range {first}-{last} must lie within PVE's VMIDs {PVE_VMID_MIN}-{PVE_VMID_MAX}"
            ));
        }
        if first > last {
            return Err(format!(
                "the range {first}-{last} is empty: the first VMID is larger than the last"
            ));
        }
        Ok(Self { first, last })
    }

    fn size(&self) -> u32 {
        self.last - self.first + 1
    }

    pub fn contains(&self, vmid: u32) -> bool {
        (self.first..=self.last).contains(&vmid)
    }

    pub fn bounds(&self) -> RangeInclusive<u32> {
        self.first..=self.last
    }

    /// The VMID a name of a fleet starts probing at: the default fleet hashes the name alone
    /// (as before fleets existed), any other fleet hashes `FLEET/NAME`, so the same name in
    /// two fleets starts at different VMIDs.
    pub fn home_in_fleet(&self, fleet: &str, name: &str) -> u32 {
        self.home_of(&derivation_key(fleet, name))
    }

    /// [`VmidRange::probe_sequence`] for a name of a fleet.
    pub fn probe_sequence_in_fleet(
        &self,
        fleet: &str,
        name: &str,
    ) -> impl Iterator<Item = u32> + '_ {
        let home = self.home_in_fleet(fleet, name);
        (home..=self.last).chain(self.first..home)
    }

    /// Where `vmid` stands in the name's probe sequence (0 = its home), or `None` outside
    /// the range: the order in which a create meets the name's VMs.
    pub fn probe_rank_in_fleet(&self, fleet: &str, name: &str, vmid: u32) -> Option<u32> {
        if !self.contains(vmid) {
            return None;
        }
        let home = self.home_in_fleet(fleet, name);
        Some(if vmid >= home {
            vmid - home
        } else {
            self.last - home + 1 + (vmid - self.first)
        })
    }

    /// The VMID a name starts probing at.
    pub fn home_of(&self, name: &str) -> u32 {
        self.first + (fnv1a64(name.as_bytes()) % u64::from(self.size())) as u32
    }

    /// Every VMID of the range exactly once, starting at the name's home and wrapping around.
    pub fn probe_sequence(&self, name: &str) -> impl Iterator<Item = u32> + '_ {
        let home = self.home_of(name);
        (home..=self.last).chain(self.first..home)
    }
}

/// What a VMID is derived from. Names cannot contain `/`, so keys of different fleets never
/// collide.
fn derivation_key(fleet: &str, name: &str) -> String {
    if fleet.is_empty() {
        name.to_owned()
    } else {
        format!("{fleet}/{name}")
    }
}

impl Default for VmidRange {
    /// Above the VMIDs that PVE's `nextid` hands out first, so derived VMIDs rarely meet hand-made
    /// VMs.
    fn default() -> Self {
        Self {
            first: 100_000,
            last: 199_999,
        }
    }
}

impl std::str::FromStr for VmidRange {
    type Err = String;

    /// Parses `FIRST-LAST`, e.g. `100000-199999`.
    fn from_str(text: &str) -> Result<Self, String> {
        let (first, last) = text.split_once('-').ok_or_else(|| {
            format!("`{text}` is not a range: write it as FIRST-LAST, e.g. 100000-199999")
        })?;
        let parse = |part: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{part}` in `{text}` is not a VMID"))
        };
        Self::new(parse(first)?, parse(last)?)
    }
}

impl std::fmt::Display for VmidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// FNV-1a: stable across Rust versions and platforms, unlike `DefaultHasher`.
fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_probe_rank_is_the_position_in_the_probe_sequence() {
        let range = super::VmidRange::new(100, 149).unwrap();
        let sequence: Vec<u32> = range.probe_sequence_in_fleet("f", "web").collect();
        for (position, vmid) in sequence.iter().enumerate() {
            assert_eq!(
                range.probe_rank_in_fleet("f", "web", *vmid),
                Some(position as u32)
            );
        }
        assert_eq!(range.probe_rank_in_fleet("f", "web", 99), None);
        assert_eq!(range.probe_rank_in_fleet("f", "web", 150), None);
    }

    use super::*;

    #[test]
    fn same_name_same_home_and_inside_the_range() {
        let range = VmidRange::default();
        let home = range.home_of("edge-0");
        assert_eq!(home, range.home_of("edge-0"));
        assert!(range.contains(home));
        assert_ne!(home, range.home_of("edge-1"));
    }

    #[test]
    fn the_default_fleet_keeps_the_old_homes_and_other_fleets_start_elsewhere() {
        let range = VmidRange::default();
        assert_eq!(range.home_in_fleet("", "edge-0"), range.home_of("edge-0"));
        assert_eq!(
            range.home_in_fleet("prod", "edge-0"),
            range.home_of("prod/edge-0")
        );
        assert_ne!(
            range.home_in_fleet("prod", "edge-0"),
            range.home_in_fleet("staging", "edge-0")
        );
        let seq: Vec<u32> = range
            .probe_sequence_in_fleet("prod", "edge-0")
            .take(2)
            .collect();
        assert_eq!(seq[0], range.home_in_fleet("prod", "edge-0"));
    }

    #[test]
    fn pinned_home_values_never_change_between_releases() {
        // A change here would orphan every half-made VM of an older release.
        let range = VmidRange::default();
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(
            range.home_of("a"),
            100_000 + (0xaf63_dc4c_8601_ec8c_u64 % 100_000) as u32
        );
    }

    #[test]
    fn probing_visits_every_vmid_once_and_wraps() {
        let range = VmidRange::new(100, 109).unwrap();
        let seq: Vec<u32> = range.probe_sequence("x").collect();
        assert_eq!(seq.len(), 10);
        assert_eq!(seq[0], range.home_of("x"));
        let mut sorted = seq.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, (100..=109).collect::<Vec<_>>());
    }

    #[test]
    fn parses_and_rejects_ranges() {
        assert_eq!(
            "200-300".parse::<VmidRange>().unwrap(),
            VmidRange::new(200, 300).unwrap()
        );
        assert!(
            "300-200"
                .parse::<VmidRange>()
                .unwrap_err()
                .contains("empty")
        );
        assert!(
            "99-200"
                .parse::<VmidRange>()
                .unwrap_err()
                .contains("within")
        );
        assert!(
            "abc"
                .parse::<VmidRange>()
                .unwrap_err()
                .contains("FIRST-LAST")
        );
        assert!(
            "1x-200"
                .parse::<VmidRange>()
                .unwrap_err()
                .contains("not a VMID")
        );
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            /// The probe sequence of any name visits every VMID of the range once, starting
            /// at the name's home, and a VMID's rank is its place in it.
            #[test]
            fn the_probe_sequence_is_the_range_once_from_home(
                first in 100u32..5_000,
                size in 1u32..300,
                fleet in "([a-z]{1,6})?",
                name in "[a-z][a-z0-9-]{0,20}",
            ) {
                let range = VmidRange::new(first, first + size - 1).unwrap();
                let sequence: Vec<u32> = range.probe_sequence_in_fleet(&fleet, &name).collect();
                prop_assert_eq!(sequence.len() as u32, size);
                prop_assert_eq!(sequence[0], range.home_in_fleet(&fleet, &name));
                let mut sorted = sequence.clone();
                sorted.sort_unstable();
                prop_assert_eq!(sorted, (first..first + size).collect::<Vec<_>>());
                for (place, vmid) in sequence.iter().enumerate() {
                    prop_assert_eq!(
                        range.probe_rank_in_fleet(&fleet, &name, *vmid),
                        Some(place as u32)
                    );
                }
            }
        }
    }
}
