//! What `fenzi approve` does with one denied (server, tool) pair, decided against the policy as it
//! is now (machine file and project file merged), and the checked edit that carries it out.
//!
//! - A name outside the plain MCP charset (a glob, a space, anything `*`) is refused: approve
//!   adds exact names only.
//! - A tool a `deny` pattern matches is refused: that was a choice, approve does not undo it.
//! - A tool an `allow` pattern already matches needs nothing.
//! - Otherwise the name goes into the `allow` of the file that declares the server: the project
//!   file for a project server, the machine file for a machine server. A machine server the
//!   project narrows is enforced with the project's `allow`, so the name goes there, but only
//!   when the machine file allows it already (a project may only narrow); else it is refused,
//!   naming the machine file as the one to change first. A project file never widens a machine
//!   server.
//!
//! The edit ([`super::allow_edit`]) is checked before it is written: the edited file parses on
//! its own; its YAML, read whole, is the old one with exactly this name appended to exactly this
//! server's `tools.allow`; the loader reads that `allow` as the old one plus this exact name; and
//! the two files still load together and now allow the call. Then it is written atomically
//! ([`crate::commands::mcp::files::write_atomic`]), unless the file changed meanwhile.

use super::allow_edit;
use crate::commands::log::render::field;
use crate::commands::mcp::files::{Files, PolicyFile, parse_one, write_atomic};
use anyhow::{Result, anyhow, bail};
use fenzi_policy::ToolDenial;
use fenzi_policy::config::{Config, Located, Origin, ServerKind, ToolRules};
use fenzi_policy::mcp::teach::recorded_tool_denial;
use fenzi_policy::tool_pattern::{ToolPattern, is_plain_tool_name};
use std::collections::BTreeSet;

/// What to do with one pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Add the name to the server's `allow` in the file of this origin; `note` says more.
    Add {
        origin: Origin,
        file: String,
        note: Option<String>,
    },
    /// Already allowed: nothing to write.
    Nothing(String),
    /// Approve will not do it, and why.
    Refused(String),
}

/// Every kind of server is checked per tool: a command server behind fenzi's bridge like a
/// remote one (DESIGN §18), so approve adds to its `allow` alike.
fn tools(kind: &ServerKind) -> &ToolRules {
    match kind {
        ServerKind::Remote { tools, .. }
        | ServerKind::Account { tools, .. }
        | ServerKind::Local { tools, .. } => tools,
    }
}

fn matching<'a>(
    patterns: &'a [Located<ToolPattern>],
    tool: &str,
) -> Option<&'a Located<ToolPattern>> {
    patterns.iter().find(|p| p.value.matches(tool))
}

fn at(p: &Located<ToolPattern>) -> String {
    format!("{}:{}", p.at.file, p.at.line)
}

fn file_of(files: &Files, origin: Origin) -> String {
    match origin {
        Origin::Machine => files.machine.as_ref().map(|m| m.name()).unwrap_or_default(),
        Origin::Project => files.project.name(),
        Origin::Team => "the team policy".into(),
    }
}

/// Decides what to do with `server`/`tool` under `config` (the merged policy of `files`);
/// `rules` are the rules that denied it in the session.
pub fn plan(
    files: &Files,
    config: &Config,
    server: &str,
    tool: &str,
    rules: &BTreeSet<String>,
) -> Result<Plan> {
    let shown = field(tool);
    if !is_plain_tool_name(tool) {
        return Ok(Plan::Refused(format!(
            "{shown} is not a plain tool name (letters, digits, `_`, `.`, `-`, at most 128): \
             approve adds exact names only, never a glob or a pattern; edit the policy by hand if \
             you mean it"
        )));
    }
    let Some(entry) = config.mcp.iter().find(|s| s.name == server) else {
        let names: Vec<&str> = config.mcp.iter().map(|s| s.name.as_str()).collect();
        return Ok(Plan::Refused(format!(
            "the policy has no MCP server named {} (servers: {})",
            field(server),
            if names.is_empty() {
                "none".to_string()
            } else {
                names.join(", ")
            }
        )));
    };
    let merged = tools(&entry.kind);
    if let Some(p) = matching(&merged.deny, tool) {
        return Ok(Plan::Refused(format!(
            "{tool} is denied by mcp.{server}.tools.deny {:?} ({}): that was a choice, and \
             approve does not undo it; take it out of `deny` by hand if you mean to allow it",
            p.value.as_str(),
            at(p)
        )));
    }
    if let Some(p) = matching(&merged.allow, tool) {
        let other: Vec<&str> = rules
            .iter()
            .filter(|r| {
                !matches!(recorded_tool_denial(r), Some(ToolDenial::NotAllowed { server: s }) if s == server)
            })
            .map(String::as_str)
            .collect();
        let why = if other.is_empty() {
            String::new()
        } else {
            format!(
                " (the session's denial was by {}, which approve does not change)",
                other.join(", ")
            )
        };
        return Ok(Plan::Nothing(format!(
            "{tool} is already allowed by mcp.{server}.tools.allow {:?} ({}); nothing to do{why}",
            p.value.as_str(),
            at(p)
        )));
    }
    let pin_note = entry.surface.pin.then(|| {
        format!(
            "{server} is pinned: if {tool} is not in its lock yet, review it with `fenzi mcp pin \
             {server}`"
        )
    });
    if entry.origin == Origin::Team {
        // `fenzi approve` loads no team policy; kept so that one never gets an edit here.
        return Err(anyhow!(
            "{server} is declared in the team policy: a tool is allowed there, by whoever signs it"
        ));
    }
    if entry.origin == Origin::Project {
        return Ok(Plan::Add {
            origin: Origin::Project,
            file: files.project.name(),
            note: pin_note,
        });
    }
    let machine_file = file_of(files, Origin::Machine);
    if !entry.narrowed_by_project {
        let note = format!(
            "{server} is declared in the machine file, so the name goes there (every project on \
             this machine gets it)"
        );
        return Ok(Plan::Add {
            origin: Origin::Machine,
            file: machine_file,
            note: Some(match pin_note {
                Some(p) => format!("{note}; {p}"),
                None => note,
            }),
        });
    }
    // Narrowed by the project: its allow is the one in force, and it may hold only what the
    // machine file allows.
    let machine = files
        .machine
        .as_ref()
        .ok_or_else(|| anyhow!("{server} is a machine server but no machine file was read"))?;
    let machine_config =
        parse_one(machine.text.as_deref().unwrap_or(""), machine).map_err(|e| anyhow!("{e}"))?;
    let machine_allows = machine_config
        .mcp
        .iter()
        .find(|s| s.name == server)
        .map(|s| tools(&s.kind))
        .is_some_and(|t| matching(&t.allow, tool).is_some() && matching(&t.deny, tool).is_none());
    let project = files.project.name();
    if !machine_allows {
        return Ok(Plan::Refused(format!(
            "{server} is declared in the machine file {machine_file} and narrowed by {project}, \
             whose allow is the one in force; {machine_file} does not allow {tool}, and a project \
             file can only narrow a machine server: the machine file must change first (add \
             {tool} to {server}'s allow there), then run approve again"
        )));
    }
    let note = format!(
        "{server} is declared in {machine_file}, which allows {tool}, and narrowed by {project}, \
         whose allow is the one in force: the name goes into {project}"
    );
    Ok(Plan::Add {
        origin: Origin::Project,
        file: project,
        note: Some(match pin_note {
            Some(p) => format!("{note}; {p}"),
            None => note,
        }),
    })
}

/// The server's `allow` patterns as written, in a file parsed alone.
fn allow_of(c: &Config, server: &str) -> Option<Vec<String>> {
    let entry = c.mcp.iter().find(|s| s.name == server)?;
    Some(
        tools(&entry.kind)
            .allow
            .iter()
            .map(|p| p.value.as_str().to_string())
            .collect(),
    )
}

/// The whole YAML document as data, to compare an edit with what was asked.
fn tree(text: &str, file: &str) -> Result<serde_json::Value> {
    serde_saphyr::from_str::<serde_json::Value>(text).map_err(|e| {
        anyhow!("fenzi cannot re-read {file} to check its edit ({e}); nothing was written")
    })
}

/// Edits the file of `origin` to add `tool` to `server`'s allow, checks the result, and writes it.
/// Returns the file's name.
pub fn apply(files: &Files, origin: Origin, server: &str, tool: &str) -> Result<String> {
    let target: &PolicyFile = match origin {
        Origin::Project => &files.project,
        Origin::Machine => files
            .machine
            .as_ref()
            .ok_or_else(|| anyhow!("no machine file was read"))?,
        Origin::Team => return Err(anyhow!("the team policy is not edited here")),
    };
    let name = target.name();
    let old = target
        .text
        .as_deref()
        .ok_or_else(|| anyhow!("{name} does not exist"))?;
    let new = allow_edit::add_allowed(old, &name, server, tool)
        .map_err(|e| anyhow!("{e}; nothing was written"))?;
    check(files, target, server, tool, old, &new)?;
    write_atomic(target, &new)?;
    Ok(name)
}

fn check(
    files: &Files,
    target: &PolicyFile,
    server: &str,
    tool: &str,
    old: &str,
    new: &str,
) -> Result<()> {
    let name = target.name();
    let unsafe_edit = || {
        anyhow!(
            "fenzi could not edit {name} safely (the result would not say exactly what was asked); \
             nothing was written: add {tool} to {server}'s tools.allow by hand"
        )
    };
    let before = parse_one(old, target).map_err(|e| anyhow!("{e}"))?;
    let after = parse_one(new, target)
        .map_err(|e| anyhow!("{e}\nthe change would make {name} invalid; nothing was written"))?;
    let mut want = allow_of(&before, server).ok_or_else(unsafe_edit)?;
    want.push(tool.to_string());
    if allow_of(&after, server) != Some(want) {
        return Err(unsafe_edit());
    }
    // Nothing else changed: the documents are equal once the name is appended to the old one.
    let mut expected = tree(old, &name)?;
    let list = expected
        .get_mut("mcp")
        .and_then(|m| m.get_mut(server))
        .and_then(|s| s.get_mut("tools"))
        .and_then(|t| t.get_mut("allow"))
        .and_then(|a| a.as_array_mut())
        .ok_or_else(unsafe_edit)?;
    list.push(serde_json::Value::String(tool.to_string()));
    if tree(new, &name)? != expected {
        return Err(unsafe_edit());
    }
    // With the other file: it loads, and the tool is now allowed.
    let merged = files
        .load_with(Some((target.origin, new)))
        .map_err(|e| anyhow!("{e}\nnothing was written to {name}"))?
        .ok_or_else(unsafe_edit)?;
    let allowed = merged
        .mcp
        .iter()
        .find(|s| s.name == server)
        .map(|s| tools(&s.kind))
        .is_some_and(|t| matching(&t.allow, tool).is_some() && matching(&t.deny, tool).is_none());
    if !allowed {
        bail!(
            "after the edit the policy would still not allow {tool} on {server}; nothing was \
             written to {name}"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn file(name: &str, origin: Origin, text: &str) -> PolicyFile {
        PolicyFile {
            path: PathBuf::from(name),
            origin,
            bytes: Some(text.as_bytes().to_vec()),
            text: Some(text.to_string()),
        }
    }

    fn files(project: &str, machine: Option<&str>) -> Files {
        Files {
            project: file("fenzi.yaml", Origin::Project, project),
            machine: machine.map(|m| file("mcp.yaml", Origin::Machine, m)),
        }
    }

    fn decide(f: &Files, tool: &str) -> Plan {
        let config = f.load().unwrap().unwrap();
        plan(f, &config, "s", tool, &BTreeSet::new()).unwrap()
    }

    const SERVER: &str = "version: 1\nmcp:\n  s:\n    url: https://x.example/mcp\n    tools:\n      allow: [get_*]\n      deny: [get_secret]\n";
    const NARROW: &str = "version: 1\nmcp:\n  s:\n    url: https://x.example/mcp\n    tools:\n      allow: [get_issue]\n";

    #[test]
    fn where_the_name_goes_and_what_is_refused() {
        let project = files(SERVER, None);
        assert!(matches!(
            decide(&project, "delete_issue"),
            Plan::Add {
                origin: Origin::Project,
                ..
            }
        ));
        assert!(
            matches!(decide(&project, "get_secret"), Plan::Refused(why) if why.contains("approve does not undo it"))
        );
        assert!(
            matches!(decide(&project, "get_issue"), Plan::Nothing(why) if why.contains("already allowed by mcp.s.tools.allow \"get_*\" (fenzi.yaml:6)"))
        );
        for tool in ["get_*", "*", "a b", "x/y"] {
            assert!(
                matches!(decide(&project, tool), Plan::Refused(why) if why.contains("not a plain tool name")),
                "{tool}"
            );
        }

        let machine = files("version: 1\n", Some(SERVER));
        assert!(matches!(
            decide(&machine, "delete_issue"),
            Plan::Add {
                origin: Origin::Machine,
                ..
            }
        ));
        // Narrowed by the project: the project's allow, if the machine allows the tool already.
        let narrowed = files(NARROW, Some(SERVER));
        assert!(matches!(
            decide(&narrowed, "get_user"),
            Plan::Add {
                origin: Origin::Project,
                ..
            }
        ));
        assert!(
            matches!(decide(&narrowed, "delete_issue"), Plan::Refused(why) if why.contains("the machine file must change first"))
        );
        assert!(
            matches!(decide(&narrowed, "get_secret"), Plan::Refused(why) if why.contains("deny"))
        );
    }

    #[test]
    fn an_edit_that_says_more_than_asked_is_refused() {
        let f = files(SERVER, None);
        let ok = SERVER.replace("[get_*]", "[get_*, delete_issue]");
        check(&f, &f.project, "s", "delete_issue", SERVER, &ok).unwrap();
        for bad in [
            // Two names, another name, a glob.
            SERVER.replace("[get_*]", "[get_*, delete_issue, drop]"),
            SERVER.replace("[get_*]", "[get_*, delete_issues]"),
            SERVER.replace("[get_*]", "[get_*, \"delete_*\"]"),
            // The name, and something else changed beside it.
            ok.replace("deny: [get_secret]", "deny: []"),
            ok.replace("x.example", "y.example"),
            format!("{ok}hosts: [example.com]\n"),
            ok.replace("    tools:\n", "    pin: true\n    tools:\n"),
        ] {
            assert!(
                check(&f, &f.project, "s", "delete_issue", SERVER, &bad).is_err(),
                "{bad}"
            );
        }
        // Names YAML would read as something else are written quoted, and read back as names.
        for tool in ["yes", "1.5", "null", "0x10", "-x"] {
            let new = allow_edit::add_allowed(SERVER, "fenzi.yaml", "s", tool).unwrap();
            check(&f, &f.project, "s", tool, SERVER, &new)
                .unwrap_or_else(|e| panic!("{tool}: {e}"));
        }
        // A result that does not load together with the machine file: refused.
        let m = files(NARROW, Some(SERVER));
        let widened = NARROW.replace("[get_issue]", "[get_issue, delete_issue]");
        let e = check(&m, &m.project, "s", "delete_issue", NARROW, &widened).unwrap_err();
        assert!(e.to_string().contains("nothing was written"), "{e}");
    }

    /// A command server is checked per tool behind the bridge (DESIGN §18): approve adds to its
    /// allow as to a url server's, in the file it comes from, and the edit keeps its command.
    #[test]
    fn a_command_server_gets_an_allow_like_a_url_server() {
        const LOCAL: &str = "version: 1\nmcp:\n  s:\n    command: [npx, -y, files-server]\n    secrets: [FILES_TOKEN]\n    hosts: [api.files.example]\n    tools:\n      allow: [read_text_file]\n      deny: [move_file]\n";
        for (f, origin) in [
            (files(LOCAL, None), Origin::Project),
            (files("version: 1\n", Some(LOCAL)), Origin::Machine),
        ] {
            assert!(
                matches!(decide(&f, "write_file"), Plan::Add { origin: o, .. } if o == origin),
                "{origin:?}"
            );
            assert!(
                matches!(decide(&f, "move_file"), Plan::Refused(why) if why.contains("approve does not undo it"))
            );
            assert!(matches!(decide(&f, "read_text_file"), Plan::Nothing(_)));
        }
        let f = files(LOCAL, None);
        let new = allow_edit::add_allowed(LOCAL, "fenzi.yaml", "s", "write_file").unwrap();
        assert_eq!(
            new,
            LOCAL.replace("[read_text_file]", "[read_text_file, write_file]")
        );
        check(&f, &f.project, "s", "write_file", LOCAL, &new).unwrap();
        // The edit may not change what the server is.
        let bad = new.replace("files-server]", "files-server, --all]");
        assert!(check(&f, &f.project, "s", "write_file", LOCAL, &bad).is_err());
    }
}
