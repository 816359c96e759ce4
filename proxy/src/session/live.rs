//! The policy in force (README, "Reloading the policy"; [`crate::session::reload`] changes it).
//!
//! [`Live`] is one policy as the session enforces it: the compiled [`Policy`], its hash (every
//! record made under it carries it) and the counters of its `limits`. [`LivePolicy`] holds the
//! current one behind an [`ArcSwap`]: a request takes it with one atomic load when it starts
//! ([`crate::request::context::RequestContext`], [`crate::request::admit`]) and decides everything under
//! that one, however long it takes; a reload builds the next one whole and then swaps the pointer,
//! so there is never a moment without a policy, and nothing ever sees half of one.
//!
//! What may change live is [`fenzi_policy::engine::reload::compare`]'s to say: the tool rules of
//! the servers the session started with. The policy it puts in force is always the one in force
//! with new tool rules (never the loaded policy as a whole, when the edit also changed something
//! that waits), so the servers, their hosts, urls and order never change within a session: what a
//! connection was admitted as (an MCP server, intercepted) stays true under every later policy,
//! and a server's position is the same in all of them. The
//! session's inventories are outside the swap and survive it; the `limits` counters are carried
//! ([`Limits::carried`]).

use crate::session::limits::Limits;
use arc_swap::ArcSwap;
use fenzi_policy::engine::Policy;
use std::sync::Arc;

/// One policy as the session enforces it.
pub(crate) struct Live {
    pub policy: Policy,
    /// [`Policy::sha256`], shared by every record made under this policy.
    pub hash: Arc<str>,
    /// The counters of its servers' `limits`.
    pub limits: Limits,
}

impl Live {
    pub fn new(policy: Policy, limits: Limits) -> Live {
        Live {
            hash: policy.sha256().into(),
            policy,
            limits,
        }
    }
}

/// The current [`Live`] policy of a session.
pub(crate) struct LivePolicy {
    current: ArcSwap<Live>,
    /// One reload at a time: the comparison, the record and the swap happen against the policy
    /// the reload read.
    reloading: tokio::sync::Mutex<()>,
}

impl LivePolicy {
    pub fn new(policy: Policy) -> LivePolicy {
        let limits = Limits::new(&policy);
        LivePolicy {
            current: ArcSwap::from_pointee(Live::new(policy, limits)),
            reloading: tokio::sync::Mutex::new(()),
        }
    }

    /// The policy in force now. A request keeps what this returns for its whole life.
    pub fn current(&self) -> Arc<Live> {
        self.current.load_full()
    }

    /// The hash of the policy in force now, read without taking a reference to that policy (a
    /// record made outside a request names it).
    pub fn load_hash(&self) -> Arc<str> {
        self.current.load().hash.clone()
    }

    /// Waits for any other reload to finish; the next one starts when the guard is dropped.
    pub async fn one_reload_at_a_time(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.reloading.lock().await
    }

    /// Puts `next` in force for every request that starts from now on. One pointer store:
    /// a request sees the old policy or the new one, whole.
    pub fn swap_in(&self, next: Arc<Live>) {
        self.current.store(next);
    }
}
