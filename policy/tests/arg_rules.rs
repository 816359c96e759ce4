//! Argument rules through the whole engine: the table of `testdata/cases/args.cases.yaml` (every
//! matcher passing and failing), and properties over random calls: a rule never allows what the
//! same policy without it denies, a project's rules never allow what the machine's deny, and a
//! denial by a rule always names that rule.

use fenzi_policy::cases;
use fenzi_policy::config;
use fenzi_policy::engine::Policy;
use fenzi_policy::mcp::RequestView;
use fenzi_policy::mcp::inventory::Inventory;
use proptest::prelude::*;

fn testdata(path: &str) -> String {
    std::fs::read_to_string(format!("{}/../testdata/{path}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
fn the_args_table_gets_every_expected_decision() {
    let policy_text = testdata("policies/args.yaml");
    let cfg = config::load(None, Some((&policy_text, "args.yaml"))).expect("valid policy");
    let policy = Policy::from_config(&cfg);
    let all = cases::parse(&testdata("cases/args.cases.yaml"), "args.cases.yaml").unwrap();
    assert!(all.len() >= 45, "the table shrank to {} cases", all.len());
    let failed: Vec<_> = all
        .iter()
        .filter_map(|c| {
            let r = cases::run(&policy, &Default::default(), c);
            (!r.passed).then(|| format!("line {} {}: got {:?}", c.line, c.name, r.got))
        })
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    // Both outcomes are in the table, and rule expectations are checked.
    assert!(all.iter().any(|c| c.expect == cases::Expect::Allowed));
    assert!(all.iter().filter(|c| c.rule.is_some()).count() >= 20);
}

#[test]
fn a_wrong_rule_expectation_fails_the_case() {
    let policy_text = testdata("policies/args.yaml");
    let cfg = config::load(None, Some((&policy_text, "args.yaml"))).unwrap();
    let policy = Policy::from_config(&cfg);
    let text = "cases:\n  - {server: tracker, tool: create_comment, arguments: {issueId: OPS-1, \
                body: x}, expect: denied, rule: \"mcp.tracker.tools.rules[0].args./body\"}\n";
    let case = &cases::parse(text, "t.yaml").unwrap()[0];
    assert!(!cases::run(&policy, &Default::default(), case).passed);
}

const BASE: &str = "version: 1
mcp:
  s:
    url: https://s.example.com/mcp
    tools:
      allow: [\"*\"]
      deny: [drop]
";

/// A policy with `rules` (YAML list items, indented under `rules:`), or none.
fn policy_with(rules: &[String]) -> Policy {
    let mut text = BASE.to_string();
    if !rules.is_empty() {
        text.push_str("      rules:\n");
        for r in rules {
            text.push_str(r);
        }
    }
    let cfg = config::load(None, Some((&text, "p.yaml"))).unwrap_or_else(|e| panic!("{e}\n{text}"));
    Policy::from_config(&cfg)
}

fn decide(policy: &Policy, body: &[u8]) -> fenzi_policy::Decision {
    let server = &policy.servers()[0];
    let view = RequestView {
        method: "POST",
        path: "/mcp",
        headers: &[("Content-Type", b"application/json")],
        body,
    };
    policy
        .decide_mcp(server, &Inventory::unpinned(), &view)
        .overall
}

fn json_value() -> impl Strategy<Value = serde_json::Value> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        (-1000i64..1000).prop_map(serde_json::Value::from),
        prop_oneof![
            Just("ENG-1"),
            Just("area-x"),
            Just("x"),
            Just(""),
            Just("canceled")
        ]
        .prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(4, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(serde_json::Value::Array),
            prop::collection::btree_map(
                prop_oneof![Just("a"), Just("b"), Just("labels"), Just("n")].prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    })
}

fn rule() -> impl Strategy<Value = String> {
    let tool = prop_oneof![Just("\"*\""), Just("t1"), Just("\"t*\""), Just("drop")];
    let pointer = prop_oneof![
        Just("/a"),
        Just("/labels/*"),
        Just("/a/b"),
        Just("/n"),
        Just("\"\"")
    ];
    let matcher = prop_oneof![
        Just("{prefix: ENG-}"),
        Just("{glob: \"area-*\"}"),
        Just("{max: 10}"),
        Just("{min: -5, type: integer}"),
        Just("{equals: canceled}"),
        Just("{one_of: [x, 1, null]}"),
        Just("{absent: true}"),
        Just("{type: object}"),
        Just("{max_length: 2}"),
        Just("{regex: \"[a-z]+\"}"),
    ];
    (tool, any::<bool>(), pointer, matcher).prop_map(|(tool, deny, pointer, matcher)| {
        let kind = if deny { "deny_args" } else { "args" };
        format!("        - tool: {tool}\n          {kind}:\n            {pointer}: {matcher}\n")
    })
}

fn call(tool: &str, arguments: &serde_json::Value) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": tool, "arguments": arguments}
    }))
    .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_rule_never_allows_what_the_policy_without_it_denies(
        rules in prop::collection::vec(rule(), 0..4),
        tool in prop_oneof![Just("t1"), Just("t2"), Just("drop"), Just("x")],
        arguments in json_value(),
        batch in any::<bool>(),
    ) {
        // A rule for `drop` is refused by the loader (the server denies it): leave those out.
        let rules: Vec<String> = rules.into_iter().filter(|r| !r.contains("tool: drop")).collect();
        let one = call(tool, &arguments);
        let body = if batch {
            let mut b = b"[".to_vec();
            b.extend_from_slice(&one);
            b.extend_from_slice(b",");
            b.extend_from_slice(&call("t2", &serde_json::json!({})));
            b.extend_from_slice(b"]");
            b
        } else {
            one
        };
        let with = decide(&policy_with(&rules), &body);
        let without = decide(&policy_with(&[]), &body);
        if with.is_allowed() {
            prop_assert!(without.is_allowed(), "rules allowed what no rules denied: {with:?}");
        }
        if !with.is_allowed() && without.is_allowed() {
            prop_assert!(with.rule.contains(".tools.rules["), "a rule denial names its rule: {}", with.rule);
        }
    }

    #[test]
    fn a_projects_rules_never_allow_what_the_machines_deny(
        machine in prop::collection::vec(rule(), 1..3),
        project in prop::collection::vec(rule(), 0..3),
        tool in prop_oneof![Just("t1"), Just("t2")],
        arguments in json_value(),
    ) {
        let keep = |v: Vec<String>| v.into_iter().filter(|r| !r.contains("tool: drop")).collect::<Vec<_>>();
        let (machine, project) = (keep(machine), keep(project));
        let file = |rules: &[String]| {
            let mut t = BASE.to_string();
            if !rules.is_empty() {
                t.push_str("      rules:\n");
                t.extend(rules.iter().cloned());
            }
            t
        };
        let machine_text = file(&machine);
        let merged = config::load(Some((&machine_text, "mcp.yaml")), Some((&file(&project), "fenzi.yaml")))
            .expect("a project adding rules loads");
        let alone = config::load(Some((&machine_text, "mcp.yaml")), None).unwrap();
        let body = call(tool, &arguments);
        let merged = decide(&Policy::from_config(&merged), &body);
        let alone = decide(&Policy::from_config(&alone), &body);
        if merged.is_allowed() {
            prop_assert!(alone.is_allowed(), "the project's rules allowed what the machine's denied");
        }
    }
}
