//! The adversarial case format (testdata/adversarial/README.md): a line-oriented `key: value` file,
//! parsed here into [`Case`]s, each with the bytes to put on the wire and what must come of them.

use std::fmt::Write as _;

/// How a case reaches the proxy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// Bytes straight to the proxy port.
    Proxy,
    /// `CONNECT target`, then TLS with the proxy (SNI `sni`, or none; ALPN h2 when asked), then the
    /// bytes (or, with `h2`, the messages as HTTP/2 requests).
    Tunnel { target: String, sni: Sni, h2: bool },
    /// `CONNECT target`, then the bytes with no TLS.
    TunnelPlain { target: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sni {
    /// The CONNECT target's host, and the leaf is verified against the session CA.
    Target,
    /// This name, leaf not verified (a client lying about where it goes).
    Name(String),
    /// No SNI at all, leaf not verified.
    None,
}

/// One HTTP message built from the shorthand keys.
#[derive(Debug, Clone, Default)]
pub struct Message {
    pub method: String,
    pub target: String,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
    pub no_content_type: bool,
    pub no_content_length: bool,
    pub no_host: bool,
    pub host: String,
}

impl Message {
    fn has_header(&self, name: &str) -> bool {
        self.headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name))
    }

    /// The message as HTTP/1.1 bytes: request line, Host (unless given or `no-host`), a JSON
    /// Content-Type for POST (unless given or `no-content-type`), the case's headers in order,
    /// Content-Length (unless given, chunked, or `no-content-length`), and the body.
    pub fn to_h1(&self) -> Vec<u8> {
        let mut out = format!("{} {} HTTP/1.1\r\n", self.method, self.target).into_bytes();
        if !self.no_host && !self.has_header("host") {
            out.extend_from_slice(format!("Host: {}\r\n", self.host).as_bytes());
        }
        if self.method == "POST" && !self.no_content_type && !self.has_header("content-type") {
            out.extend_from_slice(b"Content-Type: application/json\r\n");
        }
        for (name, value) in &self.headers {
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(value);
            out.extend_from_slice(b"\r\n");
        }
        let framed = self.has_header("content-length") || self.has_header("transfer-encoding");
        if !self.no_content_length && !framed && (!self.body.is_empty() || self.method == "POST") {
            out.extend_from_slice(format!("Content-Length: {}\r\n", self.body.len()).as_bytes());
        }
        out.extend_from_slice(b"\r\n");
        out.extend_from_slice(&self.body);
        out
    }
}

/// One step of what the client does.
#[derive(Debug, Clone)]
pub enum Step {
    Send(Vec<u8>),
    /// Wait for one more complete response before sending on.
    AwaitResponse,
    Pause(u64),
}

/// An expected response: a status, and the reason its JSON body names (`None`: not checked;
/// `Some("-")`: the body must name none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedResponse {
    pub status: u16,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct Expect {
    /// `None` when the case gives no `status:` (a case must give one).
    pub responses: Option<Vec<ExpectedResponse>>,
    pub tls_fails: bool,
    pub body_contains: Vec<String>,
    pub body_lacks: Vec<Vec<u8>>,
    /// `Some(empty)` is `upstream: none`.
    pub upstream: Option<Vec<(String, String)>>,
    pub upstream_bytes: Vec<(String, usize)>,
    pub upstream_contains: Vec<(String, Vec<u8>)>,
    pub upstream_lacks: Vec<Vec<u8>>,
    /// `Some(empty)` is `audit: none`.
    pub audit: Option<Vec<String>>,
    pub dialled: Option<Vec<String>>,
    pub lookups: Vec<(String, usize)>,
    pub stored_contains: Vec<String>,
    pub stored_lacks: Vec<Vec<u8>>,
}

#[derive(Debug, Clone)]
pub struct Case {
    pub file: String,
    pub line: usize,
    pub name: String,
    pub via: Via,
    pub dns: Vec<(String, String)>,
    pub steps: Vec<Step>,
    pub messages: Vec<Message>,
    pub expect: Expect,
    pub known_failure: Option<String>,
    /// Extra quiet time (ms) before a case with no expected response is considered done.
    pub wait_ms: u64,
}

impl Case {
    pub fn label(&self) -> String {
        format!("{}:{} {}", self.file, self.line, self.name)
    }
}

/// File-level defaults (keys given before the first case).
#[derive(Debug, Clone)]
struct Defaults {
    via: Option<Via>,
    host: Option<String>,
    path: String,
}

/// Expands `{{N*TEXT}}` to TEXT repeated N times.
pub fn expand(text: &str) -> Result<String, String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find("}}").ok_or("unclosed {{")?;
        let inner = &after[..end];
        let (n, what) = inner.split_once('*').ok_or("{{N*TEXT}} needs a '*'")?;
        let n: usize = n
            .trim()
            .parse()
            .map_err(|_| format!("bad repeat count {n:?}"))?;
        out.push_str(&what.repeat(n));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Decodes the escapes of wire-level text: `\r \n \t \0 \\ \xHH`, after `{{N*TEXT}}` expansion.
/// Other characters are taken as their UTF-8 bytes.
pub fn unescape(text: &str) -> Result<Vec<u8>, String> {
    let text = expand(text)?;
    let mut out = Vec::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            let mut buf = [0u8; 4];
            out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            continue;
        }
        match chars.next() {
            Some('r') => out.push(b'\r'),
            Some('n') => out.push(b'\n'),
            Some('t') => out.push(b'\t'),
            Some('0') => out.push(0),
            Some('\\') => out.push(b'\\'),
            Some('x') => {
                let hex: String = chars.by_ref().take(2).collect();
                let b =
                    u8::from_str_radix(&hex, 16).map_err(|_| format!("bad \\x escape {hex:?}"))?;
                out.push(b);
            }
            other => return Err(format!("unknown escape \\{}", other.unwrap_or(' '))),
        }
    }
    Ok(out)
}

fn hex_bytes(text: &str) -> Result<Vec<u8>, String> {
    let digits: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    if !digits.len().is_multiple_of(2) {
        return Err("odd number of hex digits".into());
    }
    (0..digits.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&digits[i..i + 2], 16).map_err(|e| e.to_string()))
        .collect()
}

fn parse_via(text: &str) -> Result<Via, String> {
    let mut words = text.split_whitespace();
    match words.next() {
        Some("proxy") => Ok(Via::Proxy),
        Some(kind @ ("tunnel" | "tunnel-plain")) => {
            let target = words
                .next()
                .ok_or("via: tunnel needs a target")?
                .to_string();
            if kind == "tunnel-plain" {
                return Ok(Via::TunnelPlain { target });
            }
            let mut sni = Sni::Target;
            let mut h2 = false;
            for word in words {
                match word.split_once('=') {
                    Some(("sni", "none")) => sni = Sni::None,
                    Some(("sni", name)) => sni = Sni::Name(name.to_string()),
                    Some(("alpn", "h2")) => h2 = true,
                    _ => return Err(format!("unknown via option {word:?}")),
                }
            }
            Ok(Via::Tunnel { target, sni, h2 })
        }
        _ => Err(format!("unknown via {text:?}")),
    }
}

/// The Host a shorthand message names: an absolute target's authority, else the case's host, else
/// the via target's host.
fn default_host(target: &str, host: Option<&str>, via: &Via) -> String {
    for scheme in ["http://", "https://"] {
        if let Some(rest) = target.strip_prefix(scheme) {
            return rest.split(['/', '?']).next().unwrap_or(rest).to_string();
        }
    }
    if let Some(h) = host {
        return h.to_string();
    }
    match via {
        Via::Proxy => "-".to_string(),
        Via::Tunnel { target, .. } | Via::TunnelPlain { target } => {
            target.strip_suffix(":443").unwrap_or(target).to_string()
        }
    }
}

struct Builder {
    case: Case,
    host: Option<String>,
    path: String,
    via_set: bool,
    /// Bytes of the shorthand messages not yet turned into a send step.
    pending_messages: usize,
}

impl Builder {
    /// Turns shorthand messages given so far into one send step (one write).
    fn flush_messages(&mut self) {
        if self.pending_messages == 0 {
            return;
        }
        let from = self.case.messages.len() - self.pending_messages;
        let mut bytes = Vec::new();
        for m in &self.case.messages[from..] {
            bytes.extend(m.to_h1());
        }
        self.case.steps.push(Step::Send(bytes));
        self.pending_messages = 0;
    }

    fn message(&mut self) -> Result<&mut Message, String> {
        if self.pending_messages == 0 {
            return Err("a header/body key needs a request: or post: before it".into());
        }
        Ok(self.case.messages.last_mut().expect("pending"))
    }

    fn new_message(&mut self, method: &str, target: &str) {
        let host = default_host(target, self.host.as_deref(), &self.case.via);
        self.case.messages.push(Message {
            method: method.to_string(),
            target: target.to_string(),
            host,
            ..Message::default()
        });
        self.pending_messages += 1;
    }
}

pub fn parse(file: &str, text: &str) -> Result<Vec<Case>, String> {
    let mut defaults = Defaults {
        via: None,
        host: None,
        path: "/mcp".to_string(),
    };
    let mut cases = Vec::new();
    let mut current: Option<Builder> = None;
    for (i, raw_line) in text.lines().enumerate() {
        let n = i + 1;
        let line = raw_line.trim_end_matches('\r');
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (key, value) = match line.split_once(':') {
            Some((k, v)) => (k.trim(), v.strip_prefix(' ').unwrap_or(v)),
            None => (line.trim(), ""),
        };
        let at = |e: String| format!("line {n}: {e}");
        if key == "case" {
            if let Some(b) = current.take() {
                cases.push(finish(b).map_err(|e| format!("case ending before line {n}: {e}"))?);
            }
            let via = defaults.via.clone().unwrap_or(Via::Proxy);
            current = Some(Builder {
                case: Case {
                    file: file.to_string(),
                    line: n,
                    name: value.trim().to_string(),
                    via,
                    dns: Vec::new(),
                    steps: Vec::new(),
                    messages: Vec::new(),
                    expect: Expect::default(),
                    known_failure: None,
                    wait_ms: 0,
                },
                host: defaults.host.clone(),
                path: defaults.path.clone(),
                via_set: defaults.via.is_some(),
                pending_messages: 0,
            });
            continue;
        }
        let Some(b) = current.as_mut() else {
            match key {
                "via" => defaults.via = Some(parse_via(value).map_err(at)?),
                "host" => defaults.host = Some(value.to_string()),
                "path" => defaults.path = value.to_string(),
                _ => return Err(at(format!("{key:?} before the first case"))),
            }
            continue;
        };
        apply(b, key, value).map_err(at)?;
    }
    if let Some(b) = current.take() {
        cases.push(finish(b)?);
    }
    let mut names = std::collections::HashSet::new();
    for c in &cases {
        if !names.insert(c.name.clone()) {
            return Err(format!("line {}: duplicate case name {:?}", c.line, c.name));
        }
    }
    Ok(cases)
}

fn apply(b: &mut Builder, key: &str, value: &str) -> Result<(), String> {
    let e = &mut b.case.expect;
    match key {
        "via" => {
            if !b.case.steps.is_empty() || b.pending_messages > 0 {
                return Err("via: must come before what is sent".into());
            }
            b.case.via = parse_via(value)?;
            b.via_set = true;
        }
        "host" => b.host = Some(value.to_string()),
        "path" => b.path = value.to_string(),
        "dns" => {
            let (name, answers) = value.trim().split_once(' ').ok_or("dns: NAME ANSWERS")?;
            b.case
                .dns
                .push((name.to_string(), answers.trim().to_string()));
        }
        "send" => {
            b.flush_messages();
            let bytes = unescape(value)?;
            match b.case.steps.last_mut() {
                Some(Step::Send(prev)) => prev.extend(bytes),
                _ => b.case.steps.push(Step::Send(bytes)),
            }
        }
        "await" => {
            if value.trim() != "response" {
                return Err("await: response".into());
            }
            b.flush_messages();
            b.case.steps.push(Step::AwaitResponse);
        }
        "pause" => {
            b.flush_messages();
            let ms = value.trim().parse().map_err(|_| "pause: MILLISECONDS")?;
            b.case.steps.push(Step::Pause(ms));
        }
        "wait" => b.case.wait_ms = value.trim().parse().map_err(|_| "wait: MILLISECONDS")?,
        "request" => {
            let (method, target) = value.split_once(' ').ok_or("request: METHOD TARGET")?;
            b.new_message(method, target);
        }
        "post" => {
            let path = b.path.clone();
            b.new_message("POST", &path);
            b.message()?.body = expand(value)?.into_bytes();
        }
        "header" => {
            let (name, v) = value.split_once(':').ok_or("header: Name: value")?;
            let v = unescape(v.strip_prefix(' ').unwrap_or(v))?;
            b.message()?.headers.push((name.to_string(), v));
        }
        "body" => {
            let text = expand(value)?;
            b.message()?.body.extend(text.into_bytes());
        }
        "body-esc" => {
            let bytes = unescape(value)?;
            b.message()?.body.extend(bytes);
        }
        "body-hex" => {
            let bytes = hex_bytes(value)?;
            b.message()?.body.extend(bytes);
        }
        "body-utf16le" | "body-utf16be" => {
            let text = expand(value)?;
            let le = key == "body-utf16le";
            let bytes: Vec<u8> = text
                .encode_utf16()
                .flat_map(|u| if le { u.to_le_bytes() } else { u.to_be_bytes() })
                .collect();
            b.message()?.body.extend(bytes);
        }
        "no-content-type" => b.message()?.no_content_type = true,
        "no-content-length" => b.message()?.no_content_length = true,
        "no-host" => b.message()?.no_host = true,
        "status" => {
            let list = e.responses.get_or_insert_with(Vec::new);
            let value = value.trim();
            if value == "none" {
                return Ok(());
            }
            let mut words = value.split_whitespace();
            let status = words
                .next()
                .and_then(|s| s.parse().ok())
                .ok_or("status: CODE [REASON|-] or status: none")?;
            let reason = words.next().map(str::to_string);
            list.push(ExpectedResponse { status, reason });
        }
        "tls" => {
            if value.trim() != "fail" {
                return Err("tls: fail".into());
            }
            e.tls_fails = true;
        }
        "body-contains" => e.body_contains.push(expand(value)?),
        "body-lacks" => e.body_lacks.push(unescape(value)?),
        "upstream" => {
            let list = e.upstream.get_or_insert_with(Vec::new);
            if value.trim() == "none" {
                return Ok(());
            }
            let (name, line) = value.split_once(' ').ok_or("upstream: NAME REQUEST-LINE")?;
            list.push((name.to_string(), line.to_string()));
        }
        "upstream-bytes" => {
            let (name, n) = value.split_once(' ').ok_or("upstream-bytes: NAME N")?;
            let n = n.trim().parse().map_err(|_| "upstream-bytes: NAME N")?;
            e.upstream_bytes.push((name.to_string(), n));
        }
        "upstream-contains" => {
            let (name, text) = value
                .split_once(' ')
                .ok_or("upstream-contains: NAME TEXT")?;
            e.upstream_contains
                .push((name.to_string(), unescape(text)?));
        }
        "upstream-lacks" => e.upstream_lacks.push(unescape(value)?),
        "audit" => {
            let list = e.audit.get_or_insert_with(Vec::new);
            if value.trim() == "none" {
                return Ok(());
            }
            let text = String::from_utf8(unescape(value)?).map_err(|e| e.to_string())?;
            list.push(text);
        }
        "audit-times" => {
            let (n, summary) = value.split_once(' ').ok_or("audit-times: N SUMMARY")?;
            let n: usize = n.parse().map_err(|_| "audit-times: N SUMMARY")?;
            let text = String::from_utf8(unescape(summary)?).map_err(|e| e.to_string())?;
            let list = e.audit.get_or_insert_with(Vec::new);
            list.extend(std::iter::repeat_n(text, n));
        }
        "dialled" => {
            let list = e.dialled.get_or_insert_with(Vec::new);
            if value.trim() != "none" {
                list.extend(value.split_whitespace().map(str::to_string));
            }
        }
        "lookups" => {
            let (name, n) = value.split_once(' ').ok_or("lookups: NAME N")?;
            let n = n.trim().parse().map_err(|_| "lookups: NAME N")?;
            e.lookups.push((name.to_string(), n));
        }
        "stored-contains" => e.stored_contains.push(expand(value)?),
        "stored-lacks" => e.stored_lacks.push(unescape(value)?),
        "known_failure" => b.case.known_failure = Some(value.trim().to_string()),
        _ => return Err(format!("unknown key {key:?}")),
    }
    Ok(())
}

fn finish(mut b: Builder) -> Result<Case, String> {
    b.flush_messages();
    let c = &b.case;
    let mut missing = String::new();
    if c.steps.is_empty() && !matches!(c.via, Via::Tunnel { h2: true, .. }) {
        missing.push_str(" something to send;");
    }
    if !b.via_set {
        missing.push_str(" via:;");
    }
    if c.expect.responses.is_none() && !c.expect.tls_fails {
        missing.push_str(" status:;");
    }
    if c.expect.upstream.is_none() && c.expect.upstream_bytes.is_empty() {
        missing.push_str(" upstream: (or upstream-bytes:);");
    }
    if c.expect.audit.is_none() {
        missing.push_str(" audit:;");
    }
    if !missing.is_empty() {
        let mut msg = String::new();
        let _ = write!(msg, "case {:?} (line {}) lacks{missing}", c.name, c.line);
        return Err(msg);
    }
    Ok(b.case)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_and_repeats() {
        assert_eq!(
            unescape("a\\r\\n\\x00\\\\{{3*b}}").unwrap(),
            b"a\r\n\0\\bbb"
        );
        assert!(unescape("\\q").is_err());
        assert!(unescape("\\xZZ").is_err());
        assert_eq!(expand("{{2*ab}}c").unwrap(), "ababc");
    }
}
