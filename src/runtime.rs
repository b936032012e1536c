//! Process-wide coordination between the resource calls Terraform runs in parallel in one
//! provider process: per-name locks, VMIDs reserved by creates in flight, and the short-lived
//! cluster listing shared by all reads.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Mutex as AsyncMutex;

/// How long one `/cluster/resources` listing serves reads: long enough for a whole refresh
/// of a plan, short enough that a plan run a moment later sees fresh data.
pub const LISTING_TTL: Duration = Duration::from_secs(5);

#[derive(Debug, Default)]
pub struct Runtime {
    name_locks: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
    reserved_vmids: Mutex<BTreeSet<u32>>,
    listing: AsyncMutex<Option<(Instant, Arc<Vec<pve::cluster::ClusterVm>>)>>,
    /// Per `fleet/name`: the instances planned in this process ("vmid N" for an existing
    /// VM, a counter for each planned create).
    planned_names: Mutex<HashMap<String, BTreeSet<String>>>,
    planned_creates: std::sync::atomic::AtomicU64,
    /// Held while one create chooses its node, so parallel creates see each other's choice.
    placement: AsyncMutex<()>,
    /// Memory this process promised to nodes for VMs it is creating: (node, bytes, VMID once
    /// known). Counted until the cluster listing shows the VM itself.
    placed: Mutex<Vec<(String, u64, Option<u32>)>>,
}

impl Runtime {
    /// Serialises every create/delete of one VM name within this process, so two
    /// operations on the same name can never race each other's probing and adoption.
    pub async fn lock_name(&self, name: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self.name_locks.lock().unwrap_or_else(|e| e.into_inner());
            locks.entry(name.to_owned()).or_default().clone()
        };
        lock.lock_owned().await
    }

    /// Notes that a resource instance plans to own `name` in `fleet`; false when another
    /// instance already does. `instance` is empty for a create (each call is a new instance).
    pub fn note_planned_name(&self, fleet: &str, name: &str, instance: &str) -> bool {
        let instance = if instance.is_empty() {
            let n = self
                .planned_creates
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            format!("create {n}")
        } else {
            instance.to_owned()
        };
        let mut names = self.planned_names.lock().unwrap_or_else(|e| e.into_inner());
        let owners = names.entry(format!("{fleet}/{name}")).or_default();
        owners.insert(instance);
        owners.len() == 1
    }

    /// Serialises node choices within this process.
    pub async fn placement_guard(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.placement.lock().await
    }

    /// Records that a create promised `bytes` of memory on `node`; returns its index for
    /// [`Runtime::placed_as`].
    pub fn place(&self, node: &str, bytes: u64) -> usize {
        let mut placed = self.placed.lock().unwrap_or_else(|e| e.into_inner());
        placed.push((node.to_owned(), bytes, None));
        placed.len() - 1
    }

    /// The VMID a placed create ended up with, so the listing can take over its count.
    pub fn placed_as(&self, index: usize, vmid: u32) {
        if let Some(entry) = self
            .placed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(index)
        {
            entry.2 = Some(vmid);
        }
    }

    /// Memory per node promised by this process's creates that `listing` does not show yet.
    pub fn placed_memory(&self, listing: &[pve::cluster::ClusterVm]) -> HashMap<String, u64> {
        let mut out: HashMap<String, u64> = HashMap::new();
        for (node, bytes, vmid) in self.placed.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            let listed = vmid.is_some_and(|vmid| {
                listing
                    .iter()
                    .any(|vm| vm.vmid == vmid && vm.maxmem.is_some())
            });
            if !listed {
                *out.entry(node.clone()).or_default() += bytes;
            }
        }
        out
    }

    /// Claims a VMID for a create in flight; false if another create holds it.
    pub fn reserve_vmid(&self, vmid: u32) -> bool {
        self.reserved_vmids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(vmid)
    }

    pub fn release_vmid(&self, vmid: u32) {
        self.reserved_vmids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&vmid);
    }

    /// The cluster's VM listing, fetched at most once per [`LISTING_TTL`] however many reads
    /// ask for it concurrently.
    pub async fn vm_listing(
        &self,
        client: &pve::Client,
    ) -> pve::Result<Arc<Vec<pve::cluster::ClusterVm>>> {
        let mut cached = self.listing.lock().await;
        if let Some((at, listing)) = cached.as_ref()
            && at.elapsed() < LISTING_TTL
        {
            return Ok(listing.clone());
        }
        let policy = pve::RetryPolicy::default();
        let fresh =
            Arc::new(pve::retry_idempotent(&policy, || client.cluster().vm_resources()).await?);
        *cached = Some((Instant::now(), fresh.clone()));
        Ok(fresh)
    }

    /// Drops the cached listing, after this process changed where VMs are.
    pub async fn forget_listing(&self) {
        *self.listing.lock().await = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_vmid_is_reserved_once_until_released() {
        let runtime = Runtime::default();
        assert!(runtime.reserve_vmid(100_001));
        assert!(!runtime.reserve_vmid(100_001));
        runtime.release_vmid(100_001);
        assert!(runtime.reserve_vmid(100_001));
    }

    #[test]
    fn a_name_is_planned_by_one_instance_per_fleet() {
        let runtime = Runtime::default();
        assert!(runtime.note_planned_name("", "edge-0", "vmid 7"));
        // The same existing VM planned again is the same instance.
        assert!(runtime.note_planned_name("", "edge-0", "vmid 7"));
        assert!(runtime.note_planned_name("prod", "edge-0", ""));
        assert!(
            !runtime.note_planned_name("", "edge-0", ""),
            "a create beside an existing VM of that name"
        );
        assert!(runtime.note_planned_name("", "edge-1", ""));
        assert!(
            !runtime.note_planned_name("", "edge-1", ""),
            "two creates of one name"
        );
    }

    #[tokio::test]
    async fn name_locks_serialise_one_name_only() {
        let runtime = Runtime::default();
        let held = runtime.lock_name("edge-1").await;
        // Another name is free while edge-1 is held.
        let _other = runtime.lock_name("edge-2").await;
        let waiting = tokio::time::timeout(Duration::from_millis(20), runtime.lock_name("edge-1"));
        assert!(waiting.await.is_err(), "edge-1 was locked twice");
        drop(held);
        let _again = runtime.lock_name("edge-1").await;
    }
}
