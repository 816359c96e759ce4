//! Property test of the three-layer merge (team → machine → project): for random team, machine
//! and project policies that load, no request the merged policy allows is one the team policy
//! alone denies, or one the team policy merged with the machine file alone denies. Requests are
//! every host, port and tool of the pools below (a CONNECT, or a `tools/call` on an MCP server).

use fenzi_policy::config::{self, Config};
use fenzi_policy::engine::{Policy, Route};
use fenzi_policy::host::Host;
use fenzi_policy::mcp::RequestView;
use fenzi_policy::mcp::inventory::Inventory;
use proptest::prelude::*;
use proptest::test_runner::{Config as RunnerConfig, TestCaseError, TestRunner};

/// Plain hosts a layer may list (server hosts are kept apart: `*.srv` is never listed).
const HOSTS: &[&str] = &[
    "a.example",
    "b.example",
    "*.c.example",
    "x.c.example",
    "*.y.c.example",
    "a.example:8443",
];
const SERVERS: &[&str] = &["s1", "s2", "s3"];
const TOOLS: &[&str] = &["t1", "t2", "t3", "t*"];
const REQUEST_HOSTS: &[&str] = &[
    "a.example",
    "b.example",
    "x.c.example",
    "q.c.example",
    "z.y.c.example",
    "c.example",
    "s1.srv",
    "s2.srv",
    "s3.srv",
    "evil.example",
];
const REQUEST_TOOLS: &[&str] = &["t1", "t2", "t3", "tx"];

#[derive(Debug, Clone)]
struct Server {
    name: &'static str,
    allow: Vec<&'static str>,
    deny: Vec<&'static str>,
}

#[derive(Debug, Clone)]
struct Layer {
    hosts: Vec<&'static str>,
    servers: Vec<Server>,
}

fn subset(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<&'static str>> {
    proptest::sample::subsequence(pool, 0..=pool.len())
}

fn server() -> impl Strategy<Value = Server> {
    (
        proptest::sample::select(SERVERS),
        subset(TOOLS),
        subset(TOOLS),
    )
        .prop_map(|(name, allow, deny)| Server {
            name,
            // An allow pattern a deny covers is a load error; drop the overlap so more load.
            deny: deny.into_iter().filter(|d| !allow.contains(d)).collect(),
            allow,
        })
}

fn layer() -> impl Strategy<Value = Layer> {
    (subset(HOSTS), proptest::collection::vec(server(), 0..3)).prop_map(|(hosts, mut servers)| {
        servers.sort_by_key(|s| s.name);
        servers.dedup_by_key(|s| s.name);
        Layer { hosts, servers }
    })
}

fn yaml(layer: &Layer, serial: Option<u64>) -> String {
    let quote = |v: &[&str]| {
        v.iter()
            .map(|s| format!("\"{s}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut out = String::from("version: 1\n");
    if let Some(n) = serial {
        out.push_str(&format!("serial: {n}\n"));
    }
    out.push_str(&format!("hosts: [{}]\n", quote(&layer.hosts)));
    out.push_str("mcp:\n");
    if layer.servers.is_empty() {
        out.truncate(out.len() - "mcp:\n".len());
    }
    for s in &layer.servers {
        out.push_str(&format!(
            "  {}:\n    url: https://{}.srv/mcp\n    tools: {{allow: [{}], deny: [{}]}}\n",
            s.name,
            s.name,
            quote(&s.allow),
            quote(&s.deny)
        ));
    }
    out
}

/// Does `policy` let this request through? `tool: None` is a CONNECT (admission); `Some` is a
/// `tools/call` over the admitted route (a plain route forwards it unread).
fn allows(policy: &Policy, host: &str, port: u16, tool: Option<&str>) -> bool {
    let host = Host::parse(host).unwrap();
    match policy.route(&host, port) {
        Err(_) => false,
        Ok(Route::Plain { .. }) => true,
        Ok(Route::Mcp(server)) => match tool {
            None => true,
            Some(tool) => {
                let body = format!(
                    r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"{tool}","arguments":{{}}}}}}"#
                );
                let headers: [(&str, &[u8]); 2] = [
                    ("content-type", b"application/json"),
                    ("accept", b"application/json, text/event-stream"),
                ];
                let req = RequestView {
                    method: "POST",
                    path: "/mcp",
                    headers: &headers,
                    body: body.as_bytes(),
                };
                policy
                    .decide_mcp(server, &Inventory::unpinned(), &req)
                    .overall
                    .is_allowed()
            }
        },
    }
}

fn load(team: &str, machine: &str, project: Option<&str>) -> Option<(Config, Config, Config)> {
    let (team_config, _) = config::parse_team(team, "https://team.example/p.yaml").ok()?;
    let team_alone = config::load_under(Some(team_config.clone()), None, None).ok()?;
    let team_machine =
        config::load_under(Some(team_config.clone()), Some((machine, "mcp.yaml")), None).ok()?;
    let merged = config::load_under(
        Some(team_config),
        Some((machine, "mcp.yaml")),
        project.map(|p| (p, "fenzi.yaml")),
    )
    .ok()?;
    Some((team_alone, team_machine, merged))
}

/// Runs the property; returns whether the three layers loaded (so the caller can tell that the
/// property was exercised, not skipped).
fn check(team: &Layer, machine: &Layer, project: &Layer) -> Result<bool, TestCaseError> {
    let (team_text, machine_text, project_text) = (
        yaml(team, Some(1)),
        yaml(machine, None),
        yaml(project, None),
    );
    let Some((team_alone, team_machine, merged)) =
        load(&team_text, &machine_text, Some(&project_text))
    else {
        return Ok(false);
    };
    let (t, tm, m) = (
        Policy::from_config(&team_alone),
        Policy::from_config(&team_machine),
        Policy::from_config(&merged),
    );
    for host in REQUEST_HOSTS {
        for port in [443, 8443] {
            for tool in std::iter::once(None).chain(REQUEST_TOOLS.iter().map(|t| Some(*t))) {
                if allows(&m, host, port, tool) {
                    prop_assert!(
                        allows(&t, host, port, tool),
                        "merged allows {host}:{port} {tool:?}, the team alone denies it\n\
                         team:\n{team_text}\nmachine:\n{machine_text}\nproject:\n{project_text}"
                    );
                    prop_assert!(
                        allows(&tm, host, port, tool),
                        "merged allows {host}:{port} {tool:?}, team+machine deny it\n\
                         team:\n{team_text}\nmachine:\n{machine_text}\nproject:\n{project_text}"
                    );
                }
                if allows(&tm, host, port, tool) {
                    prop_assert!(
                        allows(&t, host, port, tool),
                        "team+machine allow {host}:{port} {tool:?}, the team alone denies it"
                    );
                }
            }
        }
    }
    Ok(true)
}

#[test]
fn the_merge_never_allows_what_an_upper_layer_denies() {
    // About 4% of random triples load (the rest are refused, which is checked too): 4,000 cases
    // load about 155 (136–174 in six runs), so the bound below is about four deviations away
    // (1,500 cases loaded 57–82, and a bound of 50 failed a CI run).
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 4000,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let loaded = std::cell::Cell::new(0usize);
    runner
        .run(&(layer(), layer(), layer()), |(team, machine, project)| {
            if check(&team, &machine, &project)? {
                loaded.set(loaded.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    // The property is only worth something if enough random layers load together.
    assert!(
        loaded.get() >= 100,
        "only {} of 4000 random policy triples loaded",
        loaded.get()
    );
}

/// The same with the lower layers built from the team's own entries, so that most load: each
/// lower layer keeps a random part of the team's hosts and of each server's allow list, and may
/// add deny patterns.
#[test]
fn narrowing_layers_never_allow_what_the_team_denies() {
    let narrowed = |upper: Layer| {
        let hosts = upper.hosts.clone();
        let servers = upper.servers.clone();
        (
            proptest::sample::subsequence(hosts.clone(), 0..=hosts.len()),
            proptest::collection::vec((subset(TOOLS), subset(TOOLS)), servers.len()),
            proptest::sample::subsequence(
                (0..servers.len()).collect::<Vec<_>>(),
                0..=servers.len(),
            ),
        )
            .prop_map(move |(hosts, tools, keep)| Layer {
                hosts,
                servers: keep
                    .iter()
                    .map(|&i| {
                        let s = &servers[i];
                        let (allow, deny) = &tools[i];
                        let allow: Vec<_> = s
                            .allow
                            .iter()
                            .copied()
                            .filter(|a| allow.contains(a))
                            .collect();
                        let mut deny: Vec<_> = deny
                            .iter()
                            .copied()
                            .filter(|d| !allow.contains(d))
                            .collect();
                        for d in &s.deny {
                            if !deny.contains(d) {
                                deny.push(d);
                            }
                        }
                        Server {
                            name: s.name,
                            allow,
                            deny,
                        }
                    })
                    .collect(),
            })
    };
    let strategy = layer().prop_flat_map(move |team| {
        let team2 = team.clone();
        (Just(team.clone()), narrowed(team2)).prop_flat_map(move |(team, machine)| {
            // The project narrows the machine's result; it may also list a team host.
            (Just(team.clone()), Just(machine.clone()), narrowed(machine))
        })
    });
    let mut runner = TestRunner::new(RunnerConfig {
        cases: 500,
        failure_persistence: None,
        ..RunnerConfig::default()
    });
    let loaded = std::cell::Cell::new(0usize);
    runner
        .run(&strategy, |(team, machine, project)| {
            if check(&team, &machine, &project)? {
                loaded.set(loaded.get() + 1);
            }
            Ok(())
        })
        .unwrap();
    assert!(
        loaded.get() >= 250,
        "only {} of 500 narrowing triples loaded",
        loaded.get()
    );
}
