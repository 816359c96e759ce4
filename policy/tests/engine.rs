//! The compiled policy: routes, address checks, secret bindings and what gets intercepted.

use fenzi_policy::Reason;
use fenzi_policy::config;
use fenzi_policy::config::LocalRun;
use fenzi_policy::engine::{Policy, Route, SecretSource, Transport};
use fenzi_policy::host::Host;
use std::net::IpAddr;

const POLICY: &str = r#"
version: 1
hosts:
  - github.com
  - "*.githubusercontent.com"
  - "10.0.0.5:8080"
mcp:
  deepwiki:
    url: https://mcp.deepwiki.com/mcp
    tools: {allow: [read_wiki_structure]}
  linear:
    url: https://mcp.linear.app/mcp
    token: true
    tools: {allow: [get_issue], deny: [delete_issue]}
  local:
    url: https://127.0.0.1:8443/mcp
    tools: {allow: ["*"]}
  droplets:
    command: [npx, -y, "@digitalocean/mcp"]
    secrets: [DIGITALOCEAN_API_TOKEN]
    hosts: [api.digitalocean.com]
    tools: {allow: [droplet-list]}
secrets:
  ANTHROPIC_API_KEY:
    hosts: [api.anthropic.com]
    body: true
"#;

fn config() -> config::Config {
    config::load(None, Some((POLICY, "fenzi.yaml"))).expect("valid policy")
}

fn policy() -> Policy {
    Policy::from_config(&config())
}

fn host(s: &str) -> Host {
    Host::parse(s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn mcp_servers_route_to_their_rule_and_need_inspection() {
    let p = policy();
    let r = p.route(&host("MCP.DeepWiki.com."), 443).unwrap();
    assert!(matches!(r, Route::Mcp(s) if s.name == "deepwiki"));
    assert!(r.needs_inspection());
    assert!(
        p.route(&host("mcp.deepwiki.com"), 8443).is_err(),
        "another port is another destination"
    );
    // A local server is an MCP server at its bridge's address, port 80, whatever the case.
    let r = p.route(&host("Droplets.stdio.fenzi.internal"), 80).unwrap();
    assert!(matches!(r, Route::Mcp(s) if s.name == "droplets"
        && s.transport == Transport::Stdio(LocalRun::Sandbox)));
    assert!(
        p.route(&host("droplets.stdio.fenzi.internal"), 443)
            .is_err()
    );
    assert!(p.route(&host("other.stdio.fenzi.internal"), 80).is_err());
    let locals: Vec<_> = p.local_servers().map(|s| s.name.as_str()).collect();
    assert_eq!(locals, ["droplets"]);
}

#[test]
fn plain_hosts_are_tunnelled_and_secret_hosts_inspected() {
    let p = policy();
    let gh = p.route(&host("github.com"), 443).unwrap();
    assert!(matches!(&gh, Route::Plain { secrets, .. } if secrets.is_empty()));
    assert!(!gh.needs_inspection());
    let anthropic = p.route(&host("api.anthropic.com"), 443).unwrap();
    assert!(anthropic.needs_inspection());
    let names: Vec<_> = p
        .secrets_for(&host("api.anthropic.com"), 443)
        .iter()
        .map(|s| s.name.clone())
        .collect();
    assert_eq!(names, ["ANTHROPIC_API_KEY"]);
    let denied = p.route(&host("example.org"), 443).unwrap_err();
    assert_eq!(denied.reason(), Some(Reason::HostNotAllowed));
}

#[test]
fn secrets_are_bound_to_their_hosts_only() {
    let p = policy();
    let token = p
        .secrets()
        .iter()
        .find(|s| s.name == "MCP_LINEAR")
        .expect("token secret");
    assert!(token.default_bearer);
    assert!(token.is_bound_to(&host("mcp.linear.app"), 443));
    assert!(!token.is_bound_to(&host("mcp.deepwiki.com"), 443));
    // Approval is by pattern as written: a value approved for other hosts covers none of these.
    let approved = |hosts: &[&str]| hosts.iter().map(|h| h.to_string()).collect::<Vec<_>>();
    assert!(
        token
            .hosts_beyond(&approved(&["mcp.linear.app"]))
            .is_empty()
    );
    assert!(
        token
            .hosts_beyond(&approved(&["mcp.linear.app", "x.com"]))
            .is_empty()
    );
    assert_eq!(
        token.hosts_beyond(&approved(&["api.linear.app"])),
        ["mcp.linear.app"]
    );
    assert_eq!(token.hosts_beyond(&[]), ["mcp.linear.app"]);
    assert_eq!(
        token.sources,
        [SecretSource::ServerToken {
            server: "linear".into()
        }]
    );
    // A local server's secret and hosts are its own egress (DESIGN §18): the agent's policy has
    // neither, the server's own policy has both.
    assert!(
        !p.secrets()
            .iter()
            .any(|s| s.name == "DIGITALOCEAN_API_TOKEN"),
        "the agent holds no placeholder for a local server's secret"
    );
    let denied = p.route(&host("api.digitalocean.com"), 443).unwrap_err();
    assert_eq!(denied.reason(), Some(Reason::HostNotAllowed));
    let own = Policy::for_local_server(&config(), "droplets", p.limits()).expect("a local server");
    let d = own
        .secrets()
        .iter()
        .find(|s| s.name == "DIGITALOCEAN_API_TOKEN")
        .unwrap();
    assert!(d.is_bound_to(&host("api.digitalocean.com"), 443));
    assert!(!d.body);
    assert_eq!(
        d.sources,
        [SecretSource::LocalServer {
            server: "droplets".into()
        }]
    );
    assert!(own.route(&host("api.digitalocean.com"), 443).is_ok());
    assert!(
        own.route(&host("mcp.deepwiki.com"), 443).is_err(),
        "a local server reaches its own hosts only"
    );
    assert!(
        own.secrets()
            .iter()
            .all(|s| s.name == "DIGITALOCEAN_API_TOKEN")
    );
    assert!(Policy::for_local_server(&config(), "deepwiki", p.limits()).is_none());
    assert!(
        p.secrets()
            .iter()
            .find(|s| s.name == "ANTHROPIC_API_KEY")
            .unwrap()
            .body
    );
}

#[test]
fn internal_addresses_are_refused_unless_the_literal_is_named() {
    let p = policy();
    let gh = host("github.com");
    assert!(p.check_address(&gh, 443, ip("140.82.112.3")).is_allowed());
    for bad in [
        "10.1.2.3",
        "127.0.0.1",
        "169.254.169.254",
        "::1",
        "::ffff:10.0.0.1",
        "64:ff9b::a00:1",
        "fd00::1",
    ] {
        let d = p.check_address(&gh, 443, ip(bad));
        assert_eq!(d.reason(), Some(Reason::PrivateAddress), "{bad}");
    }
    // Named literals are reachable on the named port only, and only when asked for by that literal.
    assert!(
        p.check_address(&host("127.0.0.1"), 8443, ip("127.0.0.1"))
            .is_allowed()
    );
    assert!(
        p.check_address(&host("10.0.0.5"), 8080, ip("10.0.0.5"))
            .is_allowed()
    );
    assert!(
        !p.check_address(&host("10.0.0.5"), 8081, ip("10.0.0.5"))
            .is_allowed()
    );
    assert!(
        !p.check_address(&gh, 443, ip("10.0.0.5")).is_allowed(),
        "a name resolving to a named literal is still refused"
    );
    assert!(
        !p.check_address(&host("127.1"), 9999, ip("127.0.0.1"))
            .is_allowed()
    );
}

#[test]
fn the_ca_constraints_cover_exactly_the_inspected_hosts() {
    let p = policy();
    let mut names: Vec<String> = p
        .inspected_patterns()
        .iter()
        .map(|h| h.to_string())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "127.0.0.1:8443",
            "api.anthropic.com",
            "droplets.stdio.fenzi.internal:80",
            "mcp.deepwiki.com",
            "mcp.linear.app"
        ]
    );
}

#[test]
fn an_https_server_is_never_carried_in_clear_text() {
    const HTTP: &str =
        "version: 1\nmcp:\n  plain:\n    url: http://plain.test/mcp\n    tools: {allow: [echo]}\n";
    let p = policy();
    for (name, port) in [("mcp.deepwiki.com", 443), ("127.0.0.1", 8443)] {
        let route = p.route(&host(name), port).unwrap();
        assert_eq!(route.check_transport(true), None, "{name}");
        let refused = route.check_transport(false).expect("clear text is refused");
        assert_eq!(refused.reason(), Some(Reason::BadRequest), "{name}");
        assert!(
            refused.message.contains("is an https MCP server")
                && refused.message.contains("clear text"),
            "{}",
            refused.message
        );
        assert!(
            route.upstream_tls(false) && route.upstream_tls(true),
            "{name}"
        );
    }

    // An http:// server is plain HTTP upstream, whatever the client spoke to the proxy.
    let cfg = config::load(None, Some((HTTP, "fenzi.yaml"))).expect("valid policy");
    let plain = Policy::from_config(&cfg);
    let route = plain.route(&host("plain.test"), 80).unwrap();
    assert_eq!(route.check_transport(false), None);
    assert_eq!(route.check_transport(true), None);
    assert!(!route.upstream_tls(false) && !route.upstream_tls(true));

    // A plain host names no scheme: the client's choice is mirrored.
    let route = p.route(&host("github.com"), 443).unwrap();
    assert_eq!(route.check_transport(false), None);
    assert!(route.upstream_tls(true) && !route.upstream_tls(false));
}

#[test]
fn a_token_goes_where_token_in_says_and_nowhere_else() {
    use fenzi_policy::secret_use::{self, Position, RequestFacts, Sighting};
    let text = "version: 1
mcp:
  maps:
    url: https://maps.example.com/mcp
    token: true
    token_in: [header:X-Api-Key]
    tools: {allow: [search]}
";
    let p = Policy::from_config(&config::load(None, Some((text, "fenzi.yaml"))).unwrap());
    let token = p.secrets().iter().find(|s| s.name == "MCP_MAPS").unwrap();
    assert!(
        !token.default_bearer,
        "no Authorization is added for a token that goes elsewhere"
    );
    assert_eq!(
        token
            .positions
            .as_ref()
            .map(|v| v.iter().map(ToString::to_string).collect::<Vec<_>>()),
        Some(vec!["header:X-Api-Key".to_string()])
    );
    let h = host("maps.example.com");
    let decide = |field: &str| {
        let seen = [Sighting {
            field: Some(field.into()),
            ..Sighting::new("MCP_MAPS", Position::HeaderValue)
        }];
        secret_use::decide(
            p.secrets(),
            &RequestFacts {
                host: &h,
                port: 443,
                entry: Some("maps"),
                tls: true,
                has_authorization: false,
                sightings: &seen,
            },
        )
    };
    assert!(decide("x-api-key").is_allowed());
    let refused = decide("authorization");
    assert_eq!(
        refused.decision.reason(),
        Some(Reason::CredentialEndpointMismatch)
    );
    assert_eq!(refused.decision.rule, "mcp.maps.token header:authorization");
}
