//! Servers by path (README, "Servers by path"): two entries on one host, each request decided by
//! the entry its path names (`fenzi_policy::engine::by_path`). The table of
//! `testdata/cases/paths.cases.yaml` through the whole engine, and what the table cannot show:
//! which entry owns a path (and so whose token it may carry), and announced legacy message paths.

use fenzi_policy::Reason;
use fenzi_policy::cases;
use fenzi_policy::config;
use fenzi_policy::engine::{PathOwner, Policy};
use fenzi_policy::host::Host;
use fenzi_policy::secret_use::{self, Position, RequestFacts, Sighting};

fn testdata(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../testdata/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn policy() -> Policy {
    let text = testdata("policies/paths.yaml");
    let cfg = config::load(None, Some((&text, "paths.yaml"))).expect("valid policy");
    Policy::from_config(&cfg)
}

fn index(policy: &Policy, name: &str) -> usize {
    policy
        .servers()
        .iter()
        .position(|s| s.name == name)
        .unwrap()
}

#[test]
fn the_paths_table_gets_every_expected_decision() {
    let policy = policy();
    let all = cases::parse(&testdata("cases/paths.cases.yaml"), "paths.cases.yaml").unwrap();
    assert!(all.len() >= 35, "the table shrank to {} cases", all.len());
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
fn each_path_has_one_owner_or_none() {
    let policy = policy();
    let (full, readonly, solo) = (
        index(&policy, "full"),
        index(&policy, "readonly"),
        index(&policy, "solo"),
    );
    let admitted = &policy.servers()[readonly];
    let never = |_: &fenzi_policy::engine::McpServer, _: &str| false;
    let owner = |method: &str, target: &str| policy.owner_of_path(admitted, method, target, never);
    assert_eq!(owner("POST", "/mcp"), PathOwner::Entry(full));
    assert_eq!(owner("POST", "/mcp/readonly"), PathOwner::Entry(readonly));
    assert_eq!(
        owner("POST", "/mcp/readonly?a=b"),
        PathOwner::Entry(readonly)
    );
    assert_eq!(
        owner("GET", "/.well-known/oauth-protected-resource/mcp/readonly"),
        PathOwner::Entry(readonly)
    );
    // The host's own metadata: decided under the first entry, but no entry's (no token on it).
    let host = owner("GET", "/.well-known/oauth-protected-resource");
    assert_eq!(host, PathOwner::Host(full));
    assert_eq!(host.entry(), None);
    assert_eq!(host.decided_by(), Some(full));
    // A target the classifier must refuse as malformed is decided under the host too.
    assert_eq!(owner("POST", "mcp"), PathOwner::Host(full));
    for nobody in ["/mcp/", "/mcp/readonly/", "/MCP", "/mcp%2Freadonly", "/x"] {
        let PathOwner::Nobody(d) = owner("POST", nobody) else {
            panic!("{nobody} has an owner");
        };
        assert_eq!(d.reason(), Some(Reason::PolicyDenied), "{nobody}");
        assert_eq!(d.rule, "mcp.api.example.com no server at this path");
    }
    // A host with one entry: every path is that entry's.
    let alone = &policy.servers()[solo];
    assert_eq!(
        policy.owner_of_path(alone, "POST", "/anything", never),
        PathOwner::Entry(solo)
    );
}

#[test]
fn an_announced_message_path_belongs_to_the_one_entry_that_announced_it() {
    let policy = policy();
    let (full, readonly) = (index(&policy, "full"), index(&policy, "readonly"));
    let admitted = &policy.servers()[full];
    let by_readonly =
        |s: &fenzi_policy::engine::McpServer, p: &str| s.name == "readonly" && p == "/messages";
    assert_eq!(
        policy.owner_of_path(admitted, "POST", "/messages?sessionId=1", by_readonly),
        PathOwner::Entry(readonly)
    );
    // An entry's endpoint is its own, whatever another entry's server announced.
    let claims_full =
        |s: &fenzi_policy::engine::McpServer, p: &str| s.name == "readonly" && p == "/mcp";
    assert_eq!(
        policy.owner_of_path(admitted, "POST", "/mcp", claims_full),
        PathOwner::Entry(full)
    );
    // Announced by both: which one a POST there reaches is the server's secret, so nobody's.
    let by_both = |_: &fenzi_policy::engine::McpServer, p: &str| p == "/messages";
    assert!(matches!(
        policy.owner_of_path(admitted, "POST", "/messages", by_both),
        PathOwner::Nobody(_)
    ));
}

#[test]
fn each_token_goes_only_to_its_own_entry() {
    let policy = policy();
    let host = Host::parse("api.example.com").unwrap();
    let authorization =
        |secret: &str| Sighting::in_field(secret, Position::HeaderValue, "authorization");
    let decide = |entry: Option<&str>, seen: &[Sighting], has_authorization: bool| {
        secret_use::decide(
            policy.secrets(),
            &RequestFacts {
                host: &host,
                port: 443,
                entry,
                tls: true,
                has_authorization,
                sightings: seen,
            },
        )
    };
    let own = decide(Some("readonly"), &[authorization("MCP_READONLY")], true);
    assert!(own.is_allowed());
    assert_eq!(own.secrets, ["MCP_READONLY"]);
    let sibling = decide(Some("readonly"), &[authorization("MCP_FULL")], true);
    assert_eq!(
        sibling.decision.reason(),
        Some(Reason::CredentialEndpointMismatch)
    );
    assert!(sibling.substitute.is_empty());
    // The bearer added to a request without Authorization is the entry's own.
    assert_eq!(
        decide(Some("full"), &[], false).add_bearer.as_deref(),
        Some("MCP_FULL")
    );
    assert_eq!(
        decide(Some("readonly"), &[], false).add_bearer.as_deref(),
        Some("MCP_READONLY")
    );
    // A path of the host that is no entry's carries no token.
    assert_eq!(decide(None, &[], false).add_bearer, None);
    assert!(!decide(None, &[authorization("MCP_FULL")], true).is_allowed());
}

#[test]
fn a_shared_host_is_one_destination() {
    let policy = policy();
    let host = Host::parse("api.example.com").unwrap();
    let inspected = policy.inspected_patterns();
    let shared = inspected.iter().filter(|p| p.matches(&host, 443)).count();
    assert_eq!(shared, 1, "{inspected:?}");
    // Admission knows the host, whichever entry it finds first; the path picks the entry later.
    let route = policy.route(&host, 443).unwrap();
    assert!(route.needs_inspection());
    let readonly = index(&policy, "readonly");
    assert_eq!(
        policy
            .entries_on_host(&policy.servers()[readonly])
            .map(|(_, s)| s.name.as_str())
            .collect::<Vec<_>>(),
        ["full", "readonly"]
    );
}
