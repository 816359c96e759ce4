//! Table test of the config loader: every `testdata/config/*.case` file (format in
//! `testdata/config/README.md`) is loaded as machine and/or project file and its outcome compared
//! with the case's expectation. All mismatches are reported together, by file.

use fenzi_policy::config::{
    self, Config, ConfigError, ConfigErrors, ListMode, Origin, ServerKind, ServerSurface,
    ToolRules, decode, load,
};
use std::path::{Path, PathBuf};

fn cases_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../testdata/config")
}

/// One input file of a case.
struct Input {
    name: String,
    bytes: Vec<u8>,
}

#[derive(Default)]
struct Case {
    /// A team policy (no signature here: `fenzi_policy::team` checks those); its name is its url.
    team: Option<Input>,
    machine: Option<Input>,
    project: Option<Input>,
    expect: Vec<String>,
}

/// `\t`, `\n`, `\r`, `\\`, `\xHH` (a raw byte) and `\u{H..}`; a line `@repeat N TEXT` is TEXT
/// N times followed by a newline.
fn unescape(body: &str) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    for line in body.split_inclusive('\n') {
        if let Some(rest) = line.strip_prefix("@repeat ") {
            let rest = rest.trim_end_matches('\n');
            let (n, text) = rest.split_once(' ').ok_or("@repeat needs N and TEXT")?;
            let n: usize = n.parse().map_err(|_| format!("bad @repeat count {n:?}"))?;
            let text = unescape(text)?;
            for _ in 0..n {
                out.extend_from_slice(&text);
            }
            out.push(b'\n');
            continue;
        }
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            if c != '\\' {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            match chars.next() {
                Some('t') => out.push(b'\t'),
                Some('n') => out.push(b'\n'),
                Some('r') => out.push(b'\r'),
                Some('\\') => out.push(b'\\'),
                Some('x') => {
                    let h: String = chars.by_ref().take(2).collect();
                    out.push(u8::from_str_radix(&h, 16).map_err(|_| format!("bad \\x{h}"))?);
                }
                Some('u') => {
                    let rest: String = chars.by_ref().take_while(|c| *c != '}').collect();
                    let hex = rest.strip_prefix('{').ok_or("\\u needs {HEX}")?;
                    let cp = u32::from_str_radix(hex, 16).map_err(|_| format!("bad \\u{hex}"))?;
                    let c = char::from_u32(cp).ok_or("\\u not a char")?;
                    let mut buf = [0u8; 4];
                    out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                }
                other => return Err(format!("unknown escape \\{other:?}")),
            }
        }
    }
    Ok(out)
}

fn parse_case(path: &Path) -> Result<Case, String> {
    let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
    let mut case = Case::default();
    // (header, body) pairs.
    let mut sections: Vec<(String, String)> = Vec::new();
    for line in text.split_inclusive('\n') {
        if let Some(h) = line.strip_prefix("=== ") {
            sections.push((h.trim().to_string(), String::new()));
        } else if let Some((_, body)) = sections.last_mut() {
            body.push_str(line);
        } else if !(line.starts_with('#') || line.trim().is_empty()) {
            return Err(format!("text before the first section: {line:?}"));
        }
    }
    for (header, body) in sections {
        let words: Vec<&str> = header.split_whitespace().collect();
        match words.as_slice() {
            ["expect"] => {
                case.expect = body
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty() && !l.starts_with('#'))
                    .map(String::from)
                    .collect();
            }
            [role @ ("team" | "machine" | "project"), name, opts @ ..] => {
                let bytes = match opts {
                    [] => body.into_bytes(),
                    ["escaped"] => unescape(&body)?,
                    ["from", file] => {
                        std::fs::read(cases_dir().join(file)).map_err(|e| format!("{file}: {e}"))?
                    }
                    _ => return Err(format!("bad section header {header:?}")),
                };
                let input = Some(Input {
                    name: name.to_string(),
                    bytes,
                });
                match *role {
                    "team" => case.team = input,
                    "machine" => case.machine = input,
                    _ => case.project = input,
                }
            }
            _ => return Err(format!("bad section header {header:?}")),
        }
    }
    if case.expect.is_empty() {
        return Err("no `=== expect` section".into());
    }
    if case.machine.is_none() && case.project.is_none() {
        return Err("no machine or project file".into());
    }
    Ok(case)
}

fn run(case: &Case) -> Result<Config, ConfigErrors> {
    fn decode_one(i: &Option<Input>) -> Result<Option<(&str, &str)>, ConfigErrors> {
        i.as_ref()
            .map(|i| decode(&i.bytes, &i.name).map(|t| (t, i.name.as_str())))
            .transpose()
    }
    let team = match decode_one(&case.team)? {
        Some((text, name)) => Some(config::parse_team(text, name)?.0),
        None => None,
    };
    let machine = decode_one(&case.machine);
    let project = decode_one(&case.project);
    match (machine, project) {
        (Ok(m), Ok(p)) if team.is_some() => config::load_under(team, m, p),
        (Ok(m), Ok(p)) => load(m, p),
        (Err(mut a), Err(b)) => {
            a.0.extend(b.0);
            Err(a)
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

fn list<T: std::fmt::Display>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// ` list=all pin=true resources=A,B prompts=C annotated=read_only`, each only when not the default.
fn surface(s: &ServerSurface, tools: &ToolRules) -> String {
    let mut out = String::new();
    if s.list != ListMode::Filter {
        out.push_str(&format!(" list={}", s.list.name()));
    }
    if s.pin {
        out.push_str(" pin=true");
    }
    if !s.resources.is_empty() {
        out.push_str(&format!(
            " resources={}",
            list(s.resources.iter().map(|p| &p.value))
        ));
    }
    if !s.prompts.is_empty() {
        out.push_str(&format!(
            " prompts={}",
            list(s.prompts.iter().map(|p| &p.value))
        ));
    }
    if !tools.allow_annotated.is_empty() {
        out.push_str(&format!(
            " annotated={}",
            list(tools.allow_annotated.iter().map(|a| a.value.name()))
        ));
    }
    if !tools.rules.is_empty() {
        out.push_str(&format!(" rules={}", tools.rules.len()));
    }
    if !tools.confirm.is_empty() {
        out.push_str(&format!(
            " confirm={}",
            list(tools.confirm.tools.iter().map(|p| &p.value))
        ));
    }
    if tools.confirm.timeout != fenzi_policy::config::model::confirm::DEFAULT_CONFIRM_TIMEOUT {
        out.push_str(&format!(
            " confirm_timeout={}",
            fenzi_policy::config::units::show_duration(tools.confirm.timeout)
        ));
    }
    for l in &s.limits {
        let origin = match (l.origin, l.project_on_machine) {
            (Origin::Team, _) => "team",
            (Origin::Machine, _) => "machine",
            (Origin::Project, false) => "project",
            (Origin::Project, true) => "project-on-machine",
        };
        out.push_str(&format!(" limit[{origin} {l}]"));
    }
    out
}

/// One line per element of a loaded config, for `= ...` expectations.
fn summary(c: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for h in &c.hosts {
        out.push(format!("host {}", h.value));
    }
    for s in &c.mcp {
        let origin = match s.origin {
            Origin::Team => "team",
            Origin::Machine => "machine",
            Origin::Project => "project",
        };
        let narrowed = if s.narrowed_by_project {
            " narrowed"
        } else {
            ""
        };
        let kind = match &s.kind {
            ServerKind::Remote {
                url,
                token,
                oauth,
                tools,
            } => format!(
                "remote {} {} {}{}{} allow={} deny={}{}",
                if url.tls { "https" } else { "http" },
                url.host.authority(url.port),
                url.path,
                if *token { " token" } else { "" },
                if *oauth { " oauth" } else { "" },
                list(tools.allow.iter().map(|p| &p.value)),
                list(tools.deny.iter().map(|p| &p.value)),
                surface(&s.surface, tools),
            ),
            ServerKind::Local {
                command,
                secrets,
                hosts,
                tools,
                run,
            } => format!(
                "local command={} secrets={} hosts={}{} allow={} deny={}{}",
                command.join(","),
                list(secrets.iter().map(|s| &s.value)),
                list(hosts.iter().map(|h| &h.value)),
                if *run == fenzi_policy::config::LocalRun::Host {
                    " run=host"
                } else {
                    ""
                },
                list(tools.allow.iter().map(|p| &p.value)),
                list(tools.deny.iter().map(|p| &p.value)),
                surface(&s.surface, tools),
            ),
            ServerKind::Account { provider, tools } => format!(
                "account {provider:?} allow={} deny={}{}",
                list(tools.allow.iter().map(|p| &p.value)),
                list(tools.deny.iter().map(|p| &p.value)),
                surface(&s.surface, tools),
            ),
        };
        out.push(format!("server {} {origin}{narrowed} {kind}", s.name));
    }
    for s in &c.secrets {
        let positions = match &s.positions {
            Some(p) => format!(" in={}", list(p.iter().map(|p| &p.value))),
            None => String::new(),
        };
        out.push(format!(
            "secret {} hosts={} body={}{positions}",
            s.name,
            list(s.hosts.iter().map(|h| &h.value)),
            s.body
        ));
    }
    for p in &c.private {
        let origin = match p.origin {
            Origin::Team => "team",
            Origin::Machine => "machine",
            Origin::Project => "project",
        };
        out.push(format!(
            "private {} {origin} {} {}",
            p.pattern,
            p.at.key,
            list(p.ranges.iter().map(|r| &r.value))
        ));
    }
    // `programs:` lists, each by the key it was written at, with the file it came from.
    let lists = c
        .mcp
        .iter()
        .flat_map(|s| &s.programs)
        .chain(c.secrets.iter().flat_map(|s| &s.programs))
        .chain(c.host_programs.iter().map(|h| &h.list));
    for l in lists {
        let origin = match l.origin {
            Origin::Team => "team",
            Origin::Machine => "machine",
            Origin::Project => "project",
        };
        out.push(format!(
            "programs {} {origin} {}",
            l.at.key,
            list(l.items.iter().map(|i| &i.value))
        ));
    }
    out
}

/// `FILE:LINE:COL KEY | SUBSTRING` against one error.
fn error_matches(expected: &str, e: &ConfigError) -> Result<(), String> {
    let (head, substring) = expected
        .split_once(" | ")
        .ok_or_else(|| format!("expectation {expected:?} has no ` | `"))?;
    let (place, key) = head.trim().split_once(' ').unwrap_or((head.trim(), "-"));
    let key = if key == "-" { "" } else { key };
    let at = e.at.as_ref().ok_or("error has no location")?;
    let actual_place = format!("{}:{}:{}", at.file, at.line, at.column);
    if actual_place != place || at.key != key || !e.message.contains(substring.trim()) {
        return Err(format!(
            "expected {place} {key:?} | {substring}\n       got {actual_place} {:?} | {}",
            at.key, e.message
        ));
    }
    Ok(())
}

fn check(case: &Case) -> Result<(), String> {
    let result = run(case);
    let mut problems = Vec::new();
    let never: Vec<&str> = case
        .expect
        .iter()
        .filter_map(|l| l.strip_prefix("never "))
        .collect();
    let expect: Vec<&String> = case
        .expect
        .iter()
        .filter(|l| !l.starts_with("never "))
        .collect();
    match (&result, expect.first().map(|s| s.as_str())) {
        (Ok(c), Some("ok")) => {
            let have = summary(c);
            for want in expect[1..].iter() {
                let want = want
                    .strip_prefix("= ")
                    .ok_or_else(|| format!("after `ok` only `= ...` lines: {want:?}"))?;
                if !have.iter().any(|h| h == want) {
                    problems.push(format!(
                        "missing `{want}` in the loaded config:\n    {}",
                        have.join("\n    ")
                    ));
                }
            }
        }
        (Ok(c), _) => problems.push(format!(
            "loaded without error, expected errors\n    {}",
            summary(c).join("\n    ")
        )),
        (Err(errs), Some("ok")) => problems.push(format!("expected ok, got:\n{errs}")),
        (Err(errs), _) => {
            if errs.0.len() != expect.len() {
                problems.push(format!(
                    "expected {} error(s), got {}:\n{errs}",
                    expect.len(),
                    errs.0.len()
                ));
            } else {
                for (want, e) in expect.iter().zip(&errs.0) {
                    if let Err(p) = error_matches(want, e) {
                        problems.push(p);
                    }
                }
            }
            // Invariants of every error: a place, a hint, and no value the case marks as secret.
            for e in &errs.0 {
                if e.at.is_none() || e.hint.as_deref().is_none_or(str::is_empty) {
                    problems.push(format!("error without a place or hint: {e}"));
                }
                for n in &never {
                    if e.to_string().contains(n) {
                        problems.push(format!("error repeats {n:?}: {e}"));
                    }
                }
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(problems.join("\n  "))
    }
}

#[test]
fn config_cases() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(cases_dir())
        .expect("testdata/config exists")
        .map(|e| e.expect("readable entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "case"))
        .collect();
    files.sort();
    let mut failures = Vec::new();
    for f in &files {
        let name = f.file_name().unwrap_or_default().to_string_lossy();
        let outcome = parse_case(f).and_then(|c| check(&c));
        if let Err(why) = outcome {
            failures.push(format!("{name}:\n  {why}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} config cases failed:\n\n{}",
        failures.len(),
        files.len(),
        failures.join("\n\n")
    );
    assert!(files.len() >= 60, "only {} cases", files.len());
}

/// Hostile YAML is refused before it costs anything. Not a benchmark: the bound is three orders
/// of magnitude above the expected time and only catches blow-ups (exponential alias expansion,
/// recursion per nesting level).
#[test]
/// Alias bombs, deep nesting and huge documents are refused by the loader's budgets (an unbounded
/// loader would hang or run out of memory here rather than return). How long refusal takes is a
/// benchmark question, not a test assertion.
fn hostile_yaml_is_refused() {
    let mut laughs = String::from(
        "version: 1\nhosts: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n",
    );
    for (i, name) in ["b", "c", "d", "e", "f", "g", "h", "i"].iter().enumerate() {
        let prev = ["a", "b", "c", "d", "e", "f", "g", "h"][i];
        laughs.push_str(&format!(
            "{name}: &{name} [{}]\n",
            vec![format!("*{prev}"); 9].join(",")
        ));
    }
    let inputs = [
        ("billion laughs", laughs),
        (
            "10,000 nested flow lists",
            "[".repeat(10_000) + &"]".repeat(10_000),
        ),
        ("10,000 nested block lists", "- ".repeat(10_000) + "x\n"),
        (
            "10,000 nested flow maps",
            "{a: ".repeat(10_000) + &"}".repeat(10_000),
        ),
        ("10,000 lines of ever deeper block maps", {
            let mut s = String::from("version: 1\n");
            for i in 0..10_000 {
                s.push_str(&" ".repeat(i % 400));
                s.push_str("a:\n");
            }
            s
        }),
        (
            "2 MiB of hosts",
            format!(
                "version: 1\nhosts:\n{}",
                "  - a.example.com\n".repeat(140_000)
            ),
        ),
    ];
    for (what, text) in inputs {
        let result = config::parse(&text, "fenzi.yaml", Origin::Project);
        assert!(result.is_err(), "{what} was accepted");
    }
}

mod never_panics {
    //! The loader returns errors, it never panics: random text, YAML-ish text, random bytes, and
    //! the demo policy with random text spliced in (which reaches the schema and merge rules).
    use super::*;
    use proptest::prelude::*;

    fn load_both(text: &str) {
        let _ = config::parse(text, "fenzi.yaml", Origin::Project);
        let _ = load(Some((text, "mcp.yaml")), Some((text, "fenzi.yaml")));
    }

    fn demo() -> String {
        std::fs::read_to_string(cases_dir().join("../policies/demo.yaml")).expect("demo policy")
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn on_any_text(text in "(?s).{0,300}") {
            load_both(&text);
        }

        #[test]
        fn on_yaml_like_text(text in "[-:{}\\[\\],&*!|>'\"#%@? \n\ta-z0-9._~]{0,300}") {
            load_both(&text);
        }

        #[test]
        fn on_any_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(text) = decode(&bytes, "fenzi.yaml") {
                load_both(text);
            }
        }

        #[test]
        fn on_a_mangled_policy(at in 0usize..2000, cut in 0usize..40, insert in "[-:{}\\[\\],*\"# \na-z0-9._]{0,12}") {
            let demo = demo();
            let mut at = at.min(demo.len());
            while !demo.is_char_boundary(at) {
                at -= 1;
            }
            let mut end = (at + cut).min(demo.len());
            while !demo.is_char_boundary(end) {
                end -= 1;
            }
            let text = format!("{}{insert}{}", &demo[..at], &demo[end..]);
            load_both(&text);
        }
    }
}
