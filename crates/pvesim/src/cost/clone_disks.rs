//! A clone's disk work under the cost profile, in qemu-server's order (`API2/Qemu.pm`
//! `clone_vm`, `QemuServer.pm` `clone_disk`), disk after disk: a full clone allocates the
//! new volume (`vdisk_alloc`) under the storage lock and copies the data after it
//! (`qemu-img convert`); a linked clone makes its volume (`vdisk_clone`) under the lock and
//! copies nothing. A lock not taken in time fails the clone as `clone_vm`'s cleanup does:
//! `sleep 1`, the new VM's config removed, `clone failed: <error>`.

use std::sync::Arc;
use std::time::Duration;

use super::storage_lock::STORAGE_LOCK_TIMEOUT;
use crate::shared::Shared;

/// One disk of the clone.
#[derive(Debug, Clone)]
pub struct DiskWork {
    /// The storage the new volume goes to.
    pub storage: String,
    pub plugin_type: String,
    pub shared: bool,
    /// A full copy (else a linked clone).
    pub full: bool,
    /// The source disk's size in bytes.
    pub size: u64,
}

/// The disks of one clone on `node` making VM `newid`.
#[derive(Debug, Clone)]
pub struct CloneDisks {
    pub node: String,
    pub newid: u32,
    pub disks: Vec<DiskWork>,
}

/// Does the disk work of the clone task `upid`; the task's error text when a storage lock
/// was not taken in time.
pub async fn run(shared: Arc<Shared>, upid: String, work: CloneDisks) -> Result<(), String> {
    let Some(model) = shared.cost.as_ref() else {
        return Ok(());
    };
    let log = |line: String| {
        if let Some(task) = shared.lock().tasks.get_mut(&upid) {
            task.log.push(line);
        }
    };
    for disk in &work.disks {
        let cost = model.profile.storage_cost(&disk.storage, &disk.plugin_type);
        let lock = model
            .storage_locks
            .lock(&disk.storage, disk.shared, &work.node);
        let held = match lock.acquire(STORAGE_LOCK_TIMEOUT, &log).await {
            Ok(held) => held,
            Err(message) => {
                model.lock_timed_out(&lock.name(), &message);
                return Err(fail(&shared, work.newid, &message).await);
            }
        };
        let under_lock = if disk.full {
            cost.alloc_ms
        } else {
            cost.linked_clone_ms
        };
        tokio::time::sleep(Duration::from_millis(under_lock)).await;
        drop(held);
        if disk.full && cost.copy_mib_per_s > 0 {
            let seconds = disk.size as f64 / (cost.copy_mib_per_s as f64 * (1 << 20) as f64);
            tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
        }
    }
    Ok(())
}

/// `clone_vm`'s error path: `sleep 1`, then the temporary config goes.
async fn fail(shared: &Shared, newid: u32, message: &str) -> String {
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut world = shared.lock();
    if world.vms.get(&newid).and_then(|vm| vm.lock()) == Some("clone") {
        world.vms.remove(&newid);
    }
    format!("clone failed: {message}")
}
