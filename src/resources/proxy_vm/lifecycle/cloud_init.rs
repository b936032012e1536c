//! Cloud-init's verdict, read through the guest agent after the address: cloud-init's
//! `modules-final` writes `/run/cloud-init/result.json` (`{"v1": {"datasource", "errors"}}`)
//! at its very end, and `init-local` deletes it at each boot's start (cloud-init
//! `cmd/main.py`, `status_wrapper`), so its presence says this boot's cloud-init finished.
//! Errors there fail the create; recoverable errors ("degraded") appear only in
//! `status.json` (`v1.<stage>.recoverable_errors`) and are a warning. A guest that cannot be
//! asked (its agent refuses file reads, the token lacks `VM.GuestAgent.FileRead`) counts
//! as ready at its address, with a warning that names the cause.

use std::time::Duration;

use pve::{Client, ErrorKind};
use tokio::time::Instant;

use super::error::{Step, StepError};

pub(super) const RESULT_JSON: &str = "/run/cloud-init/result.json";
const STATUS_JSON: &str = "/run/cloud-init/status.json";
/// How to grant the privilege the verdict needs (to the setup guide's role).
pub(crate) const GRANT_FILE_READ: &str = "Grant VM.GuestAgent.FileRead to the provider's role \
    (the setup guide's: `pveum role modify ProxyVMProvisioner --append 1 --privs \
    VM.GuestAgent.FileRead`).";
const OUTPUT_LOG: &str = "/var/log/cloud-init-output.log";
/// How many of the output log's last lines a failed create quotes.
const LOG_LINES: usize = 15;

/// What cloud-init said of this boot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Finished without errors; `recoverable` holds what it reported as degraded.
    Clean { recoverable: Vec<String> },
    /// The guest could not be asked: why, for a warning. The address counts as ready.
    Unknown(String),
}

/// How a guest file read ended, as the verdict needs it.
#[derive(Debug)]
pub(super) enum GuestFile {
    Read(Vec<u8>),
    /// Not there (yet).
    Missing,
    /// The guest cannot be asked: the warning's text.
    Refused(String),
}

/// Reads a guest file once, telling a missing file and a refusal from other failures. PVE
/// words a qemu-ga error as "VM N qga command 'guest-file-open' failed - <desc>" (qemu-server
/// `QMPClient.pm`, `cmd`), or "Agent error: <desc>" (`Agent.pm`, `check_agent_error`):
/// both carry qemu-ga's desc, which is what is matched.
pub(super) async fn read_guest_file(
    client: &Client,
    node: &str,
    vmid: u32,
    path: &str,
) -> Step<GuestFile> {
    match client.node(node).qemu(vmid).agent().file_read(path).await {
        Ok(content) => Ok(GuestFile::Read(content.bytes)),
        Err(e) if is_missing(&e) => Ok(GuestFile::Missing),
        Err(e) if is_disabled(&e) => Ok(GuestFile::Refused(format!(
            "the guest agent of VM {vmid} refuses file reads (its qemu-ga blocks \
             guest-file-open or guest-file-read, as some distributions ship it), so cloud-init's \
             verdict cannot be read. Allow those commands in qemu-ga's config (`block-rpcs`/\
             `allow-rpcs`) to have it checked."
        ))),
        Err(e) if e.auth_failure().is_some() && e.status() == Some(403) => {
            Ok(GuestFile::Refused(format!(
                "the API token may not read files in VM {vmid}'s guest (PVE: {}), so \
                 cloud-init's verdict cannot be read. {GRANT_FILE_READ}",
                e.message().trim()
            )))
        }
        Err(e) => Err(e.into()),
    }
}

fn is_missing(e: &pve::Error) -> bool {
    e.is_guest_file_missing()
        || (e.message().contains("failed to open file")
            && e.message().contains("No such file or directory"))
}

fn is_disabled(e: &pve::Error) -> bool {
    e.is_agent_command_disabled()
        || (e.message().contains("Command guest-file") && e.message().contains("has been disabled"))
}

/// Waits (on a backoff bounded by `deadline`) until `result.json` exists, and judges it.
/// Errors end the wait with [`StepError::Unworkable`] quoting them and the output log's
/// last lines.
pub(super) async fn wait_for_cloud_init(
    client: &Client,
    node: &str,
    vmid: u32,
    deadline: Instant,
) -> Step<Verdict> {
    let pace = pve::TaskWait {
        first_poll: Duration::from_millis(200),
        backoff: 1.5,
        ..client.config().task_wait.clone()
    };
    let mut pacer = pve::Pacer::new(client.task_times(), "cloud-init", &pace);
    loop {
        // cloud-init's final stage ends after the agent answered: look after a pause (the
        // pacer learns how long it takes), not at once.
        if tokio::time::timeout_at(deadline, pacer.pause())
            .await
            .is_err()
        {
            return Err(StepError::Unworkable(format!(
                "cloud-init in VM {vmid} did not finish within the timeout: \
                 {RESULT_JSON} never appeared. The guest's /var/log/cloud-init-output.log says \
                 what it is doing; raise timeouts.create, or set wait_for = \"address\"."
            )));
        }
        let answer = match read_guest_file(client, node, vmid, RESULT_JSON).await {
            // An agent restarting (cloud-init's package upgrades) answers nothing for a
            // moment: look again.
            Err(StepError::Pve(e)) if !e.kind_is_final() => None,
            other => Some(other?),
        };
        match answer {
            Some(GuestFile::Read(bytes)) => {
                pacer.finished();
                let errors = result_errors(&bytes).map_err(StepError::Unworkable)?;
                if !errors.is_empty() {
                    let log = output_log_tail(client, node, vmid).await;
                    return Err(StepError::Unworkable(failure_text(vmid, &errors, log)));
                }
                let recoverable = match read_guest_file(client, node, vmid, STATUS_JSON).await {
                    Ok(GuestFile::Read(bytes)) => recoverable_errors(&bytes),
                    _ => Vec::new(),
                };
                return Ok(Verdict::Clean { recoverable });
            }
            Some(GuestFile::Refused(why)) => return Ok(Verdict::Unknown(why)),
            Some(GuestFile::Missing) | None => {}
        }
        pacer.still_running();
    }
}

trait FinalKind {
    fn kind_is_final(&self) -> bool;
}

impl FinalKind for pve::Error {
    /// A token without a privilege, a VM deleted underneath, a refused request: waiting
    /// longer changes nothing.
    fn kind_is_final(&self) -> bool {
        matches!(
            self.kind(),
            ErrorKind::Auth | ErrorKind::NotFound | ErrorKind::Invalid
        )
    }
}

/// `v1.errors` of `result.json`.
fn result_errors(bytes: &[u8]) -> Result<Vec<String>, String> {
    let json: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("cloud-init's {RESULT_JSON} is not JSON: {e}"))?;
    let errors = json
        .pointer("/v1/errors")
        .and_then(serde_json::Value::as_array)
        .ok_or_else(|| format!("cloud-init's {RESULT_JSON} has no v1.errors"))?;
    Ok(errors.iter().map(as_text).collect())
}

/// Every stage's `recoverable_errors` (`{LEVEL: [messages]}`) in `status.json`.
fn recoverable_errors(bytes: &[u8]) -> Vec<String> {
    let Ok(json) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Vec::new();
    };
    let Some(stages) = json.get("v1").and_then(serde_json::Value::as_object) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for stage in stages.values() {
        let Some(levels) = stage
            .get("recoverable_errors")
            .and_then(serde_json::Value::as_object)
        else {
            continue;
        };
        for (level, messages) in levels {
            for message in messages.as_array().into_iter().flatten() {
                out.push(format!("{level}: {}", as_text(message)));
            }
        }
    }
    out
}

fn as_text(value: &serde_json::Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// The output log's last lines, when the agent can read them.
async fn output_log_tail(client: &Client, node: &str, vmid: u32) -> Option<String> {
    let agent = client.node(node).qemu(vmid).agent();
    let log = agent.file_read(OUTPUT_LOG).await.ok()?;
    let text = log.text_lossy();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(LOG_LINES);
    Some(lines[start..].join("\n"))
}

fn failure_text(vmid: u32, errors: &[String], log: Option<String>) -> String {
    let quoted: Vec<String> = errors.iter().map(|e| format!("  {e}")).collect();
    let log = match log {
        Some(log) => format!("\n\nThe last lines of the guest's {OUTPUT_LOG}:\n{log}"),
        None => String::new(),
    };
    format!(
        "cloud-init in VM {vmid} finished with errors:\n{}{log}\n\nThe VM is kept (tainted: the \
         next apply replaces it) with its seed, to be looked at: `qm guest exec {vmid} -- cat \
         {OUTPUT_LOG}` on its node, or `cloud-init status --long` in the guest.",
        quoted.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_json_errors_are_read_as_cloud_init_writes_them() {
        // cloud-init `cmd/main.py` `status_wrapper`: indent 1, sorted keys.
        let clean = b"{\n \"v1\": {\n  \"datasource\": \"DataSourceNoCloud [seed=/dev/sr0]\",\n  \
            \"errors\": []\n }\n}\n";
        assert_eq!(result_errors(clean), Ok(Vec::new()));
        let failed = br#"{"v1": {"datasource": null,
            "errors": ["('scripts_user', RuntimeError('Runparts: 1 failures'))"]}}"#;
        assert_eq!(
            result_errors(failed).unwrap(),
            ["('scripts_user', RuntimeError('Runparts: 1 failures'))"]
        );
        assert!(result_errors(b"{}").is_err());
        assert!(result_errors(b"not json").is_err());
    }

    #[test]
    fn recoverable_errors_come_from_every_stage_of_status_json() {
        let status = br#"{"v1": {"datasource": "nocloud", "stage": null,
            "init": {"errors": [], "recoverable_errors": {}},
            "modules-final": {"errors": [], "recoverable_errors": {"WARNING": ["apt slow"]}}}}"#;
        assert_eq!(recoverable_errors(status), ["WARNING: apt slow"]);
        assert!(recoverable_errors(b"[]").is_empty());
    }

    #[test]
    fn a_failure_quotes_the_errors_and_the_log() {
        let text = failure_text(101, &["boom".to_owned()], Some("line 1\nline 2".to_owned()));
        assert!(text.contains("  boom"), "{text}");
        assert!(text.contains("line 2"), "{text}");
        assert!(text.contains("next apply replaces it"), "{text}");
    }
}
