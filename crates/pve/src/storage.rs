//! `/nodes/{node}/storage…`: list, status, content list/get/delete, upload.

use std::io;
use std::pin::Pin;

use bytes::Bytes;
use futures_util::Stream;
use reqwest::Method;
use reqwest::multipart::{Form as Multipart, Part};
use serde::Deserialize;

use crate::client::{Body, Client, seg, seg_with_slash};
use crate::error::{Error, Result};
use crate::nodes::Node;
use crate::upid::Upid;
use crate::wire::{Form, de};

/// A storage as `GET /nodes/{node}/storage` and `…/status` describe it.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct StorageInfo {
    /// Storage id.
    pub storage: String,
    /// Plugin type (`dir`, `lvmthin`, …).
    #[serde(rename = "type", default)]
    pub storage_type: Option<String>,
    /// Comma list of content types, unordered.
    #[serde(default)]
    pub content: String,
    /// Enabled on this node.
    #[serde(default, deserialize_with = "de::bool01")]
    pub enabled: bool,
    /// Accessible now.
    #[serde(default, deserialize_with = "de::bool01")]
    pub active: bool,
    /// Shared between nodes.
    #[serde(default, deserialize_with = "de::bool01")]
    pub shared: bool,
    /// Bytes total.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub total: Option<u64>,
    /// Bytes used.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub used: Option<u64>,
    /// Bytes available.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub avail: Option<u64>,
}

impl StorageInfo {
    /// Whether the storage accepts a content type (e.g. `iso`).
    pub fn accepts(&self, content: &str) -> bool {
        self.content.split(',').any(|c| c.trim() == content)
    }
}

/// A row of `GET …/content`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ContentItem {
    /// `storage:iso/name.iso`.
    pub volid: String,
    /// `iso`, `raw`, …
    #[serde(default)]
    pub format: Option<String>,
    /// Content type.
    #[serde(default)]
    pub content: Option<String>,
    /// Bytes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub size: Option<u64>,
    /// Creation time, Unix seconds.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub ctime: Option<u64>,
}

/// `GET …/content/{volume}`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct VolumeInfo {
    /// Path on the node.
    #[serde(default)]
    pub path: Option<String>,
    /// Bytes.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub size: Option<u64>,
    /// Bytes used.
    #[serde(default, deserialize_with = "de::opt_int")]
    pub used: Option<u64>,
    /// Format.
    #[serde(default)]
    pub format: Option<String>,
}

/// The bytes of an upload: in memory (can be re-sent), or a stream of known length.
pub enum UploadBody {
    /// Whole file in memory.
    Bytes(Bytes),
    /// A stream whose total length is known up front (PVE refuses chunked encoding).
    Stream {
        /// The data.
        stream: Pin<Box<dyn Stream<Item = io::Result<Bytes>> + Send + 'static>>,
        /// Exact total length in bytes.
        len: u64,
    },
}

impl std::fmt::Debug for UploadBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the content: a seed ISO holds user-data.
        match self {
            UploadBody::Bytes(b) => write!(f, "UploadBody::Bytes({} bytes)", b.len()),
            UploadBody::Stream { len, .. } => write!(f, "UploadBody::Stream({len} bytes)"),
        }
    }
}

/// `POST …/upload` parameters.
#[derive(Debug)]
pub struct Upload {
    /// `iso`, `vztmpl` or `import`.
    pub content: String,
    /// Target file name (PVE normalises it; `.iso`/`.img` for iso).
    pub filename: String,
    /// Optional checksum verification: (`sha256`, hex digest).
    pub checksum: Option<(String, String)>,
    /// The file.
    pub body: UploadBody,
}

impl Upload {
    /// An ISO from memory.
    pub fn iso(filename: &str, bytes: impl Into<Bytes>) -> Upload {
        Upload {
            content: "iso".to_owned(),
            filename: filename.to_owned(),
            checksum: None,
            body: UploadBody::Bytes(bytes.into()),
        }
    }

    fn into_multipart(self) -> Result<Multipart> {
        // PVE reads the text fields in this order and only before the file part.
        let mut form = Multipart::new().text("content", self.content);
        if let Some((algorithm, digest)) = self.checksum {
            form = form
                .text("checksum-algorithm", algorithm)
                .text("checksum", digest);
        }
        let (body, len) = match self.body {
            UploadBody::Bytes(b) => {
                let len = b.len() as u64;
                (reqwest::Body::from(b), len)
            }
            UploadBody::Stream { stream, len } => (reqwest::Body::wrap_stream(stream), len),
        };
        let part = Part::stream_with_length(body, len)
            .file_name(self.filename)
            .mime_str("application/octet-stream")
            .map_err(|e| Error::config(format!("bad upload MIME type: {e}")))?;
        Ok(form.part("filename", part))
    }
}

/// Calls under `/nodes/{node}/storage/{storage}`.
#[derive(Debug, Clone, Copy)]
pub struct Storage<'a> {
    client: &'a Client,
    node: &'a str,
    storage: &'a str,
}

impl<'a> Node<'a> {
    /// `GET /nodes/{node}/storage`, optionally only storages accepting `content`
    /// (PVE then also drops disabled ones).
    pub async fn storages(self, content: Option<&str>) -> Result<Vec<StorageInfo>> {
        let query = Form::new().opt_text("content", content);
        self.client
            .get(&format!("{}/storage", self.path()), &query)
            .await
    }

    /// Calls for one storage on this node.
    pub fn storage(&self, storage: &'a str) -> Storage<'a> {
        Storage {
            client: self.client,
            node: self.name,
            storage,
        }
    }
}

impl Storage<'_> {
    fn path(&self, leaf: &str) -> String {
        format!(
            "/nodes/{}/storage/{}/{leaf}",
            seg(self.node),
            seg(self.storage)
        )
    }

    /// `GET …/status`; an unknown storage is `NotFound` (PVE: 400 "No such storage.").
    pub async fn status(self) -> Result<StorageInfo> {
        self.client.get(&self.path("status"), &Form::new()).await
    }

    /// `GET …/content[?content=…]`.
    pub async fn content(self, content: Option<&str>) -> Result<Vec<ContentItem>> {
        let query = Form::new().opt_text("content", content);
        self.client.get(&self.path("content"), &query).await
    }

    /// `GET …/content/{volume}`; `volume` is `iso/x.iso` or a full volid.
    pub async fn volume(self, volume: &str) -> Result<VolumeInfo> {
        let path = self.path(&format!("content/{}", seg_with_slash(volume)));
        self.client.get(&path, &Form::new()).await
    }

    /// `DELETE …/content/{volume}`: an `imgdel` task; deleting a missing ISO ends OK.
    pub async fn delete_volume(self, volume: &str) -> Result<Upid> {
        let path = self.path(&format!("content/{}", seg_with_slash(volume)));
        let upid: Option<Upid> = self.client.delete(&path, &Form::new()).await?;
        upid.ok_or_else(|| Error::decode("DELETE", &path, "expected a task id, got null".into()))
    }

    /// [`Storage::delete_volume`] with `delay`: PVE's worker waits up to
    /// [`ANSWER_WAIT_S`](crate::tasks::ANSWER_WAIT_S) for the `imgdel` task and answers `null`
    /// when it ended OK (pve-storage `API2/Storage/Content.pm` `delete`; a task that failed
    /// meanwhile is a 500 with its exit status). `Some` is the task, still running.
    pub async fn delete_volume_answered(self, volume: &str) -> Result<Option<Upid>> {
        let path = self.path(&format!("content/{}", seg_with_slash(volume)));
        let query = Form::new().int("delay", crate::tasks::ANSWER_WAIT_S);
        self.client.delete(&path, &query).await
    }

    /// `POST …/upload`: multipart with an exact Content-Length, fields before the file.
    /// Returns the `imgcopy` task; an existing file of the same name is overwritten.
    pub async fn upload(self, upload: Upload) -> Result<Upid> {
        let multipart = upload.into_multipart()?;
        self.client
            .call(
                Method::POST,
                &self.path("upload"),
                &Form::new(),
                Body::Multipart(multipart),
            )
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storage_info_decodes_and_accepts() {
        let s: StorageInfo = serde_json::from_str(concat!(
            r#"{"storage":"proxy-seeds","type":"dir","content":"vztmpl,iso","#,
            r#""enabled":1,"active":1,"shared":0,"total":"1000","used":10,"avail":990}"#
        ))
        .unwrap();
        assert!(s.accepts("iso") && !s.accepts("images"));
        assert!(s.enabled && s.active && !s.shared);
        assert_eq!(s.total, Some(1000));
    }

    #[test]
    fn upload_debug_hides_content() {
        let u = Upload::iso("seed.iso", Bytes::from_static(b"#cloud-config secret"));
        assert!(!format!("{u:?}").contains("cloud-config"));
    }
}
