//! Reading `private:` lists: a top-level `hosts` item written as `{host: NAME, private: [RANGE]}`
//! and `private:` on a `url` server. Each range is checked on its own (a range, no host bits,
//! inside one internal block, no metadata address) and the entry as a whole (an exact name: not
//! an IP literal, which needs no ranges, and not a wildcard, under which anyone who can make a
//! subdomain resolve could reach the internal network).

use super::{Reader, child, index};
use crate::cidr::{Cidr, CidrError};
use crate::config::model::{Located, PrivateName};
use crate::config::yaml::{Node, Value};
use crate::host::{HostMatcher, HostPattern};

const HOST_KEYS: &[&str] = &["host", "private", "programs"];
const ENTRY_HINT: &str = "write `{host: registry.corp.example, private: [\"10.20.0.0/16\"]}` or \
     `{host: github.com, programs: [/usr/bin/git]}`";
const RANGES_HINT: &str = "list the internal ranges the name resolves to, e.g. \
     `private: [\"10.20.0.0/16\", \"fd12:3456::/48\"]`; a bare address means that one address";

impl Reader {
    /// A mapping in a host list. Only the top-level `hosts` list takes one; elsewhere (a local
    /// server's or a secret's hosts) a host is a string.
    pub(super) fn host_mapping(
        &mut self,
        node: &Node,
        key: &str,
        top_level: bool,
    ) -> Option<Located<HostPattern>> {
        if !top_level {
            self.error(
                node,
                key,
                "expected a host, found a mapping",
                "a host here is a string; `private` ranges and `programs` are named on a \
                 top-level `hosts` entry (and `private` on a `url` server)",
            );
            return None;
        }
        let f = self.fields(node, key, HOST_KEYS, "a host entry", ENTRY_HINT)?;
        let pattern = match f.get("host") {
            None => {
                self.error(node, key, "the host entry has no `host`", ENTRY_HINT);
                None
            }
            Some((_, h)) => {
                let hkey = child(key, "host");
                let text = self.string(h, &hkey, "a host", ENTRY_HINT)?;
                match HostPattern::parse(text) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        self.error(
                            h,
                            &hkey,
                            e.to_string(),
                            "a host is `name`, with `:port` if not 443",
                        );
                        None
                    }
                }
            }
        };
        match (f.get("private"), f.get("programs")) {
            (None, None) => self.error(
                node,
                key,
                "the host entry has neither `private` ranges nor `programs`",
                "write a host without them as a plain string: `- registry.corp.example`",
            ),
            (Some((pk, pv)), _) => {
                self.private_list(pk, pv, &child(key, "private"), pattern.as_ref())
            }
            (None, Some(_)) => {}
        }
        if let Some((pk, pv)) = f.get("programs")
            && let Some(list) = self.programs(pk, pv, &child(key, "programs"))
            && let Some(pattern) = &pattern
        {
            self.host_programs
                .push(crate::config::model::programs::HostPrograms {
                    pattern: pattern.clone(),
                    list,
                });
        }
        Some(Located {
            value: pattern?,
            at: self.at(node, key),
        })
    }

    /// A `private:` list for `pattern` (`None` when the host itself was wrong: the ranges are
    /// still checked). A valid list is added to the file's private names.
    pub(super) fn private_list(
        &mut self,
        key_node: &Node,
        node: &Node,
        key: &str,
        pattern: Option<&HostPattern>,
    ) {
        let mut ok = true;
        match pattern.map(|p| &p.matcher) {
            Some(HostMatcher::Suffix(_)) => {
                ok = false;
                self.error(
                    key_node,
                    key,
                    format!(
                        "`private` is not allowed on a wildcard host (`{}`)",
                        pattern.map(|p| p.to_string()).unwrap_or_default()
                    ),
                    "name each host exactly: under a wildcard, any name someone can point at an \
                     internal address would reach the internal network",
                );
            }
            Some(HostMatcher::Exact(h)) if h.ip().is_some() => {
                ok = false;
                self.error(
                    key_node,
                    key,
                    "`private` is not needed on an IP literal",
                    "an IP literal the policy names is reached whatever range it is in; remove \
                     `private`",
                );
            }
            _ => {}
        }
        let Value::Seq(items) = &node.value else {
            self.wrong_type(node, key, "a list of address ranges", RANGES_HINT);
            return;
        };
        if items.is_empty() {
            self.error(node, key, "`private` is empty", RANGES_HINT);
            return;
        }
        let mut ranges: Vec<Located<Cidr>> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let ikey = index(key, i);
            let Some(text) = self.string(item, &ikey, "an address range", RANGES_HINT) else {
                ok = false;
                continue;
            };
            let range = match Cidr::parse(text) {
                Ok(r) => r,
                Err(CidrError::Syntax(why)) => {
                    ok = false;
                    self.error(
                        item,
                        &ikey,
                        format!("not an address range: {why}"),
                        RANGES_HINT,
                    );
                    continue;
                }
                Err(CidrError::HostBits(meant)) => {
                    ok = false;
                    self.error(
                        item,
                        &ikey,
                        format!("`{text}` has host bits set"),
                        format!("write the range's network address: `{meant}`"),
                    );
                    continue;
                }
            };
            if let Err((message, hint)) = range.check_private() {
                ok = false;
                self.error(item, &ikey, message, hint);
                continue;
            }
            if let Some(first) = ranges.iter().find(|r| r.value == range) {
                ok = false;
                let line = first.at.line;
                self.error(
                    item,
                    &ikey,
                    format!("`{range}` is listed twice (first at line {line})"),
                    "list each range once",
                );
                continue;
            }
            ranges.push(Located {
                value: range,
                at: self.at(item, &ikey),
            });
        }
        if let (true, Some(pattern)) = (ok, pattern) {
            self.private.push(PrivateName {
                pattern: pattern.clone(),
                ranges,
                origin: self.origin,
                at: self.at(key_node, key),
            });
        }
    }
}
