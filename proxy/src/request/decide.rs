//! The decisions about a buffered request, each recorded before anything is forwarded (README, "What
//! the proxy decides" and "Secrets"; the integration guide in [`crate::secrets`]):
//!
//! 1. Secrets: where this session's placeholders appear and where the request goes. A placeholder
//!    sent to a host it is not bound to, or in clear text (not TLS on both hops), refuses the whole
//!    request: one `credential_endpoint_mismatch` record naming the secrets, 403, nothing sent.
//! 2. MCP: the classifier's decision, one record per message ([`crate::request::mcp_enforce`]); a denial is
//!    answered with JSON-RPC errors. A plain host has its one admitting record.
//! 3. The granted substitutions are carried out (header values, query, body where allowed, the bearer
//!    of a `token: true` server, `Content-Length`). A value written into an MCP body must not change
//!    what the classifier allowed, so such a body is classified again.
//! 4. The `tools/call`s' `limits` ([`crate::session::limits`]): over a rate or a concurrency, the request
//!    is refused `rate_limited` (429 with `Retry-After`, a JSON-RPC error per call), nothing sent.
//! 5. The `tools.confirm` calls are held until a person answers ([`crate::request::held`]): `held`
//!    records, then `not_confirmed` (403, a JSON-RPC error per call) unless every one is confirmed.
//! 6. The records are written, naming the secrets used.
//!
//! A new request rule belongs in `fenzi-policy` (the classifier or the secret-use decision); this
//! phase only orders the decisions and records them. See docs/architecture.md.

use crate::request::admit::{Handling, program_refusal};
use crate::request::context::RequestContext;
use crate::request::held;
use crate::request::mcp_enforce;
use crate::request::mcp_response::Reading;
use crate::request::refusal::Refusal;
use bytes::Bytes;
use fenzi_policy::engine::{McpServer, PathOwner};
use fenzi_policy::mcp::McpDecision;
use fenzi_policy::{Decision, Reason};
use http::request::Parts;
use std::time::Instant;

/// An allowed request: the body to forward, and how its answer is to be read.
pub(crate) struct Decided {
    pub body: Bytes,
    /// For a request to an MCP server: what its answer must answer.
    pub reading: Option<Reading>,
    /// A secret value was written into it (its answer may not come in pieces, see
    /// [`crate::connection::framing`]).
    pub swapped: bool,
    /// A step of the OAuth sign-in flow on an MCP server ([`crate::request::sign_in`]).
    pub sign_in: Option<fenzi_policy::mcp::oauth::Step>,
}

/// The `program_not_allowed` refusal of this request, if its connection's programs may not use
/// the entry it belongs to (on an MCP host several entries share; the host's own entry was
/// checked at admission) or a secret it would carry.
fn program_denial(
    cx: &RequestContext<'_>,
    use_: &fenzi_policy::secret_use::SecretUse,
) -> Option<Decision> {
    let session = cx.session;
    session.attribution.get()?;
    let program = &cx.dest().program;
    if cx.dest().shared
        && let Some(server) = cx.server()
    {
        let entry = || format!("mcp.{}", server.name);
        let what = || format!("use MCP server {}", server.name);
        if let Some(denied) = program_refusal(session, &server.programs, entry, what, program) {
            return Some(denied);
        }
    }
    for name in &use_.secrets {
        let Some(binding) = cx.live.policy.secrets().iter().find(|b| &b.name == name) else {
            continue;
        };
        let entry = || format!("secrets.{name}");
        let what = || format!("send secret {name}");
        if let Some(denied) = program_refusal(session, &binding.programs, entry, what, program) {
            return Some(denied);
        }
    }
    None
}

/// Decides and records a buffered request (`parts` updated).
pub(crate) async fn decide(
    cx: &RequestContext<'_>,
    parts: &mut Parts,
    body: Bytes,
) -> Result<Decided, Refusal> {
    let (session, dest) = (cx.session, cx.dest());
    // `fenzi_decide_seconds`: from here to the hold below, or to the refusal that ends it sooner.
    let timer = session.metrics.as_ref().map(|m| m.decide());
    // The set in force when the request began, to its end (a renewal applies to the next).
    let secrets = session.secrets.load();
    // A `token: true` entry's token goes only to requests of that entry (`by_path`).
    let use_ = secrets.check_request(
        &dest.host,
        dest.port,
        cx.entry_name(),
        cx.upstream.secure(),
        parts,
        &body,
    );
    if !use_.is_allowed() {
        return Err(refused(cx, &use_.decision, &use_.secrets, parts, &body));
    }
    // DESIGN §17: the programs the request's entry and its secrets admit, from what the
    // connection was attributed to when it was accepted (no system call here).
    if let Some(denied) = program_denial(cx, &use_) {
        return Err(refused(cx, &denied, &use_.secrets, parts, &body));
    }
    // Tool decisions follow the policy in force when the request began, not the one that
    // admitted the connection: a reload applies to the next request on an open tunnel too.
    let current = current_server(cx, parts, &body)?;
    let (mut entries, mut reading, mcp) = match current {
        Some(server) => {
            let decision = session.inventories.read(&server.name, |inventory| {
                mcp_enforce::classify(&cx.live.policy, inventory, server, parts, &body)
            });
            if !decision.overall.is_allowed() {
                // Refused: nothing was substituted, so the records name no secret.
                return Err(mcp_enforce::refused(&cx.subject, &decision, parts, &body));
            }
            let target = parts.uri.path_and_query().map_or("/", |pq| pq.as_str());
            // `server` is `cx.server()`, so its index is the request's own (no search by name).
            let reading = cx
                .server_index()
                .and_then(|index| Reading::of(&cx.live, index, &decision, target));
            let entries = mcp_enforce::entries(&cx.subject, &decision);
            (entries, reading, Some((server, decision)))
        }
        None => (vec![cx.subject.decided(&dest.decision)], None, None),
    };
    let unsubstituted = body.clone();

    let body = match secrets.apply(&use_, parts, body.clone()) {
        Ok(new) => new,
        Err(e) => {
            let refused_by = Decision::deny(Reason::BadRequest, "secrets", e.to_string());
            return Err(refused(cx, &refused_by, &use_.secrets, parts, &body));
        }
    };
    if let Some(server) = current
        && use_.substitute.iter().any(|g| g.body)
        && !session
            .inventories
            .read(&server.name, |inventory| {
                mcp_enforce::classify(&cx.live.policy, inventory, server, parts, &body)
            })
            .overall
            .is_allowed()
    {
        let refused_by = Decision::deny(
            Reason::PolicyDenied,
            "secrets in bodies",
            "the request is no longer allowed once the secret values are written into its body",
        );
        return Err(Refusal::denied(&cx.subject, &refused_by).naming_secrets(&use_.secrets));
    }
    // Last, so that a call refused for any other reason takes no token.
    if let Some((server, decision)) = &mcp {
        match cx.live.limits.admit(&server.name, decision, Instant::now) {
            Ok(permit) => {
                if let Some(reading) = reading.as_mut() {
                    reading.permit = permit;
                }
            }
            Err(over) => {
                let refusal =
                    mcp_enforce::limited(&cx.subject, decision, over, parts, &unsubstituted);
                return Err(refusal.naming_secrets(&use_.secrets));
            }
        }
    }
    // The time a person takes to answer is theirs, not the decision's.
    drop(timer);
    // Last of all: a person is asked only about a call that would otherwise go.
    // A hold is rare and waits long: its state lives on the heap, so that the future every call
    // builds and moves (which would contain the hold's) stays small.
    if let Some((server, decision)) = &mcp
        && held::holds_any(server, decision)
    {
        Box::pin(held::hold_confirm_calls(
            cx,
            server,
            decision,
            parts,
            &unsubstituted,
            &use_.secrets,
            &mut entries,
        ))
        .await?;
    }
    let entries = entries.into_iter().map(|mut entry| {
        entry.secrets = use_.secrets.clone();
        entry
    });
    session
        .record_all_together(entries, cx.guard.others_in_flight())
        .await?;
    Ok(Decided {
        body,
        reading,
        swapped: use_.changes_request(),
        sign_in: mcp.as_ref().and_then(|(_, decision)| decision.sign_in),
    })
}

/// The refusal of a buffered request by `decision`, naming `secrets`: on an MCP server answered with
/// a JSON-RPC error for each of its requests, elsewhere with the plain denial body.
fn refused(
    cx: &RequestContext<'_>,
    decision: &Decision,
    secrets: &[String],
    parts: &Parts,
    body: &[u8],
) -> Refusal {
    let refusal = Refusal::denied(&cx.subject, decision).naming_secrets(secrets);
    match cx.server() {
        Some(server) => {
            let answer = cx.session.inventories.read(&server.name, |inventory| {
                mcp_enforce::answer_as_rpc_errors(
                    &cx.live.policy,
                    inventory,
                    server,
                    decision,
                    parts,
                    body,
                )
            });
            refusal.answered_with(answer)
        }
        None => refusal,
    }
}

/// The MCP server whose rules decide a request, as the request's policy has it; `None` for a plain
/// host. A request on an MCP host whose path no entry has is refused here (`policy_denied`, `mcp.<host>
/// no server at this path`), before its body is classified by anyone's rules.
fn current_server<'c>(
    cx: &'c RequestContext<'_>,
    parts: &Parts,
    body: &[u8],
) -> Result<Option<&'c McpServer>, Refusal> {
    let Handling::Mcp(admitted) = &cx.dest().handling else {
        return Ok(None);
    };
    if let Some(PathOwner::Nobody(denied)) = &cx.owner {
        let decision = McpDecision::request(denied.clone());
        return Err(mcp_enforce::refused(&cx.subject, &decision, parts, body));
    }
    match cx.server() {
        Some(server) => Ok(Some(server)),
        None => {
            // Every policy of a session has the servers it started with; were one ever missing,
            // the request is refused, not let through.
            let gone = Decision::deny(
                Reason::PolicyDenied,
                format!("mcp.{}", admitted.name),
                format!("{} is not in the policy in force", admitted.name),
            );
            Err(Refusal::denied(&cx.subject, &gone))
        }
    }
}
