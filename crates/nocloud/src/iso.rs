//! A minimal, deterministic ISO9660 writer for NoCloud seeds.
//!
//! The image holds one flat root directory with up to four files. It carries
//! three views of that directory, so every reader finds the cloud-init names:
//!
//! * the plain ISO9660 tree, with level-1 names (`META_DAT.;1`, ...),
//! * Rock Ridge (SUSP `SP`/`CE`/`ER`, RRIP `PX` and `NM`) on that tree, which
//!   Linux isofs uses first when the root `.` record announces it with `ER`,
//! * a Joliet tree (UCS-2 names in a supplementary volume descriptor), which
//!   Linux falls back to with `norock` and which other systems read.
//!
//! Layout, in 2048-byte sectors:
//!
//! | sector | content |
//! | --- | --- |
//! | 0–15 | system area (zeros) |
//! | 16 | primary volume descriptor |
//! | 17 | Joliet supplementary volume descriptor |
//! | 18 | volume descriptor set terminator |
//! | 19–22 | path tables: primary L, primary M, Joliet L, Joliet M |
//! | 23… | primary root directory, Joliet root directory, Rock Ridge continuation area |
//! | … | file contents, each starting on a sector, in a fixed order |
//!
//! Every timestamp is [`FIXED_TIMESTAMP`] and every free byte is zero, so the
//! same [`SeedFiles`] always give the same bytes.

use std::fmt;

/// Size of a logical sector (and block) in bytes.
pub const SECTOR_SIZE: usize = 2048;

/// The volume identifier cloud-init's NoCloud datasource looks for.
pub const VOLUME_ID: &str = "cidata";

/// Every timestamp written into the image: 2000-01-01T00:00:00Z. A constant
/// keeps the bytes reproducible; cloud-init never looks at file times.
pub const FIXED_TIMESTAMP: Timestamp = Timestamp {
    year: 2000,
    month: 1,
    day: 1,
};

/// The calendar date used for [`FIXED_TIMESTAMP`] (midnight UTC).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timestamp {
    /// Full year, 1900–2155.
    pub year: u16,
    /// 1–12.
    pub month: u8,
    /// 1–31.
    pub day: u8,
}

/// The contents of a NoCloud seed: the files cloud-init reads from the `cidata`
/// volume. `meta-data` and `user-data` are always written (cloud-init requires
/// both, an empty file is fine); the other two only when present.
///
/// `Debug` prints sizes only: user-data may carry secrets.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct SeedFiles {
    /// `meta-data`: YAML with at least `instance-id`.
    pub meta_data: Vec<u8>,
    /// `user-data`: written byte for byte as given.
    pub user_data: Vec<u8>,
    /// `network-config`: network config (version 1 or 2), if any.
    pub network_config: Option<Vec<u8>>,
    /// `vendor-data`: cloud-init merges it under user-data, if any.
    pub vendor_data: Option<Vec<u8>>,
}

impl fmt::Debug for SeedFiles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SeedFiles")
            .field("meta_data_len", &self.meta_data.len())
            .field("user_data_len", &self.user_data.len())
            .field(
                "network_config_len",
                &self.network_config.as_ref().map(Vec::len),
            )
            .field("vendor_data_len", &self.vendor_data.as_ref().map(Vec::len))
            .finish()
    }
}

/// Why an image could not be written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsoError {
    /// A file is larger than one ISO9660 extent can describe (4 GiB − 1).
    #[error("seed file {name} is {len} bytes; an ISO9660 file holds at most 4294967295 bytes")]
    FileTooLarge {
        /// The cloud-init name of the file.
        name: &'static str,
        /// Its size in bytes.
        len: usize,
    },
}

/// One root file: its names in each tree and its bytes.
struct Entry<'a> {
    /// The name Linux and cloud-init see (Rock Ridge `NM`, Joliet).
    name: &'static str,
    /// The level-1 ISO9660 name; sorted order of these is the order in
    /// `SeedFiles` so one list serves all three trees.
    iso_name: &'static str,
    data: &'a [u8],
}

/// The files to write, in directory order. ISO9660 requires records sorted
/// by identifier; these are sorted in both the primary (`M`, `N`, `U`, `V`)
/// and the Joliet (`m`, `n`, `u`, `v`) trees.
fn entries(files: &SeedFiles) -> Vec<Entry<'_>> {
    let mut list = vec![Entry {
        name: "meta-data",
        iso_name: "META_DAT.;1",
        data: &files.meta_data,
    }];
    if let Some(network_config) = &files.network_config {
        list.push(Entry {
            name: "network-config",
            iso_name: "NETWORK_.;1",
            data: network_config,
        });
    }
    list.push(Entry {
        name: "user-data",
        iso_name: "USER_DAT.;1",
        data: &files.user_data,
    });
    if let Some(vendor_data) = &files.vendor_data {
        list.push(Entry {
            name: "vendor-data",
            iso_name: "VENDOR_D.;1",
            data: vendor_data,
        });
    }
    list
}

const PRIMARY_DESCRIPTOR_SECTOR: u32 = 16;
const JOLIET_DESCRIPTOR_SECTOR: u32 = 17;
const TERMINATOR_SECTOR: u32 = 18;
const PRIMARY_L_PATH_SECTOR: u32 = 19;
const PRIMARY_M_PATH_SECTOR: u32 = 20;
const JOLIET_L_PATH_SECTOR: u32 = 21;
const JOLIET_M_PATH_SECTOR: u32 = 22;
const FIRST_DIRECTORY_SECTOR: u32 = 23;

/// Smallest volume we write: libburn (xorriso) reports a volume of 32 sectors
/// (64 KiB) or fewer as blank media, so a small seed is padded with zero
/// sectors to one more than that.
const MIN_VOLUME_SECTORS: u32 = 33;

/// One path table record for the root directory alone.
const PATH_TABLE_LEN: u32 = 10;

const DIRECTORY_FLAG: u8 = 0x02;

// Rock Ridge identification, as RRIP 1.10 (`RRIP_1991A`) defines it; the PX
// entry below has the matching 36-byte form (no inode number).
const RRIP_ID: &[u8] = b"RRIP_1991A";
const RRIP_DESCRIPTOR: &[u8] =
    b"THE ROCK RIDGE INTERCHANGE PROTOCOL PROVIDES SUPPORT FOR POSIX FILE SYSTEM SEMANTICS";
const RRIP_SOURCE: &[u8] = concat!(
    "PLEASE CONTACT DISC PUBLISHER FOR SPECIFICATION SOURCE.  ",
    "SEE PUBLISHER IDENTIFIER IN PRIMARY VOLUME DESCRIPTOR FOR CONTACT INFORMATION."
)
.as_bytes();

const DIRECTORY_MODE: u32 = 0o040_555;
const FILE_MODE: u32 = 0o100_444;

const APPLICATION_ID: &str = "TERRAFORM-PROVIDER-PROXMOX NOCLOUD SEED";

/// Writes `files` as an ISO9660 image with volume id `cidata`.
///
/// The result depends on `files` alone: no clock, no randomness, no I/O.
pub fn write(files: &SeedFiles) -> Result<Vec<u8>, IsoError> {
    let entries = entries(files);
    for entry in &entries {
        if u32::try_from(entry.data.len()).is_err() {
            return Err(IsoError::FileTooLarge {
                name: entry.name,
                len: entry.data.len(),
            });
        }
    }

    // Directory sizes do not depend on where files land, so measure them with
    // placeholder extents first, then lay out the data after them.
    let placeholder = vec![(0, 0); entries.len()];
    let primary_dir_sectors = sectors(&primary_directory(&entries, &placeholder, 0, 0, 0).len());
    let joliet_dir_sectors = sectors(&joliet_directory(&entries, &placeholder, 0, 0).len());

    let primary_dir_sector = FIRST_DIRECTORY_SECTOR;
    let joliet_dir_sector = primary_dir_sector + primary_dir_sectors;
    let continuation_sector = joliet_dir_sector + joliet_dir_sectors;
    let first_data_sector = continuation_sector + 1;

    let mut extents = Vec::with_capacity(entries.len());
    let mut next_sector = first_data_sector;
    for entry in &entries {
        let len = entry.data.len() as u32; // checked above
        // An empty file still points inside the volume; it just owns no sector.
        extents.push((next_sector, len));
        next_sector += sectors(&(len as usize));
    }
    let total_sectors = next_sector.max(MIN_VOLUME_SECTORS);

    let primary_dir = primary_directory(
        &entries,
        &extents,
        primary_dir_sector,
        primary_dir_sectors,
        continuation_sector,
    );
    let joliet_dir = joliet_directory(&entries, &extents, joliet_dir_sector, joliet_dir_sectors);

    let mut image = vec![0u8; total_sectors as usize * SECTOR_SIZE];
    put_sector(
        &mut image,
        PRIMARY_DESCRIPTOR_SECTOR,
        &volume_descriptor(
            Flavor::Primary,
            total_sectors,
            primary_dir_sector,
            primary_dir_sectors,
        ),
    );
    put_sector(
        &mut image,
        JOLIET_DESCRIPTOR_SECTOR,
        &volume_descriptor(
            Flavor::Joliet,
            total_sectors,
            joliet_dir_sector,
            joliet_dir_sectors,
        ),
    );
    put_sector(&mut image, TERMINATOR_SECTOR, &terminator());
    put_sector(
        &mut image,
        PRIMARY_L_PATH_SECTOR,
        &path_table(primary_dir_sector, Endian::Little),
    );
    put_sector(
        &mut image,
        PRIMARY_M_PATH_SECTOR,
        &path_table(primary_dir_sector, Endian::Big),
    );
    put_sector(
        &mut image,
        JOLIET_L_PATH_SECTOR,
        &path_table(joliet_dir_sector, Endian::Little),
    );
    put_sector(
        &mut image,
        JOLIET_M_PATH_SECTOR,
        &path_table(joliet_dir_sector, Endian::Big),
    );
    put_sector(&mut image, primary_dir_sector, &primary_dir);
    put_sector(&mut image, joliet_dir_sector, &joliet_dir);
    put_sector(&mut image, continuation_sector, &extension_reference());
    for (entry, (sector, _)) in entries.iter().zip(&extents) {
        put_sector(&mut image, *sector, entry.data);
    }
    Ok(image)
}

/// Number of sectors `len` bytes occupy.
fn sectors(len: &usize) -> u32 {
    len.div_ceil(SECTOR_SIZE) as u32
}

fn put_sector(image: &mut [u8], sector: u32, bytes: &[u8]) {
    let start = sector as usize * SECTOR_SIZE;
    image[start..start + bytes.len()].copy_from_slice(bytes);
}

#[derive(Clone, Copy)]
enum Flavor {
    Primary,
    Joliet,
}

#[derive(Clone, Copy)]
enum Endian {
    Little,
    Big,
}

fn both_u16(value: u16) -> [u8; 4] {
    let [lo, hi] = value.to_le_bytes();
    [lo, hi, hi, lo]
}

fn both_u32(value: u32) -> [u8; 8] {
    let le = value.to_le_bytes();
    let be = value.to_be_bytes();
    [le[0], le[1], le[2], le[3], be[0], be[1], be[2], be[3]]
}

/// A text field of a volume descriptor: ASCII padded with spaces in the
/// primary descriptor, UCS-2 big-endian padded with U+0020 in Joliet's.
fn text_field(flavor: Flavor, text: &str, width: usize) -> Vec<u8> {
    let mut field = Vec::with_capacity(width);
    match flavor {
        Flavor::Primary => {
            field.extend_from_slice(text.as_bytes());
            field.resize(width, b' ');
        }
        Flavor::Joliet => {
            for unit in text.encode_utf16() {
                field.extend_from_slice(&unit.to_be_bytes());
            }
            while field.len() + 2 <= width {
                field.extend_from_slice(&[0x00, b' ']);
            }
            // The 37-byte file identifier fields have an odd width.
            field.resize(width, 0);
        }
    }
    field.truncate(width);
    field
}

/// The 17-byte "dec-datetime" of volume descriptors.
fn long_date(timestamp: Timestamp) -> [u8; 17] {
    let mut date = [0u8; 17];
    let digits = format!(
        "{:04}{:02}{:02}00000000",
        timestamp.year, timestamp.month, timestamp.day
    );
    date[..16].copy_from_slice(digits.as_bytes());
    date
}

/// "Not specified" in dec-datetime form.
fn unset_long_date() -> [u8; 17] {
    let mut date = [b'0'; 17];
    date[16] = 0;
    date
}

/// The 7-byte date of directory records.
fn short_date(timestamp: Timestamp) -> [u8; 7] {
    [
        (timestamp.year - 1900) as u8,
        timestamp.month,
        timestamp.day,
        0,
        0,
        0,
        0,
    ]
}

fn volume_descriptor(
    flavor: Flavor,
    total_sectors: u32,
    root_sector: u32,
    root_sectors: u32,
) -> Vec<u8> {
    let mut d = Vec::with_capacity(SECTOR_SIZE);
    let (kind, l_path, m_path) = match flavor {
        Flavor::Primary => (1u8, PRIMARY_L_PATH_SECTOR, PRIMARY_M_PATH_SECTOR),
        Flavor::Joliet => (2u8, JOLIET_L_PATH_SECTOR, JOLIET_M_PATH_SECTOR),
    };
    d.push(kind);
    d.extend_from_slice(b"CD001");
    d.push(1); // version
    d.push(0); // volume flags (Joliet: only registered escape sequences)
    d.extend(text_field(flavor, "", 32)); // system identifier
    d.extend(text_field(flavor, VOLUME_ID, 32));
    d.extend([0u8; 8]);
    d.extend(both_u32(total_sectors));
    let mut escapes = [0u8; 32];
    if let Flavor::Joliet = flavor {
        // UCS-2 level 3: Joliet's own escape sequence.
        escapes[..3].copy_from_slice(b"%/E");
    }
    d.extend(escapes);
    d.extend(both_u16(1)); // volume set size
    d.extend(both_u16(1)); // volume sequence number
    d.extend(both_u16(SECTOR_SIZE as u16));
    d.extend(both_u32(PATH_TABLE_LEN));
    d.extend(l_path.to_le_bytes());
    d.extend(0u32.to_le_bytes()); // no optional L path table
    d.extend(m_path.to_be_bytes());
    d.extend(0u32.to_be_bytes()); // no optional M path table
    d.extend(directory_record(
        &[0],
        root_sector,
        root_sectors * SECTOR_SIZE as u32,
        DIRECTORY_FLAG,
        &[],
    ));
    d.extend(text_field(flavor, "", 128)); // volume set identifier
    d.extend(text_field(flavor, "", 128)); // publisher
    d.extend(text_field(flavor, "", 128)); // data preparer
    d.extend(text_field(flavor, APPLICATION_ID, 128));
    d.extend(text_field(flavor, "", 37)); // copyright file
    d.extend(text_field(flavor, "", 37)); // abstract file
    d.extend(text_field(flavor, "", 37)); // bibliographic file
    d.extend(long_date(FIXED_TIMESTAMP)); // creation
    d.extend(long_date(FIXED_TIMESTAMP)); // modification
    d.extend(unset_long_date()); // expiration
    d.extend(unset_long_date()); // effective
    d.push(1); // file structure version
    debug_assert_eq!(d.len(), 882);
    d.resize(SECTOR_SIZE, 0);
    d
}

fn terminator() -> Vec<u8> {
    let mut d = vec![255u8];
    d.extend_from_slice(b"CD001");
    d.push(1);
    d
}

/// A path table with the root directory as its only record.
fn path_table(root_sector: u32, endian: Endian) -> Vec<u8> {
    let mut table = vec![1u8, 0]; // identifier length, extended attribute length
    match endian {
        Endian::Little => {
            table.extend(root_sector.to_le_bytes());
            table.extend(1u16.to_le_bytes()); // parent: itself
        }
        Endian::Big => {
            table.extend(root_sector.to_be_bytes());
            table.extend(1u16.to_be_bytes());
        }
    }
    table.extend([0, 0]); // root identifier, then padding to an even length
    debug_assert_eq!(table.len(), PATH_TABLE_LEN as usize);
    table
}

fn directory_record(
    identifier: &[u8],
    sector: u32,
    len: u32,
    flags: u8,
    system_use: &[u8],
) -> Vec<u8> {
    let mut record = Vec::with_capacity(34 + identifier.len() + system_use.len());
    record.push(0); // length, set below
    record.push(0); // extended attribute record length
    record.extend(both_u32(sector));
    record.extend(both_u32(len));
    record.extend(short_date(FIXED_TIMESTAMP));
    record.push(flags);
    record.push(0); // file unit size (not interleaved)
    record.push(0); // interleave gap
    record.extend(both_u16(1)); // volume sequence number
    record.push(identifier.len() as u8);
    record.extend_from_slice(identifier);
    if identifier.len().is_multiple_of(2) {
        record.push(0); // padding so the system use area starts even
    }
    record.extend_from_slice(system_use);
    if !record.len().is_multiple_of(2) {
        record.push(0);
    }
    record[0] = u8::try_from(record.len()).expect("directory records stay under 256 bytes");
    record
}

/// Packs records into sectors; a record never crosses a sector boundary.
fn pack_records(records: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::new();
    for record in records {
        let used = out.len() % SECTOR_SIZE;
        if used + record.len() > SECTOR_SIZE {
            out.resize(out.len() + SECTOR_SIZE - used, 0);
        }
        out.extend_from_slice(record);
    }
    out.resize(out.len().div_ceil(SECTOR_SIZE) * SECTOR_SIZE, 0);
    out
}

fn susp_entry(signature: &[u8; 2], payload: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(4 + payload.len());
    entry.extend_from_slice(signature);
    entry.push(u8::try_from(4 + payload.len()).expect("SUSP entries stay under 256 bytes"));
    entry.push(1); // entry version
    entry.extend_from_slice(payload);
    entry
}

/// RRIP 1.10 `PX`: mode, link count, uid, gid (root-owned, read-only).
fn posix_attributes(mode: u32, links: u32) -> Vec<u8> {
    let mut payload = Vec::with_capacity(32);
    payload.extend(both_u32(mode));
    payload.extend(both_u32(links));
    payload.extend(both_u32(0));
    payload.extend(both_u32(0));
    susp_entry(b"PX", &payload)
}

/// RRIP `NM`: the full name, in one piece.
fn alternate_name(name: &str) -> Vec<u8> {
    let mut payload = vec![0u8]; // flags: not continued, not `.`/`..`
    payload.extend_from_slice(name.as_bytes());
    susp_entry(b"NM", &payload)
}

/// SUSP `ER` naming Rock Ridge; it is longer than a directory record's system
/// use area allows, so it lives in the continuation area.
fn extension_reference() -> Vec<u8> {
    let mut payload = vec![
        RRIP_ID.len() as u8,
        RRIP_DESCRIPTOR.len() as u8,
        RRIP_SOURCE.len() as u8,
        1, // extension version
    ];
    payload.extend_from_slice(RRIP_ID);
    payload.extend_from_slice(RRIP_DESCRIPTOR);
    payload.extend_from_slice(RRIP_SOURCE);
    susp_entry(b"ER", &payload)
}

fn primary_directory(
    entries: &[Entry<'_>],
    extents: &[(u32, u32)],
    own_sector: u32,
    own_sectors: u32,
    continuation_sector: u32,
) -> Vec<u8> {
    let own_len = own_sectors * SECTOR_SIZE as u32;

    // SUSP requires SP first in the root's `.` record; CE points at the ER.
    let mut dot_system_use = susp_entry(b"SP", &[0xBE, 0xEF, 0]);
    dot_system_use.extend(posix_attributes(DIRECTORY_MODE, 2));
    let mut continuation = Vec::with_capacity(24);
    continuation.extend(both_u32(continuation_sector));
    continuation.extend(both_u32(0)); // offset within the sector
    continuation.extend(both_u32(extension_reference().len() as u32));
    dot_system_use.extend(susp_entry(b"CE", &continuation));

    let mut records = vec![
        directory_record(&[0], own_sector, own_len, DIRECTORY_FLAG, &dot_system_use),
        // The root's parent is the root itself.
        directory_record(
            &[1],
            own_sector,
            own_len,
            DIRECTORY_FLAG,
            &posix_attributes(DIRECTORY_MODE, 2),
        ),
    ];
    for (entry, (sector, len)) in entries.iter().zip(extents) {
        let mut system_use = posix_attributes(FILE_MODE, 1);
        system_use.extend(alternate_name(entry.name));
        records.push(directory_record(
            entry.iso_name.as_bytes(),
            *sector,
            *len,
            0,
            &system_use,
        ));
    }
    pack_records(&records)
}

fn joliet_directory(
    entries: &[Entry<'_>],
    extents: &[(u32, u32)],
    own_sector: u32,
    own_sectors: u32,
) -> Vec<u8> {
    let own_len = own_sectors * SECTOR_SIZE as u32;
    let mut records = vec![
        directory_record(&[0], own_sector, own_len, DIRECTORY_FLAG, &[]),
        directory_record(&[1], own_sector, own_len, DIRECTORY_FLAG, &[]),
    ];
    for (entry, (sector, len)) in entries.iter().zip(extents) {
        let name: Vec<u8> = entry
            .name
            .encode_utf16()
            .flat_map(u16::to_be_bytes)
            .collect();
        records.push(directory_record(&name, *sector, *len, 0, &[]));
    }
    pack_records(&records)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SeedFiles {
        SeedFiles {
            meta_data: b"instance-id: iid-test\nlocal-hostname: \"edge-0\"\n".to_vec(),
            user_data: b"#cloud-config\nruncmd:\n  - [touch, /tmp/x]\n".to_vec(),
            network_config: Some(b"version: 2\nethernets: {}\n".to_vec()),
            vendor_data: Some(b"#cloud-config\npackages: [qemu-guest-agent]\n".to_vec()),
        }
    }

    fn sector(image: &[u8], n: u32) -> &[u8] {
        &image[n as usize * SECTOR_SIZE..(n as usize + 1) * SECTOR_SIZE]
    }

    #[test]
    fn volume_descriptors_are_where_readers_look() {
        let image = write(&sample()).unwrap();
        assert_eq!(image.len() % SECTOR_SIZE, 0);
        assert!(image[..16 * SECTOR_SIZE].iter().all(|b| *b == 0));
        let pvd = sector(&image, 16);
        assert_eq!(&pvd[..7], b"\x01CD001\x01");
        assert_eq!(&pvd[40..72], format!("{:<32}", "cidata").as_bytes());
        let total = u32::from_le_bytes(pvd[80..84].try_into().unwrap());
        assert_eq!(total as usize * SECTOR_SIZE, image.len());
        assert_eq!(u32::from_be_bytes(pvd[84..88].try_into().unwrap()), total);
        let svd = sector(&image, 17);
        assert_eq!(&svd[..7], b"\x02CD001\x01");
        assert_eq!(&svd[88..91], b"%/E");
        assert_eq!(&svd[40..52], b"\0c\0i\0d\0a\0t\0a");
        assert_eq!(&sector(&image, 18)[..7], b"\xffCD001\x01");
    }

    #[test]
    fn root_dot_record_announces_rock_ridge() {
        let image = write(&sample()).unwrap();
        let root = sector(&image, FIRST_DIRECTORY_SECTOR);
        let dot_len = root[0] as usize;
        assert_eq!(root[32], 1, "identifier length of `.`");
        // identifier 0x00 at 33 (odd length: no pad), system use from 34.
        assert_eq!(&root[34..41], b"SP\x07\x01\xbe\xef\x00");
        let system_use = &root[34..dot_len];
        let ce = system_use.windows(2).position(|w| w == b"CE").unwrap();
        let ce_sector = u32::from_le_bytes(system_use[ce + 4..ce + 8].try_into().unwrap());
        let er = sector(&image, ce_sector);
        assert_eq!(&er[..2], b"ER");
        assert_eq!(&er[8..18], RRIP_ID);
    }

    #[test]
    fn file_contents_start_on_sectors_in_order() {
        let files = sample();
        let image = write(&files).unwrap();
        let data_start = (FIRST_DIRECTORY_SECTOR + 3) as usize * SECTOR_SIZE;
        assert_eq!(
            &image[data_start..data_start + files.meta_data.len()],
            &files.meta_data[..]
        );
    }

    #[test]
    fn same_input_same_bytes_and_content_changes_bytes() {
        let a = write(&sample()).unwrap();
        assert_eq!(a, write(&sample()).unwrap());
        let mut other = sample();
        other.user_data.push(b'\n');
        assert_ne!(a, write(&other).unwrap());
    }

    #[test]
    fn optional_files_are_left_out() {
        let files = SeedFiles {
            meta_data: b"instance-id: a\n".to_vec(),
            user_data: Vec::new(),
            network_config: None,
            vendor_data: None,
        };
        let image = write(&files).unwrap();
        let root = sector(&image, FIRST_DIRECTORY_SECTOR);
        let text = String::from_utf8_lossy(root);
        assert!(text.contains("META_DAT.;1") && text.contains("USER_DAT.;1"));
        assert!(!text.contains("NETWORK_") && !text.contains("VENDOR_D"));
        // meta-data owns one sector, empty user-data none; then the padding.
        let record = root.windows(11).position(|w| w == b"USER_DAT.;1").unwrap() - 33;
        let extent = u32::from_le_bytes(root[record + 2..record + 6].try_into().unwrap());
        assert_eq!(extent, FIRST_DIRECTORY_SECTOR + 4);
        assert_eq!(image.len(), MIN_VOLUME_SECTORS as usize * SECTOR_SIZE);
    }

    #[test]
    fn debug_shows_sizes_not_contents() {
        let text = format!("{:?}", sample());
        assert!(!text.contains("runcmd"));
        assert!(text.contains("user_data_len"));
    }
}
