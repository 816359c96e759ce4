#!/usr/bin/env python3
"""testdata/agents/fake_model.py, plus what Grok Build 1.0.x needs (Anthropic Messages backend).

Grok Build (`@xai-official/grok`) reaches MCP tools through two meta-tools: `search_tool`
(`{"query": ...}`, answers with the matching `SERVER__TOOL` names and schemas) and `use_tool`
(`{"tool_name": "SERVER__TOOL", "tool_input": {...}}`). So every MCP call is named `use_tool`
in the conversation, and the tool that was really called is in its input. Grok also asks for a
session title in a request that offers one tool, `session_title`, which would eat a scripted
turn. This wrapper (same arguments, same log) adds, without changing fake_model.py:

  - a request whose only tool is `session_title` is a side request (answered with `side_text`,
    no turn consumed);
  - in the log's `tool_results`: the result of a `use_tool` call is named after the tool it
    called (`e2e__echo`), so a test can tell two `use_tool` results apart.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import fake_model  # noqa: E402

TITLE_TOOLS = ["session_title"]

_is_side = fake_model.State.is_side
_anthropic_tool_results = fake_model.anthropic_tool_results


def is_side(self, tools, budget):
    if self.side_max_tokens != "off" and fake_model.tool_names(tools) == TITLE_TOOLS:
        return True
    return _is_side(self, tools, budget)


def anthropic_tool_results(messages):
    called = {}
    for m in messages or []:
        content = m.get("content") if isinstance(m, dict) else None
        for b in content if isinstance(content, list) else []:
            if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == "use_tool":
                inp = b.get("input") if isinstance(b.get("input"), dict) else {}
                if isinstance(inp.get("tool_name"), str):
                    called[b.get("id")] = inp["tool_name"]
    results = _anthropic_tool_results(messages)
    for r in results:
        if r.get("id") in called:
            r["name"] = called[r["id"]]
    return results


fake_model.State.is_side = is_side
fake_model.anthropic_tool_results = anthropic_tool_results

if __name__ == "__main__":
    sys.exit(fake_model.main())
