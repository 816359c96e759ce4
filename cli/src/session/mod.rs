//! What `fenzi proxy` and `fenzi run` both set up for a session, one file per concept: `files` (the
//! audit log and the private directory holding the session CA certificate), `secrets` (values
//! gathered, placeholders minted, `placeholders.env`), and `serving` (the proxy options derived from
//! flags, serving until stopped, and what the exit reports), `export` (`--otlp`: the audit
//! export's start and its drain at exit), `sign_ins` (the `oauth: true` servers' sign-ins the
//! proxy keeps current), and `local_servers` (the `command` servers behind their bridges, each with
//! its own egress).

mod confirm;
mod export;
mod files;
pub mod local_servers;
mod secrets;
mod serving;
mod sign_ins;
pub mod transparent;

pub use confirm::{control_note, control_socket};
pub use export::{finish_export, report_export_lag, start_export};
pub use files::{
    SessionDir, audit_dir, create_private_dir, open_audit, system_roots, write_ca, write_file,
};
pub use secrets::{LoadedSecrets, hosts_not_stored_for, load_secrets};
pub use serving::{
    ProxyFlags, build_proxy, parse_duration, serve_metrics, serve_until, upstream_roots,
};
pub use sign_ins::load_sign_ins;
