//! A running session's policy reload (README, "Reloading the policy") over loopback with real TLS
//! on both hops: a call denied, the policy reloaded to allow it, the next call on the same tunnel
//! and on a new one allowed; every record names the hash of the policy it was decided under; a
//! change outside the tool rules and a policy that did not load both keep the policy in force; one
//! edit that denies a tool and adds a host denies the tool from the next request while the host
//! waits for the next session; a request whose head came before the swap is decided under the
//! policy it began with.

mod common;

use common::*;
use fenzi_policy::audit::Outcome;
use fenzi_proxy::Reload;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn yaml(target: &str, allow: &str, extra_hosts: &str) -> String {
    yaml_denying(target, allow, "", extra_hosts)
}

fn yaml_denying(target: &str, allow: &str, deny: &str, extra_hosts: &str) -> String {
    format!(
        "version: 1\nhosts: [github.com{extra_hosts}]\nmcp:\n  local:\n    url: https://{target}/mcp\n    tools:\n      allow: [{allow}]\n      deny: [{deny}]\n"
    )
}

struct Setup {
    proxy: TestProxy,
    target: String,
    _upstream: Upstream,
    /// A plain host (`echo.test:7000`) no policy of these tests allows at start.
    _echo: Upstream,
}

async fn setup(allow: &str) -> Setup {
    setup_with(|target| yaml(target, allow, "")).await
}

async fn setup_with(yaml: impl Fn(&str) -> String) -> Setup {
    let pki = TestPki::new();
    let upstream = http_upstream(Some(pki.server_config(&["127.0.0.1"])), mcp_handler()).await;
    let target = format!("127.0.0.1:{}", upstream.port());
    let echo = echo_upstream().await;
    let network = FakeNetwork::default()
        .name("echo.test", &[ECHO_IP])
        .route(&format!("{ECHO_IP}:7000"), echo.addr);
    let proxy = start_proxy(
        policy(&yaml(&target), None),
        options(&pki),
        Arc::new(network),
        Arc::new(MemorySink::default()),
    )
    .await;
    Setup {
        proxy,
        target,
        _upstream: upstream,
        _echo: echo,
    }
}

impl Setup {
    async fn tunnel(&self) -> tokio_rustls::client::TlsStream<tokio::net::TcpStream> {
        let (stream, status, head) = connect(self.proxy.addr, &self.target).await;
        assert_eq!(status, 200, "{head}");
        let ca = self.proxy.proxy.ca().cert_der().clone();
        tls_over(stream, &ca, "127.0.0.1", &[b"http/1.1"])
            .await
            .unwrap()
    }

    async fn client(&self) -> Sender {
        h1(self.tunnel().await).await
    }

    async fn call(&self, client: &mut Sender, id: u64, tool: &str) -> u16 {
        let response = client
            .send_request(tools_call(&self.target, "/mcp", id, tool))
            .await
            .unwrap();
        text(response).await.0
    }

    fn policy(&self, allow: &str, extra_hosts: &str) -> fenzi_policy::engine::Policy {
        policy(&yaml(&self.target, allow, extra_hosts), None)
    }

    /// `outcome tool policy-hash` for each record, CONNECTs as `CONNECT`.
    fn decisions(&self) -> Vec<(String, String)> {
        self.proxy
            .entries()
            .iter()
            .map(|e| {
                let what = match (&e.tool, e.method.as_str()) {
                    (Some(tool), _) => format!("{} {tool}", e.outcome.label()),
                    (None, m) => format!("{} {m}", e.outcome.label()),
                };
                (what, e.policy.as_deref().unwrap_or("none").to_string())
            })
            .collect()
    }
}

#[tokio::test]
async fn a_reload_allows_the_next_call_on_an_open_tunnel_and_its_records_name_the_new_policy() {
    let s = setup("read").await;
    let old = s.proxy.proxy.policy_hash();
    assert_eq!(old, s.policy("read", "").sha256());
    let mut client = s.client().await;
    assert_eq!(s.call(&mut client, 1, "echo").await, 403);

    let new = s.policy("read, echo", "");
    let new_hash = new.sha256();
    assert_ne!(new_hash, old);
    let outcome = s.proxy.proxy.reload(new, "fenzi.yaml").await.unwrap();
    assert_eq!(
        outcome,
        Reload::Reloaded {
            policy: new_hash.clone(),
            servers: vec!["local".into()],
            next_session: vec![],
        }
    );
    assert_eq!(s.proxy.proxy.policy_hash(), new_hash);
    // The same tunnel, admitted under the old policy: its next request follows the new one.
    assert_eq!(s.call(&mut client, 2, "echo").await, 200);
    let mut fresh = s.client().await;
    assert_eq!(s.call(&mut fresh, 3, "echo").await, 200);
    // The same policy again: nothing changes and nothing is recorded.
    let before = s.proxy.entries().len();
    let again = s.policy("read, echo", "");
    assert_eq!(
        s.proxy.proxy.reload(again, "fenzi.yaml").await.unwrap(),
        Reload::Unchanged
    );
    assert_eq!(s.proxy.entries().len(), before);

    let d = |what: &str, hash: &str| (what.to_string(), hash.to_string());
    assert_eq!(
        s.decisions(),
        vec![
            d("allowed CONNECT", &old),
            d("denied echo", &old),
            d("reloaded POLICY", &new_hash),
            d("allowed echo", &new_hash),
            d("allowed CONNECT", &new_hash),
            d("allowed echo", &new_hash),
        ]
    );
    let reloaded = &s.proxy.entries()[2];
    assert_eq!(reloaded.outcome, Outcome::Reloaded);
    assert_eq!(reloaded.path.as_deref(), Some("fenzi.yaml"));
    assert_eq!(reloaded.rule.as_deref(), Some("tool rules of mcp.local"));
}

#[tokio::test]
async fn changes_outside_the_tool_rules_and_policies_that_did_not_load_keep_the_policy_in_force() {
    let s = setup("read").await;
    let old = s.proxy.proxy.policy_hash();
    // A new host alone: for the next session.
    let wider = s.policy("read", ", gitlab.com");
    assert_eq!(
        s.proxy.proxy.reload(wider, "fenzi.yaml").await.unwrap(),
        Reload::NextSession {
            what: vec!["hosts".into()]
        }
    );
    s.proxy
        .proxy
        .refuse_reload(
            "fenzi.yaml",
            "fenzi.yaml:7:5: mcp.local.tools: bad indentation\n  hint: indent by two",
        )
        .await
        .unwrap();
    assert_eq!(s.proxy.proxy.policy_hash(), old);
    let mut client = s.client().await;
    assert_eq!(s.call(&mut client, 1, "echo").await, 403);
    let entries = s.proxy.entries();
    assert_eq!(entries[0].outcome, Outcome::ReloadRefused);
    assert_eq!(
        entries[0].rule.as_deref(),
        Some("takes effect in the next session: hosts")
    );
    assert_eq!(entries[1].outcome, Outcome::ReloadRefused);
    assert_eq!(
        entries[1].rule.as_deref(),
        Some("fenzi.yaml:7:5: mcp.local.tools: bad indentation")
    );
    assert!(
        entries.iter().all(|e| e.policy.as_deref() == Some(&old)),
        "{entries:#?}"
    );
}

#[tokio::test]
async fn a_request_begun_before_the_swap_is_decided_under_the_policy_it_began_with() {
    let s = setup("read").await;
    let old = s.proxy.proxy.policy_hash();
    let mut tunnel = s.tunnel().await;
    let body = serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {}}
    })
    .to_string();
    let head = format!(
        "POST /mcp HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nContent-Length: {}\r\n\r\n",
        s.target,
        body.len()
    );
    tunnel.write_all(head.as_bytes()).await.unwrap();
    tunnel.flush().await.unwrap();
    // The head is in; the body is not. The policy changes to allow echo meanwhile.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let new = s.policy("read, echo", "");
    let new_hash = new.sha256();
    s.proxy.proxy.reload(new, "fenzi.yaml").await.unwrap();
    tunnel.write_all(body.as_bytes()).await.unwrap();
    tunnel.flush().await.unwrap();
    let mut answer = vec![0u8; 4096];
    let n = tunnel.read(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]);
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let decisions = s.decisions();
    assert_eq!(decisions[1], ("reloaded POLICY".to_string(), new_hash));
    assert_eq!(decisions[2], ("denied echo".to_string(), old));
}

#[tokio::test]
async fn confirm_added_to_a_session_without_a_control_socket_refuses_those_calls_until_the_next() {
    let s = setup("read, echo").await;
    let old = s.proxy.proxy.policy_hash();
    let held = policy(
        &format!(
            "{}      confirm: [echo]\n",
            yaml(&s.target, "read, echo", "")
        ),
        None,
    );
    match s.proxy.proxy.reload(held, "fenzi.yaml").await.unwrap() {
        Reload::Reloaded { next_session, .. } => assert_eq!(
            next_session,
            vec![
                "mcp.local confirm (this session has no control socket; until then those calls \
                 are refused)"
                    .to_string()
            ]
        ),
        other => panic!("{other:?}"),
    }
    assert_ne!(s.proxy.proxy.policy_hash(), old);
    // Nothing is held that no one could answer: echo, which the person wants confirmed, is
    // refused now, and read still goes through.
    let mut client = s.client().await;
    assert_eq!(s.call(&mut client, 1, "echo").await, 403);
    assert_eq!(s.call(&mut client, 2, "read").await, 200);
}

#[tokio::test]
async fn one_edit_that_denies_a_tool_and_adds_a_host_denies_the_tool_now_and_the_host_waits() {
    let s = setup_with(|target| yaml(target, "\"*\"", "")).await;
    let old = s.proxy.proxy.policy_hash();
    let connect_echo = || async {
        let (_stream, status, head) = connect(s.proxy.addr, "echo.test:7000").await;
        (status, head)
    };
    let mut client = s.client().await;
    assert_eq!(s.call(&mut client, 1, "echo").await, 200);
    assert_eq!(connect_echo().await.0, 403);

    let edited = policy(
        &yaml_denying(&s.target, "\"*\"", "echo", ", echo.test:7000"),
        None,
    );
    // What is put in force: the policy in force with the new deny, and not the new host.
    let now = policy(&yaml_denying(&s.target, "\"*\"", "echo", ""), None);
    let outcome = s.proxy.proxy.reload(edited, "fenzi.yaml").await.unwrap();
    assert_eq!(
        outcome,
        Reload::Reloaded {
            policy: now.sha256(),
            servers: vec!["local".into()],
            next_session: vec!["hosts".into()],
        }
    );
    assert_ne!(now.sha256(), old);
    // The next request on the open tunnel, and on a new one, is refused; other tools still go.
    assert_eq!(s.call(&mut client, 2, "echo").await, 403);
    assert_eq!(s.call(&mut client, 3, "read").await, 200);
    let mut fresh = s.client().await;
    assert_eq!(s.call(&mut fresh, 4, "echo").await, 403);
    // The host is not allowed in this session.
    let (status, head) = connect_echo().await;
    assert_eq!(status, 403, "{head}");

    let entries = s.proxy.entries();
    let reloaded = entries
        .iter()
        .find(|e| e.outcome == Outcome::Reloaded)
        .expect("a reloaded record");
    assert_eq!(
        reloaded.rule.as_deref(),
        Some("tool rules of mcp.local; takes effect in the next session: hosts")
    );
    assert_eq!(reloaded.policy.as_deref(), Some(now.sha256().as_str()));
    assert_eq!(
        entries.iter().filter(|e| e.method == "POLICY").count(),
        1,
        "{entries:#?}"
    );
    let denied = entries
        .iter()
        .filter(|e| e.outcome == Outcome::Denied && e.tool.as_deref() == Some("echo"))
        .count();
    assert_eq!(denied, 2);
    // The same host in a policy at start is reached: the refusal above is the reload's.
    let control = setup_with(|target| yaml(target, "read", ", echo.test:7000")).await;
    let (_stream, status, head) = connect(control.proxy.addr, "echo.test:7000").await;
    assert_eq!(status, 200, "{head}");
}
