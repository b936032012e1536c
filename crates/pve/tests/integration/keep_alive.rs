//! The client never sends on a connection pveproxy is about to close: its pool lets go of an
//! idle connection before pveproxy's inactivity timeout does (pve-http-server
//! `src/PVE/APIServer/AnyEvent.pm` `new`, 5c9e4ea: `$self->{timeout} = 5`, which pve-manager's
//! `PVE/Service/pveproxy.pm` leaves as it is; bpg#3082 is a pool that kept connections longer).
//! Against pve-sim's cost profile, which closes an idle connection as pveproxy does.

use std::time::Duration;

use pve::client::{POOL_IDLE_TIMEOUT, PVEPROXY_IDLE_TIMEOUT};
use pvesim::SimConfig;

use crate::common::{poll_until, start_with};

fn with_cost_profile() -> SimConfig {
    SimConfig {
        cost_profile: Some(Default::default()),
        ..SimConfig::default()
    }
}

/// With the defaults (the pool's 4 s, pveproxy's 5 s): a connection used again at once is
/// kept, and one left idle past the pool's limit (but not yet pveproxy's) is not reused: the
/// next request opens a new connection and succeeds, and pveproxy closed none under it.
#[tokio::test]
async fn a_connection_idle_past_the_pool_limit_is_not_reused() {
    let config = with_cost_profile();
    let profile = config.cost_profile.clone().unwrap();
    assert_eq!(
        profile.keep_alive_idle_ms,
        PVEPROXY_IDLE_TIMEOUT.as_millis() as u64
    );
    let env = start_with(config, |_| {}).await;
    env.client.version().await.unwrap();
    env.client.version().await.unwrap();
    let costs = env.admin.costs().await;
    assert_eq!(costs.connections.opened, 1, "kept for the next request");
    let last_use = costs.now_ms;
    // Past the pool's limit, short of pveproxy's: only the client can have let go of it.
    let between =
        (POOL_IDLE_TIMEOUT + (PVEPROXY_IDLE_TIMEOUT - POOL_IDLE_TIMEOUT) / 4).as_millis() as u64;
    poll_until(
        "the pool's idle limit to pass",
        Duration::from_secs(20),
        || async {
            let now = env.admin.costs().await.now_ms;
            (now >= last_use + between).then_some(())
        },
    )
    .await;
    env.client.version().await.unwrap();
    let costs = env.admin.costs().await;
    assert_eq!(costs.connections.opened, 2, "a new connection: {costs:?}");
    env.shutdown().await;
}
