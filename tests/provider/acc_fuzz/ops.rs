//! The steps a sequence is made of ([`Op`]), the families they belong to (each one can be
//! switched off), and the weighted table random sequences are drawn from. An op is plain
//! data: it names a state and a slot, never a VMID, so any subsequence of a sequence is a
//! sequence too (shrinking drops steps freely) and its `Debug` form is Rust.

use super::model::{DRAWN_SLOTS, Edit, STATES};

/// A kind of thing users and clusters do. [`super::FAMILIES_WAITING`] lists the ones that
/// find a known bug and stay off in CI until it is fixed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Family {
    /// `terraform apply` with no change.
    Apply,
    /// cores, memory, tags, started.
    InPlace,
    /// template, user_data, a smaller disk.
    Replacing,
    /// `disk_gib` below the template's: refused at plan, before any write.
    ShrinkDisk,
    /// `terraform apply -replace=ADDR`.
    Replace,
    /// `terraform taint ADDR`.
    Taint,
    /// `create_before_destroy` toggled.
    CreateBeforeDestroy,
    /// `terraform apply -target=ADDR`.
    Target,
    /// `terraform apply -refresh=false`.
    NoRefresh,
    /// `terraform plan -out` now, applied later.
    SavedPlan,
    /// `terraform destroy`.
    Destroy,
    /// `terraform state rm`, then `terraform import` or an import block.
    StateRmImport,
    /// Commands in a second working directory with the same names.
    SecondState,
    /// Both states applying at the same moment.
    Race,
    /// SIGKILL to terraform and the provider during an apply.
    Kill,
    /// SIGKILL to terraform and the provider during a destroy.
    KillDestroy,
    /// Faults injected into the next step (5xx, resets, lost answers, held locks, tasks).
    Faults,
    /// An operator stops or starts a VM through the PVE API.
    HandPower,
    /// An operator deletes a VM through the PVE API.
    HandDelete,
    /// An operator turns `protection` on or off.
    HandProtection,
    /// An operator replaces the VM's description (the ownership mark).
    HandMark,
    /// Migration, HA and node failures: used when the simulator offers them (probed at run
    /// time; an op the simulator answers "not implemented" turns the family off for the run).
    Cluster,
    /// The same configuration applied from a fresh working directory: no state, no journal
    /// (a lost state, a CI job on a new runner).
    FreshDirectory,
    /// A plan saved in one directory, applied in a copy of it made as a CI job makes it (the
    /// configuration, the state and the plan file, then `terraform init`).
    SavedPlanElsewhere,
    /// An operator migrates a VM while an apply works: at a request of the apply's, which
    /// waits there until the VM moved.
    MovedUnder,
}

impl Family {
    pub const ALL: [Family; 25] = [
        Family::Apply,
        Family::InPlace,
        Family::Replacing,
        Family::ShrinkDisk,
        Family::Replace,
        Family::Taint,
        Family::CreateBeforeDestroy,
        Family::Target,
        Family::NoRefresh,
        Family::SavedPlan,
        Family::Destroy,
        Family::StateRmImport,
        Family::SecondState,
        Family::Race,
        Family::Kill,
        Family::KillDestroy,
        Family::Faults,
        Family::HandPower,
        Family::HandDelete,
        Family::HandProtection,
        Family::HandMark,
        Family::Cluster,
        Family::FreshDirectory,
        Family::SavedPlanElsewhere,
        Family::MovedUnder,
    ];
}

/// How an apply is run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ApplyMode {
    Plain,
    ReplaceSlot(usize),
    TargetSlot(usize),
    NoRefresh,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImportHow {
    Cli,
    Block,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillDuring {
    DuringApply,
    DuringDestroy,
}

/// Where a kill lands, counted over the command's PVE API requests: pve-sim holds the Nth
/// one and the world stands still there (`/_sim/hold`), so the point is the same whatever
/// the machine's load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillAt {
    /// Before request N is handled: PVE saw requests 1 to N-1.
    Request(u16),
    /// After request N is handled, before its answer arrives: the command cannot know
    /// whether it took effect.
    Answer(u16),
}

/// Which requests a fault hits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    CloneCall,
    ConfigWrite,
    StartCall,
    StopCall,
    DeleteCall,
    SeedUpload,
    ConfigRead,
    ListCall,
}

impl Endpoint {
    pub fn matcher(self) -> (Option<&'static str>, &'static str) {
        match self {
            Endpoint::CloneCall => (Some("POST"), "/clone$"),
            Endpoint::ConfigWrite => (Some("POST"), "/qemu/[0-9]+/config$"),
            Endpoint::StartCall => (Some("POST"), "/status/start$"),
            Endpoint::StopCall => (Some("POST"), "/status/stop$"),
            Endpoint::DeleteCall => (Some("DELETE"), "/qemu/[0-9]+$"),
            Endpoint::SeedUpload => (Some("POST"), "/upload$"),
            Endpoint::ConfigRead => (Some("GET"), "/qemu/[0-9]+/config$"),
            Endpoint::ListCall => (Some("GET"), "^/cluster/resources"),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FaultKind {
    /// HTTP 500 or 503, `count` times.
    Http5xx(Endpoint, u16, u8),
    /// The connection dropped before the request is handled, `count` times.
    Reset(Endpoint, u8),
    /// The request handled, its answer lost, `count` times.
    LostAnswer(Endpoint, u8),
    /// A `backup` lock on the VM a state holds for a slot, for tenths of a second.
    HeldLock(usize, usize, u8),
    /// The first `qmstart` or `qmclone` task fails.
    TaskFail(&'static str),
    /// Every guest refuses a clean shutdown: its qemu-ga blocks `guest-shutdown`, and
    /// without an agent answering it ignores ACPI (a reboot fails, a forced stop stops).
    DeafGuests,
}

/// What an operator does by hand through the PVE API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HandAct {
    StopVm,
    StartVm,
    DeleteVm,
    /// As [`HandAct::DeleteVm`], its destroy task held (pve-sim's `stalled_tasks`) in
    /// qemu-server's `lock: destroyed` phase, its disks freed, through the next step.
    DeleteVmStalled,
    ProtectOn,
    ProtectOff,
    /// The description replaced by the operator's own notes (the mark gone).
    EditMark,
    /// The description as it was before [`HandAct::EditMark`].
    RestoreMark,
}

/// A cluster's day (pve-sim's cluster support; see [`Family::Cluster`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterAct {
    /// `POST /nodes/{node}/qemu/{vmid}/migrate` to the next node.
    Migrate,
    /// `POST /cluster/ha/resources` for the VM.
    HaAdd,
    /// `POST /_sim/nodes/{node}/reboot` of the VM's node.
    NodeReboot,
    /// `POST /_sim/nodes/{node}/fail` of the VM's node.
    NodeFail,
    /// `POST /_sim/nodes/{node}/recover` of every failed node.
    NodeRecover,
}

/// One step of a sequence.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// The edits written to the state's configuration, then `terraform apply`.
    Apply(usize, Vec<Edit>, ApplyMode),
    /// A slot's disk set below the template's: the plan must refuse it before any write.
    ShrinkBelowTemplate(usize, usize),
    Taint(usize, usize),
    /// `terraform plan -out` of the state's configuration as it is.
    SavePlan(usize),
    /// The plan saved last in that state, applied (it may be stale by now).
    ApplySaved(usize),
    /// The plan saved last in that state, applied in a copy of its directory that has only
    /// the configuration, the state and the plan (no `.terraform/`); the copy is the state's
    /// directory from then on.
    ApplySavedElsewhere(usize),
    /// The state's directory is lost: its VMs live on without a state, and the same
    /// configuration is applied from a fresh directory.
    FreshDirectory(usize),
    /// `terraform state rm` of a slot, then `terraform apply`.
    StateRmThenApply(usize, usize),
    Destroy(usize),
    StateRm(usize, usize),
    /// The VM last removed from a state by `state rm` of this slot, imported into a state.
    Import(usize, usize, ImportHow),
    /// Both states apply at once.
    Race,
    /// The edits written, then the command killed where [`KillAt`] says (an edit gives an
    /// apply work to be killed in).
    Kill(usize, Vec<Edit>, KillDuring, KillAt),
    /// A fault in force for the next step only.
    Fault(FaultKind),
    Hand(usize, usize, HandAct),
    Cluster(usize, usize, ClusterAct),
    /// The edits written, then `terraform apply` in the state; at the apply's `at`th
    /// request (held there by pve-sim), an operator migrates the VM of the slot's name to
    /// the next node (`qm migrate`, online when it runs), and the apply goes on.
    MovedUnder(usize, usize, Vec<Edit>, u16),
}

impl Op {
    pub fn family(&self) -> Family {
        match self {
            Op::Apply(_, edits, mode) => apply_family(edits, *mode),
            Op::ShrinkBelowTemplate(..) => Family::ShrinkDisk,
            Op::Taint(..) => Family::Taint,
            Op::SavePlan(_) | Op::ApplySaved(_) => Family::SavedPlan,
            Op::Destroy(_) => Family::Destroy,
            Op::StateRm(..) | Op::Import(..) => Family::StateRmImport,
            Op::Race => Family::Race,
            Op::ApplySavedElsewhere(_) => Family::SavedPlanElsewhere,
            Op::FreshDirectory(_) => Family::FreshDirectory,
            Op::StateRmThenApply(..) => Family::StateRmImport,
            Op::Kill(_, _, KillDuring::DuringDestroy, _) => Family::KillDestroy,
            Op::Kill(..) => Family::Kill,
            Op::Fault(_) => Family::Faults,
            Op::Hand(_, _, HandAct::ProtectOn | HandAct::ProtectOff) => Family::HandProtection,
            Op::Hand(_, _, HandAct::EditMark | HandAct::RestoreMark) => Family::HandMark,
            Op::Hand(_, _, HandAct::DeleteVm | HandAct::DeleteVmStalled) => Family::HandDelete,
            Op::Hand(..) => Family::HandPower,
            Op::Cluster(..) => Family::Cluster,
            Op::MovedUnder(..) => Family::MovedUnder,
        }
    }

    /// Every family the op needs switched on (its own, and the second state's when it acts
    /// there).
    pub fn families(&self) -> Vec<Family> {
        let mut out = vec![self.family()];
        if let Op::Apply(_, edits, _) | Op::Kill(_, edits, ..) | Op::MovedUnder(_, _, edits, _) =
            self
        {
            for edit in edits {
                out.push(edit_family(*edit));
            }
        }
        if self.state().is_some_and(|s| s > 0) || matches!(self, Op::Race) {
            out.push(Family::SecondState);
        }
        out
    }

    /// The state the op acts in, if it acts in one.
    pub fn state(&self) -> Option<usize> {
        match self {
            Op::Apply(s, ..)
            | Op::ShrinkBelowTemplate(s, _)
            | Op::Taint(s, _)
            | Op::SavePlan(s)
            | Op::ApplySaved(s)
            | Op::Destroy(s)
            | Op::StateRm(s, _)
            | Op::Import(s, ..)
            | Op::Kill(s, ..)
            | Op::ApplySavedElsewhere(s)
            | Op::FreshDirectory(s)
            | Op::StateRmThenApply(s, _)
            | Op::MovedUnder(s, ..) => Some(*s),
            Op::Race | Op::Fault(_) | Op::Hand(..) | Op::Cluster(..) => None,
        }
    }
}

fn apply_family(edits: &[Edit], mode: ApplyMode) -> Family {
    match mode {
        ApplyMode::ReplaceSlot(_) => Family::Replace,
        ApplyMode::TargetSlot(_) => Family::Target,
        ApplyMode::NoRefresh => Family::NoRefresh,
        ApplyMode::Plain => edits.first().map_or(Family::Apply, |e| edit_family(*e)),
    }
}

fn edit_family(edit: Edit) -> Family {
    match edit {
        Edit::Present(..) => Family::Apply,
        Edit::Cores(..)
        | Edit::Memory(..)
        | Edit::Tags(..)
        | Edit::Started(..)
        | Edit::Reboot(..) => Family::InPlace,
        Edit::Template(..) | Edit::UserData(..) | Edit::Disk(..) => Family::Replacing,
        Edit::Cbd(_) => Family::CreateBeforeDestroy,
    }
}

/// Draws ops: a state and a slot picked at random, the second state only when its family is
/// on.
pub struct Gen<'a> {
    pub rng: fastrand::Rng,
    pub enabled: &'a dyn Fn(Family) -> bool,
}

impl Gen<'_> {
    fn state(&mut self) -> usize {
        if (self.enabled)(Family::SecondState) && self.rng.u8(0..6) == 0 {
            self.rng.usize(1..STATES)
        } else {
            0
        }
    }

    fn slot(&mut self) -> usize {
        self.rng.usize(0..DRAWN_SLOTS)
    }

    /// One op drawn from the table's enabled rows by weight.
    pub fn op(&mut self) -> Op {
        loop {
            let rows: Vec<&Row> = TABLE
                .iter()
                .filter(|(family, _, _)| (self.enabled)(*family))
                .collect();
            let total: u32 = rows.iter().map(|(_, weight, _)| weight).sum();
            let mut pick = self.rng.u32(0..total.max(1));
            for (_, weight, draw) in &rows {
                if pick < *weight {
                    let op = draw(self);
                    // An edit may belong to a family that is off (e.g. cbd on a replace).
                    if op.families().iter().all(|f| (self.enabled)(*f)) {
                        return op;
                    }
                    break;
                }
                pick -= weight;
            }
        }
    }

    fn edits(&mut self, family: Family) -> Vec<Edit> {
        let count = self.rng.usize(1..=2);
        (0..count).map(|_| self.edit(family)).collect()
    }

    fn edit(&mut self, family: Family) -> Edit {
        let slot = self.slot();
        let rng = &mut self.rng;
        match family {
            Family::InPlace => match rng.u8(0..4) {
                0 => Edit::Cores(slot, rng.u8(1..=3)),
                1 => Edit::Memory(slot, [512, 768, 1024][rng.usize(0..3)]),
                2 => Edit::Tags(slot, rng.bool()),
                _ => Edit::Started(slot, rng.u8(0..3) > 0),
            },
            Family::Replacing => match rng.u8(0..3) {
                0 => Edit::Template(slot, rng.u8(0..2)),
                1 => Edit::UserData(slot, rng.u8(0..5)),
                _ => Edit::Disk(slot, [5, 6, 8][rng.usize(0..3)]),
            },
            Family::CreateBeforeDestroy => Edit::Cbd(rng.bool()),
            _ => Edit::Present(slot, rng.u8(0..4) > 0),
        }
    }
}

/// A family, its weight, and how to draw one of its ops.
type Row = (Family, u32, fn(&mut Gen) -> Op);

const TABLE: &[Row] = &[
    (Family::Apply, 8, |g| {
        let s = g.state();
        let e = g.edits(Family::Apply);
        Op::Apply(s, e, ApplyMode::Plain)
    }),
    (Family::InPlace, 14, |g| {
        let s = g.state();
        let e = g.edits(Family::InPlace);
        Op::Apply(s, e, ApplyMode::Plain)
    }),
    (Family::Replacing, 6, |g| {
        let s = g.state();
        let e = g.edits(Family::Replacing);
        Op::Apply(s, e, ApplyMode::Plain)
    }),
    (Family::ShrinkDisk, 2, |g| {
        Op::ShrinkBelowTemplate(g.state(), g.slot())
    }),
    (Family::Replace, 4, |g| {
        let s = g.state();
        Op::Apply(s, vec![], ApplyMode::ReplaceSlot(g.slot()))
    }),
    (Family::Taint, 3, |g| Op::Taint(g.state(), g.slot())),
    (Family::CreateBeforeDestroy, 4, |g| {
        let s = g.state();
        let e = vec![g.edit(Family::CreateBeforeDestroy)];
        Op::Apply(s, e, ApplyMode::Plain)
    }),
    (Family::Target, 3, |g| {
        let s = g.state();
        Op::Apply(s, vec![], ApplyMode::TargetSlot(g.slot()))
    }),
    (Family::NoRefresh, 3, |g| {
        let s = g.state();
        let e = g.edits(Family::InPlace);
        Op::Apply(s, e, ApplyMode::NoRefresh)
    }),
    (Family::SavedPlan, 3, |g| Op::SavePlan(g.state())),
    (Family::SavedPlan, 3, |g| Op::ApplySaved(g.state())),
    (Family::Destroy, 4, |g| Op::Destroy(g.state())),
    (Family::FreshDirectory, 3, |g| Op::FreshDirectory(g.state())),
    (Family::SavedPlanElsewhere, 3, |g| {
        Op::ApplySavedElsewhere(g.state())
    }),
    (Family::StateRmImport, 2, |g| {
        Op::StateRmThenApply(g.state(), g.slot())
    }),
    (Family::StateRmImport, 3, |g| {
        Op::StateRm(g.state(), g.slot())
    }),
    (Family::StateRmImport, 4, |g| {
        let how = if g.rng.bool() {
            ImportHow::Cli
        } else {
            ImportHow::Block
        };
        Op::Import(g.state(), g.slot(), how)
    }),
    (Family::SecondState, 3, |g| {
        let e = g.edits(Family::Apply);
        Op::Apply(g.rng.usize(1..STATES), e, ApplyMode::Plain)
    }),
    // The second state lets go of the names as often as it takes them, so the first state
    // gets its own VMs back often enough to be checked strictly.
    (Family::SecondState, 3, |g| {
        Op::Destroy(g.rng.usize(1..STATES))
    }),
    (Family::Race, 3, |_| Op::Race),
    (Family::Kill, 4, |g| {
        let state = g.state();
        let family = [Family::InPlace, Family::Replacing][g.rng.usize(0..2)];
        let edits = g.edits(family);
        Op::Kill(state, edits, KillDuring::DuringApply, kill_at(g, 64))
    }),
    (Family::KillDestroy, 2, |g| {
        let state = g.state();
        Op::Kill(state, vec![], KillDuring::DuringDestroy, kill_at(g, 32))
    }),
    (Family::Faults, 8, |g| Op::Fault(fault(g))),
    (Family::HandPower, 4, |g| {
        let act = if g.rng.bool() {
            HandAct::StopVm
        } else {
            HandAct::StartVm
        };
        Op::Hand(g.state(), g.slot(), act)
    }),
    (Family::HandDelete, 2, |g| {
        let act = if g.rng.bool() {
            HandAct::DeleteVm
        } else {
            HandAct::DeleteVmStalled
        };
        Op::Hand(g.state(), g.slot(), act)
    }),
    (Family::HandProtection, 4, |g| {
        let act = if g.rng.bool() {
            HandAct::ProtectOn
        } else {
            HandAct::ProtectOff
        };
        Op::Hand(g.state(), g.slot(), act)
    }),
    (Family::HandMark, 3, |g| {
        let act = if g.rng.bool() {
            HandAct::EditMark
        } else {
            HandAct::RestoreMark
        };
        Op::Hand(g.state(), g.slot(), act)
    }),
    (Family::Cluster, 3, |g| {
        let acts = [
            ClusterAct::Migrate,
            ClusterAct::HaAdd,
            ClusterAct::NodeReboot,
            ClusterAct::NodeFail,
            ClusterAct::NodeRecover,
        ];
        let act = acts[g.rng.usize(0..acts.len())];
        Op::Cluster(g.state(), g.slot(), act)
    }),
    (Family::MovedUnder, 6, |g| {
        let (state, slot) = (g.state(), g.slot());
        let family = [Family::Apply, Family::InPlace, Family::Replacing][g.rng.usize(0..3)];
        let edits = g.edits(family);
        Op::MovedUnder(state, slot, edits, g.rng.u16(1..64))
    }),
];

fn fault(g: &mut Gen) -> FaultKind {
    let endpoints = [
        Endpoint::CloneCall,
        Endpoint::ConfigWrite,
        Endpoint::StartCall,
        Endpoint::StopCall,
        Endpoint::DeleteCall,
        Endpoint::SeedUpload,
        Endpoint::ConfigRead,
        Endpoint::ListCall,
    ];
    let endpoint = endpoints[g.rng.usize(0..endpoints.len())];
    let count = g.rng.u8(1..4);
    match g.rng.u8(0..6) {
        0 => FaultKind::Http5xx(endpoint, [500, 503][g.rng.usize(0..2)], count),
        1 => FaultKind::Reset(endpoint, count),
        2 => FaultKind::LostAnswer(endpoint, count),
        3 => FaultKind::HeldLock(g.state(), g.slot(), g.rng.u8(5..30)),
        4 => FaultKind::DeafGuests,
        _ => FaultKind::TaskFail(["qmstart", "qmclone"][g.rng.usize(0..2)]),
    }
}

/// A kill point among the first `up_to` requests, before a request or after its handling.
fn kill_at(g: &mut Gen, up_to: u16) -> KillAt {
    let n = g.rng.u16(1..up_to);
    if g.rng.bool() {
        KillAt::Request(n)
    } else {
        KillAt::Answer(n)
    }
}
