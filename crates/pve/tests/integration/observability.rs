//! What `TF_LOG=debug` shows: one debug line per API call (method, path, status, duration,
//! attempt) and one info line per waited task (type, node, outcome, duration) — and never a
//! query string, a body or the token.

use crate::common;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::faults;
use pve::qemu::ConfigUpdate;
use pve::{RetryPolicy, retry_idempotent};
use serde_json::json;

#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[tokio::test(flavor = "current_thread")]
async fn one_debug_line_per_call_and_one_info_line_per_task() {
    let logs = Captured::default();
    let sink = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // While this is the only dispatcher alive, tracing-core (0.1.36 `callsite.rs`,
    // `Dispatchers::rebuilder`: `JustOne`) computes the interest of a callsite from the
    // default of the thread that first reaches it: another test reaching `PVE task
    // finished` first would cache "never" for this one too. A second live dispatcher makes
    // every callsite ask all of them.
    let _second = tracing::Dispatch::new(tracing_subscriber::registry());

    let env = common::start().await;
    let secret = env.sim.token().rsplit_once('=').unwrap().1.to_owned();
    env.admin
        .set_faults(&faults(json!({"http": [
            {"method": "GET", "path_regex": "^/version$", "status": 503, "count": 2}
        ]})))
        .await;
    let policy = RetryPolicy {
        base_delay: Duration::from_millis(10),
        ..RetryPolicy::default()
    };
    retry_idempotent(&policy, || env.client.version())
        .await
        .unwrap();

    let vm = env.client.node("pve1").qemu(100);
    let description = "user-visible note with a marker 7f3a9c";
    vm.update_config(&ConfigUpdate::new().description(description))
        .await
        .unwrap();
    let upid = vm.stop().await.unwrap();
    env.client.wait_for_task(&upid).await.unwrap();
    let _ = env.client.node("pve1").storages(Some("iso")).await.unwrap();

    let lines = logs.lines();
    let api: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("PVE API call"))
        .collect();
    let version: Vec<&&String> = api.iter().filter(|l| l.contains("/version")).collect();
    assert_eq!(version.len(), 3, "{version:#?}");
    for (i, line) in version.iter().enumerate() {
        assert!(line.contains("DEBUG"), "{line}");
        assert!(
            line.contains("method=\"GET\"") || line.contains("method=GET"),
            "{line}"
        );
        assert!(line.contains("duration_ms="), "{line}");
        assert!(line.contains(&format!("attempt={}", i + 1)), "{line}");
        let status = if i < 2 { "status=503" } else { "status=200" };
        assert!(line.contains(status), "{line}");
    }
    assert!(
        api.iter()
            .any(|l| l.contains("/nodes/pve1/qemu/100/config") && l.contains("PUT")),
        "{api:#?}"
    );
    // Exactly one line per call: the PUT, the stop, the storage list.
    assert_eq!(
        api.iter()
            .filter(|l| l.contains("/nodes/pve1/qemu/100/config"))
            .count(),
        1
    );

    let tasks: Vec<&String> = lines
        .iter()
        .filter(|l| l.contains("PVE task finished"))
        .collect();
    assert_eq!(tasks.len(), 1, "{tasks:#?}");
    let task = tasks[0];
    assert!(task.contains("INFO"), "{task}");
    for field in ["qmstop", "pve1", "outcome=OK", "duration_ms="] {
        assert!(task.contains(field), "{field} missing in {task}");
    }

    let all = lines.join("\n");
    assert!(!all.contains(&secret), "token in logs");
    assert!(!all.contains("7f3a9c"), "request bodies are never logged");
    assert!(
        !all.contains("content=iso"),
        "query strings are never logged"
    );
    env.shutdown().await;
}
