//! The request path, in the order a request meets it. A client connection on the proxy port
//! ([`client`]) routes each request by its form: CONNECT ([`connect`]) or absolute-form `http://`
//! ([`plain_http`]). The names it gives are checked ([`authority`]) and the destination admitted
//! ([`admit`]: route, one resolution, every address checked). An intercepted tunnel
//! ([`intercept`]) terminates TLS and checks each request inside. One request to an admitted
//! destination then runs its phases in order ([`exchange`], sharing a [`context`]): [`head`],
//! [`body`], [`decide`] (with [`mcp_enforce`] and [`held`]), [`upstream`], and [`response`] (with
//! [`mcp_response`] and [`failure_body`]). Any phase may refuse: a [`refusal`] records, then
//! answers with what [`respond`] writes.
//!
//! May use: `session` and all it may use: `attribution`, `audit`, `bridge`, `confirm`, `connection`, `error`, `host_files`,
//! `lock_file`, `metrics`, `options`, `secrets`, `tls`.

pub(crate) mod admit;
pub(crate) mod authority;
pub(crate) mod body;
pub(crate) mod client;
pub(crate) mod connect;
pub(crate) mod context;
pub(crate) mod decide;
pub(crate) mod exchange;
pub(crate) mod failure_body;
pub(crate) mod head;
pub(crate) mod held;
pub(crate) mod intercept;
pub(crate) mod mcp_enforce;
pub(crate) mod mcp_response;
pub(crate) mod plain_http;
pub(crate) mod refusal;
pub(crate) mod respond;
pub(crate) mod response;
pub(crate) mod sign_in;
pub(crate) mod upstream;
