//! The vocabulary of every decision fenzi makes: the verdict, the reason code a denial carries, the HTTP
//! status it maps to, and the rule that matched. Every other module returns these; the proxy only
//! carries them out and the audit log only records them.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a request was denied (or failed). The codes are part of the public contract (README, "What the proxy decides"):
/// they appear in denial bodies, in the audit log and in `fenzi check` case files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    HostNotAllowed,
    PrivateAddress,
    PolicyDenied,
    CredentialEndpointMismatch,
    BodyTooLarge,
    BadRequest,
    UpstreamError,
    AuditUnavailable,
    /// A pinned server's tool whose definition differs from its lock file, or is not in it.
    ToolChanged,
    /// A `tools/call` over a `limits` entry's `rate` or `concurrency` (README, "Limits").
    RateLimited,
    /// A `tools/call` whose answer did not end within its `limits` entry's `timeout`.
    Timeout,
    /// A `tools/call` whose answer grew past its `limits` entry's `max_response`.
    ResponseTooLarge,
    /// A `tools/call` held by `tools.confirm` that a person refused, or nobody answered in time.
    NotConfirmed,
    /// A connection (or a request carrying a secret) from a program the entry's `programs:` does
    /// not list, or whose program could not be told (DESIGN §17).
    ProgramNotAllowed,
}

impl Reason {
    pub const ALL: [Reason; 14] = [
        Reason::HostNotAllowed,
        Reason::PrivateAddress,
        Reason::PolicyDenied,
        Reason::CredentialEndpointMismatch,
        Reason::BodyTooLarge,
        Reason::BadRequest,
        Reason::UpstreamError,
        Reason::AuditUnavailable,
        Reason::ToolChanged,
        Reason::RateLimited,
        Reason::Timeout,
        Reason::ResponseTooLarge,
        Reason::NotConfirmed,
        Reason::ProgramNotAllowed,
    ];

    /// The snake_case code used on the wire and in the log.
    pub fn code(self) -> &'static str {
        match self {
            Reason::HostNotAllowed => "host_not_allowed",
            Reason::PrivateAddress => "private_address",
            Reason::PolicyDenied => "policy_denied",
            Reason::CredentialEndpointMismatch => "credential_endpoint_mismatch",
            Reason::BodyTooLarge => "body_too_large",
            Reason::BadRequest => "bad_request",
            Reason::UpstreamError => "upstream_error",
            Reason::AuditUnavailable => "audit_unavailable",
            Reason::ToolChanged => "tool_changed",
            Reason::RateLimited => "rate_limited",
            Reason::Timeout => "timeout",
            Reason::ResponseTooLarge => "response_too_large",
            Reason::NotConfirmed => "not_confirmed",
            Reason::ProgramNotAllowed => "program_not_allowed",
        }
    }

    pub fn from_code(code: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.code() == code)
    }

    /// The HTTP status a denial with this reason is answered with.
    pub fn http_status(self) -> u16 {
        match self {
            Reason::HostNotAllowed
            | Reason::PrivateAddress
            | Reason::PolicyDenied
            | Reason::CredentialEndpointMismatch
            | Reason::ToolChanged
            | Reason::NotConfirmed
            | Reason::ProgramNotAllowed => 403,
            Reason::BodyTooLarge => 413,
            Reason::BadRequest => 400,
            Reason::UpstreamError | Reason::ResponseTooLarge => 502,
            Reason::AuditUnavailable => 503,
            Reason::RateLimited => 429,
            Reason::Timeout => 504,
        }
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

/// Allowed, or denied for a reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Verdict {
    Allowed,
    Denied(Reason),
}

impl Verdict {
    /// `"allowed"` or `"denied"`, as written in the audit log.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Denied(_) => "denied",
        }
    }

    pub fn reason(self) -> Option<Reason> {
        match self {
            Verdict::Allowed => None,
            Verdict::Denied(r) => Some(r),
        }
    }
}

/// One decision: the verdict, the rule that produced it (a stable, human-readable name such as
/// `mcp.deepwiki.tools.allow "read_*"` or `default deny`), and a message for people. The message
/// never contains secret material: it is built only from policy names and request metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub verdict: Verdict,
    pub rule: String,
    pub message: String,
    /// For a `tools/call` a server's tool rules denied, which rule it was; `None` for every other
    /// decision. The hint a denial teaches is built from it (`mcp::teach`).
    pub tool_denial: Option<ToolDenial>,
}

/// Which of a server's tool rules denied a `tools/call`, as far as a person's next step goes.
/// Only the tool decision (`mcp::methods::tool`) sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDenial {
    /// No `allow` pattern of `server` matches (rule `mcp.<server> default deny`): `fenzi approve`
    /// can add the tool.
    NotAllowed { server: String },
    /// A `deny` pattern of `server` matches (rule `mcp.<server>.tools.deny "<pattern>"`): a choice
    /// that approve does not undo.
    DenyListed { server: String },
}

impl ToolDenial {
    /// The server whose tool rules denied the call.
    pub fn server(&self) -> &str {
        match self {
            ToolDenial::NotAllowed { server } | ToolDenial::DenyListed { server } => server,
        }
    }
}

impl Decision {
    pub fn allow(rule: impl Into<String>, message: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Allowed,
            rule: rule.into(),
            message: message.into(),
            tool_denial: None,
        }
    }

    pub fn deny(reason: Reason, rule: impl Into<String>, message: impl Into<String>) -> Decision {
        Decision {
            verdict: Verdict::Denied(reason),
            rule: rule.into(),
            message: message.into(),
            tool_denial: None,
        }
    }

    /// This denial, marked as made by the tool rules (see [`ToolDenial`]).
    pub fn by_tool_rule(self, denial: ToolDenial) -> Decision {
        Decision {
            tool_denial: Some(denial),
            ..self
        }
    }

    pub fn is_allowed(&self) -> bool {
        self.verdict == Verdict::Allowed
    }

    pub fn reason(&self) -> Option<Reason> {
        self.verdict.reason()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_map_to_statuses() {
        for r in Reason::ALL {
            assert_eq!(Reason::from_code(r.code()), Some(r));
            let json = serde_json::to_string(&r).unwrap();
            assert_eq!(json, format!("\"{}\"", r.code()));
        }
        assert_eq!(Reason::PolicyDenied.http_status(), 403);
        assert_eq!(Reason::BodyTooLarge.http_status(), 413);
        assert_eq!(Reason::BadRequest.http_status(), 400);
        assert_eq!(Reason::UpstreamError.http_status(), 502);
        assert_eq!(Reason::AuditUnavailable.http_status(), 503);
        assert_eq!(Reason::RateLimited.http_status(), 429);
        assert_eq!(Reason::Timeout.http_status(), 504);
        assert_eq!(Reason::ResponseTooLarge.http_status(), 502);
        assert_eq!(Reason::from_code("nope"), None);
    }
}
