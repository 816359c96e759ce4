//! The audit trail: the [`sink::AuditSink`] every record goes to and [`sink::Subject`], which turns
//! a decision into an [`writer::AuditEntry`]; and the production sink ([`writer`]): the
//! hash-chained JSON Lines file, its `fenzi-audit` sync thread and its head file. Which records
//! are written, and when, is decided by the request path (`request/`) and the session
//! (`session/`); this folder only makes them durable and chained.
//!
//! May use: `attribution`, `connection`, `error`, `host_files`.

pub mod sink;
pub mod writer;
