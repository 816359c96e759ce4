//! Table tests for the secret-use decision, driven by `testdata/secrets/*.txt` (format in
//! `testdata/secrets/README.md`). Every failing row is reported as `file:line`; all rows run before
//! the test fails.

use fenzi_policy::Reason;
use fenzi_policy::engine::{SecretBinding, SecretSource};
use fenzi_policy::host::{HostPattern, split_authority};
use fenzi_policy::secret_position::SecretPosition;
use fenzi_policy::secret_use::{Position, RequestFacts, SecretUse, Sighting, decide};
use std::path::PathBuf;

fn table_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata/secrets")
}

fn parse_bind(cols: &[&str]) -> Result<SecretBinding, String> {
    let [name, hosts, flags @ ..] = cols else {
        return Err("bind needs NAME HOSTS".into());
    };
    let hosts = hosts
        .split(',')
        .map(|h| HostPattern::parse(h).map_err(|e| e.to_string()))
        .collect::<Result<Vec<_>, _>>()?;
    let mut body = false;
    let mut bearer = false;
    let mut positions = None;
    let mut sources = vec![SecretSource::TopLevel];
    let mut entry = None;
    for flag in flags {
        match *flag {
            "body" => body = true,
            "bearer" => bearer = true,
            f if f.starts_with("in=") => {
                let list = f["in=".len()..]
                    .split(',')
                    .map(|p| SecretPosition::parse(p).map_err(|e| format!("{p}: {e:?}")))
                    .collect::<Result<Vec<_>, _>>()?;
                // As the engine compiles `in:`: bodies exactly when listed.
                body = list.contains(&SecretPosition::Body);
                positions = Some(list);
            }
            // A `token: true` server's token, as the engine compiles it.
            f if f.starts_with("token=") => {
                sources = vec![SecretSource::ServerToken {
                    server: f["token=".len()..].to_string(),
                }];
                entry = Some(f["token=".len()..].to_string());
                bearer = true;
                positions = Some(vec![SecretPosition::Header("Authorization".into())]);
            }
            other => return Err(format!("unknown bind flag {other}")),
        }
    }
    Ok(SecretBinding {
        programs: Default::default(),
        name: name.to_string(),
        hosts,
        body,
        sources,
        default_bearer: bearer,
        positions,
        entry,
    })
}

fn parse_sightings(text: &str) -> Result<Vec<Sighting>, String> {
    if text == "-" {
        return Ok(vec![]);
    }
    text.split(',')
        .map(|item| {
            let (name, pos) = item
                .split_once('@')
                .ok_or(format!("sighting {item} is not NAME@POSITION"))?;
            let (pos, field) = match pos.split_once(':') {
                Some((p, f)) => (p, Some(f)),
                None => (pos, None),
            };
            let position = Position::from_label(pos).ok_or(format!("unknown position {pos}"))?;
            Ok(match field {
                Some(f) => Sighting::in_field(name, position, f),
                None => Sighting::new(name, position),
            })
        })
        .collect()
}

/// The decision, rendered in the table's expectation syntax.
fn render(answer: &SecretUse) -> String {
    let mut out = vec![if answer.is_allowed() { "allow" } else { "deny" }.to_string()];
    if !answer.substitute.is_empty() {
        let grants: Vec<String> = answer
            .substitute
            .iter()
            .map(|g| {
                if g.body {
                    format!("{}+body", g.secret)
                } else {
                    g.secret.clone()
                }
            })
            .collect();
        out.push(format!("sub={}", grants.join(",")));
    }
    if let Some(name) = &answer.add_bearer {
        out.push(format!("bearer={name}"));
    }
    if !answer.left_as_is.is_empty() {
        let items: Vec<String> = answer.left_as_is.iter().map(|s| s.to_string()).collect();
        out.push(format!("as_is={}", items.join(",")));
    }
    // A denial for positions names each place in its rule (`secrets.K.in query:q`).
    let places: Vec<&str> = answer
        .decision
        .rule
        .split(", ")
        .filter(|r| r.contains(".in ") || r.contains(".token "))
        .filter_map(|r| r.rsplit(' ').next())
        .collect();
    if !answer.is_allowed() && !places.is_empty() {
        out.push(format!("at={}", places.join(",")));
    }
    if !answer.secrets.is_empty() {
        out.push(format!("secrets={}", answer.secrets.join(",")));
    }
    out.join(" ")
}

/// Invariants that hold on every row, whatever the table says.
fn check_invariants(answer: &SecretUse, sightings: &[Sighting]) -> Result<(), String> {
    match answer.decision.reason() {
        None => {
            if answer.secrets.is_empty() == answer.changes_request() {
                return Err("secrets must be exactly the names substituted or added".into());
            }
        }
        Some(Reason::CredentialEndpointMismatch) => {
            if answer.changes_request() || !answer.left_as_is.is_empty() {
                return Err("a denial must grant nothing".into());
            }
            if answer.secrets.is_empty() {
                return Err("a denial must name the secret".into());
            }
            for name in &answer.secrets {
                if !answer.decision.message.contains(name.as_str()) {
                    return Err(format!("the denial message does not name {name}"));
                }
                if !sightings.iter().any(|s| &s.secret == name) {
                    return Err(format!("the denial names {name}, which was not seen"));
                }
            }
        }
        Some(other) => return Err(format!("unexpected reason {other}")),
    }
    Ok(())
}

fn run_file(path: &std::path::Path, failures: &mut Vec<String>) -> usize {
    let file = path.file_name().unwrap().to_string_lossy().to_string();
    let text = std::fs::read_to_string(path).unwrap();
    let mut bindings: Vec<SecretBinding> = vec![];
    let mut rows = 0;
    for (i, line) in text.lines().enumerate() {
        let at = format!("testdata/secrets/{file}:{}", i + 1);
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols[0] == "bind" {
            match parse_bind(&cols[1..]) {
                Ok(b) => bindings.push(b),
                Err(e) => failures.push(format!("{at}: {e}")),
            }
            continue;
        }
        rows += 1;
        let result = (|| -> Result<(), String> {
            let [authority, transport, auth, sightings, expected @ ..] = cols.as_slice() else {
                return Err("a row needs HOST:PORT tls|plain auth|noauth SIGHTINGS VERDICT".into());
            };
            // `HOST:PORT@ENTRY` names the entry the request's path belongs to, `@-` none; without
            // it, a host with one `token=` entry is that entry's (as one entry's host is).
            let (authority, entry) = match authority.split_once('@') {
                Some((a, "-")) => (a, None),
                Some((a, e)) => (a, Some(e.to_string())),
                None => (*authority, None),
            };
            let (host, port) = split_authority(authority).map_err(|e| e.to_string())?;
            let port = port.ok_or("the destination needs a port")?;
            let written = cols[0].contains('@');
            let entry = entry.or_else(|| {
                let mut own = bindings
                    .iter()
                    .filter(|b| !written && b.is_bound_to(&host, port))
                    .filter_map(|b| b.entry.clone());
                own.next().filter(|_| own.next().is_none())
            });
            let tls = match *transport {
                "tls" => true,
                "plain" => false,
                other => return Err(format!("transport {other} is not tls|plain")),
            };
            let has_authorization = match *auth {
                "auth" => true,
                "noauth" => false,
                other => return Err(format!("{other} is not auth|noauth")),
            };
            let sightings = parse_sightings(sightings)?;
            let facts = RequestFacts {
                host: &host,
                port,
                entry: entry.as_deref(),
                tls,
                has_authorization,
                sightings: &sightings,
            };
            let answer = decide(&bindings, &facts);
            check_invariants(&answer, &sightings)?;
            // The scanner's order must not matter.
            let mut reversed = sightings.clone();
            reversed.reverse();
            let again = decide(
                &bindings,
                &RequestFacts {
                    sightings: &reversed,
                    ..facts
                },
            );
            if again != answer {
                return Err("the answer depends on the order of the sightings".into());
            }
            let got = render(&answer);
            let want = expected.join(" ");
            if got != want {
                return Err(format!(
                    "expected `{want}`, got `{got}` ({})",
                    answer.decision.message
                ));
            }
            Ok(())
        })();
        if let Err(e) = result {
            failures.push(format!("{at}: {e}"));
        }
    }
    rows
}

#[test]
fn secret_use_tables() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(table_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    assert!(files.len() >= 3, "the tables are missing");
    let mut failures = vec![];
    let mut rows = 0;
    for path in &files {
        rows += run_file(path, &mut failures);
    }
    assert!(rows >= 50, "only {rows} rows ran");
    assert!(
        failures.is_empty(),
        "{} of {rows} rows failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}
