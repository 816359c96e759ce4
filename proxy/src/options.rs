//! The proxy's tunables: a timeout wherever a peer can stall, the cap on concurrent connections (and
//! when an idle one gives way), the session CA's lifetime and the extra roots trusted for upstream
//! TLS. Every field has a default that suits an agent sandbox; `fenzi proxy` and `fenzi run` start
//! from [`ProxyOptions::default`].
//!
//! May use: `connection`.

use rustls::pki_types::CertificateDer;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct ProxyOptions {
    /// Time a client has to send a complete request head on the proxy port. hyper also applies it while
    /// a keep-alive connection waits for its next request, so it bounds idle proxy connections too.
    pub header_read_timeout: Duration,
    /// A tunnel (passed through or intercepted) with no bytes in either direction for this long is
    /// closed; an intercepted HTTP/1.1 connection waiting for its next request is closed after it too.
    pub idle_timeout: Duration,
    /// Name resolution of a destination.
    pub resolve_timeout: Duration,
    /// Dialling one upstream address.
    pub connect_timeout: Duration,
    /// A TLS handshake, with the client or with the upstream.
    pub tls_handshake_timeout: Duration,
    /// From sending a request upstream to receiving its response head (a slow tool call counts here).
    pub response_header_timeout: Duration,
    /// Reading a request body that is inspected before it is forwarded.
    pub body_read_timeout: Duration,
    /// Client connections served at once, tunnels included. When all are taken, a new client gets the
    /// slot of the connection idle longest once that one has been idle for `eviction_grace`; a
    /// request in flight is never cut (see [`crate::connection::capacity`]). The default is what the hard
    /// descriptor limit allows (two descriptors a connection, after a reserve), at most
    /// [`crate::connection::capacity::MAX_DEFAULT_CONNECTIONS`]; the proxy never serves more than its soft limit
    /// allows, whatever this says.
    pub max_connections: usize,
    /// At capacity, how long a connection must have been idle before a new client may take its slot.
    pub eviction_grace: Duration,
    /// At shutdown, how long in-flight connections get to finish before they are cut.
    pub drain_timeout: Duration,
    /// How long the session CA (and so every leaf) is valid.
    pub ca_validity: Duration,
    /// Extra roots trusted for upstream TLS, beside the webpki roots (`--upstream-ca`).
    pub upstream_roots: Vec<CertificateDer<'static>>,
    /// Upstream connections kept for reuse per destination (host, port, TLS) and connection shard,
    /// shared by every client connection the shard serves. Beyond it the oldest is closed.
    pub max_idle_upstream: usize,
    /// A kept upstream connection unused for this long is closed.
    pub upstream_idle_timeout: Duration,
    /// Threads that each serve their own connections start to finish ([`crate::connection::shards`]); 0 serves
    /// every connection on the runtime that calls `serve`.
    pub shards: usize,
}

impl Default for ProxyOptions {
    fn default() -> Self {
        ProxyOptions {
            header_read_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            resolve_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            response_header_timeout: Duration::from_secs(300),
            body_read_timeout: Duration::from_secs(60),
            max_connections: crate::connection::capacity::default_max_connections(),
            eviction_grace: Duration::from_secs(1),
            drain_timeout: Duration::from_secs(10),
            ca_validity: Duration::from_secs(24 * 60 * 60),
            upstream_roots: Vec::new(),
            max_idle_upstream: 64,
            upstream_idle_timeout: Duration::from_secs(30),
            shards: 0,
        }
    }
}
