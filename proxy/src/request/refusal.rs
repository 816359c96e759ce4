//! The one way a request is refused or fails. A [`Refusal`] holds the audit records of one refusal
//! and the answer the client gets once they are written. Building one records nothing; exactly two
//! functions write a refusal's records:
//!
//! - [`Refusal::answer`]: writes the records, then returns the answer. When any record cannot be
//!   written, the answer is 503 `audit_unavailable` instead: an answer never goes out unrecorded,
//!   and nothing is forwarded either way. This is the only place that decides the 503.
//! - [`Refusal::record`]: writes the records of a refusal whose answer is not ours to give (a TLS
//!   handshake abandoned, a request hyper already answered, a response body that broke off after
//!   its head went out).
//!
//! The phases of the request path return `Result<_, Refusal>`, so a refusal anywhere is a `?`, and
//! the request's entry point hands it to [`Refusal::answer`]. An allowed record that cannot be
//! written converts into [`Refusal::audit_unavailable`] the same way.
//!
//! Naming: constructors say what was refused (`denied`, `bad_request`, `failed`, `unparsed`); checks
//! that may refuse are named `check_*` and return `Result<_, Refusal>`.

use crate::audit::sink::Subject;
use crate::audit::writer::AuditEntry;
use crate::connection::body::Body;
use crate::error::{ErrorSource, ProxyError};
use crate::request::respond;
use crate::session::context::{AuditUnavailable, SessionContext};
use fenzi_policy::{Decision, Reason};
use http::Response;

/// One refused (or failed) request. Boxed: refusals are rare, and the `Result`s of the request path
/// stay small on the path every allowed request takes.
pub(crate) struct Refusal(Box<Refused>);

/// A refusal's records, its answer, and what the log says of a failure.
struct Refused {
    /// Written in order before the answer; empty only for [`Refusal::audit_unavailable`].
    entries: Vec<AuditEntry>,
    /// `None` for a failure: its plain denial body is made from `why` once that is redacted.
    answer: Option<Response<Body>>,
    /// A failure's full text, for the log line only: the record names its reason and source.
    failure: Option<(ErrorSource, String)>,
    /// The reason the answer names and a line for people, for its `Proxy-Status` and reason phrase.
    why: (Reason, String),
}

// A failure's text may carry words a peer chose (an upstream's certificate names, say): it and
// every detail reach the log line and the client only through `SessionContext::redact`, which
// turns any secret value or placeholder of the session into its name.

impl Refusal {
    /// A denial by `decision` (the policy's, or the proxy's own), answered with its plain JSON body.
    pub fn denied(subject: &Subject, decision: &Decision) -> Refusal {
        Refusal(Box::new(Refused {
            entries: vec![subject.decided(decision)],
            answer: Some(respond::denied(decision)),
            failure: None,
            why: (
                decision.reason().unwrap_or(Reason::PolicyDenied),
                decision.message.clone(),
            ),
        }))
    }

    /// A request the proxy refuses as malformed; `detail` says what was wrong with it.
    pub fn bad_request(subject: &Subject, detail: &str) -> Refusal {
        Refusal::denied(subject, &malformed(detail))
    }

    /// A request (or an h2 connection) hyper refused as malformed and answered itself. The record
    /// names the client as the source; there is no answer of ours to send.
    pub fn unparsed(subject: &Subject, detail: &str) -> Refusal {
        let mut refusal = Refusal::bad_request(subject, detail);
        for entry in &mut refusal.0.entries {
            entry.source = Some(ErrorSource::Client.label().to_string());
        }
        refusal
    }

    /// A failure (of the client, the upstream or the proxy) after or instead of an allowed decision:
    /// a `failed` record naming the error's reason and source, never its text.
    pub fn failed(subject: &Subject, error: ProxyError) -> Refusal {
        Refusal(Box::new(Refused {
            entries: vec![subject.failed(&error)],
            answer: None,
            why: (error.reason(), error.to_string()),
            failure: Some((error.source_kind(), error.to_string())),
        }))
    }

    /// Several records (one per JSON-RPC message) and an answer built for them, which names
    /// `reason` and says `detail`.
    pub fn records(
        entries: Vec<AuditEntry>,
        answer: Response<Body>,
        reason: Reason,
        detail: String,
    ) -> Refusal {
        Refusal(Box::new(Refused {
            entries,
            answer: Some(answer),
            failure: None,
            why: (reason, detail),
        }))
    }

    /// An allowed decision that could not be recorded: nothing more to record, 503.
    pub fn audit_unavailable() -> Refusal {
        Refusal(Box::new(Refused {
            entries: Vec::new(),
            answer: Some(respond::audit_unavailable()),
            failure: None,
            why: (
                Reason::AuditUnavailable,
                respond::AUDIT_UNAVAILABLE.to_string(),
            ),
        }))
    }

    /// The records name these secrets (by name).
    pub fn naming_secrets(mut self, names: &[String]) -> Refusal {
        for entry in &mut self.0.entries {
            entry.secrets = names.to_vec();
        }
        self
    }

    /// The same records, answered with `answer` instead.
    pub fn answered_with(mut self, answer: Response<Body>) -> Refusal {
        self.0.answer = Some(answer);
        self
    }

    /// Writes the records, then returns the answer; 503 `audit_unavailable` when any record could
    /// not be written.
    pub fn answer(self, session: &SessionContext) -> Response<Body> {
        let Refused {
            entries,
            answer,
            failure,
            why: (reason, mut detail),
        } = *self.0;
        match write(session, entries, failure) {
            Ok(()) => {
                session.redact(&mut detail);
                let answer = answer.unwrap_or_else(|| respond::denial(reason, &detail));
                respond::naming(answer, reason, &detail)
            }
            Err(AuditUnavailable) => respond::naming(
                respond::audit_unavailable(),
                Reason::AuditUnavailable,
                respond::AUDIT_UNAVAILABLE,
            ),
        }
    }

    /// Writes the records of a refusal whose answer has gone out already, or that has no one to
    /// answer. A write failure is logged by [`SessionContext::record`]; nothing was forwarded.
    pub fn record(self, session: &SessionContext) {
        let Refused {
            entries, failure, ..
        } = *self.0;
        let _ = write(session, entries, failure);
    }
}

impl From<AuditUnavailable> for Refusal {
    fn from(_: AuditUnavailable) -> Refusal {
        Refusal::audit_unavailable()
    }
}

/// The `bad_request` decision of a malformed request.
fn malformed(detail: &str) -> Decision {
    Decision::deny(Reason::BadRequest, "malformed request", detail)
}

fn write(
    session: &SessionContext,
    entries: Vec<AuditEntry>,
    failure: Option<(ErrorSource, String)>,
) -> Result<(), AuditUnavailable> {
    if let (Some((source, mut text)), Some(first)) = (failure, entries.first()) {
        session.redact(&mut text);
        let (host, port) = (&first.host, first.port);
        // The client's own failures (a TLS handshake it gave up) are routine; the rest are not.
        if source == ErrorSource::Client {
            tracing::info!(%host, port, "{} failed: {text}", source.label());
        } else {
            tracing::warn!(%host, port, "{} failed: {text}", source.label());
        }
    }
    session.record_all(entries)
}
