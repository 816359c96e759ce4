//! Per-tool limits at run time (README, "Limits"): the counters of one session, per MCP server and
//! `limits` entry, and what an admitted call carries to the phases after it. The entries and which
//! of them apply to a call are `fenzi_policy::config::model::limits`'s; this module owns the clock.
//!
//! - **rate**: a token bucket per entry, kept as GCRA (one theoretical arrival time, no background
//!   task): N per period allows a burst of N, and a token comes back every period / N. O(1).
//! - **concurrency**: a count per entry, held by [`Slots`] until the answer's body ends, fails or is
//!   dropped (the client went away).
//! - **timeout** and **max_response**: carried in the [`Permit`] to the upstream and response
//!   phases (`exchange`, `mcp_response`), which cut the answer and record the failure.
//!
//! [`Limits::admit`] runs after every other decision allowed the request and before its records are
//! written, so a denied call takes no token. It takes what every `tools/call` of the request needs
//! at once, under one lock per server: a batch takes a token and a slot for each of its calls, or,
//! when any entry is over, nothing at all and the whole batch is refused (batches are atomic). Each
//! entry's counters are shared by all the tools it matches; each file's first matching entry
//! applies, so a call may count against a machine entry and a project entry.

use crate::connection::body::BoxError;
use crate::error::ProxyError;
use bytes::Bytes;
use fenzi_policy::config::model::limits::applicable;
use fenzi_policy::config::{Rate, ToolLimit};
use fenzi_policy::engine::Policy;
use fenzi_policy::json::write_string;
use fenzi_policy::mcp::{McpDecision, RpcId, error_code};
use fenzi_policy::{Decision, Reason};
use hyper::body::{Body as HttpBody, Frame, SizeHint};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

/// What `Retry-After` says when the call was over a `concurrency`: a slot may free at any time.
const CONCURRENCY_RETRY_SECS: u64 = 1;

/// A token bucket as GCRA: `tat` is when the bucket will be full again.
#[derive(Debug, Clone)]
pub(crate) struct Bucket {
    /// Time for one token to come back.
    interval: Duration,
    /// Time for the whole burst to come back (`count` intervals).
    span: Duration,
    tat: Option<Instant>,
}

impl Bucket {
    pub fn new(rate: Rate) -> Bucket {
        let interval = rate.interval();
        Bucket {
            interval,
            span: interval * rate.count,
            tat: None,
        }
    }

    /// Takes `n` tokens at `now`, or says how long until they would be there.
    pub fn take(&mut self, n: u32, now: Instant) -> Result<(), Duration> {
        let next = self.after(n, now)?;
        self.tat = Some(next);
        Ok(())
    }

    /// The bucket's state once `n` tokens are taken at `now`, if they can be.
    fn after(&self, n: u32, now: Instant) -> Result<Instant, Duration> {
        let start = self.tat.map_or(now, |tat| tat.max(now));
        let next = start + self.interval * n;
        let full_at = now + self.span;
        if next <= full_at {
            Ok(next)
        } else {
            Err(next - full_at)
        }
    }
}

/// One entry's counters.
#[derive(Debug)]
struct Counter {
    bucket: Option<Bucket>,
    in_flight: u32,
}

/// One server's entries and their counters.
#[derive(Debug)]
struct ServerCounters {
    name: String,
    limits: Vec<ToolLimit>,
    /// Shared with the counters a reload makes for the same entries ([`Limits::carried`]).
    counters: Arc<Mutex<Vec<Counter>>>,
}

/// The counters of every server of the session.
pub(crate) struct Limits {
    servers: Vec<Arc<ServerCounters>>,
}

/// Whether two entries count the same calls the same way, wherever each is written.
fn same_entry(a: &ToolLimit, b: &ToolLimit) -> bool {
    a.tool == b.tool
        && a.rate == b.rate
        && a.concurrency == b.concurrency
        && a.timeout == b.timeout
        && a.max_response == b.max_response
        && a.origin == b.origin
        && a.project_on_machine == b.project_on_machine
}

/// A request over a limit: the decision its records carry, and the `Retry-After` seconds.
#[derive(Debug)]
pub(crate) struct Over {
    pub decision: Decision,
    pub retry_after: u64,
}

/// What an admitted request carries: the shortest `timeout` and smallest `max_response` of the
/// entries its calls met (with the rules that set them), and its concurrency slots.
#[derive(Debug)]
pub(crate) struct Permit {
    timeout: Option<(Duration, String)>,
    max_response: Option<(u64, String)>,
    deadline: Option<tokio::time::Instant>,
    slots: Option<Slots>,
}

/// Concurrency slots held by one request; given back when dropped.
#[derive(Debug)]
pub(crate) struct Slots {
    server: Arc<ServerCounters>,
    /// (entry, calls) pairs.
    held: Vec<(usize, u32)>,
}

impl Drop for Slots {
    fn drop(&mut self) {
        let mut counters = self
            .server
            .counters
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        for (entry, n) in &self.held {
            if let Some(c) = counters.get_mut(*entry) {
                c.in_flight = c.in_flight.saturating_sub(*n);
            }
        }
    }
}

impl Limits {
    /// Fresh counters for every server of `policy` that has limits.
    pub fn new(policy: &Policy) -> Limits {
        let servers = policy
            .servers()
            .iter()
            .filter(|s| !s.limits.is_empty())
            .map(|s| {
                let counters = s
                    .limits
                    .iter()
                    .map(|l| Counter {
                        bucket: l.rate.map(Bucket::new),
                        in_flight: 0,
                    })
                    .collect();
                Arc::new(ServerCounters {
                    name: s.name.clone(),
                    limits: s.limits.clone(),
                    counters: Arc::new(Mutex::new(counters)),
                })
            })
            .collect();
        Limits { servers }
    }

    /// The counters for `policy`, a reload of the policy these counters were made for. A server
    /// whose entries say the same as before (where they are written aside) keeps its counters
    /// whole: tokens taken and calls in flight. A server whose entries changed gets new counters,
    /// each entry that says the same as one before keeping that one's tokens; calls in flight
    /// under the old entries give their slots back to the old counters, so the new ones start with
    /// none in flight.
    pub fn carried(&self, policy: &Policy) -> Limits {
        let fresh = Limits::new(policy);
        let servers = fresh
            .servers
            .into_iter()
            .map(|new| {
                let Some(old) = self.servers.iter().find(|s| s.name == new.name) else {
                    return new;
                };
                let same = old.limits.len() == new.limits.len()
                    && old
                        .limits
                        .iter()
                        .zip(&new.limits)
                        .all(|(a, b)| same_entry(a, b));
                if same {
                    return Arc::new(ServerCounters {
                        name: new.name.clone(),
                        limits: new.limits.clone(),
                        counters: old.counters.clone(),
                    });
                }
                {
                    let old_state = old.counters.lock().unwrap_or_else(|p| p.into_inner());
                    let mut state = new.counters.lock().unwrap_or_else(|p| p.into_inner());
                    for (i, limit) in new.limits.iter().enumerate() {
                        if let Some(j) = old.limits.iter().position(|l| same_entry(l, limit)) {
                            state[i].bucket = old_state[j].bucket.clone();
                        }
                    }
                }
                new
            })
            .collect();
        Limits { servers }
    }

    /// Admits the `tools/call`s of an allowed request to `server` at the instant `now` gives: every
    /// call takes a token of each rate and a slot of each concurrency it meets, all or none.
    /// `Ok(None)` when no limit applies. The clock is read only then: on a VM a read costs about
    /// as much as the rest of this call.
    pub fn admit(
        &self,
        server: &str,
        decision: &McpDecision,
        now: impl FnOnce() -> Instant,
    ) -> Result<Option<Permit>, Over> {
        let Some(counters) = self.servers.iter().find(|s| s.name == server) else {
            return Ok(None);
        };
        // Calls per entry, in entry order; the first call naming each, for messages.
        let mut needs: Vec<(usize, u32, &str)> = Vec::new();
        for tool in decision.messages.iter().filter_map(|m| m.tool.as_deref()) {
            for (i, _) in applicable(&counters.limits, tool) {
                match needs.iter_mut().find(|(e, ..)| *e == i) {
                    Some((_, n, _)) => *n += 1,
                    None => needs.push((i, 1, tool)),
                }
            }
        }
        if needs.is_empty() {
            return Ok(None);
        }
        let now = now();
        let mut state = counters.counters.lock().unwrap_or_else(|p| p.into_inner());
        for &(i, n, tool) in &needs {
            let (limit, counter) = (&counters.limits[i], &state[i]);
            if let Some(max) = limit.concurrency
                && counter.in_flight + n > max
            {
                let rule = limit.rule("concurrency");
                return Err(Over {
                    decision: Decision::deny(
                        Reason::RateLimited,
                        rule.clone(),
                        format!(
                            "tools/call {} is over {rule}: {max} call(s) of `{}` may be in flight \
                             at once",
                            shown(tool),
                            limit.tool
                        ),
                    ),
                    retry_after: CONCURRENCY_RETRY_SECS,
                });
            }
            if let (Some(bucket), Some(rate)) = (&counter.bucket, limit.rate)
                && let Err(wait) = bucket.after(n, now)
            {
                let rule = limit.rule("rate");
                let retry_after = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
                return Err(Over {
                    decision: Decision::deny(
                        Reason::RateLimited,
                        rule.clone(),
                        format!(
                            "tools/call {} is over {rule}: `{}` may be called {rate}; retry in \
                             {retry_after}s",
                            shown(tool),
                            limit.tool
                        ),
                    ),
                    retry_after: retry_after.max(1),
                });
            }
        }
        let mut permit = Permit {
            timeout: None,
            max_response: None,
            deadline: None,
            slots: None,
        };
        let mut held = Vec::new();
        for &(i, n, _) in &needs {
            let limit = &counters.limits[i];
            let counter = &mut state[i];
            if let Some(bucket) = &mut counter.bucket {
                // Checked above, under the same lock.
                let _ = bucket.take(n, now);
            }
            if limit.concurrency.is_some() {
                counter.in_flight += n;
                held.push((i, n));
            }
            if let Some(t) = limit.timeout
                && permit
                    .timeout
                    .as_ref()
                    .is_none_or(|(shortest, _)| t < *shortest)
            {
                permit.timeout = Some((t, limit.rule("timeout")));
            }
            if let Some(m) = limit.max_response
                && permit
                    .max_response
                    .as_ref()
                    .is_none_or(|(least, _)| m < *least)
            {
                permit.max_response = Some((m, limit.rule("max_response")));
            }
        }
        drop(state);
        if !held.is_empty() {
            permit.slots = Some(Slots {
                server: counters.clone(),
                held,
            });
        }
        Ok(Some(permit))
    }
}

impl Permit {
    /// Starts the timeout: the request is being forwarded now. Returns the deadline, if any.
    pub fn forwarded(&mut self) -> Option<tokio::time::Instant> {
        let (after, _) = self.timeout.as_ref()?;
        let deadline = tokio::time::Instant::now() + *after;
        self.deadline = Some(deadline);
        Some(deadline)
    }

    /// The deadline set by [`Permit::forwarded`].
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.deadline
    }

    /// The failure of an answer that did not end in time.
    pub fn timed_out(&self) -> ProxyError {
        let (after, rule) = self.timeout.clone().unwrap_or_default();
        ProxyError::LimitTimeout { after, rule }
    }

    /// The response cap, in bytes of the body as the upstream sends it.
    pub fn max_response(&self) -> Option<u64> {
        self.max_response.as_ref().map(|(cap, _)| *cap)
    }

    /// The failure of an answer larger than the cap.
    pub fn too_large(&self) -> ProxyError {
        let (cap, rule) = self.max_response.clone().unwrap_or_default();
        ProxyError::ResponseTooLarge { cap, rule }
    }

    /// The concurrency slots, to be held by the body the client gets.
    pub fn take_slots(&mut self) -> Option<Slots> {
        self.slots.take()
    }
}

/// The JSON-RPC error that answers request `id` in place of an answer cut by a limit.
pub(crate) fn cut_reply(id: &RpcId, error: &ProxyError) -> String {
    let reason = error.reason();
    let mut out = String::from("{\"jsonrpc\":\"2.0\",\"id\":");
    match id {
        RpcId::Number(n) => out.push_str(n),
        RpcId::String(s) => write_string(&mut out, s),
        RpcId::Null => out.push_str("null"),
    }
    out.push_str(&format!(
        ",\"error\":{{\"code\":{},\"message\":",
        error_code(reason)
    ));
    write_string(&mut out, &format!("fenzi cut the server's answer: {error}"));
    out.push_str(",\"data\":{\"reason\":");
    write_string(&mut out, reason.code());
    out.push_str("}}}");
    out
}

/// A tool name as a message may show it: printable ASCII, at most 128 characters.
fn shown(tool: &str) -> String {
    tool.chars()
        .take(128)
        .map(|c| if (' '..='~').contains(&c) { c } else { '?' })
        .collect()
}

/// A body that holds a request's concurrency slots until it ends, fails or is dropped.
pub(crate) struct Held<B> {
    inner: B,
    slots: Option<Slots>,
}

impl<B> Held<B> {
    pub fn new(inner: B, slots: Option<Slots>) -> Held<B> {
        Held { inner, slots }
    }
}

impl<B> HttpBody for Held<B>
where
    B: HttpBody<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) {
            self.slots = None;
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fenzi_policy::config::units::parse_rate;

    fn bucket(rate: &str) -> Bucket {
        Bucket::new(parse_rate(rate).unwrap())
    }

    #[test]
    fn a_rate_allows_its_burst_then_one_token_per_interval() {
        let t0 = Instant::now();
        let mut b = bucket("60/min");
        for i in 0..60 {
            assert_eq!(b.take(1, t0), Ok(()), "call {i}");
        }
        // The 61st in the same minute waits one interval (1 s).
        assert_eq!(b.take(1, t0), Err(Duration::from_secs(1)));
        assert_eq!(
            b.take(1, t0 + Duration::from_millis(400)),
            Err(Duration::from_millis(600))
        );
        assert_eq!(b.take(1, t0 + Duration::from_secs(1)), Ok(()));
        assert!(b.take(1, t0 + Duration::from_secs(1)).is_err());
        // A quiet minute refills the whole burst, and no more.
        let later = t0 + Duration::from_secs(200);
        for _ in 0..60 {
            assert_eq!(b.take(1, later), Ok(()));
        }
        assert!(b.take(1, later).is_err());
    }

    #[test]
    fn a_refused_take_takes_nothing() {
        let t0 = Instant::now();
        let mut b = bucket("3/s");
        assert_eq!(b.take(2, t0), Ok(()));
        // Two more do not fit; the one that does is still there.
        assert!(b.take(2, t0).is_err());
        assert_eq!(b.take(1, t0), Ok(()));
        assert!(b.take(1, t0).is_err());
        // More than the burst never fits.
        let mut b = bucket("3/s");
        assert!(b.take(4, t0 + Duration::from_secs(3600)).is_err());
    }

    #[test]
    fn slow_rates_wait_long() {
        let t0 = Instant::now();
        let mut b = bucket("1/h");
        assert_eq!(b.take(1, t0), Ok(()));
        assert_eq!(b.take(1, t0), Err(Duration::from_secs(3600)));
        assert_eq!(
            b.take(1, t0 + Duration::from_secs(3599)),
            Err(Duration::from_secs(1))
        );
        assert_eq!(b.take(1, t0 + Duration::from_secs(3600)), Ok(()));
    }

    fn limits(yaml_limits: &str) -> (Limits, Policy) {
        let yaml = format!(
            "version: 1\nmcp:\n  s:\n    url: https://s.test/mcp\n    tools: {{allow: [\"*\"]}}\n    limits:\n{yaml_limits}"
        );
        let config = fenzi_policy::config::load(None, Some((&yaml, "t.yaml"))).unwrap();
        let policy = Policy::from_config(&config);
        (Limits::new(&policy), policy)
    }

    fn calls(tools: &[&str]) -> McpDecision {
        use fenzi_policy::mcp::{MessageDecision, MessageKind};
        McpDecision {
            overall: Decision::allow("t", "t"),
            messages: tools
                .iter()
                .enumerate()
                .map(|(i, t)| MessageDecision {
                    decision: Decision::allow("t", "t"),
                    kind: Some(MessageKind::Request),
                    rpc_method: Some("tools/call".into()),
                    tool: (!t.is_empty()).then(|| t.to_string()),
                    prompt: None,
                    resource: None,
                    rpc_id: Some(RpcId::Number(i.to_string())),
                })
                .collect(),
            batch: tools.len() > 1,
            sign_in: None,
        }
    }

    #[test]
    fn a_reload_keeps_the_counters_of_entries_that_did_not_change() {
        let (before, _) = limits("      - {tool: \"*\", rate: 2/h, concurrency: 1}\n");
        let now = Instant::now();
        let held = before.admit("s", &calls(&["x"]), || now).unwrap().unwrap();
        // The same entry, written one line lower: tokens and the slot in flight carry over.
        let (_, moved) = limits("\n      - {tool: \"*\", rate: 2/h, concurrency: 1}\n");
        let same = before.carried(&moved);
        assert!(
            same.admit("s", &calls(&["x"]), || now).is_err(),
            "slot held"
        );
        drop(held);
        assert!(same.admit("s", &calls(&["x"]), || now).is_ok());
        assert!(
            same.admit("s", &calls(&["x"]), || now).is_err(),
            "2/h: both tokens taken, one before the reload"
        );
        // A changed entry beside it: the unchanged one keeps its tokens, the new one starts full.
        let (_, changed) = limits(
            "      - {tool: save, rate: 1/h}\n      - {tool: \"*\", rate: 2/h, concurrency: 1}\n",
        );
        let next = same.carried(&changed);
        assert!(next.admit("s", &calls(&["x"]), || now).is_err());
        assert!(next.admit("s", &calls(&["save"]), || now).is_ok());
        // An entry that changed starts afresh.
        let (_, wider) = limits("      - {tool: \"*\", rate: 3/h, concurrency: 1}\n");
        assert!(
            next.carried(&wider)
                .admit("s", &calls(&["x"]), || now)
                .is_ok()
        );
    }

    #[test]
    fn concurrency_slots_come_back_when_dropped() {
        let (limits, _) = limits("      - {tool: \"*\", concurrency: 2, timeout: 5s}\n");
        let now = Instant::now();
        let a = limits.admit("s", &calls(&["x"]), || now).unwrap().unwrap();
        let mut b = limits.admit("s", &calls(&["y"]), || now).unwrap().unwrap();
        let over = limits.admit("s", &calls(&["z"]), || now).err().unwrap();
        assert_eq!(over.decision.reason(), Some(Reason::RateLimited));
        assert_eq!(over.decision.rule, "mcp.s.limits[0].concurrency");
        assert_eq!(over.retry_after, 1);
        // A slot held by a body comes back with it, not with the permit.
        let slots = b.take_slots();
        drop(b);
        assert!(limits.admit("s", &calls(&["z"]), || now).is_err());
        drop(slots);
        drop(a);
        // Both back: a batch of two fits, one of three never does.
        assert!(limits.admit("s", &calls(&["x", "y", "z"]), || now).is_err());
        let two = limits.admit("s", &calls(&["x", "y"]), || now).unwrap();
        assert!(two.is_some());
    }

    #[test]
    fn a_batch_takes_all_its_tokens_or_none() {
        let (limits, _) = limits(
            "      - {tool: save, rate: 1/min}\n      - {tool: \"*\", rate: 3/min, max_response: 4KiB}\n",
        );
        let now = Instant::now();
        // `save` and `get` count against different entries; `get` twice takes two of `*`.
        let p = limits
            .admit("s", &calls(&["get", "get"]), || now)
            .unwrap()
            .unwrap();
        assert_eq!(p.max_response(), Some(4096));
        // Over `*` (one left, two asked): refused, and the `save` token is not taken either.
        let over = limits
            .admit("s", &calls(&["save", "get", "get"]), || now)
            .err()
            .unwrap();
        assert_eq!(over.decision.rule, "mcp.s.limits[1].rate");
        assert!(
            over.decision.message.contains("tools/call get"),
            "{}",
            over.decision.message
        );
        assert_eq!(over.retry_after, 20);
        let p = limits
            .admit("s", &calls(&["save", "get"]), || now)
            .unwrap()
            .unwrap();
        assert_eq!(p.max_response(), Some(4096));
        let over = limits.admit("s", &calls(&["save"]), || now).err().unwrap();
        assert_eq!(over.decision.rule, "mcp.s.limits[0].rate");
        // Messages without a tool (not tools/call) take nothing; other servers have no limits.
        assert!(limits.admit("s", &calls(&[""]), || now).unwrap().is_none());
        assert!(
            limits
                .admit("other", &calls(&["save"]), || now)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn the_shortest_timeout_and_smallest_cap_apply() {
        let (limits, _) = limits(
            "      - {tool: slow, timeout: 2m, max_response: 1MiB}\n      - {tool: \"*\", timeout: 10s, max_response: 2MiB}\n",
        );
        let mut p = limits
            .admit("s", &calls(&["slow", "fast"]), Instant::now)
            .unwrap()
            .unwrap();
        assert_eq!(p.max_response(), Some(1 << 20));
        assert!(p.deadline().is_none());
        let deadline = p.forwarded().unwrap();
        assert!(deadline <= tokio::time::Instant::now() + Duration::from_secs(10));
        let error = p.timed_out();
        assert_eq!(error.reason(), Reason::Timeout);
        assert_eq!(
            error.record_detail().as_deref(),
            Some("mcp.s.limits[1].timeout")
        );
        let error = p.too_large();
        assert_eq!(error.reason(), Reason::ResponseTooLarge);
        assert_eq!(
            error.record_detail().as_deref(),
            Some("mcp.s.limits[0].max_response")
        );
        let reply = cut_reply(&RpcId::String("a\"b".into()), &error);
        let v: serde_json::Value = serde_json::from_str(&reply).unwrap();
        assert_eq!(v["id"], "a\"b");
        assert_eq!(v["error"]["code"], -31012);
        assert_eq!(v["error"]["data"]["reason"], "response_too_large");
    }
}
