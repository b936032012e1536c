//! Small files that are written whole or not at all and survive a crash: each is written to
//! a temporary file in its own folder, synced, renamed (or linked) into place, and the folder
//! synced, so a reader sees the old file, the new one or none, never half of one, and a
//! power cut after the call returns loses nothing.
//!
//! Temporary files are named `.<final name>.<pid>-<n>.tmp`: a writer killed between writing
//! and renaming leaves one, which no reader takes for an entry and [`remove_stale_temps`]
//! deletes once it is old enough that no live writer can still own it.

use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

const TEMP_SUFFIX: &str = ".tmp";

/// The contents of `path`, `None` when there is no such file.
pub fn read(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Puts `bytes` at `path`, replacing any file there.
pub fn replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let temp = write_temp(path, bytes)?;
    if let Err(e) = fs::rename(&temp, path) {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    sync_dir(folder(path))
}

/// Puts `bytes` at `path` unless a file is there already (then `Ok(false)`, nothing changed).
pub fn create_if_absent(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let temp = write_temp(path, bytes)?;
    // A hard link fails instead of replacing: the no-clobber twin of a rename.
    let linked = fs::hard_link(&temp, path);
    let _ = fs::remove_file(&temp);
    match linked {
        Ok(()) => sync_dir(folder(path)).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        // A file system without hard links: an exclusive create, whose content a crash can
        // cut short (a reader then reports the file as unreadable).
        Err(_) => match write_new(path, bytes) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            written => written,
        },
    }
}

/// Removes `path`; `Ok(false)` when it was not there.
pub fn remove(path: &Path) -> io::Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(folder(path)).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Renames `from` to `to`, synced; `Ok(false)` when `from` was not there (another process
/// took it first).
pub fn take(from: &Path, to: &Path) -> io::Result<bool> {
    ensure_dir(folder(to))?;
    match fs::rename(from, to) {
        Ok(()) => {
            sync_dir(folder(to))?;
            sync_dir(folder(from)).map(|()| true)
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes the temporary files in `dir` older than `age` (left by killed writers) and, for
/// files of the journal's first layout, `<name>.tmp<pid>`; returns how many it deleted.
pub fn remove_stale_temps(dir: &Path, age: Duration) -> io::Result<usize> {
    let mut removed = 0;
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let ours = name.starts_with('.') && name.ends_with(TEMP_SUFFIX);
        if !(ours || is_first_layout_temp(&name)) || !entry.file_type()?.is_file() {
            continue;
        }
        let modified = entry.metadata()?.modified()?;
        let old = SystemTime::now()
            .duration_since(modified)
            .is_ok_and(|elapsed| elapsed >= age);
        if old && remove(&entry.path())? {
            removed += 1;
        }
    }
    Ok(removed)
}

/// `<hex>.tmp<digits>`: how the first layout named the file it was about to rename.
fn is_first_layout_temp(name: &str) -> bool {
    name.split_once(".tmp").is_some_and(|(stem, pid)| {
        !stem.is_empty()
            && stem.bytes().all(|b| b.is_ascii_hexdigit())
            && !pid.is_empty()
            && pid.bytes().all(|b| b.is_ascii_digit())
    })
}

/// A name beside `path` that no other writer, in this process or another, uses.
pub fn unique_beside(path: &Path, suffix: &str) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    path.with_file_name(format!(".{name}.{}-{n}{suffix}", std::process::id()))
}

fn write_temp(path: &Path, bytes: &[u8]) -> io::Result<PathBuf> {
    ensure_dir(folder(path))?;
    let temp = unique_beside(path, TEMP_SUFFIX);
    match write_new(&temp, bytes) {
        Ok(_) => Ok(temp),
        Err(e) => {
            let _ = fs::remove_file(&temp);
            Err(e)
        }
    }
}

fn write_new(path: &Path, bytes: &[u8]) -> io::Result<bool> {
    let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    Ok(true)
}

/// Makes `dir` (and its parents) when missing, syncing the folder that gained it.
fn ensure_dir(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    fs::create_dir_all(dir)?;
    sync_dir(folder(dir))
}

fn folder(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Makes a rename, link or removal in `dir` durable. Windows offers no handle on a folder
/// to sync; NTFS journals its metadata itself.
#[cfg(unix)]
fn sync_dir(dir: &Path) -> io::Result<()> {
    fs::File::open(dir)?.sync_all()
}

#[cfg(not(unix))]
fn sync_dir(_dir: &Path) -> io::Result<()> {
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replace_and_create_if_absent_leave_whole_files_and_no_temporaries() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/entry");
        replace(&path, b"one").unwrap();
        replace(&path, b"two").unwrap();
        assert_eq!(read(&path).unwrap().unwrap(), b"two");
        assert!(
            !create_if_absent(&path, b"three").unwrap(),
            "never replaces"
        );
        assert_eq!(read(&path).unwrap().unwrap(), b"two");
        let other = dir.path().join("a/b/other");
        assert!(create_if_absent(&other, b"four").unwrap());
        assert_eq!(read(&other).unwrap().unwrap(), b"four");
        let names: Vec<_> = fs::read_dir(dir.path().join("a/b"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(remove(&path).unwrap());
        assert!(!remove(&path).unwrap());
        assert_eq!(read(&path).unwrap(), None);
    }

    #[test]
    fn only_old_temporaries_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let entry = dir.path().join("entry");
        let old = unique_beside(&entry, TEMP_SUFFIX);
        let fresh = unique_beside(&entry, TEMP_SUFFIX);
        let first_layout = dir.path().join("0123456789abcdef01234567.tmp4242");
        for path in [&old, &fresh, &first_layout, &entry] {
            fs::write(path, b"{\"cut").unwrap();
        }
        let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
        for path in [&old, &first_layout, &entry] {
            let file = OpenOptions::new().write(true).open(path).unwrap();
            file.set_modified(an_hour_ago).unwrap();
        }
        let removed = remove_stale_temps(dir.path(), Duration::from_secs(300)).unwrap();
        assert_eq!(removed, 2);
        assert!(!old.exists() && !first_layout.exists());
        assert!(fresh.exists(), "a live writer's file stays");
        assert!(entry.exists(), "entries are not temporaries");
        assert!(!is_first_layout_temp("edge.tmp"));
        assert!(!is_first_layout_temp("abc.tmpx1"));
    }
}
