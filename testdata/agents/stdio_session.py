#!/usr/bin/env python3
"""The turn script and the checks of a stdio session (scripts/e2e/agents_lib.sh: stdio_turns,
stdio_checks): three local servers behind fenzi's bridge (everything, filesystem, time) under a
real agent (claude, codex, opencode or grok, which differ in how they name MCP tools).

  stdio_session.py turns AGENT SHELL_TOOL SHELL_ARG OUT FILE COMMAND ECHO_TEXT [EXTRA]
      writes the fake model's script to OUT: the agent's shell tool with {SHELL_ARG: COMMAND,
      ...EXTRA (a JSON object)}, everything's echo (ECHO_TEXT) and get-env (denied),
      filesystem's read_text_file of FILE, time's get_current_time, then the text `finished`.
      Grok asks search_tool for the tools after the shell, and calls each through use_tool.

The checks print one `PASS what` or `FAIL what: got ...` line each (relayed by the shell script)
and exit 0; they exit 2 when a log cannot be read.

  stdio_session.py model AGENT MODEL_LOG SHELL_TOOL ECHO_TEXT FILE_TEXT
      what reached the fake model (testdata/agents/fake_model.py's log): each allowed tool's
      answer, get-env's refusal, the shell's view of the agent's environment, what was offered.
  stdio_session.py audit AUDIT_LOG
      fenzi's records: one allowed record per allowed call, as the agent, with transport stdio and
      the server's name; get-env denied as policy_denied, transport stdio; filesystem's tools/list
      filtered; nothing let through but to 127.0.0.1 (the fake model) and the bridges.
"""

import json
import re
import sys

STDIO_DOMAIN = ".stdio.fenzi.internal"
SERVERS = ("everything", "filesystem", "time")
ALLOWED = [("everything", "echo"), ("filesystem", "read_text_file"), ("time", "get_current_time")]


def check(ok, what, got=None):
    print(("PASS " if ok else "FAIL ") + what + ("" if ok or got is None else ": got " + repr(got)[:600]))


def tool_name(agent, server, tool):
    """The agent's name for an MCP tool, as its model calls it and the fake model logs its result."""
    if agent == "grok":  # use_tool's tool_name; fake_model_grok.py names the result after it
        return f"{server}__{tool}"
    if agent == "opencode":
        return f"{server}_{tool}"
    if agent == "codex":  # the namespace mcp__SERVER (fake_model_ns.py); Codex offers get-env as get_env
        return f"mcp__{server}__{tool.replace('-', '_')}"
    return f"mcp__{server}__{tool}"  # Claude Code


def turns(agent, shell, arg, out, path, command, echo, extra="{}"):
    def call(server, tool, args):
        if agent == "grok":
            return {"name": "use_tool", "arguments": {"tool_name": tool_name(agent, server, tool), "tool_input": args}}
        return {"name": tool_name(agent, server, tool), "arguments": args}

    # The shell first: its command waits a little, so that an agent that does not wait for its MCP
    # servers before the first turn (Codex 0.171) has them all connected before the calls, however
    # slowly the Python server starts on a busy machine. No text beside the calls: Grok's result is
    # all of the turns' texts.
    script = [{"tool_call": {"name": shell, "arguments": {arg: command, **json.loads(extra)}}}]
    if agent == "grok":
        script.append({"tool_call": {"name": "search_tool", "arguments": {
            "query": "echo get-env read_text_file get_current_time", "limit": 50}}})
    script += [
        {"tool_call": call("everything", "echo", {"message": echo})},
        {"tool_call": call("everything", "get-env", {})},
        {"tool_call": call("filesystem", "read_text_file", {"path": path})},
        {"tool_call": call("time", "get_current_time", {"timezone": "Etc/UTC"})},
        {"text": "finished"},
    ]
    with open(out, "w") as f:
        json.dump(script, f)


def model(agent, log, shell, echo, text):
    reqs = [json.loads(line) for line in open(log) if line.strip()]
    results = {}
    for r in reqs:
        for t in r.get("tool_results") or []:
            if t.get("new"):
                results.setdefault(t.get("name"), t.get("content", ""))
    offered = {t for r in reqs for t in (r.get("tools") or [])}
    if agent == "grok":  # Grok offers MCP tools as search_tool's answer
        names = "|".join(SERVERS)
        offered |= set(re.findall(rf'"tool_name":\s*"((?:{names})__[A-Za-z0-9_-]+)"', results.get("search_tool", "")))

    def name(server, tool):
        return tool_name(agent, server, tool)

    r = results.get(name("everything", "echo"))
    check(r is not None and f"Echo: {echo}" in r,
          f"everything's echo answered the model through the bridge (Echo: {echo})", r)
    r = results.get(name("everything", "get-env"))
    check(r is not None and ("policy_denied" in r or "is denied" in r) and "PATH" not in r,
          "everything's get-env (denied) came back to the model as fenzi's policy_denied, not as the server's environment", r)
    r = results.get(name("filesystem", "read_text_file"))
    check(r is not None and text in r,
          f"filesystem's read_text_file answered the model with the known file's content ({text})", r)
    r = results.get(name("time", "get_current_time"))
    check(r is not None and "Etc/UTC" in r and "day_of_week" in r
          and re.search(r'"?datetime"?\W+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d', r) is not None,
          "time's get_current_time answered the model with its structure (timezone Etc/UTC, datetime, day_of_week)", r)
    r = results.get(shell)
    check(r is not None and "agent-env: placeholders=0 TIME_API_TOKEN=unset fenzi_secrets=0" in r,
          "the agent's shell saw no placeholder, no TIME_API_TOKEN and no FENZI_SECRET_ variable in the agent's environment", r)
    check(name("filesystem", "read_text_file") in offered and name("everything", "get-env") in offered,
          "the model was offered read_text_file (allowed) and get-env (denied, but everything has list: all)", sorted(offered))
    check(name("filesystem", "write_file") not in offered and name("filesystem", "edit_file") not in offered,
          "write_file (denied) and edit_file (not allowed) were not offered: fenzi filtered filesystem's tools/list",
          sorted(offered))
    check(not any(re.search(r"fenzi_ph_[A-Za-z0-9_-]{20,}", json.dumps(r)) for r in reqs),
          "no placeholder ever reached the model")


def audit(path):
    recs = [json.loads(line) for line in open(path) if line.strip()]
    stdio = [r for r in recs if str(r.get("host", "")).endswith(STDIO_DOMAIN)]
    for server, tool in ALLOWED:
        hits = [r for r in recs if r.get("rpc") == "tools/call" and r.get("tool") == tool]
        ok = [r for r in hits if r["decision"] == "allowed" and r.get("transport") == "stdio"
              and r.get("server") == server and r.get("host") == server + STDIO_DOMAIN
              and r.get("port") == 80 and r.get("path") == "/mcp" and (r.get("program") or {}).get("agent")]
        check(len(hits) == 1 and len(ok) == 1,
              f"audit: one allowed tools/call {tool}, by the agent, server {server}, transport stdio, at {server}{STDIO_DOMAIN}",
              hits)
    denied = [r for r in recs if r.get("rpc") == "tools/call" and r.get("tool") == "get-env"]
    check(denied != [] and all(r["decision"] == "denied" and r.get("reason") == "policy_denied"
                               and r.get("transport") == "stdio" and r.get("server") == "everything"
                               and r.get("rule") == 'mcp.everything.tools.deny "get-env"' for r in denied),
          f"audit: get-env denied ({len(denied)} record(s)), policy_denied by mcp.everything.tools.deny, transport stdio, server everything",
          denied)
    listed = [r for r in stdio if r.get("server") == "filesystem" and r.get("rpc") == "tools/list"]
    check(any(r["decision"] == "filtered" for r in listed),
          "audit: filesystem's tools/list filtered (write_file and the rest hidden), transport stdio", listed)
    wrong = [r for r in stdio if r.get("transport") != "stdio" or r.get("server") != r["host"][: -len(STDIO_DOMAIN)]]
    check(stdio != [] and not wrong,
          f"audit: all {len(stdio)} records at a bridge address carry transport stdio and that server's name", wrong[:3])
    check(not any(r.get("rpc") == "tools/call" and r.get("tool") in ("write_file", "edit_file") for r in recs),
          "audit: no tools/call write_file or edit_file ever reached fenzi (the agent was never offered them)")
    out = [r for r in recs if r["decision"] not in ("denied", "reload_refused")
           and r.get("host") != "127.0.0.1" and not str(r.get("host", "")).endswith(STDIO_DOMAIN)]
    check(not out, "audit: everything fenzi let through went to 127.0.0.1 (the fake model) or a bridge",
          [(r.get("method"), r.get("host"), r.get("port"), r.get("local_server")) for r in out[:5]])


def main(argv):
    try:
        if argv[1:2] == ["turns"] and len(argv) in (9, 10):
            turns(*argv[2:])
        elif argv[1:2] == ["model"] and len(argv) == 7:
            model(*argv[2:])
        elif argv[1:2] == ["audit"] and len(argv) == 3:
            audit(argv[2])
        else:
            print(__doc__, file=sys.stderr)
            return 2
    except (OSError, ValueError, KeyError) as e:
        print(f"stdio_session.py: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
