//! The per-request cost of the secrets machinery: scanning a request for placeholders, deciding, and
//! substituting (`SessionSecrets::check_request` + `apply`), and scrubbing a streamed response.
//!
//! ```text
//! cargo bench -p fenzi-proxy --bench secrets
//! ```

use bytes::Bytes;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fenzi_policy::engine::{SecretBinding, SecretSource};
use fenzi_policy::host::{Host, HostPattern};
use fenzi_proxy::secrets::{SecretSet, SessionSecrets};
use http::Request;
use http::request::Parts;
use std::hint::black_box;

fn session() -> SessionSecrets {
    let bind = |name: &str, host: &str, body: bool, bearer: bool| SecretBinding {
        programs: Default::default(),
        name: name.to_string(),
        hosts: vec![HostPattern::parse(host).unwrap()],
        body,
        sources: vec![SecretSource::TopLevel],
        default_bearer: bearer,
        positions: None,
        entry: None,
    };
    let bindings = [
        bind("MCP_LINEAR", "mcp.linear.app", false, true),
        bind("ANTHROPIC_API_KEY", "api.anthropic.com", true, false),
        bind(
            "DIGITALOCEAN_API_TOKEN",
            "api.digitalocean.com",
            false,
            false,
        ),
    ];
    let set = SecretSet::mint([
        (
            "MCP_LINEAR".to_string(),
            b"lin_api_0123456789abcdefghij".to_vec(),
        ),
        (
            "ANTHROPIC_API_KEY".to_string(),
            b"sk-ant-api03-0123456789abcdefghijklmnopqrstuvwxyz".to_vec(),
        ),
        (
            "DIGITALOCEAN_API_TOKEN".to_string(),
            b"dop_v1_0123456789abcdef0123456789abcdef".to_vec(),
        ),
    ])
    .unwrap();
    SessionSecrets::new(&bindings, set).unwrap()
}

/// `len` bytes of filler: English-like prose, or pseudo-random printable ASCII (escape bytes
/// included), the worst case for the scanner's prefilter and the normaliser.
fn filler(len: usize, random: bool) -> Vec<u8> {
    if !random {
        let prose = b"the quick brown fox jumps over the lazy dog; fenzi finds nothing here. ";
        return prose.iter().copied().cycle().take(len).collect();
    }
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            b' ' + (x % 95) as u8
        })
        // Keep the JSON string closed: no quote or backslash from the filler itself.
        .map(|b| if b == b'"' || b == b'\\' { b'%' } else { b })
        .collect()
}

/// A request to the model host with about 1 KiB of headers and a `body_len`-byte JSON body, the
/// key placeholder in `x-api-key` and at the very end of the body.
fn request(s: &SessionSecrets, body_len: usize, random: bool) -> (Parts, Bytes) {
    let key = s.set().placeholder("ANTHROPIC_API_KEY").unwrap().as_str();
    let mut b = Request::builder()
        .method("POST")
        .uri("/v1/messages?beta=true")
        .header("x-api-key", key)
        .header("content-type", "application/json")
        .header("anthropic-version", "2023-06-01")
        .header("user-agent", "claude-cli/2.0.0 (external, cli)");
    for i in 0..12 {
        b = b.header(format!("x-stainless-header-{i}"), "v".repeat(60));
    }
    let head = r#"{"model":"claude","messages":[{"role":"user","content":""#;
    let tail = format!("\"}}],\"metadata\":\"{key}\"}}");
    let fill = body_len.saturating_sub(head.len() + tail.len());
    let mut body = head.as_bytes().to_vec();
    body.extend(filler(fill, random));
    body.extend_from_slice(tail.as_bytes());
    let (parts, ()) = b.body(()).unwrap().into_parts();
    (parts, Bytes::from(body))
}

fn bench(c: &mut Criterion) {
    let s = session();
    let host = Host::parse("api.anthropic.com").unwrap();
    let mut group = c.benchmark_group("secrets");
    for (body_len, random) in [(1024usize, false), (1 << 20, false), (1 << 20, true)] {
        let label = format!("{body_len}-{}", if random { "random" } else { "prose" });
        let (parts, body) = request(&s, body_len, random);
        group.throughput(Throughput::Bytes(body_len as u64));
        group.bench_with_input(
            BenchmarkId::new("scan+decide", &label),
            &(parts.clone(), body.clone()),
            |b, (parts, body)| {
                b.iter(|| black_box(s.check_request(&host, 443, None, true, parts, body)));
            },
        );
        group.bench_with_input(
            BenchmarkId::new("scan+decide+substitute", &label),
            &(parts, body),
            |b, (parts, body)| {
                b.iter(|| {
                    let mut parts = parts.clone();
                    let use_ = s.check_request(&host, 443, None, true, &parts, body);
                    assert!(use_.is_allowed() && use_.changes_request());
                    black_box(s.apply(&use_, &mut parts, body.clone()).unwrap())
                });
            },
        );
        let response = filler(body_len, random);
        group.bench_with_input(
            BenchmarkId::new("scrub-16KiB-chunks", &label),
            &response,
            |b, response| {
                b.iter(|| {
                    let mut st = s.scrubber().stream();
                    let mut n = 0;
                    for chunk in response.chunks(16 * 1024) {
                        n += st.push(chunk).len();
                    }
                    n += st.finish().len();
                    black_box(n)
                });
            },
        );
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
