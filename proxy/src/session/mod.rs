//! The session's live state: what every connection of one session shares and what changes while it
//! runs. [`context`] (`SessionContext`, through which every record is written, and `ConnGuard`,
//! what one connection holds), the policy in force ([`live`]) and changing it ([`reload`]), the
//! per-tool `limits` counters and the permit a call carries ([`limits`]), the per-server tool
//! inventories and the lock files they write ([`inventories`]), the idle upstream connections
//! ([`pool`]), and the synthetic name table the DNS stub fills ([`synthetic`]).
//!
//! May use: `attribution`, `audit`, `bridge`, `confirm`, `connection`, `error`, `host_files`, `lock_file`, `metrics`,
//! `options`, `secrets`, `tls`.

pub(crate) mod context;
pub(crate) mod inventories;
pub(crate) mod limits;
pub(crate) mod live;
pub(crate) mod pool;
pub(crate) mod reload;
pub mod synthetic;
