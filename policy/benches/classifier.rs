//! How long `mcp::classify` takes on a `tools/call` body of 1 KiB and of 1 MiB, in two shapes: the
//! arguments padded with one long string, or with many small fields; and the same on a server
//! with argument rules (the whole arguments kept, a wildcard pointer over every field, regexes),
//! which every body satisfies.
//!
//! `cargo bench -p fenzi-policy --bench classifier -- --warm-up-time 1 --measurement-time 3`

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use fenzi_policy::args::matcher::{JsonType, Matcher, Regex};
use fenzi_policy::args::pointer::Pointer;
use fenzi_policy::args::{ArgRule, Condition};
use fenzi_policy::mcp::inventory::Inventory;
use fenzi_policy::mcp::{EndpointPath, JsonLimits, RequestView, ServerRule, classify};
use fenzi_policy::tool_pattern::ToolPattern;
use std::hint::black_box;

fn server() -> ServerRule {
    ServerRule::with_tools(
        "deepwiki",
        EndpointPath::Exact("/mcp".into()),
        ["read_wiki_structure", "read_wiki_contents", "get_*"]
            .into_iter()
            .map(|p| ToolPattern::parse(p).unwrap())
            .collect(),
        vec![ToolPattern::parse("get_secret").unwrap()],
        JsonLimits::default(),
    )
}

/// `server()` with argument rules on the called tool: the arguments are an object, no field's `s`
/// matches a regex, and no `question` holds another.
fn server_with_rules() -> ServerRule {
    let cond = |p: &str, m: Matcher| Condition {
        pointer: Pointer::parse(p).unwrap(),
        matchers: vec![m],
    };
    let mut s = server();
    s.rules = vec![ArgRule {
        path: "mcp.deepwiki.tools.rules[0]".into(),
        written_at: "bench".into(),
        tool: ToolPattern::parse("read_wiki_*").unwrap(),
        args: vec![cond("", Matcher::Type(JsonType::Object))],
        deny_args: vec![
            cond("/*/s", Matcher::Regex(Regex::new("drop .*").unwrap())),
            cond(
                "/question",
                Matcher::Regex(Regex::new(".*rm -rf.*").unwrap()),
            ),
        ],
    }];
    s
}

const HEAD: &str = r#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"read_wiki_contents","arguments":{"#;
const TAIL: &str = "}}}";

/// A body of about `size` bytes whose arguments are one long string (with some escapes in it).
fn long_string(size: usize) -> Vec<u8> {
    let mut body = String::from(HEAD);
    body.push_str(r#""question":""#);
    let chunk = r#"How does the proxy decide? \"Strictly\", line by line.\n "#;
    while body.len() + chunk.len() + 1 + TAIL.len() < size {
        body.push_str(chunk);
    }
    body.push('"');
    body.push_str(TAIL);
    body.into_bytes()
}

/// A body of about `size` bytes whose arguments are many small fields of every JSON type.
fn many_fields(size: usize) -> Vec<u8> {
    let mut body = String::from(HEAD);
    let mut i = 0;
    loop {
        let field = format!(
            r#""field_{i}":{{"n":{i},"f":-12.5e-3,"b":true,"z":null,"s":"value {i}","a":[1,2,"x"]}}"#
        );
        if body.len() + field.len() + 1 + TAIL.len() >= size {
            break;
        }
        if i > 0 {
            body.push(',');
        }
        body.push_str(&field);
        i += 1;
    }
    body.push_str(TAIL);
    body.into_bytes()
}

fn bench(c: &mut Criterion) {
    for (group, server) in [
        ("classify tools/call", server()),
        ("classify tools/call, argument rules", server_with_rules()),
    ] {
        bench_server(c, group, &server);
    }
}

fn bench_server(c: &mut Criterion, group: &str, server: &ServerRule) {
    let headers: [(&str, &[u8]); 3] = [
        ("Content-Type", b"application/json"),
        ("Mcp-Method", b"tools/call"),
        ("Mcp-Name", b"read_wiki_contents"),
    ];
    let mut group = c.benchmark_group(group);
    for (shape, make) in [
        ("long string", long_string as fn(usize) -> Vec<u8>),
        ("many fields", many_fields),
    ] {
        for (label, size) in [("1 KiB", 1024), ("1 MiB", 1024 * 1024)] {
            let body = make(size);
            let req = RequestView {
                method: "POST",
                path: "/mcp",
                headers: &headers,
                body: &body,
            };
            assert!(
                classify(server, &Inventory::unpinned(), &req)
                    .overall
                    .is_allowed(),
                "{shape} {label}"
            );
            let inventory = Inventory::unpinned();
            group.throughput(Throughput::Bytes(body.len() as u64));
            group.bench_with_input(BenchmarkId::new(shape, label), &req, |b, req| {
                b.iter(|| classify(black_box(server), &inventory, black_box(req)))
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
