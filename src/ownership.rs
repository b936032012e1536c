//! How a VM is recognised as ours.
//!
//! The mark lives in the description, because the clone call can set a description but not
//! tags: a VM is recognisable from the clone task's first config write. The tag is added in
//! the config step, for listings (`/cluster/resources` shows tags, not descriptions).

/// The tag every VM of ours carries.
pub const OWNER_TAG: &str = "proxyvm";
/// The prefix of the tag naming a VM's fleet (`proxyvm.fleet.prod`), so a listing tells
/// fleets apart without reading every VM's description. The default fleet has no such tag.
pub const FLEET_TAG_PREFIX: &str = "proxyvm.fleet.";

const MARK_HEADER: &str =
    "Proxy VM managed by Terraform (proxyvm/proxmox). Do not edit the lines below.";
const OWNER_PREFIX: &str = "proxyvm-owner: ";
const FLEET_PREFIX: &str = "proxyvm-fleet: ";
const PHASE_PREFIX: &str = "proxyvm-phase: ";
const CREATE_PREFIX: &str = "proxyvm-create: ";
const TEMPLATE_PREFIX: &str = "proxyvm-template: ";
const SEED_PREFIX: &str = "proxyvm-seed: ";

/// How far the create that made a VM got. Only an unfinished create may be resumed (adopted)
/// by another create; a finished VM belongs to whichever state holds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Written by the clone call and kept until the create's very last step.
    Creating,
    /// Written as the last step of a successful create. Marks from before phases existed
    /// count as finished: adopting them is exactly the takeover this rule prevents.
    Done,
    /// Written by a destroy before it stops and destroys the VM, conditional on the digest it
    /// read: a create never adopts a VM being destroyed.
    Deleting,
}

impl Phase {
    fn as_str(self) -> &'static str {
        match self {
            Phase::Creating => "creating",
            Phase::Done => "done",
            Phase::Deleting => "deleting",
        }
    }
}

/// What the description records: whose VM it is (name and fleet), how far its create got and
/// which create attempt owns it, and what an import needs to rebuild the configuration that
/// made it (the template as written, the hash of the seed's content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub owner: String,
    /// Empty for the default fleet (and for every mark written before fleets existed).
    pub fleet: String,
    pub phase: Phase,
    /// The random token of the create attempt that owns the VM: two creates resuming the same
    /// VM tell each other apart by it, and a state recognises the VM it made.
    pub create_token: Option<String>,
    pub template: Option<String>,
    pub seed_hash: Option<String>,
}

impl Mark {
    /// The mark of a create in progress.
    pub fn creating(owner: &str, fleet: &str, create_token: &str, template: &str) -> Self {
        Self {
            owner: owner.to_owned(),
            fleet: fleet.to_owned(),
            phase: Phase::Creating,
            create_token: Some(create_token.to_owned()),
            template: Some(template.to_owned()),
            seed_hash: None,
        }
    }

    pub fn with_seed_hash(mut self, hash: &str) -> Self {
        self.seed_hash = Some(hash.to_owned());
        self
    }

    pub fn with_phase(mut self, phase: Phase) -> Self {
        self.phase = phase;
        self
    }

    pub fn render(&self) -> String {
        let mut text = format!("{MARK_HEADER}\n{OWNER_PREFIX}{}", self.owner);
        if !self.fleet.is_empty() {
            text.push_str(&format!("\n{FLEET_PREFIX}{}", self.fleet));
        }
        text.push_str(&format!("\n{PHASE_PREFIX}{}", self.phase.as_str()));
        if let Some(token) = &self.create_token {
            text.push_str(&format!("\n{CREATE_PREFIX}{token}"));
        }
        if let Some(template) = &self.template {
            text.push_str(&format!("\n{TEMPLATE_PREFIX}{template}"));
        }
        if let Some(hash) = &self.seed_hash {
            text.push_str(&format!("\n{SEED_PREFIX}{hash}"));
        }
        text
    }

    pub fn parse(description: &str) -> Option<Self> {
        let field = |prefix: &str| {
            description
                .lines()
                .find_map(|line| line.trim_end().strip_prefix(prefix))
                .map(str::trim)
                .filter(|v| !v.is_empty())
                .map(str::to_owned)
        };
        Some(Self {
            owner: field(OWNER_PREFIX)?,
            fleet: field(FLEET_PREFIX).unwrap_or_default(),
            phase: match field(PHASE_PREFIX).as_deref() {
                Some("creating") => Phase::Creating,
                Some("deleting") => Phase::Deleting,
                _ => Phase::Done,
            },
            create_token: field(CREATE_PREFIX),
            template: field(TEMPLATE_PREFIX),
            seed_hash: field(SEED_PREFIX),
        })
    }

    /// Whether this mark names the VM of `name` in `fleet`.
    pub fn names(&self, name: &str, fleet: &str) -> bool {
        self.owner == name && self.fleet == fleet
    }
}

/// Who a VM at a VMID we want belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Carries our mark for this very name and fleet.
    OursForThisName(Box<Mark>),
    /// Ours, but made for another resource name or fleet: never touch it.
    OursForAnother(Box<Mark>),
    /// No mark: a VM we must never touch.
    Foreign,
}

pub fn classify(description: Option<&str>, wanted_name: &str, fleet: &str) -> Ownership {
    match description.and_then(Mark::parse) {
        Some(mark) if mark.names(wanted_name, fleet) => Ownership::OursForThisName(Box::new(mark)),
        Some(mark) => Ownership::OursForAnother(Box::new(mark)),
        None => Ownership::Foreign,
    }
}

/// A fresh random token for one create attempt.
pub fn new_create_token() -> String {
    format!("{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// How a fleet is named after a VM's name in messages (`edge-0 in fleet \`blue\``): nothing
/// for the default fleet.
pub fn in_fleet(fleet: &str) -> String {
    if fleet.is_empty() {
        String::new()
    } else {
        format!(" in fleet `{fleet}`")
    }
}

/// How a mark's owner is named in messages: the name, and the fleet when it has one.
pub fn describe_owner(mark: &Mark) -> String {
    if mark.fleet.is_empty() {
        format!("`{}`", mark.owner)
    } else {
        format!("`{}` of fleet `{}`", mark.owner, mark.fleet)
    }
}

/// PVE's tag normalisation (lower-cased, de-duplicated, sorted), so user tags compare as PVE
/// stores them and never show a perpetual diff.
pub fn normalise_tags<'a>(tags: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = tags
        .into_iter()
        .flat_map(|t| t.split([',', ';', ' ']))
        .filter(|t| !t.is_empty())
        .map(str::to_ascii_lowercase)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// PVE's tag rule `^[a-z0-9_][a-z0-9_\-\+\.]*$` (case-insensitive).
pub fn check_tag(tag: &str) -> Result<(), String> {
    let mut chars = tag.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+' | '.'));
    if first_ok && rest_ok {
        Ok(())
    } else {
        Err(format!(
            "`{tag}` is not a valid PVE tag: use letters, digits and _ - + . (not first: - + .)"
        ))
    }
}

/// Whether a tag is one the provider writes itself (never the user's).
pub fn is_own_tag(tag: &str) -> bool {
    tag == OWNER_TAG || tag.starts_with(FLEET_TAG_PREFIX)
}

/// The fleet a VM's stored tags name: `Some("")` for the default fleet, `None` when the VM
/// carries no tag of ours.
pub fn fleet_in_tags(stored: &str) -> Option<String> {
    let tags = normalise_tags([stored]);
    if !tags.iter().any(|t| t == OWNER_TAG) {
        return None;
    }
    Some(
        tags.iter()
            .find_map(|t| t.strip_prefix(FLEET_TAG_PREFIX))
            .unwrap_or_default()
            .to_owned(),
    )
}

/// The tags a VM shows to the user: PVE's stored list without our own tags.
pub fn user_tags(stored: &str) -> Vec<String> {
    normalise_tags([stored])
        .into_iter()
        .filter(|t| !is_own_tag(t))
        .collect()
}

/// The `tags` config value to write: the user's tags plus ours (and the fleet's), as PVE
/// would store them.
pub fn tags_to_write(user: &[String], fleet: &str) -> String {
    let mut all: Vec<String> = normalise_tags(user.iter().map(String::as_str))
        .into_iter()
        .filter(|t| !is_own_tag(t))
        .collect();
    all.push(OWNER_TAG.to_owned());
    if !fleet.is_empty() {
        all.push(format!("{FLEET_TAG_PREFIX}{fleet}"));
    }
    all.sort();
    all.dedup();
    all.join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_round_trips_and_survives_pve_trimming() {
        let mark = Mark::creating("edge-1", "", "t0k3n", "debian-13-proxy");
        // PVE strips trailing whitespace and may add lines around it.
        let edited = format!("something\n{}  \n", mark.render());
        assert_eq!(Mark::parse(edited.trim_end()), Some(mark));
    }

    #[test]
    fn full_mark_round_trips() {
        let mark = Mark::creating("edge-1", "prod", "abc", "debian-13-proxy")
            .with_seed_hash("ab12")
            .with_phase(Phase::Done);
        assert_eq!(Mark::parse(&mark.render()), Some(mark.clone()));
        assert!(mark.render().contains("proxyvm-fleet: prod"));
        assert_eq!(Mark::parse("no mark here"), None);
        let deleting = mark.clone().with_phase(Phase::Deleting);
        assert_eq!(Mark::parse(&deleting.render()), Some(deleting.clone()));
        assert!(deleting.render().contains("proxyvm-phase: deleting"));
    }

    #[test]
    fn a_mark_from_before_phases_and_fleets_counts_as_finished_in_the_default_fleet() {
        let old = "Proxy VM managed by Terraform (proxyvm/proxmox). Do not edit the lines \
            below.\nproxyvm-owner: edge-1\nproxyvm-template: debian-13-proxy";
        let mark = Mark::parse(old).unwrap();
        assert_eq!(mark.phase, Phase::Done);
        assert_eq!(mark.fleet, "");
        assert_eq!(mark.create_token, None);
        assert!(mark.names("edge-1", ""));
        assert!(!mark.names("edge-1", "prod"));
    }

    #[test]
    fn classifies_ours_others_and_foreign() {
        let mine = Mark::creating("edge-1", "", "t", "tpl").render();
        assert!(matches!(
            classify(Some(&mine), "edge-1", ""),
            Ownership::OursForThisName(m) if m.phase == Phase::Creating
        ));
        assert!(matches!(
            classify(Some(&mine), "edge-2", ""),
            Ownership::OursForAnother(m) if m.owner == "edge-1"
        ));
        assert!(matches!(
            classify(Some(&mine), "edge-1", "prod"),
            Ownership::OursForAnother(_)
        ));
        assert_eq!(
            classify(Some("a web server"), "edge-1", ""),
            Ownership::Foreign
        );
        assert_eq!(classify(None, "edge-1", ""), Ownership::Foreign);
        assert_eq!(
            classify(Some("proxyvm-owner: "), "edge-1", ""),
            Ownership::Foreign
        );
    }

    #[test]
    fn create_tokens_differ() {
        assert_ne!(new_create_token(), new_create_token());
        assert_eq!(new_create_token().len(), 32);
    }

    #[test]
    fn tags_normalise_as_pve_stores_them() {
        assert_eq!(normalise_tags(["Proxy,b a"]), vec!["a", "b", "proxy"]);
        assert_eq!(user_tags("a;proxyvm;web"), vec!["a", "web"]);
        assert_eq!(
            tags_to_write(&["Web".into(), "a".into()], ""),
            "a;proxyvm;web"
        );
        assert_eq!(tags_to_write(&[], ""), "proxyvm");
        assert_eq!(
            tags_to_write(&["a".into()], "prod"),
            "a;proxyvm;proxyvm.fleet.prod"
        );
        assert_eq!(user_tags("a;proxyvm;proxyvm.fleet.prod"), vec!["a"]);
        assert_eq!(
            fleet_in_tags("a;proxyvm;proxyvm.fleet.prod").as_deref(),
            Some("prod")
        );
        assert_eq!(fleet_in_tags("proxyvm").as_deref(), Some(""));
        assert_eq!(fleet_in_tags("a;b"), None);
    }

    #[test]
    fn tag_rule_matches_pve() {
        assert!(check_tag("edge_1.a+b-c").is_ok());
        assert!(check_tag("_x").is_ok());
        assert!(check_tag("-x").is_err());
        assert!(check_tag("a b").is_err());
        assert!(check_tag("").is_err());
    }

    mod properties {
        use super::super::*;
        use proptest::prelude::*;

        fn phase() -> impl Strategy<Value = Phase> {
            prop_oneof![
                Just(Phase::Creating),
                Just(Phase::Done),
                Just(Phase::Deleting)
            ]
        }

        proptest! {
            /// Every mark reads back as written, after whatever notes an operator keeps
            /// above it, and names exactly its own name and fleet.
            #[test]
            fn a_mark_reads_back_as_written(
                owner in "[a-z][a-z0-9-]{0,30}",
                fleet in "([a-z][a-z0-9-]{0,12})?",
                phase in phase(),
                token in proptest::option::of("[0-9a-f]{32}"),
                template in proptest::option::of("[a-z0-9][a-z0-9.-]{0,20}"),
                seed_hash in proptest::option::of("[0-9a-f]{64}"),
                notes in "([A-Za-z ,.]{0,30}\n){0,3}",
            ) {
                let mark = Mark {
                    owner: owner.clone(),
                    fleet: fleet.clone(),
                    phase,
                    create_token: token,
                    template,
                    seed_hash,
                };
                let described = format!("{notes}{}", mark.render());
                prop_assert_eq!(Mark::parse(&described), Some(mark.clone()));
                prop_assert!(mark.names(&owner, &fleet));
                let another = format!("{owner}x");
                prop_assert!(!mark.names(&another, &fleet));
            }
        }
    }
}
