//! DESIGN §17 in the proxy, with the attribution looking at this host's own processes (the test
//! process plays a program in the sandbox; its parent plays the command, so the test process is
//! not the agent): a secret whose `programs:` does not list the program holding the connection is not
//! swapped, and the request is refused `program_not_allowed` with nothing sent; listed, by path and
//! content, it is swapped. Every record of the connection names the program. Reading every
//! process's descriptors needs root: the tests say so and stop otherwise.

mod common;

use bytes::Bytes;
use common::{FakeNetwork, MemorySink, TestPki, connect, h1, http_upstream, respond, tls_over};
use fenzi_policy::Reason;
use fenzi_proxy::attribution::{AgentIdentity, Attributor};
use fenzi_proxy::sandbox::SockDiag;
use fenzi_proxy::secrets::SecretSet;
use fenzi_proxy::{Proxy, ProxyOptions};
use http::Request;
use http_body_util::{BodyExt, Full};
use std::sync::Arc;
use std::time::Duration;

fn as_root() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines()
            .find_map(|l| l.strip_prefix("Uid:"))
            .is_some_and(|u| u.split_whitespace().nth(1) == Some("0"))
    })
}

fn sha256_of_self() -> String {
    use sha2::{Digest, Sha256};
    let bytes = std::fs::read("/proc/self/exe").unwrap();
    hex::encode(Sha256::digest(bytes))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_goes_only_with_the_programs_it_lists() {
    if !as_root() {
        eprintln!(
            "skipped: attributing on the host's own /proc reads every process's descriptors (root)"
        );
        return;
    }
    let me = std::fs::read_link("/proc/self/exe").unwrap();
    let me = me.to_string_lossy();
    let pki = TestPki::new();
    let handler: common::Handler = Arc::new(|parts, _| {
        let key = parts
            .headers
            .get("x-api-key")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        respond(200, "text/plain", Bytes::from(key))
    });
    let agents_only =
        http_upstream(Some(pki.server_config(&["agents.test"])), handler.clone()).await;
    let mine = http_upstream(Some(pki.server_config(&["mine.test"])), handler).await;
    let network = Arc::new(
        FakeNetwork::default()
            .name("agents.test", &["93.184.216.51"])
            .route("93.184.216.51:443", agents_only.addr)
            .name("mine.test", &["93.184.216.52"])
            .route("93.184.216.52:443", mine.addr),
    );
    let yaml = format!(
        "version: 1\nsecrets:\n  AGENT_KEY:\n    hosts: [agents.test]\n    programs: [agent]\n  \
         MY_KEY:\n    hosts: [mine.test]\n    programs: [{{path: {me}, sha256: \"{}\"}}]\n",
        sha256_of_self()
    );
    let policy = common::policy(&yaml, None);
    let mut set = SecretSet::new();
    set.insert("AGENT_KEY", b"agent-value-0123456789".to_vec())
        .unwrap();
    set.insert("MY_KEY", b"my-value-0123456789".to_vec())
        .unwrap();
    let ph = |n: &str| set.placeholder(n).unwrap().as_str().to_string();
    let (agent_ph, my_ph) = (ph("AGENT_KEY"), ph("MY_KEY"));
    let sink = Arc::new(MemorySink::default());
    let proxy = Proxy::builder(policy, sink.clone())
        .options(ProxyOptions {
            upstream_roots: vec![pki.ca_der.clone()],
            drain_timeout: Duration::from_secs(3),
            ..ProxyOptions::default()
        })
        .network(network)
        .secrets(set)
        .build()
        .unwrap();
    // The parent is "the command": this process is one of its other programs, not the agent.
    let parent = std::os::unix::process::parent_id();
    let diag = Arc::new(SockDiag::here().unwrap());
    let attributor = Attributor::new(parent, diag, AgentIdentity::default(), true).unwrap();
    assert!(proxy.attribute(attributor));
    let served = common::serve_proxy(proxy.clone(), sink.clone()).await;

    let get = |host: &str, ph: &str| {
        Request::get(format!("https://{host}/v1"))
            .header("host", host)
            .header("x-api-key", ph)
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let ca = proxy.ca().cert_der().clone();
    // The secret that only the agent may send: refused, nothing reaches the upstream.
    let (stream, status, head) = connect(served.addr, "agents.test:443").await;
    assert_eq!(status, 200, "{head}");
    let mut c = h1(tls_over(stream, &ca, "agents.test", &[b"http/1.1"])
        .await
        .unwrap())
    .await;
    let answer = c.send_request(get("agents.test", &agent_ph)).await.unwrap();
    assert_eq!(answer.status(), 403);
    let body = answer.into_body().collect().await.unwrap().to_bytes();
    let body = String::from_utf8_lossy(&body);
    assert!(body.contains("program_not_allowed"), "{body}");
    assert!(body.contains("secrets.AGENT_KEY.programs"), "{body}");
    assert!(!body.contains(&agent_ph), "{body}");
    assert_eq!(agents_only.received_len(), 0, "nothing went upstream");
    // The secret that lists this program by path and content: swapped.
    let (stream, status, head) = connect(served.addr, "mine.test:443").await;
    assert_eq!(status, 200, "{head}");
    let mut c = h1(tls_over(stream, &ca, "mine.test", &[b"http/1.1"])
        .await
        .unwrap())
    .await;
    let answer = c.send_request(get("mine.test", &my_ph)).await.unwrap();
    assert_eq!(answer.status(), 200);
    assert!(
        mine.received_text()
            .contains("x-api-key: my-value-0123456789")
    );

    let entries = sink.entries();
    let refused: Vec<_> = entries
        .iter()
        .filter(|e| e.reason == Some(Reason::ProgramNotAllowed))
        .collect();
    assert_eq!(refused.len(), 1, "{entries:?}");
    assert_eq!(
        refused[0].rule.as_deref(),
        Some("secrets.AGENT_KEY.programs")
    );
    assert_eq!(refused[0].secrets, ["AGENT_KEY"]);
    // Every record of these connections names this process, not as the agent.
    for e in &entries {
        let p = e.program.as_ref().expect("every record names the program");
        assert_eq!(p.0.exe, me);
        assert!(!p.0.agent);
        assert_eq!(p.0.sha256, sha256_of_self());
    }
}
