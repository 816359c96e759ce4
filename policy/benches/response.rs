//! What reading a server's answer costs (the response phase, `fenzi_policy::response`): the strict
//! read every message gets ([`read_message`]: a 200-tool `tools/list` result of about 93 KB, and a
//! small `tools/call` result), then filtering that list to the policy ([`filter_lists`]: unpinned,
//! and pinned with the lock holding every tool, where each entry is also read whole, hashed and
//! compared), and the two together.
//!
//! `cargo bench -p fenzi-policy --bench response -- --warm-up-time 1 --measurement-time 3`
//! Target (issue 13): filtering the 200-tool list under 100 µs.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use fenzi_policy::json::{JsonLimits, parse};
use fenzi_policy::mcp::inventory::Inventory;
use fenzi_policy::mcp::{EndpointPath, ServerRule};
use fenzi_policy::pins::{PinnedTool, ServerPins};
use fenzi_policy::response::{filter_lists, read_and_filter, read_message};
use fenzi_policy::tool_pattern::ToolPattern;
use std::hint::black_box;

fn server(pin: bool) -> ServerRule {
    let mut rule = ServerRule::with_tools(
        "tracker",
        EndpointPath::Exact("/mcp".into()),
        ["get_*", "list_*", "search"]
            .into_iter()
            .map(|p| ToolPattern::parse(p).unwrap())
            .collect(),
        vec![ToolPattern::parse("get_secret").unwrap()],
        JsonLimits::default(),
    );
    rule.pin = pin;
    rule
}

/// One listed tool as servers write them: a description, a schema with a few typed properties,
/// annotations. About 600 bytes.
fn tool(i: usize) -> String {
    let verb = ["get", "list", "create", "delete", "update"][i % 5];
    format!(
        r#"{{"name":"{verb}_thing_{i}","title":"{verb} thing {i}","description":"Does {verb} on thing number {i}. Returns the thing as JSON, with its owner, its labels and its history; fails when the thing does not exist.","inputSchema":{{"type":"object","properties":{{"id":{{"type":"string","description":"The thing's id"}},"limit":{{"type":"integer","minimum":1,"maximum":100}},"labels":{{"type":"array","items":{{"type":"string"}}}}}},"required":["id"]}},"annotations":{{"readOnlyHint":{},"destructiveHint":{}}}}}"#,
        verb == "get" || verb == "list",
        verb == "delete"
    )
}

fn tools_list(n: usize) -> Vec<u8> {
    let tools: Vec<String> = (0..n).map(tool).collect();
    format!(
        r#"{{"jsonrpc":"2.0","id":7,"result":{{"tools":[{}]}}}}"#,
        tools.join(",")
    )
    .into_bytes()
}

fn bench(c: &mut Criterion) {
    let list = tools_list(200);
    let mut group = c.benchmark_group("response");
    group.throughput(Throughput::Bytes(list.len() as u64));

    let unpinned = server(false);
    let shape = read_message(&unpinned, &list).unwrap();
    group.bench_function("tools_list_200_filter", |b| {
        b.iter(|| {
            let mut inventory = Inventory::new(false, None);
            let read = filter_lists(&unpinned, &mut inventory, black_box(&list), &shape).unwrap();
            assert!(read.rewritten.is_some());
            read
        })
    });
    // The whole response phase for the list: the strict read every message gets, then the filter.
    group.bench_function("tools_list_200_read_and_filter", |b| {
        b.iter(|| {
            let mut inventory = Inventory::new(false, None);
            read_and_filter(&unpinned, &mut inventory, black_box(&list)).unwrap()
        })
    });

    // Pinned, every tool already in the lock: each entry is also picked, hashed and compared.
    let pinned = server(true);
    let parsed = parse(&list, &JsonLimits::default()).unwrap();
    let Some(fenzi_policy::json::Value::Array(entries)) =
        parsed.get("result").and_then(|r| r.get("tools")).cloned()
    else {
        panic!("the bench list has tools")
    };
    let lock: ServerPins = entries
        .iter()
        .map(|e| {
            let name = e.get("name").and_then(|n| n.as_str()).unwrap().to_string();
            (name, PinnedTool::from_listed(e))
        })
        .collect();
    group.bench_function("tools_list_200_filter_pinned", |b| {
        b.iter(|| {
            let mut inventory = Inventory::new(true, Some(lock.clone()));
            let read = filter_lists(&pinned, &mut inventory, black_box(&list), &shape).unwrap();
            assert!(!read.lock_changed);
            read
        })
    });

    group.bench_function("tools_list_200_shallow_read", |b| {
        b.iter(|| read_message(&unpinned, black_box(&list)).unwrap())
    });

    let call = br#"{"jsonrpc":"2.0","id":42,"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}"#;
    group.throughput(Throughput::Bytes(call.len() as u64));
    group.bench_function("tools_call_result_shallow_read", |b| {
        b.iter(|| read_message(&unpinned, black_box(call)).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
