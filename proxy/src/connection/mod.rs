//! Connections and bytes: what the proxy does with a socket before and after anything is decided
//! about what travels on it. The connection cap and the idle connection that gives way
//! ([`capacity`]), the shard threads that each drive their own connections ([`shards`]), the stop
//! signal raced against every connection ([`woken`]) and the graceful end of a served connection
//! ([`graceful`]), the resolver and dialler seam ([`net`]), stream wrappers ([`io`]), the one body
//! type ([`body`]), what an upstream's framing may be ([`framing`]), probes for what hyper and h2
//! refuse on their own ([`malformed`], [`h2_streams`]), and the pass-through copy of a tunnel
//! ([`tunnel`]). It decides nothing about a request and writes no record.
//!
//! May use: nothing of this crate.

pub mod body;
pub mod capacity;
pub(crate) mod framing;
pub(crate) mod graceful;
pub(crate) mod h2_streams;
pub(crate) mod io;
pub(crate) mod malformed;
pub mod net;
pub mod shards;
pub(crate) mod tunnel;
pub(crate) mod woken;
