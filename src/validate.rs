//! Checks on user input that need no API call, so bad input is refused at plan time,
//! before anything is written to the cluster. Each returns a sentence for the diagnostic.

use std::time::Duration;

/// An endpoint must be `https://host[:port]`; PVE's API serves nothing else.
pub fn endpoint(text: &str) -> Result<url::Url, String> {
    let parsed = url::Url::parse(text)
        .map_err(|e| format!("`{text}` is not a URL ({e}); write it as https://HOST:8006"))?;
    if parsed.scheme() != "https" {
        return Err(format!(
            "`{text}` must use https://: PVE's API is served over TLS only"
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(format!(
            "`{text}` has no host; write it as https://HOST:8006"
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err("the endpoint must not carry credentials; use api_token".into());
    }
    // PVE serves its API at /api2/json on the root of the host: any other path would only
    // produce 501s later.
    let path = parsed.path().trim_end_matches('/');
    if !path.is_empty() && path != "/api2/json" {
        return Err(format!(
            "`{text}` has the path `{}`; PVE's API is at the root of the host: write it as \
             https://HOST:8006 (optionally followed by /api2/json)",
            parsed.path()
        ));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!(
            "`{text}` has a query or fragment; write it as https://HOST:8006"
        ));
    }
    Ok(parsed)
}

/// A fleet name: empty (the default fleet), or up to 32 of `a-z 0-9 _ . -` starting with a
/// letter or digit. It becomes part of a PVE tag (`proxyvm.fleet.NAME`), and PVE stores tags
/// lower-cased, so upper case would never read back as written.
pub fn fleet(text: &str) -> Result<(), String> {
    if text.is_empty() {
        return Ok(());
    }
    let mut chars = text.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    let rest_ok =
        chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '.' | '-'));
    if first_ok && rest_ok && text.len() <= 32 {
        Ok(())
    } else {
        Err(format!(
            "`{text}` is not a fleet name: use up to 32 lower-case letters, digits, _ . - \
             (starting with a letter or digit), e.g. `lower(terraform.workspace)`"
        ))
    }
}

/// An API token `USER@REALM!TOKENID=SECRET`. The message never repeats the secret.
pub fn api_token(text: &str) -> Result<(), String> {
    const SHAPE: &str = "an API token looks like USER@REALM!TOKENID=SECRET, e.g. \
                         terraform@pve!provider=xxxxxxxx-xxxx-…";
    let Some((token_id, secret)) = text.rsplit_once('=') else {
        return Err(format!("the token has no `=SECRET` part; {SHAPE}"));
    };
    let Some((user, token_name)) = token_id.split_once('!') else {
        return Err(format!("the token id has no `!TOKENID` part; {SHAPE}"));
    };
    let Some((user_name, realm)) = user.split_once('@') else {
        return Err(format!("the user has no `@REALM` part; {SHAPE}"));
    };
    if user_name.is_empty() || realm.is_empty() {
        return Err(format!("the user or realm is empty; {SHAPE}"));
    }
    // PVE's token name rule: [A-Za-z][A-Za-z0-9.\-_]+
    let mut chars = token_name.chars();
    let name_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && token_name.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
    if !name_ok {
        return Err(format!(
            "the token name `{token_name}` must start with a letter and use letters, digits, . - \
             _; {SHAPE}"
        ));
    }
    if secret.trim().is_empty() {
        return Err(format!("the token secret is empty; {SHAPE}"));
    }
    if secret.chars().any(char::is_whitespace) {
        return Err("the token secret contains white space (a stray newline from a file?)".into());
    }
    Ok(())
}

/// PEM text holding one or more certificates.
pub fn ca_pem(text: &str) -> Result<(), String> {
    use rustls_pki_types::CertificateDer;
    use rustls_pki_types::pem::PemObject;
    let mut count = 0;
    for cert in CertificateDer::pem_slice_iter(text.as_bytes()) {
        cert.map_err(|e| format!("the CA is not valid PEM: {e}"))?;
        count += 1;
    }
    if count == 0 {
        return Err("the CA holds no `-----BEGIN CERTIFICATE-----` block".into());
    }
    Ok(())
}

/// A VM name as PVE's `dns-name` format accepts it, kept to one label so it is also a hostname.
pub fn vm_name(name: &str) -> Result<(), String> {
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.starts_with('-')
            && !label.ends_with('-')
    };
    if name.len() > 253 || !name.split('.').all(label_ok) {
        return Err(format!(
            "`{name}` is not a DNS name: use letters, digits and hyphens (not first or last), \
             labels of at most 63 characters joined by dots"
        ));
    }
    Ok(())
}

/// A node name as the configuration gives it: not empty.
pub fn node_name(node: &str) -> Result<(), String> {
    if node.trim().is_empty() {
        return Err(
            "the node name is empty: name the cluster node to create the VM on, e.g. \"pve1\""
                .into(),
        );
    }
    Ok(())
}

/// A template as the configuration names it (by name or VMID): not empty.
pub fn template_ref(template: &str) -> Result<(), String> {
    if template.trim().is_empty() {
        return Err("the template name or VMID is empty".into());
    }
    Ok(())
}

/// A bridge name as PVE accepts it for a NIC: a letter, then letters, digits, `_ . -`, at
/// most 15 characters (the kernel's interface name limit).
pub fn bridge(bridge: &str) -> Result<(), String> {
    let mut chars = bridge.chars();
    let ok = bridge.len() <= 15
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        return Ok(());
    }
    Err(format!(
        "`{bridge}` is not a bridge name (e.g. vmbr0): a letter, then letters, digits, _ . -, at \
         most 15 characters"
    ))
}

/// A MAC address as PVE stores it: six pairs of upper-case hex digits, unicast, not all
/// zero (PVE's `pve-qm-net` `macaddr`; a multicast MAC is refused by the kernel's bridge).
/// Upper case is asked for, not folded: Terraform keeps the written value, and PVE reads
/// it back upper case.
pub fn mac_address(mac: &str) -> Result<(), String> {
    let parts: Vec<&str> = mac.split(':').collect();
    let hex_pairs = parts.len() == 6
        && parts.iter().all(|p| {
            p.len() == 2
                && p.chars()
                    .all(|c| c.is_ascii_digit() || ('A'..='F').contains(&c))
        });
    if !hex_pairs {
        return Err(format!(
            "`{mac}` is not a MAC address as PVE stores it: six pairs of upper-case hex digits \
             separated by colons, e.g. BC:24:11:0A:00:01"
        ));
    }
    let first = u8::from_str_radix(parts[0], 16).unwrap_or(0);
    if first & 1 == 1 {
        return Err(format!(
            "`{mac}` is a multicast address: the first byte must be even"
        ));
    }
    if parts.iter().all(|p| *p == "00") {
        return Err("00:00:00:00:00:00 is not a MAC address a NIC may have".to_owned());
    }
    Ok(())
}

/// A positive duration (see [`duration`]): an operation's time limit.
pub fn positive_duration(text: &str) -> Result<Duration, String> {
    let limit = duration(text)?;
    if limit.is_zero() {
        return Err(format!(
            "`{text}` leaves no time at all; give the operation a positive duration like \"15m\""
        ));
    }
    Ok(limit)
}

/// Durations as Terraform users write them: `90s`, `15m`, `1h30m`.
pub fn duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("`{text}` is not a duration; write it like \"90s\", \"15m\" or \"1h30m\"");
    if text.is_empty() {
        return Err(bad());
    }
    let mut total = 0u64;
    let mut digits = String::new();
    for c in text.chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let unit = match c {
            'h' => 3600,
            'm' => 60,
            's' => 1,
            _ => return Err(bad()),
        };
        let n: u64 = digits.parse().map_err(|_| bad())?;
        total = total.saturating_add(n.saturating_mul(unit));
        digits.clear();
    }
    if !digits.is_empty() {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert!(endpoint("https://pve1.example:8006").is_ok());
        assert!(endpoint("https://10.0.0.1:8006/").is_ok());
        assert!(endpoint("http://pve1:8006").unwrap_err().contains("https"));
        assert!(endpoint("pve1:8006").is_err());
        assert!(
            endpoint("https://user:pw@pve1")
                .unwrap_err()
                .contains("credentials")
        );
        assert!(endpoint("not a url").unwrap_err().contains("not a URL"));
        assert!(endpoint("https://pve1:8006/api2/json").is_ok());
        assert!(endpoint("https://pve1:8006/api2/json/").is_ok());
        assert!(
            endpoint("https://pve1:8006/foo")
                .unwrap_err()
                .contains("path `/foo`")
        );
        assert!(endpoint("https://pve1:8006/?x=1").is_err());
    }

    #[test]
    fn fleets() {
        assert!(fleet("").is_ok());
        assert!(fleet("prod").is_ok());
        assert!(fleet("team-a.eu_1").is_ok());
        assert!(fleet("Prod").unwrap_err().contains("lower-case"));
        assert!(fleet("-x").is_err());
        assert!(fleet(&"a".repeat(33)).is_err());
    }

    #[test]
    fn tokens_and_no_secret_in_messages() {
        assert!(api_token("terraform@pve!provider=3f0e-11aa").is_ok());
        assert!(api_token("root@pam!tf_1.a-b=s3cr3t").is_ok());
        for bad in [
            "terraform@pve!provider",
            "terraform@pve=s3cr3t",
            "terraform!provider=s3cr3t",
            "@pve!provider=s3cr3t",
            "terraform@pve!1x=s3cr3t",
            "terraform@pve!provider=",
            "terraform@pve!provider=s3cr3t\n",
        ] {
            let err = api_token(bad).unwrap_err();
            assert!(!err.contains("s3cr3t"), "{err}");
        }
    }

    #[test]
    fn ca_pem_needs_a_certificate() {
        assert!(ca_pem("hello").unwrap_err().contains("BEGIN CERTIFICATE"));
        assert!(ca_pem("-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n").is_err());
    }

    #[test]
    fn names() {
        assert!(vm_name("edge-1").is_ok());
        assert!(vm_name("edge-1.example").is_ok());
        assert!(vm_name("-edge").is_err());
        assert!(vm_name("edge_1").is_err());
        assert!(vm_name("").is_err());
        assert!(vm_name(&"a".repeat(64)).is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(duration("15m").unwrap(), Duration::from_secs(900));
        assert_eq!(duration("1h30m").unwrap(), Duration::from_secs(5400));
        assert_eq!(duration("90s").unwrap(), Duration::from_secs(90));
        assert!(duration("15").is_err());
        assert!(duration("m").is_err());
        assert!(duration("1d").is_err());
        assert!(duration("").is_err());
    }
}

/// PVE's storage id rule (`pve-storage-id`): `[a-z][a-z0-9\-_.]*[a-z0-9]`.
pub fn storage_id(id: &str) -> Result<(), String> {
    let bytes = id.as_bytes();
    let ok = bytes.len() >= 2
        && bytes[0].is_ascii_lowercase()
        && bytes[bytes.len() - 1].is_ascii_lowercase() | bytes[bytes.len() - 1].is_ascii_digit()
        && bytes.iter().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_' | b'.')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{id}` is not a PVE storage id: lower-case letters, digits, - _ . starting with a \
             letter"
        ))
    }
}

#[cfg(test)]
mod storage_tests {
    #[test]
    fn storage_ids() {
        assert!(super::storage_id("local").is_ok());
        assert!(super::storage_id("proxy-seeds").is_ok());
        assert!(super::storage_id("Local").is_err());
        assert!(super::storage_id("a-").is_err());
    }

    #[test]
    fn mac_addresses_are_upper_case_unicast_pairs() {
        assert!(super::mac_address("BC:24:11:0A:00:01").is_ok());
        assert!(
            super::mac_address("bc:24:11:0a:00:01")
                .unwrap_err()
                .contains("upper-case")
        );
        assert!(super::mac_address("BC:24:11:0A:00").is_err());
        assert!(super::mac_address("BC-24-11-0A-00-01").is_err());
        assert!(
            super::mac_address("01:24:11:0A:00:01")
                .unwrap_err()
                .contains("multicast")
        );
        assert!(super::mac_address("00:00:00:00:00:00").is_err());
    }
}
