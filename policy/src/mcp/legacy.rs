//! The legacy HTTP+SSE transport (protocol 2024-11-05): the message paths a server announced.
//!
//! A legacy client opens an event stream with `GET` of the server's endpoint, and the server's
//! `endpoint` event names the URI the client is to POST its messages to
//! (`/messages?sessionId=…`). The classifier admits a JSON-RPC POST only at the server's endpoint or
//! at a path recorded here ([`MessagePaths`]): the server, not the agent, says where messages go.
//!
//! An announcement is read as strictly as the endpoint is matched: it is resolved against the path of
//! the stream that carried it (RFC 3986 §5.2, without dot-segment removal), and recorded only when
//! the result is a path compared byte for byte (query aside) like the endpoint's, with nothing a
//! server could resolve to another path: no percent-escape, `;` parameter, `\`, or empty, `.` or
//! `..` segment, and no fragment. An absolute URI counts only with scheme `http` or `https` and
//! exactly the server's own host and port; a network-path reference (`//host/...`) never does. An
//! announcement that cannot be recorded is not an error of the stream: its POSTs are refused.

use super::http::{is_plain_subpath, parse_target};

/// Most distinct message paths one server may announce in one session. Real servers announce one
/// (the session id travels in the query); the bound keeps a hostile server from growing memory
/// or the per-request comparison without limit.
pub const MAX_MESSAGE_PATHS: usize = 16;

/// Why an `endpoint` event's URI was not recorded. Messages are fenzi's own words: the URI is the
/// server's bytes and is never repeated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AnnounceError {
    #[error(
        "the announced message URI is not a path fenzi can match exactly (a percent-escape, `;` \
         parameter, fragment, or empty, `.` or `..` segment)"
    )]
    Ambiguous,
    #[error("the announced message URI names another server")]
    OtherServer,
    #[error("the server announced more than {MAX_MESSAGE_PATHS} message paths in this session")]
    Full,
}

/// The message paths one server announced in this session, without their queries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MessagePaths {
    paths: Vec<String>,
}

/// The server an announcement must name if it names one: its host (as the policy names it, an IPv6
/// literal with or without brackets) and port.
#[derive(Debug, Clone, Copy)]
pub struct Authority<'a> {
    pub host: &'a str,
    pub port: u16,
}

impl MessagePaths {
    /// Records the path `data` (an `endpoint` event's data) names, resolved against `stream`, the
    /// path of the request whose answer carried it.
    pub fn announce(
        &mut self,
        authority: Authority<'_>,
        stream: &str,
        data: &str,
    ) -> Result<(), AnnounceError> {
        let path = resolve(authority, stream, data)?;
        if self.contains(&path) {
            return Ok(());
        }
        if self.paths.len() >= MAX_MESSAGE_PATHS {
            return Err(AnnounceError::Full);
        }
        self.paths.push(path);
        Ok(())
    }

    /// Is `path` (without its query) one the server announced? Byte equality, as for the endpoint.
    pub fn contains(&self, path: &str) -> bool {
        self.paths.iter().any(|p| p == path)
    }
}

/// The path (without query) `data` names, resolved against `stream`.
fn resolve(authority: Authority<'_>, stream: &str, data: &str) -> Result<String, AnnounceError> {
    if data.is_empty() || data.contains('#') {
        return Err(AnnounceError::Ambiguous);
    }
    // A scheme is what comes before the first ':' when no '/', '?' comes first (RFC 3986 §4.2).
    let scheme_end = data
        .find([':', '/', '?'])
        .filter(|&i| data[i..].starts_with(':'));
    let target = if let Some(end) = scheme_end {
        let default_port = match &data[..end] {
            s if s.eq_ignore_ascii_case("https") => 443,
            s if s.eq_ignore_ascii_case("http") => 80,
            _ => return Err(AnnounceError::OtherServer),
        };
        let rest = data[end + 1..]
            .strip_prefix("//")
            .ok_or(AnnounceError::Ambiguous)?;
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        if !same_server(authority, &rest[..split], default_port) {
            return Err(AnnounceError::OtherServer);
        }
        match &rest[split..] {
            "" => "/".to_string(),
            q if q.starts_with('?') => format!("/{q}"),
            p => p.to_string(),
        }
    } else if data.starts_with("//") {
        return Err(AnnounceError::OtherServer);
    } else if data.starts_with('/') {
        data.to_string()
    } else if data.starts_with('?') {
        // A query alone keeps the stream's own path.
        format!("{stream}{data}")
    } else {
        // A relative path replaces the last segment of the stream's path (RFC 3986 §5.2.3).
        let dir = stream.rfind('/').map_or("/", |i| &stream[..=i]);
        format!("{dir}{data}")
    };
    let path = parse_target(&target)
        .map_err(|_| AnnounceError::Ambiguous)?
        .path;
    if !is_plain_subpath(&path[1..]) {
        return Err(AnnounceError::Ambiguous);
    }
    Ok(path.to_string())
}

/// Does `named` (an authority: `host[:port]`, no user info) name exactly `server`'s host and port?
pub(super) fn same_server(server: Authority<'_>, named: &str, default_port: u16) -> bool {
    if named.contains(['@', '%']) {
        return false;
    }
    let (host, port) = match named.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((host, "")) => (host, None),
            Some((host, rest)) => match rest.strip_prefix(':') {
                Some(port) => (host, Some(port)),
                None => return false,
            },
            None => return false,
        },
        None => match named.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (named, None),
        },
    };
    let port = match port {
        None | Some("") => default_port,
        Some(p) if !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()) => {
            match p.parse() {
                Ok(port) => port,
                Err(_) => return false,
            }
        }
        Some(_) => return false,
    };
    let expected = server
        .host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(server.host);
    !host.is_empty() && host.eq_ignore_ascii_case(expected) && port == server.port
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: Authority<'static> = Authority {
        host: "mcp.example.com",
        port: 443,
    };

    fn resolved(data: &str) -> Result<String, AnnounceError> {
        resolve(SERVER, "/sse", data)
    }

    #[test]
    fn announcements_resolve_against_the_stream() {
        for (data, path) in [
            ("/messages?sessionId=abc", "/messages"),
            ("/messages/?session_id=abc", "/messages/"),
            ("/messages", "/messages"),
            ("messages?sessionId=1", "/messages"),
            ("https://mcp.example.com/messages?sessionId=1", "/messages"),
            ("HTTPS://MCP.example.com:443/m/x", "/m/x"),
            ("https://mcp.example.com?x=1", "/"),
            ("https://mcp.example.com", "/"),
            ("/", "/"),
            ("?sessionId=1", "/sse"),
        ] {
            assert_eq!(resolved(data).as_deref(), Ok(path), "{data}");
        }
        assert_eq!(
            resolve(SERVER, "/a/sse", "msg?s=1").as_deref(),
            Ok("/a/msg")
        );
        let v6 = Authority {
            host: "::1",
            port: 8443,
        };
        assert_eq!(
            resolve(v6, "/sse", "https://[::1]:8443/messages").as_deref(),
            Ok("/messages")
        );
        let http = Authority {
            host: "127.0.0.1",
            port: 80,
        };
        assert_eq!(
            resolve(http, "/sse", "http://127.0.0.1/messages").as_deref(),
            Ok("/messages")
        );
    }

    #[test]
    fn ambiguous_or_foreign_announcements_are_not_recorded() {
        for data in [
            "/messages/../admin",
            "/./messages",
            "/messages//x",
            "/m%65ssages",
            "/messages;x=1",
            "/messages#frag",
            "../admin",
            "./messages",
            "/messages\\x",
            "/mess ages",
            "",
            "https:/messages",
            "https:messages",
        ] {
            assert_eq!(resolved(data), Err(AnnounceError::Ambiguous), "{data:?}");
        }
        for data in [
            "//evil.example/messages",
            "//messages",
            "https://evil.example/messages",
            "https://mcp.example.com:8443/messages",
            "http://mcp.example.com/messages",
            "https://user@mcp.example.com/messages",
            "https://mcp.example.com%2e/messages",
            "https://mcp.example.com:99999/messages",
            "https://mcp.example.com:+443/messages",
            "ftp://mcp.example.com/messages",
            "javascript:alert(1)",
            "https://[mcp.example.com]x/messages",
        ] {
            assert_eq!(resolved(data), Err(AnnounceError::OtherServer), "{data:?}");
        }
    }

    #[test]
    fn paths_are_compared_exactly_and_bounded() {
        let mut paths = MessagePaths::default();
        paths.announce(SERVER, "/sse", "/messages?s=1").unwrap();
        paths.announce(SERVER, "/sse", "/messages?s=2").unwrap();
        assert!(paths.contains("/messages"));
        for other in ["/messages/", "/Messages", "/messages;x", "/message", "/sse"] {
            assert!(!paths.contains(other), "{other}");
        }
        for i in 1..MAX_MESSAGE_PATHS {
            paths.announce(SERVER, "/sse", &format!("/m{i}")).unwrap();
        }
        assert_eq!(
            paths.announce(SERVER, "/sse", "/one-more"),
            Err(AnnounceError::Full)
        );
        assert!(!paths.contains("/one-more"));
        // One already recorded is still fine when the set is full.
        assert_eq!(paths.announce(SERVER, "/sse", "/messages?s=3"), Ok(()));
    }
}
