//! PVE's patterns are Perl regexes applied as `m/^PATTERN$/`. This turns them into
//! `regex` crate syntax with Perl's semantics kept where they differ.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use regex::Regex;

/// Whether `value` matches Perl's `m/^PATTERN$/` (note: no group around PATTERN, so a
/// top-level `a|b` anchors only its outer ends, exactly as in Perl).
pub(crate) fn perl_anchored_match(pattern: &'static str, value: &str) -> bool {
    // Every pattern is ours; a failing one is caught by `every_rule_pattern_compiles`.
    compiled(pattern).is_some_and(|re| re.is_match(value))
}

/// Compiled patterns are cached forever; the set is finite because every pattern is a
/// `&'static str` from our rules.
pub(crate) fn compiled(pattern: &'static str) -> Option<&'static Regex> {
    static CACHE: OnceLock<Mutex<HashMap<&'static str, Option<&'static Regex>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let mut cache = cache
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    *cache.entry(pattern).or_insert_with(|| {
        let translated = translate(&format!("^{pattern}$"));
        Regex::new(&translated)
            .ok()
            .map(|re| &*Box::leak(Box::new(re)))
    })
}

/// Translates the Perl constructs PVE's patterns use:
/// - `(?^:` (a stringified `qr//`) becomes `(?:`;
/// - `{,n}` (Perl ≥ 5.34: `{0,n}`) becomes `{0,n}`;
/// - `$` outside a class becomes `\n?\z`, since Perl's `$` also matches before a final newline.
pub(crate) fn translate(perl: &str) -> String {
    let mut out = String::with_capacity(perl.len() + 8);
    let chars: Vec<char> = perl.chars().collect();
    let mut i = 0;
    let mut in_class = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '\\' {
            out.push(c);
            if let Some(&next) = chars.get(i + 1) {
                out.push(next);
            }
            i += 2;
            continue;
        }
        if in_class {
            if c == ']' {
                in_class = false;
            }
            out.push(c);
            i += 1;
            continue;
        }
        match c {
            '[' => {
                in_class = true;
                out.push(c);
                // A `]` or `^]` right after `[` is literal.
                if chars.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
                if chars.get(i + 1) == Some(&']') {
                    out.push_str("\\]");
                    i += 1;
                }
            }
            '(' if chars.get(i + 1) == Some(&'?') && chars.get(i + 2) == Some(&'^') => {
                out.push_str("(?");
                i += 2;
            }
            '{' if chars.get(i + 1) == Some(&',') => out.push_str("{0"),
            '$' => out.push_str("\\n?\\z"),
            _ => out.push(c),
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translates_perl_only_constructs() {
        assert_eq!(translate("(?^:a)"), "(?:a)");
        assert_eq!(translate("[A-Z]{,8}"), "[A-Z]{0,8}");
        assert_eq!(translate("^a$"), "^a\\n?\\z");
        assert_eq!(translate("[$]"), "[$]");
        assert_eq!(translate("\\$"), "\\$");
    }

    #[test]
    fn anchors_like_perl() {
        // `^/dev/parport\d+|/dev/usb/lp\d+$`: each alternative anchored on one side only.
        let p = "/dev/parport\\d+|/dev/usb/lp\\d+";
        assert!(perl_anchored_match(p, "/dev/parport0"));
        assert!(perl_anchored_match(p, "/dev/parport0junk"));
        assert!(perl_anchored_match(p, "junk/dev/usb/lp1"));
        assert!(!perl_anchored_match(p, "/dev/sda"));
        // Perl's `$` accepts one trailing newline.
        assert!(perl_anchored_match("\\d+", "12\n"));
        assert!(!perl_anchored_match("\\d+", "12\n\n"));
        let userid = concat!(
            "(?^:^(?^:[^\\s:/]+)\\@(?^:[A-Za-z][A-Za-z0-9\\.\\-_]+)",
            "(?:!(?^:[A-Za-z][A-Za-z0-9\\.\\-_]+))?$)",
        );
        assert!(perl_anchored_match(userid, "terraform@pve!prov"));
        assert!(!perl_anchored_match(userid, "terraform"));
        assert!(perl_anchored_match(
            "[A-Za-z0-9\\-_\\s]{,16}",
            "QEMU HARDDISK"
        ));
        assert!(!perl_anchored_match(
            "[A-Za-z0-9\\-_\\s]{,16}",
            "abcdefghijklmnopq"
        ));
    }
}
