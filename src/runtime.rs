//! Process-wide coordination between the resource calls Terraform runs in parallel in one
//! provider process: per-name locks, VMIDs reserved by creates in flight, the cluster
//! listing and per-node power listings shared by all reads, the template listing shared by
//! all creates, and the pacing of clones on PVE's locks.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Mutex as AsyncMutex;

/// How old a listing may be for a read that does not find its VM in it to call the VM gone
/// without listing again. A listing serves every read of a refresh however long it takes
/// (Terraform runs each plan in a new provider process); a VM is judged gone only against a
/// listing at most this old, so a refresh with gone VMs lists at most once per this long.
pub const GONE_LISTING_AGE: Duration = Duration::from_secs(5);

/// One `/cluster/resources` listing and when it was fetched.
#[derive(Debug, Clone)]
pub struct Listing {
    pub vms: Arc<Vec<pve::cluster::ClusterVm>>,
    fetched: Instant,
}

impl Listing {
    /// The listed VM `vmid`.
    pub fn vm(&self, vmid: u32) -> Option<&pve::cluster::ClusterVm> {
        self.vms.iter().find(|vm| vm.vmid == vmid)
    }
}

/// The live status of every VM on one node, by VMID.
pub type NodePower = Arc<HashMap<u32, pve::qemu::VmStatus>>;

/// A value [`Runtime::once`] keeps.
type Learned = Arc<dyn std::any::Any + Send + Sync>;

/// One node's cached [`NodePower`].
type NodePowerSlot = AsyncMutex<Option<NodePower>>;

#[derive(Debug, Default)]
pub struct Runtime {
    name_locks: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
    reserved_vmids: Mutex<BTreeSet<u32>>,
    listing: AsyncMutex<Option<Listing>>,
    /// Per node: its live VM statuses (`GET /nodes/{node}/qemu?full=1`), one lock each so
    /// concurrent reads on one node share one request.
    node_power: Mutex<HashMap<String, Arc<NodePowerSlot>>>,
    /// The listing creates look templates up in, fetched once per process.
    templates: AsyncMutex<Option<Arc<Vec<pve::cluster::ClusterVm>>>>,
    /// What one create found out that every later create of the process may reuse.
    learned: Mutex<HashMap<String, Arc<tokio::sync::OnceCell<Learned>>>>,
    /// Per `fleet/name`: the instances planned in this process ("vmid N" for an existing
    /// VM, a counter for each planned create).
    planned_names: Mutex<HashMap<String, BTreeSet<String>>>,
    planned_creates: std::sync::atomic::AtomicU64,
    /// Held while one create chooses its node, so parallel creates see each other's choice.
    placement: AsyncMutex<()>,
    /// Memory this process promised to nodes for VMs it is creating: (node, bytes, VMID once
    /// known). Counted until the cluster listing shows the VM itself.
    placed: Mutex<Vec<(String, u64, Option<u32>)>>,
    /// VMIDs whose refresh in this process warned that their mark was lost, so the plan
    /// after it does not say it twice.
    mark_lost_warned: Mutex<BTreeSet<u32>>,
    /// Per `fleet/name`: the create token of the state's VM this process refreshed.
    refreshed_tokens: Mutex<HashMap<String, String>>,
    /// A destroy of this process looked for what killed creates left.
    killed_creates_swept: std::sync::atomic::AtomicBool,
    /// How many clones wait on one storage's (or template's) lock at once, learned from
    /// PVE's refusals (#42).
    lock_pacer: pve::LockPacer,
}

impl Runtime {
    /// The gates every clone of this process passes (see [`pve::LockPacer`]).
    pub fn lock_pacer(&self) -> &pve::LockPacer {
        &self.lock_pacer
    }

    /// True the first time it is asked: the one destroy of this process that looks for what
    /// killed creates left.
    pub fn first_sweep_of_killed_creates(&self) -> bool {
        !self
            .killed_creates_swept
            .swap(true, std::sync::atomic::Ordering::SeqCst)
    }

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

    /// Notes that this process's refresh warned of VM `vmid`'s lost mark.
    pub fn note_mark_lost_warned(&self, vmid: u32) {
        let mut warned = self
            .mark_lost_warned
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        warned.insert(vmid);
    }

    /// Whether this process's refresh already warned of VM `vmid`'s lost mark.
    pub fn mark_lost_warned(&self, vmid: u32) -> bool {
        let warned = self
            .mark_lost_warned
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        warned.contains(&vmid)
    }

    /// Notes that this process refreshed the state's VM `name` in `fleet`, made by `token`.
    pub fn note_refreshed(&self, fleet: &str, name: &str, token: &str) {
        let mut tokens = self
            .refreshed_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        tokens.insert(format!("{fleet}/{name}"), token.to_owned());
    }

    /// The create token of the state's VM `name` in `fleet` this process refreshed, if any.
    pub fn refreshed_token(&self, fleet: &str, name: &str) -> Option<String> {
        let tokens = self
            .refreshed_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        tokens.get(&format!("{fleet}/{name}")).cloned()
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

    /// The cluster's VM listing, fetched once however many reads ask for it concurrently,
    /// and kept until this process changes the cluster ([`Runtime::forget_listing`]) or a
    /// read misses in it ([`Runtime::listing_since`]).
    pub async fn vm_listing(
        &self,
        client: &pve::Client,
    ) -> pve::Result<Arc<Vec<pve::cluster::ClusterVm>>> {
        Ok(self.listing(client).await?.vms)
    }

    /// [`Runtime::vm_listing`] with when it was fetched, for a read that may miss in it.
    pub async fn listing(&self, client: &pve::Client) -> pve::Result<Listing> {
        let mut cached = self.listing.lock().await;
        if let Some(listing) = cached.as_ref() {
            return Ok(listing.clone());
        }
        let fresh = Self::fetch_listing(client).await?;
        *cached = Some(fresh.clone());
        Ok(fresh)
    }

    /// A listing fetched no earlier than `since`: the cached one when it is that recent,
    /// else a new one (which then serves every read). For a read that missed in the
    /// listing it had (its VM not listed, or not on the listed node): reads that miss
    /// together share one new listing.
    pub async fn listing_since(
        &self,
        client: &pve::Client,
        since: Instant,
    ) -> pve::Result<Listing> {
        let mut cached = self.listing.lock().await;
        if let Some(listing) = cached.as_ref()
            && listing.fetched >= since
        {
            return Ok(listing.clone());
        }
        let fresh = Self::fetch_listing(client).await?;
        *cached = Some(fresh.clone());
        Ok(fresh)
    }

    async fn fetch_listing(client: &pve::Client) -> pve::Result<Listing> {
        // The listing shows the cluster as of some moment after this one.
        let fetched = Instant::now();
        let policy = pve::RetryPolicy::default();
        let vms = pve::retry_idempotent(&policy, || client.cluster().vm_resources()).await?;
        Ok(Listing {
            vms: Arc::new(vms),
            fetched,
        })
    }

    /// What a create of this process found out under `key` (a checked seed storage, a
    /// resolved template: neither changes during an apply), found out once: parallel creates
    /// asking for the same key wait for the first one's answer. A failure is not kept, so the
    /// next create asks again.
    pub async fn once<T, E, F, Fut>(&self, key: &str, find_out: F) -> Result<T, E>
    where
        T: Clone + Send + Sync + 'static,
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<T, E>>,
    {
        let cell = {
            let mut learned = self.learned.lock().unwrap_or_else(|e| e.into_inner());
            learned.entry(key.to_owned()).or_default().clone()
        };
        let value = cell
            .get_or_try_init(|| async {
                let value = find_out().await?;
                Ok::<Learned, E>(Arc::new(value))
            })
            .await?;
        Ok(value
            .downcast_ref::<T>()
            .expect("one key holds one type")
            .clone())
    }

    /// Takes a VM this process destroyed out of the cached listings, so placement stops
    /// counting its memory and reads stop looking for it, without listing the cluster again.
    pub async fn forget_vm(&self, vmid: u32) {
        if let Some(listing) = self.templates.lock().await.as_mut() {
            drop_vm(listing, vmid);
        }
        if let Some(listing) = self.listing.lock().await.as_mut() {
            drop_vm(&mut listing.vms, vmid);
        }
        self.forget_node_power();
    }

    /// Drops the cached cluster and power listings, after this process changed the cluster
    /// (made, changed, started or stopped a VM): the next read lists again.
    pub async fn forget_listing(&self) {
        *self.listing.lock().await = None;
        self.forget_node_power();
    }

    fn forget_node_power(&self) {
        self.node_power
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The live status of every VM on `node`, fetched once however many reads ask and kept
    /// as the cluster listing is: one request per node and refresh instead of one per VM. Read
    /// live (not from `/cluster/resources`, whose status lags pvestatd's cycle), with
    /// `full=1` so a paused VM shows as paused.
    pub async fn node_power(&self, client: &pve::Client, node: &str) -> pve::Result<NodePower> {
        let slot = {
            let mut nodes = self.node_power.lock().unwrap_or_else(|e| e.into_inner());
            nodes.entry(node.to_owned()).or_default().clone()
        };
        let mut cached = slot.lock().await;
        if let Some(power) = cached.as_ref() {
            return Ok(power.clone());
        }
        let policy = pve::RetryPolicy::default();
        let rows = pve::retry_idempotent(&policy, || client.node(node).qemu_list(true)).await?;
        let power: NodePower = Arc::new(rows.into_iter().map(|vm| (vm.vmid, vm)).collect());
        *cached = Some(power.clone());
        Ok(power)
    }

    /// The whole cluster's VM listing as this process first saw it: creates (and plan-time
    /// checks) find templates in it, placement finds memory in it, and delete finds where a
    /// VM is. Fetched once per provider process and shared by all its resources, since
    /// templates do not move during an apply; `fresh` fetches it again (a template made a
    /// moment ago), and that listing then replaces it.
    pub async fn cluster_vms_once(
        &self,
        client: &pve::Client,
        fresh: bool,
    ) -> pve::Result<Arc<Vec<pve::cluster::ClusterVm>>> {
        let mut cached = self.templates.lock().await;
        if !fresh && let Some(listing) = cached.as_ref() {
            return Ok(listing.clone());
        }
        let policy = pve::RetryPolicy::default();
        let listing =
            Arc::new(pve::retry_idempotent(&policy, || client.cluster().vm_resources()).await?);
        *cached = Some(listing.clone());
        Ok(listing)
    }
}

/// A cached listing without `vmid` (copied only when it holds it).
fn drop_vm(listing: &mut Arc<Vec<pve::cluster::ClusterVm>>, vmid: u32) {
    if listing.iter().any(|vm| vm.vmid == vmid) {
        *listing = Arc::new(
            listing
                .iter()
                .filter(|vm| vm.vmid != vmid)
                .cloned()
                .collect(),
        );
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
    async fn parallel_creates_find_a_thing_out_once_and_a_failure_is_not_kept() {
        let runtime = Runtime::default();
        let asked = std::sync::atomic::AtomicU32::new(0);
        let ask = || async {
            asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::task::yield_now().await;
            Ok::<_, String>(7u32)
        };
        let answers = tokio::join!(
            runtime.once("template t", ask),
            runtime.once("template t", ask),
            runtime.once("template t", ask),
        );
        assert_eq!(answers, (Ok(7), Ok(7), Ok(7)));
        assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 1);

        let failed = runtime
            .once("seed storage", || async { Err::<u32, _>("offline") })
            .await;
        assert_eq!(failed, Err("offline"));
        let again = runtime
            .once("seed storage", || async { Ok::<_, &str>(1u32) })
            .await;
        assert_eq!(again, Ok(1), "a failure is asked again");
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
