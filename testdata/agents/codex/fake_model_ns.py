#!/usr/bin/env python3
"""testdata/agents/fake_model.py, plus the tool namespaces of Codex 0.17x.

Codex 0.17x offers each MCP server's tools as one Responses API tool of type `namespace`
(`{"type": "namespace", "name": "mcp__SERVER", "tools": [{"type": "function", "name": "TOOL"}, ...]}`)
and expects a call of one of them as a `function_call` with `"namespace": "mcp__SERVER"` and
`"name": "TOOL"`. fake_model.py logs only the namespace's name and cannot say `namespace` in a call,
so this wrapper (same arguments, same log) adds, without changing fake_model.py:

  - in the log's `tools`: each namespace member as `NAMESPACE__TOOL` (`mcp__e2e__whoami`), after the
    namespace's own name;
  - in the script: a call named `NAMESPACE__TOOL`, when the request offered the namespace
    `NAMESPACE`, goes out as `{"namespace": NAMESPACE, "name": TOOL}`, whether or not TOOL was
    among the namespace's members (so a script can call a tool the agent was not offered);
  - in the log's `tool_results`: the name of a namespaced call resolved as `NAMESPACE__TOOL`.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fake_model  # noqa: E402

_tool_names = fake_model.tool_names
_openai_tool_results = fake_model.openai_tool_results


def tool_names(tools):
    names = []
    for t in tools or []:
        names += _tool_names([t])
        if isinstance(t, dict) and t.get("type") == "namespace":
            names += [f"{t.get('name')}__{n}" for n in _tool_names(t.get("tools"))]
    return names


def openai_tool_results(inp):
    if isinstance(inp, list):
        inp = [dict(it, name=f"{it['namespace']}__{it.get('name')}")
               if isinstance(it, dict) and it.get("type") == "function_call" and it.get("namespace")
               else it for it in inp]
    return _openai_tool_results(inp)


def namespaces(tools):
    return [t["name"] for t in tools or [] if isinstance(t, dict) and t.get("type") == "namespace"
            and isinstance(t.get("name"), str)]


def split(obj, spaces):
    """A copy of obj with every function_call named `NS__TOOL` (NS offered) as namespace NS, name TOOL."""
    if isinstance(obj, list):
        return [split(v, spaces) for v in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: split(v, spaces) for k, v in obj.items()}
    if out.get("type") == "function_call" and isinstance(out.get("name"), str) and "namespace" not in out:
        for ns in spaces:
            if out["name"].startswith(ns + "__") and len(out["name"]) > len(ns) + 2:
                out["namespace"], out["name"] = ns, out["name"][len(ns) + 2:]
                break
    return out


class Handler(fake_model.Handler):
    def pick_turn(self, body, budget_key, rec):
        self._spaces = sorted(namespaces(body.get("tools")), key=len, reverse=True)
        return super().pick_turn(body, budget_key, rec)

    def sse(self, event, data):
        super().sse(event, split(data, getattr(self, "_spaces", [])))

    def send_json(self, status, obj):
        super().send_json(status, split(obj, getattr(self, "_spaces", [])))


fake_model.tool_names = tool_names
fake_model.openai_tool_results = openai_tool_results
fake_model.Handler = Handler

if __name__ == "__main__":
    sys.exit(fake_model.main())
