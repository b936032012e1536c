use std::fs;
use std::sync::Arc;
use std::time::SystemTime;

use super::*;

fn journal_in(dir: &Path) -> Journal {
    Journal::at(Some(dir.to_owned()))
}

/// The folder of a fleet and name, as the first layout named its file.
fn name_key(fleet: &str, name: &str) -> String {
    hex_hash(&format!("{fleet}\0{name}"), 12)
}

fn files_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

fn make_old(path: &Path) {
    let file = fs::OpenOptions::new().write(true).open(path).unwrap();
    file.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
}

#[test]
fn a_create_stays_resumable_until_the_state_holds_it() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_in(&dir.path().join("default"));
    journal.record_create("", "edge-0", "t1");
    journal.record_create("", "edge-0", "t2");
    assert!(journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(
        !journal.is_unconfirmed("prod", "edge-0", "t1"),
        "fleets apart"
    );
    assert!(!journal.is_unconfirmed("", "edge-1", "t1"), "names apart");
    journal.confirm("", "edge-0", "t2");
    assert!(journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(!journal.is_unconfirmed("", "edge-0", "t2"));
    // Another process reads what this one wrote.
    let again = journal_in(&dir.path().join("default"));
    journal.record_create("", "edge-0", "t3");
    assert!(again.is_unconfirmed("", "edge-0", "t3"));
    again.forget("", "edge-0", "t3");
    assert!(!journal.is_unconfirmed("", "edge-0", "t3"));
    assert!(journal.take_warnings().is_empty());
    assert!(again.take_warnings().is_empty());
}

/// A replacement planned by one Terraform run counts in that run and for a saved plan
/// another run applies; in another ordinary run it is stale: that run's plan did not
/// replace the VM (a `state rm` or an emptied state file since, #38).
#[test]
fn a_replacement_counts_in_the_run_that_planned_it_or_applies_its_saved_plan() {
    let dir = tempfile::tempdir().unwrap();
    let run = |identity: Option<&str>, applies_saved_plan| Run {
        identity: identity.map(str::to_owned),
        applies_saved_plan,
    };
    let planning = journal_in(dir.path()).for_run(run(Some("100@5"), false));
    planning.record_replacement("", "edge-0", "old");
    assert!(planning.is_replaced("", "edge-0", "old"));
    let same_run = journal_in(dir.path()).for_run(run(Some("100@5"), false));
    assert!(
        same_run.is_replaced("", "edge-0", "old"),
        "the apply walk of that run"
    );
    let saved = journal_in(dir.path()).for_run(run(Some("200@9"), true));
    assert!(
        saved.is_replaced("", "edge-0", "old"),
        "its saved plan applied"
    );
    let later = journal_in(dir.path()).for_run(run(Some("200@9"), false));
    assert!(
        !later.is_replaced("", "edge-0", "old"),
        "another run's plain apply"
    );
    let pid_reused = journal_in(dir.path()).for_run(run(Some("100@7"), false));
    assert!(!pid_reused.is_replaced("", "edge-0", "old"));
    let unknown = journal_in(dir.path()).for_run(run(None, false));
    assert!(
        unknown.is_replaced("", "edge-0", "old"),
        "as before where runs are unknown"
    );
    // The later run's own plan of the replacement makes it its own.
    later.record_replacement("", "edge-0", "old");
    assert!(later.is_replaced("", "edge-0", "old"));
    // So does its refresh of the replaced VM: its state still holds it (deposed by a killed
    // `create_before_destroy` apply, say), and this run destroys it after the create.
    let refreshing = journal_in(dir.path()).for_run(run(Some("300@1"), false));
    assert!(!refreshing.is_replaced("", "edge-0", "old"));
    refreshing.confirm("", "edge-0", "old");
    assert!(refreshing.is_replaced("", "edge-0", "old"));
    assert!(
        !later.is_replaced("", "edge-0", "old"),
        "and no longer the earlier run's"
    );
}

#[test]
fn a_replacement_is_recorded_by_its_plan_and_dropped_when_kept_or_gone() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_in(dir.path());
    journal.record_replacement("", "edge-0", "old");
    assert!(journal.is_replaced("", "edge-0", "old"));
    assert!(!journal.is_unconfirmed("", "edge-0", "old"), "facts apart");
    journal.forget_replacement("", "edge-0", "old");
    assert!(!journal.is_replaced("", "edge-0", "old"));
    journal.record_replacement("", "edge-0", "old");
    journal.record_create("", "edge-0", "old");
    journal.forget("", "edge-0", "old");
    assert!(!journal.is_replaced("", "edge-0", "old"));
    assert!(!journal.is_unconfirmed("", "edge-0", "old"));
    let left = files_in(&dir.path().join(name_key("", "edge-0")));
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn no_directory_keeps_nothing_and_workspace_names_stay_one_component() {
    let journal = Journal::at(None);
    journal.record_create("", "edge-0", "t1");
    assert!(!journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(journal.take_warnings().is_empty());
    assert_eq!(file_safe("../prod/x"), "_prod_x");
    assert_eq!(file_safe("team-a"), "team-a");
}

/// Two provider processes (two `Journal`s on one folder, as two aliases or a plan beside
/// an apply have) and several threads in each, all changing the same name at once: every
/// change holds. The first layout, a read-modify-write under a lock of one process, lost
/// entries here.
#[test]
fn concurrent_writers_in_threads_and_processes_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let processes = [
        Arc::new(journal_in(dir.path())),
        Arc::new(journal_in(dir.path())),
    ];
    let writers: Vec<_> = (0..4)
        .map(|writer| {
            let journal = processes[writer % 2].clone();
            std::thread::spawn(move || {
                for i in 0..40 {
                    let token = format!("w{writer}-{i}");
                    journal.record_create("", "edge-0", &token);
                    journal.record_replacement("", "edge-0", &token);
                    if i % 2 == 1 {
                        journal.confirm("", "edge-0", &token);
                    }
                    if i % 4 == 3 {
                        journal.forget_replacement("", "edge-0", &token);
                    }
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let reader = journal_in(dir.path());
    for writer in 0..4 {
        for i in 0..40 {
            let token = format!("w{writer}-{i}");
            let unconfirmed = reader.is_unconfirmed("", "edge-0", &token);
            assert_eq!(unconfirmed, i % 2 == 0, "{token} unconfirmed");
            assert_eq!(
                reader.is_replaced("", "edge-0", &token),
                i % 4 != 3,
                "{token}"
            );
        }
    }
    for journal in processes.iter().chain([&Arc::new(reader)]) {
        assert!(journal.take_warnings().is_empty());
    }
}

#[test]
fn a_corrupt_entry_is_reported_once_and_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_in(dir.path());
    journal.record_create("", "edge-0", "t1");
    journal.record_create("", "edge-0", "t2");
    let folder = dir.path().join(name_key("", "edge-0"));
    let t1 = folder.join(format!("{}.unconfirmed", hex_hash("t1", 16)));
    fs::write(&t1, b"{\"token\": \"t1\", \"fle").unwrap();
    // A file of another token under t2's name (copied by hand, say) is not t2's.
    let t2 = folder.join(format!("{}.unconfirmed", hex_hash("t2", 16)));
    fs::write(&t2, Entry::new("", "edge-0", "t9").bytes()).unwrap();
    assert!(!journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(!journal.is_unconfirmed("", "edge-0", "t2"));
    assert!(!journal.is_unconfirmed("", "edge-0", "t1"));
    let warnings = journal.take_warnings();
    assert_eq!(warnings.len(), 2, "one each, once: {warnings:?}");
    assert!(warnings.iter().all(|w| w.summary == UNREADABLE));
    assert!(warnings[0].detail.contains(&t1.display().to_string()));
    assert!(warnings[0].detail.contains("`edge-0`"));
    assert!(warnings[1].detail.contains("another create token"));
    assert!(journal.take_warnings().is_empty(), "drained");
    // Shown to the user as Terraform warnings.
    fs::write(&t1, b"").unwrap();
    let fresh = journal_in(dir.path());
    assert!(!fresh.is_unconfirmed("", "edge-0", "t1"));
    let mut diagnostics = tfplugin::Diagnostics::default();
    fresh.report_to(&mut diagnostics);
    assert!(!diagnostics.is_empty() && !diagnostics.has_errors());
}

#[test]
fn a_journal_that_cannot_be_written_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let in_the_way = dir.path().join("file");
    fs::write(&in_the_way, b"").unwrap();
    let journal = journal_in(&in_the_way.join("default"));
    journal.record_create("", "edge-0", "t1");
    let warnings = journal.take_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0].summary, NOT_WRITTEN);
    assert!(warnings[0].detail.contains("asks for an import"));
    // Every other change says what its loss means.
    journal.record_replacement("", "edge-0", "t1");
    journal.forget_replacement("", "edge-0", "t1");
    journal.confirm("", "edge-0", "t1");
    let warnings = journal.take_warnings();
    assert!(
        warnings.iter().all(|w| w.summary == NOT_WRITTEN),
        "{warnings:?}"
    );
    let details: Vec<&str> = warnings.iter().map(|w| w.detail.as_str()).collect();
    assert_eq!(details.len(), 4, "{details:?}");
    assert!(details[0].contains("will be refused as another state's VM"));
    assert!(details[1].contains("may be made beside it"));
    assert!(details[2].contains("could resume its VM after it left this state"));
    assert!(details[3].contains("the apply decides again after the destroy"));
    assert!(details.iter().all(|d| d.contains("Not a directory")));
}

#[test]
fn a_killed_write_is_ignored_and_its_file_cleaned() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join(name_key("", "edge-0"));
    fs::create_dir_all(&folder).unwrap();
    let entry = folder.join(format!("{}.unconfirmed", hex_hash("t1", 16)));
    // Killed after writing the whole temporary file, before renaming it; and one cut short.
    let whole = files::unique_beside(&entry, ".tmp");
    fs::write(&whole, Entry::new("", "edge-0", "t1").bytes()).unwrap();
    let cut = files::unique_beside(&entry, ".tmp");
    fs::write(&cut, b"{\"tok").unwrap();
    make_old(&whole);
    make_old(&cut);
    // A write under way in another process right now.
    let live = files::unique_beside(&entry, ".tmp");
    fs::write(&live, b"{").unwrap();
    // The first layout's temporary files too.
    let first_layout = dir
        .path()
        .join(format!("{}.tmp4242", name_key("", "edge-1")));
    fs::write(&first_layout, b"{}").unwrap();
    make_old(&first_layout);
    let journal = journal_in(dir.path());
    assert!(!journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(journal.take_warnings().is_empty(), "not an entry");
    assert!(!whole.exists() && !cut.exists() && !first_layout.exists());
    assert!(live.exists(), "a live writer's file stays");
}

#[test]
fn an_entry_binds_the_token_to_the_vm_and_mark_it_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_in(dir.path());
    journal.record_create("", "edge-0", "t1");
    // Killed before the VM was known: the token alone decides, as before.
    assert!(journal.is_unconfirmed_for("", "edge-0", "t1", 105, "mark-a"));
    journal.record_vm("", "edge-0", "t1", 105, "mark-a");
    assert!(journal.is_unconfirmed_for("", "edge-0", "t1", 105, "mark-a"));
    assert!(
        !journal.is_unconfirmed_for("", "edge-0", "t1", 105, "mark-b"),
        "the mark changed after the entry was written"
    );
    assert!(
        !journal.is_unconfirmed_for("", "edge-0", "t1", 106, "mark-a"),
        "a copy at another VMID"
    );
    assert!(journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(!journal.is_unconfirmed_for("", "edge-0", "t2", 105, "mark-a"));
    // Confirmed, then a late record: still confirmed.
    journal.confirm("", "edge-0", "t1");
    journal.record_vm("", "edge-0", "t1", 105, "mark-a");
    assert!(!journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(journal.take_warnings().is_empty());
}

fn write_first_layout(workspace: &Path, name: &str, json: &str) -> PathBuf {
    fs::create_dir_all(workspace).unwrap();
    let path = legacy::file(workspace, &name_key("", name));
    fs::write(&path, json).unwrap();
    path
}

#[test]
fn the_first_layout_is_read_moved_and_then_changed_like_any_entry() {
    let dir = tempfile::tempdir().unwrap();
    // Exactly as the first layout wrote it.
    let old = r#"{"unconfirmed":["t1","t2"],"replacing":["t0"]}"#;
    let file = write_first_layout(dir.path(), "edge-0", old);
    let journal = journal_in(dir.path());
    assert!(journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(!file.exists(), "moved");
    journal.confirm("", "edge-0", "t1");
    let later = journal_in(dir.path());
    assert!(!later.is_unconfirmed("", "edge-0", "t1"));
    assert!(later.is_unconfirmed("", "edge-0", "t2"));
    assert!(later.is_replaced("", "edge-0", "t0"));
    assert!(!later.is_replaced("", "edge-0", "t2"));
    let folder = dir.path().join(name_key("", "edge-0"));
    // t2 unconfirmed, t0 replacing, t1 held (confirmed): no claim left.
    assert_eq!(files_in(&folder).len(), 3, "three entries, no claim left");
    assert!(journal.take_warnings().is_empty());
}

#[test]
fn two_processes_moving_the_first_layout_at_once_both_see_its_tokens() {
    for _ in 0..20 {
        let dir = tempfile::tempdir().unwrap();
        write_first_layout(dir.path(), "edge-0", r#"{"unconfirmed":["t1"]}"#);
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let journal = journal_in(dir.path());
                std::thread::spawn(move || journal.is_unconfirmed("", "edge-0", "t1"))
            })
            .collect();
        for reader in readers {
            assert!(reader.join().unwrap());
        }
    }
}

#[test]
fn a_move_a_killed_process_left_is_finished() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join(name_key("", "edge-0"));
    fs::create_dir_all(&folder).unwrap();
    let minute_ago = SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis()
        - 60_000;
    let claim = folder.join(format!(".legacy.{minute_ago}.4242-0.claim"));
    fs::write(&claim, r#"{"unconfirmed":["t1"],"replacing":["t0"]}"#).unwrap();
    let journal = journal_in(dir.path());
    assert!(journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(journal.is_replaced("", "edge-0", "t0"));
    assert_eq!(files_in(&folder).len(), 2, "{:?}", files_in(&folder));
}

#[test]
fn an_unreadable_first_layout_file_is_put_aside_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let file = write_first_layout(dir.path(), "edge-0", "{\"unconfirmed\":[\"t1\"");
    let journal = journal_in(dir.path());
    assert!(!journal.is_unconfirmed("", "edge-0", "t1"));
    assert!(!file.exists());
    let aside = legacy::put_aside(&dir.path().join(name_key("", "edge-0")));
    assert!(aside.exists(), "kept for its owner to look at");
    let warnings = journal.take_warnings();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].detail.contains(&aside.display().to_string()));
    // Reported once: later processes find nothing to move.
    let later = journal_in(dir.path());
    assert!(!later.is_unconfirmed("", "edge-0", "t1"));
    assert!(later.take_warnings().is_empty());
}

#[test]
fn a_clone_records_where_its_create_works_until_the_finish_adds_the_mark() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_in(dir.path());
    journal.record_create("", "edge-0", "t1");
    journal.record_create("", "edge-0", "t2");
    journal.record_create("", "edge-1", "t3");
    assert!(
        journal.unconfirmed_vms("", "edge-0").is_empty(),
        "no VMID yet"
    );
    journal.record_clone("", "edge-0", "t1", 105);
    journal.record_clone("", "edge-1", "t3", 107);
    assert_eq!(
        journal.unconfirmed_vms("", "edge-0"),
        [("t1".to_owned(), 105)]
    );
    assert!(
        journal.unconfirmed_vms("prod", "edge-0").is_empty(),
        "fleets apart"
    );
    // Chosen again after the VMID was taken: the entry follows the clone.
    journal.record_clone("", "edge-0", "t1", 106);
    assert_eq!(
        journal.unconfirmed_vms("", "edge-0"),
        [("t1".to_owned(), 106)]
    );
    assert!(journal.is_unconfirmed_for("", "edge-0", "t1", 106, "any mark"));
    assert!(!journal.is_unconfirmed_for("", "edge-0", "t1", 105, "any mark"));
    // The finish binds the mark; a resumed create's clone record keeps it.
    journal.record_vm("", "edge-0", "t1", 106, "mark-a");
    journal.record_clone("", "edge-0", "t1", 106);
    assert!(!journal.is_unconfirmed_for("", "edge-0", "t1", 106, "mark-b"));
    // Confirmed (or forgotten): never listed, and a late record does not bring it back.
    journal.confirm("", "edge-0", "t1");
    journal.record_clone("", "edge-0", "t1", 106);
    assert!(journal.unconfirmed_vms("", "edge-0").is_empty());
    assert!(journal.take_warnings().is_empty());
    // Every name's, for a destroy's look at killed creates: only entries with a VMID.
    journal.record_create("prod", "edge-2", "t4");
    journal.record_clone("prod", "edge-2", "t4", 109);
    let listed: Vec<_> = journal
        .unconfirmed_vms_of_every_name()
        .into_iter()
        .map(|c| (c.fleet, c.name, c.token, c.vmid))
        .collect();
    assert_eq!(
        listed,
        [
            ("".to_owned(), "edge-1".to_owned(), "t3".to_owned(), 107),
            ("prod".to_owned(), "edge-2".to_owned(), "t4".to_owned(), 109),
        ]
    );
    // An unreadable entry is left out, with a warning.
    let place = dir.path().join(name_key("", "edge-1"));
    fs::write(place.join("0000.unconfirmed"), b"{not json").unwrap();
    assert_eq!(
        journal.unconfirmed_vms("", "edge-1"),
        [("t3".to_owned(), 107)]
    );
    assert_eq!(journal.take_warnings().len(), 1);
}

/// #38: a plan leaves to the apply a VM this directory's state held, so the journal keeps
/// that a refresh saw the token in the state until the VM is destroyed.
#[test]
fn a_token_the_state_held_is_kept_until_its_vm_is_forgotten() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_in(&dir.path().join("default"));
    journal.record_create("", "edge-0", "t1");
    assert!(!journal.is_held("", "edge-0", "t1"), "not stored yet");
    journal.confirm("", "edge-0", "t1");
    journal.confirm("", "edge-0", "t1");
    assert!(journal.is_held("", "edge-0", "t1"));
    assert!(!journal.is_held("", "edge-1", "t1"), "names apart");
    let again = journal_in(&dir.path().join("default"));
    assert!(
        again.is_held("", "edge-0", "t1"),
        "another process reads it"
    );
    again.forget("", "edge-0", "t1");
    assert!(!journal.is_held("", "edge-0", "t1"));
    assert!(journal.take_warnings().is_empty());
}

#[test]
fn a_create_counts_as_never_answered_until_it_hands_its_vm_over() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_in(dir.path());
    let never_answered = |journal: &Journal| -> Vec<(String, bool)> {
        journal
            .unconfirmed_vms_of_every_name()
            .into_iter()
            .map(|c| (c.token, c.never_answered))
            .collect()
    };
    journal.record_create("", "edge-0", "t1");
    journal.record_create("", "edge-1", "t2");
    journal.record_clone("", "edge-0", "t1", 105);
    journal.record_clone("", "edge-1", "t2", 106);
    journal.record_vm("", "edge-0", "t1", 105, "mark-a");
    assert_eq!(
        never_answered(&journal),
        [("t1".to_owned(), true), ("t2".to_owned(), true)]
    );
    // Answered: Terraform may hold it now. A later record of the create keeps that.
    journal.record_handed_over("", "edge-0", "t1");
    journal.record_vm("", "edge-0", "t1", 105, "mark-a");
    journal.record_clone("", "edge-0", "t1", 105);
    assert_eq!(
        never_answered(&journal),
        [("t1".to_owned(), false), ("t2".to_owned(), true)]
    );
    assert!(journal.is_unconfirmed_for("", "edge-0", "t1", 105, "mark-a"));
    // Confirmed: a late answer brings nothing back.
    journal.confirm("", "edge-1", "t2");
    journal.record_handed_over("", "edge-1", "t2");
    assert_eq!(never_answered(&journal), [("t1".to_owned(), false)]);
    assert!(journal.take_warnings().is_empty());
}

#[test]
fn an_entry_from_before_answers_were_kept_counts_as_answered() {
    let dir = tempfile::tempdir().unwrap();
    let journal = journal_in(dir.path());
    journal.record_create("", "edge-0", "t1");
    let place = dir.path().join(name_key("", "edge-0"));
    let entry = fs::read_dir(&place)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let older = r#"{"token":"t1","fleet":"","name":"edge-0","vmid":105}"#;
    fs::write(&entry, older).unwrap();
    let listed = journal.unconfirmed_vms_of_every_name();
    assert_eq!(listed.len(), 1);
    assert!(!listed[0].never_answered, "unknown is not never");
    // A resumed create's record keeps it unknown.
    journal.record_clone("", "edge-0", "t1", 106);
    assert!(!journal.unconfirmed_vms_of_every_name()[0].never_answered);
}
