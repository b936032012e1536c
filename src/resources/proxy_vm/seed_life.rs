//! How long a create waits (`wait_for`) and how long the seed stays attached
//! (`seed_lifetime`), as typed choices with their configuration spellings.

/// What a create (and an update that boots the VM) waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitFor {
    /// The agent's address, then cloud-init's verdict (`/run/cloud-init/status.json`).
    CloudInit,
    /// The agent's address only.
    Address,
    /// Nothing: the VM is started and left to boot.
    Nothing,
}

impl WaitFor {
    pub const CHOICES: [(&'static str, WaitFor); 3] = [
        ("cloud-init", WaitFor::CloudInit),
        ("address", WaitFor::Address),
        ("none", WaitFor::Nothing),
    ];

    pub fn parse(text: &str) -> Option<WaitFor> {
        Self::CHOICES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, choice)| *choice)
    }

    pub fn waits_for_address(self) -> bool {
        self != WaitFor::Nothing
    }
}

/// How long the NoCloud seed stays attached to the VM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeedLifetime {
    /// Detached and deleted once cloud-init finished without errors.
    UntilReady,
    /// Kept until the VM is destroyed.
    Vm,
}

impl SeedLifetime {
    pub const CHOICES: [(&'static str, SeedLifetime); 2] = [
        ("until_ready", SeedLifetime::UntilReady),
        ("vm", SeedLifetime::Vm),
    ];

    pub fn parse(text: &str) -> Option<SeedLifetime> {
        Self::CHOICES
            .iter()
            .find(|(name, _)| *name == text)
            .map(|(_, choice)| *choice)
    }
}

/// The check of a configured `wait_for`.
pub fn check_wait_for(text: &str) -> Result<(), String> {
    match WaitFor::parse(text) {
        Some(_) => Ok(()),
        None => Err(format!(
            "wait_for must be \"cloud-init\", \"address\" or \"none\", got \"{text}\""
        )),
    }
}

/// The check of a configured `seed_lifetime`.
pub fn check_seed_lifetime(text: &str) -> Result<(), String> {
    match SeedLifetime::parse(text) {
        Some(_) => Ok(()),
        None => Err(format!(
            "seed_lifetime must be \"until_ready\" or \"vm\", got \"{text}\""
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_reads_back_as_written() {
        for (name, choice) in WaitFor::CHOICES {
            assert_eq!(WaitFor::parse(name), Some(choice));
        }
        for (name, choice) in SeedLifetime::CHOICES {
            assert_eq!(SeedLifetime::parse(name), Some(choice));
        }
        assert!(check_wait_for("true").is_err());
        assert!(check_seed_lifetime("forever").is_err());
        assert!(!WaitFor::Nothing.waits_for_address());
        assert!(WaitFor::Address.waits_for_address());
    }
}
