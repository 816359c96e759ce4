//! CONNECT tunnels that need no inspection: admitted like plain requests, dialled before the 200, then
//! carried byte for byte; refused targets get a JSON 403 and nothing is dialled.

mod common;

use common::*;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn setup(extra_hosts: &[String]) -> (TestProxy, Upstream, Arc<FakeNetwork>) {
    let echo = echo_upstream().await;
    let mut yaml =
        "version: 1\nhosts:\n  - echo.test:7000\n  - localhost.test:7000\n  - down.test:7000\n"
            .to_string();
    for h in extra_hosts {
        yaml.push_str(&format!("  - \"{h}\"\n"));
    }
    let network = Arc::new(
        FakeNetwork::default()
            .name("echo.test", &[ECHO_IP])
            .route(&format!("{ECHO_IP}:7000"), echo.addr)
            .name("localhost.test", &["127.0.0.1"])
            .name("down.test", &["93.184.216.99"])
            .route("93.184.216.99:7000", "127.0.0.1:1".parse().unwrap()),
    );
    let pki = TestPki::new();
    let proxy = start_proxy(
        policy(&yaml, None),
        options(&pki),
        network.clone(),
        Arc::new(MemorySink::default()),
    )
    .await;
    (proxy, echo, network)
}

#[tokio::test]
async fn passthrough_tunnel_carries_bytes_unchanged_both_ways() {
    let (proxy, echo, _) = setup(&[]).await;
    let (stream, status, head) = connect(proxy.addr, "echo.test:7000").await;
    assert_eq!(status, 200, "{head}");
    // Every byte value, in a pattern long enough to cross many reads, including a fake TLS record and
    // an HTTP request that a proxy must not interpret.
    let mut payload: Vec<u8> =
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n\x16\x03\x01\x00\x05hello".to_vec();
    payload.extend((0..300_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8));
    let (mut reader, mut writer) = stream.into_split();
    let sent = payload.clone();
    let writing = tokio::spawn(async move {
        writer.write_all(&sent).await.unwrap();
        writer.shutdown().await.unwrap();
    });
    let mut back = Vec::new();
    reader.read_to_end(&mut back).await.unwrap();
    writing.await.unwrap();
    assert_eq!(back.len(), payload.len());
    assert!(back == payload, "echoed bytes differ");
    assert!(
        *echo.received.lock().unwrap() == payload,
        "upstream saw different bytes"
    );
    assert_eq!(proxy.summaries(), ["allowed CONNECT echo.test:7000"]);
}

#[tokio::test]
async fn refused_targets_get_403_json_and_nothing_is_dialled() {
    let (proxy, echo, network) = setup(&[]).await;
    for (target, reason) in [
        ("evil.test:443", "host_not_allowed"),
        ("echo.test:7001", "host_not_allowed"),
        ("localhost.test:7000", "private_address"),
        // 127.1 is 127.0.0.1 and the policy does not name it.
        ("127.1:7000", "host_not_allowed"),
    ] {
        let (mut stream, status, head) = connect(proxy.addr, target).await;
        assert_eq!(status, 403, "{target}: {head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: application/json")
        );
        // The reason is where clients show it: the status line and Proxy-Status (RFC 9209).
        assert!(
            head.starts_with(&format!("HTTP/1.1 403 Forbidden ({reason})\r\n")),
            "{head}"
        );
        let error_type = if reason == "private_address" {
            "destination_ip_prohibited"
        } else {
            "http_request_denied"
        };
        let proxy_status = head
            .lines()
            .find_map(|l| l.strip_prefix("proxy-status: "))
            .unwrap_or_else(|| panic!("no Proxy-Status: {head}"));
        assert!(
            proxy_status.starts_with(&format!("fenzi; error={error_type}; details=\"{reason}: "))
                && proxy_status.ends_with('"'),
            "{proxy_status}"
        );
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length: ")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap();
        let mut body = vec![0; length];
        stream.read_exact(&mut body).await.unwrap();
        let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(json["error"], reason, "{target}");
    }
    assert!(network.dialled().is_empty());
    assert_eq!(echo.connection_count(), 0);
    assert_eq!(
        proxy.summaries(),
        [
            "denied CONNECT evil.test:443 -> host_not_allowed",
            "denied CONNECT echo.test:7001 -> host_not_allowed",
            "denied CONNECT localhost.test:7000 -> private_address",
            "denied CONNECT 127.0.0.1:7000 -> host_not_allowed",
        ]
    );
}

#[tokio::test]
async fn an_ip_literal_the_policy_names_may_be_internal() {
    let echo_for_ip = echo_upstream().await;
    let literal = format!("127.0.0.1:{}", echo_for_ip.port());
    let (proxy, _echo, _) = setup(std::slice::from_ref(&literal)).await;
    let (mut stream, status, _) = connect(proxy.addr, &literal).await;
    assert_eq!(status, 200);
    stream.write_all(b"ping").await.unwrap();
    let mut back = [0u8; 4];
    stream.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"ping");
    assert_eq!(proxy.summaries(), [format!("allowed CONNECT {literal}")]);
}

#[tokio::test]
async fn unreachable_upstream_is_502_and_malformed_targets_400() {
    let (proxy, _echo, _) = setup(&[]).await;
    let (_stream, status, head) = connect(proxy.addr, "down.test:7000").await;
    assert_eq!(status, 502, "{head}");
    let (_stream, status, head) = connect(proxy.addr, "a..b:443").await;
    assert_eq!(status, 400, "{head}");
    let summaries = proxy.summaries();
    assert_eq!(
        summaries[..2],
        [
            "allowed CONNECT down.test:7000",
            "failed CONNECT down.test:7000 -> upstream_error"
        ]
    );
    // A target that does not parse is not copied into the log.
    assert_eq!(
        summaries[2], "denied CONNECT <invalid target>:0 -> bad_request",
        "{summaries:?}"
    );
}
