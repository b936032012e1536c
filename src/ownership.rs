//! How a VM is recognised as ours.
//!
//! The mark lives in the description, because the clone call can set a description but not
//! tags: a VM is recognisable from the clone task's first config write. The tag is added in
//! the config step, for listings (`/cluster/resources` shows tags, not descriptions).

/// The tag every VM of ours carries.
pub const OWNER_TAG: &str = "proxyvm";

const MARK_HEADER: &str = "Proxy VM managed by Terraform (proxyvm/proxmox). Do not edit the next line.";
const OWNER_PREFIX: &str = "proxyvm-owner: ";

/// The description written in the clone call: it names the resource the VM belongs to.
pub fn description_for(name: &str) -> String {
    format!("{MARK_HEADER}\n{OWNER_PREFIX}{name}")
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
    fn classifies_ours_others_and_foreign() {
        let mine = description_for("edge-1");
        assert_eq!(classify(Some(&mine), "edge-1"), Ownership::OursForThisName);
        assert_eq!(
            classify(Some(&mine), "edge-2"),
            Ownership::OursForAnotherName("edge-1".into())
        );
        assert_eq!(classify(Some("a web server"), "edge-1"), Ownership::Foreign);
        assert_eq!(classify(None, "edge-1"), Ownership::Foreign);
        assert_eq!(classify(Some("proxyvm-owner: "), "edge-1"), Ownership::Foreign);
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
