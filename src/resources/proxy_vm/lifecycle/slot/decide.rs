//! The VMID decision of a create, as a pure function of what the cluster holds for its fleet
//! and name (`probe` finds it, wherever it is): resume a VM, make a new one, or refuse. It
//! keeps invariant I2, one VM per fleet and name from any working directory: a finished VM
//! of the name that this directory neither resumes nor replaces refuses the create, whatever
//! its VMID. The plan's check and the create ask the same question here.

use crate::ownership::Phase;

/// A VM of this fleet and name (its mark says so), as this create sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub vmid: u32,
    pub node: String,
    pub phase: Phase,
    /// Its mark's create token.
    pub token: Option<String>,
    /// This working directory's own create that Terraform never stored: the journal names
    /// its token at this VMID with this very mark.
    pub own_unconfirmed: bool,
    /// A plan of this directory replaces it: its `create_before_destroy` predecessor.
    pub replaced: bool,
    /// Its mark's seed hash is what this create would seed under its token: resumed under
    /// that token, the seed it may have booted is this create's own.
    pub same_content: bool,
    /// Its place in the name's probe sequence (`None`: outside the provider's range).
    pub rank: Option<u32>,
}

/// What the cluster holds for the name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NameFacts {
    pub found: Vec<Found>,
    /// The configured `vmid`, when set: only a VM there can be resumed.
    pub explicit_vmid: Option<u32>,
}

/// Why a create of the name makes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// A finished VM of the name that is another state's (or a lost one's).
    AlreadyMade { vmid: u32, node: String },
    /// A VM of the name whose owner's destroy has begun: not shadowed while it is there.
    BeingDestroyed { vmid: u32, node: String },
}

/// The decision.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Work on the VM at `vmid`: under `token` when it is this directory's own create of
    /// the same content, else claimed with this create's token.
    Resume {
        vmid: u32,
        node: String,
        token: Option<String>,
    },
    /// Nothing of the name to resume: clone onto a free VMID (beside a predecessor).
    MakeNew,
    /// Make nothing; first remove `discard`, this directory's own unfinished creates of the
    /// name (they never served, and nothing else would ever finish or remove them).
    Refuse {
        refusal: Refusal,
        discard: Vec<Found>,
    },
    /// Remove `stale`, this directory's own finished create that Terraform never stored,
    /// made with other content than this create's (its guest booted that seed, and
    /// cloud-init reads a seed at an instance's first boot only), then decide again.
    Remake { stale: Found },
}

impl NameFacts {
    /// The found VMs, in the order a create meets them (probe rank, then VMID).
    fn in_order(&self) -> Vec<&Found> {
        let mut found: Vec<&Found> = self.found.iter().collect();
        found.sort_by_key(|f| (f.rank.unwrap_or(u32::MAX), f.vmid));
        found
    }

    /// Whether a create may work on the VM at `vmid`: anywhere, unless a `vmid` is set.
    fn may_resume_at(&self, vmid: u32) -> bool {
        self.explicit_vmid.is_none_or(|explicit| explicit == vmid)
    }

    /// The predecessor a replacement is made beside: replaced by this directory's plan, and
    /// not where the replacement must go (an explicit `vmid` it holds is taken).
    fn is_predecessor(&self, found: &Found) -> bool {
        found.replaced && self.explicit_vmid != Some(found.vmid)
    }
}

/// See the module doc. The rows, in order: a VM of the name being destroyed refuses; a
/// finished one not this directory's refuses (with the import hint), removing this
/// directory's own unfinished creates; this directory's own create Terraform never stored is
/// resumed, unless it finished with other content (then it is removed and made again); any
/// other unfinished create of the name is adopted; else a new VM is made.
pub fn decide(facts: &NameFacts) -> Decision {
    let ordered = facts.in_order();
    if let Some(dying) = ordered.iter().find(|f| f.phase == Phase::Deleting) {
        return refuse(
            facts,
            Refusal::BeingDestroyed {
                vmid: dying.vmid,
                node: dying.node.clone(),
            },
        );
    }
    let another_states = ordered
        .iter()
        .find(|f| f.phase == Phase::Done && !f.own_unconfirmed && !facts.is_predecessor(f));
    if let Some(made) = another_states {
        return refuse(
            facts,
            Refusal::AlreadyMade {
                vmid: made.vmid,
                node: made.node.clone(),
            },
        );
    }
    // A finished predecessor stays as it is (the replacement goes beside it); an unfinished
    // one that its destroy left (not provably this state's) is resumed like any other.
    let resumable = |f: &&&Found| {
        facts.may_resume_at(f.vmid) && !(facts.is_predecessor(f) && f.phase == Phase::Done)
    };
    if let Some(own) = ordered.iter().filter(resumable).find(|f| f.own_unconfirmed) {
        // Its guest booted its seed: re-seeded in place it would keep the old content
        // (fuzzer seed 38902).
        if own.phase == Phase::Done && !own.same_content {
            return Decision::Remake {
                stale: (*own).clone(),
            };
        }
        // It keeps its token (its mark and seed stay valid) when it seeds what this create
        // would; an unfinished one of other content is claimed with this create's token.
        return Decision::Resume {
            vmid: own.vmid,
            node: own.node.clone(),
            token: own.token.clone().filter(|_| own.same_content),
        };
    }
    let unfinished = ordered
        .iter()
        .filter(resumable)
        .find(|f| f.phase == Phase::Creating);
    match unfinished {
        Some(found) => Decision::Resume {
            vmid: found.vmid,
            node: found.node.clone(),
            token: None,
        },
        None => Decision::MakeNew,
    }
}

fn refuse(facts: &NameFacts, refusal: Refusal) -> Decision {
    let discard = facts
        .in_order()
        .into_iter()
        .filter(|f| f.own_unconfirmed && f.phase == Phase::Creating && !f.replaced)
        .cloned()
        .collect();
    Decision::Refuse { refusal, discard }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(vmid: u32, phase: Phase) -> Found {
        Found {
            vmid,
            node: format!("pve{}", vmid % 3 + 1),
            phase,
            token: Some(format!("t{vmid}")),
            own_unconfirmed: false,
            replaced: false,
            same_content: false,
            rank: Some(vmid - 100),
        }
    }

    fn facts(found: Vec<Found>) -> NameFacts {
        NameFacts {
            found,
            explicit_vmid: None,
        }
    }

    fn resume(found: &Found, token: Option<&str>) -> Decision {
        Decision::Resume {
            vmid: found.vmid,
            node: found.node.clone(),
            token: token.map(str::to_owned),
        }
    }

    fn already_made(found: &Found, discard: Vec<Found>) -> Decision {
        Decision::Refuse {
            refusal: Refusal::AlreadyMade {
                vmid: found.vmid,
                node: found.node.clone(),
            },
            discard,
        }
    }

    #[test]
    fn nothing_of_the_name_makes_a_new_vm() {
        assert_eq!(decide(&facts(vec![])), Decision::MakeNew);
    }

    /// #38: the VM a roll left beyond the name's base VMID refuses a fresh directory.
    #[test]
    fn a_finished_vm_of_another_state_refuses_wherever_it_is() {
        let far = vm(140, Phase::Done);
        assert_eq!(
            decide(&facts(vec![far.clone()])),
            already_made(&far, vec![])
        );
    }

    #[test]
    fn a_replacement_is_made_beside_its_predecessor_only() {
        let predecessor = Found {
            replaced: true,
            ..vm(100, Phase::Done)
        };
        assert_eq!(decide(&facts(vec![predecessor.clone()])), Decision::MakeNew);
        let other = vm(101, Phase::Done);
        assert_eq!(
            decide(&facts(vec![predecessor, other.clone()])),
            already_made(&other, vec![])
        );
    }

    #[test]
    fn an_explicit_vmid_held_by_the_predecessor_is_taken() {
        let predecessor = Found {
            replaced: true,
            ..vm(100, Phase::Done)
        };
        let explicit = NameFacts {
            found: vec![predecessor.clone()],
            explicit_vmid: Some(100),
        };
        assert_eq!(decide(&explicit), already_made(&predecessor, vec![]));
    }

    #[test]
    fn a_vm_being_destroyed_refuses_before_anything_else() {
        let dying = vm(105, Phase::Deleting);
        let own = Found {
            own_unconfirmed: true,
            ..vm(100, Phase::Creating)
        };
        assert_eq!(
            decide(&facts(vec![own.clone(), dying.clone()])),
            Decision::Refuse {
                refusal: Refusal::BeingDestroyed {
                    vmid: 105,
                    node: dying.node.clone()
                },
                discard: vec![own],
            }
        );
    }

    /// Seed 11150's shape: this directory's killed create beside another state's finished
    /// VM of the name: refused, and the killed one removed (I2 and I7 both kept).
    #[test]
    fn a_refusal_removes_this_directorys_own_unfinished_creates() {
        let theirs = vm(100, Phase::Done);
        let own = Found {
            own_unconfirmed: true,
            ..vm(101, Phase::Creating)
        };
        assert_eq!(
            decide(&facts(vec![theirs.clone(), own.clone()])),
            already_made(&theirs, vec![own])
        );
    }

    #[test]
    fn this_directorys_finished_create_is_resumed_under_its_token() {
        let own = Found {
            own_unconfirmed: true,
            same_content: true,
            ..vm(103, Phase::Done)
        };
        assert_eq!(
            decide(&facts(vec![own.clone()])),
            resume(&own, Some("t103"))
        );
    }

    /// Seed 38902: this directory's killed create finished with other content (the
    /// configuration's `user_data` changed since): its guest booted the old seed.
    #[test]
    fn this_directorys_finished_create_of_other_content_is_made_again() {
        let own = Found {
            own_unconfirmed: true,
            ..vm(103, Phase::Done)
        };
        assert_eq!(
            decide(&facts(vec![own.clone()])),
            Decision::Remake { stale: own }
        );
    }

    #[test]
    fn this_directorys_unfinished_create_keeps_its_token_only_for_the_same_content() {
        let own = Found {
            own_unconfirmed: true,
            ..vm(103, Phase::Creating)
        };
        assert_eq!(decide(&facts(vec![own.clone()])), resume(&own, None));
        let same = Found {
            same_content: true,
            ..own
        };
        assert_eq!(
            decide(&facts(vec![same.clone()])),
            resume(&same, Some("t103"))
        );
    }

    #[test]
    fn own_creates_come_before_other_unfinished_ones_then_probe_order() {
        let other = vm(100, Phase::Creating);
        let own = Found {
            own_unconfirmed: true,
            ..vm(107, Phase::Creating)
        };
        assert_eq!(
            decide(&facts(vec![other.clone(), own.clone()])),
            resume(&own, None)
        );
        let later = vm(104, Phase::Creating);
        assert_eq!(
            decide(&facts(vec![later, other.clone()])),
            resume(&other, None)
        );
    }

    /// A tainted, half-made VM its destroy left (the state could not prove it its own).
    #[test]
    fn an_unfinished_predecessor_is_resumed() {
        let predecessor = Found {
            replaced: true,
            ..vm(100, Phase::Creating)
        };
        assert_eq!(
            decide(&facts(vec![predecessor.clone()])),
            resume(&predecessor, None)
        );
    }

    #[test]
    fn a_roll_killed_after_its_new_vm_finished_resumes_the_new_vm() {
        let predecessor = Found {
            replaced: true,
            ..vm(100, Phase::Done)
        };
        let new = Found {
            own_unconfirmed: true,
            same_content: true,
            ..vm(101, Phase::Done)
        };
        assert_eq!(
            decide(&facts(vec![predecessor, new.clone()])),
            resume(&new, Some("t101"))
        );
    }

    #[test]
    fn with_an_explicit_vmid_only_a_vm_there_is_resumed() {
        let elsewhere = vm(100, Phase::Creating);
        let explicit = NameFacts {
            found: vec![elsewhere],
            explicit_vmid: Some(120),
        };
        assert_eq!(decide(&explicit), Decision::MakeNew);
        let there = vm(120, Phase::Creating);
        let explicit = NameFacts {
            found: vec![there.clone()],
            explicit_vmid: Some(120),
        };
        assert_eq!(decide(&explicit), resume(&there, None));
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn found() -> impl Strategy<Value = Found> {
            let phase = prop_oneof![
                Just(Phase::Creating),
                Just(Phase::Done),
                Just(Phase::Deleting)
            ];
            (
                100u32..110,
                phase,
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            )
                .prop_map(|(vmid, phase, own_unconfirmed, replaced, same_content)| {
                    Found {
                        vmid,
                        node: "pve1".into(),
                        phase,
                        token: Some(format!("t{vmid}")),
                        own_unconfirmed,
                        replaced,
                        same_content,
                        rank: Some(vmid - 100),
                    }
                })
        }

        fn facts() -> impl Strategy<Value = NameFacts> {
            let found = proptest::collection::vec(found(), 0..5).prop_map(|mut found| {
                // One VM per VMID, as a cluster holds them.
                found.sort_by_key(|f| f.vmid);
                found.dedup_by_key(|f| f.vmid);
                found
            });
            (found, proptest::option::of(100u32..110)).prop_map(|(found, explicit_vmid)| {
                NameFacts {
                    found,
                    explicit_vmid,
                }
            })
        }

        proptest! {
            /// I2 over every combination of what the cluster holds for a name: a finished VM
            /// that is neither this directory's own create nor the predecessor it replaces
            /// always refuses; nothing finished of another state is ever resumed; a resumed
            /// VM is one of the name's, at the configured VMID when one is set; a new VM is
            /// made only when nothing refuses and nothing unfinished can be resumed.
            #[test]
            fn the_decision_keeps_one_vm_per_name(facts in facts()) {
                let decision = decide(&facts);
                let refusing = facts.found.iter().any(|f| {
                    f.phase == Phase::Deleting
                        || (f.phase == Phase::Done
                            && !f.own_unconfirmed
                            && !(f.replaced && facts.explicit_vmid != Some(f.vmid)))
                });
                match &decision {
                    Decision::Refuse { discard, .. } => {
                        prop_assert!(refusing);
                        prop_assert!(discard.iter().all(|d| d.own_unconfirmed
                            && d.phase == Phase::Creating));
                    }
                    Decision::Resume { vmid, token, .. } => {
                        prop_assert!(!refusing);
                        let resumed = facts.found.iter().find(|f| f.vmid == *vmid).unwrap();
                        prop_assert!(facts.explicit_vmid.is_none_or(|e| e == *vmid));
                        // A finished VM is resumed only when its guest booted this
                        // create's content.
                        prop_assert!(resumed.phase == Phase::Creating
                            || (resumed.own_unconfirmed && resumed.same_content));
                        // A token is taken over only from this directory's own create of
                        // the same content.
                        prop_assert!(token.is_none()
                            || (resumed.own_unconfirmed && resumed.same_content));
                    }
                    Decision::Remake { stale } => {
                        // Only this directory's own finished create of other content.
                        prop_assert!(!refusing);
                        prop_assert!(facts.found.contains(stale));
                        prop_assert!(stale.own_unconfirmed && stale.phase == Phase::Done
                            && !stale.same_content);
                        prop_assert!(facts.explicit_vmid.is_none_or(|e| e == stale.vmid));
                    }
                    Decision::MakeNew => {
                        prop_assert!(!refusing);
                        let resumable = facts.found.iter().any(|f| {
                            f.phase == Phase::Creating
                                && facts.explicit_vmid.is_none_or(|e| e == f.vmid)
                        });
                        prop_assert!(!resumable);
                    }
                }
            }
        }
    }
}
