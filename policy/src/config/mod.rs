//! Loading `fenzi.yaml` and the machine file: strict YAML parsing, validation of every rule in the
//! README's "Configuration" section, and the machine + project merge. Errors name the file, line, column and key.
//!
//! The pipeline, one module per step:
//! - [`decode`]: bytes to text (UTF-8 only; [`parse`] then drops a leading byte-order mark).
//! - `yaml`: text to a located tree under tight limits (one document; no anchors, aliases, merge
//!   keys, tags, directives or duplicate keys; YAML 1.2 booleans).
//! - `schema` (with `url`): one file's tree to the [`Config`] model, with every per-file rule.
//! - `merge`: machine + project, where the project may add and narrow but never widen; and under
//!   a team policy ([`parse_team`], [`merge_layers`]) team → machine → project, where neither
//!   layer below the team may add what the team policy does not admit.
//! - `rules`: the rules that span entries, on the merged set.
//!
//! Below the steps, what they all use: [`model`] (the types, each remembering where it was
//! written) and [`units`] (how rates, durations and sizes are written). Each module uses only
//! those listed before it in this order: `units`, `yaml`, `model`, `url`, `schema`, `merge`,
//! `rules`; this file runs them.
//!
//! [`parse`] runs the first three on one file; [`merge`] runs the last two and must be called
//! even for a single file (`merge(None, Some(project))`): only it checks the cross-entry rules.
//!
//! Decisions the README does not spell out (each one tested under `testdata/config/`):
//! - `version` is the integer 1; `"1"` and `1.0` are refused. A file declaring another version
//!   reports only that.
//! - Booleans are `true`/`false` (YAML 1.2); `yes`, `no`, `on`, `off` are refused, not read.
//! - A null value (`hosts:` with nothing after it) is refused everywhere; write `[]` or remove it.
//! - `tools.allow: []` is allowed (a server whose tools can be listed but none called); a missing
//!   `allow` is an error. An allow pattern that a deny pattern covers is an error.
//! - A local server's `hosts` without `secrets` are plain egress hosts; `secrets` need `hosts`.
//! - Server names map to distinct token names, so `a-b`/`a_b` and `Linear`/`linear` clash.
//! - A leading UTF-8 BOM is accepted; anywhere else it is a YAML error.
//! - The project file may add hosts, servers and secrets, but a secret the machine file binds
//!   keeps the machine's hosts and `body` (a cloned repository's `fenzi.yaml` must not be able
//!   to send the user's stored tokens elsewhere).
//! - A top-level `hosts` item may be a mapping `{host, private}`, and a `url` entry may have
//!   `private`: the internal ranges that exact name may resolve to (`model::private`). Only the
//!   machine file names them; a project may narrow them for a name the machine file names.
//! - `programs:` (DESIGN §17) is a non-empty list of distinct items on a `url` or `account`
//!   server, a top-level `hosts` mapping or a secret (not on a local server): `agent`, an absolute
//!   path in plain form (no `.`, `..`, `//` or trailing `/`), or `{path, sha256}` with 64 hex
//!   digits. A lower layer's list is kept beside the upper's, all applying. Whether a path needs
//!   `sha256` (it lies where the sandbox can write) depends on the session, and is the caller's
//!   check (`programs::unpinned_writable`).
//! - A top-level secret's `in` is a non-empty list of distinct `header:NAME`, `query:NAME` and
//!   `body`; listing `body` turns bodies on, and `body: true` beside an `in` without it is an
//!   error. A project may narrow a machine secret's `in` to a subset (see `merge::positions`).
//! - Error messages may quote names (keys, server, secret, tool and host names) but never a url,
//!   a command argument or any other value that could hold a credential. A `resources.allow`
//!   pattern is a URI, so merge errors name it by its key (`mcp.x.resources.allow[1]`) only.
//! - `list` is the string `filter` or `all` (exact case); `pin` a boolean. `resources` and
//!   `prompts` are mappings whose only key, `allow`, is required; `allow: []` is fine. None of
//!   `list`, `pin`, `resources`, `prompts` is allowed on a local (`command`) entry.
//! - `tools.allow_annotated` lists each annotation once (only `read_only` exists). A non-empty
//!   list needs `pin: true` on the same entry, in the same file: a project entry repeating a
//!   pinned machine server's `allow_annotated` repeats its `pin: true` too. `allow_annotated: []`
//!   needs no pin (so a project can drop the machine's annotations without repeating `pin`).
//! - A project entry narrowing a machine server keeps the machine's `list`, `pin`, `resources`,
//!   `prompts` and `allow_annotated` when it omits them; when it writes them it may only turn
//!   `pin` on, go from `list: all` to `filter`, keep patterns of `resources.allow` and
//!   `prompts.allow` that are textually equal to machine ones (a narrower glob counts as new),
//!   and keep or drop `allow_annotated` values.

mod merge;
pub mod model;
mod rules;
mod schema;
pub mod units;
mod url;
pub use url::{UrlError, parse as parse_url};
mod yaml;

pub use model::*;
pub use units::{Rate, RatePeriod};
pub use yaml::{MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES};

use std::fmt;
use std::sync::Arc;

/// One problem in a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// Where. The loader always sets it (an empty file is reported at its line 1, column 1);
    /// `None` is for callers that build errors without a place.
    pub at: Option<Location>,
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            Some(at) if at.key.is_empty() => {
                write!(f, "{}:{}:{}: {}", at.file, at.line, at.column, self.message)?
            }
            Some(at) => write!(
                f,
                "{}:{}:{}: {}: {}",
                at.file, at.line, at.column, at.key, self.message
            )?,
            None => f.write_str(&self.message)?,
        }
        if let Some(h) = &self.hint {
            write!(f, "\n  hint: {h}")?;
        }
        Ok(())
    }
}

/// Every problem found, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl ConfigError {
    fn at_start(file: &str, message: impl Into<String>, hint: impl Into<String>) -> ConfigError {
        ConfigError {
            at: Some(Location {
                file: Arc::from(file),
                line: 1,
                column: 1,
                key: String::new(),
            }),
            message: message.into(),
            hint: Some(hint.into()),
        }
    }
}

/// Checks that a file's bytes are UTF-8 text and returns it. UTF-16 and UTF-32 files (told by
/// their byte-order mark) and invalid UTF-8 are refused with the position of the first bad byte.
pub fn decode<'a>(bytes: &'a [u8], file: &str) -> Result<&'a str, ConfigErrors> {
    let wide = [
        (&[0x00, 0x00, 0xFE, 0xFF][..], "UTF-32"),
        (&[0xFF, 0xFE, 0x00, 0x00][..], "UTF-32"),
        (&[0xFE, 0xFF][..], "UTF-16"),
        (&[0xFF, 0xFE][..], "UTF-16"),
    ];
    if let Some((_, enc)) = wide.iter().find(|(bom, _)| bytes.starts_with(bom)) {
        return Err(ConfigErrors(vec![ConfigError::at_start(
            file,
            format!("the file is {enc} text; a policy file is UTF-8"),
            "save the file as UTF-8",
        )]));
    }
    std::str::from_utf8(bytes).map_err(|e| {
        let good = &bytes[..e.valid_up_to()];
        // Valid by construction: the prefix `from_utf8` accepted.
        let good = std::str::from_utf8(good).unwrap_or_default();
        let line = good.matches('\n').count() + 1;
        let column = good.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        ConfigErrors(vec![ConfigError {
            at: Some(Location {
                file: Arc::from(file),
                line: u32::try_from(line).unwrap_or(u32::MAX),
                column: u32::try_from(column).unwrap_or(u32::MAX),
                key: String::new(),
            }),
            message: "the file is not valid UTF-8".into(),
            hint: Some("save the file as UTF-8".into()),
        }])
    })
}

/// Orders errors by position, keeping files in the order they first appear.
fn sorted(mut errors: Vec<ConfigError>) -> ConfigErrors {
    let mut files: Vec<Arc<str>> = Vec::new();
    for e in &errors {
        if let Some(at) = &e.at
            && !files.contains(&at.file)
        {
            files.push(at.file.clone());
        }
    }
    errors.sort_by_key(|e| match &e.at {
        Some(at) => (
            files.iter().position(|f| *f == at.file).unwrap_or(0),
            at.line,
            at.column,
        ),
        None => (0, 0, 0),
    });
    ConfigErrors(errors)
}

/// Parses and validates one file on its own. Cross-entry rules are [`merge`]'s.
pub fn parse(text: &str, file: &str, origin: Origin) -> Result<Config, ConfigErrors> {
    parse_with_serial(text, file, origin).map(|(c, _)| c)
}

/// Parses a team policy: a policy file in this schema plus its top-level `serial` (a positive
/// integer, required). `file` is what errors name: the policy's url.
pub fn parse_team(text: &str, file: &str) -> Result<(Config, u64), ConfigErrors> {
    let (config, serial) = parse_with_serial(text, file, Origin::Team)?;
    // `schema` reports a missing or invalid serial, so a parsed team policy has one.
    let serial = serial.ok_or_else(|| {
        ConfigErrors(vec![ConfigError::at_start(
            file,
            "missing `serial`",
            "add `serial: N`",
        )])
    })?;
    Ok((config, serial))
}

fn parse_with_serial(
    text: &str,
    file: &str,
    origin: Origin,
) -> Result<(Config, Option<u64>), ConfigErrors> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let root = match yaml::read(text) {
        Ok(Some(root)) => root,
        Ok(None) => {
            return Err(ConfigErrors(vec![ConfigError::at_start(
                file,
                "empty config: expected `version: 1`",
                "start the file with `version: 1`, then list `mcp:` servers and `hosts:`",
            )]));
        }
        Err(problems) => {
            let file: Arc<str> = Arc::from(file);
            return Err(sorted(
                problems
                    .into_iter()
                    .map(|p| ConfigError {
                        at: Some(Location {
                            file: file.clone(),
                            line: p.line,
                            column: p.column,
                            key: p.key,
                        }),
                        message: p.message,
                        hint: Some(p.hint),
                    })
                    .collect(),
            ));
        }
    };
    schema::read(&root, file, origin).map_err(sorted)
}

/// Merges the machine file and the project file and runs the checks that span both.
pub fn merge(machine: Option<Config>, project: Option<Config>) -> Result<Config, ConfigErrors> {
    merge_layers(None, machine, project)
}

/// Merges a team policy, the machine file and the project file (team → machine → project, each
/// narrowing the one above it) and runs the checks that span them. With `team: None` this is
/// [`merge`].
pub fn merge_layers(
    team: Option<Config>,
    machine: Option<Config>,
    project: Option<Config>,
) -> Result<Config, ConfigErrors> {
    let merged = merge::merge_layers(team, machine, project).map_err(sorted)?;
    let errors = rules::check(&merged);
    if errors.is_empty() {
        Ok(merged)
    } else {
        Err(sorted(errors))
    }
}

/// [`load`] under a team policy already parsed (by [`parse_team`]).
pub fn load_under(
    team: Option<Config>,
    machine: Option<(&str, &str)>,
    project: Option<(&str, &str)>,
) -> Result<Config, ConfigErrors> {
    let machine = machine
        .map(|(t, f)| parse(t, f, Origin::Machine))
        .transpose();
    let project = project
        .map(|(t, f)| parse(t, f, Origin::Project))
        .transpose();
    match (machine, project) {
        (Ok(m), Ok(p)) => merge_layers(team, m, p),
        (Err(mut a), Err(b)) => {
            a.0.extend(b.0);
            Err(a)
        }
        (Err(e), _) | (_, Err(e)) => Err(e),
    }
}

/// `parse` each given `(text, file name)` and `merge` them.
pub fn load(
    machine: Option<(&str, &str)>,
    project: Option<(&str, &str)>,
) -> Result<Config, ConfigErrors> {
    load_under(None, machine, project)
}
