//! `…/agent/file-read` and `…/agent/file-write`: files inside the guest, through the QEMU
//! guest agent (qemu-server `src/PVE/API2/Qemu/Agent.pm`).
//!
//! PVE checks `VM.GuestAgent.FileRead` (or `…FileWrite`, or `VM.GuestAgent.Unrestricted`) on
//! `/vms/{vmid}`; a token without it gets a 403, [`crate::Error::auth_failure`]. A guest that
//! refuses the call (qemu-ga's `--block-rpcs`, a missing file) ends in a 500 naming the step:
//! "can't open file", "can't read from file". Both calls are reads or overwrites, safe to
//! repeat.

use serde::Deserialize;

use super::Agent;
use crate::error::{Error, Result};
use crate::wire::{Form, de};

/// The longest file [`Agent::file_write`] takes: PVE limits `content` to 61440 characters
/// and the bytes travel as base64 (4 characters per 3 bytes).
pub const FILE_WRITE_MAX_BYTES: usize = 61440 / 4 * 3;

/// What `file-read` returned.
#[derive(Clone, PartialEq, Eq)]
pub struct FileContent {
    /// The file's bytes, from the offset asked for.
    pub bytes: Vec<u8>,
    /// Whether the read stopped before the end of the file (PVE's `truncated`: the agent
    /// did not report end of file within `count` bytes, also when the file is exactly that
    /// long).
    pub truncated: bool,
}

impl FileContent {
    /// The bytes as text, with invalid UTF-8 replaced.
    pub fn text_lossy(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// `Debug` shows the size only: files read from a guest may hold secrets.
impl std::fmt::Debug for FileContent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileContent")
            .field("len", &self.bytes.len())
            .field("truncated", &self.truncated)
            .finish()
    }
}

/// `file-read`'s answer as PVE sends it.
#[derive(Deserialize)]
struct FileReadAnswer {
    content: String,
    #[serde(default, deserialize_with = "de::bool01")]
    truncated: bool,
}

impl FileReadAnswer {
    /// With `decode=1` (the default) PVE puts the file's raw bytes into a Perl string and
    /// its JSON encoder writes each byte as the character of that code point (U+0000 to
    /// U+00FF), so UTF-8 in the file arrives as two or more characters per letter. Mapping
    /// each character back to its byte restores the file exactly.
    fn into_content(self, path: &str) -> Result<FileContent> {
        let bytes = self
            .content
            .chars()
            .map(|c| u8::try_from(u32::from(c)).ok())
            .collect::<Option<Vec<u8>>>()
            .ok_or_else(|| {
                Error::decode(
                    "GET",
                    path,
                    "file-read content has a character above U+00FF".to_owned(),
                )
            })?;
        Ok(FileContent {
            bytes,
            truncated: self.truncated,
        })
    }
}

impl Agent<'_> {
    /// `GET …/agent/file-read?file=PATH`: the whole file, up to PVE's 16 MiB.
    pub async fn file_read(self, file: &str) -> Result<FileContent> {
        self.file_read_with(file_read_query(file, None)).await
    }

    /// `GET …/agent/file-read?file=PATH&offset=N&count=N`: at most `count` bytes from
    /// `offset` (count 1 to 16 MiB).
    pub async fn file_read_range(self, file: &str, offset: u64, count: u32) -> Result<FileContent> {
        self.file_read_with(file_read_query(file, Some((offset, count))))
            .await
    }

    async fn file_read_with(self, query: Form) -> Result<FileContent> {
        let path = self.vm.path("agent/file-read");
        let answer: FileReadAnswer = self.vm.client.get(&path, &query).await?;
        answer.into_content(&path)
    }

    /// `POST …/agent/file-write`: replaces the file with `bytes` (at most
    /// [`FILE_WRITE_MAX_BYTES`]). Sent base64-encoded with `encode=0`, so any bytes arrive
    /// as they are.
    pub async fn file_write(self, file: &str, bytes: &[u8]) -> Result<()> {
        let path = self.vm.path("agent/file-write");
        let form = file_write_form(file, bytes).map_err(Error::config)?;
        let _: serde_json::Value = self.vm.client.post(&path, &form).await?;
        Ok(())
    }
}

pub(crate) fn file_read_query(file: &str, range: Option<(u64, u32)>) -> Form {
    let query = Form::new().text("file", file);
    match range {
        Some((offset, count)) => query.int("offset", offset).int("count", count),
        None => query,
    }
}

pub(crate) fn file_write_form(file: &str, bytes: &[u8]) -> std::result::Result<Form, String> {
    if bytes.len() > FILE_WRITE_MAX_BYTES {
        return Err(format!(
            "file-write takes at most {FILE_WRITE_MAX_BYTES} bytes, got {}",
            bytes.len()
        ));
    }
    Ok(Form::new()
        .text("file", file)
        .text("content", base64(bytes))
        .bool("encode", false))
}

/// Standard base64 with padding (RFC 4648), what qemu-ga's `buf-b64` takes.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(answer: serde_json::Value) -> Result<FileContent> {
        serde_json::from_value::<FileReadAnswer>(answer)
            .unwrap()
            .into_content("/nodes/pve1/qemu/100/agent/file-read")
    }

    #[test]
    fn file_read_decodes_what_pve_sends() {
        // cloud-init's result.json, as Agent.pm returns it (with its `bytes-read`).
        let text =
            "{\n \"v1\": {\n  \"datasource\": \"DataSourceNoCloud\",\n  \"errors\": []\n }\n}";
        let content = read(json!({"content": text, "bytes-read": text.len()})).unwrap();
        assert_eq!(content.bytes, text.as_bytes());
        assert!(!content.truncated);
        // UTF-8 bytes arrive one character per byte ("é" is C3 A9).
        let content = read(json!({"content": "caf\u{c3}\u{a9}\n", "truncated": 1})).unwrap();
        assert_eq!(content.text_lossy(), "café\n");
        assert!(content.truncated);
        let binary = read(json!({"content": "\u{0}\u{ff}\u{80}"})).unwrap();
        assert_eq!(binary.bytes, [0, 0xff, 0x80]);
        // Not what PVE sends: refused rather than guessed at.
        let wide = read(json!({"content": "caf\u{e9}\u{2603}"})).unwrap_err();
        assert_eq!(wide.kind(), crate::ErrorKind::Permanent);
        assert!(!format!("{content:?}").contains("caf"));
    }

    #[test]
    fn file_write_form_keys_and_base64() {
        let form = file_write_form("/etc/motd", b"hi\n").unwrap();
        assert_eq!(form.encode(), "file=%2Fetc%2Fmotd&content=aGkK&encode=0");
        assert_eq!(base64(b""), "");
        assert_eq!(base64(b"f"), "Zg==");
        assert_eq!(base64(b"fo"), "Zm8=");
        assert_eq!(base64(b"foo"), "Zm9v");
        assert_eq!(base64(b"foob"), "Zm9vYg==");
        assert_eq!(base64(&[0xfb, 0xff, 0xfe]), "+//+");
        assert_eq!(base64(&vec![0; FILE_WRITE_MAX_BYTES]).len(), 61440);
        assert!(file_write_form("/x", &vec![0; FILE_WRITE_MAX_BYTES]).is_ok());
        assert!(file_write_form("/x", &vec![0; FILE_WRITE_MAX_BYTES + 1]).is_err());
    }

    #[test]
    fn file_read_query_keys() {
        // decode is left at PVE's default (1): the bytes come as characters, see above.
        assert_eq!(
            file_read_query("/run/cloud-init/result.json", None).encode(),
            "file=%2Frun%2Fcloud-init%2Fresult.json"
        );
        assert_eq!(
            file_read_query("/var/log/cloud-init-output.log", Some((10, 4096))).encode(),
            "file=%2Fvar%2Flog%2Fcloud-init-output.log&offset=10&count=4096"
        );
    }
}
