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
}

impl Private {
    /// Private bytes from any earlier release (none, or not ours) read as empty.
    pub fn decode(bytes: &[u8]) -> Private {
        serde_json::from_slice(bytes).unwrap_or_default()
    }

    pub fn encode(&self) -> Vec<u8> {
        if *self == Private::default() {
            return Vec::new();
        }
        serde_json::to_vec(self).unwrap_or_default()
    }
}
