//! The stable reason codes `proxmox_health` reports, and how PVE errors map onto them.
//!
//! Codes are part of the data source's contract: users match on them in `precondition` and
//! `check` blocks, so a code is never renamed or reused for another meaning.

use std::fmt;

/// Why a node (or the whole cluster) is not fit for proxy VMs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    CertificateInvalid,
    CredentialsUnavailable,
    Unreachable,
    ProviderNotConfigured,
    VersionUnsupported,
    NodeNotFound,
    NodeOffline,
    StorageNotFound,
    StorageInactive,
    StorageNoIsoContent,
    StorageFull,
    TemplateNotFound,
    NotATemplate,
    TemplateNotShared,
    BridgeNotFound,
    PermissionMissing,
    ApiError,
}

impl Reason {
    /// Every code, in the order the documentation lists them.
    pub const ALL: [Reason; 17] = [
        Reason::CertificateInvalid,
        Reason::CredentialsUnavailable,
        Reason::Unreachable,
        Reason::ProviderNotConfigured,
        Reason::VersionUnsupported,
        Reason::NodeNotFound,
        Reason::NodeOffline,
        Reason::StorageNotFound,
        Reason::StorageInactive,
        Reason::StorageNoIsoContent,
        Reason::StorageFull,
        Reason::TemplateNotFound,
        Reason::NotATemplate,
        Reason::TemplateNotShared,
        Reason::BridgeNotFound,
        Reason::PermissionMissing,
        Reason::ApiError,
    ];

    /// The machine-readable code.
    pub fn code(self) -> &'static str {
        match self {
            Reason::CertificateInvalid => "CertificateInvalid",
            Reason::CredentialsUnavailable => "CredentialsUnavailable",
            Reason::Unreachable => "Unreachable",
            Reason::ProviderNotConfigured => "ProviderNotConfigured",
            Reason::VersionUnsupported => "VersionUnsupported",
            Reason::NodeNotFound => "NodeNotFound",
            Reason::NodeOffline => "NodeOffline",
            Reason::StorageNotFound => "StorageNotFound",
            Reason::StorageInactive => "StorageInactive",
            Reason::StorageNoIsoContent => "StorageNoIsoContent",
            Reason::StorageFull => "StorageFull",
            Reason::TemplateNotFound => "TemplateNotFound",
            Reason::NotATemplate => "NotATemplate",
            Reason::TemplateNotShared => "TemplateNotShared",
            Reason::BridgeNotFound => "BridgeNotFound",
            Reason::PermissionMissing => "PermissionMissing",
            Reason::ApiError => "ApiError",
        }
    }

    /// What the code means and what to do about it (markdown, for the generated docs).
    pub fn meaning(self) -> &'static str {
        match self {
            Reason::CertificateInvalid => {
                "the TLS certificate of the endpoint is not trusted (wrong or missing `ca_cert`, \
                or a certificate for another host name). Reported on every node."
            }
            Reason::CredentialsUnavailable => {
                "PVE refused the API token (HTTP 401: unknown, expired, revoked or wrong secret). \
                Reported on every node."
            }
            Reason::Unreachable => {
                "the endpoint did not answer (connection refused, DNS, timeout). Reported on every \
                node."
            }
            Reason::ProviderNotConfigured => {
                "the provider block is unusable (see the provider's own error), so no call was \
                made."
            }
            Reason::VersionUnsupported => {
                "the node (or the API endpoint) runs a PVE release older than 9, which the \
                provider does not support."
            }
            Reason::NodeNotFound => "a node named in `node_names` is not a member of the cluster.",
            Reason::NodeOffline => {
                "the cluster reports the node offline, or PVE could not proxy to it (HTTP 595/596)."
            }
            Reason::StorageNotFound => {
                "the ISO storage does not exist on the node, or the token may not see it (it needs \
                `Datastore.Audit`)."
            }
            Reason::StorageInactive => {
                "the ISO storage exists but is disabled, not available on this node, or not active."
            }
            Reason::StorageNoIsoContent => {
                "the ISO storage does not accept the `iso` content type, so seed ISOs cannot be \
                uploaded."
            }
            Reason::StorageFull => "the ISO storage reports less than 1 MiB free.",
            Reason::TemplateNotFound => {
                "no VM with that name or VMID is visible to the token, or the template's own node \
                is offline."
            }
            Reason::NotATemplate => {
                "the name or VMID exists but is an ordinary VM, not a template."
            }
            Reason::TemplateNotShared => {
                "the template lives on another node and not every one of its disks is on a shared \
                storage active on this node, so PVE cannot clone it here."
            }
            Reason::BridgeNotFound => {
                "a bridge named in `bridges`, or one a NIC of the `templates` is on, does not \
                exist on the node."
            }
            Reason::PermissionMissing => {
                "the token lacks a privilege PVE checks on one of the provider's calls; the \
                message names it and its ACL path (`The token lacks SDN.Use on \
                /sdn/zones/localnetwork/vmbr0.`). Among them: `VM.Config.CDROM` (attaching the \
                seed), `Datastore.AllocateSpace` on the template's disk storages (clone and \
                resize), `SDN.Use` on every bridge (and VLAN) the template's NICs use (checked \
                before the clone), `Pool.Audit` on each of `pools`. Also reported when PVE \
                answered 403."
            }
            Reason::ApiError => "any other API error; the message has PVE's answer.",
        }
    }

    /// The markdown list of every code, for attribute descriptions.
    pub fn documentation() -> String {
        Reason::ALL
            .iter()
            .map(|r| format!("- `{}`: {}", r.code(), r.meaning()))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The reason a failed PVE call stands for.
    pub fn of_error(error: &pve::Error) -> Reason {
        match error.origin() {
            pve::Origin::Transport { .. } if error.is_certificate_error() => {
                Reason::CertificateInvalid
            }
            pve::Origin::Transport { .. } => Reason::Unreachable,
            pve::Origin::Http { status: 401, .. } => Reason::CredentialsUnavailable,
            pve::Origin::Http { status: 403, .. } => Reason::PermissionMissing,
            pve::Origin::Http { .. } if error.node_unreachable() => Reason::NodeOffline,
            pve::Origin::Config => Reason::ProviderNotConfigured,
            _ => Reason::ApiError,
        }
    }

    /// Whether this reason concerns the endpoint itself, so every node shares it and no
    /// per-node call can succeed.
    pub fn is_cluster_wide(self) -> bool {
        matches!(
            self,
            Reason::CertificateInvalid
                | Reason::CredentialsUnavailable
                | Reason::Unreachable
                | Reason::ProviderNotConfigured
        )
    }
}

/// Alphabetical by code, so sorted reason lists read the same in every release.
impl Ord for Reason {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.code().cmp(other.code())
    }
}

impl PartialOrd for Reason {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// One finding: a code plus the human sentence that explains it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub reason: Reason,
    pub message: String,
}

impl Finding {
    pub fn new(reason: Reason, message: impl Into<String>) -> Finding {
        Finding {
            reason,
            message: message.into(),
        }
    }

    /// A finding for a failed call, with a hint where one helps.
    pub fn from_error(what: &str, error: &pve::Error) -> Finding {
        let reason = Reason::of_error(error);
        // A request that got no answer says why (certificate, refused, DNS, timeout).
        let hint = match (reason, crate::diagnostics::connection_hint(error)) {
            (_, Some(hint)) => format!(" {hint}"),
            (Reason::CredentialsUnavailable, None) => {
                " Check the token id and secret, and that the token is neither expired nor deleted."
                    .to_owned()
            }
            _ => String::new(),
        };
        Finding::new(
            reason,
            format!("{what}: {}{hint}", sentence(&error.to_string())),
        )
    }
}

/// Ends a quoted text with one full stop: PVE's own texts often end in one already
/// ("authentication failure!" would read "failure!." otherwise).
fn sentence(text: &str) -> String {
    let text = text.trim_end();
    if text.ends_with(['.', '!', '?']) {
        text.to_owned()
    } else {
        format!("{text}.")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_unique_and_documented() {
        let mut codes: Vec<&str> = Reason::ALL.iter().map(|r| r.code()).collect();
        codes.sort();
        codes.dedup();
        assert_eq!(codes.len(), Reason::ALL.len());
        let docs = Reason::documentation();
        for reason in Reason::ALL {
            assert!(
                docs.contains(&format!("`{}`", reason.code())),
                "{reason} undocumented"
            );
        }
    }

    #[test]
    fn a_quoted_text_ends_with_one_full_stop() {
        assert_eq!(sentence("authentication failed!"), "authentication failed!");
        assert_eq!(sentence("no such storage"), "no such storage.");
        assert_eq!(sentence("done. "), "done.");
    }
}
