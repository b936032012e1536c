//! Acceptance-test harness: drives the real `terraform` binary, fully offline, against our
//! built provider and (by default) an in-process pve-sim.
//!
//! - Gated by `TF_ACC=1`; without it each test reports itself skipped ([`skip`]) and passes.
//! - Terraform comes from `TF_ACC_TERRAFORM_PATH` or the PATH.
//! - The provider is installed through a `filesystem_mirror` for
//!   `registry.terraform.io/proxyvm/proxmox` with no `direct {}` block, so `terraform init`
//!   never reaches a registry.
//! - Live mode: with `PROXMOX_VE_ENDPOINT` and `PROXMOX_VE_API_TOKEN` set, the tests written
//!   for it ([`Host::start`]) run against that host and observe it through the PVE API only;
//!   every other test (fault injection, the journal, a world of its own) reports itself
//!   skipped ([`skip`]).

mod host;
pub mod sim_state;

#[allow(unused_imports)]
pub use host::{Facts, Host, Observer, clone_template, live_mode, run_prefix};

use std::path::{Path, PathBuf};
use std::process::Output;

pub const PROVIDER_VERSION: &str = env!("CARGO_PKG_VERSION");

fn tf_acc_set() -> bool {
    std::env::var("TF_ACC").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// Reports a test as skipped: a `SKIPPED: <test> (<reason>)` line on stderr, and the same
/// line appended to the file `PROXMOX_VE_TEST_SKIP_LOG` names, if any. cargo counts a test
/// that returns early as passed; `scripts/test.sh` counts the `SKIPPED:` lines of that file
/// as skipped instead (a passing test's stderr is captured unless `--nocapture`; the file
/// is not). Call it once, then return.
pub fn skip(test: &str, reason: &str) {
    record(&format!("SKIPPED: {test} ({reason})"));
}

/// Reports a part of a test that did not run while the rest did: a `SKIPPED PART: <test>:
/// <part> (<reason>)` line, recorded as [`skip`] does. The test still counts as passed;
/// `scripts/test.sh` lists these lines.
pub fn skip_part(test: &str, part: &str, reason: &str) {
    record(&format!("SKIPPED PART: {test}: {part} ({reason})"));
}

fn record(line: &str) {
    eprintln!("{line}");
    if let Some(path) = std::env::var_os("PROXMOX_VE_TEST_SKIP_LOG").filter(|p| !p.is_empty()) {
        use std::io::Write;
        // One short write with O_APPEND: lines of tests running side by side never mix.
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
        if let Err(e) = written {
            panic!("cannot record the skip in {}: {e}", path.to_string_lossy());
        }
    }
}

/// The Debian package of each tool an acceptance test runs, as
/// `scripts/install-test-deps.sh` installs them.
pub const TOOL_PACKAGES: &[(&str, &str)] = &[("bsdtar", "libarchive-tools"), ("gpg", "gpg")];

/// Fails `test` at once when a tool it runs is not on the PATH, naming the command that
/// installs it: deep inside the test the failure would read only "cannot run bsdtar".
pub fn require_tools(test: &str, tools: &[&str]) {
    let on_path = |tool: &str| {
        std::env::var_os("PATH")
            .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(tool).is_file()))
    };
    let missing: Vec<&str> = tools.iter().copied().filter(|t| !on_path(t)).collect();
    if missing.is_empty() {
        return;
    }
    let packages: Vec<&str> = missing
        .iter()
        .map(|tool| {
            TOOL_PACKAGES
                .iter()
                .find(|(name, _)| name == tool)
                .map_or(*tool, |(_, package)| package)
        })
        .collect();
    panic!(
        "{test} runs {}, not installed here: run scripts/install-test-deps.sh, or as root: \
         apt-get install -y {}",
        missing.join(", "),
        packages.join(" ")
    );
}

/// The reason a test gated on `TF_ACC` gives when it is unset.
pub const NO_TF_ACC: &str = "set TF_ACC=1 to run terraform-driven acceptance tests";

/// Returns false (and reports the test skipped) when acceptance tests are not enabled, or
/// when a live host is named: tests asking through this function run only against the
/// in-process pve-sim.
pub fn acceptance_enabled(test: &str) -> bool {
    simulator_only(
        test,
        "the in-process pve-sim's fault injection, its journal or a world of its own",
    )
}

/// [`acceptance_enabled`] for a test that says what it needs of the in-process simulator
/// (`needs`), which a live host cannot give: the reason its skip line names.
pub fn simulator_only(test: &str, needs: &str) -> bool {
    if !tf_acc_set() {
        skip(test, NO_TF_ACC);
        return false;
    }
    if live_mode() {
        skip(test, &format!("simulator-only: needs {needs}"));
        return false;
    }
    true
}

pub fn terraform_path() -> PathBuf {
    if let Ok(path) = std::env::var("TF_ACC_TERRAFORM_PATH") {
        return PathBuf::from(path);
    }
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|dir| dir.join("terraform"))
                .find(|candidate| candidate.is_file())
        })
        .expect("TF_ACC=1 but no terraform on the PATH and no TF_ACC_TERRAFORM_PATH")
}

/// Where the credentials of the cluster under test come from.
#[derive(Clone)]
pub struct Target {
    pub endpoint: String,
    pub token: String,
    pub ca_pem: Option<String>,
}

/// A temp working directory with a CLI config whose only provider source is a local mirror
/// holding the provider binary that cargo built for this test run.
pub struct Workspace {
    pub dir: tempfile::TempDir,
    pub target: Target,
    extra_env: Vec<(String, String)>,
}

impl Workspace {
    pub fn new(target: Target) -> Self {
        let base = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(base).unwrap();
        let dir = tempfile::Builder::new()
            .prefix("acc-")
            .tempdir_in(base)
            .unwrap();
        let mirror_dir = dir
            .path()
            .join("mirror/registry.terraform.io/proxyvm/proxmox")
            .join(PROVIDER_VERSION)
            .join(platform());
        std::fs::create_dir_all(&mirror_dir).unwrap();
        let installed = mirror_dir.join(format!("terraform-provider-proxmox_v{PROVIDER_VERSION}"));
        let built = Path::new(env!("CARGO_BIN_EXE_terraform-provider-proxmox"));
        // A hard link is instant; fall back to a copy across file systems.
        if std::fs::hard_link(built, &installed).is_err() {
            std::fs::copy(built, &installed).unwrap();
        }
        let cli_config = format!(
            "provider_installation {{\n  filesystem_mirror {{\n    path    = \"{}\"\n    include = \
                [\"registry.terraform.io/proxyvm/proxmox\"]\n  }}\n}}\n",
            dir.path().join("mirror").display()
        );
        std::fs::write(dir.path().join("cli.tfrc"), cli_config).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        Self {
            dir,
            target,
            extra_env: Vec::new(),
        }
    }

    pub fn work_dir(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    pub fn set_env(&mut self, key: &str, value: &str) {
        self.extra_env.push((key.into(), value.into()));
    }

    /// Writes `main.tf` (replacing the previous configuration).
    pub fn write_main_tf(&self, hcl: &str) {
        std::fs::write(self.work_dir().join("main.tf"), hcl).unwrap();
    }

    /// The `terraform { required_providers … }` block every configuration starts with.
    pub fn preamble() -> String {
        format!(
            "terraform {{\n  required_providers {{\n    proxmox = {{\n      source  = \
                \"proxyvm/proxmox\"\n      version = \"{PROVIDER_VERSION}\"\n    }}\n  }}\n}}\n"
        )
    }

    /// A terraform command in the work dir, offline, with the provider pointed at the
    /// target through the documented environment variables.
    fn command(&self, args: &[&str]) -> std::process::Command {
        let mut cmd = std::process::Command::new(terraform_path());
        cmd.args(args)
            .current_dir(self.work_dir())
            .env("TF_CLI_CONFIG_FILE", self.dir.path().join("cli.tfrc"))
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("PROXMOX_VE_ENDPOINT", &self.target.endpoint)
            .env("PROXMOX_VE_API_TOKEN", &self.target.token)
            .env_remove("TF_LOG")
            .env_remove("TF_LOG_PROVIDER");
        match &self.target.ca_pem {
            Some(pem) => cmd.env("PROXMOX_VE_CA_CERT", pem),
            None => cmd.env_remove("PROXMOX_VE_CA_CERT"),
        };
        for (key, value) in &self.extra_env {
            cmd.env(key, value);
        }
        cmd
    }

    /// Runs terraform with the given arguments to completion.
    pub async fn terraform(&self, args: &[&str]) -> TfOutput {
        let mut cmd = tokio::process::Command::from(self.command(args));
        cmd.kill_on_drop(true);
        let output = cmd.output().await.expect("terraform could not be started");
        TfOutput {
            args: args.iter().map(|a| a.to_string()).collect(),
            output,
        }
    }

    /// Starts terraform in its own process group, so a test can kill it together with the
    /// provider it launched.
    pub fn spawn_terraform(&self, args: &[&str]) -> Running {
        let mut cmd = self.command(args);
        cmd.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        Running {
            child: cmd.spawn().expect("terraform could not be started"),
        }
    }

    /// Writes `main.tf` and runs `terraform init`.
    pub async fn init_with(&self, hcl: &str) {
        self.write_main_tf(hcl);
        self.init().await;
    }

    pub async fn init(&self) {
        self.terraform(&["init", "-input=false", "-no-color"])
            .await
            .success();
    }

    pub async fn apply(&self) -> TfOutput {
        self.terraform(&["apply", "-auto-approve", "-input=false", "-no-color"])
            .await
    }

    pub async fn destroy(&self) -> TfOutput {
        self.terraform(&["destroy", "-auto-approve", "-input=false", "-no-color"])
            .await
    }

    /// Asserts that both a `-refresh=false` plan and a refreshing plan propose nothing.
    pub async fn assert_plans_empty(&self) {
        for refresh in ["-refresh=false", "-refresh=true"] {
            let out = self
                .terraform(&[
                    "plan",
                    "-detailed-exitcode",
                    "-input=false",
                    "-no-color",
                    refresh,
                ])
                .await;
            assert_eq!(
                out.code(),
                0,
                "plan {refresh} is not empty (exit {}):\n{}",
                out.code(),
                out.all_text()
            );
        }
    }

    /// `terraform show -json` of the current state.
    pub async fn state(&self) -> serde_json::Value {
        let out = self
            .terraform(&["show", "-json", "-no-color"])
            .await
            .success();
        serde_json::from_str(&out.stdout()).expect("terraform show -json printed no JSON")
    }
}

fn platform() -> String {
    let os = std::env::consts::OS;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{os}_{arch}")
}

/// A terraform process running in its own process group.
pub struct Running {
    child: std::process::Child,
}

impl Running {
    /// Whether terraform has exited.
    pub fn exited(&mut self) -> bool {
        self.child.try_wait().unwrap().is_some()
    }

    /// Calls `sample` over and over until terraform exits; returns the smallest sample, how
    /// many were taken, and whether terraform succeeded.
    pub async fn sample_until_exit<F, Fut>(&mut self, mut sample: F) -> (usize, usize, bool)
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = usize>,
    {
        let (mut fewest, mut samples) = (usize::MAX, 0);
        loop {
            let status = self.child.try_wait().unwrap();
            fewest = fewest.min(sample().await);
            samples += 1;
            if let Some(status) = status {
                return (fewest, samples, status.success());
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
    }

    /// SIGINT to terraform alone, as a user's Ctrl-C: terraform then asks the provider to stop
    /// (StopProvider) and exits on its own. Returns whether it exited successfully.
    pub fn interrupt_and_wait(mut self, limit: std::time::Duration) -> bool {
        let pid = self.child.id().to_string();
        let status = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .unwrap();
        assert!(status.success(), "kill -INT {pid} failed");
        let deadline = std::time::Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            if std::time::Instant::now() > deadline {
                self.kill_group();
                panic!("terraform did not exit within {limit:?} of Ctrl-C");
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// SIGKILL to terraform and everything it started (the provider included).
    pub fn kill_group(mut self) {
        let group = format!("-{}", self.child.id());
        let status = std::process::Command::new("kill")
            .args(["-KILL", "--", &group])
            .status()
            .unwrap();
        assert!(status.success(), "kill -KILL {group} failed");
        let _ = self.child.wait();
    }
}

/// The summary of the provider's warning that it kept the plan's values over a VM's.
pub const KEPT_PLAN: &str = "VM changed in PVE while this apply ran";

pub struct TfOutput {
    pub args: Vec<String>,
    pub output: Output,
}

impl TfOutput {
    pub fn code(&self) -> i32 {
        self.output.status.code().unwrap_or(-1)
    }
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
    pub fn all_text(&self) -> String {
        format!(
            "--- stdout\n{}\n--- stderr\n{}",
            self.stdout(),
            self.stderr()
        )
    }
    #[track_caller]
    pub fn success(self) -> Self {
        let out = self.success_keeping_the_plan();
        // The provider keeps the plan's values over what a VM showed at the end of an apply
        // only when PVE changed it meanwhile; a test that does not change it must not see
        // that, or a value the provider got wrong would pass as PVE's doing.
        assert!(
            !out.all_text().contains(KEPT_PLAN),
            "terraform {} kept the plan over what PVE showed, and nothing changed the VM:\n{}",
            out.args.join(" "),
            out.all_text()
        );
        out
    }
    /// Success, where the test changes a VM in PVE while the apply runs.
    #[track_caller]
    pub fn success_keeping_the_plan(self) -> Self {
        assert!(
            self.output.status.success(),
            "terraform {} failed:\n{}",
            self.args.join(" "),
            self.all_text()
        );
        self
    }
    #[track_caller]
    pub fn failure(self) -> Self {
        assert!(
            !self.output.status.success(),
            "terraform {} succeeded but should have failed:\n{}",
            self.args.join(" "),
            self.all_text()
        );
        self
    }
}

/// The real PVE host named by the environment, if any. `PROXMOX_VE_CA_CERT` may be PEM text
/// or a path, as for the provider; unset means the system's roots.
pub fn real_pve_target() -> Option<Target> {
    let endpoint = std::env::var("PROXMOX_VE_ENDPOINT")
        .ok()
        .filter(|v| !v.is_empty())?;
    let token = std::env::var("PROXMOX_VE_API_TOKEN")
        .ok()
        .filter(|v| !v.is_empty())?;
    let ca_pem = std::env::var("PROXMOX_VE_CA_CERT")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|ca| {
            if ca.contains("-----BEGIN") {
                ca
            } else {
                std::fs::read_to_string(&ca)
                    .unwrap_or_else(|e| panic!("PROXMOX_VE_CA_CERT: cannot read {ca}: {e}"))
            }
        });
    Some(Target {
        endpoint,
        token,
        ca_pem,
    })
}

/// Terraform wraps diagnostic text at its terminal width and may prefix its lines with `│`:
/// compare texts with those folded to single spaces.
pub fn flat(text: &str) -> String {
    text.replace('│', " ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// A simulator on a free loopback port, living as long as the returned value.
pub async fn start_sim(config: pvesim::SimConfig) -> (pvesim::Sim, Target) {
    let sim = pvesim::testing::start(config).await;
    let target = Target {
        endpoint: sim.endpoint().to_owned(),
        token: sim.token().to_owned(),
        ca_pem: Some(sim.ca_pem().to_owned()),
    };
    (sim, target)
}

/// Talks to the simulator as a test: its admin API (`/_sim/…`, through pve-sim's own typed
/// client, [`pvesim::testing::Admin`]) and its PVE API, for changes made behind Terraform's
/// back. The admin answers are handed out as JSON, which is what the assertions index.
pub struct SimClient {
    http: reqwest::Client,
    endpoint: String,
    auth: String,
    /// `None` on a live host whose certificate chains to a system root: it has no `/_sim/`.
    admin: Option<pvesim::testing::Admin>,
}

impl SimClient {
    pub fn new(target: &Target) -> Self {
        // PVE (and pve-sim) close a connection idle for 5 s: idle ones are dropped before.
        let builder =
            reqwest::Client::builder().pool_idle_timeout(std::time::Duration::from_secs(2));
        let builder = match &target.ca_pem {
            Some(pem) => builder
                .tls_certs_only(reqwest::Certificate::from_pem_bundle(pem.as_bytes()).unwrap()),
            // A live host whose certificate chains to a system root.
            None => builder,
        };
        let http = builder.build().unwrap();
        let admin = target
            .ca_pem
            .as_deref()
            .map(|pem| pvesim::testing::Admin::connect(&target.endpoint, &target.token, pem));
        Self {
            http,
            endpoint: target.endpoint.clone(),
            auth: format!("PVEAPIToken={}", target.token),
            admin,
        }
    }

    fn admin(&self) -> &pvesim::testing::Admin {
        self.admin
            .as_ref()
            .expect("the admin API is pve-sim's; this target has no CA of a pve-sim")
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> serde_json::Value {
        let response = request
            .header("Authorization", &self.auth)
            .send()
            .await
            .unwrap();
        let status = response.status();
        let text = response.text().await.unwrap();
        assert!(status.is_success(), "simulator answered {status}: {text}");
        serde_json::from_str(&text).unwrap_or(serde_json::Value::Null)
    }

    /// `GET /_sim/state`.
    pub async fn state(&self) -> serde_json::Value {
        serde_json::to_value(self.admin().state().await).unwrap()
    }

    /// The seed volume each VM booted first (its first instance-id), by VMID.
    pub async fn first_seeds(&self) -> std::collections::BTreeMap<u64, String> {
        self.admin()
            .first_seeds()
            .await
            .into_iter()
            .map(|(vmid, boot)| (u64::from(vmid), boot.volid))
            .collect()
    }

    /// `GET /_sim/tasks`: every task, oldest first.
    pub async fn tasks(&self) -> Vec<pvesim::inspect::TaskTiming> {
        self.admin().tasks().await
    }

    /// `GET /_sim/journal`: every request, oldest first.
    pub async fn journal(&self) -> Vec<serde_json::Value> {
        let entries = self.admin().journal().await;
        entries
            .iter()
            .map(|entry| serde_json::to_value(entry).unwrap())
            .collect()
    }

    /// The requests answered after the first `since`, oldest first.
    pub async fn journal_since(&self, since: usize) -> Vec<serde_json::Value> {
        let entries = self.admin().journal_since(since).await;
        entries
            .iter()
            .map(|entry| serde_json::to_value(entry).unwrap())
            .collect()
    }

    /// How many requests were answered so far.
    pub async fn journal_len(&self) -> usize {
        self.admin().journal_len().await
    }

    /// Holds the `request`th PVE API request from now, and every later one, until
    /// [`SimClient::release_hold`] (pve-sim's `/_sim/hold`): a kill point at a request index;
    /// with `after_handling`, request N is handled and only its answer held.
    pub async fn hold_request(&self, request: u64, after_handling: bool) {
        self.admin().hold_request(request, after_handling).await;
    }

    /// Holds the `request`th PVE API request from now whose line (`METHOD /path?query`,
    /// decoded) contains `counting`, and every request after it (replacing a hold set
    /// before: its held requests are dropped), until [`SimClient::release_hold`].
    pub async fn hold_counting(&self, request: u64, counting: &str) {
        self.admin().hold_counting(request, counting).await;
    }

    /// Like [`SimClient::hold_counting`], but the `request`th counted request is handled
    /// and only its answer held.
    pub async fn hold_answer_counting(&self, request: u64, counting: &str) {
        self.admin().hold_answer_counting(request, counting).await;
    }

    /// Waits until the world stands still at the held request (`true`), or `gone` says the
    /// client ended first (`false`).
    pub async fn until_held(&self, gone: impl FnMut() -> bool) -> bool {
        self.admin().until_held(gone).await
    }

    /// `POST /_sim/nodes/{node}/reboot`: every VM on it stops, the node comes back and
    /// starts its `onboot` VMs.
    pub async fn reboot_node(&self, node: &str) {
        self.admin().reboot_node(node).await;
    }

    /// An operator's migration of VM `vmid` to `target`, run while requests are held
    /// (`POST /_sim/vms/{vmid}/migrate`): its answer once the task ended, or the refusal.
    pub async fn migrate_now(&self, vmid: u64, target: &str) -> Result<serde_json::Value, String> {
        let vmid = u32::try_from(vmid).expect("a VMID");
        self.admin().migrate(vmid, target).await
    }

    /// The hold's status: `seen` counts the PVE API requests since it was set.
    pub async fn hold_status(&self) -> pvesim::hold::HoldStatus {
        self.admin().hold_status().await
    }

    /// Drops the held requests unanswered and clears the hold.
    pub async fn release_hold(&self) {
        self.admin().release_hold().await;
    }

    /// Clears the hold and lets the held requests go on, handled as if they arrived now.
    pub async fn resume_hold(&self) {
        self.admin().resume_hold().await;
    }

    /// `PUT /_sim/faults`, written as JSON the way pve-sim's faults are documented.
    pub async fn set_faults(&self, faults: serde_json::Value) {
        let faults = serde_json::from_value(faults).expect("faults in pve-sim's shape");
        self.admin().set_faults(&faults).await;
    }

    /// A PVE API call with a form body (or query for GET/DELETE); returns `data`.
    pub async fn api(&self, method: &str, path: &str, form: &[(&str, &str)]) -> serde_json::Value {
        let url = format!("{}/api2/json{path}", self.endpoint);
        let request = match method {
            "GET" => self.http.get(url).query(form),
            "DELETE" => self.http.delete(url).query(form),
            "POST" => self.http.post(url).form(form),
            "PUT" => self.http.put(url).form(form),
            other => panic!("no method {other}"),
        };
        self.send(request).await["data"].clone()
    }

    /// Like [`SimClient::api`], but `None` for an error answer (e.g. a VM deleted meanwhile).
    pub async fn try_api(
        &self,
        method: &str,
        path: &str,
        query: &[(&str, &str)],
    ) -> Option<serde_json::Value> {
        let url = format!("{}/api2/json{path}", self.endpoint);
        let request = match method {
            "GET" => self.http.get(url).query(query),
            other => panic!("try_api is for reading, not {other}"),
        };
        let response = request
            .header("Authorization", &self.auth)
            .send()
            .await
            .ok()?;
        if !response.status().is_success() {
            return None;
        }
        let body: serde_json::Value = response.json().await.ok()?;
        Some(body["data"].clone())
    }

    /// Waits until VM `vmid`'s config on `node` is qemu-server's `lock: destroyed` placeholder
    /// (a destroy task freed its disks; `stalled_tasks` can hold it there); false if it did
    /// not come within a minute.
    pub async fn until_destroy_locked(&self, node: &str, vmid: impl std::fmt::Display) -> bool {
        let config = format!("/nodes/{node}/qemu/{vmid}/config");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while std::time::Instant::now() < deadline {
            let seen = self.try_api("GET", &config, &[]).await;
            if seen.is_some_and(|config| config["lock"] == "destroyed") {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        false
    }

    /// Waits for a task the test started itself.
    pub async fn wait_task(&self, upid: &serde_json::Value) {
        let upid = upid.as_str().unwrap();
        let node = upid.split(':').nth(1).unwrap();
        // A live host stops a VM in seconds, not milliseconds.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let status = self
                .api("GET", &format!("/nodes/{node}/tasks/{upid}/status"), &[])
                .await;
            if status["status"] == "stopped" {
                assert_eq!(status["exitstatus"], "OK", "task {upid} failed: {status}");
                return;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "task {upid} did not end"
            );
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }

    /// The write requests (POST, PUT, DELETE) in the journal from entry `since` on.
    pub async fn writes_since(&self, since: usize) -> Vec<serde_json::Value> {
        self.journal()
            .await
            .into_iter()
            .skip(since)
            .filter(|e| matches!(e["method"].as_str(), Some("POST" | "PUT" | "DELETE")))
            .collect()
    }

    /// The VMs that carry our ownership tag.
    pub async fn our_vms(&self) -> Vec<serde_json::Value> {
        self.state().await["vms"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|vm| {
                vm["tags"]
                    .as_str()
                    .is_some_and(|t| t.split(';').any(|t| t == "proxyvm"))
                    || vm["config"]["description"]
                        .as_str()
                        .is_some_and(|d| d.contains("proxyvm-owner:"))
            })
            .cloned()
            .collect()
    }

    /// Volumes on the given storage.
    pub async fn volumes_on(&self, storage: &str) -> Vec<serde_json::Value> {
        self.state().await["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|v| v["storage"] == storage)
            .cloned()
            .collect()
    }
}
