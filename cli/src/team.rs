//! The team policy at the start of a session (README "Team policy"): where it comes from
//! (`--team-policy URL --team-key FILE`, else the machine file's `team: {url, key}`; the flags
//! win), fetching it (`fenzi_proxy::outbound::team_fetch`), the copy kept between sessions, and loading the
//! three layers. Which copy holds is `fenzi_policy::team::choose`'s decision.
//!
//! The kept copy is one file per url, `$XDG_STATE_HOME/fenzi/team/<sha256(url)[..16]>.copy`
//! (default `~/.local/state/fenzi/team/`), private to the user: the policy's bytes and its
//! signature together, so that one atomic rename replaces both. It is checked like a fetched
//! copy each time it is used: anyone who can write the directory can delete the copy, not make
//! fenzi use a policy the team did not sign.
//!
//! The copy is fetched once, when the session starts; reloading the machine or project file
//! during a session merges them under that same copy. A new team release takes effect at the
//! next session.

use crate::config_files::{self, ConfigText, LoadedPolicy, PolicyArgs};
use anyhow::{Context, Result, anyhow};
use fenzi_policy::config::{self, Config, ConfigErrors, Origin, RemoteUrl};
use fenzi_policy::team::{self, Chosen, Fetched, Source, TeamKey};
use fenzi_proxy::tls::upstream::CertificateDer;
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The team policy flags of `fenzi proxy`, `fenzi run` and `fenzi check`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TeamArgs {
    /// A signed team policy to narrow from: its https url (the signature is fetched from
    /// URL.minisig). The machine file and the project may only narrow it [default: the machine
    /// file's `team: {url, key}`].
    #[arg(long, value_name = "URL", requires = "team_key")]
    pub team_policy: Option<String>,
    /// The team's minisign public key (the `.pub` file `minisign -G` writes).
    #[arg(long, value_name = "FILE", requires = "team_policy")]
    pub team_key: Option<PathBuf>,
}

/// Where the team policy comes from, once the flags and the machine file are read.
#[derive(Debug, Clone)]
struct Wanted {
    url: RemoteUrl,
    key: PathBuf,
    /// `--team-policy` or the machine file's `team:` (for messages).
    named_by: String,
}

/// The team policy in use for a session.
#[derive(Debug, Clone)]
pub struct TeamLayer {
    pub url: String,
    /// The key file checked against (protected inside `fenzi run`'s sandbox).
    pub key: PathBuf,
    pub serial: u64,
    pub source: Source,
    pub config: Config,
}

impl TeamLayer {
    /// The line a session prints at its start.
    pub fn note(&self) -> String {
        let from = match self.source {
            Source::Fetched => "fetched",
            Source::Kept => "the kept copy",
        };
        format!("team policy {}, serial {} ({from})", self.url, self.serial)
    }
}

/// How long each of the two team files may take to fetch.
const FETCH_TIMEOUT: Duration = fenzi_proxy::outbound::team_fetch::DEFAULT_TIMEOUT;

/// The policy of `args` under the team policy of `team` (or the machine file's `team:`), with
/// the team layer in use. An unreadable file or no good team copy is an `Err` (exit 2); problems
/// in the policy files are in `LoadedPolicy::result`.
pub fn load(
    args: &PolicyArgs,
    team: &TeamArgs,
    roots: &[CertificateDer<'static>],
) -> Result<(LoadedPolicy, Option<TeamLayer>)> {
    let (project, machine) = args.read()?;
    let wanted = match wanted(team, machine.as_ref()) {
        Ok(w) => w,
        Err(errors) => {
            return Ok((
                LoadedPolicy {
                    project,
                    result: Err(errors),
                },
                None,
            ));
        }
    };
    let layer = match wanted {
        None => None,
        Some(w) => Some(resolve(&w, roots, &state_dir()?)?),
    };
    let result = config::load_under(
        layer.as_ref().map(|l| l.config.clone()),
        machine.as_ref().map(|m| (m.text.as_str(), m.name.as_str())),
        Some((project.text.as_str(), project.name.as_str())),
    );
    Ok((LoadedPolicy { project, result }, layer))
}

/// The team policy asked for: the flags, else the machine file's `team:`. A machine file that
/// does not parse is reported as the load would report it.
fn wanted(team: &TeamArgs, machine: Option<&ConfigText>) -> Result<Option<Wanted>, ConfigErrors> {
    if let (Some(url), Some(key)) = (&team.team_policy, &team.team_key) {
        let parsed = parse_url(url).map_err(|why| {
            ConfigErrors(vec![config::ConfigError {
                at: None,
                message: format!("--team-policy: {why}"),
                hint: Some("give the https url of the signed policy file".into()),
            }])
        })?;
        return Ok(Some(Wanted {
            url: parsed,
            key: key.clone(),
            named_by: "--team-policy".into(),
        }));
    }
    let Some(machine) = machine else {
        return Ok(None);
    };
    let parsed = config::parse(&machine.text, &machine.name, Origin::Machine)?;
    Ok(parsed.team.map(|t| {
        // A relative key is the machine file's directory's, not the working directory's.
        let base = Path::new(&machine.name).parent().unwrap_or(Path::new(""));
        Wanted {
            key: base.join(&t.key),
            named_by: format!("{}:{}:{}", t.at.file, t.at.line, t.at.column),
            url: t.url,
        }
    }))
}

/// An https url as a server `url:` is checked (no user info, query or fragment).
fn parse_url(text: &str) -> Result<RemoteUrl, String> {
    // The config loader's url rules, through a one-entry policy: one parser for every url fenzi
    // reads.
    let doc = format!(
        "version: 1\nteam: {{url: {}, key: k}}\n",
        serde_json::to_string(text).expect("a string serialises")
    );
    match config::parse(&doc, "--team-policy", Origin::Machine) {
        Ok(c) => c.team.map(|t| t.url).ok_or_else(|| "not a url".into()),
        Err(e) => Err(e.0.first().map(|e| e.message.clone()).unwrap_or_default()),
    }
}

/// `$XDG_STATE_HOME/fenzi/team`, or `~/.local/state/fenzi/team` (a relative XDG path is ignored,
/// as for the audit log).
fn state_dir() -> Result<PathBuf> {
    let base = match std::env::var_os("XDG_STATE_HOME").map(PathBuf::from) {
        Some(p) if p.is_absolute() => Some(p),
        _ => std::env::var_os("HOME")
            .filter(|h| !h.is_empty())
            .map(|h| PathBuf::from(h).join(".local/state")),
    };
    base.map(|b| b.join("fenzi").join("team")).ok_or_else(|| {
        anyhow!(
            "cannot keep the team policy: neither XDG_STATE_HOME nor HOME is set; set one of \
                 them"
        )
    })
}

/// The kept copy's file for `url`.
fn kept_path(dir: &Path, url: &str) -> PathBuf {
    let digest = Sha256::digest(url.as_bytes());
    dir.join(format!("{}.copy", &hex::encode(digest)[..16]))
}

/// Fetches, checks against the kept copy, keeps the new one when it holds; says what happened
/// on stderr. `Err` when no copy holds.
fn resolve(w: &Wanted, roots: &[CertificateDer<'static>], dir: &Path) -> Result<TeamLayer> {
    let key_bytes = config_files::read_bounded(&w.key)
        .with_context(|| format!("cannot read the team key {}", w.key.display()))?;
    let key_text = String::from_utf8(key_bytes)
        .map_err(|_| anyhow!("the team key {} is not text", w.key.display()))?;
    let key = TeamKey::parse(&key_text)
        .map_err(|why| anyhow!("the team key {} {why}", w.key.display()))?;
    let url = w.url.text.as_str();
    let fetched = fetch(&w.url, roots);
    let path = kept_path(dir, url);
    let kept = read_kept(&path);
    let chosen = team::choose(&key, url, fetched, kept).map_err(|why| {
        anyhow!(
            "{why}. The session does not start without a good copy of the team policy (named by \
             {}); check the url, the network and the key, or remove the team policy to run \
             without it",
            w.named_by
        )
    })?;
    for note in &chosen.notes {
        eprintln!("fenzi: team policy {url}: {note}");
    }
    if chosen.store {
        // A copy that cannot be kept is still good for this session.
        if let Err(e) = write_kept(dir, &path, &chosen) {
            eprintln!(
                "fenzi: team policy {url}: serial {} could not be kept for later sessions: {e:#}",
                chosen.copy.serial
            );
        }
    }
    Ok(TeamLayer {
        url: url.to_string(),
        key: w.key.clone(),
        serial: chosen.copy.serial,
        source: chosen.source,
        config: chosen.copy.config,
    })
}

fn fetch(url: &RemoteUrl, roots: &[CertificateDer<'static>]) -> Fetched {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => return Fetched::Unreachable(format!("cannot start the fetch: {e}")),
    };
    match runtime.block_on(fenzi_proxy::outbound::team_fetch::fetch(
        url,
        roots,
        FETCH_TIMEOUT,
    )) {
        Ok(files) => Fetched::Copy {
            policy: files.policy,
            signature: files.signature,
        },
        Err(why) => Fetched::Unreachable(why),
    }
}

/// The kept file's first line; then `signature N`, N bytes, `policy M`, M bytes.
const MAGIC: &str = "fenzi team policy copy 1\n";

fn encode(policy: &[u8], signature: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.as_bytes().to_vec();
    out.extend_from_slice(format!("signature {}\n", signature.len()).as_bytes());
    out.extend_from_slice(signature);
    out.extend_from_slice(format!("policy {}\n", policy.len()).as_bytes());
    out.extend_from_slice(policy);
    out
}

fn decode(bytes: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    let bad = || "it is not a kept copy fenzi wrote (garbled or truncated)".to_string();
    let rest = bytes.strip_prefix(MAGIC.as_bytes()).ok_or_else(bad)?;
    let part = |rest: &[u8], label: &str, max: usize| -> Result<(Vec<u8>, usize), String> {
        let nl = rest.iter().position(|b| *b == b'\n').ok_or_else(bad)?;
        let head = std::str::from_utf8(&rest[..nl]).map_err(|_| bad())?;
        let n: usize = head
            .strip_prefix(label)
            .and_then(|n| n.strip_prefix(' '))
            .and_then(|n| n.parse().ok())
            .filter(|n| *n <= max)
            .ok_or_else(bad)?;
        let body = rest.get(nl + 1..nl + 1 + n).ok_or_else(bad)?;
        Ok((body.to_vec(), nl + 1 + n))
    };
    let (signature, used) = part(rest, "signature", team::MAX_SIGNATURE_BYTES)?;
    let (policy, used2) = part(&rest[used..], "policy", team::MAX_POLICY_BYTES)?;
    if used + used2 != rest.len() {
        return Err(bad());
    }
    Ok((policy, signature))
}

fn read_kept(path: &Path) -> Option<team::KeptCopy> {
    match config_files::read_bounded(path) {
        Ok(bytes) => Some(decode(&bytes).map_err(|why| format!("{}: {why}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(format!("{}: {e}", path.display()))),
    }
}

/// Replaces the kept copy atomically: a private temporary file in the same directory, synced,
/// then renamed over the old one.
fn write_kept(dir: &Path, path: &Path, chosen: &Chosen) -> Result<()> {
    crate::session::create_private_dir(dir)?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".team-")
        .tempfile_in(dir)
        .with_context(|| format!("cannot write in {}", dir.display()))?;
    tmp.write_all(&encode(&chosen.copy.policy, &chosen.copy.signature))?;
    tmp.as_file().sync_all()?;
    tmp.persist(path)
        .map_err(|e| anyhow!("cannot write {}: {}", path.display(), e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kept_file_holds_both_parts_exactly() {
        let bytes = encode(b"version: 1\nserial: 2\n", b"sig\nlines\n");
        assert_eq!(
            decode(&bytes).unwrap(),
            (
                b"version: 1\nserial: 2\n".to_vec(),
                b"sig\nlines\n".to_vec()
            )
        );
        for bad in [
            &bytes[..bytes.len() - 1],
            &[&bytes[..], b"x"].concat(),
            b"fenzi team policy copy 2\n",
            b"",
        ] {
            assert!(decode(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn the_flags_win_over_the_machine_file_and_urls_are_https_only() {
        let machine = ConfigText {
            text: "version: 1\nteam: {url: https://a.example/p.yaml, key: team.pub}\n".into(),
            name: "/home/u/.config/fenzi/mcp.yaml".into(),
        };
        let w = wanted(&TeamArgs::default(), Some(&machine))
            .unwrap()
            .unwrap();
        assert_eq!(w.url.text, "https://a.example/p.yaml");
        assert_eq!(w.key, PathBuf::from("/home/u/.config/fenzi/team.pub"));
        let flags = TeamArgs {
            team_policy: Some("https://b.example/t.yaml".into()),
            team_key: Some("k.pub".into()),
        };
        let w = wanted(&flags, Some(&machine)).unwrap().unwrap();
        assert_eq!(
            (w.url.text.as_str(), w.named_by.as_str()),
            ("https://b.example/t.yaml", "--team-policy")
        );
        for bad in [
            "http://b.example/t.yaml",
            "https://u:p@b.example/t",
            "https://b.example/t?x=1",
        ] {
            let flags = TeamArgs {
                team_policy: Some(bad.into()),
                team_key: Some("k.pub".into()),
            };
            assert!(wanted(&flags, None).is_err(), "{bad}");
        }
        assert!(wanted(&TeamArgs::default(), None).unwrap().is_none());
    }

    #[test]
    fn each_url_has_its_own_kept_file() {
        let d = Path::new("/s");
        assert_ne!(kept_path(d, "https://a/x"), kept_path(d, "https://a/y"));
        assert!(kept_path(d, "https://a/x").starts_with(d));
    }
}
