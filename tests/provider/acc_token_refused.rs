//! Acceptance: a token PVE refuses (revoked, expired, wrong secret) is reported once with its
//! hint, however many VMs the state holds, and costs PVE one refused request: pveproxy
//! answers each refusal after 3 s and logs it (pve-http-server `AnyEvent.pm`
//! `handle_request`; pve-manager `PVE/HTTPServer.pm` `auth_handler`).

use crate::support;

use support::{SimClient, Workspace, acceptance_enabled, flat, start_sim};

const FLEET: usize = 6;
/// The hint's first words, which only the error that met the refusal carries.
const HINT: &str = "PVE refused the API token. Check PROXMOX_VE_API_TOKEN / api_token";

#[tokio::test(flavor = "multi_thread")]
async fn a_revoked_token_is_reported_once_for_a_whole_fleet() {
    if !acceptance_enabled("a_revoked_token_is_reported_once_for_a_whole_fleet") {
        return;
    }
    let (_sim, target) = start_sim(pvesim::SimConfig::default()).await;
    let sim = SimClient::new(&target);
    let ws = Workspace::new(target);
    ws.init_with(&format!(
        r##"{preamble}
provider "proxmox" {{
  seed_storage = "proxy-seeds"
}}

resource "proxmox_proxy_vm" "fleet" {{
  count    = {FLEET}
  name     = "revoked-${{count.index}}"
  template = "debian-13-proxy"
  wait_for = "none"
}}

data "proxmox_proxy_vms" "all" {{}}
"##,
        preamble = Workspace::preamble()
    ))
    .await;
    ws.apply().await.success();

    sim.set_faults(serde_json::json!({"token_revoked": true}))
        .await;
    let before = sim.journal().await.len();
    let out = ws
        .terraform(&["plan", "-input=false", "-no-color"])
        .await
        .failure();
    let sent = sim.journal().await.len() - before;
    let text = flat(&out.all_text());
    assert_eq!(sent, 1, "one refused request, not one per VM:\n{text}");
    assert_eq!(text.matches(HINT).count(), 1, "the hint once:\n{text}");
    // Every instance and the data source still fail, each in a line that names the cause.
    let errors = text.matches("Error: ").count();
    assert_eq!(errors, FLEET + 1, "{text}");
    let not_sent = "not sent: PVE refused the API token earlier in this run";
    assert_eq!(text.matches(not_sent).count(), FLEET, "{text}");
    assert!(
        text.contains("Unable to list proxy VMs"),
        "the data source reports it too:\n{text}"
    );
}
