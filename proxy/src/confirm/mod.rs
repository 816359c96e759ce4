//! `tools.confirm` at run time (README, "Confirm"): the calls of one session held for a person,
//! and how each hold ends. The control socket a person answers on is [`socket`]; the lines on it
//! are [`protocol`]. Which calls are held is the policy's (`fenzi_policy::config::model::confirm`);
//! `request/decide.rs` holds them (through `request/held.rs`) and writes their records.
//!
//! A held request, step by step (the state machine):
//!
//! 1. **held**: every other decision allowed the request (secrets, the classifier with its
//!    argument rules, `limits`, whose token and slot it keeps while it waits). Its `held` records
//!    are written, then each of its confirm calls is offered on the control socket, under its own
//!    id. Nothing is forwarded.
//! 2. It ends in exactly one of these, whichever comes first:
//!    - **confirmed**: every held call of the request got `yes` (a batch waits for all of them).
//!      The request goes on exactly as an allowed one: its `allowed` records, naming who answered,
//!      then the upstream.
//!    - **refused**: one of its calls got `no`. The others are withdrawn.
//!    - **timed out**: `confirm_timeout` passed (whether or not a watcher was connected).
//!    - **session ended**: the proxy is shutting down.
//!    - **client gone**: the client hung up (the request's future was dropped).
//!
//!    Each but the first is a `denied` `not_confirmed` record per message saying why, and, but for
//!    the last, a 403 with a JSON-RPC error per call. A hold that ended for any reason is
//!    withdrawn from every watcher (a `gone` line).
//!
//! Holds are independent: each has its own ids, its own deadline and its own answers.
//!
//! May use: `host_files`.

pub mod protocol;
pub mod socket;

use protocol::{Event, Offer};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

pub use socket::{ControlSocket, check_peer, check_private_dir, control_dir, socket_path};

/// Who answered on the control socket: the peer's uid, and its pid when the kernel says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    pub uid: u32,
    pub pid: Option<i32>,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "uid {}", self.uid)?;
        if let Some(pid) = self.pid {
            write!(f, " pid {pid}")?;
        }
        Ok(())
    }
}

/// How a hold ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Every held call got `yes`, from these peers (one per call, in the order offered).
    Confirmed(Vec<Peer>),
    Refused(Peer),
    TimedOut(Duration),
    Shutdown,
}

impl Ended {
    /// What the records say of it (the audit field `confirm`).
    pub fn record_text(&self) -> String {
        match self {
            Ended::Confirmed(peers) => match peers.as_slice() {
                [one] => format!("yes by {one}"),
                many => format!(
                    "yes by {}",
                    many.iter()
                        .map(Peer::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            },
            Ended::Refused(peer) => format!("no by {peer}"),
            Ended::TimedOut(t) => format!("no answer in {}", show(*t)),
            Ended::Shutdown => SESSION_ENDED.to_string(),
        }
    }
}

/// The confirm text of a hold whose client hung up.
pub(crate) const CLIENT_GONE: &str = "client gone";
const SESSION_ENDED: &str = "session ended";

/// `2m`, `30s`, `500ms`.
pub(crate) fn show(d: Duration) -> String {
    fenzi_policy::config::units::show_duration(d)
}

/// One held call waiting for its answer.
struct Pending {
    offer: Offer,
    answer: mpsc::UnboundedSender<(u64, bool, Peer)>,
}

/// The held calls of one session, and the watchers told about them.
pub(crate) struct Confirmations {
    session: String,
    next: AtomicU64,
    pending: Mutex<BTreeMap<u64, Pending>>,
    events: broadcast::Sender<Event>,
    /// The control socket, until the proxy starts serving it.
    pub(crate) socket: Mutex<Option<ControlSocket>>,
    /// Whether the session has a control socket at all: without one, no held call can ever be
    /// answered (a reload that adds `confirm` waits for the next session).
    answerable: bool,
}

/// One call of a request to hold: what watchers are shown.
pub(crate) struct Call {
    pub server: String,
    pub tool: String,
    /// `params.arguments` as JSON text, placeholders masked, cut at [`protocol::MAX_ARGUMENTS`].
    pub arguments: String,
    pub rule: String,
}

impl Confirmations {
    pub fn new(session: String, socket: Option<ControlSocket>) -> Confirmations {
        Confirmations {
            session,
            next: AtomicU64::new(1),
            pending: Mutex::new(BTreeMap::new()),
            events: broadcast::channel(256).0,
            answerable: socket.is_some(),
            socket: Mutex::new(socket),
        }
    }

    /// Whether a person can answer this session's held calls (it has a control socket).
    pub fn answerable(&self) -> bool {
        self.answerable
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Offers `calls` to every watcher and returns the hold, which ends by [`Hold::wait`] or
    /// when dropped (the client hung up: `on_drop` runs then, and only then).
    pub fn hold(
        self: &Arc<Self>,
        calls: Vec<Call>,
        timeout: Duration,
        on_drop: Box<dyn FnOnce() + Send>,
    ) -> Hold {
        let (tx, rx) = mpsc::unbounded_channel();
        let deadline = tokio::time::Instant::now() + timeout;
        let deadline_ms = unix_ms() + i64::try_from(timeout.as_millis()).unwrap_or(i64::MAX);
        let mut ids = Vec::new();
        {
            let mut pending = self.lock();
            for call in calls {
                let id = self.next.fetch_add(1, Ordering::Relaxed);
                let offer = Offer {
                    id: id.to_string(),
                    session: self.session.clone(),
                    server: call.server,
                    tool: call.tool,
                    arguments: call.arguments,
                    rule: call.rule,
                    deadline: fenzi_policy::audit::format_timestamp(deadline_ms),
                    deadline_at: Some(deadline),
                    timeout_ms: 0,
                };
                let _ = self.events.send(Event::Held(offer.clone()));
                pending.insert(
                    id,
                    Pending {
                        offer,
                        answer: tx.clone(),
                    },
                );
                ids.push(id);
            }
        }
        Hold {
            confirmations: self.clone(),
            ids,
            answers: rx,
            deadline,
            timeout,
            on_drop: Some(on_drop),
        }
    }

    /// Every call held now, oldest first, with the time each has left.
    pub fn offers(&self) -> Vec<Offer> {
        self.lock().values().map(|p| p.offer.clone()).collect()
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.subscribe()
    }

    /// A watcher's answer to the call `id`. False when no such call is held (it was answered,
    /// timed out, or withdrawn).
    pub fn answer(&self, id: &str, allow: bool, peer: Peer) -> bool {
        let Ok(id) = id.parse::<u64>() else {
            return false;
        };
        let Some(pending) = self.lock().remove(&id) else {
            return false;
        };
        let why = if allow {
            format!("yes by {peer}")
        } else {
            format!("no by {peer}")
        };
        let _ = self.events.send(Event::Gone {
            id: id.to_string(),
            why,
        });
        let _ = pending.answer.send((id, allow, peer));
        true
    }

    /// Withdraws the calls `ids` that are still held, telling watchers `why`.
    fn withdraw(&self, ids: &[u64], why: &str) {
        let mut pending = self.lock();
        for id in ids {
            if pending.remove(id).is_some() {
                let _ = self.events.send(Event::Gone {
                    id: id.to_string(),
                    why: why.to_string(),
                });
            }
        }
    }
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The calls of one request, held. Dropped before [`Hold::wait`] returns (the client hung up),
/// its calls are withdrawn and `on_drop` runs.
pub(crate) struct Hold {
    confirmations: Arc<Confirmations>,
    ids: Vec<u64>,
    answers: mpsc::UnboundedReceiver<(u64, bool, Peer)>,
    deadline: tokio::time::Instant,
    timeout: Duration,
    on_drop: Option<Box<dyn FnOnce() + Send>>,
}

impl Hold {
    /// Waits until every call is confirmed, one is refused, the deadline passes, or `stopping`
    /// (the session's shutdown) resolves.
    pub async fn wait(mut self, stopping: impl std::future::Future<Output = ()>) -> Ended {
        tokio::pin!(stopping);
        let mut yes: Vec<(u64, Peer)> = Vec::new();
        let ended = loop {
            tokio::select! {
                got = self.answers.recv() => match got {
                    Some((id, true, peer)) => {
                        yes.push((id, peer));
                        if yes.len() == self.ids.len() {
                            yes.sort_by_key(|(id, _)| *id);
                            break Ended::Confirmed(yes.into_iter().map(|(_, p)| p).collect());
                        }
                    }
                    Some((_, false, peer)) => break Ended::Refused(peer),
                    // Cannot happen while `self` holds a sender's receiver and the pending map
                    // holds the senders; treated as the session ending, never as a yes.
                    None => break Ended::Shutdown,
                },
                _ = tokio::time::sleep_until(self.deadline) => break Ended::TimedOut(self.timeout),
                _ = &mut stopping => break Ended::Shutdown,
            }
        };
        self.confirmations.withdraw(&self.ids, &ended.record_text());
        // Ended here, not by the client going away.
        self.on_drop = None;
        ended
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(on_drop) = self.on_drop.take() {
            self.confirmations.withdraw(&self.ids, CLIENT_GONE);
            on_drop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(tool: &str) -> Call {
        Call {
            server: "s".into(),
            tool: tool.into(),
            arguments: "{}".into(),
            rule: "mcp.s.tools.confirm \"*\"".into(),
        }
    }

    const PEER: Peer = Peer {
        uid: 1000,
        pid: Some(7),
    };

    fn nothing() -> Box<dyn FnOnce() + Send> {
        Box::new(|| {})
    }

    #[tokio::test]
    async fn a_batch_is_confirmed_only_when_every_call_is() {
        let c = Arc::new(Confirmations::new("sess".into(), None));
        let hold = c.hold(
            vec![call("a"), call("b")],
            Duration::from_secs(60),
            nothing(),
        );
        let ids: Vec<String> = c.offers().iter().map(|o| o.id.clone()).collect();
        assert_eq!(ids.len(), 2);
        assert!(c.answer(&ids[1], true, PEER));
        assert!(!c.answer(&ids[1], true, PEER), "answered once only");
        let other = Peer {
            uid: 1000,
            pid: None,
        };
        assert!(c.answer(&ids[0], true, other));
        let ended = hold.wait(std::future::pending()).await;
        assert_eq!(ended, Ended::Confirmed(vec![other, PEER]));
        assert_eq!(ended.record_text(), "yes by uid 1000, uid 1000 pid 7");
        assert!(c.offers().is_empty());
    }

    #[tokio::test]
    async fn one_no_refuses_the_batch_and_withdraws_the_rest() {
        let c = Arc::new(Confirmations::new("sess".into(), None));
        let mut events = c.subscribe();
        let hold = c.hold(
            vec![call("a"), call("b")],
            Duration::from_secs(60),
            nothing(),
        );
        let ids: Vec<String> = c.offers().iter().map(|o| o.id.clone()).collect();
        assert!(c.answer(&ids[0], false, PEER));
        assert_eq!(
            hold.wait(std::future::pending()).await,
            Ended::Refused(PEER)
        );
        assert!(c.offers().is_empty());
        let mut gone = Vec::new();
        while let Ok(e) = events.try_recv() {
            if let Event::Gone { id, why } = e {
                gone.push((id, why));
            }
        }
        assert_eq!(
            gone,
            [
                (ids[0].clone(), "no by uid 1000 pid 7".to_string()),
                (ids[1].clone(), "no by uid 1000 pid 7".to_string())
            ]
        );
    }

    #[tokio::test]
    async fn no_answer_in_time_and_the_session_ending_both_deny() {
        let c = Arc::new(Confirmations::new("sess".into(), None));
        let hold = c.hold(vec![call("a")], Duration::from_millis(50), nothing());
        let ended = hold.wait(std::future::pending()).await;
        assert_eq!(ended, Ended::TimedOut(Duration::from_millis(50)));
        assert_eq!(ended.record_text(), "no answer in 50ms");
        let hold = c.hold(vec![call("a")], Duration::from_secs(120), nothing());
        assert_eq!(hold.wait(async {}).await, Ended::Shutdown);
        assert!(c.offers().is_empty());
    }

    #[tokio::test]
    async fn a_hold_dropped_unanswered_runs_its_drop_and_is_withdrawn() {
        let c = Arc::new(Confirmations::new("sess".into(), None));
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let hold = c.hold(
            vec![call("a")],
            Duration::from_secs(60),
            Box::new(move || flag.store(true, Ordering::SeqCst)),
        );
        assert_eq!(c.offers().len(), 1);
        drop(hold);
        assert!(ran.load(Ordering::SeqCst));
        assert!(c.offers().is_empty());
        // A hold that ended by an answer does not run it.
        let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = ran.clone();
        let hold = c.hold(
            vec![call("a")],
            Duration::from_secs(60),
            Box::new(move || flag.store(true, Ordering::SeqCst)),
        );
        let id = c.offers()[0].id.clone();
        c.answer(&id, true, PEER);
        hold.wait(std::future::pending()).await;
        assert!(!ran.load(Ordering::SeqCst));
    }
}
