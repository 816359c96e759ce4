//! What a request names as its destination, and the checks on those names: the default port of a
//! scheme, what an audit record may name of a client's authority text (never userinfo or unparsed
//! text), the refusal of a name that holds one of the session's placeholders (checked before the name
//! is parsed, resolved or dialled, so a placeholder never reaches DNS), and, inside an intercepted
//! tunnel, that the TLS server name and every authority a request names (Host, absolute or h2
//! `:authority`) agree with the CONNECT target.

use crate::audit::sink::Subject;
use crate::request::refusal::Refusal;
use crate::session::context::SessionContext;
use fenzi_policy::host::{Host, split_authority};
use fenzi_policy::{Decision, Reason};
use http::header::HOST;
use http::{HeaderValue, Request};

/// The port a URL with `scheme` names when it gives none.
pub(crate) fn default_port(scheme: Option<&str>) -> u16 {
    match scheme {
        Some(s) if s.eq_ignore_ascii_case("https") => 443,
        _ => 80,
    }
}

/// The host an audit record names for a request target that does not parse as `host[:port]`: the
/// client's text is not copied into the log.
pub(crate) const INVALID_TARGET: &str = "<invalid target>";

/// The host and port an audit record may name for a client's `authority` (`host[:port]`, perhaps with
/// userinfo): the canonical host and port (`default_port` when none is given) of what follows the last
/// `@` when that parses, else [`INVALID_TARGET`] and 0. Userinfo and unparsed text, which may be
/// credentials, never reach the log.
pub(crate) fn logged_authority(authority: &str, default_port: u16) -> (String, u16) {
    let after_userinfo = authority.rsplit('@').next().unwrap_or_default();
    match split_authority(after_userinfo) {
        Ok((host, port)) => (host.to_string(), port.unwrap_or(default_port)),
        Err(_) => (INVALID_TARGET.to_string(), 0),
    }
}

/// Refuses `authority` (a CONNECT target, an absolute URL's authority, the TLS server name, a Host
/// header; `what` says which) when it holds one of this session's placeholders, as
/// `credential_endpoint_mismatch` naming the secrets, recorded about `subject`.
pub(crate) fn check_no_placeholder(
    session: &SessionContext,
    authority: &str,
    what: &str,
    subject: &Subject,
) -> Result<(), Refusal> {
    if session.secrets.is_empty() {
        return Ok(());
    }
    let sightings = session.secrets.get().scanner().scan_authority(authority);
    if sightings.is_empty() {
        return Ok(());
    }
    let mut names: Vec<String> = sightings.into_iter().map(|s| s.secret).collect();
    names.sort();
    names.dedup();
    let decision = Decision::deny(
        Reason::CredentialEndpointMismatch,
        "secrets are never host names",
        format!(
            "{what} holds the placeholder of {} {}; a placeholder is only replaced in header \
             values, the query string or a body sent to its own host",
            if names.len() == 1 {
                "secret"
            } else {
                "secrets"
            },
            names.join(", ")
        ),
    );
    Err(Refusal::denied(subject, &decision).naming_secrets(&names))
}

/// Refuses a request inside a tunnel whose Host header or `:authority` (absolute or h2) holds one of
/// the session's placeholders. Bytes that are not UTF-8 are replaced for the scan, which cannot hide
/// a placeholder (placeholders are ASCII). Borrows the text: this runs on every request.
pub(crate) fn check_request_authorities<B>(
    session: &SessionContext,
    req: &Request<B>,
    subject: &Subject,
) -> Result<(), Refusal> {
    if session.secrets.is_empty() {
        return Ok(());
    }
    let hosts = req.headers().get_all(HOST).iter();
    hosts
        .map(|v| ("the Host header", String::from_utf8_lossy(v.as_bytes())))
        .chain(
            req.uri()
                .authority()
                .map(|a| ("the request's authority", a.as_str().into())),
        )
        .try_for_each(|(what, text)| check_no_placeholder(session, &text, what, subject))
}

/// Why the TLS server name does not fit the CONNECT target, if it does not. Clients send no SNI for an
/// IP address, so none is needed there.
pub(crate) fn sni_mismatch(target: &Host, sni: Option<&str>) -> Option<String> {
    match sni {
        None if matches!(target, Host::Ip(_)) => None,
        None => Some(format!(
            "the client sent no TLS server name for the CONNECT target {target}"
        )),
        Some(name) => match Host::parse(name) {
            Ok(host) if &host == target => None,
            _ => Some(format!(
                "the TLS server name {name:?} does not match the CONNECT target {target}"
            )),
        },
    }
}

/// The Host value to forward, once every authority the request names (Host header, absolute or h2
/// `:authority`) is the CONNECT target by name and port.
pub(crate) fn checked_authority<B>(
    req: &Request<B>,
    target: &Host,
    port: u16,
    default_port: u16,
) -> Result<HeaderValue, String> {
    let mut hosts = req.headers().get_all(HOST).iter();
    let host_header = hosts.next();
    if hosts.next().is_some() {
        return Err("the request has more than one Host header".to_string());
    }
    let host_text = match host_header {
        Some(value) => Some(
            value
                .to_str()
                .map_err(|_| "the Host header is not ASCII text".to_string())?,
        ),
        None => None,
    };
    let uri_authority = req.uri().authority().map(|a| a.as_str());
    let Some(first) = host_text.or(uri_authority) else {
        return Err("the request names no host (no Host header or :authority)".to_string());
    };
    for text in host_text.iter().chain(uri_authority.iter()) {
        if names_target_canonically(text, target, port, default_port) {
            continue;
        }
        if text.contains('@') {
            return Err(format!("the authority {text:?} carries credentials"));
        }
        let (host, named_port) = split_authority(text).map_err(|e| e.to_string())?;
        if &host != target || named_port.unwrap_or(default_port) != port {
            return Err(format!(
                "the request's host {text:?} does not match the CONNECT target {}",
                target.authority(port)
            ));
        }
    }
    match host_header {
        // The first authority is the Host header's: forwarded as it came (a shared, cheap clone).
        Some(value) => Ok(value.clone()),
        None => HeaderValue::from_str(first)
            .map_err(|_| format!("the host {first:?} is not a valid header")),
    }
}

/// Whether `text` is the target written the one way fenzi writes it (lower-case name or dotted
/// IPv4, then `:port` unless the port is the default, no leading zero), byte for byte: what nearly
/// every client sends, so it is accepted without the full parse (and its allocations) on every
/// request. Any other spelling takes the full parse, which may accept it too. An IPv6 target always
/// takes the parse.
fn names_target_canonically(text: &str, target: &Host, port: u16, default_port: u16) -> bool {
    let (host, named) = match text.rsplit_once(':') {
        // No sign, no leading zero: the port as fenzi writes it.
        Some((host, digits))
            if !digits.starts_with('0') && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            match digits.parse::<u16>() {
                Ok(named) => (host, named),
                Err(_) => return false,
            }
        }
        Some(_) => return false,
        None => (text, default_port),
    };
    named == port
        && match target {
            Host::Name(name) => !name.is_empty() && host == name,
            // std's parser takes dotted decimal only, with no leading zeros: fenzi's own spelling.
            Host::Ip(std::net::IpAddr::V4(v4)) => host.parse::<std::net::Ipv4Addr>() == Ok(*v4),
            Host::Ip(std::net::IpAddr::V6(_)) => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canonical_authority_is_one_the_full_parse_accepts() {
        let targets = [host("mcp.example.com"), host("127.0.0.1"), host("::1")];
        let texts = [
            "mcp.example.com",
            "mcp.example.com:443",
            "mcp.example.com:8443",
            "mcp.example.com:0443",
            "mcp.example.com:",
            "mcp.example.com.",
            "MCP.example.com",
            "mcp.example.com.evil",
            "mcp.example.comx:443",
            "127.0.0.1",
            "127.0.0.1:443",
            "127.0.0.1:8443",
            "127.0.0.10:443",
            "127.000.0.1:443",
            "127.0.0.01:443",
            "127.1:443",
            "127.0.0.1:+443",
            "127.0.0.1:65536",
            "[::1]:443",
            "",
            ":443",
        ];
        for target in &targets {
            for port in [443, 8443] {
                for text in texts {
                    if names_target_canonically(text, target, port, 443) {
                        let (parsed, named) = split_authority(text).unwrap();
                        assert_eq!(&parsed, target, "{text}");
                        assert_eq!(named.unwrap_or(443), port, "{text}");
                    }
                }
            }
        }
        assert!(names_target_canonically(
            "127.0.0.1:8443",
            &targets[1],
            8443,
            443
        ));
        assert!(names_target_canonically(
            "mcp.example.com",
            &targets[0],
            443,
            443
        ));
        assert!(!names_target_canonically(
            "mcp.example.com",
            &targets[0],
            8443,
            443
        ));
        assert!(!names_target_canonically(
            "[::1]:443",
            &targets[2],
            443,
            443
        ));
    }

    #[test]
    fn logged_authorities_carry_no_userinfo_and_no_unparsed_text() {
        let logged = |text| logged_authority(text, 443);
        assert_eq!(logged("MCP.test:8443"), ("mcp.test".to_string(), 8443));
        assert_eq!(logged("mcp.test"), ("mcp.test".to_string(), 443));
        assert_eq!(
            logged("agent:hunter2@mcp.test:443"),
            ("mcp.test".to_string(), 443)
        );
        assert_eq!(logged("a@b:c@mcp.test"), ("mcp.test".to_string(), 443));
        for bad in [
            "",
            "a..b:443",
            "mcp.test:99999",
            "mcp.test:",
            "hunter2@",
            "mcp.test:443@hunter2 x",
            "[::1",
        ] {
            assert_eq!(logged(bad), (INVALID_TARGET.to_string(), 0), "{bad:?}");
        }
    }

    fn host(text: &str) -> Host {
        Host::parse(text).unwrap()
    }

    #[test]
    fn sni_must_name_the_connect_target() {
        let name = host("mcp.example.com");
        assert_eq!(sni_mismatch(&name, Some("mcp.example.com")), None);
        assert_eq!(sni_mismatch(&name, Some("MCP.Example.com.")), None);
        assert!(sni_mismatch(&name, Some("other.example.com")).is_some());
        assert!(sni_mismatch(&name, None).is_some(), "a name needs SNI");
        let ip = host("10.0.0.5");
        assert_eq!(
            sni_mismatch(&ip, None),
            None,
            "clients send no SNI for an IP"
        );
        assert!(sni_mismatch(&ip, Some("mcp.example.com")).is_some());
    }

    fn request(host_headers: &[&str], uri: &str) -> Request<()> {
        let mut builder = Request::builder().uri(uri);
        for h in host_headers {
            builder = builder.header(HOST, *h);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn authorities_must_all_name_the_target_by_name_and_port() {
        let target = host("mcp.example.com");
        let check =
            |hosts: &[&str], uri: &str| checked_authority(&request(hosts, uri), &target, 443, 443);
        assert_eq!(
            check(&["mcp.example.com"], "/mcp").unwrap(),
            "mcp.example.com"
        );
        assert_eq!(
            check(&["mcp.example.com:443"], "/mcp").unwrap(),
            "mcp.example.com:443"
        );
        assert!(check(&["mcp.example.com"], "https://mcp.example.com/mcp").is_ok());
        assert!(check(&[], "https://mcp.example.com/mcp").is_ok());
        for (hosts, uri) in [
            (&["mcp.example.com:8443"][..], "/mcp"),
            (&["evil.com"][..], "/mcp"),
            (&["mcp.example.com"][..], "https://evil.com/mcp"),
            (&["mcp.example.com", "mcp.example.com"][..], "/mcp"),
            (&["user@mcp.example.com"][..], "/mcp"),
            (&[][..], "/mcp"),
        ] {
            assert!(check(hosts, uri).is_err(), "{hosts:?} {uri}");
        }
        // Plain HTTP in a tunnel defaults to port 80.
        let plain = checked_authority(&request(&["mcp.example.com"], "/"), &target, 80, 80);
        assert!(plain.is_ok());
    }
}
