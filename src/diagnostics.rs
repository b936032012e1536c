//! Where PVE errors become Terraform diagnostics: one summary naming the operation and the
//! VM, PVE's own message quoted, and a hint where one helps.

use tfplugin::Diagnostic;

/// "Unable to create proxy VM edge-1" + PVE's message + a hint.
pub fn pve_error(operation: &str, vm_name: &str, error: &pve::Error) -> Diagnostic {
    let mut detail = error.to_string();
    if let Some(failure) = error.task_failure()
        && !failure.log_tail.is_empty()
    {
        detail.push_str("\n\nLast lines of the task log:\n");
        for line in failure.log_tail.iter().rev().take(8).rev() {
            detail.push_str("  ");
            detail.push_str(line);
            detail.push('\n');
        }
    }
    Diagnostic::error(
        format!("Unable to {operation} proxy VM {vm_name}"),
        with_hint(detail, error),
    )
}

/// A plain error about a VM, for failures that are not PVE errors.
pub fn vm_error(operation: &str, vm_name: &str, detail: impl Into<String>) -> Diagnostic {
    Diagnostic::error(format!("Unable to {operation} proxy VM {vm_name}"), detail)
}

/// What to do about a request that got no HTTP answer, naming the endpoint: the fix differs
/// for a certificate, a refused connection, an unknown host and a timeout.
pub fn connection_hint(error: &pve::Error) -> Option<String> {
    let server = error.server().unwrap_or("the endpoint");
    Some(match error.connect_failure()? {
        pve::ConnectFailure::Certificate => format!(
            "The TLS certificate of {server} is not trusted. Give the cluster's CA with `ca_cert` \
                in the provider block or PROXMOX_VE_CA_CERT (PEM text or a file path): it is \
                /etc/pve/pve-root-ca.pem on any node, e.g. `scp root@NODE:/etc/pve/pve-root-ca.pem \
                .`. Use the host name the certificate names. For a throwaway lab only, `insecure = \
                true` skips the check."
        ),
        pve::ConnectFailure::Refused => format!(
            "Nothing accepted the connection at {server} (connection refused): it answered at \
                once, so check the endpoint's host and port (PVE's API listens on 8006) and that \
                pveproxy runs there."
        ),
        pve::ConnectFailure::NameNotResolved => format!(
            "The host name of {server} could not be resolved (DNS): check the endpoint's spelling, \
                or use the node's IP address."
        ),
        pve::ConnectFailure::TimedOut => format!(
            "{server} did not answer in time: check that the host is up and that no firewall drops \
                port {}. The next apply resumes where this one stopped.",
            server.rsplit(':').next().unwrap_or("8006")
        ),
        pve::ConnectFailure::Other => format!(
            "The connection to {server} broke repeatedly. The next apply resumes where this one \
                stopped."
        ),
    })
}

/// What to do about a token PVE refused (HTTP 401): the whole hint where the refusal was
/// met, one line where the provider did not send a request because of it (the client sends
/// nothing more with a refused token), so a fleet in state shows the hint once.
pub fn token_hint(error: &pve::Error) -> Option<String> {
    if error.auth_failure() != Some(pve::AuthFailure::Credentials) {
        return None;
    }
    Some(if error.refused_earlier().is_some() {
        "Check PROXMOX_VE_API_TOKEN / api_token (the error with PVE's refusal says more)."
            .to_owned()
    } else {
        "PVE refused the API token. Check PROXMOX_VE_API_TOKEN / api_token \
            (USER@REALM!TOKENID=SECRET), that the token is not expired or revoked, and that its \
            user exists. The provider sends nothing more with it in this run: every other \
            resource and data source reports this refusal in one line."
            .to_owned()
    })
}

/// `detail`, the account of a failed PVE call, with the hint for `error` when there is one.
pub fn with_hint(mut detail: String, error: &pve::Error) -> String {
    if let Some(hint) = hint(error) {
        detail.push_str("\n\n");
        detail.push_str(&hint);
    }
    detail
}

fn hint(error: &pve::Error) -> Option<String> {
    if let Some(hint) = connection_hint(error) {
        return Some(hint);
    }
    if let Some(pve::AuthFailure::Permission(missing)) = error.auth_failure() {
        let needed = match (&missing.path, missing.privileges.as_slice()) {
            (Some(path), [first, ..]) => format!("{first} on {path}"),
            _ => "the privilege named above".to_owned(),
        };
        return Some(format!(
            "The API token lacks {needed}. Grant it to the token's role (see \
                docs/guides/pve-setup.md for the exact list), or run the proxmox_health data \
                source to list every missing privilege."
        ));
    }
    if let Some(hint) = token_hint(error) {
        return Some(hint);
    }
    match error.kind() {
        pve::ErrorKind::Auth => Some(
            "PVE refused the API token. Check PROXMOX_VE_API_TOKEN / api_token \
                (USER@REALM!TOKENID=SECRET), that the token is not expired or revoked, and that \
                the user exists."
                .into(),
        ),
        pve::ErrorKind::Locked => Some(
            "Another task (a backup, a migration) held the lock for the whole operation timeout. \
                Check the task list on the node; raise `timeouts`, or apply again once it is done: \
                the next apply resumes where this one stopped."
                .into(),
        ),
        // PVE's proxy could not reach the node that holds the VM (pve-http-server answers
        // 595 for it): a node down stays down however often the provider retries.
        pve::ErrorKind::Transient if error.node_unreachable() => Some(
            "PVE could not reach the node behind this request (HTTP 595: the node is down, or \
                cut off from the one the provider talks to), every time the provider tried. \
                Nothing on that node can be changed or destroyed until it answers, so nothing \
                was: bring the node back (or move its VMs to a live node, as PVE's docs on a \
                lost node describe), then run the command again. The state still holds the VM."
                .into(),
        ),
        pve::ErrorKind::Transient => Some(
            "The cluster answered with an error that usually passes (a node unreachable from the \
                one the provider talks to, a busy proxy), every time the provider tried. The next \
                apply resumes where this one stopped; nothing was left half-tracked."
                .into(),
        ),
        _ => match error.known_refusal()? {
            pve::KnownRefusal::StorageWithoutIso => Some(
                "The seed storage must accept `iso` content: enable ISO images on it in \
                Datacenter → Storage, or choose another with `seed_storage`."
                    .into(),
            ),
            pve::KnownRefusal::StartOfTemplate => {
                Some("The VMID belongs to a template. Choose another `vmid`.".into())
            }
            pve::KnownRefusal::DiskShrink => Some(
                "PVE cannot shrink disks. Set `disk_gib` to at least the current size; a smaller \
                value plans a replacement."
                    .into(),
            ),
        },
    }
}
