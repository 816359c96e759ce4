//! Table tests for host parsing, host patterns and the internal-address classifier, driven by the
//! files in `testdata/hosts/` (format in `testdata/hosts/README.md`). Every failing row is reported
//! as `file:line`; all rows run before the test fails.

use fenzi_policy::host::{Host, HostPattern, split_authority};
use fenzi_policy::ip::{embedded_ipv4, internal_range};
use std::net::{IpAddr, Ipv6Addr};
use std::path::PathBuf;

fn table_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/hosts")
}

/// Undoes the escapes of the table format: `\xHH`, `\u{H..}`, `\\`, and `<empty>`.
fn unescape(token: &str) -> Result<String, String> {
    if token == "<empty>" {
        return Ok(String::new());
    }
    let mut out = String::new();
    let mut chars = token.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('\\') => out.push('\\'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                let byte = u8::from_str_radix(&hex, 16).map_err(|_| format!("bad \\x{hex}"))?;
                if byte >= 0x80 {
                    return Err(format!("\\x{hex} is not ASCII; use \\u{{..}}"));
                }
                out.push(char::from(byte));
            }
            Some('u') => {
                if chars.next() != Some('{') {
                    return Err("\\u must be followed by {".into());
                }
                let hex: String = chars.by_ref().take_while(|&c| c != '}').collect();
                let code =
                    u32::from_str_radix(&hex, 16).map_err(|_| format!("bad \\u{{{hex}}}"))?;
                out.push(char::from_u32(code).ok_or(format!("bad scalar {hex}"))?);
            }
            other => return Err(format!("unknown escape \\{other:?}")),
        }
    }
    Ok(out)
}

/// One data row: its location, its columns (unescaped), and the raw columns for `err` messages.
struct Row {
    at: String,
    cols: Vec<String>,
}

impl Row {
    /// The expected error text: every column after `err`, joined by one space.
    fn err_text(&self, from: usize) -> String {
        self.cols[from..].join(" ")
    }
}

/// Reads a table; rows that cannot even be unescaped are reported as failures.
fn rows(file: &str, failures: &mut Vec<String>) -> Vec<Row> {
    let path = table_dir().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = format!("testdata/hosts/{file}:{}", i + 1);
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let cols: Result<Vec<String>, String> = trimmed.split_whitespace().map(unescape).collect();
        match cols {
            Ok(cols) => out.push(Row { at, cols }),
            Err(e) => failures.push(format!("{at}: unreadable row: {e}")),
        }
    }
    out
}

/// Checks an `err TEXT` expectation against a result.
fn expect_err<T: std::fmt::Debug, E: std::fmt::Display>(
    row: &Row,
    from: usize,
    got: Result<T, E>,
    failures: &mut Vec<String>,
) {
    let want = row.err_text(from);
    match got {
        Ok(v) => failures.push(format!("{}: expected error {want:?}, got {v:?}", row.at)),
        Err(e) if !e.to_string().contains(&want) => failures.push(format!(
            "{}: expected error containing {want:?}, got {:?}",
            row.at,
            e.to_string()
        )),
        Err(_) => {}
    }
}

fn finish(name: &str, count: usize, min_rows: usize, failures: Vec<String>) {
    assert!(
        count >= min_rows,
        "{name}: only {count} rows read, expected at least {min_rows}"
    );
    assert!(
        failures.is_empty(),
        "{} of {count} rows failed in {name}:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn bad_shape(row: &Row, failures: &mut Vec<String>) {
    failures.push(format!("{}: malformed row {:?}", row.at, row.cols));
}

#[test]
fn parse_table() {
    let mut failures = Vec::new();
    let table = rows("parse.txt", &mut failures);
    for row in &table {
        let input = &row.cols[0];
        let got = Host::parse(input);
        match row.cols.get(1).map(String::as_str) {
            Some("err") => expect_err(row, 2, got, &mut failures),
            Some(kind @ ("name" | "ip")) if row.cols.len() == 3 => {
                let want = &row.cols[2];
                match got {
                    Ok(host) => {
                        let kind_ok =
                            matches!((&host, kind), (Host::Name(_), "name") | (Host::Ip(_), "ip"));
                        let shown = host.to_string();
                        if !kind_ok || &shown != want {
                            failures
                                .push(format!("{}: expected {kind} {want}, got {host:?}", row.at));
                        } else if Host::parse(&shown).as_ref() != Ok(&host) {
                            failures
                                .push(format!("{}: {shown} does not parse back to itself", row.at));
                        }
                    }
                    Err(e) => {
                        failures.push(format!("{}: expected {kind} {want}, got error {e}", row.at))
                    }
                }
            }
            _ => bad_shape(row, &mut failures),
        }
    }
    finish("parse.txt", table.len(), 200, failures);
}

#[test]
fn authority_table() {
    let mut failures = Vec::new();
    let table = rows("authority.txt", &mut failures);
    for row in &table {
        let got = split_authority(&row.cols[0]);
        match row.cols.get(1).map(String::as_str) {
            Some("err") => expect_err(row, 2, got, &mut failures),
            Some("ok") if row.cols.len() == 4 => {
                let want_port = match row.cols[3].as_str() {
                    "-" => None,
                    p => Some(p.parse::<u16>().expect("port column")),
                };
                match got {
                    Ok((host, port)) if host.to_string() == row.cols[2] && port == want_port => {}
                    other => failures.push(format!(
                        "{}: expected {} {:?}, got {other:?}",
                        row.at, row.cols[2], want_port
                    )),
                }
            }
            _ => bad_shape(row, &mut failures),
        }
    }
    finish("authority.txt", table.len(), 40, failures);
}

#[test]
fn pattern_table() {
    let mut failures = Vec::new();
    let table = rows("patterns.txt", &mut failures);
    for row in &table {
        let got = HostPattern::parse(&row.cols[0]);
        match row.cols.get(1).map(String::as_str) {
            Some("err") => expect_err(row, 2, got, &mut failures),
            Some("ok") if row.cols.len() == 4 => {
                let want_ip: Option<IpAddr> = match row.cols[3].as_str() {
                    "-" => None,
                    ip => Some(ip.parse().expect("exact ip column")),
                };
                match got {
                    Ok(pattern) => {
                        let shown = pattern.to_string();
                        if shown != row.cols[2] || pattern.exact_ip() != want_ip {
                            failures.push(format!(
                                "{}: expected {} / {want_ip:?}, got {shown} / {:?}",
                                row.at,
                                row.cols[2],
                                pattern.exact_ip()
                            ));
                        } else if HostPattern::parse(&shown).as_ref() != Ok(&pattern) {
                            failures
                                .push(format!("{}: {shown} does not parse back to itself", row.at));
                        }
                    }
                    Err(e) => failures.push(format!(
                        "{}: expected {}, got error {e}",
                        row.at, row.cols[2]
                    )),
                }
            }
            _ => bad_shape(row, &mut failures),
        }
    }
    finish("patterns.txt", table.len(), 80, failures);
}

#[test]
fn match_table() {
    let mut failures = Vec::new();
    let table = rows("matches.txt", &mut failures);
    for row in &table {
        if row.cols.len() != 4 || !matches!(row.cols[3].as_str(), "match" | "no") {
            bad_shape(row, &mut failures);
            continue;
        }
        let (pattern, host, port) = match (
            HostPattern::parse(&row.cols[0]),
            Host::parse(&row.cols[1]),
            row.cols[2].parse::<u16>(),
        ) {
            (Ok(p), Ok(h), Ok(port)) => (p, h, port),
            other => {
                failures.push(format!("{}: row does not parse: {other:?}", row.at));
                continue;
            }
        };
        let want = row.cols[3] == "match";
        if pattern.matches(&host, port) != want {
            failures.push(format!(
                "{}: {pattern} vs {} port {port}: expected {}",
                row.at,
                host.authority(port),
                row.cols[3]
            ));
        }
        // Matching implies overlapping with the pattern for exactly that host.
        if want && !pattern.overlaps(&HostPattern::for_host(host.clone(), port)) {
            failures.push(format!("{}: matches but does not overlap its host", row.at));
        }
    }
    finish("matches.txt", table.len(), 60, failures);
}

#[test]
fn overlap_table() {
    let mut failures = Vec::new();
    let table = rows("overlaps.txt", &mut failures);
    for row in &table {
        if row.cols.len() != 3 || !matches!(row.cols[2].as_str(), "overlap" | "disjoint") {
            bad_shape(row, &mut failures);
            continue;
        }
        let (a, b) = match (
            HostPattern::parse(&row.cols[0]),
            HostPattern::parse(&row.cols[1]),
        ) {
            (Ok(a), Ok(b)) => (a, b),
            other => {
                failures.push(format!("{}: row does not parse: {other:?}", row.at));
                continue;
            }
        };
        let want = row.cols[2] == "overlap";
        for (x, y) in [(&a, &b), (&b, &a)] {
            if x.overlaps(y) != want {
                failures.push(format!(
                    "{}: {x} overlaps {y}: expected {}",
                    row.at, row.cols[2]
                ));
            }
        }
    }
    finish("overlaps.txt", table.len(), 30, failures);
}

#[test]
fn ip_table() {
    let mut failures = Vec::new();
    let table = rows("ip.txt", &mut failures);
    let (mut internal, mut public) = (0, 0);
    for row in &table {
        if row.cols.len() != 2 {
            bad_shape(row, &mut failures);
            continue;
        }
        let addr = match Host::parse(&row.cols[0]) {
            Ok(Host::Ip(ip)) => ip,
            other => {
                failures.push(format!("{}: not an IP address: {other:?}", row.at));
                continue;
            }
        };
        let got = internal_range(addr).map_or("public", |r| r.label());
        if row.cols[1] == "public" {
            public += 1;
        } else {
            internal += 1;
        }
        if got != row.cols[1] {
            failures.push(format!(
                "{}: {addr}: expected {}, got {got}",
                row.at, row.cols[1]
            ));
        }
        // Display and label agree.
        if let Some(range) = internal_range(addr)
            && range.to_string() != range.label()
        {
            failures.push(format!(
                "{}: Display of {range:?} differs from its label",
                row.at
            ));
        }
    }
    assert!(
        internal >= 100 && public >= 30,
        "ip.txt: {internal} internal / {public} public rows"
    );
    finish("ip.txt", table.len(), 200, failures);
}

#[test]
fn embedded_table() {
    let mut failures = Vec::new();
    let table = rows("embedded.txt", &mut failures);
    for row in &table {
        if row.cols.len() != 2 {
            bad_shape(row, &mut failures);
            continue;
        }
        let Ok(v6) = row.cols[0].parse::<Ipv6Addr>() else {
            failures.push(format!("{}: not an IPv6 address", row.at));
            continue;
        };
        let got: Vec<String> = embedded_ipv4(v6).iter().map(|v4| v4.to_string()).collect();
        let got = if got.is_empty() {
            "none".to_string()
        } else {
            got.join(",")
        };
        if got != row.cols[1] {
            failures.push(format!(
                "{}: {v6}: expected {}, got {got}",
                row.at, row.cols[1]
            ));
        }
    }
    finish("embedded.txt", table.len(), 20, failures);
}
