//! The state's private bytes: what the provider keeps that plans never show.

/// What the provider keeps in the state's private bytes (never shown in plans): the token of
/// the create that made the VM, so a state recognises its own VM and not another create's of
/// the same name, and the changes a read found pending, for the plan's warning.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Private {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub create_token: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pending: Vec<String>,
    /// The VM came into this state by import: its seed was written from a `user_data` and
    /// `network_config` the configuration may not know (write-only values cannot be read
    /// back). While both are unset, the plan keeps the VM's seed instead of replacing it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub imported: bool,
    /// The last refresh found cloud-init finished (or the seed detached already) on a VM
    /// whose seed is still recorded and whose `seed_lifetime` is `until_ready`: the plan
    /// drops `seed_volume`, and the apply detaches and deletes it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub seed_ready: bool,
    /// The last refresh found the VM without its ownership mark (edited away): a plan that
    /// does not refresh (`-refresh=false`) still warns that nothing will be done on it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub mark_lost: bool,
    /// The first boot's cloud-init verdict is still to be read (`wait_for = "cloud-init"`):
    /// the create did not boot the VM, or cloud-init still ran at `cloud_init_timeout`. While
    /// set, an apply that boots the VM or finds it running waits for the verdict (bounded)
    /// and detaches the seed; once a verdict is read, later boots wait only for the address
    /// (a hardened image writes no verdict after its first boot, #39).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verdict_pending: bool,
    /// Why the seed stays until the VM is destroyed, found once: a refresh then asks the
    /// guest nothing about it, and each plan says so where the seed keeps the VM from
    /// migrating (#39).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_stays: Option<SeedStays>,
    /// The last refresh found the VM an HA resource that `ha` does not set (an operator put
    /// it under HA): a plan that replaces it warns that the new VM will not be.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub operator_ha: bool,
}

/// Why a seed stays attached for the VM's life (with `seed_lifetime = "until_ready"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SeedStays {
    /// The first boot's cloud-init failed: the seed is kept for debugging, whatever later
    /// boots report.
    FirstBootFailed,
    /// The guest's agent refuses file reads (blocked RPCs, SELinux): the verdict and the
    /// marker cannot be read.
    GuestRefuses,
    /// cloud-init finished, but without the `manual-clean` marker (the user-data turned the
    /// seed's vendor-data off): without the seed, the next boot would run as a new instance.
    NoMarker,
    /// No guest agent answers (none configured, or none ever started in the guest).
    NoAgent,
}

impl SeedStays {
    /// Why, in a user's words.
    pub fn describe(self) -> &'static str {
        match self {
            SeedStays::FirstBootFailed => {
                "its first boot's cloud-init failed, so the seed is kept for debugging"
            }
            SeedStays::GuestRefuses => {
                "its guest agent refuses file reads, so cloud-init's verdict cannot be read"
            }
            SeedStays::NoMarker => {
                "cloud-init finished without the manual-clean marker (the user-data turned the \
                 seed's vendor-data off), so without the seed the next boot would run as a new \
                 instance"
            }
            SeedStays::NoAgent => "no guest agent answers, so cloud-init's verdict cannot be read",
        }
    }
}

/// Private bytes this release cannot read (written by a newer release, or damaged): the VM's
/// identity (its create token) is unknown, so nothing may be decided from them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreadable;

/// The diagnostic detail for [`Unreadable`] private data.
pub const UNREADABLE: &str = "The provider's private data in this state cannot be read by this \
    release (a newer release of the provider wrote it, or it was damaged), so this VM's create \
    token is unknown. Nothing was changed and the VM stays in the state as it was. Use the \
    provider release that wrote the state (or a newer one).";

impl Private {
    /// Private bytes from this or an earlier release: none reads as empty, fields this
    /// release does not know are ignored; anything else is [`Unreadable`], never empty,
    /// since empty would mean "a VM from before create tokens" and drop a VM of ours.
    pub fn decode(bytes: &[u8]) -> Result<Private, Unreadable> {
        if bytes.is_empty() {
            return Ok(Private::default());
        }
        serde_json::from_slice(bytes).map_err(|_| Unreadable)
    }

    /// [`Private::decode`] where unreadable data may count as none: it only informs (a
    /// warning, a duplicate-name key), never which VM is this state's.
    pub fn decode_or_default(bytes: &[u8]) -> Private {
        Private::decode(bytes).unwrap_or_default()
    }

    /// Keeps what the VM holds until its next boot, for the plan's warning.
    pub fn note_pending(&mut self, observed: &super::Observed) {
        self.pending = observed
            .pending_attributes()
            .into_iter()
            .map(str::to_owned)
            .collect();
    }

    pub fn encode(&self) -> Vec<u8> {
        if *self == Private::default() {
            return Vec::new();
        }
        serde_json::to_vec(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_unreadable_bytes_are_unreadable() {
        assert_eq!(Private::decode(b""), Ok(Private::default()));
        let newer = br#"{"create_token":"t","a_field_of_a_newer_release":[1,2]}"#;
        assert_eq!(
            Private::decode(newer).map(|p| p.create_token),
            Ok(Some("t".to_owned()))
        );
        // A changed type (a newer release's) or damaged bytes are not "no token".
        assert_eq!(Private::decode(br#"{"create_token":7}"#), Err(Unreadable));
        assert_eq!(Private::decode(b"\x00garbage"), Err(Unreadable));
        assert_eq!(
            Private::decode_or_default(b"\x00garbage"),
            Private::default()
        );
    }
}
