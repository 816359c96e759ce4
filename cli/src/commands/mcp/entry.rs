//! One `mcp:` entry as `fenzi mcp add` and `fenzi mcp import` write it: the model ([`NewEntry`]),
//! its YAML text in the file's own indentation, and the check that a written file means exactly
//! what was asked ([`describe_server`] compares entries as the loader read them).

use fenzi_policy::config::{Config, McpServerConfig, ServerKind};

/// What to write for one server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEntry {
    pub name: String,
    pub body: Body,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Body {
    Remote {
        url: String,
        token: bool,
        /// `oauth: true` (written instead of `token: true`: the sign-in's token is the server's).
        oauth: bool,
        allow: Vec<String>,
        deny: Vec<String>,
    },
    /// A command (stdio) server: fenzi runs it and offers it over its bridge, checked per tool
    /// like a remote one (DESIGN §18).
    Local {
        command: Vec<String>,
        secrets: Vec<String>,
        hosts: Vec<String>,
        /// `run: host` (the machine file only): outside any sandbox.
        run_host: bool,
        allow: Vec<String>,
        deny: Vec<String>,
    },
    Account {
        account: String,
        allow: Vec<String>,
        deny: Vec<String>,
    },
}

impl NewEntry {
    /// The entry's lines (no line endings): the key at `indent` spaces, its body `step` deeper.
    pub fn lines(&self, indent: usize, step: usize) -> Vec<String> {
        let k = " ".repeat(indent);
        let b = " ".repeat(indent + step);
        let t = " ".repeat(indent + 2 * step);
        let mut out = vec![format!("{k}{}:", scalar(&self.name, false))];
        let tools = |out: &mut Vec<String>, allow: &[String], deny: &[String]| {
            out.push(format!("{b}tools:"));
            out.push(format!("{t}allow: {}", flow_list(allow)));
            if !deny.is_empty() {
                out.push(format!("{t}deny: {}", flow_list(deny)));
            }
        };
        match &self.body {
            Body::Remote {
                url,
                token,
                oauth,
                allow,
                deny,
            } => {
                out.push(format!("{b}url: {}", scalar(url, false)));
                if *oauth {
                    out.push(format!("{b}oauth: true"));
                } else if *token {
                    out.push(format!("{b}token: true"));
                }
                tools(&mut out, allow, deny);
            }
            Body::Local {
                command,
                secrets,
                hosts,
                run_host,
                allow,
                deny,
            } => {
                out.push(format!("{b}command: {}", flow_list(command)));
                if *run_host {
                    out.push(format!("{b}run: host"));
                }
                if !secrets.is_empty() {
                    out.push(format!("{b}secrets: {}", flow_list(secrets)));
                }
                if !hosts.is_empty() {
                    out.push(format!("{b}hosts: {}", flow_list(hosts)));
                }
                tools(&mut out, allow, deny);
            }
            Body::Account {
                account,
                allow,
                deny,
            } => {
                out.push(format!("{b}account: {}", scalar(account, false)));
                tools(&mut out, allow, deny);
            }
        }
        out
    }

    /// The one-line form [`describe_server`] gives the loaded entry, for the written-as-asked
    /// check.
    pub fn describe(&self) -> String {
        match &self.body {
            Body::Remote {
                url,
                token,
                oauth,
                allow,
                deny,
            } => format!(
                "remote url={url} token={} oauth={oauth} allow={} deny={}",
                *token || *oauth,
                allow.join(","),
                deny.join(",")
            ),
            Body::Local {
                command,
                secrets,
                hosts,
                run_host,
                allow,
                deny,
            } => format!(
                "local command={} secrets={} hosts={} run={} allow={} deny={}",
                command.join("\u{1f}"),
                secrets.join(","),
                hosts
                    .iter()
                    .map(|h| fenzi_policy::host::HostPattern::parse(h)
                        .map(|p| p.to_string())
                        .unwrap_or_else(|_| h.clone()))
                    .collect::<Vec<_>>()
                    .join(","),
                if *run_host { "host" } else { "sandbox" },
                allow.join(","),
                deny.join(",")
            ),
            Body::Account {
                account,
                allow,
                deny,
            } => format!(
                "account {account} allow={} deny={}",
                allow.join(","),
                deny.join(",")
            ),
        }
    }
}

/// A loaded server in [`NewEntry::describe`]'s form (without origin or location).
pub fn describe_server(s: &McpServerConfig) -> String {
    let pats = |v: &[fenzi_policy::config::Located<fenzi_policy::tool_pattern::ToolPattern>]| {
        v.iter()
            .map(|p| p.value.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    match &s.kind {
        ServerKind::Remote {
            url,
            token,
            oauth,
            tools,
        } => format!(
            "remote url={} token={token} oauth={oauth} allow={} deny={}",
            url.text,
            pats(&tools.allow),
            pats(&tools.deny)
        ),
        ServerKind::Local {
            command,
            secrets,
            hosts,
            run,
            tools,
        } => format!(
            "local command={} secrets={} hosts={} run={} allow={} deny={}",
            command.join("\u{1f}"),
            secrets
                .iter()
                .map(|s| s.value.as_str())
                .collect::<Vec<_>>()
                .join(","),
            hosts
                .iter()
                .map(|h| h.value.to_string())
                .collect::<Vec<_>>()
                .join(","),
            run.name(),
            pats(&tools.allow),
            pats(&tools.deny)
        ),
        ServerKind::Account { provider, tools } => format!(
            "account {} allow={} deny={}",
            match provider {
                fenzi_policy::config::AccountProvider::Claude => "claude",
            },
            pats(&tools.allow),
            pats(&tools.deny)
        ),
    }
}

/// Everything one file says, as comparable lines without positions: used to prove that an edit
/// changed exactly the one entry it meant to.
pub fn describe_config(c: &Config) -> Vec<String> {
    let mut out = Vec::new();
    for h in &c.hosts {
        out.push(format!("host {}", h.value));
    }
    for s in &c.mcp {
        out.push(format!("server {} {}", s.name, describe_server(s)));
    }
    for s in &c.secrets {
        let hosts = s
            .hosts
            .iter()
            .map(|h| h.value.to_string())
            .collect::<Vec<_>>();
        out.push(format!(
            "secret {} hosts={} body={}",
            s.name,
            hosts.join(","),
            s.body
        ));
    }
    out
}

/// `[a, b, "c d"]`.
pub fn flow_list(items: &[String]) -> String {
    let inner = items
        .iter()
        .map(|s| scalar(s, true))
        .collect::<Vec<_>>()
        .join(", ");
    format!("[{inner}]")
}

/// A YAML scalar for `s`: plain when that cannot be read as anything but this string, else
/// double-quoted. Conservative on purpose; the result is re-read by the loader before writing.
pub fn scalar(s: &str, in_flow: bool) -> String {
    if plain_ok(s, in_flow) {
        s.to_string()
    } else {
        quoted(s)
    }
}

fn plain_ok(s: &str, in_flow: bool) -> bool {
    let Some(first) = s.chars().next() else {
        return false;
    };
    let lower = s.to_ascii_lowercase();
    // Words YAML 1.1 or 1.2 would read as booleans or null; numbers (digits, signs, dots).
    const WORDS: &[&str] = &[
        "true", "false", "null", "~", "yes", "no", "on", "off", "y", "n", ".inf", "-.inf", "+.inf",
        ".nan",
    ];
    if WORDS.contains(&lower.as_str()) {
        return false;
    }
    let second = s.chars().nth(1);
    let numberish = first.is_ascii_digit()
        || (matches!(first, '-' | '+' | '.') && second.is_some_and(|c| c.is_ascii_digit()));
    if numberish {
        return false;
    }
    let first_ok = first.is_ascii_alphanumeric()
        || matches!(first, '_' | '/' | '.')
        || (first == '-' && second.is_some_and(|c| c.is_ascii_alphabetic() || c == '-'));
    if !first_ok {
        return false;
    }
    s.chars().all(|c| {
        c.is_ascii_alphanumeric()
            || matches!(c, '_' | '.' | '/' | '-' | '@' | '%' | '+' | '=' | '~')
            || (c == ':' && !in_flow)
    }) && !s.ends_with(':')
}

fn quoted(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scalars_are_plain_only_when_unambiguous() {
        for (s, want) in [
            ("read_wiki", "read_wiki"),
            ("*", "\"*\""),
            ("-y", "-y"),
            ("--services", "--services"),
            ("-", "\"-\""),
            ("-1", "\"-1\""),
            ("@digitalocean/mcp", "\"@digitalocean/mcp\""),
            ("/sandbox", "/sandbox"),
            ("true", "\"true\""),
            ("No", "\"No\""),
            ("8080", "\"8080\""),
            ("a b", "\"a b\""),
            ("a,b", "\"a,b\""),
            ("x#y", "\"x#y\""),
            ("say \"hi\"", "\"say \\\"hi\\\"\""),
            ("", "\"\""),
            ("*.example.com", "\"*.example.com\""),
        ] {
            assert_eq!(scalar(s, true), want, "{s}");
        }
        assert_eq!(
            scalar("https://mcp.deepwiki.com/mcp", false),
            "https://mcp.deepwiki.com/mcp"
        );
        assert_eq!(scalar("a:b", true), "\"a:b\"");
    }

    #[test]
    fn entries_use_the_given_indentation() {
        let e = NewEntry {
            name: "deepwiki".into(),
            body: Body::Remote {
                url: "https://mcp.deepwiki.com/mcp".into(),
                token: true,
                oauth: false,
                allow: vec!["a".into(), "*".into()],
                deny: vec!["b".into()],
            },
        };
        assert_eq!(
            e.lines(4, 4),
            vec![
                "    deepwiki:",
                "        url: https://mcp.deepwiki.com/mcp",
                "        token: true",
                "        tools:",
                "            allow: [a, \"*\"]",
                "            deny: [b]",
            ]
        );
    }
}
