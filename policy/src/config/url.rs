//! The `url:` of a remote MCP server: an absolute `http(s)` URL reduced to what the proxy matches
//! on (scheme, host, port, path). Anything the proxy would not enforce, or that two URL parsers
//! might read differently, is refused: user info, query, fragment, backslashes, dot segments.
//!
//! Messages never repeat the URL: a pasted URL often carries a credential (`?api_key=…`,
//! `user:pass@`), and errors end up in terminals and CI logs.

use super::model::RemoteUrl;
use crate::host::{HostMatcher, HostPattern, split_authority};

/// Why a url was refused, and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UrlError {
    pub message: String,
    pub hint: String,
}

fn err(message: impl Into<String>, hint: impl Into<String>) -> UrlError {
    UrlError {
        message: message.into(),
        hint: hint.into(),
    }
}

const SHAPE_HINT: &str = "write it as https://host[:port]/path, e.g. https://mcp.example.com/mcp";

/// Parses a `url:` value.
pub fn parse(text: &str) -> Result<RemoteUrl, UrlError> {
    if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(
            "the url contains whitespace or a control character",
            SHAPE_HINT,
        ));
    }
    if text.contains('\\') {
        return Err(err(
            "the url contains a backslash, which URL parsers read differently",
            SHAPE_HINT,
        ));
    }
    let Some((scheme, rest)) = text.split_once("://") else {
        return Err(err("the url is not absolute (no `https://`)", SHAPE_HINT));
    };
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "https" => true,
        "http" => false,
        _ => {
            return Err(err(
                "the url's scheme is not https or http",
                "a remote MCP server is reached over Streamable HTTP; use an https:// url",
            ));
        }
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    if authority.contains('@') {
        return Err(err(
            "the url carries a user name or password (`user@`), which a policy file must not hold",
            "remove it; store a token with `fenzi mcp token NAME` and set `token: true`",
        ));
    }
    if tail.contains('#') {
        return Err(err(
            "the url has a fragment (`#...`), which is never sent to a server",
            "remove everything from `#` on",
        ));
    }
    if tail.contains('?') {
        return Err(err(
            "the url has a query (`?...`): requests are matched by host, port and path only, and \
             a query in a policy file often holds a credential",
            "remove the query; if it carried a token, store it with `fenzi mcp token NAME` and set \
             `token: true`",
        ));
    }
    if authority.is_empty() {
        return Err(err("the url has no host", SHAPE_HINT));
    }
    // The pattern parser is the strict one (canonical IPv4, no stray characters); the authority
    // split tells whether a port was written.
    let pattern = HostPattern::parse(authority).map_err(|e| {
        err(
            format!("the url's host is invalid: {e}"),
            "write a DNS name or an IP address, with :port if not the scheme's default",
        )
    })?;
    let HostMatcher::Exact(host) = pattern.matcher else {
        return Err(err(
            "the url's host is a wildcard; a server has one host",
            "write the server's exact host name",
        ));
    };
    // RFC 6761: `localhost` and names below it always resolve to loopback, and fenzi refuses a
    // name that resolves to an internal address: such a server could never be reached.
    if let crate::host::Host::Name(name) = &host
        && (name == "localhost" || name.ends_with(".localhost"))
    {
        return Err(err(
            "the url's host is `localhost`, which resolves to a loopback address; fenzi refuses a \
             name that resolves to an internal address, so every request would be denied",
            "name the address itself, e.g. https://127.0.0.1:8443/mcp: an IP literal the policy \
             names may be internal",
        ));
    }
    let (_, explicit_port) = split_authority(authority).map_err(|e| {
        err(
            format!("the url's host is invalid: {e}"),
            "write a DNS name or an IP address, with :port if not the scheme's default",
        )
    })?;
    let port = explicit_port.unwrap_or(if tls { 443 } else { 80 });
    let path = if tail.is_empty() { "/" } else { tail };
    check_path(path)?;
    Ok(RemoteUrl {
        text: text.to_string(),
        tls,
        host,
        port,
        path: path.to_string(),
    })
}

/// RFC 3986 path characters only, well-formed `%XX`, no `.`/`..` segments: the path must mean
/// the same to the proxy, the client and the server.
fn check_path(path: &str) -> Result<(), UrlError> {
    let bytes = path.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'%' {
            let hex = |j: usize| bytes.get(j).is_some_and(u8::is_ascii_hexdigit);
            if !(hex(i + 1) && hex(i + 2)) {
                return Err(err(
                    "the url's path has a `%` that is not followed by two hex digits",
                    "percent-encode the path correctly, e.g. %20",
                ));
            }
            i += 3;
            continue;
        }
        let ok = b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/".contains(&b);
        if !ok {
            return Err(err(
                "the url's path has a character that must be percent-encoded",
                "percent-encode it (e.g. a space as %20)",
            ));
        }
        i += 1;
    }
    if path.split('/').any(|seg| seg == "." || seg == "..") {
        return Err(err(
            "the url's path has a `.` or `..` segment",
            "write the path the server uses, without dot segments",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_parts() {
        let u = parse("https://mcp.example.com/mcp").unwrap();
        assert!(u.tls);
        assert_eq!((u.port, u.path.as_str()), (443, "/mcp"));
        let u = parse("http://mcp.example.com").unwrap();
        assert_eq!((u.tls, u.port, u.path.as_str()), (false, 80, "/"));
        let u = parse("HTTPS://127.0.0.1:8443/mcp").unwrap();
        assert_eq!(u.host.to_string(), "127.0.0.1");
        assert_eq!(u.port, 8443);
    }

    #[test]
    fn refusals_never_repeat_the_url() {
        for text in [
            "https://mcp.example.com/mcp?api_key=sk-SECRET",
            "https://user:sk-SECRET@mcp.example.com/mcp",
            "https://mcp.example.com/mcp#sk-SECRET",
            "ftp://sk-SECRET.example.com/",
            "https://mcp.example.com/sk-SECRET /x",
        ] {
            let e = parse(text).unwrap_err();
            assert!(!e.message.contains("SECRET"), "{text}: {}", e.message);
        }
    }

    #[test]
    fn ambiguous_urls_are_refused() {
        for text in [
            "https://mcp.example.com\\@evil.com/",
            "https://mcp.example.com/a/../b",
            "https://mcp.example.com/%zz",
            "https://*.example.com/mcp",
            "https:///mcp",
            "mcp.example.com/mcp",
            "https://mcp.example.com:0/",
            "https://2130706433/mcp",
        ] {
            assert!(parse(text).is_err(), "{text}");
        }
    }
}
