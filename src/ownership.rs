//! How a VM is recognised as ours.
//!
//! The mark lives in the description, because the clone call can set a description but not
//! tags: a VM is recognisable from the clone task's first config write. The tag is added in
//! the config step, for listings (`/cluster/resources` shows tags, not descriptions).

/// The tag every VM of ours carries.
pub const OWNER_TAG: &str = "proxyvm";

const MARK_HEADER: &str =
    "Proxy VM managed by Terraform (proxyvm/proxmox). Do not edit the lines below.";
const OWNER_PREFIX: &str = "proxyvm-owner: ";
const TEMPLATE_PREFIX: &str = "proxyvm-template: ";
const SEED_PREFIX: &str = "proxyvm-seed: ";

/// What the description records: whose VM it is, and what an import needs to rebuild the
/// configuration that made it (the template as written, the hash of the seed's content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    pub owner: String,
    pub template: Option<String>,
    pub seed_hash: Option<String>,
}

impl Mark {
    pub fn new(owner: &str, template: &str) -> Self {
        Self {
            owner: owner.to_owned(),
            template: Some(template.to_owned()),
            seed_hash: None,
        }
    }

    pub fn with_seed_hash(mut self, hash: &str) -> Self {
        self.seed_hash = Some(hash.to_owned());
        self
    }

    pub fn render(&self) -> String {
        let mut text = format!("{MARK_HEADER}\n{OWNER_PREFIX}{}", self.owner);
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
            template: field(TEMPLATE_PREFIX),
            seed_hash: field(SEED_PREFIX),
        })
    }
}

/// The description of a VM owned by `name` (no template or seed recorded).
pub fn description_for(name: &str) -> String {
    Mark {
        owner: name.to_owned(),
        template: None,
        seed_hash: None,
    }
    .render()
}

/// The resource name a description marks the VM as belonging to, if any.
pub fn owner_in(description: &str) -> Option<&str> {
    description
        .lines()
        .find_map(|line| line.trim_end().strip_prefix(OWNER_PREFIX))
        .map(str::trim)
        .filter(|owner| !owner.is_empty())
}

/// Who a VM at a VMID we want belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ownership {
    /// Carries our mark for this very name: adopt it.
    OursForThisName,
    /// Ours, but made for another resource name: never touch it.
    OursForAnotherName(String),
    /// No mark: a VM we must never touch.
    Foreign,
}

pub fn classify(description: Option<&str>, wanted_name: &str) -> Ownership {
    match description.and_then(owner_in) {
        Some(owner) if owner == wanted_name => Ownership::OursForThisName,
        Some(owner) => Ownership::OursForAnotherName(owner.to_owned()),
        None => Ownership::Foreign,
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

/// The tags a VM shows to the user: PVE's stored list without our own tag.
pub fn user_tags(stored: &str) -> Vec<String> {
    normalise_tags([stored])
        .into_iter()
        .filter(|t| t != OWNER_TAG)
        .collect()
}

/// The `tags` config value to write: the user's tags plus ours, as PVE would store them.
pub fn tags_to_write(user: &[String]) -> String {
    let mut all = normalise_tags(user.iter().map(String::as_str));
    all.push(OWNER_TAG.to_owned());
    all.sort();
    all.dedup();
    all.join(";")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mark_round_trips_and_survives_pve_trimming() {
        let description = description_for("edge-1");
        assert_eq!(owner_in(&description), Some("edge-1"));
        // PVE strips trailing whitespace and may add lines around it.
        let edited = format!("something\n{}  \n", description);
        assert_eq!(owner_in(edited.trim_end()), Some("edge-1"));
    }

    #[test]
    fn full_mark_round_trips() {
        let mark = Mark::new("edge-1", "debian-13-proxy").with_seed_hash("ab12");
        assert_eq!(Mark::parse(&mark.render()), Some(mark.clone()));
        assert_eq!(owner_in(&mark.render()), Some("edge-1"));
        assert_eq!(Mark::parse("no mark here"), None);
    }

    #[test]
    fn classifies_ours_others_and_foreign() {
        let mine = description_for("edge-1");
        assert_eq!(classify(Some(&mine), "edge-1"), Ownership::OursForThisName);
        assert_eq!(
            classify(Some(&mine), "edge-2"),
            Ownership::OursForAnotherName("edge-1".into())
        );
        assert_eq!(classify(Some("a web server"), "edge-1"), Ownership::Foreign);
        assert_eq!(classify(None, "edge-1"), Ownership::Foreign);
        assert_eq!(
            classify(Some("proxyvm-owner: "), "edge-1"),
            Ownership::Foreign
        );
    }

    #[test]
    fn tags_normalise_as_pve_stores_them() {
        assert_eq!(normalise_tags(["Proxy,b a"]), vec!["a", "b", "proxy"]);
        assert_eq!(user_tags("a;proxyvm;web"), vec!["a", "web"]);
        assert_eq!(tags_to_write(&["Web".into(), "a".into()]), "a;proxyvm;web");
        assert_eq!(tags_to_write(&[]), "proxyvm");
    }

    #[test]
    fn tag_rule_matches_pve() {
        assert!(check_tag("edge_1.a+b-c").is_ok());
        assert!(check_tag("_x").is_ok());
        assert!(check_tag("-x").is_err());
        assert!(check_tag("a b").is_err());
        assert!(check_tag("").is_err());
    }
}
