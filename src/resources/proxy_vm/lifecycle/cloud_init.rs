//! Cloud-init's verdict, read through the guest agent after the address, from
//! `/run/cloud-init/status.json` alone: one guest read per look. cloud-init `cmd/main.py`
//! `status_wrapper` deletes `status.json` and `result.json` at `init-local` (run at every
//! boot by cloud-init's own units) and rewrites `status.json` at each stage's start and end;
//! `modules-final`'s `finished` is set only when this boot's final stage ended, in the same
//! write that holds every stage's `errors` and `recoverable_errors` (the write just before
//! `result.json`, whose `v1.errors` is those `errors` joined). `cloud-init status`
//! (`cmd/status.py`, `get_errors`) reads the errors from `status.json` the same way.
//! Errors fail the create; recoverable errors ("degraded") are a warning. A guest that
//! cannot be asked (its agent refuses file reads, the token lacks `VM.GuestAgent.FileRead`)
//! counts as ready at its address, with a warning that names the cause.

use std::time::Duration;

use pve::ErrorKind;
use tokio::time::Instant;

use super::super::model::SeedStays;
use super::error::{Step, StepError};
use super::guest::Guest;
use super::operation;

const RESULT_JSON: &str = "/run/cloud-init/result.json";
/// The instance the guest's cloud-init runs as (`stages.py` writes it at every boot from the
/// datasource it used, or from its cache when it trusts it: a guest that never read its
/// seed shows another instance-id than the seed's).
pub(super) const INSTANCE_ID: &str = "/var/lib/cloud/data/instance-id";
const STATUS_JSON: &str = "/run/cloud-init/status.json";
/// `cloud-init-generator`'s mark of a boot whose cloud-init does not run (the image's
/// `/etc/cloud/cloud-init.disabled`, or no datasource found by `ds-identify`).
const DISABLED: &str = "/run/cloud-init/disabled";
/// `status.json` and `result.json` as the last run left them on the disk (`status_wrapper`
/// writes them there and links them from `/run/cloud-init/`).
const RECORDED_STATUS_JSON: &str = "/var/lib/cloud/data/status.json";
const RECORDED_RESULT_JSON: &str = "/var/lib/cloud/data/result.json";
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
    /// The guest could not be asked: why, for a warning, and whether for good (`stays`;
    /// `None`: a privilege of the token, which an administrator may grant). The address
    /// counts as ready.
    Unknown {
        why: String,
        stays: Option<SeedStays>,
    },
    /// Still running at its own deadline (`cloud_init_timeout`), no error so far.
    StillRunning,
    /// The VM stopped before the verdict could be read (PVE: "VM N is not running"): its
    /// node rebooted, someone stopped it, or its user-data powers it off. Nothing answers
    /// until something starts it again, so the wait ends here.
    Stopped,
    /// cloud-init does not run in this boot (`/run/cloud-init/disabled`): no verdict of this
    /// boot will come. The caller asks the disk what the last run left ([`recorded_verdict`]).
    Disabled,
}

/// How a guest file read ended, as the verdict needs it.
#[derive(Debug)]
pub(super) enum GuestFile {
    Read(Vec<u8>),
    /// Not there (yet).
    Missing,
    /// The guest cannot be asked: the warning's text, and whether for good (see
    /// [`Verdict::Unknown`]).
    Refused {
        why: String,
        stays: Option<SeedStays>,
    },
}

/// Reads a guest file, telling a missing file and a refusal from other failures: PVE relays
/// every qemu-ga error as "Agent error: <desc>", and `pve` judges it by kind
/// ([`pve::AgentFailure`]): "no such file" is a file not there (yet); any other agent error
/// (a command disabled in any qemu-ga release's words, SELinux's "Permission denied", one
/// not known yet) means the guest cannot be asked, at once, never after the create's whole
/// timeout (#39). A transient answer (a 5xx, a reset, a lost answer) is retried as every
/// other read is, never taken for a refusal. A VM that moved is asked where it went.
pub(super) async fn read_guest_file(guest: Guest<'_>, path: &str) -> Step<GuestFile> {
    let vmid = guest.vmid();
    let error = loop {
        let asked = guest.node().to_owned();
        let agent = guest.agent();
        match operation::read(|| agent.file_read(path)).await {
            Ok(content) => return Ok(GuestFile::Read(content.bytes)),
            Err(error) if guest.moved(&asked, &error).await? => {}
            Err(error) => break error,
        }
    };
    match error.agent_failure() {
        Some(pve::AgentFailure::FileMissing) => Ok(GuestFile::Missing),
        Some(pve::AgentFailure::Refused) => Ok(GuestFile::Refused {
            stays: Some(SeedStays::GuestRefuses),
            why: format!(
                "the guest agent of VM {vmid} refuses file reads ({path}: {}): its qemu-ga blocks \
             guest-file-open or guest-file-read (as RHEL-family images ship it), or the guest's \
             policy (SELinux) denies the read, so cloud-init's verdict cannot be read. Allow \
             those commands in qemu-ga's config (`block-rpcs`/`allow-rpcs`) to have it checked.",
                error.message().trim()
            ),
        }),
        Some(pve::AgentFailure::NotConfigured) => Ok(GuestFile::Refused {
            stays: Some(SeedStays::NoAgent),
            why: format!(
                "VM {vmid} has no guest agent configured (`agent` is not set), so cloud-init's \
                 verdict cannot be read."
            ),
        }),
        _ if error.auth_failure().is_some() && error.status() == Some(403) => {
            Ok(GuestFile::Refused {
                stays: None,
                why: format!(
                    "the API token may not read files in VM {vmid}'s guest (PVE: {}), so \
                     cloud-init's verdict cannot be read. {GRANT_FILE_READ}",
                    error.message().trim()
                ),
            })
        }
        _ => Err(error.into()),
    }
}

/// Waits (on a backoff bounded by `deadline`) until `status.json` says this boot's
/// `modules-final` finished, and judges it.
/// Errors end the wait with [`StepError::Unworkable`] quoting them and the output log's
/// last lines.
pub(super) async fn wait_for_cloud_init(guest: Guest<'_>, deadline: Instant) -> Step<Verdict> {
    let client = guest.client();
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
            // Not a failure of the VM: a long first boot (#39). The caller says what follows.
            return Ok(Verdict::StillRunning);
        }
        let answer = match read_guest_file(guest, STATUS_JSON).await {
            Err(StepError::Pve(e))
                if e.agent_failure() == Some(pve::AgentFailure::VmNotRunning) =>
            {
                return Ok(Verdict::Stopped);
            }
            // An agent restarting (cloud-init's package upgrades) answers nothing for a
            // moment: look again.
            Err(StepError::Pve(e)) if !e.kind_is_final() => None,
            other => Some(other?),
        };
        match answer {
            Some(GuestFile::Read(bytes)) => {
                let Some(status) = final_status(&bytes).map_err(StepError::Unworkable)? else {
                    pacer.still_running();
                    continue;
                };
                pacer.finished();
                return judged(guest, status).await;
            }
            Some(GuestFile::Refused { why, stays }) => return Ok(Verdict::Unknown { why, stays }),
            // No status yet: a boot whose cloud-init will not run says so at once. Asked only
            // then, so a guest whose status is there costs no second read.
            Some(GuestFile::Missing) => {
                if let Ok(GuestFile::Read(_)) = read_guest_file(guest, DISABLED).await {
                    return Ok(Verdict::Disabled);
                }
            }
            None => {}
        }
        pacer.still_running();
    }
}

/// The verdict the last cloud-init run left on the disk, for a boot in which cloud-init does
/// not run: `None` when no finished run is recorded. Errors fail as a boot's own do.
pub(super) async fn recorded_verdict(guest: Guest<'_>) -> Step<Option<Verdict>> {
    let bytes = match read_guest_file(guest, RECORDED_STATUS_JSON).await? {
        GuestFile::Read(bytes) => bytes,
        GuestFile::Missing => return Ok(None),
        GuestFile::Refused { why, stays } => return Ok(Some(Verdict::Unknown { why, stays })),
    };
    let Some(status) = final_status(&bytes).map_err(StepError::Unworkable)? else {
        return Ok(None);
    };
    judged(guest, status).await.map(Some)
}

/// A finished run's verdict: its errors fail, quoting the output log's last lines.
async fn judged(guest: Guest<'_>, status: FinalStatus) -> Step<Verdict> {
    if !status.errors.is_empty() {
        let log = output_log_tail(guest).await;
        return Err(StepError::CloudInitFailed(failure_text(
            guest.vmid(),
            &status.errors,
            log,
        )));
    }
    Ok(Verdict::Clean {
        recoverable: status.recoverable,
    })
}

/// `result.json` as a look at `/run/cloud-init/result.json` should take it: there, or, in a
/// boot whose cloud-init does not run (`/run/cloud-init/disabled`), the one the last run
/// left on the disk. The disk is asked only when the file is missing from `/run`.
pub(super) async fn result_json(guest: Guest<'_>) -> Step<GuestFile> {
    match read_guest_file(guest, RESULT_JSON).await? {
        GuestFile::Missing => match read_guest_file(guest, DISABLED).await? {
            GuestFile::Read(_) => read_guest_file(guest, RECORDED_RESULT_JSON).await,
            _ => Ok(GuestFile::Missing),
        },
        found => Ok(found),
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

/// What a finished boot's `status.json` says.
#[derive(Debug, PartialEq, Eq)]
struct FinalStatus {
    /// Every stage's `errors`, as `result.json`'s `v1.errors` joins them.
    errors: Vec<String>,
    /// Every stage's `recoverable_errors` (`{LEVEL: [messages]}`), as `LEVEL: message`.
    recoverable: Vec<String>,
}

/// `None` while this boot's `modules-final` has not finished (its `finished` is null until
/// `status_wrapper`'s last write); an unreadable file is an error.
fn final_status(bytes: &[u8]) -> Result<Option<FinalStatus>, String> {
    let json: serde_json::Value = serde_json::from_slice(bytes)
        .map_err(|e| format!("cloud-init's {STATUS_JSON} is not JSON: {e}"))?;
    let stages = json
        .get("v1")
        .and_then(serde_json::Value::as_object)
        .ok_or_else(|| format!("cloud-init's {STATUS_JSON} has no v1"))?;
    let finished = stages
        .get("modules-final")
        .and_then(|stage| stage.get("finished"))
        .is_some_and(serde_json::Value::is_number);
    if !finished {
        return Ok(None);
    }
    let mut status = FinalStatus {
        errors: Vec::new(),
        recoverable: Vec::new(),
    };
    // Stages in sorted order, as `cmd/status.py` `get_errors` walks them.
    for stage in stages.values().filter_map(serde_json::Value::as_object) {
        let errors = stage.get("errors").and_then(serde_json::Value::as_array);
        status
            .errors
            .extend(errors.into_iter().flatten().map(as_text));
        let levels = stage
            .get("recoverable_errors")
            .and_then(serde_json::Value::as_object);
        for (level, messages) in levels.into_iter().flatten() {
            for message in messages.as_array().into_iter().flatten() {
                status
                    .recoverable
                    .push(format!("{level}: {}", as_text(message)));
            }
        }
    }
    Ok(Some(status))
}

fn as_text(value: &serde_json::Value) -> String {
    value
        .as_str()
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// The output log's last lines, when the agent can read them.
async fn output_log_tail(guest: Guest<'_>) -> Option<String> {
    let log = guest.agent().file_read(OUTPUT_LOG).await.ok()?;
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
        "cloud-init in VM {vmid} finished with errors:\n{}{log}\n\nThe VM is kept with its \
         seed, to be looked at: `qm guest exec {vmid} -- cat {OUTPUT_LOG}` on its node, or \
         `cloud-init status --long` in the guest.",
        quoted.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `status.json` as cloud-init `cmd/main.py` `status_wrapper` writes it (indent 1,
    /// sorted keys; every stage a `nullstatus` until it starts): `stage` names the stage
    /// running, and `modules-final`'s `finished` stays null until its end.
    fn status_json(final_finished: &str, final_errors: &str, init_errors: &str) -> Vec<u8> {
        format!(
            r#"{{
 "v1": {{
  "datasource": "DataSourceNoCloud [seed=/dev/sr0]",
  "init": {{"errors": [{init_errors}], "finished": 4.1, "recoverable_errors": {{}},
   "start": 3.2}},
  "init-local": {{"errors": [], "finished": 2.9, "recoverable_errors": {{}}, "start": 2.1}},
  "modules-config": {{"errors": [], "finished": 5.3, "recoverable_errors": {{}},
   "start": 4.6}},
  "modules-final": {{"errors": [{final_errors}], "finished": {final_finished},
   "recoverable_errors": {{"WARNING": ["apt slow"]}}, "start": 5.8}},
  "stage": {stage}
 }}
}}
"#,
            stage = if final_finished == "null" {
                "\"modules-final\""
            } else {
                "null"
            }
        )
        .into_bytes()
    }

    #[test]
    fn a_final_stage_still_running_is_no_verdict_yet() {
        assert_eq!(final_status(&status_json("null", "", "")), Ok(None));
        // Between `init-local`'s fresh file and `modules-final`'s start.
        let early = br#"{"v1": {"datasource": null, "stage": null,
            "init-local": {"errors": [], "finished": 2.9, "recoverable_errors": {}, "start": 2.1},
            "modules-final": {"errors": [], "finished": null, "recoverable_errors": {},
            "start": null}}}"#;
        assert_eq!(final_status(early), Ok(None));
    }

    #[test]
    fn a_finished_boot_gives_every_stage_s_errors_and_recoverable_errors() {
        let clean = final_status(&status_json("7.25", "", "")).unwrap().unwrap();
        assert_eq!(
            clean,
            FinalStatus {
                errors: Vec::new(),
                recoverable: vec!["WARNING: apt slow".to_owned()],
            }
        );
        let failed = final_status(&status_json(
            "7.25",
            r#""('scripts_user', RuntimeError('Runparts: 1 failures'))""#,
            r#""sys.exit(1) called""#,
        ))
        .unwrap()
        .unwrap();
        // Sorted stages, as `result.json` and `cloud-init status` join them.
        assert_eq!(
            failed.errors,
            [
                "sys.exit(1) called",
                "('scripts_user', RuntimeError('Runparts: 1 failures'))"
            ]
        );
        assert!(final_status(b"{}").is_err());
        assert!(final_status(b"not json").is_err());
    }

    #[test]
    fn a_failure_quotes_the_errors_and_the_log() {
        let text = failure_text(101, &["boom".to_owned()], Some("line 1\nline 2".to_owned()));
        assert!(text.contains("  boom"), "{text}");
        assert!(text.contains("line 2"), "{text}");
        // What becomes of the VM (tainted after a create, not after an update) is the apply's
        // to say (`a_failed_first_boot_is_called_tainted_only_after_a_create`).
        assert!(text.contains("The VM is kept with its seed"), "{text}");
        assert!(!text.contains("tainted"), "{text}");
    }
}
