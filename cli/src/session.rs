//! What `fenzi proxy` and `fenzi run` both set up for a session: its id, the audit log, the private
//! directory holding the session CA certificate, and the proxy options derived from flags.

use crate::commands::log::audit_dir;
use anyhow::{Context, Result, anyhow};
use fenzi_proxy::ProxyOptions;
use fenzi_proxy::audit_writer::AuditWriter;
use fenzi_proxy::tls::upstream::parse_pem_certs;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The audit log of a session: `explicit`, or `$XDG_STATE_HOME/fenzi/audit/<session>.jsonl`.
pub fn open_audit(explicit: Option<&Path>, session: &str) -> Result<(PathBuf, AuditWriter)> {
    let path = match explicit {
        Some(path) => path.to_path_buf(),
        None => audit_dir(std::env::var_os("XDG_STATE_HOME"), std::env::var_os("HOME"))
            .context(
                "cannot choose an audit log: neither XDG_STATE_HOME nor HOME is set; pass --audit",
            )?
            .join(format!("{session}.jsonl")),
    };
    let writer = AuditWriter::open(&path, session)
        .with_context(|| format!("cannot open the audit log {}", path.display()))?;
    Ok((path, writer))
}

/// Creates `dir` (private to the user when new).
pub fn create_private_dir(dir: &Path) -> Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("cannot create {}", dir.display()))
}

/// Writes `contents` to `dir/name` atomically (temporary file, then rename).
pub fn write_file(dir: &Path, name: &str, contents: &[u8]) -> Result<PathBuf> {
    let path = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp"));
    std::fs::write(&tmp, contents).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, &path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

/// Creates `dir` if needed and writes the session CA certificate (never its key) to `dir/ca.pem`.
pub fn write_ca(dir: &Path, pem: &str) -> Result<PathBuf> {
    create_private_dir(dir)?;
    write_file(dir, "ca.pem", pem.as_bytes())
}

/// Flags that tune the proxy, shared by `fenzi proxy` and `fenzi run`.
#[derive(Debug, Clone, clap::Args)]
pub struct ProxyFlags {
    /// Extra root certificates (PEM) trusted for upstream TLS, beside the public roots. Repeatable.
    #[arg(long, value_name = "PEM")]
    upstream_ca: Vec<PathBuf>,
    /// Client connections served at once; more wait in the listen backlog.
    #[arg(long, value_name = "N", default_value_t = ProxyOptions::default().max_connections)]
    max_connections: usize,
    /// Time a client has to send a request head (also the idle keep-alive limit).
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    header_timeout: Option<Duration>,
    /// A tunnel with no traffic either way for this long is closed.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    idle_timeout: Option<Duration>,
    /// Dialling one upstream address.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    connect_timeout: Option<Duration>,
    /// A TLS handshake with the client or the upstream.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    tls_timeout: Option<Duration>,
    /// From a request sent upstream to its response head.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    response_timeout: Option<Duration>,
    /// At shutdown, how long in-flight requests get to finish.
    #[arg(long, value_name = "DUR", value_parser = parse_duration)]
    drain_timeout: Option<Duration>,
}

impl ProxyFlags {
    /// The proxy options these flags ask for, on top of the defaults.
    pub fn options(&self) -> Result<ProxyOptions> {
        let mut options = ProxyOptions {
            max_connections: self.max_connections.max(1),
            ..ProxyOptions::default()
        };
        let set = |slot: &mut Duration, value: Option<Duration>| {
            if let Some(value) = value {
                *slot = value;
            }
        };
        set(&mut options.header_read_timeout, self.header_timeout);
        set(&mut options.idle_timeout, self.idle_timeout);
        set(&mut options.connect_timeout, self.connect_timeout);
        set(&mut options.tls_handshake_timeout, self.tls_timeout);
        set(&mut options.response_header_timeout, self.response_timeout);
        set(&mut options.drain_timeout, self.drain_timeout);
        for path in &self.upstream_ca {
            let pem =
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
            let certs = parse_pem_certs(&pem).map_err(|e| anyhow!("{}: {e}", path.display()))?;
            options.upstream_roots.extend(certs);
        }
        Ok(options)
    }
}

/// `500ms`, `30s`, `5m`, `1h`, or a bare number of seconds; more than zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 30s, 5m, 500ms)"))?;
    let duration = match unit {
        "" | "s" => Duration::from_secs(n),
        "ms" => Duration::from_millis(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?} (use ms, s, m or h)"
            ));
        }
    };
    if duration.is_zero() {
        return Err("a timeout must be more than zero".to_string());
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::parse_duration;
    use std::time::Duration;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("30"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("5d").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("-1").is_err());
    }
}
