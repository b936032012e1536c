//! Storage endpoints: status, content, upload, delete.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::api::{require, require_any, subdirs};
use crate::call::{ApiError, ApiResult, Call, Reply, TaskWait};
use crate::config::StorageConfig;
use crate::shared::Shared;
use crate::tasks::start_task;
use crate::world::{World, format_size};

fn status_row(world: &World, storage: &StorageConfig, node: &str) -> Value {
    let on_node = World::storage_on_node(storage, node);
    let active = on_node && storage.enabled;
    let used = world.used_bytes(&storage.id, node);
    let mut row = json!({
        "storage": storage.id,
        "type": storage.plugin_type,
        "content": storage.content.join(","),
        "enabled": i32::from(active),
        "active": i32::from(active),
        "shared": i32::from(storage.shared),
    });
    if active {
        row["total"] = json!(storage.total_bytes);
        row["used"] = json!(used);
        row["avail"] = json!(storage.total_bytes.saturating_sub(used));
        row["used_fraction"] = json!(used as f64 / storage.total_bytes.max(1) as f64);
    }
    row
}

fn may_see(world: &World, storage: &str) -> bool {
    let path = format!("/storage/{storage}");
    world.has_privilege(&path, "Datastore.Audit")
        || world.has_privilege(&path, "Datastore.AllocateSpace")
}

pub fn node_list(world: &World, call: &Call) -> ApiResult {
    let node = call.node();
    let content = call.str("content");
    let wanted = call.str("storage");
    let enabled_only = call.bool("enabled").unwrap_or(false);
    let rows: Vec<Value> = world
        .storages
        .iter()
        .filter(|s| may_see(world, &s.id))
        .filter(|s| wanted.as_ref().is_none_or(|w| *w == s.id))
        .filter(|s| {
            // Filtering by content also drops storages not enabled here.
            let usable = s.enabled && World::storage_on_node(s, node);
            let content_ok = content.as_ref().is_none_or(|c| {
                c.split(',').any(|c| s.content.iter().any(|have| have == c)) && usable
            });
            content_ok && (!enabled_only || usable)
        })
        .map(|s| status_row(world, s, node))
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

pub fn node_index(world: &World, call: &Call) -> ApiResult {
    storage_for(world, call)?;
    Ok(Reply::data(subdirs(
        "subdir",
        &[
            "content",
            "download-url",
            "file-restore",
            "import-metadata",
            "prunebackups",
            "rrd",
            "rrddata",
            "status",
            "upload",
        ],
    )))
}

pub fn status(world: &World, call: &Call) -> ApiResult {
    let id = call.path_str("storage");
    require_any(
        world,
        &format!("/storage/{id}"),
        &["Datastore.Audit", "Datastore.AllocateSpace"],
    )?;
    let storage = world
        .storage(id)
        .ok_or_else(|| ApiError::param("storage", "No such storage."))?;
    Ok(Reply::data(status_row(world, storage, call.node())))
}

/// `storage_config` + `storage_check_enabled` + `storage_check_node`.
fn storage_for<'w>(world: &'w World, call: &Call) -> Result<&'w StorageConfig, ApiError> {
    let id = call.path_str("storage");
    let node = call.node();
    let storage = world
        .storage(id)
        .ok_or_else(|| ApiError::die(format!("storage '{id}' does not exist")))?;
    if !storage.enabled {
        return Err(ApiError::die(format!("storage '{id}' is disabled")));
    }
    if !World::storage_on_node(storage, node) {
        return Err(ApiError::die(format!(
            "storage '{id}' is not available on node '{node}'"
        )));
    }
    Ok(storage)
}

pub fn content_list(world: &World, call: &Call) -> ApiResult {
    let storage = storage_for(world, call)?;
    require_any(
        world,
        &format!("/storage/{}", storage.id),
        &["Datastore.Audit", "Datastore.AllocateSpace"],
    )?;
    let content = call.str("content");
    let vmid = call.int("vmid");
    let scope = world.scope_for(&storage.id, call.node());
    let rows: Vec<Value> = world
        .volumes
        .get(&scope)
        .into_iter()
        .flat_map(|vols| vols.values())
        .filter(|v| content.as_ref().is_none_or(|c| *c == v.content))
        .filter(|v| {
            vmid.is_none_or(|id| {
                let name = v.volid.split_once(':').map(|x| x.1).unwrap_or_default();
                name.contains(&format!("vm-{id}-")) || name.contains(&format!("base-{id}-"))
            })
        })
        .map(|v| {
            let mut row = json!({
                "volid": v.volid,
                "format": v.format,
                "size": v.size,
                "ctime": v.ctime,
                "content": v.content,
            });
            if v.content == "images" {
                row["used"] = json!(0);
                if let Some(owner) = crate::world::volume_owner(&v.volid) {
                    row["vmid"] = json!(owner);
                }
            }
            row
        })
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

pub fn content_alloc(world: &mut World, call: &Call) -> ApiResult {
    let storage = storage_for(world, call)?.clone();
    require(
        world,
        &format!("/storage/{}", storage.id),
        "Datastore.AllocateSpace",
    )?;
    let vmid = call.int("vmid").unwrap_or(0);
    let filename = call.str("filename").unwrap_or_default();
    let size = call
        .str("size")
        .and_then(|s| crate::world::parse_size(&s))
        .unwrap_or(0);
    if !filename.starts_with(&format!("vm-{vmid}-"))
        && !filename.starts_with(&format!("base-{vmid}-"))
    {
        return Err(ApiError::die(format!(
            "illegal name '{filename}' - should be 'vm-{vmid}-*'"
        )));
    }
    // File-based storages keep a directory per VM (pve-storage `Plugin.pm` `alloc_image`).
    let volid = if storage.is_file_based() {
        format!("{}:{vmid}/{filename}", storage.id)
    } else {
        format!("{}:{filename}", storage.id)
    };
    if world.volume(&volid, call.node()).is_some() {
        return Err(ApiError::die(format!("volume '{volid}' already exists")));
    }
    let scope = world.scope_for(&storage.id, call.node());
    let format = call
        .str("format")
        .unwrap_or_else(|| crate::world::volume_format(&volid).to_string());
    world.put_volume(scope, &volid, size, "images", &format, None, call.node());
    Ok(Reply::data(json!(volid)))
}

/// Where a volume lives on the host: file-based storages keep ISOs under `template/iso/`
/// and disks under `images/` (pve-storage `Plugin.pm` `$vtype_subdirs`, `filesystem_path`);
/// LVM-style storages are block devices under `/dev/<vg>/`.
fn volume_path(storage: &StorageConfig, volid: &str, content: &str) -> String {
    let name = volid.split_once(':').map(|x| x.1).unwrap_or_default();
    if !storage.is_file_based() {
        return format!("/dev/pve/{}", crate::world::volume_file_name(volid));
    }
    let base = storage.path();
    match (content, name.split_once('/')) {
        ("iso", Some((_, file))) => format!("{base}/template/iso/{file}"),
        ("vztmpl", Some((_, file))) => format!("{base}/template/cache/{file}"),
        ("import", Some((_, file))) => format!("{base}/import/{file}"),
        // `BASEVMID/BASE/VMID/NAME` (linked clone) lives at `images/VMID/NAME`.
        _ => {
            let parts: Vec<&str> = name.split('/').collect();
            match parts.as_slice() {
                [_, _, vmid, file] => format!("{base}/images/{vmid}/{file}"),
                _ => format!("{base}/images/{name}"),
            }
        }
    }
}

/// `{volume}` is `iso/x.iso` or a full volid `storage:iso/x.iso`.
fn real_volid(call: &Call) -> Result<String, ApiError> {
    let storage = call.path_str("storage");
    let volume = call.path_str("volume");
    match volume.split_once(':') {
        Some((sid, _)) if sid != storage => Err(ApiError::param("volume", "storage ID mismatch")),
        Some(_) => Ok(volume.to_string()),
        None => Ok(format!("{storage}:{volume}")),
    }
}

pub fn content_get(world: &World, call: &Call) -> ApiResult {
    let storage = storage_for(world, call)?;
    require_any(
        world,
        &format!("/storage/{}", storage.id),
        &["Datastore.Audit", "Datastore.AllocateSpace"],
    )?;
    let volid = real_volid(call)?;
    let volume = world.volume(&volid, call.node()).ok_or_else(|| {
        ApiError::die(format!("volume_size_info on '{volid}' failed - no format"))
    })?;
    Ok(Reply::data(json!({
        "path": volume_path(storage, &volid, &volume.content),
        "size": volume.size,
        "used": volume.size,
        "format": volume.format,
    })))
}

pub fn content_update(world: &mut World, call: &Call) -> ApiResult {
    let storage = storage_for(world, call)?.clone();
    require(
        world,
        &format!("/storage/{}", storage.id),
        "Datastore.Allocate",
    )?;
    let volid = real_volid(call)?;
    if world.volume(&volid, call.node()).is_none() {
        return Err(ApiError::die(format!("volume '{volid}' does not exist")));
    }
    Ok(Reply::data(Value::Null))
}

pub fn content_delete(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let storage = storage_for(world, call)?.clone();
    require(
        world,
        &format!("/storage/{}", storage.id),
        "Datastore.Allocate",
    )?;
    let volid = real_volid(call)?;
    let node = call.node().to_string();
    let content = if volid.contains(":iso/") {
        "iso"
    } else {
        "images"
    };
    let path = volume_path(&storage, &volid, content);
    let task_id = match crate::world::volume_owner(&volid) {
        Some(owner) => format!("{owner}@{}", storage.id),
        None => storage.id.clone(),
    };
    let upid = start_task(
        shared,
        world,
        call.node(),
        "imgdel",
        &task_id,
        &call.token_user(),
        Box::new(move |world, log, injected| {
            if let Some(failure) = injected {
                return Err(failure);
            }
            if world.remove_volume(&volid, &node).is_none() {
                // PVE only prints a plain (uncounted) warning: deleting is idempotent.
                log.info(format!("disk image '{path}' does not exist"));
            }
            log.info(format!("Removed volume '{volid}'"));
            Ok(())
        }),
    );
    // pve-storage `API2/Storage/Content.pm` `delete`: a task that failed within `delay` is
    // the handler's `die "$status\n"`.
    let wait = call.int("delay").filter(|d| *d > 0).map(|d| TaskWait {
        upid: upid.clone(),
        max: Duration::from_secs(d as u64),
        failure_prefix: Some(String::new()),
    });
    Ok(Reply {
        data: json!(upid),
        total: None,
        wait,
    })
}

pub fn download_url(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let storage = storage_for(world, call)?.clone();
    require(
        world,
        &format!("/storage/{}", storage.id),
        "Datastore.AllocateTemplate",
    )?;
    let url = call.str("url").unwrap_or_default();
    let upid = start_task(
        shared,
        world,
        call.node(),
        "download",
        &storage.id,
        &call.token_user(),
        Box::new(move |_world, log, injected| {
            if let Some(failure) = injected {
                return Err(failure);
            }
            log.info(format!("downloading {url}"));
            // The simulator has no outside network: the download fails as it would offline.
            Err("download failed: pve-sim has no network access".into())
        }),
    );
    Ok(Reply::data(json!(upid)))
}

pub fn cluster_list(world: &World, call: &Call) -> ApiResult {
    let kind = call.str("type");
    let rows: Vec<Value> = world
        .storages
        .iter()
        .filter(|s| may_see(world, &s.id))
        .filter(|s| kind.as_ref().is_none_or(|k| *k == s.plugin_type))
        .map(cluster_row)
        .collect();
    Ok(Reply::data(Value::Array(rows)))
}

fn cluster_row(storage: &StorageConfig) -> Value {
    let mut row = json!({
        "storage": storage.id,
        "type": storage.plugin_type,
        "content": storage.content.join(","),
        "shared": i32::from(storage.shared),
        "digest": "0f3c9a1b2d4e5f60718293a4b5c6d7e8f9012345",
    });
    if let Some(nodes) = &storage.nodes {
        row["nodes"] = json!(nodes.join(","));
    }
    if !storage.enabled {
        row["disable"] = json!(1);
    }
    if storage.has_path {
        row["path"] = json!(storage.path());
    }
    row
}

pub fn cluster_get(world: &World, call: &Call) -> ApiResult {
    let id = call.path_str("storage");
    require(world, &format!("/storage/{id}"), "Datastore.Allocate")?;
    let storage = world
        .storage(id)
        .ok_or_else(|| ApiError::die(format!("storage '{id}' does not exist")))?;
    Ok(Reply::data(cluster_row(storage)))
}

/// PVE's filename normalisation for uploads: path stripped, odd characters become `_`.
pub fn normalise_filename(name: &str) -> String {
    let base = name.rsplit(['/', '\\']).next().unwrap_or_default();
    base.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `POST .../upload` after the multipart body was parsed (`content`, `checksum*` and
/// `filename` are in `call.params`, the file in `call.upload`).
pub fn upload(shared: &Arc<Shared>, world: &mut World, call: &Call) -> ApiResult {
    let Some(data) = call.upload.cloned() else {
        return Err(ApiError::param(
            "filename",
            "property is missing and it is not optional",
        ));
    };
    let storage = storage_for(world, call)?.clone();
    let content = call.str("content").unwrap_or_default();
    let filename = normalise_filename(&call.str("filename").unwrap_or_default());
    if content == "iso" {
        let lower = filename.to_ascii_lowercase();
        if !(lower.ends_with(".iso") || lower.ends_with(".img")) {
            return Err(ApiError::param("filename", "wrong file extension"));
        }
    }
    if !storage.content.contains(&content) {
        return Err(ApiError::die(format!(
            "storage '{}' does not support '{content}' content",
            storage.id
        )));
    }
    if !storage.has_path {
        return Err(ApiError::die(format!(
            "can't upload to storage type '{}'",
            storage.plugin_type
        )));
    }
    let checksum = call.str("checksum");
    let algorithm = call.str("checksum-algorithm");
    let node = call.node().to_string();
    let dir = match content.as_str() {
        "iso" => "iso",
        "vztmpl" => "vztmpl",
        _ => "import",
    };
    let volid = format!("{}:{dir}/{filename}", storage.id);
    let target_file = volume_path(&storage, &volid, &content);
    let storage_id = storage.id.clone();
    let upid = start_task(
        shared,
        world,
        call.node(),
        "imgcopy",
        "",
        &call.token_user(),
        Box::new(move |world, log, injected| {
            if let Some(failure) = injected {
                return Err(failure);
            }
            if let (Some(expected), Some(algorithm)) = (checksum, algorithm) {
                let got = match algorithm.as_str() {
                    "sha256" => {
                        use sha2::Digest;
                        let digest = sha2::Sha256::digest(&data);
                        digest
                            .iter()
                            .map(|b| format!("{b:02x}"))
                            .collect::<String>()
                    }
                    other => {
                        return Err(format!(
                            "checksum algorithm '{other}' not supported by pve-sim"
                        ));
                    }
                };
                if !got.eq_ignore_ascii_case(&expected) {
                    return Err(format!(
                        "checksum mismatch: got '{got}' != expect '{expected}'"
                    ));
                }
                log.info("calculating checksum of upload... OK, checksum verified");
            }
            log.info(format!("target node: {node}"));
            log.info(format!("target file: {target_file}"));
            log.info(format!("file size is: {}", data.len()));
            let size = data.len() as u64;
            let scope = world.scope_for(&storage_id, &node);
            world.put_volume(
                scope,
                &volid,
                size,
                &content,
                if content == "iso" { "iso" } else { "raw" },
                Some(data),
                &node,
            );
            log.info(format!(
                "finished file import successfully ({})",
                format_size(size)
            ));
            Ok(())
        }),
    );
    Ok(Reply::data(json!(upid)))
}
