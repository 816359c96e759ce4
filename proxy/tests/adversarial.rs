//! Adversarial suites: every case under `testdata/adversarial/` is a raw request (bytes on the wire
//! where framing matters) sent through a live `fenzi_proxy::Proxy` to loopback upstreams that record
//! every byte they receive, with its expected decision: responses, what each upstream got (zero
//! bytes asserted, not assumed), dials and lookups, audit records and their stored lines. One test
//! per category file; each runs all of its cases and reports every failure at once. The format is
//! described in `testdata/adversarial/README.md`. The servers, network, PKI and audit sink are
//! `tests/common`'s. The response side (hostile answers from an MCP server) is `responses`: each
//! case scripts the server's bytes instead of the client's.

mod common;

#[path = "adversarial/cases.rs"]
mod cases;
#[path = "adversarial/responses.rs"]
mod responses;
#[path = "adversarial/runner.rs"]
mod runner;
#[path = "adversarial/wire.rs"]
mod wire;
#[path = "adversarial/world.rs"]
mod world;

async fn suite(file: &str) {
    runner::run_file(file).await.check();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arguments() {
    suite("arguments.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_text() {
    suite("json_text.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jsonrpc_shape() {
    suite("jsonrpc_shape.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_semantics() {
    suite("mcp_semantics.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_framing() {
    suite("http_framing.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paths() {
    suite("paths.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oauth_sign_in() {
    suite("oauth.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_sni_host() {
    suite("connect.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destinations() {
    suite("destinations.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_integrity() {
    suite("audit.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_exfiltration() {
    suite("secrets.cases").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secret_positions_laundering() {
    suite("secret_positions.cases").await;
}

/// Every category file has a test above, and every case file here is a category.
#[test]
fn every_case_file_has_a_suite() {
    let mut files: Vec<String> = std::fs::read_dir(runner::testdata(""))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".cases"))
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "arguments.cases",
            "audit.cases",
            "connect.cases",
            "destinations.cases",
            "http_framing.cases",
            "json_text.cases",
            "jsonrpc_shape.cases",
            "mcp_semantics.cases",
            "oauth.cases",
            "paths.cases",
            "secret_positions.cases",
            "secrets.cases",
        ]
    );
}
