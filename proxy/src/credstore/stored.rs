//! What one credential-store entry holds: a secret value together with the hosts the user agreed
//! to send it to when storing it, and the one text form that carries both.
//!
//! Why the hosts travel with the value: the policy that binds a secret to hosts is partly written
//! by the project (a cloned repository's `fenzi.yaml`). Were the value stored alone, any project
//! could name a secret the user stored for another purpose and bind it to a host of its own. With
//! the hosts stored beside the value, a session uses a stored value only when every host its
//! policy binds the secret to is one the value was stored for (see `fenzi`'s `session` module).
//!
//! Entry text, one line: `fenzi:1 hosts=<pattern>,<pattern> <value>`. Host patterns are written
//! as the policy writes them (`HostPattern`'s `Display`), which never contains a space or a
//! comma. An entry without the `fenzi:` header was stored before fenzi kept hosts: it reads as a
//! value stored for no known host ([`StoredSecret::hosts`] is `None`).

use super::{SecretValue, StoreError};
use zeroize::Zeroizing;

const HEADER: &str = "fenzi:1 hosts=";

/// A stored value and the hosts it was stored for. Never printed: `Debug` shows the hosts (the
/// value's own `Debug` is redacted).
#[derive(Clone, Debug)]
pub struct StoredSecret {
    pub value: SecretValue,
    /// The host patterns the value may be sent to; `None` for an entry from before fenzi recorded
    /// them, which no session uses.
    pub hosts: Option<Vec<String>>,
}

impl StoredSecret {
    /// A value for `hosts` (each a host pattern as the policy writes it).
    pub fn new(value: SecretValue, hosts: Vec<String>) -> StoredSecret {
        StoredSecret {
            value,
            hosts: Some(hosts),
        }
    }

    /// The entry text. Host patterns with a space or comma cannot come from a policy; they are
    /// refused rather than written in a form that would read back differently.
    pub(crate) fn encode(&self, name: &str) -> Result<Zeroizing<Vec<u8>>, StoreError> {
        let hosts = self.hosts.as_deref().unwrap_or(&[]);
        if let Some(bad) = hosts
            .iter()
            .find(|h| h.is_empty() || h.contains([' ', ',']) || h.chars().any(char::is_control))
        {
            return Err(StoreError::InvalidHost {
                name: name.to_string(),
                host: bad.escape_debug().to_string(),
            });
        }
        let mut out = Zeroizing::new(Vec::with_capacity(
            HEADER.len()
                + hosts.iter().map(|h| h.len() + 1).sum::<usize>()
                + 1
                + self.value.as_bytes().len(),
        ));
        out.extend_from_slice(HEADER.as_bytes());
        out.extend_from_slice(hosts.join(",").as_bytes());
        out.push(b' ');
        out.extend_from_slice(self.value.as_bytes());
        Ok(out)
    }

    /// Reads entry text stored under `name`. The bytes are wiped on every path.
    pub(crate) fn decode(
        name: &str,
        entry: Zeroizing<Vec<u8>>,
    ) -> Result<StoredSecret, StoreError> {
        let Some(rest) = entry.strip_prefix(HEADER.as_bytes()) else {
            if entry.starts_with(b"fenzi:") {
                return Err(StoreError::Damaged {
                    name: name.to_string(),
                    what: "its header is not one this fenzi reads (stored by a newer fenzi?)",
                });
            }
            // Stored before fenzi recorded hosts.
            return Ok(StoredSecret {
                value: SecretValue::from_bytes(name, entry.to_vec())?,
                hosts: None,
            });
        };
        let Some(space) = rest.iter().position(|&b| b == b' ') else {
            return Err(StoreError::Damaged {
                name: name.to_string(),
                what: "its host list is not followed by a value",
            });
        };
        let Ok(list) = std::str::from_utf8(&rest[..space]) else {
            return Err(StoreError::Damaged {
                name: name.to_string(),
                what: "its host list is not UTF-8 text",
            });
        };
        let hosts: Vec<String> = if list.is_empty() {
            Vec::new()
        } else {
            list.split(',').map(str::to_string).collect()
        };
        if hosts.iter().any(|h| h.is_empty()) {
            return Err(StoreError::Damaged {
                name: name.to_string(),
                what: "its host list has an empty entry",
            });
        }
        let value = SecretValue::from_bytes(name, rest[space + 1..].to_vec())?;
        Ok(StoredSecret {
            value,
            hosts: Some(hosts),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(v: &str) -> SecretValue {
        SecretValue::new("T", Zeroizing::new(v.to_string())).unwrap()
    }

    fn round(s: &StoredSecret) -> StoredSecret {
        StoredSecret::decode("T", s.encode("T").unwrap()).unwrap()
    }

    #[test]
    fn value_and_hosts_read_back_as_written() {
        for hosts in [
            vec![],
            vec!["api.github.com".to_string()],
            vec![
                "*.example.com".to_string(),
                "x.com:8443".to_string(),
                "[::1]:8443".to_string(),
                "::1".to_string(),
            ],
        ] {
            // A value may hold spaces, commas, the header itself and TAB.
            for v in [
                "tok-123456",
                "a b,c fenzi:1 hosts=evil.com x",
                "tab\there-ok",
            ] {
                let back = round(&StoredSecret::new(value(v), hosts.clone()));
                assert_eq!(back.value.expose(), v);
                assert_eq!(back.hosts.as_deref(), Some(hosts.as_slice()));
            }
        }
    }

    #[test]
    fn an_entry_without_the_header_has_no_hosts() {
        let back = StoredSecret::decode("T", Zeroizing::new(b"legacy-value".to_vec())).unwrap();
        assert_eq!(back.value.expose(), "legacy-value");
        assert_eq!(back.hosts, None);
    }

    #[test]
    fn damaged_entries_are_refused_naming_the_secret_not_the_value() {
        for entry in [
            &b"fenzi:1 hosts=a.com"[..],
            b"fenzi:1 hosts=a.com,,b.com s3cr3t-value",
            b"fenzi:1 hosts=\xff s3cr3t-value",
            b"fenzi:2 hosts=a.com s3cr3t-value",
            b"fenzi:1 hosts=a.com short",
            b"fenzi:1 hosts=a.com s3cr3t\nvalue",
        ] {
            let e = StoredSecret::decode("MCP_X", Zeroizing::new(entry.to_vec())).unwrap_err();
            let text = format!("{e} {e:?}");
            assert!(text.contains("MCP_X"), "{text}");
            assert!(!text.contains("s3cr3t"), "{text}");
        }
    }

    #[test]
    fn host_patterns_that_would_read_back_differently_are_refused() {
        for bad in ["a.com b.com", "a.com,b.com", "", "a\nb"] {
            let s = StoredSecret::new(value("tok-123456"), vec![bad.to_string()]);
            assert!(s.encode("T").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn debug_shows_hosts_not_the_value() {
        let s = StoredSecret::new(value("s3cr3t-value"), vec!["a.com".into()]);
        let text = format!("{s:?}");
        assert!(text.contains("a.com") && !text.contains("s3cr3t"), "{text}");
    }
}
