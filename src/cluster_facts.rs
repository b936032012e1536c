//! Facts about the cluster that plan-time checks ask for (nodes, each node's storages and
//! bridges, pools, template configs), fetched at most once per provider process however
//! many resources ask (a failed fetch is not kept: the next asker fetches again): Terraform
//! starts one provider process per plan or apply walk, and
//! templates, storages and bridges do not change within one. Knows nothing of Terraform.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use pve::access::Permissions;
use pve::nodes::{NetworkInterface, NodeSummary};
use pve::pools::Pool;
use pve::qemu::VmConfig;
use pve::storage::StorageInfo;
use pve::{Client, RetryPolicy, retry_idempotent};
use tokio::sync::OnceCell;

/// A fact, or why it could not be had (shared by every asker).
pub type Fact<T> = Result<Arc<T>, Arc<pve::Error>>;

/// One fetch per key, shared by concurrent askers. A failed fetch is not kept: the next
/// asker fetches again (a transient fault must not stand for the whole process).
#[derive(Debug)]
struct Memo<K, T> {
    cells: Mutex<HashMap<K, Arc<OnceCell<Arc<T>>>>>,
}

impl<K, T> Default for Memo<K, T> {
    fn default() -> Self {
        Self {
            cells: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, T> Memo<K, T> {
    async fn get<E, F, Fut>(&self, key: &K, fetch: F) -> Result<Arc<T>, Arc<E>>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let cell = self
            .cells
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(key.clone())
            .or_default()
            .clone();
        cell.get_or_try_init(|| async { fetch().await.map(Arc::new) })
            .await
            .cloned()
            .map_err(Arc::new)
    }
}

#[derive(Debug, Default)]
pub struct ClusterFacts {
    nodes: Memo<(), Vec<NodeSummary>>,
    storages: Memo<String, Vec<StorageInfo>>,
    bridges: Memo<String, Vec<NetworkInterface>>,
    pools: Memo<(), Vec<Pool>>,
    configs: Memo<(String, u32), VmConfig>,
    pool_audit: Memo<String, bool>,
    token_permissions: Memo<(), Permissions>,
    path_permissions: Memo<String, Permissions>,
}

static READS: std::sync::LazyLock<RetryPolicy> = std::sync::LazyLock::new(RetryPolicy::default);

impl ClusterFacts {
    /// `GET /nodes`.
    pub async fn nodes(&self, client: &Client) -> Fact<Vec<NodeSummary>> {
        self.nodes
            .get(&(), || retry_idempotent(&READS, || client.nodes()))
            .await
    }

    /// `GET /nodes/{node}/storage`: every storage the node sees, with its status.
    pub async fn storages(&self, client: &Client, node: &str) -> Fact<Vec<StorageInfo>> {
        self.storages
            .get(&node.to_owned(), || {
                retry_idempotent(&READS, || client.node(node).storages(None))
            })
            .await
    }

    /// `GET /nodes/{node}/network?type=any_bridge`.
    pub async fn bridges(&self, client: &Client, node: &str) -> Fact<Vec<NetworkInterface>> {
        self.bridges
            .get(&node.to_owned(), || {
                retry_idempotent(&READS, || client.node(node).network(Some("any_bridge")))
            })
            .await
    }

    /// `GET /pools`.
    pub async fn pools(&self, client: &Client) -> Fact<Vec<Pool>> {
        self.pools
            .get(&(), || retry_idempotent(&READS, || client.pools()))
            .await
    }

    /// Whether the token holds `Pool.Audit` on a pool: without it PVE leaves `pool` out of
    /// `/cluster/resources`, so a VM missing from a pool there may still be in it.
    pub async fn may_audit_pool(&self, client: &Client, pool: &str) -> Fact<bool> {
        let path = format!("/pool/{pool}");
        self.pool_audit
            .get(&pool.to_owned(), || async {
                let perms = retry_idempotent(&READS, || client.permissions(Some(&path))).await?;
                Ok(pve::access::has_privilege(&perms, &path, "Pool.Audit"))
            })
            .await
    }

    /// Whether the token holds `privilege` on `path`. The token's whole permission listing
    /// (`GET /access/permissions`, PVE's effective permissions on every path it has an ACL
    /// on) is asked once per process; only when it grants nothing there is `path` itself
    /// asked (once), so privileges PVE derives otherwise (a pool the VM is in) still count.
    pub async fn holds(&self, client: &Client, path: &str, privilege: &str) -> Fact<bool> {
        let everywhere = self
            .token_permissions
            .get(&(), || {
                retry_idempotent(&READS, || client.permissions(None))
            })
            .await?;
        if pve::access::has_privilege(&everywhere, path, privilege) {
            return Ok(Arc::new(true));
        }
        let here = self
            .path_permissions
            .get(&path.to_owned(), || {
                retry_idempotent(&READS, || client.permissions(Some(path)))
            })
            .await?;
        Ok(Arc::new(pve::access::has_privilege(&here, path, privilege)))
    }

    /// A VM's config (for templates: whether it is one, its disk).
    pub async fn config(&self, client: &Client, node: &str, vmid: u32) -> Fact<VmConfig> {
        self.configs
            .get(&(node.to_owned(), vmid), || {
                retry_idempotent(&READS, || client.node(node).qemu(vmid).config())
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_failed_fetch_is_not_remembered() {
        let memo: Memo<(), u32> = Memo::default();
        let failed = memo
            .get(&(), || async { Err::<u32, _>("connection reset") })
            .await;
        assert!(failed.is_err());
        let ok = |v: u32| async move { Ok::<_, &str>(v) };
        assert_eq!(*memo.get(&(), || ok(7)).await.unwrap(), 7);
        assert_eq!(*memo.get(&(), || ok(8)).await.unwrap(), 7, "a fact is kept");
    }

    #[tokio::test]
    async fn a_fact_is_fetched_once_per_key() {
        let memo: Memo<String, u32> = Memo::default();
        let calls = AtomicU32::new(0);
        let fetch = |value: u32| {
            calls.fetch_add(1, Ordering::Relaxed);
            async move { Ok::<_, pve::Error>(value) }
        };
        let pve1 = "pve1".to_owned();
        let (a, b) = tokio::join!(memo.get(&pve1, || fetch(1)), memo.get(&pve1, || fetch(2)));
        assert_eq!((*a.unwrap(), *b.unwrap()), (1, 1));
        assert_eq!(*memo.get(&"pve2".to_owned(), || fetch(3)).await.unwrap(), 3);
        assert_eq!(calls.load(Ordering::Relaxed), 2);
    }
}
