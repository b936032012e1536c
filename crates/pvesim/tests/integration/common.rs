//! Helpers for the conformance suite: a simulator per test and a plain HTTPS client.

use std::sync::Arc;
use std::time::Duration;

use pvesim::testing::Admin;
use pvesim::{Faults, Sim, SimConfig};
use reqwest::StatusCode;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

pub struct Harness {
    pub sim: Sim,
    pub client: reqwest::Client,
    pub admin: Admin,
}

/// A simulator for one test, and an HTTP/1.1 client that trusts it.
pub async fn start(config: SimConfig) -> Harness {
    let sim = pvesim::testing::start(config).await;
    let ca = reqwest::Certificate::from_pem(sim.ca_pem().as_bytes()).expect("CA parses");
    let client = reqwest::Client::builder()
        .tls_certs_only([ca])
        .http1_only()
        .build()
        .expect("client builds");
    let admin = Admin::new(&sim);
    Harness { sim, client, admin }
}

/// Faults written as the JSON `PUT /_sim/faults` takes.
pub fn faults(json: Value) -> Faults {
    serde_json::from_value(json).expect("faults as /_sim/faults takes them")
}

pub struct Answer {
    pub status: StatusCode,
    pub body: String,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {:?}", self.body))
    }
    pub fn data(&self) -> Value {
        assert_eq!(self.status, StatusCode::OK, "body: {}", self.body);
        self.json()["data"].clone()
    }
    pub fn message(&self) -> String {
        self.json()["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    }
}

impl Harness {
    pub fn url(&self, path: &str) -> String {
        format!("{}/api2/json{path}", self.sim.endpoint())
    }

    pub fn auth(&self) -> String {
        format!("PVEAPIToken={}", self.sim.token())
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Answer {
        let response = request
            .header("Authorization", self.auth())
            .send()
            .await
            .expect("request sent");
        let status = response.status();
        let body = response.text().await.expect("body read");
        Answer { status, body }
    }

    pub async fn get(&self, path: &str) -> Answer {
        self.send(self.client.get(self.url(path))).await
    }

    pub async fn post(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        self.send(self.client.post(self.url(path)).form(form)).await
    }

    pub async fn put(&self, path: &str, form: &[(&str, &str)]) -> Answer {
        self.send(self.client.put(self.url(path)).form(form)).await
    }

    pub async fn delete(&self, path: &str) -> Answer {
        self.send(self.client.delete(self.url(path))).await
    }

    /// Polls a task until it stops (deadline 10 s) and returns its exitstatus.
    pub async fn wait_task(&self, upid: &str) -> String {
        let node = upid.split(':').nth(1).expect("UPID has a node");
        let path = format!("/nodes/{node}/tasks/{}/status", encode(upid));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let status = self.get(&path).await.data();
            if status["status"] == "stopped" {
                return status["exitstatus"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string();
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "task {upid} did not stop"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Polls `check` on GET `path` until it holds (deadline 10 s).
    pub async fn poll_until(&self, path: &str, check: impl Fn(&Answer) -> bool) -> Answer {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let answer = self.get(path).await;
            if check(&answer) {
                return answer;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "condition on {path} never held; last: {} {}",
                answer.status,
                answer.body
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Full clone of the default template and wait.
    pub async fn clone_template(&self, newid: u32, name: &str) {
        let newid = newid.to_string();
        let upid = self
            .post(
                "/nodes/pve1/qemu/9000/clone",
                &[("newid", &newid), ("name", name), ("full", "1")],
            )
            .await
            .data();
        assert_eq!(self.wait_task(upid.as_str().unwrap()).await, "OK");
    }

    /// Multipart upload like PVE expects (fields first, file part named `filename`).
    pub async fn upload(
        &self,
        node: &str,
        storage: &str,
        filename: &str,
        bytes: Vec<u8>,
    ) -> Answer {
        let form = reqwest::multipart::Form::new().text("content", "iso").part(
            "filename",
            reqwest::multipart::Part::bytes(bytes).file_name(filename.to_string()),
        );
        self.send(
            self.client
                .post(self.url(&format!("/nodes/{node}/storage/{storage}/upload")))
                .multipart(form),
        )
        .await
    }
}

pub fn encode(text: &str) -> String {
    url::form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// A minimal ISO9660 image with a Joliet directory: enough for a NoCloud seed. Written
/// here (not with our `nocloud` crate) so the simulator's reader is checked independently.
pub fn joliet_iso(volume_id: &str, files: &[(&str, &[u8])]) -> Vec<u8> {
    const SECTOR: usize = 2048;
    let data_start = 22;
    let mut extents = Vec::new();
    let mut next = data_start;
    for (_, data) in files {
        extents.push(next);
        next += data.len().div_ceil(SECTOR).max(1);
    }
    let total = next;
    let mut image = vec![0u8; total * SECTOR];

    let both32 = |v: u32| {
        let mut out = v.to_le_bytes().to_vec();
        out.extend(v.to_be_bytes());
        out
    };
    let record = |extent: usize, len: usize, dir: bool, name: &[u8]| {
        let mut rec = vec![0u8; 33];
        rec[2..10].copy_from_slice(&both32(extent as u32));
        rec[10..18].copy_from_slice(&both32(len as u32));
        rec[25] = if dir { 2 } else { 0 };
        rec[28..32].copy_from_slice(&[1, 0, 0, 1]);
        rec[32] = name.len() as u8;
        rec.extend_from_slice(name);
        if name.len().is_multiple_of(2) {
            rec.push(0);
        }
        rec[0] = rec.len() as u8;
        rec
    };
    let descriptor = |kind: u8, root_extent: usize, joliet: bool| {
        let mut d = vec![0u8; SECTOR];
        d[0] = kind;
        d[1..6].copy_from_slice(b"CD001");
        d[6] = 1;
        let mut vid = [b' '; 32];
        vid[..volume_id.len()].copy_from_slice(volume_id.as_bytes());
        d[40..72].copy_from_slice(&vid);
        d[80..88].copy_from_slice(&both32(total as u32));
        if joliet {
            d[88..91].copy_from_slice(b"%/E");
        }
        d[120..124].copy_from_slice(&[1, 0, 0, 1]);
        d[124..128].copy_from_slice(&[1, 0, 0, 1]);
        d[128..132].copy_from_slice(&[0, 8, 8, 0]);
        let root = record(root_extent, SECTOR, true, &[0]);
        d[156..156 + root.len()].copy_from_slice(&root);
        d
    };
    image[16 * SECTOR..17 * SECTOR].copy_from_slice(&descriptor(1, 20, false));
    image[17 * SECTOR..18 * SECTOR].copy_from_slice(&descriptor(2, 21, true));
    let mut terminator = vec![0u8; SECTOR];
    terminator[0] = 255;
    terminator[1..6].copy_from_slice(b"CD001");
    terminator[6] = 1;
    image[18 * SECTOR..19 * SECTOR].copy_from_slice(&terminator);

    for (root_sector, joliet) in [(20usize, false), (21, true)] {
        let mut dir = Vec::new();
        dir.extend(record(root_sector, SECTOR, true, &[0]));
        dir.extend(record(root_sector, SECTOR, true, &[1]));
        for ((name, data), extent) in files.iter().zip(&extents) {
            let encoded: Vec<u8> = if joliet {
                name.encode_utf16().flat_map(|u| u.to_be_bytes()).collect()
            } else {
                let short: String = name
                    .to_uppercase()
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
                    .collect();
                format!("{short}.;1").into_bytes()
            };
            dir.extend(record(*extent, data.len(), false, &encoded));
        }
        image[root_sector * SECTOR..root_sector * SECTOR + dir.len()].copy_from_slice(&dir);
    }
    for ((_, data), extent) in files.iter().zip(&extents) {
        image[extent * SECTOR..extent * SECTOR + data.len()].copy_from_slice(data);
    }
    image
}

pub const GOOD_USER_DATA: &str = "#cloud-config\npackages:\n  - qemu-guest-agent\nruncmd:\n  - \
    systemctl enable --now qemu-guest-agent\n";

pub fn seed(hostname: &str, user_data: &str) -> Vec<u8> {
    let meta = format!("instance-id: iid-{hostname}\nlocal-hostname: {hostname}\n");
    joliet_iso(
        "cidata",
        &[
            ("meta-data", meta.as_bytes()),
            ("user-data", user_data.as_bytes()),
        ],
    )
}

/// A raw TLS connection to the simulator, to see what the server does with bytes no
/// HTTP client would send.
pub async fn raw_tls(sim: &Sim) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(sim.ca_pem().as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let address = sim.endpoint().trim_start_matches("https://").to_string();
    let tcp = tokio::net::TcpStream::connect(&address).await.unwrap();
    tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("127.0.0.1").unwrap(), tcp)
        .await
        .unwrap()
}

/// Reports the running test skipped the way the workspace's tests do (`skip` in
/// `tests/provider/support/mod.rs`): a `SKIPPED: <test> (<reason>)` line, also appended to
/// the file `PROXMOX_VE_TEST_SKIP_LOG` names, which `scripts/test.sh` counts as skipped.
pub fn skipped(reason: &str) {
    let thread = std::thread::current();
    let line = format!("SKIPPED: {} ({reason})", thread.name().unwrap_or("?"));
    println!("{line}");
    if let Some(path) = std::env::var_os("PROXMOX_VE_TEST_SKIP_LOG").filter(|p| !p.is_empty()) {
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()))
            .expect("cannot record the skip in PROXMOX_VE_TEST_SKIP_LOG");
    }
}
