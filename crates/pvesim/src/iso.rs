//! A small ISO9660 reader for the seed images users upload: the volume label and the
//! files of the root directory, named as Linux shows them (Rock Ridge `NM`, else Joliet,
//! else the ISO9660 name lower-cased without `;1` and trailing dot).
//!
//! It reads untrusted bytes: every offset is bounds-checked, loops are bounded and the
//! data copied out never exceeds the image size, so garbage yields an error, not a panic.

use std::collections::BTreeMap;

const SECTOR: usize = 2048;
const FIRST_DESCRIPTOR_SECTOR: usize = 16;
/// Real images carry a handful of descriptors; this bounds a scan of garbage.
const MAX_DESCRIPTORS: usize = 64;
/// Root directories of seed images hold a few files; this bounds hostile ones.
const MAX_ROOT_ENTRIES: usize = 10_000;
/// Bounds chains of SUSP continuation areas (`CE`), which could otherwise loop.
const MAX_CONTINUATIONS: usize = 32;

/// A parsed image: its label and the regular files of its root directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IsoImage {
    /// The primary volume descriptor's volume identifier, trailing spaces removed.
    pub volume_id: String,
    /// Root-directory files by the name Linux shows.
    pub files: BTreeMap<String, Vec<u8>>,
}

/// Why bytes are not a readable ISO9660 image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsoError {
    #[error("image too small for an ISO9660 volume descriptor set ({0} bytes)")]
    TooSmall(usize),
    #[error("no ISO9660 primary volume descriptor (CD001) at sector 16")]
    NoPrimaryDescriptor,
    #[error("unsupported logical block size {0}")]
    BlockSize(u16),
    #[error("directory record at byte {0} is malformed")]
    BadDirectoryRecord(usize),
    #[error("extent of '{name}' lies outside the image")]
    ExtentOutOfBounds { name: String },
    #[error("root directory has more than {MAX_ROOT_ENTRIES} entries")]
    TooManyEntries,
    #[error("file '{0}' spans several extents, which is not supported")]
    MultiExtent(String),
    #[error("file data adds up to more than the image size")]
    DataLargerThanImage,
}

#[derive(Debug, Clone, Copy)]
struct Descriptor<'a> {
    bytes: &'a [u8],
}

impl Descriptor<'_> {
    fn root_record(&self) -> &[u8] {
        &self.bytes[156..190]
    }
}

/// One directory record of the root directory.
#[derive(Debug)]
struct Record<'a> {
    extent: u32,
    data_length: u32,
    flags: u8,
    name: &'a [u8],
    system_use: &'a [u8],
}

impl Record<'_> {
    fn is_directory(&self) -> bool {
        self.flags & 0x02 != 0
    }
    fn is_multi_extent(&self) -> bool {
        self.flags & 0x80 != 0
    }
    /// The `.` and `..` entries carry names 0x00 and 0x01.
    fn is_self_or_parent(&self) -> bool {
        self.name == [0] || self.name == [1]
    }
}

fn u32_le(bytes: &[u8], at: usize) -> Option<u32> {
    let b = bytes.get(at..at + 4)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

fn parse_record(bytes: &[u8]) -> Option<Record<'_>> {
    let length = *bytes.first()? as usize;
    if length < 34 || length > bytes.len() {
        return None;
    }
    let record = &bytes[..length];
    let name_length = record[32] as usize;
    let name_end = 33 + name_length;
    if name_end > length {
        return None;
    }
    // A padding byte follows an even-length name so the system use area is aligned.
    let system_use_start = (name_end + usize::from(name_length.is_multiple_of(2))).min(length);
    Some(Record {
        extent: u32_le(record, 2)?,
        data_length: u32_le(record, 10)?,
        flags: record[25],
        name: &record[33..name_end],
        system_use: &record[system_use_start..],
    })
}

/// Reads an image from memory.
pub fn read_iso(bytes: &[u8]) -> Result<IsoImage, IsoError> {
    let (primary, joliet) = find_descriptors(bytes)?;
    let block_size = u16::from_le_bytes([primary.bytes[128], primary.bytes[129]]);
    if !matches!(block_size, 512 | 1024 | 2048) {
        return Err(IsoError::BlockSize(block_size));
    }
    let block_size = usize::from(block_size);
    let volume_id = String::from_utf8_lossy(&primary.bytes[40..72])
        .trim_end_matches([' ', '\0'])
        .to_string();

    let root = parse_record(primary.root_record()).ok_or(IsoError::BadDirectoryRecord(156))?;
    let primary_entries = directory_records(bytes, &root, block_size)?;
    let rock_ridge_skip = primary_entries
        .first()
        .filter(|dot| dot.name == [0])
        .and_then(|dot| susp_sp_skip(dot.system_use));

    let mut files = BTreeMap::new();
    let mut copied = 0usize;
    let mut add = |name: String, record: &Record<'_>| -> Result<(), IsoError> {
        if record.is_multi_extent() {
            return Err(IsoError::MultiExtent(name));
        }
        let start = (record.extent as usize).checked_mul(block_size);
        let end = start.and_then(|s| s.checked_add(record.data_length as usize));
        let data = match (start, end) {
            (Some(start), Some(end)) if end <= bytes.len() => &bytes[start..end],
            _ => return Err(IsoError::ExtentOutOfBounds { name }),
        };
        copied += data.len();
        if copied > bytes.len() {
            return Err(IsoError::DataLargerThanImage);
        }
        files.insert(name, data.to_vec());
        Ok(())
    };

    if let Some(skip) = rock_ridge_skip {
        for record in primary_entries
            .iter()
            .filter(|r| !r.is_self_or_parent() && !r.is_directory())
        {
            let name = rock_ridge_name(bytes, record.system_use, skip, block_size)
                .unwrap_or_else(|| iso9660_name(record.name));
            add(name, record)?;
        }
    } else if let Some(joliet) = joliet {
        let root = parse_record(joliet.root_record()).ok_or(IsoError::BadDirectoryRecord(156))?;
        for record in directory_records(bytes, &root, block_size)?
            .iter()
            .filter(|r| !r.is_self_or_parent() && !r.is_directory())
        {
            add(joliet_name(record.name), record)?;
        }
    } else {
        for record in primary_entries
            .iter()
            .filter(|r| !r.is_self_or_parent() && !r.is_directory())
        {
            add(iso9660_name(record.name), record)?;
        }
    }
    Ok(IsoImage { volume_id, files })
}

/// The primary descriptor and, if present, a Joliet supplementary descriptor.
fn find_descriptors(bytes: &[u8]) -> Result<(Descriptor<'_>, Option<Descriptor<'_>>), IsoError> {
    if bytes.len() < (FIRST_DESCRIPTOR_SECTOR + 1) * SECTOR {
        return Err(IsoError::TooSmall(bytes.len()));
    }
    let mut primary = None;
    let mut joliet = None;
    for index in 0..MAX_DESCRIPTORS {
        let start = (FIRST_DESCRIPTOR_SECTOR + index) * SECTOR;
        let Some(sector) = bytes.get(start..start + SECTOR) else {
            break;
        };
        if &sector[1..6] != b"CD001" {
            break;
        }
        match sector[0] {
            1 if primary.is_none() => primary = Some(Descriptor { bytes: sector }),
            // Joliet: a supplementary descriptor whose escape sequences name UCS-2 level 1-3.
            2 if joliet.is_none() && is_joliet_escape(&sector[88..120]) => {
                joliet = Some(Descriptor { bytes: sector });
            }
            255 => break,
            _ => {}
        }
    }
    primary
        .map(|p| (p, joliet))
        .ok_or(IsoError::NoPrimaryDescriptor)
}

fn is_joliet_escape(escapes: &[u8]) -> bool {
    escapes
        .windows(3)
        .any(|w| matches!(w, b"%/@" | b"%/C" | b"%/E"))
}

/// All records of the directory `dir` (bounded by its data length and the image).
fn directory_records<'a>(
    bytes: &'a [u8],
    dir: &Record<'_>,
    block_size: usize,
) -> Result<Vec<Record<'a>>, IsoError> {
    let start = (dir.extent as usize)
        .checked_mul(block_size)
        .filter(|&s| s < bytes.len())
        .ok_or(IsoError::ExtentOutOfBounds { name: "/".into() })?;
    let end = start
        .saturating_add(dir.data_length as usize)
        .min(bytes.len());
    let mut records = Vec::new();
    let mut offset = start;
    while offset < end {
        let length = bytes[offset] as usize;
        if length == 0 {
            // Records never cross a sector boundary; zeros pad to the next one.
            offset = (offset / SECTOR + 1) * SECTOR;
            continue;
        }
        let sector_end = ((offset / SECTOR + 1) * SECTOR).min(end);
        let record = bytes
            .get(offset..sector_end)
            .and_then(parse_record)
            .ok_or(IsoError::BadDirectoryRecord(offset))?;
        if records.len() >= MAX_ROOT_ENTRIES {
            return Err(IsoError::TooManyEntries);
        }
        records.push(record);
        offset += length;
    }
    Ok(records)
}

/// SUSP `SP` entry of the root's `.` record: Rock Ridge (or other SUSP) is in use, and
/// `len_skp` bytes precede the entries of every system use area.
fn susp_sp_skip(system_use: &[u8]) -> Option<usize> {
    let entry = system_use.get(..7)?;
    (&entry[..2] == b"SP" && entry[2] == 7 && entry[4] == 0xBE && entry[5] == 0xEF)
        .then_some(usize::from(entry[6]))
}

/// The Rock Ridge `NM` name of a record, following `CE` continuation areas.
fn rock_ridge_name(
    bytes: &[u8],
    system_use: &[u8],
    skip: usize,
    block_size: usize,
) -> Option<String> {
    let mut name = Vec::new();
    let mut found = false;
    let mut area = system_use.get(skip..)?;
    for _ in 0..=MAX_CONTINUATIONS {
        let mut next_area = None;
        let mut rest = area;
        while rest.len() >= 4 {
            let length = rest[2] as usize;
            if length < 4 || length > rest.len() {
                break;
            }
            let entry = &rest[..length];
            match &entry[..2] {
                b"NM" if length >= 5 => {
                    let flags = entry[4];
                    if flags & 0x06 == 0 {
                        name.extend_from_slice(&entry[5..]);
                        found = true;
                    }
                }
                b"CE" if length >= 28 => {
                    let block = u32_le(entry, 4)? as usize;
                    let offset = u32_le(entry, 12)? as usize;
                    let size = u32_le(entry, 20)? as usize;
                    let start = block.checked_mul(block_size)?.checked_add(offset)?;
                    next_area = bytes.get(start..start.checked_add(size)?);
                }
                b"ST" => break,
                _ => {}
            }
            rest = &rest[length..];
        }
        match next_area {
            Some(next) => area = next,
            None => break,
        }
    }
    (found && !name.is_empty()).then(|| String::from_utf8_lossy(&name).into_owned())
}

/// Linux isofs `get_joliet_filename`: UCS-2 big-endian, `;1` and trailing dots dropped.
fn joliet_name(raw: &[u8]) -> String {
    let units = raw
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]));
    let name: String = char::decode_utf16(units)
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect();
    let name = name.strip_suffix(";1").unwrap_or(&name);
    name.trim_end_matches('.').to_string()
}

/// Linux isofs `isofs_name_translate` (map=normal): lower case, version and trailing dot dropped.
fn iso9660_name(raw: &[u8]) -> String {
    let name = String::from_utf8_lossy(raw).to_ascii_lowercase();
    let name = match name.rfind(';') {
        Some(i) => &name[..i],
        None => &name[..],
    };
    name.trim_end_matches('.').to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso9660_names_follow_linux() {
        assert_eq!(iso9660_name(b"USER_DAT.;1"), "user_dat");
        assert_eq!(iso9660_name(b"META_DAT;1"), "meta_dat");
        assert_eq!(iso9660_name(b"A.TXT;1"), "a.txt");
        assert_eq!(
            joliet_name(&[
                0, b'u', 0, b's', 0, b'e', 0, b'r', 0, b'-', 0, b'd', 0, b';', 0, b'1'
            ]),
            "user-d"
        );
    }

    #[test]
    fn garbage_is_an_error() {
        assert_eq!(read_iso(&[]), Err(IsoError::TooSmall(0)));
        assert_eq!(read_iso(&[0u8; 40_000]), Err(IsoError::NoPrimaryDescriptor));
    }
}
