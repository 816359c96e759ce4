//! Which programs inside the sandbox may use a destination or a secret (DESIGN §17): the model of a
//! `programs:` list, the decision over the processes that hold one connection's socket, and the
//! rule that a path the sandbox can write must be pinned by its content.
//!
//! A list is written on an MCP server entry, on a top-level `hosts` entry written as a mapping and
//! on a secret. Each item is `agent` (the process `fenzi run` starts for the command, and for an
//! agent whose launcher runs the real program as a child, that child), an absolute path (the
//! program's executable exactly, as seen inside the sandbox) or `{path, sha256}` (that path with
//! that content). Lists only narrow: an entry whose layers (team, machine, project) each wrote a
//! list admits a program only if every list does ([`ProgramRules`]), so a lower layer can never
//! widen an upper one's. A connection held by several processes is admitted only if all of them
//! are; one whose holders could not be told is never admitted (the proxy passes no holders).
//!
//! No I/O: the proxy finds the holders and hashes their executables; this decides.

pub use crate::config::model::programs::{HostPrograms, ProgramList, ProgramRef};
use crate::config::model::{Located, Origin};
use std::path::Path;

/// What an item of a list admits.
pub trait Admits {
    /// Whether `program` is this item.
    fn matches(&self, program: &ProgramFacts<'_>) -> bool;
}

impl Admits for ProgramRef {
    fn matches(&self, program: &ProgramFacts<'_>) -> bool {
        match self {
            ProgramRef::Agent => program.agent,
            ProgramRef::Path(path) => program.exe == path,
            ProgramRef::Pinned { path, sha256 } => program.exe == path && program.sha256 == sha256,
        }
    }
}

/// One process holding a connection's socket, as attribution found it: its executable as seen
/// inside the sandbox, the SHA-256 of what it runs, and whether it is the agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProgramFacts<'a> {
    pub exe: &'a str,
    pub sha256: &'a str,
    pub agent: bool,
}

/// What a destination or secret admits, compiled: every list its layers wrote (all must admit a
/// program), and whether the entry's own file wrote none, so that its default applies beside them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ProgramRules {
    /// `(key, items)` per list, outermost layer first.
    lists: Vec<(String, Vec<ProgramRef>)>,
    /// The default `[agent]` applies under `fenzi run --agent` (an MCP server whose own entry
    /// wrote no list).
    agent_by_default: bool,
}

/// Why a program was refused: the rule (the list's key, or the default) and which holder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgramRefusal {
    /// `mcp.linear.programs`, `hosts[2].programs`, `secrets.NPM_TOKEN.programs`, or
    /// `mcp.linear default programs [agent]`; `attribution` when the holders are unknown.
    pub rule: String,
    /// The index of the first holder refused (`None` when there were none to look at).
    pub holder: Option<usize>,
}

impl ProgramRules {
    /// The rules of an entry named `name` in records (`mcp.linear`), from the lists its layers
    /// wrote, in layer order; `agent_default` when the entry's kind defaults to `[agent]` under an
    /// agent (MCP servers) and its own file wrote no list.
    pub fn new(lists: &[ProgramList], entry_origin: Origin, agent_default: bool) -> ProgramRules {
        ProgramRules {
            lists: lists
                .iter()
                .map(|l| {
                    (
                        l.at.key.clone(),
                        l.items.iter().map(|i| i.value.clone()).collect(),
                    )
                })
                .collect(),
            agent_by_default: agent_default && !lists.iter().any(|l| l.origin == entry_origin),
        }
    }

    /// Whether anything restricts programs here (under `agent_mode`, the default too).
    pub fn restricts(&self, agent_mode: bool) -> bool {
        !self.lists.is_empty() || (agent_mode && self.agent_by_default)
    }

    /// The lists written, each with its key.
    pub fn lists(&self) -> impl Iterator<Item = (&str, &[ProgramRef])> {
        self.lists.iter().map(|(k, v)| (k.as_str(), v.as_slice()))
    }

    /// Decides for the processes `holders` holding one connection's socket, `entry` naming the
    /// entry for the default's rule (`mcp.linear`). `agent_mode`: the session runs an agent
    /// (`fenzi run --agent`), so an MCP server's default `[agent]` applies. No holders (the
    /// attribution failed) is a refusal wherever anything restricts.
    pub fn check(
        &self,
        entry: &str,
        holders: &[ProgramFacts<'_>],
        agent_mode: bool,
    ) -> Result<(), ProgramRefusal> {
        if !self.restricts(agent_mode) {
            return Ok(());
        }
        if holders.is_empty() {
            return Err(ProgramRefusal {
                rule: "attribution".to_string(),
                holder: None,
            });
        }
        if agent_mode
            && self.agent_by_default
            && let Some(i) = holders.iter().position(|h| !h.agent)
        {
            return Err(ProgramRefusal {
                rule: format!("{entry} default programs [agent]"),
                holder: Some(i),
            });
        }
        for (key, items) in &self.lists {
            if let Some(i) = holders
                .iter()
                .position(|h| !items.iter().any(|item| item.matches(h)))
            {
                return Err(ProgramRefusal {
                    rule: key.clone(),
                    holder: Some(i),
                });
            }
        }
        Ok(())
    }

    /// Adds the rules of `other` (another entry applying to the same connection): both must admit.
    pub fn and(&mut self, other: &ProgramRules) {
        self.lists.extend(other.lists.iter().cloned());
        self.agent_by_default |= other.agent_by_default;
    }
}

/// Every path item of `lists` that lies beneath one of `writable` (where the sandbox can write)
/// without a `sha256`: the program there is whatever the agent last wrote, so the path alone
/// says nothing. Each is an error naming the item.
pub fn unpinned_writable<'a>(
    lists: impl IntoIterator<Item = &'a ProgramList>,
    writable: &[&Path],
) -> Vec<&'a Located<ProgramRef>> {
    let mut out = Vec::new();
    for list in lists {
        for item in &list.items {
            if let ProgramRef::Path(path) = &item.value
                && writable
                    .iter()
                    .any(|root| Path::new(path).starts_with(root))
            {
                out.push(item);
            }
        }
    }
    out
}

/// The directories every sandbox can write whatever the project (`fenzi run`'s allowlist names
/// more: the project, the agent's state, the cache).
pub const ALWAYS_WRITABLE: &[&str] = &["/tmp", "/var/tmp", "/dev/shm", "/dev"];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::Location;
    use std::sync::Arc;

    fn at(key: &str) -> Location {
        Location {
            file: Arc::from("f.yaml"),
            line: 1,
            column: 1,
            key: key.to_string(),
        }
    }

    fn list(key: &str, origin: Origin, items: &[ProgramRef]) -> ProgramList {
        ProgramList {
            items: items
                .iter()
                .map(|i| Located {
                    value: i.clone(),
                    at: at(key),
                })
                .collect(),
            origin,
            at: at(key),
        }
    }

    const AGENT: ProgramFacts<'static> = ProgramFacts {
        exe: "/usr/bin/node",
        sha256: "aa",
        agent: true,
    };
    const CURL: ProgramFacts<'static> = ProgramFacts {
        exe: "/usr/bin/curl",
        sha256: "bb",
        agent: false,
    };
    const GIT: ProgramFacts<'static> = ProgramFacts {
        exe: "/usr/bin/git",
        sha256: "cc",
        agent: false,
    };

    fn path(p: &str) -> ProgramRef {
        ProgramRef::Path(p.to_string())
    }

    /// Table: (lists, agent default, agent mode, holders, expected refusal rule or None).
    #[test]
    fn table() {
        let git_only = [list(
            "hosts[0].programs",
            Origin::Machine,
            &[path("/usr/bin/git")],
        )];
        let agent_only = [list(
            "mcp.l.programs",
            Origin::Machine,
            &[ProgramRef::Agent],
        )];
        let pinned = [list(
            "secrets.T.programs",
            Origin::Machine,
            &[ProgramRef::Pinned {
                path: "/usr/bin/git".into(),
                sha256: "cc".into(),
            }],
        )];
        let wrong_pin = [list(
            "secrets.T.programs",
            Origin::Machine,
            &[ProgramRef::Pinned {
                path: "/usr/bin/git".into(),
                sha256: "dd".into(),
            }],
        )];
        let narrowed = [
            list(
                "mcp.l.programs",
                Origin::Machine,
                &[ProgramRef::Agent, path("/usr/bin/git")],
            ),
            list(
                "mcp.l.programs",
                Origin::Project,
                &[path("/usr/bin/git"), path("/usr/bin/curl")],
            ),
        ];
        let project_only = [list(
            "mcp.l.programs",
            Origin::Project,
            &[path("/usr/bin/curl")],
        )];
        type Case<'a> = (
            &'a [ProgramList],
            bool,
            bool,
            &'a [ProgramFacts<'a>],
            Option<&'a str>,
        );
        let cases: &[Case] = &[
            // Nothing written: an MCP server under an agent is [agent]; without one, anyone.
            (&[], true, true, &[AGENT], None),
            (
                &[],
                true,
                true,
                &[CURL],
                Some("mcp.l default programs [agent]"),
            ),
            (&[], true, false, &[CURL], None),
            (&[], false, true, &[CURL], None),
            // A list replaces the entry's own default.
            (&git_only, false, true, &[GIT], None),
            (&git_only, false, true, &[CURL], Some("hosts[0].programs")),
            (&agent_only, true, true, &[AGENT], None),
            (&agent_only, true, false, &[CURL], Some("mcp.l.programs")),
            // Several holders: all of them.
            (
                &agent_only,
                true,
                true,
                &[AGENT, CURL],
                Some("mcp.l.programs"),
            ),
            (&git_only, false, true, &[GIT, GIT], None),
            // Pinned content.
            (&pinned, false, true, &[GIT], None),
            (&wrong_pin, false, true, &[GIT], Some("secrets.T.programs")),
            // A lower layer's list narrows: both lists apply.
            (&narrowed, true, true, &[GIT], None),
            (&narrowed, true, true, &[CURL], Some("mcp.l.programs")),
            (&narrowed, true, true, &[AGENT], Some("mcp.l.programs")),
            // A project list on a machine server that wrote none: the machine's default stays.
            (
                &project_only,
                true,
                true,
                &[CURL],
                Some("mcp.l default programs [agent]"),
            ),
            // Unknown holders: refused wherever anything restricts.
            (&git_only, false, false, &[], Some("attribution")),
            (&[], true, true, &[], Some("attribution")),
            (&[], true, false, &[], None),
        ];
        for (i, (lists, default, agent_mode, holders, want)) in cases.iter().enumerate() {
            let rules = ProgramRules::new(lists, Origin::Machine, *default);
            let got = rules
                .check("mcp.l", holders, *agent_mode)
                .err()
                .map(|r| r.rule);
            assert_eq!(got.as_deref(), *want, "case {i}");
        }
    }

    #[test]
    fn a_writable_path_needs_a_pin() {
        let l = list(
            "mcp.l.programs",
            Origin::Project,
            &[
                path("/tmp/tool"),
                path("/usr/bin/git"),
                path("/home/u/proj/bin/x"),
                ProgramRef::Pinned {
                    path: "/tmp/pinned".into(),
                    sha256: "aa".into(),
                },
                ProgramRef::Agent,
                path("/tmpfoo/x"),
            ],
        );
        let roots = [Path::new("/tmp"), Path::new("/home/u/proj")];
        let bad: Vec<String> = unpinned_writable([&l], &roots)
            .into_iter()
            .map(|i| i.value.to_string())
            .collect();
        assert_eq!(bad, ["/tmp/tool", "/home/u/proj/bin/x"]);
    }
}
