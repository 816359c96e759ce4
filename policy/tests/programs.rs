//! DESIGN §17 through the whole engine: the table of `testdata/cases/programs.cases.yaml` (the
//! agent's default on MCP servers, lists replacing it, hosts mappings, pins, shared hosts), and
//! that a project can only narrow a machine file's lists.

use fenzi_policy::cases;
use fenzi_policy::config;
use fenzi_policy::engine::{Policy, Route};
use fenzi_policy::host::Host;
use fenzi_policy::programs::ProgramFacts;

fn testdata(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../testdata/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn the_programs_table_gets_every_expected_decision() {
    let text = testdata("policies/programs.yaml");
    let cfg = config::load(None, Some((&text, "programs.yaml"))).expect("valid policy");
    let policy = Policy::from_config(&cfg);
    let all = cases::parse(
        &testdata("cases/programs.cases.yaml"),
        "programs.cases.yaml",
    )
    .unwrap();
    assert!(all.len() >= 18, "the table shrank to {} cases", all.len());
    let failed: Vec<_> = all
        .iter()
        .filter_map(|c| {
            let r = cases::run(&policy, &Default::default(), c);
            (!r.passed).then(|| format!("line {} {}: got {:?}", c.line, c.name, r.got))
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn a_case_names_a_program_or_agent_only() {
    for (text, why) in [
        (
            "cases:\n  - {host: a.example, program: curl, expect: allowed}\n",
            "absolute path",
        ),
        (
            "cases:\n  - {host: a.example, sha256: ab, expect: allowed}\n",
            "goes with `program`",
        ),
        (
            "cases:\n  - {host: a.example, program: agent, sha256: ab, expect: allowed}\n",
            "not `agent`",
        ),
    ] {
        let e = cases::parse(text, "t.yaml").unwrap_err();
        assert!(e.message.contains(why), "{text}: {e}");
    }
}

/// The machine lets the agent and python use a server; a project that lists curl adds no program:
/// both lists apply, so curl stays refused and python (which the project dropped) is refused too.
/// A project's plain `hosts` entry cannot open a host the machine limits to git.
#[test]
fn a_project_narrows_and_never_widens() {
    let machine = "version: 1\nhosts:\n  - {host: git.example.com, programs: [/usr/bin/git]}\nmcp:\n  \
                   notes:\n    url: https://mcp.notes.example/mcp\n    tools: {allow: [x]}\n    \
                   programs: [agent, /usr/bin/python3]\n  plain:\n    url: https://mcp.plain.example/mcp\n    \
                   tools: {allow: [x]}\n";
    let project = "version: 1\nhosts:\n  - git.example.com\nmcp:\n  notes:\n    \
                   url: https://mcp.notes.example/mcp\n    tools: {allow: [x]}\n    \
                   programs: [agent, /usr/bin/curl]\n  plain:\n    url: https://mcp.plain.example/mcp\n    \
                   tools: {allow: [x]}\n    programs: [/usr/bin/curl]\n";
    let cfg = config::load(Some((machine, "mcp.yaml")), Some((project, "fenzi.yaml"))).unwrap();
    let policy = Policy::from_config(&cfg);
    let fact = |exe: &'static str, agent: bool| ProgramFacts {
        exe,
        sha256: "",
        agent,
    };
    let server = |name: &str| {
        policy
            .servers()
            .iter()
            .find(|s| s.name == name)
            .unwrap()
            .programs
            .clone()
    };
    let notes = server("notes");
    assert!(notes.check("mcp.notes", &[fact("", true)], true).is_ok());
    assert!(
        notes
            .check("mcp.notes", &[fact("/usr/bin/curl", false)], true)
            .is_err()
    );
    assert!(
        notes
            .check("mcp.notes", &[fact("/usr/bin/python3", false)], true)
            .is_err()
    );
    // The machine wrote nothing on `plain`: its default [agent] stays beside the project's list,
    // so under an agent nothing passes both; without one, the project's list is what applies.
    let plain = server("plain");
    assert!(
        plain
            .check("mcp.plain", &[fact("/usr/bin/curl", false)], true)
            .is_err()
    );
    assert!(plain.check("mcp.plain", &[fact("", true)], true).is_err());
    assert!(
        plain
            .check("mcp.plain", &[fact("/usr/bin/curl", false)], false)
            .is_ok()
    );
    // The project's plain entry for git.example.com does not lift the machine's list.
    let host = Host::Name("git.example.com".into());
    let route = policy.route(&host, 443).unwrap();
    assert!(matches!(route, Route::Plain { .. }));
    let rules = policy.program_rules(&route, &host, 443);
    assert!(
        rules
            .check("h", &[fact("/usr/bin/curl", false)], true)
            .is_err()
    );
    assert!(
        rules
            .check("h", &[fact("/usr/bin/git", false)], true)
            .is_ok()
    );
}
