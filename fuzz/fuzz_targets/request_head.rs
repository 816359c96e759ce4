//! Fuzzes what the proxy reads from a client before it decides: the CONNECT target / Host header
//! (`split_authority`, `Host::parse`, `HostPattern`), the MCP classifier's method, target and header
//! checks, and the placeholder scan of a request head.
//!
//! Input: byte 0 picks the endpoint and options; the rest is split on `\n` into an authority, a host
//! pattern, a method, a request target, header lines (`name:value`) up to an empty line, and a body.
//! In the head fields `0xFF s` expands to a spelling of a placeholder token.
//!
//! Invariants (not just "no panic"):
//! - hosts: a parsed host is canonical (its display parses to itself, also upper-cased, also with
//!   a root dot), its authority form splits back to the same host and port, a name obeys DNS
//!   syntax and never ends in a numeric label; a parsed pattern re-parses from its display, and
//!   matches (and overlaps) the exact pattern of every host it matches;
//! - classifier: an allowed request is POST, GET or DELETE with a strict origin-form target; a GET
//!   or DELETE is allowed only bodiless on the endpoint (or GET of plain `/.well-known/` metadata);
//!   an allowed POST has exactly one JSON Content-Type, identity/chunked codings only, a body within
//!   the limit and only allowed tools; header-name case and a query string do not change the
//!   verdict; a denial body is strict JSON and echoes no placeholder the request held only in its
//!   query or headers;
//! - secrets: `scan_authority` finds what `find_in` finds, `redact` leaves no placeholder, and
//!   `scan_head` reports exactly the placeholders of each part of the head, at that position (a
//!   query parameter's name counting as the query), each header value's naming its header.
#![no_main]

use fenzi_policy::host::{Host, MAX_LABEL_LEN, MAX_NAME_LEN};
use fenzi_policy::host::{HostPattern, split_authority};
use fenzi_policy::mcp::inventory::Inventory;
use fenzi_policy::json::{self, JsonLimits};
use fenzi_policy::mcp::{EndpointPath, RequestView, ServerRule, classify, denial_body};
use fenzi_policy::secret_use::{Position, Sighting};
use fenzi_policy::tool_pattern::ToolPattern;
use fenzi_proxy::secrets::Scanner;
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeSet;
use std::sync::OnceLock;

const TOKENS: [(&str, &str); 2] = [
    (
        "A_KEY",
        "fenzi_ph_Ab0-_Zz9AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
    ),
    (
        "B_KEY",
        "fenzi_ph_Ab0-_Zz9AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB",
    ),
];
const MAX_BODY: usize = 4096;

fn scanner() -> &'static Scanner {
    static S: OnceLock<Scanner> = OnceLock::new();
    S.get_or_init(|| Scanner::from_tokens(TOKENS).unwrap())
}

fn rule(sel: u8) -> ServerRule {
    let endpoint = match sel % 3 {
        0 => EndpointPath::Exact("/mcp".into()),
        1 => EndpointPath::Prefix("/v1/mcp/".into()),
        _ => EndpointPath::Exact("/".into()),
    };
    ServerRule::with_tools(
        "fuzz",
        endpoint,
        vec![
            ToolPattern::parse("read_*").unwrap(),
            ToolPattern::parse("echo").unwrap(),
        ],
        vec![ToolPattern::parse("read_secret").unwrap()],
        JsonLimits {
            max_bytes: MAX_BODY,
            max_depth: 16,
        },
    )
}

/// Expands `0xFF s` into a spelling of a token (raw, percent-encoded, lower-case, cut short).
fn expand(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        match (field[i], field.get(i + 1)) {
            (0xFF, Some(&sel)) => {
                let token = TOKENS[(sel >> 7) as usize].1.as_bytes();
                match sel % 4 {
                    0 => out.extend_from_slice(token),
                    1 => token
                        .iter()
                        .for_each(|b| out.extend(format!("%{b:02X}").bytes())),
                    2 => out.extend(token.to_ascii_lowercase()),
                    _ => out.extend_from_slice(&token[..token.len() - 1]),
                }
                i += 2;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

// ---------------------------------------------------------------- hosts

fn check_host(text: &str) {
    let Ok(host) = Host::parse(text) else { return };
    let shown = host.to_string();
    assert_eq!(
        Host::parse(&shown).as_ref(),
        Ok(&host),
        "display of {host:?} is not canonical"
    );
    assert_eq!(
        Host::parse(&text.to_ascii_uppercase()).as_ref(),
        Ok(&host),
        "host parsing depends on case: {text:?}"
    );
    if !text.ends_with('.') && !text.contains([':', '[']) && text.len() < 300 {
        assert_eq!(
            Host::parse(&format!("{text}.")).as_ref(),
            Ok(&host),
            "a root dot changes {text:?}"
        );
    }
    match &host {
        Host::Name(name) => {
            assert!(
                !name.is_empty() && name.len() <= MAX_NAME_LEN,
                "name length: {name:?}"
            );
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(&b)),
                "name charset: {name:?}"
            );
            for label in name.split('.') {
                assert!(
                    !label.is_empty() && label.len() <= MAX_LABEL_LEN,
                    "label: {name:?}"
                );
            }
            let last = name.rsplit('.').next().unwrap();
            let hex = last.strip_prefix("0x");
            assert!(
                !last.bytes().all(|b| b.is_ascii_digit())
                    && !hex.is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit())),
                "a name ending in a numeric label: {name:?}"
            );
            // A resolver must not read it as an address either.
            assert!(
                name.parse::<std::net::IpAddr>().is_err(),
                "name that is an IP: {name:?}"
            );
        }
        Host::Ip(ip) => assert_eq!(host.ip(), Some(*ip)),
    }
}

fn check_authority(text: &str) {
    let Ok((host, port)) = split_authority(text) else {
        return;
    };
    check_host(&host.to_string());
    let port = port.unwrap_or(443);
    assert_ne!(port, 0, "port 0 accepted: {text:?}");
    let back = split_authority(&host.authority(port));
    assert_eq!(
        back,
        Ok((host.clone(), Some(port))),
        "authority form of {text:?}"
    );
    // The exact pattern for this destination matches it, and only on its port.
    let exact = HostPattern::for_host(host.clone(), port);
    assert!(exact.matches(&host, port));
    assert!(!exact.matches(&host, port.wrapping_add(1).max(1)) || port == u16::MAX);
}

fn check_pattern(text: &str, host_text: &str) {
    let Ok(pattern) = HostPattern::parse(text) else {
        return;
    };
    let shown = pattern.to_string();
    assert_eq!(
        HostPattern::parse(&shown).as_ref(),
        Ok(&pattern),
        "pattern {text:?} does not re-parse from {shown:?}"
    );
    assert!(pattern.overlaps(&pattern));
    if let Ok((host, port)) = split_authority(host_text) {
        let port = port.unwrap_or(443);
        let exact = HostPattern::for_host(host.clone(), port);
        assert_eq!(
            pattern.matches(&host, port),
            pattern.overlaps(&exact),
            "matches and overlaps disagree: {text:?} / {host_text:?}"
        );
        if pattern.matches(&host, port) {
            assert_eq!(pattern.port, port);
            if let Some(ip) = pattern.exact_ip() {
                assert_eq!(host.ip(), Some(ip), "an IP pattern matched another host");
            }
            if host.ip().is_some() {
                assert!(
                    pattern.exact_ip().is_some(),
                    "a wildcard or name matched an IP"
                );
            }
        }
    }
}

// ---------------------------------------------------------------- classifier

fn fold_eq(a: &str, b: &str) -> bool {
    let f = |c: u8| {
        if c == b'_' {
            b'-'
        } else {
            c.to_ascii_lowercase()
        }
    };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| f(x) == f(y))
}

fn values<'a>(h: &'a [(&'a str, &'a [u8])], name: &'a str) -> impl Iterator<Item = &'a [u8]> {
    h.iter()
        .filter(move |(n, _)| fold_eq(n, name))
        .map(|(_, v)| *v)
}

fn trim(v: &[u8]) -> &[u8] {
    let s = v
        .iter()
        .position(|b| !b" \t".contains(b))
        .unwrap_or(v.len());
    let e = v
        .iter()
        .rposition(|b| !b" \t".contains(b))
        .map_or(s, |i| i + 1);
    &v[s..e]
}

/// RFC 3986 origin-form, reimplemented independently of the classifier.
fn strict_target(t: &str) -> bool {
    let b = t.as_bytes();
    if b.first() != Some(&b'/') {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            if !(b.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
                && b.get(i + 2).is_some_and(u8::is_ascii_hexdigit))
            {
                return false;
            }
            i += 3;
            continue;
        }
        if !(b[i].is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?".contains(&b[i])) {
            return false;
        }
        i += 1;
    }
    true
}

fn plain_below(rest: &str) -> bool {
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    !rest.contains(['%', ';', '\\'])
        && (rest.is_empty()
            || rest
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."))
}

fn check_classify(sel: u8, method: &str, target: &str, headers: &[(&str, &[u8])], body: &[u8]) {
    let server = rule(sel);
    let req = RequestView {
        method,
        path: target,
        headers,
        body,
    };
    let inventory = Inventory::unpinned();
    let d = classify(&server, &inventory, &req);
    assert_eq!(
        classify(&server, &inventory, &req),
        d,
        "classify is not deterministic"
    );
    let path = target.split_once('?').map_or(target, |(p, _)| p);

    if d.overall.is_allowed() {
        assert!(
            matches!(method, "POST" | "GET" | "DELETE"),
            "allowed method {method:?}"
        );
        assert!(
            strict_target(target),
            "allowed a non-strict target {target:?}"
        );
        if method == "POST" {
            let cts: Vec<_> = values(headers, "content-type").collect();
            assert_eq!(
                cts.len(),
                1,
                "allowed POST without exactly one Content-Type"
            );
            let ct = trim(cts[0]).to_ascii_lowercase();
            assert!(
                ct.starts_with(b"application/json"),
                "allowed Content-Type {ct:?}"
            );
            for v in values(headers, "content-encoding") {
                for c in v.split(|&b| b == b',') {
                    assert!(
                        trim(c).eq_ignore_ascii_case(b"identity"),
                        "allowed a coded body"
                    );
                }
            }
            for v in values(headers, "transfer-encoding") {
                for c in v.split(|&b| b == b',') {
                    assert!(
                        trim(c).eq_ignore_ascii_case(b"chunked"),
                        "allowed a transfer coding"
                    );
                }
            }
            assert!(body.len() <= MAX_BODY);
            assert!(!d.messages.is_empty(), "an allowed POST with no messages");
            for m in &d.messages {
                assert!(
                    m.decision.is_allowed(),
                    "allowed overall with a denied message"
                );
                if let Some(t) = &m.tool {
                    assert!(t != "read_secret", "deny must win");
                    assert!(
                        t == "echo"
                            || (t.starts_with("read_")
                                && fenzi_policy::tool_pattern::is_plain_tool_name(t)),
                        "allowed a tool no pattern allows: {t:?}"
                    );
                }
            }
        } else {
            assert!(body.is_empty(), "allowed {method} with a body");
            assert!(
                values(headers, "transfer-encoding").next().is_none(),
                "allowed chunked {method}"
            );
            for v in values(headers, "content-length") {
                assert!(
                    trim(v).iter().all(|&b| b == b'0'),
                    "allowed {method} announcing a body"
                );
            }
            let on_endpoint = match &server.endpoint {
                EndpointPath::Exact(e) => path == e,
                EndpointPath::Prefix(p) => {
                    path == p.as_str()
                        || path == p.trim_end_matches('/')
                        || path.strip_prefix(p.as_str()).is_some_and(plain_below)
                }
            };
            let metadata = method == "GET"
                && path
                    .strip_prefix("/.well-known/")
                    .is_some_and(|r| !r.is_empty() && plain_below(r));
            assert!(
                on_endpoint || metadata,
                "allowed {method} of {path:?} outside the endpoint"
            );
        }
    } else {
        let reply = denial_body(&d, &req);
        let limits = JsonLimits {
            max_bytes: 1 << 20,
            max_depth: 64,
        };
        assert!(
            json::parse(&reply, &limits).is_ok(),
            "denial body is not strict JSON"
        );
        // Tokens travel in queries and headers: a denial echoes only the method, path, JSON-RPC
        // method and tool, so it may only hold a placeholder one of those held.
        let s = scanner();
        let mut may: BTreeSet<&str> = s.find_in(method.as_bytes()).into_iter().collect();
        may.extend(s.find_in(path.as_bytes()));
        may.extend(s.find_in(body));
        for name in s.find_in(&reply) {
            assert!(
                may.contains(name),
                "denial body echoes {name} from the query or headers"
            );
        }
    }

    // Header-name case is not meaning: upper-casing every name gives the same verdict.
    let upper: Vec<String> = headers
        .iter()
        .map(|(n, _)| n.to_ascii_uppercase())
        .collect();
    let upper_headers: Vec<(&str, &[u8])> = upper
        .iter()
        .zip(headers)
        .map(|(n, (_, v))| (n.as_str(), *v))
        .collect();
    let du = classify(
        &server,
        &inventory,
        &RequestView {
            headers: &upper_headers,
            ..req
        },
    );
    assert_eq!(
        du.overall.verdict, d.overall.verdict,
        "header-name case changed the verdict"
    );
    // A query string is not part of the path: adding one to a strict target keeps the verdict.
    if !target.contains('?') && strict_target(target) {
        let with_query = format!("{target}?q=1");
        let dq = classify(
            &server,
            &inventory,
            &RequestView {
                path: &with_query,
                ..req
            },
        );
        assert_eq!(
            dq.overall.verdict, d.overall.verdict,
            "a query changed the verdict"
        );
    }
}

// ---------------------------------------------------------------- secrets in the head

fn check_secrets(authority: &str, method: &[u8], target: &[u8], headers: &[(&[u8], &[u8])]) {
    let s = scanner();
    let sightings = s.scan_authority(authority);
    let found = s.find_in(authority.as_bytes());
    assert_eq!(
        sightings
            .iter()
            .map(|x| x.secret.as_str())
            .collect::<Vec<_>>(),
        found,
        "scan_authority differs from find_in"
    );
    assert!(sightings.iter().all(|x| x.position == Position::Authority));
    let lower = authority.to_ascii_lowercase();
    for (name, token) in TOKENS {
        if lower.contains(&token.to_ascii_lowercase()) {
            assert!(found.contains(&name), "{name} in the authority not found");
        }
    }
    let redacted = s.redact(authority);
    assert!(
        s.find_in(redacted.as_bytes()).is_empty(),
        "redact left a placeholder"
    );
    if found.is_empty() {
        assert_eq!(
            redacted, authority,
            "redact changed text without placeholders"
        );
    }

    // scan_head over what hyper would hand the proxy.
    let Ok(m) = http::Method::from_bytes(method) else {
        return;
    };
    let Ok(uri) = http::Uri::try_from(target) else {
        return;
    };
    let mut map = http::HeaderMap::new();
    for (n, v) in headers {
        if let (Ok(n), Ok(v)) = (
            http::HeaderName::from_bytes(n),
            http::HeaderValue::from_bytes(v),
        ) {
            map.append(n, v);
        }
    }
    let sighted = s.scan_head(&m, &uri, &map);
    // A header value's sighting names a header the request has; a query sighting is in the
    // query. Then compare by part, the name of the header or parameter left out.
    for x in &sighted {
        if x.position == Position::HeaderValue {
            let field = x.field.as_deref().expect("a header value sighting names its header");
            assert!(map.contains_key(field), "{x:?} names a header the request lacks");
        }
        if matches!(x.position, Position::Query | Position::QueryName) {
            assert!(uri.query().is_some(), "{x:?} without a query");
        }
    }
    let got: BTreeSet<Sighting> = sighted
        .into_iter()
        .map(|x| {
            let part = match x.position {
                Position::QueryName => Position::Query,
                p => p,
            };
            Sighting::new(x.secret, part)
        })
        .collect();
    let mut want = BTreeSet::new();
    let mut add = |bytes: &[u8], pos: Position| {
        for name in s.find_in(bytes) {
            want.insert(Sighting::new(name, pos));
        }
    };
    add(m.as_str().as_bytes(), Position::Method);
    if let Some(a) = uri.authority() {
        add(a.as_str().as_bytes(), Position::Authority);
    }
    add(uri.path().as_bytes(), Position::Path);
    if let Some(q) = uri.query() {
        add(q.as_bytes(), Position::Query);
    }
    for (n, v) in &map {
        add(n.as_str().as_bytes(), Position::HeaderName);
        add(v.as_bytes(), Position::HeaderValue);
    }
    // Everything found part by part is reported; anything more can only come from decoded
    // `Basic` credentials, in a header value.
    assert!(
        want.is_subset(&got),
        "scan_head missed {:?}",
        want.difference(&got)
    );
    for extra in got.difference(&want) {
        assert_eq!(
            extra.position,
            Position::HeaderValue,
            "scan_head invented {extra:?}"
        );
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let mut lines = rest.split(|&b| b == b'\n');
    let authority = expand(lines.next().unwrap_or_default());
    let pattern = lines.next().unwrap_or_default().to_vec();
    let method = expand(lines.next().unwrap_or_default());
    let target = expand(lines.next().unwrap_or_default());
    let mut raw_headers = vec![];
    for line in lines.by_ref() {
        if line.is_empty() {
            break;
        }
        let line = expand(line);
        let (n, v) = match line.iter().position(|&b| b == b':') {
            Some(i) => (line[..i].to_vec(), line[i + 1..].to_vec()),
            None => (line, vec![]),
        };
        raw_headers.push((n, v));
    }
    let body: Vec<u8> = lines.collect::<Vec<_>>().join(&b'\n');

    let authority = String::from_utf8_lossy(&authority);
    let pattern = String::from_utf8_lossy(&pattern);
    check_host(&authority);
    check_authority(&authority);
    check_pattern(&pattern, &authority);

    let method_s = String::from_utf8_lossy(&method);
    let target_s = String::from_utf8_lossy(&target);
    let names: Vec<String> = raw_headers
        .iter()
        .map(|(n, _)| String::from_utf8_lossy(n).into_owned())
        .collect();
    let headers: Vec<(&str, &[u8])> = names
        .iter()
        .zip(&raw_headers)
        .map(|(n, (_, v))| (n.as_str(), v.as_slice()))
        .collect();
    check_classify(sel, &method_s, &target_s, &headers, &body);

    let head: Vec<(&[u8], &[u8])> = raw_headers
        .iter()
        .map(|(n, v)| (n.as_slice(), v.as_slice()))
        .collect();
    check_secrets(&authority, &method, &target, &head);
});
