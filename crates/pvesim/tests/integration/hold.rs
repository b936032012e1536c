//! The test facility behind deterministic kill points (`/_sim/hold`, #38): the Nth PVE API
//! request from the hold is answered nothing and not handled, the world stands still there
//! (later requests wait too), and the release drops them unanswered. Not PVE behaviour, so
//! no PVE source is cited: what is checked is that nothing held takes effect.

use std::time::Duration;

use pvesim::SimConfig;

use crate::common::start;

/// Requests 1 and 2 are answered; the third (a config write) and a fourth wait unhandled;
/// after the release both clients see their connection dropped, the write never happened,
/// and new requests are answered again.
#[tokio::test]
async fn the_held_request_and_later_ones_never_take_effect() {
    let h = start(SimConfig::default()).await;
    h.clone_template(150, "held").await;
    let journalled = h.admin.journal().await.len();
    h.admin.hold_request(3, false).await;
    h.get("/version").await.data();
    h.get("/nodes").await.data();
    let url = h.url("/nodes/pve1/qemu/150/config");
    let auth = h.auth();
    let (client, write_url) = (h.client.clone(), url.clone());
    let write = tokio::spawn(async move {
        client
            .put(write_url)
            .header("Authorization", auth)
            .form(&[("description", "written while held")])
            .send()
            .await
    });
    assert!(h.admin.until_held(|| write.is_finished()).await);
    let (client, auth) = (h.client.clone(), h.auth());
    let later =
        tokio::spawn(async move { client.get(url).header("Authorization", auth).send().await });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while h.admin.hold_status().await.held < 2 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the later request was not held"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(
        h.admin.journal().await.len(),
        journalled + 2,
        "only the two requests before the held one were handled"
    );
    h.admin.release_hold().await;
    assert!(
        write.await.unwrap().is_err(),
        "the held write is dropped unanswered"
    );
    assert!(
        later.await.unwrap().is_err(),
        "the later request is dropped too"
    );
    let config = h.get("/nodes/pve1/qemu/150/config").await.data();
    assert_ne!(
        config["description"], "written while held",
        "the held write never took effect"
    );
    assert!(!h.admin.hold_status().await.armed);
}

/// With `after_handling`, the Nth request takes effect and only its answer is lost.
#[tokio::test]
async fn after_handling_the_nth_request_takes_effect_and_its_answer_is_lost() {
    let h = start(SimConfig::default()).await;
    h.clone_template(151, "held-after").await;
    h.admin.hold_request(1, true).await;
    let (client, auth) = (h.client.clone(), h.auth());
    let url = h.url("/nodes/pve1/qemu/151/config");
    let write = tokio::spawn(async move {
        client
            .put(url)
            .header("Authorization", auth)
            .form(&[("description", "written, answer lost")])
            .send()
            .await
    });
    assert!(h.admin.until_held(|| write.is_finished()).await);
    h.admin.release_hold().await;
    assert!(write.await.unwrap().is_err(), "the answer is lost");
    let config = h.get("/nodes/pve1/qemu/151/config").await.data();
    assert_eq!(config["description"], "written, answer lost");
}

/// `journal/len` counts every request answered, and `journal?since=N` returns those after
/// the first N: what a benchmark reads instead of the whole journal each time.
#[tokio::test]
async fn the_journal_is_read_from_an_index() {
    let h = start(SimConfig::default()).await;
    let before = h.admin.journal_len().await;
    assert_eq!(before, h.admin.journal().await.len());
    h.clone_template(150, "counted").await;
    let after = h.admin.journal_len().await;
    assert!(after > before, "the clone's requests are counted");
    let tail = h.admin.journal_since(before).await;
    assert_eq!(tail.len(), after - before);
    assert_eq!(tail, h.admin.journal().await[before..after]);
    assert!(h.admin.journal_since(after + 10).await.is_empty());
}

/// An operator's migration through the admin API (`POST /_sim/vms/{vmid}/migrate`) runs
/// while a client's requests are held, and is answered once its task ended: the held read,
/// resumed, meets the VM gone from the node it asked (PVE's "Configuration file … does not
/// exist"), and the VM is on the target. An HA-managed VM is refused: the HA manager moves
/// it.
#[tokio::test]
async fn an_operator_migrates_a_vm_while_a_client_s_requests_are_held() {
    let h = start(SimConfig::default()).await;
    h.clone_template(152, "moved-held").await;
    h.admin.hold_request(1, false).await;
    let (client, auth) = (h.client.clone(), h.auth());
    let url = h.url("/nodes/pve1/qemu/152/config");
    let read =
        tokio::spawn(async move { client.get(url).header("Authorization", auth).send().await });
    assert!(h.admin.until_held(|| read.is_finished()).await);
    let moved = h
        .admin
        .migrate(152, "pve2")
        .await
        .expect("the migration runs");
    assert_eq!(moved["exitstatus"], "OK", "{moved}");
    assert_eq!(moved["node"], "pve2", "{moved}");
    assert!(
        moved["upid"]
            .as_str()
            .is_some_and(|u| u.contains(":qmigrate:152:")),
        "{moved}"
    );
    h.admin.resume_hold().await;
    let answer = read.await.unwrap().expect("the held read is answered");
    assert_eq!(answer.status().as_u16(), 500);
    let text = answer.text().await.unwrap();
    assert!(
        text.contains("Configuration file 'nodes/pve1/qemu-server/152.conf' does not exist"),
        "{text}"
    );
    let config = h.get("/nodes/pve2/qemu/152/config").await.data();
    assert_eq!(config["name"], "moved-held");

    h.post("/cluster/ha/resources", &[("sid", "vm:152")])
        .await
        .data();
    let refused = h.admin.migrate(152, "pve3").await.expect_err("refused");
    assert!(refused.contains("HA-managed"), "{refused}");
}
