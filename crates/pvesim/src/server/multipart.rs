//! Upload bodies (`multipart/form-data`) read as pve-http-server reads them.

use bytes::Bytes;

/// The boundary of a `multipart/form-data` content type: `lower` is the header lowercased,
/// `original` as sent (the boundary keeps its case).
pub fn multipart_boundary(lower: &str, original: &str) -> Option<String> {
    if !lower.starts_with("multipart/form-data") {
        return None;
    }
    let at = lower.find("boundary=")?;
    let value = &original[at + "boundary=".len()..];
    let value = value.split(';').next()?.trim().trim_matches('"');
    (!value.is_empty()).then(|| value.to_string())
}

/// One part of a multipart body: its header block and its content.
struct Part<'b> {
    headers: String,
    content: &'b [u8],
}

impl Part<'_> {
    /// `Content-Disposition: <type>; name="<name>"[; filename="<file>"]` when it is the
    /// part's first header line, spelled as PVE's regexes spell it (the file part's rule).
    fn disposition(&self) -> Option<(String, String, Option<String>)> {
        parse_disposition(self.headers.lines().next()?)
    }

    /// The `Content-Disposition` line wherever it is among the part's headers (a form
    /// field's rule: PVE's `.*?Content-Disposition`).
    fn field_disposition(&self) -> Option<(String, String, Option<String>)> {
        self.headers.lines().find_map(parse_disposition)
    }
}

fn parse_disposition(line: &str) -> Option<(String, String, Option<String>)> {
    let rest = line.strip_prefix("Content-Disposition: ")?;
    let (kind, rest) = rest.split_once("; name=\"")?;
    let (name, rest) = rest.split_once('"')?;
    let filename = rest
        .strip_prefix("; filename=\"")
        .and_then(|f| f.split_once('"'))
        .map(|(f, _)| f.to_string())
        .filter(|f| !f.is_empty());
    Some((kind.to_string(), name.to_string(), filename))
}

/// A line end as PVE's `$newline_re` (`\015?\012`): CRLF or a bare LF.
fn strip_newline(bytes: &[u8]) -> Option<&[u8]> {
    bytes
        .strip_prefix(b"\r\n")
        .or_else(|| bytes.strip_prefix(b"\n"))
}

/// Where a part's header block ends (`${newline_re}{2}`): the offset of its first line end
/// and the offset of the content after the empty line.
fn header_block_end(bytes: &[u8]) -> Option<(usize, usize)> {
    (0..bytes.len()).find_map(|at| {
        let after = strip_newline(&bytes[at..])?;
        let content = strip_newline(after)?;
        Some((at, bytes.len() - content.len()))
    })
}

fn split_parts<'b>(body: &'b [u8], boundary: &str) -> Result<Vec<Part<'b>>, String> {
    let delimiter = format!("--{boundary}");
    let mut parts = Vec::new();
    let start = find(body, delimiter.as_bytes()).ok_or("upload failed")?;
    let mut rest = &body[start + delimiter.len()..];
    loop {
        if rest.starts_with(b"--") {
            return Ok(parts);
        }
        rest = strip_newline(rest).ok_or("upload failed")?;
        let (header_end, content_start) = header_block_end(rest).ok_or("upload failed")?;
        let headers = String::from_utf8_lossy(&rest[..header_end]).to_string();
        rest = &rest[content_start..];
        // The content ends at the line end before the next delimiter.
        let closing = format!("\n{delimiter}");
        let part_end = find(rest, closing.as_bytes()).ok_or("upload failed")?;
        let content = &rest[..part_end];
        parts.push(Part {
            headers,
            content: content.strip_suffix(b"\r").unwrap_or(content),
        });
        rest = &rest[part_end + closing.len()..];
    }
}

/// pve-http-server `APIServer/AnyEvent.pm` `file_upload_multipart`: line ends are CRLF or
/// bare LF (`$newline_re`); the fields `content`, `checksum-algorithm` and `checksum` are
/// taken from the front of the body in that order, each only when it is the next part (a
/// wanted field behind another part makes PVE's regex swallow that part and fail the
/// `form-data` assertion), its `Content-Disposition` anywhere among its headers
/// (`.*?Content-Disposition`); then the next part must be the file, its
/// `Content-Disposition` the first header line and its name `filename`.
/// Anything else never reaches the file phase: "upload failed". Content after the file
/// part is ignored.
#[allow(clippy::type_complexity)]
pub fn parse_multipart(
    body: &[u8],
    boundary: &str,
) -> Result<(Vec<(String, String)>, Option<(String, Bytes)>), String> {
    let parts = split_parts(body, boundary)?;
    let mut next = 0;
    let mut fields = Vec::new();
    for wanted in ["content", "checksum-algorithm", "checksum"] {
        let Some(found) = parts[next..].iter().position(|p| {
            p.field_disposition()
                .is_some_and(|(_, name, _)| name == wanted)
        }) else {
            continue;
        };
        let part = &parts[next];
        let kind = part.field_disposition().map(|(kind, _, _)| kind);
        if found != 0 || kind.as_deref() != Some("form-data") {
            let kind = kind.unwrap_or_else(|| part.headers.clone());
            return Err(format!(
                "wrong Content-Disposition '{kind}' in multipart, expected 'form-data'"
            ));
        }
        fields.push((
            wanted.to_string(),
            String::from_utf8_lossy(part.content).trim().to_string(),
        ));
        next += 1;
    }
    let Some(file) = parts.get(next) else {
        return Err("upload failed".into());
    };
    match file.disposition() {
        Some((kind, name, Some(filename))) => {
            if kind != "form-data" {
                return Err(format!(
                    "wrong Content-Disposition '{kind}' in multipart, expected 'form-data'"
                ));
            }
            if name != "filename" {
                return Err(format!(
                    "wrong field name '{name}' for file upload, expected 'filename'"
                ));
            }
            Ok((
                fields,
                Some((filename, Bytes::copy_from_slice(file.content))),
            ))
        }
        _ => Err("upload failed".into()),
    }
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multipart_fields_must_precede_the_file() {
        let body = b"--XX\r\nContent-Disposition: form-data; \
            name=\"content\"\r\n\r\niso\r\n--XX\r\nContent-Disposition: form-data; \
            name=\"filename\"; filename=\"seed.iso\"\r\nContent-Type: \
            application/octet-stream\r\n\r\nDATA\r\n--XX--\r\n";
        let (fields, file) = parse_multipart(body, "XX").unwrap();
        assert_eq!(fields, vec![("content".to_string(), "iso".to_string())]);
        let (name, data) = file.unwrap();
        assert_eq!(name, "seed.iso");
        assert_eq!(&data[..], b"DATA");
        let wrong = b"--XX\r\nContent-Disposition: form-data; name=\"file\"; \
            filename=\"a.iso\"\r\n\r\nD\r\n--XX--\r\n";
        assert_eq!(
            parse_multipart(wrong, "XX").unwrap_err(),
            "wrong field name 'file' for file upload, expected 'filename'"
        );
    }
}
