"""Checks the OpenTelemetry Collector recipe (docs/otelcol/fenzi-filelog.yaml) without a Collector.

It parses the YAML and asserts the structure the recipe promises: a file_storage extension the
service enables, a filelog receiver whose `storage` is that extension, that starts at the beginning
and includes fenzi's log paths (and not the .head or .otlp-cursor files beside them), and a logs
pipeline whose every receiver, processor and exporter is defined. Then it runs the receiver's
operators, as the filelog receiver's stanza operators define them (json_parser with its timestamp
and severity blocks, move, remove) and the transform processor's one statement, over every line
of a real fenzi audit log, and checks the result is what `--otlp` sends: the body is the line
as stored, attributes fenzi.session (string) and fenzi.seq (int), the time from `ts`, the
severity from `decision`; and the severity mapping covers every decision the Rust code can write
(policy/src/audit.rs's Outcome labels). Last, the YAML in docs/export.md is this file, verbatim.

Usage: otelcol_recipe.py CONFIG LOG AUDIT_RS EXPORT_MD    (prints PASS/FAIL lines; exit 1 on a failure)
"""

import datetime
import fnmatch
import json
import re
import sys

import yaml

FAILS = 0


def check(name, ok, detail=""):
    global FAILS
    if ok:
        print(f"PASS {name}")
    else:
        FAILS += 1
        print(f"FAIL {name}{': ' + detail if detail else ''}")


# stanza's field syntax: body | attributes | resource, then `.name` or `["name"]` steps.
FIELD = re.compile(r'\.([A-Za-z_][A-Za-z0-9_]*)|\["([^"]+)"\]')


def parse_field(text):
    for root in ("body", "attributes", "resource"):
        if text == root or text.startswith(root + ".") or text.startswith(root + "["):
            rest = text[len(root):]
            steps, pos = [], 0
            while pos < len(rest):
                m = FIELD.match(rest, pos)
                if not m:
                    raise ValueError(f"bad field {text!r}")
                steps.append(m.group(1) or m.group(2))
                pos = m.end()
            return root, steps
    raise ValueError(f"bad field {text!r}")


def get(entry, field):
    root, steps = parse_field(field)
    value = entry[root]
    for step in steps:
        value = value[step]
    return value


def put(entry, field, value):
    root, steps = parse_field(field)
    if not steps:
        entry[root] = value
        return
    target = entry[root]
    for step in steps[:-1]:
        target = target.setdefault(step, {})
    target[steps[-1]] = value


def delete(entry, field):
    root, steps = parse_field(field)
    target = entry[root]
    for step in steps[:-1]:
        target = target[step]
    del target[steps[-1]]


GO_LAYOUT = [("2006", "%Y"), ("01", "%m"), ("02", "%d"), ("15", "%H"), ("04", "%M"),
             ("05", "%S"), (".000", ".%f")]


def go_to_strptime(layout):
    out, i = "", 0
    while i < len(layout):
        for go, py in GO_LAYOUT:
            if layout.startswith(go, i):
                out += py
                i += len(go)
                break
        else:
            out += layout[i]
            i += 1
    return out


def severity_of(mapping, value):
    for level, matches in mapping.items():
        matches = matches if isinstance(matches, list) else [matches]
        if str(value).lower() in [str(m).lower() for m in matches]:
            return level
    return "default"


def run_operators(operators, line):
    """One log entry through the operators, as the filelog receiver would run them."""
    entry = {"body": line, "attributes": {}, "resource": {}, "timestamp": None, "severity": None}
    for op in operators:
        kind = op["type"]
        if kind == "json_parser":
            parsed = json.loads(get(entry, op.get("parse_from", "body")))
            put(entry, op.get("parse_to", "attributes"), parsed)
            ts = op.get("timestamp")
            if ts:
                assert ts["layout_type"] == "gotime", ts
                text = get(entry, ts["parse_from"])
                when = datetime.datetime.strptime(text, go_to_strptime(ts["layout"]))
                entry["timestamp"] = when.replace(tzinfo=datetime.timezone.utc)
            sev = op.get("severity")
            if sev:
                entry["severity"] = severity_of(sev["mapping"], get(entry, sev["parse_from"]))
        elif kind == "move":
            value = get(entry, op["from"])
            delete(entry, op["from"])
            put(entry, op["to"], value)
        elif kind == "remove":
            delete(entry, op["field"])
        else:
            raise ValueError(f"operator {kind!r} is not emulated here")
    return entry


INT_STATEMENT = re.compile(r'^set\(attributes\["([^"]+)"\], Int\(attributes\["([^"]+)"\]\)\)$')


def run_transform(processor, entry):
    for group in processor["log_statements"]:
        assert group["context"] == "log", group
        for statement in group["statements"]:
            m = INT_STATEMENT.match(statement)
            if not m or m.group(1) != m.group(2):
                raise ValueError(f"statement not emulated here: {statement}")
            entry["attributes"][m.group(1)] = int(entry["attributes"][m.group(1)])


# What `--otlp` sends for each decision (proxy/src/export/otlp.rs: severity).
EXPORT_SEVERITY = {"denied": "warn", "reload_refused": "warn", "failed": "error"}


def main(config_path, log_path, audit_rs, export_md):
    text = open(config_path).read()
    config = yaml.safe_load(text)
    ext, receivers = config.get("extensions", {}), config.get("receivers", {})
    service = config.get("service", {})
    check("a file_storage extension with a directory",
          "directory" in (ext.get("file_storage") or {}), str(ext))
    check("the service enables file_storage", "file_storage" in service.get("extensions", []))
    fl = receivers.get("filelog/fenzi") or {}
    check("filelog/fenzi keeps its offsets in file_storage", fl.get("storage") == "file_storage")
    check("filelog/fenzi reads a new log from its first line", fl.get("start_at") == "beginning")
    include = fl.get("include", [])
    matches = lambda path: any(fnmatch.fnmatch(path, g) for g in include)
    check("include: the session logs and --audit logs",
          matches("/home/ada/.local/state/fenzi/audit/1fa793dde87c4874.jsonl")
          and matches("/var/log/fenzi/audit.jsonl"), str(include))
    check("include: not the head or cursor files beside them",
          not matches("/var/log/fenzi/audit.jsonl.head")
          and not matches("/var/log/fenzi/audit.jsonl.otlp-cursor"))

    pipelines = service.get("pipelines", {})
    logs = [p for name, p in pipelines.items() if name.split("/")[0] == "logs"]
    check("one logs pipeline", len(logs) == 1, str(pipelines))
    pipeline = logs[0] if logs else {}
    check("its receiver is filelog/fenzi", pipeline.get("receivers") == ["filelog/fenzi"])
    for kind in ("receivers", "processors", "exporters"):
        missing = [n for n in pipeline.get(kind, []) if n not in (config.get(kind) or {})]
        check(f"every pipeline {kind[:-1]} is defined", not missing, str(missing))
    resource = config["processors"].get("resource/fenzi", {}).get("attributes", [])
    check("resource service.name = fenzi",
          {"key": "service.name", "value": "fenzi", "action": "upsert"} in resource)

    operators = fl.get("operators", [])
    decisions = set(re.findall(r'Outcome::\w+ => "(\w+)"', open(audit_rs).read()))
    mapping = next(op["severity"]["mapping"] for op in operators if op["type"] == "json_parser")
    mapped = {str(v) for vs in mapping.values() for v in (vs if isinstance(vs, list) else [vs])}
    check("the severity mapping covers every decision fenzi writes",
          decisions and decisions <= mapped, f"{sorted(decisions - mapped)} unmapped")
    check("its severities agree with --otlp's",
          all(severity_of(mapping, d) == EXPORT_SEVERITY.get(d, "info") for d in decisions))

    lines = [l for l in open(log_path).read().split("\n") if l]
    check("the real log has records", len(lines) >= 2, f"{len(lines)} lines")
    problems = []
    seen = set()
    for line in lines:
        record = json.loads(line)
        seen.add(record["decision"])
        try:
            entry = run_operators(operators, line)
            run_transform(config["processors"]["transform/fenzi"], entry)
        except (KeyError, ValueError, AssertionError) as e:
            problems.append(f"seq {record.get('seq')}: {e!r}")
            continue
        ts = datetime.datetime.strptime(record["ts"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=datetime.timezone.utc)
        want = {"fenzi.session": record["session"], "fenzi.seq": record["seq"]}
        if entry["body"] != line:
            problems.append(f"seq {record['seq']}: the body is not the line")
        if entry["attributes"] != want or type(entry["attributes"]["fenzi.seq"]) is not int:
            problems.append(f"seq {record['seq']}: attributes {entry['attributes']}")
        if entry["timestamp"] != ts:
            problems.append(f"seq {record['seq']}: time {entry['timestamp']} for {record['ts']}")
        if entry["severity"] != EXPORT_SEVERITY.get(record["decision"], "info"):
            problems.append(f"seq {record['seq']}: severity {entry['severity']}")
    check(f"the operators turn every line ({len(lines)}, decisions {sorted(seen)}) into what --otlp sends",
          not problems, "; ".join(problems[:5]))

    doc = open(export_md).read()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    check("docs/export.md shows this config verbatim", text in blocks)
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
