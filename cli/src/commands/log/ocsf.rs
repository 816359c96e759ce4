//! `fenzi log --ocsf`: each audit record as one OCSF 1.8.0 event (docs/ocsf.md).
//!
//! This module owns the mapping and nothing else: [`event`] turns one stored line and its parsed
//! record into the event's JSON. It reads no clock and no file; the enum ids below are the ones the
//! OCSF 1.8.0 schema defines (`ocsf/ocsf-schema` tag `1.8.0`: `dictionary.json`, `categories.json`,
//! `events/base_event.json`, `events/network/http_activity.json`,
//! `events/application/api_activity.json`, `events/application/application_lifecycle.json`,
//! `profiles/security_control.json`), checked against the vendored lists in
//! `testdata/ocsf/schema-1.8.0.json` by the tests.
//!
//! Which class a record becomes:
//!
//! | record | class | activity |
//! |---|---|---|
//! | has `rpc` (a JSON-RPC decision, a `filtered` list, a `held` call) | 6003 API Activity (category 6) | 2 Read for `tools/list`, `prompts/list`, `resources/list`, `resources/templates/list`, `prompts/get`, `resources/read`; 99 Other (its name the method) for the rest |
//! | `reloaded`, `reload_refused` | 6002 Application Lifecycle (category 6) | 8 Update |
//! | any other (CONNECT, plain HTTP, a request in a tunnel, a request refused unparsed) | 4002 HTTP Activity (category 4) | by method: 1 Connect, 2 Delete, 3 Get, 4 Head, 5 Options, 6 Post, 7 Put, 8 Trace, 9 Patch; 0 Unknown for `-`; 99 Other (its name the method) |
//!
//! `type_uid` is `class_uid * 100 + activity_id`.
//!
//! Every event carries:
//!
//! | OCSF | from the record |
//! |---|---|
//! | `time` | `ts` as Unix milliseconds; `timezone_offset` 0 (the log is UTC) |
//! | `metadata.uid` | `session:seq` |
//! | `metadata.sequence`, `metadata.original_time` | `seq`, `ts` |
//! | `metadata.version`, `metadata.product` | `1.8.0`; fenzi, its vendor and version |
//! | `metadata.profiles` | `security_control` (for `action_id`, `disposition_id`, `policy`) |
//! | `raw_data` | the stored line, byte for byte |
//! | `status_code` | `reason` |
//! | `status_detail` | `rule` (and `confirm` after it, for a held call's answer) |
//! | `policy.uid` | `policy` (the SHA-256 of the policy in force) |
//! | `src_endpoint` | `client` (`ip`, `port`) |
//! | `dst_endpoint` | `host` (`ip` when it is an IP literal, else `hostname`), `port` |
//! | `http_request` | `method` as `http_method`; `url` = `hostname`, `port`, `path` when the record has a path |
//! | `unmapped` | `server`, `secrets` (names), `source`, `hidden`, `confirm` when present |
//!
//! API Activity adds `api.operation` = `rpc`, `api.service.name` = `server`,
//! `api.request.uid` = `rpc_id`, `resources[]` = what the message names (`{type: "tool", name}`,
//! `{type: "prompt", name}` or `{type: "resource", uid: URI}`), and
//! `actor.session.uid` = `session` (the fenzi session the agent ran in), and `actor.process` the
//! record's `program` (DESIGN §17: `pid`, `name` (`agent` for the agent), `file.path`, `file.name`,
//! `file.hashes` with its SHA-256; HTTP Activity gets the same `actor.process` with the `host`
//! profile). Application Lifecycle adds
//! `app` = fenzi and names the policy file (`path`) in `message`.
//!
//! The outcome:
//!
//! | decision | `action_id` | `disposition_id` | `status_id` | `severity_id` |
//! |---|---|---|---|---|
//! | `allowed` | 1 Allowed | 1 Allowed | 1 Success | 1 Informational |
//! | `denied` | 2 Denied | 2 Blocked | 2 Failure | 2 Low (4 High for `audit_unavailable`) |
//! | `failed` | 1 Allowed | 27 Error | 2 Failure | 2 Low |
//! | `filtered` | 4 Modified | 7 Custom Action | 1 Success | 1 Informational |
//! | `held` | 3 Observed | 14 Delayed | 99 Other (`held`) | 1 Informational |
//! | `reloaded` | — | — | 1 Success | 1 Informational |
//! | `reload_refused` | — | — | 2 Failure | 3 Medium |

use fenzi_policy::audit::{AuditRecord, Outcome, parse_timestamp};
use serde_json::{Map, Value, json};
use std::net::{IpAddr, SocketAddr};

/// The OCSF schema version the events follow.
pub const OCSF_VERSION: &str = "1.8.0";

const HTTP_ACTIVITY: u64 = 4002;
const API_ACTIVITY: u64 = 6003;
const APPLICATION_LIFECYCLE: u64 = 6002;

/// JSON-RPC methods that only read: API Activity's 2 Read.
const READ_METHODS: &[&str] = &[
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "prompts/get",
    "resources/read",
];

/// The OCSF event of one record; `raw` is its line as stored (without the newline). Fails only
/// when the record's `ts` is not the timestamp fenzi writes (the event's `time` is required).
pub fn event(record: &AuditRecord, raw: &str) -> Result<Value, String> {
    let time = parse_timestamp(&record.ts)
        .ok_or_else(|| format!("`ts` {:?} is not an RFC 3339 UTC timestamp", record.ts))?;
    let (class_uid, class_name, category_uid, category_name) = class(record);
    let (activity_id, activity_name) = activity(class_uid, record);
    let (status_id, status) = status(record.decision);
    let (severity_id, severity) = severity(record);

    let mut e = Map::new();
    e.insert("class_uid".into(), json!(class_uid));
    e.insert("class_name".into(), json!(class_name));
    e.insert("category_uid".into(), json!(category_uid));
    e.insert("category_name".into(), json!(category_name));
    e.insert("activity_id".into(), json!(activity_id));
    e.insert("activity_name".into(), json!(activity_name));
    e.insert("type_uid".into(), json!(class_uid * 100 + activity_id));
    e.insert(
        "type_name".into(),
        json!(format!(
            "{class_name}: {}",
            type_caption(activity_id, &activity_name)
        )),
    );
    e.insert("time".into(), json!(time));
    e.insert("timezone_offset".into(), json!(0));
    e.insert("severity_id".into(), json!(severity_id));
    e.insert("severity".into(), json!(severity));
    e.insert("status_id".into(), json!(status_id));
    e.insert("status".into(), json!(status));
    if let Some(reason) = &record.reason {
        e.insert("status_code".into(), json!(reason));
    }
    if let Some(detail) = status_detail(record) {
        e.insert("status_detail".into(), json!(detail));
    }
    e.insert("message".into(), json!(message(record)));
    e.insert("metadata".into(), metadata(record));
    e.insert("raw_data".into(), json!(raw));
    if let Some((action_id, action, disposition_id, disposition)) = action(record.decision) {
        e.insert("action_id".into(), json!(action_id));
        e.insert("action".into(), json!(action));
        e.insert("disposition_id".into(), json!(disposition_id));
        e.insert("disposition".into(), json!(disposition));
    }
    if let Some(hash) = &record.policy {
        e.insert("policy".into(), json!({ "uid": hash }));
    }
    if class_uid == APPLICATION_LIFECYCLE {
        e.insert("app".into(), product());
    } else {
        if let Some(src) = record.client.as_deref().and_then(src_endpoint) {
            e.insert("src_endpoint".into(), src);
        }
        if let Some(dst) = dst_endpoint(record) {
            e.insert("dst_endpoint".into(), dst);
        }
        e.insert("http_request".into(), http_request(record));
        // The `host` profile's actor: the program inside the sandbox (DESIGN §17).
        if let Some(process) = process(record) {
            e.insert("actor".into(), json!({ "process": process }));
            e["metadata"]["profiles"] = json!(["security_control", "host"]);
        }
    }
    if class_uid == API_ACTIVITY {
        e.insert("api".into(), api(record));
        let mut actor = json!({ "session": { "uid": record.session } });
        if let Some(process) = process(record) {
            actor["process"] = process;
        }
        e.insert("actor".into(), actor);
        let named = match (&record.tool, &record.prompt, &record.resource) {
            (Some(tool), _, _) => Some(json!({ "type": "tool", "name": tool })),
            (_, Some(prompt), _) => Some(json!({ "type": "prompt", "name": prompt })),
            (_, _, Some(uri)) => Some(json!({ "type": "resource", "uid": uri })),
            _ => None,
        };
        if let Some(named) = named {
            e.insert("resources".into(), json!([named]));
        }
    }
    if let Some(unmapped) = unmapped(record) {
        e.insert("unmapped".into(), unmapped);
    }
    Ok(Value::Object(e))
}

/// (class_uid, class caption, category_uid, category caption).
fn class(record: &AuditRecord) -> (u64, &'static str, u64, &'static str) {
    match record.decision {
        Outcome::Reloaded | Outcome::ReloadRefused => (
            APPLICATION_LIFECYCLE,
            "Application Lifecycle",
            6,
            "Application Activity",
        ),
        _ if record.rpc.is_some() => (API_ACTIVITY, "API Activity", 6, "Application Activity"),
        _ => (HTTP_ACTIVITY, "HTTP Activity", 4, "Network Activity"),
    }
}

/// (activity_id, activity_name): the caption for a defined id, the source's own word for 99 Other.
fn activity(class_uid: u64, record: &AuditRecord) -> (u64, String) {
    match class_uid {
        APPLICATION_LIFECYCLE => (8, "Update".into()),
        API_ACTIVITY => {
            let method = record.rpc.as_deref().unwrap_or_default();
            if READ_METHODS.contains(&method) {
                (2, "Read".into())
            } else {
                (99, method.to_string())
            }
        }
        _ => {
            let id = match record.method.as_str() {
                "CONNECT" => 1,
                "DELETE" => 2,
                "GET" => 3,
                "HEAD" => 4,
                "OPTIONS" => 5,
                "POST" => 6,
                "PUT" => 7,
                "TRACE" => 8,
                "PATCH" => 9,
                "-" => return (0, "Unknown".into()),
                other => return (99, other.to_string()),
            };
            let name = record.method[..1].to_string() + &record.method[1..].to_lowercase();
            (id, name)
        }
    }
}

/// The caption `type_name` uses: the activity's own, `Other` for 99.
fn type_caption(activity_id: u64, activity_name: &str) -> &str {
    if activity_id == 99 {
        "Other"
    } else {
        activity_name
    }
}

fn status(decision: Outcome) -> (u64, &'static str) {
    match decision {
        Outcome::Allowed | Outcome::Filtered | Outcome::Reloaded => (1, "Success"),
        Outcome::Denied | Outcome::Failed | Outcome::ReloadRefused => (2, "Failure"),
        Outcome::Held => (99, "held"),
    }
}

fn severity(record: &AuditRecord) -> (u64, &'static str) {
    match record.decision {
        Outcome::Denied if record.reason.as_deref() == Some("audit_unavailable") => (4, "High"),
        Outcome::Denied | Outcome::Failed => (2, "Low"),
        Outcome::ReloadRefused => (3, "Medium"),
        _ => (1, "Informational"),
    }
}

/// (action_id, action, disposition_id, disposition) of a decision about traffic.
fn action(decision: Outcome) -> Option<(u64, &'static str, u64, &'static str)> {
    Some(match decision {
        Outcome::Allowed => (1, "Allowed", 1, "Allowed"),
        Outcome::Denied => (2, "Denied", 2, "Blocked"),
        Outcome::Failed => (1, "Allowed", 27, "Error"),
        Outcome::Filtered => (4, "Modified", 7, "Custom Action"),
        Outcome::Held => (3, "Observed", 14, "Delayed"),
        Outcome::Reloaded | Outcome::ReloadRefused => return None,
    })
}

fn status_detail(record: &AuditRecord) -> Option<String> {
    match (&record.rule, &record.confirm) {
        (Some(rule), Some(confirm)) => Some(format!("{rule}; confirm: {confirm}")),
        (Some(rule), None) => Some(rule.clone()),
        (None, Some(confirm)) => Some(format!("confirm: {confirm}")),
        (None, None) => None,
    }
}

/// One sentence a person reads in a SIEM's event list.
fn message(record: &AuditRecord) -> String {
    let decision = record.decision.label();
    if matches!(record.decision, Outcome::Reloaded | Outcome::ReloadRefused) {
        let file = record.path.as_deref().unwrap_or("the policy");
        return format!("{decision} {file}");
    }
    let mut m = format!("{decision} {}", record.method);
    if !record.host.is_empty() && record.host != "-" {
        m += &format!(" {}:{}", record.host, record.port);
    }
    if let Some(path) = &record.path {
        m += &format!(" {path}");
    }
    if let Some(rpc) = &record.rpc {
        m += &format!(" {rpc}");
    }
    if let Some(named) = record.tool.as_ref().or(record.prompt.as_ref()) {
        m += &format!(" {named}");
    } else if let Some(uri) = &record.resource {
        m += &format!(" {uri}");
    }
    if let Some(hidden) = record.hidden {
        m += &format!(" ({hidden} hidden)");
    }
    if let Some(reason) = &record.reason {
        m += &format!(": {reason}");
    }
    m
}

fn product() -> Value {
    json!({
        "name": "fenzi",
        "vendor_name": "fenzi",
        "version": env!("CARGO_PKG_VERSION"),
    })
}

fn metadata(record: &AuditRecord) -> Value {
    json!({
        "version": OCSF_VERSION,
        "product": product(),
        "profiles": ["security_control"],
        "uid": format!("{}:{}", record.session, record.seq),
        "sequence": record.seq,
        "original_time": record.ts,
        "log_name": "fenzi audit",
    })
}

/// `actor.process` from the record's `program`: the first holder's pid (inside the sandbox) and
/// executable (`file.path`, `file.name`, its SHA-256 as a fingerprint, algorithm 3), and in
/// `unmapped`-free form whether it is the agent (`process.name` is `agent` then) and how many
/// processes held the socket (`process.xattributes`).
fn process(record: &AuditRecord) -> Option<Value> {
    let p = &*record.program.as_ref()?.0;
    let name = p.exe.rsplit('/').next().unwrap_or_default();
    let mut process = json!({
        "pid": p.pid,
        "name": if p.agent { "agent" } else { name },
        "file": {
            "path": p.exe,
            "name": name,
            "type_id": 1,
            "type": "Regular File",
            "hashes": [{ "algorithm_id": 3, "algorithm": "SHA-256", "value": p.sha256 }],
        },
    });
    if !p.holders.is_empty() {
        process["xattributes"] = json!({ "holders": p.holders.len(), "agent": p.agent });
    } else {
        process["xattributes"] = json!({ "agent": p.agent });
    }
    Some(process)
}

fn src_endpoint(client: &str) -> Option<Value> {
    let addr: SocketAddr = client.parse().ok()?;
    Some(json!({ "ip": addr.ip().to_string(), "port": addr.port() }))
}

/// Where the request went, if the record names a host (a request refused before it named one
/// records `-`, or fenzi's marker for a target it could not read).
fn dst_endpoint(record: &AuditRecord) -> Option<Value> {
    let host = record.host.as_str();
    if host.is_empty() || host == "-" || host.starts_with('<') {
        return None;
    }
    let mut dst = Map::new();
    match host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        Ok(ip) => dst.insert("ip".into(), json!(ip.to_string())),
        Err(_) => dst.insert("hostname".into(), json!(host)),
    };
    if record.port != 0 {
        dst.insert("port".into(), json!(record.port));
    }
    Some(Value::Object(dst))
}

fn http_request(record: &AuditRecord) -> Value {
    let mut request = Map::new();
    if record.method != "-" {
        request.insert("http_method".into(), json!(record.method));
    }
    // A URL needs a path (or a whole URL string): a CONNECT has none.
    if let Some(path) = &record.path {
        let mut url = Map::new();
        if dst_endpoint(record).is_some() {
            url.insert("hostname".into(), json!(record.host));
            if record.port != 0 {
                url.insert("port".into(), json!(record.port));
            }
        }
        url.insert("path".into(), json!(path));
        request.insert("url".into(), Value::Object(url));
    }
    Value::Object(request)
}

fn api(record: &AuditRecord) -> Value {
    let mut api = Map::new();
    api.insert("operation".into(), json!(record.rpc));
    if let Some(server) = &record.server {
        api.insert("service".into(), json!({ "name": server }));
    }
    if let Some(id) = &record.rpc_id {
        api.insert("request".into(), json!({ "uid": id }));
    }
    Value::Object(api)
}

/// The record's fields OCSF has no attribute for, under `unmapped`.
fn unmapped(record: &AuditRecord) -> Option<Value> {
    let mut u = Map::new();
    if let Some(server) = &record.server {
        u.insert("server".into(), json!(server));
    }
    if !record.secrets.is_empty() {
        u.insert("secrets".into(), json!(record.secrets));
    }
    if let Some(source) = &record.source {
        u.insert("source".into(), json!(source));
    }
    if let Some(hidden) = record.hidden {
        u.insert("hidden".into(), json!(hidden));
    }
    if let Some(confirm) = &record.confirm {
        u.insert("confirm".into(), json!(confirm));
    }
    (!u.is_empty()).then(|| json!({ "fenzi": u }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::log::test_records::{mcp, rec};
    use std::path::PathBuf;

    fn testdata(name: &str) -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../testdata/ocsf")
            .join(name)
    }

    fn read(name: &str) -> String {
        std::fs::read_to_string(testdata(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The cases of `testdata/ocsf/records.jsonl`, one per line, in order; each has its expected
    /// event in `testdata/ocsf/<case>.json`.
    const CASES: &[&str] = &[
        "connect_tunnel",
        "allowed_call",
        "denied_call",
        "filtered_list",
        "plain_http_denied",
        "failed",
        "held_call",
        "reloaded",
        "prompt_get",
        "resource_read_denied",
    ];

    fn events() -> Vec<(&'static str, String, Value)> {
        let log = read("records.jsonl");
        let lines: Vec<&str> = log.lines().collect();
        assert_eq!(lines.len(), CASES.len(), "one line per case");
        CASES
            .iter()
            .zip(lines)
            .map(|(case, line)| {
                let record: AuditRecord = serde_json::from_str(line).unwrap();
                (*case, line.to_string(), event(&record, line).unwrap())
            })
            .collect()
    }

    #[test]
    fn representative_records_map_to_their_golden_events() {
        for (case, line, mut event) in events() {
            // The original line travels byte for byte; the golden files leave it out.
            let raw = event.as_object_mut().unwrap().remove("raw_data");
            assert_eq!(raw, Some(Value::String(line)), "{case}");
            for product in ["/metadata/product", "/app"] {
                if let Some(p) = event.pointer_mut(product) {
                    assert_eq!(p["version"], env!("CARGO_PKG_VERSION"), "{case}");
                    p["version"] = json!("<version>");
                }
            }
            let expected: Value = serde_json::from_str(&read(&format!("{case}.json"))).unwrap();
            assert_eq!(
                event,
                expected,
                "{case}: got\n{}",
                serde_json::to_string_pretty(&event).unwrap()
            );
        }
    }

    /// What the vendored 1.8.0 lists say an event must have (`testdata/ocsf/schema-1.8.0.json`).
    fn problems(event: &Value, schema: &Value) -> Vec<String> {
        let mut out = vec![];
        let class_uid = event["class_uid"].as_u64().unwrap_or(0);
        let Some(class) = schema["classes"].get(class_uid.to_string()) else {
            return vec![format!("class_uid {class_uid} is not a vendored class")];
        };
        let has = |v: &Value, k: &str| v.get(k).is_some_and(|x| !x.is_null());
        let ids = |v: &Value| -> Vec<u64> {
            v.as_array()
                .unwrap()
                .iter()
                .map(|i| i.as_u64().unwrap())
                .collect()
        };
        for field in class["required"].as_array().unwrap() {
            let field = field.as_str().unwrap();
            if !has(event, field) {
                out.push(format!("{}: required `{field}` is missing", class["name"]));
            }
        }
        for group in class["at_least_one"].as_array().unwrap() {
            if !group
                .as_array()
                .unwrap()
                .iter()
                .any(|k| has(event, k.as_str().unwrap()))
            {
                out.push(format!("{}: none of {group} is present", class["name"]));
            }
        }
        if event["category_uid"] != class["category_uid"] {
            out.push(format!("category_uid is not {}", class["category_uid"]));
        }
        let activity = event["activity_id"].as_u64().unwrap_or(u64::MAX);
        if !ids(&class["activity_ids"]).contains(&activity) {
            out.push(format!(
                "activity_id {activity} is not defined for the class"
            ));
        }
        if event["type_uid"].as_u64() != Some(class_uid * 100 + activity) {
            out.push("type_uid is not class_uid * 100 + activity_id".into());
        }
        for (field, allowed) in schema["enums"].as_object().unwrap() {
            if let Some(id) = event.get(field)
                && !id.as_u64().is_some_and(|id| ids(allowed).contains(&id))
            {
                out.push(format!("{field} {id} is not a defined id"));
            }
        }
        if event["metadata"]["version"] != OCSF_VERSION {
            out.push("metadata.version is not 1.8.0".into());
        }
        check_objects(event, "", schema, &mut out);
        out
    }

    /// Every object-valued attribute present (at any depth) against its object's required fields
    /// and at-least-one constraints.
    fn check_objects(value: &Value, at: &str, schema: &Value, out: &mut Vec<String>) {
        let Some(map) = value.as_object() else {
            return;
        };
        for (key, child) in map {
            let Some(kind) = schema["types"][key].as_str() else {
                continue;
            };
            let Some(def) = schema["objects"].get(kind) else {
                out.push(format!(
                    "{at}{key}: no vendored definition of object `{kind}`"
                ));
                continue;
            };
            let items = match child {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            for item in items {
                let here = format!("{at}{key}.");
                if !item.is_object() {
                    out.push(format!("{at}{key}: `{kind}` is not an object"));
                    continue;
                }
                for field in def["required"].as_array().unwrap() {
                    if item.get(field.as_str().unwrap()).is_none_or(Value::is_null) {
                        out.push(format!("{here}{}: required in `{kind}`", field));
                    }
                }
                for group in def["at_least_one"].as_array().unwrap() {
                    let any = group
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| item.get(k.as_str().unwrap()).is_some_and(|v| !v.is_null()));
                    if !any {
                        out.push(format!("{at}{key}: `{kind}` needs one of {group}"));
                    }
                }
                check_objects(item, &here, schema, out);
            }
        }
    }

    fn schema() -> Value {
        let schema: Value = serde_json::from_str(&read("schema-1.8.0.json")).unwrap();
        assert_eq!(schema["version"], OCSF_VERSION);
        schema
    }

    #[test]
    fn every_event_has_what_its_class_requires() {
        let schema = schema();
        let mut checked = std::collections::BTreeSet::new();
        for (case, _, event) in events() {
            let found = problems(&event, &schema);
            assert!(found.is_empty(), "{case}: {found:#?}");
            checked.insert(event["class_uid"].as_u64().unwrap());
        }
        assert_eq!(
            checked.into_iter().collect::<Vec<_>>(),
            [HTTP_ACTIVITY, APPLICATION_LIFECYCLE, API_ACTIVITY]
        );
        // Records of every kind the unit tests build, by every method and decision.
        for decision in [
            Outcome::Allowed,
            Outcome::Denied,
            Outcome::Failed,
            Outcome::Filtered,
            Outcome::Held,
        ] {
            for method in ["CONNECT", "GET", "DELETE", "PATCH", "PROPFIND", "-"] {
                let r = AuditRecord {
                    client: Some("[::1]:4000".into()),
                    ..rec(decision, method, "example.com", 443)
                };
                let e = event(&r, "{}").unwrap();
                assert!(problems(&e, &schema).is_empty(), "{r:?}: {e}");
            }
            for rpc in ["tools/call", "prompts/get", "initialize", "notifications/x"] {
                let r = AuditRecord {
                    rpc: Some(rpc.into()),
                    rpc_id: None,
                    client: Some("10.0.0.1:1".into()),
                    ..mcp(decision, "t", None)
                };
                let e = event(&r, "{}").unwrap();
                assert!(problems(&e, &schema).is_empty(), "{r:?}: {e}");
            }
        }
    }

    #[test]
    fn the_required_field_check_catches_what_is_missing() {
        let schema = schema();
        let (_, _, good) = events().remove(2);
        assert!(problems(&good, &schema).is_empty());
        let broken = |edit: &dyn Fn(&mut Value)| {
            let mut e = good.clone();
            edit(&mut e);
            problems(&e, &schema)
        };
        let gone = |key: &'static str| {
            move |e: &mut Value| {
                e.as_object_mut().unwrap().remove(key);
            }
        };
        assert!(!broken(&gone("actor")).is_empty());
        assert!(!broken(&gone("src_endpoint")).is_empty());
        assert!(!broken(&|e| e["api"].as_object_mut().unwrap().clear()).is_empty());
        assert!(!broken(&|e| e["type_uid"] = json!(600302)).is_empty());
        assert!(!broken(&|e| e["disposition_id"] = json!(28)).is_empty());
        assert!(!broken(&|e| e["activity_id"] = json!(5)).is_empty());
        assert!(!broken(&|e| e["resources"] = json!([{"type": "tool"}])).is_empty());
        assert!(
            !broken(&|e| {
                e["metadata"].as_object_mut().unwrap().remove("product");
            })
            .is_empty()
        );
    }

    /// DESIGN §17: the record's program is `actor.process`, on API Activity beside the session and
    /// on HTTP Activity with the `host` profile.
    #[test]
    fn the_program_is_the_actors_process() {
        use crate::commands::log::test_records::by;
        let call = by(
            mcp(Outcome::Denied, "echo", Some("program_not_allowed")),
            &[("/usr/bin/curl", 7, false)],
        );
        let e = event(&call, "").unwrap();
        let process = &e["actor"]["process"];
        assert_eq!(process["pid"], 7);
        assert_eq!(process["name"], "curl");
        assert_eq!(process["file"]["path"], "/usr/bin/curl");
        assert_eq!(process["file"]["hashes"][0]["algorithm_id"], 3);
        assert_eq!(process["file"]["hashes"][0]["value"], "ab".repeat(32));
        assert_eq!(e["actor"]["session"]["uid"], "a1b2c3");
        let connect = by(
            rec(Outcome::Allowed, "CONNECT", "h.example", 443),
            &[("/usr/bin/node", 2, true), ("/usr/bin/node", 9, false)],
        );
        let e = event(&connect, "").unwrap();
        assert_eq!(e["actor"]["process"]["name"], "agent");
        assert_eq!(e["actor"]["process"]["xattributes"]["holders"], 2);
        assert_eq!(
            e["metadata"]["profiles"],
            json!(["security_control", "host"])
        );
        assert!(
            event(&rec(Outcome::Allowed, "CONNECT", "h", 443), "")
                .unwrap()
                .get("actor")
                .is_none()
        );
    }

    #[test]
    fn ids_follow_the_record() {
        let e = |r: &AuditRecord| event(r, "").unwrap();
        let connect = e(&rec(Outcome::Denied, "CONNECT", "evil.example", 443));
        assert_eq!(
            (connect["class_uid"].clone(), connect["type_uid"].clone()),
            (json!(4002), json!(400201))
        );
        assert_eq!(connect["action_id"], 2);
        assert_eq!(connect["disposition_id"], 2);
        // A CONNECT names no path, so no URL; the destination is the endpoint.
        assert_eq!(connect["http_request"], json!({"http_method": "CONNECT"}));
        assert_eq!(
            connect["dst_endpoint"],
            json!({"hostname": "evil.example", "port": 443})
        );
        let ip = e(&rec(Outcome::Allowed, "GET", "[2001:db8::1]", 80));
        assert_eq!(ip["dst_endpoint"], json!({"ip": "2001:db8::1", "port": 80}));
        let unparsed = e(&rec(Outcome::Denied, "-", "-", 0));
        assert_eq!(unparsed["activity_id"], 0);
        assert!(unparsed.get("dst_endpoint").is_none());
        let read = e(&AuditRecord {
            rpc: Some("resources/read".into()),
            tool: None,
            ..mcp(Outcome::Allowed, "x", None)
        });
        assert_eq!(
            (read["class_uid"].clone(), read["activity_id"].clone()),
            (json!(6003), json!(2))
        );
        assert!(read.get("resources").is_none());
        assert_eq!(
            e(&rec(Outcome::Denied, "GET", "h", 1))["metadata"]["uid"],
            "a1b2c3:1"
        );
        let outage = e(&AuditRecord {
            reason: Some("audit_unavailable".into()),
            ..rec(Outcome::Denied, "GET", "h", 1)
        });
        assert_eq!(outage["severity_id"], 4);
        let bad_time = AuditRecord {
            ts: "yesterday".into(),
            ..rec(Outcome::Allowed, "GET", "h", 1)
        };
        assert!(event(&bad_time, "").unwrap_err().contains("yesterday"));
    }
}
