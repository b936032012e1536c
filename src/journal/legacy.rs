//! The journal's first layout: one JSON file per fleet and name (`<key>.json` in the
//! workspace folder) holding two lists of tokens, rewritten whole on every change. It is
//! read so that an upgrade loses no recovery, and moved into the current layout once.
//!
//! Moving it must not race with the processes that use it: a process *claims* the file by
//! renaming it into the name's folder under a name of its own (`.legacy.<ms>.<pid>-<n>.claim`),
//! which only one process can do, copies its tokens into entries and deletes the claim. A
//! claim older than [`STALE_CLAIM`] belongs to a process that died while moving it and is
//! claimed again; a younger one is waited for, so no change is made to a name's entries
//! while its old tokens are half moved.

use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;

use super::files;

/// How old a claim must be before another process takes it over.
pub const STALE_CLAIM: Duration = Duration::from_secs(5);

const CLAIM_SUFFIX: &str = ".claim";

/// What the first layout kept for one fleet and name.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
pub struct Lists {
    #[serde(default)]
    pub unconfirmed: Vec<String>,
    #[serde(default)]
    pub replacing: Vec<String>,
}

/// The first layout's file of the name whose key is `key`.
pub fn file(workspace: &Path, key: &str) -> PathBuf {
    workspace.join(format!("{key}.json"))
}

/// Where an unreadable first-layout file is put aside, for its owner to look at.
pub fn put_aside(name_dir: &Path) -> PathBuf {
    name_dir.join("legacy.json.unreadable")
}

/// Claims the first layout's file, if there still is one: `Ok(Some(claim))` for the one
/// process that moved it, `Ok(None)` when there was none to take.
pub fn claim(legacy: &Path, name_dir: &Path) -> io::Result<Option<PathBuf>> {
    if !legacy.exists() {
        return Ok(None);
    }
    let mine = claim_name(name_dir);
    Ok(files::take(legacy, &mine)?.then_some(mine))
}

/// Claims left in `name_dir` by other processes (or by this one, killed earlier): the fresh
/// ones to wait for, and those old enough to take over.
pub fn pending(name_dir: &Path) -> io::Result<(Vec<PathBuf>, Vec<PathBuf>)> {
    let (mut fresh, mut stale) = (Vec::new(), Vec::new());
    let entries = match std::fs::read_dir(name_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((fresh, stale)),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        let Some(age) = claim_age(&path) else {
            continue;
        };
        if age >= STALE_CLAIM {
            stale.push(path);
        } else {
            fresh.push(path);
        }
    }
    Ok((fresh, stale))
}

/// Takes over a stale claim under a name of this process; `Ok(None)` when another process
/// took it first.
pub fn take_over(stale: &Path) -> io::Result<Option<PathBuf>> {
    let mine = claim_name(stale.parent().unwrap_or(Path::new(".")));
    Ok(files::take(stale, &mine)?.then_some(mine))
}

/// The tokens a first-layout file (or a claim of one) holds.
pub fn parse(bytes: &[u8]) -> serde_json::Result<Lists> {
    serde_json::from_slice(bytes)
}

fn claim_name(name_dir: &Path) -> PathBuf {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    files::unique_beside(&name_dir.join(format!("legacy.{now}")), CLAIM_SUFFIX)
}

/// How long ago the claim at `path` was made, when it is one.
fn claim_age(path: &Path) -> Option<Duration> {
    let name = path.file_name()?.to_str()?;
    let made: u64 = name
        .strip_prefix(".legacy.")?
        .strip_suffix(CLAIM_SUFFIX)?
        .split('.')
        .next()?
        .parse()
        .ok()?;
    let made = UNIX_EPOCH + Duration::from_millis(made);
    Some(SystemTime::now().duration_since(made).unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_claim_wins_and_ages_are_read_from_claim_names() {
        let dir = tempfile::tempdir().unwrap();
        let legacy = file(dir.path(), "abc");
        std::fs::write(&legacy, br#"{"unconfirmed":["t1"]}"#).unwrap();
        let name_dir = dir.path().join("abc");
        let won = claim(&legacy, &name_dir).unwrap().unwrap();
        assert_eq!(claim(&legacy, &name_dir).unwrap(), None, "taken once");
        let (fresh, stale) = pending(&name_dir).unwrap();
        assert_eq!((fresh, stale.len()), (vec![won.clone()], 0));
        let lists = parse(&std::fs::read(&won).unwrap()).unwrap();
        assert_eq!(lists.unconfirmed, ["t1"]);
        assert!(lists.replacing.is_empty());
        // A claim from a minute ago is stale, and taken over once.
        let old = name_dir.join(format!(
            ".legacy.{}.1-0{CLAIM_SUFFIX}",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis()
                - 60_000
        ));
        std::fs::rename(&won, &old).unwrap();
        let (fresh, stale) = pending(&name_dir).unwrap();
        assert_eq!((fresh.len(), stale), (0, vec![old.clone()]));
        assert!(take_over(&old).unwrap().is_some());
        assert_eq!(take_over(&old).unwrap(), None);
    }
}
