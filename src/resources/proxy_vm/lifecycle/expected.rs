//! Whose VM a state expects at its VMID, and why a mark is not that.

use crate::ownership::Mark;

/// Whose VM a state expects at its VMID.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The state's name; `None` on import (any name).
    pub name: Option<&'a str>,
    pub fleet: &'a str,
    /// Which create attempt's VM it must be.
    pub token: ExpectedToken<'a>,
}

/// The create token a state expects in the VM's mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExpectedToken<'a> {
    /// Import: any VM of ours (it takes the token the mark has).
    Any,
    /// The VM made (or resumed) by the create with this token. A mark without any token
    /// still matches when it carries `proof`, the state's keyed seed hash (a value only the
    /// create's own mark or state holds): the mark was edited away and put back from the
    /// provider's warning, which leaves the token out.
    Is {
        token: &'a str,
        proof: Option<&'a str>,
    },
    /// A state without a create token: written before create tokens existed, or a tainted
    /// VM's, whose private data Terraform does not pass to the plan that replaces it (its
    /// `plan` treats a tainted object as a new one), so the destroy half gets none. A VM
    /// finished before tokens has no token in its mark, and nothing ever adds one, so a
    /// mark without a token matches; a mark with one matches only when it carries `proof`,
    /// the state's keyed seed hash (HMAC keyed with that very token: only that create's
    /// mark and state hold it). A same-name VM made since by another state never matches.
    MadeBeforeTokens { proof: Option<&'a str> },
}

impl<'a> ExpectedToken<'a> {
    /// What a state expects: its create token (private data), if any, with its
    /// `seed_hash`.
    pub fn of_state(token: Option<&'a str>, seed_hash: Option<&'a str>) -> Self {
        match token {
            Some(token) => ExpectedToken::Is {
                token,
                proof: seed_hash.filter(|h| !h.is_empty()),
            },
            None => ExpectedToken::MadeBeforeTokens {
                proof: seed_hash.filter(|h| !h.is_empty()),
            },
        }
    }
}

impl Expected<'_> {
    /// Why the VM's mark is not the expected one, or `None` when it is.
    pub fn mismatch(&self, mark: Option<&Mark>) -> Option<String> {
        let Some(mark) = mark else {
            return Some("it has no ownership mark of this provider".to_owned());
        };
        if let Some(name) = self.name
            && mark.owner != name
        {
            return Some(format!("its mark names `{}`", mark.owner));
        }
        if mark.fleet != self.fleet {
            return Some(format!(
                "it belongs to fleet `{}`, not `{}`",
                mark.fleet, self.fleet
            ));
        }
        match (self.token, mark.create_token.as_deref()) {
            (ExpectedToken::Any, _) | (ExpectedToken::MadeBeforeTokens { .. }, None) => None,
            (ExpectedToken::MadeBeforeTokens { proof: Some(proof) }, Some(_))
                if mark.seed_hash.as_deref() == Some(proof) =>
            {
                None
            }
            (ExpectedToken::Is { token, .. }, Some(found)) if token == found => None,
            (
                ExpectedToken::Is {
                    proof: Some(proof), ..
                },
                None,
            ) if mark.seed_hash.as_deref() == Some(proof) => None,
            (ExpectedToken::Is { .. }, Some(_)) => Some(
                "another create (from another state or a later apply) took it over from this \
                state's create"
                    .to_owned(),
            ),
            (ExpectedToken::Is { .. }, None) => Some(
                "its mark carries no create token, so it was not made by this state's \
                create"
                    .to_owned(),
            ),
            (ExpectedToken::MadeBeforeTokens { .. }, Some(_)) => Some(
                "it was created by a newer release of the provider than this state's VM (its mark \
                carries a create token), so it is another state's VM of the same name"
                    .to_owned(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ownership::Phase;

    fn mark(token: Option<&str>, seed_hash: Option<&str>) -> Mark {
        let mut mark = Mark::creating("edge-0", "", "t", "tpl").with_phase(Phase::Done);
        mark.create_token = token.map(str::to_owned);
        mark.seed_hash = seed_hash.map(str::to_owned);
        mark
    }

    fn expected(token: ExpectedToken<'_>) -> Expected<'_> {
        Expected {
            name: Some("edge-0"),
            fleet: "",
            token,
        }
    }

    #[test]
    fn a_state_from_before_tokens_matches_only_a_vm_from_before_tokens() {
        let state = expected(ExpectedToken::of_state(None, Some("h")));
        assert_eq!(state.mismatch(Some(&mark(None, Some("h")))), None);
        // A same-name VM made since, by another state: never this one's.
        assert!(
            state
                .mismatch(Some(&mark(Some("other"), Some("other-keyed"))))
                .is_some()
        );
        // A tainted VM's state (Terraform drops its private data when it plans the
        // replacement) proves its VM with the keyed seed hash the VM's mark carries.
        let tainted = expected(ExpectedToken::of_state(None, Some("keyed")));
        assert_eq!(
            tainted.mismatch(Some(&mark(Some("t"), Some("keyed")))),
            None
        );
        let drifted = expected(ExpectedToken::of_state(None, Some("")));
        assert!(drifted.mismatch(Some(&mark(Some("t"), Some("")))).is_some());
        assert!(state.mismatch(None).is_some());
    }

    #[test]
    fn a_state_with_a_token_matches_its_token_or_its_keyed_seed_hash() {
        let state = expected(ExpectedToken::of_state(Some("mine"), Some("keyed")));
        assert_eq!(
            state.mismatch(Some(&mark(Some("mine"), Some("keyed")))),
            None
        );
        let other = state.mismatch(Some(&mark(Some("theirs"), Some("keyed"))));
        assert!(
            other.is_some_and(|why| !why.contains("theirs")),
            "no token in messages"
        );
        // A mark put back without the token (as the warning prints it) still proves itself
        // with the keyed hash; without it, or with another hash, it does not.
        assert_eq!(state.mismatch(Some(&mark(None, Some("keyed")))), None);
        assert!(state.mismatch(Some(&mark(None, Some("guess")))).is_some());
        assert!(state.mismatch(Some(&mark(None, None))).is_some());
        // A state whose seed hash is empty (drift) proves nothing.
        let drifted = expected(ExpectedToken::of_state(Some("mine"), Some("")));
        assert!(drifted.mismatch(Some(&mark(None, Some("")))).is_some());
    }

    #[test]
    fn an_import_takes_any_token_but_not_another_fleet() {
        let import = Expected {
            name: None,
            fleet: "",
            token: ExpectedToken::Any,
        };
        assert_eq!(import.mismatch(Some(&mark(Some("any"), None))), None);
        let mut prod = mark(Some("any"), None);
        prod.fleet = "prod".into();
        assert!(import.mismatch(Some(&prod)).is_some());
    }
}
