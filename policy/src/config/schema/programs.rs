//! Reading `programs:` lists (DESIGN §17) on a `url` or `account` server, on a top-level `hosts`
//! entry written as a mapping, and on a secret. An item is `agent`, an absolute path, or
//! `{path: PATH, sha256: HEX}`; each item once; the list not empty. Whether a path lies where the
//! sandbox can write (and so needs `sha256`) depends on the session's allowlist, and is checked
//! by the caller with `programs::unpinned_writable` (the crate's).

use super::{Reader, child, index};
use crate::config::model::Located;
use crate::config::model::programs::{ProgramList, ProgramRef};
use crate::config::yaml::{Node, Value};

const ITEM_KEYS: &[&str] = &["path", "sha256"];
const PROGRAMS_HINT: &str = "list the programs that may use it: `agent` (the agent's own process), \
     an absolute path such as `/usr/bin/git`, or `{path: /opt/tool/bin/tool, sha256: HEX}` to pin \
     the program's content";
const SHA_HINT: &str = "the SHA-256 of the executable, 64 hex digits (`sha256sum PATH`)";

impl Reader {
    /// A `programs:` list at `key` (`key_node` is its key, for the list's place).
    pub(super) fn programs(
        &mut self,
        key_node: &Node,
        node: &Node,
        key: &str,
    ) -> Option<ProgramList> {
        let Value::Seq(items) = &node.value else {
            self.wrong_type(node, key, "a list of programs", PROGRAMS_HINT);
            return None;
        };
        if items.is_empty() {
            self.error(
                node,
                key,
                "`programs` is empty: nothing could use it",
                "remove the entry instead, or list the programs that may use it",
            );
            return None;
        }
        let mut ok = true;
        let mut out: Vec<Located<ProgramRef>> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let ikey = index(key, i);
            let Some(program) = self.program(item, &ikey) else {
                ok = false;
                continue;
            };
            if let Some(first) = out.iter().find(|p| p.value == program) {
                ok = false;
                let line = first.at.line;
                self.error(
                    item,
                    &ikey,
                    format!("`{program}` is listed twice (first at line {line})"),
                    "list each program once",
                );
                continue;
            }
            out.push(Located {
                value: program,
                at: self.at(item, &ikey),
            });
        }
        ok.then(|| ProgramList {
            items: out,
            origin: self.origin,
            at: self.at(key_node, key),
        })
    }

    fn program(&mut self, node: &Node, key: &str) -> Option<ProgramRef> {
        match &node.value {
            Value::Str(s) if s == "agent" => Some(ProgramRef::Agent),
            Value::Str(s) => self.program_path(node, key, s).map(ProgramRef::Path),
            Value::Map(_) => {
                let f = self.fields(node, key, ITEM_KEYS, "a program", PROGRAMS_HINT)?;
                let path = match f.get("path") {
                    None => {
                        self.error(node, key, "the program has no `path`", PROGRAMS_HINT);
                        None
                    }
                    Some((_, p)) => {
                        let pkey = child(key, "path");
                        let text = self.string(p, &pkey, "an absolute path", PROGRAMS_HINT)?;
                        self.program_path(p, &pkey, text)
                    }
                };
                let sha256 = match f.get("sha256") {
                    None => {
                        self.error(
                            node,
                            key,
                            "the program has no `sha256`",
                            "write a program without a hash as its path alone: `- /usr/bin/git`",
                        );
                        None
                    }
                    Some((_, h)) => {
                        let hkey = child(key, "sha256");
                        let text = self.string(h, &hkey, "64 hex digits", SHA_HINT)?;
                        if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
                            Some(text.to_ascii_lowercase())
                        } else {
                            self.error(h, &hkey, "not a SHA-256 (64 hex digits)", SHA_HINT);
                            None
                        }
                    }
                };
                Some(ProgramRef::Pinned {
                    path: path?,
                    sha256: sha256?,
                })
            }
            _ => {
                self.wrong_type(node, key, "a program", PROGRAMS_HINT);
                None
            }
        }
    }

    /// An absolute, normal path: `/`-rooted, no `.` or `..` components, no empty ones, no NUL;
    /// the executable is compared to it exactly, so only one spelling of a path can match.
    fn program_path(&mut self, node: &Node, key: &str, text: &str) -> Option<String> {
        let why = if !text.starts_with('/') {
            Some("a program is `agent` or an absolute path")
        } else if text.len() > 4096 || text.contains('\0') {
            Some("not a path")
        } else if text.ends_with('/')
            || text[1..]
                .split('/')
                .any(|c| c.is_empty() || c == "." || c == "..")
        {
            Some("write the path in its plain form: no `.`, `..`, `//` or trailing `/`")
        } else {
            None
        };
        match why {
            Some(why) => {
                self.error(node, key, format!("`{text}`: {why}"), PROGRAMS_HINT);
                None
            }
            None => Some(text.to_string()),
        }
    }
}
