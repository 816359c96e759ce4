#!/usr/bin/env python3
"""Self-test for fake_model.py, driven by the official `anthropic` and `openai` SDKs.

    python3 -m venv /tmp/fm-venv && /tmp/fm-venv/bin/pip install anthropic openai
    /tmp/fm-venv/bin/python testdata/agents/test_fake_model.py

Starts the fake model as a subprocess on a free loopback port, runs a scripted
conversation through both SDKs, and asserts on the SDK-parsed objects and on
the request log. Prints one PASS/FAIL line per check and exits non-zero on
any failure.
"""

import json
import os
import select
import subprocess
import sys
import tempfile
import traceback
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.path.join(HERE, "fake_model.py")
API_KEY = "sk-fake-model-selftest-SECRET-1234"

try:
    import anthropic
    import openai
except ImportError as e:
    print(f"FAIL import: {e}; install the SDKs: python3 -m venv /tmp/fm-venv && "
          "/tmp/fm-venv/bin/pip install anthropic openai", flush=True)
    sys.exit(2)

SCRIPT = [
    # 0: Anthropic streaming -> tool_use
    {"tool_call": {"name": "get_weather", "arguments": {"city": "Paris", "units": "celsius",
                                                        "note": "a value long enough to need several deltas"}}},
    # 1: Anthropic follow-up carrying the tool_result -> text
    {"text": "The weather tool was denied, so I cannot tell you the weather in Paris."},
    # 2: Anthropic non-streaming -> text then two tool calls in one turn
    {"text": "Reading both files.", "tool_calls": [
        {"name": "read_file", "arguments": {"path": "a.txt"}},
        {"name": "read_file", "arguments": {"path": "b.txt"}}]},
    # 3: OpenAI Responses streaming -> function_call
    {"tool_call": {"name": "shell", "arguments": {"command": ["ls", "-la", "/tmp"], "workdir": "/tmp"}}},
    # 4: OpenAI follow-up carrying the function_call_output -> text
    {"text": "The directory holds two files."},
    # 5: OpenAI non-streaming -> text
    {"text": "Non-streaming Responses answer."},
    # then exhausted: "done"
]

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the weather for a city.",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "units": {"type": "string"},
                                                      "note": {"type": "string"}},
                     "required": ["city"]},
}
READ_TOOL = {
    "name": "read_file",
    "description": "Read a file.",
    "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
SHELL_TOOL = {
    "type": "function",
    "name": "shell",
    "description": "Run a command.",
    "strict": True,
    "parameters": {"type": "object",
                   "properties": {"command": {"type": "array", "items": {"type": "string"}},
                                  "workdir": {"type": "string"}},
                   "required": ["command", "workdir"], "additionalProperties": False},
}

results = []


def check(name, cond, detail=""):
    results.append(bool(cond))
    line = f"{'PASS' if cond else 'FAIL'} {name}"
    if not cond and detail:
        line += f": {detail}"
    print(line, flush=True)
    return bool(cond)


def start_server(tmp):
    script_path = os.path.join(tmp, "script.json")
    log_path = os.path.join(tmp, "requests.jsonl")
    with open(script_path, "w") as f:
        json.dump(SCRIPT, f)
    proc = subprocess.Popen([sys.executable, FAKE, "--script", script_path, "--log", log_path, "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 10)
    first = proc.stdout.readline().strip() if ready else ""
    return proc, first, log_path


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    tmp = tempfile.mkdtemp(prefix="fake-model-test-")
    proc, first, log_path = start_server(tmp)
    try:
        ok = check("server prints 'listening on 127.0.0.1:PORT' first",
                   first.startswith("listening on 127.0.0.1:") and first.rsplit(":", 1)[1].isdigit(), repr(first))
        if not ok:
            return
        port = int(first.rsplit(":", 1)[1])
        base = f"http://127.0.0.1:{port}"
        ac = anthropic.Anthropic(api_key=API_KEY, base_url=base, max_retries=0, timeout=20)
        oc = openai.OpenAI(api_key=API_KEY, base_url=base + "/v1", max_retries=0, timeout=20)
        for step in (anthropic_steps, openai_steps, misc_steps):
            try:
                step(ac, oc, base)
            except Exception as e:
                traceback.print_exc()
                check(f"{step.__name__} raised no exception", False, f"{type(e).__name__}: {e}")
        log_steps(log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
        err = proc.stderr.read()
        if err.strip():
            print("--- fake_model stderr ---\n" + err, flush=True)
        passed, failed = results.count(True), results.count(False)
        print(f"{passed} passed, {failed} failed", flush=True)
        sys.exit(1 if failed or not results else 0)


state = {}


def anthropic_steps(ac, oc, base):
    # A side request (no tools, like Claude Code's quota probe) before anything else: must not consume turn 0.
    side = ac.messages.create(model="claude-haiku-4-5", max_tokens=1,
                              messages=[{"role": "user", "content": "quota"}])
    check("anthropic side request gets short text", side.content[0].type == "text" and side.content[0].text == "ok",
          repr(side.content))

    # Turn 0: streaming, tool_use with parsed input.
    user0 = {"role": "user", "content": "What is the weather in Paris?"}
    seen = []
    with ac.messages.stream(model="claude-sonnet-4-5", max_tokens=4096, messages=[user0],
                            tools=[WEATHER_TOOL, READ_TOOL]) as stream:
        for ev in stream:
            seen.append(ev.type)
        msg = stream.get_final_message()
    check("anthropic stream: message_start first, message_stop last",
          seen[:1] == ["message_start"] and seen[-1:] == ["message_stop"], seen)
    check("anthropic stream: has input_json events", "input_json" in seen, seen)
    check("anthropic stream: stop_reason tool_use", msg.stop_reason == "tool_use", msg.stop_reason)
    check("anthropic stream: one tool_use block", len(msg.content) == 1 and msg.content[0].type == "tool_use",
          msg.content)
    tu = msg.content[0]
    check("anthropic stream: tool name", tu.name == "get_weather", tu.name)
    check("anthropic stream: tool input parsed to dict",
          tu.input == SCRIPT[0]["tool_call"]["arguments"], tu.input)
    check("anthropic stream: tool_use id", tu.id.startswith("toolu_"), tu.id)
    check("anthropic stream: usage", msg.usage.input_tokens > 0 and msg.usage.output_tokens > 0, msg.usage)
    check("anthropic stream: model echoed", msg.model == "claude-sonnet-4-5", msg.model)
    state["tool_use_id"] = tu.id

    # Turn 1: follow-up with a tool_result (an error, as a denying proxy would produce), raw SSE events.
    msgs = [user0, msg.to_param(), {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": tu.id, "is_error": True,
         "content": [{"type": "text", "text": "fenzi: request to api.weather.example denied by policy"}]}]}]
    raw = ac.messages.create(model="claude-sonnet-4-5", max_tokens=4096, messages=msgs,
                             tools=[WEATHER_TOOL, READ_TOOL], stream=True)
    events = list(raw)
    types = [e.type for e in events]
    expected_shape = ["message_start", "content_block_start"]
    check("anthropic raw stream: event order",
          types[:2] == expected_shape and types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
          and set(types[2:-3]) == {"content_block_delta"}, types)
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta" and e.delta.type == "text_delta")
    check("anthropic raw stream: text deltas join to turn 1", text == SCRIPT[1]["text"], text)
    md = [e for e in events if e.type == "message_delta"][0]
    check("anthropic raw stream: message_delta stop_reason end_turn + usage",
          md.delta.stop_reason == "end_turn" and md.usage.output_tokens > 0, md)
    check("anthropic raw stream: several text deltas", types.count("content_block_delta") > 1, types)

    # Turn 2: non-streaming, text + two tool_use blocks.
    m2 = ac.messages.create(model="claude-sonnet-4-5", max_tokens=4096, tools=[READ_TOOL],
                            messages=[{"role": "user", "content": "Read a.txt and b.txt"}])
    check("anthropic non-stream: content types",
          [b.type for b in m2.content] == ["text", "tool_use", "tool_use"], m2.content)
    check("anthropic non-stream: text", m2.content[0].text == "Reading both files.", m2.content[0])
    check("anthropic non-stream: inputs",
          [b.input for b in m2.content[1:]] == [{"path": "a.txt"}, {"path": "b.txt"}], m2.content)
    check("anthropic non-stream: distinct tool ids", m2.content[1].id != m2.content[2].id, m2.content)
    check("anthropic non-stream: stop_reason tool_use", m2.stop_reason == "tool_use", m2.stop_reason)

    # count_tokens
    ct = ac.messages.count_tokens(model="claude-sonnet-4-5", messages=[user0], tools=[WEATHER_TOOL])
    check("anthropic count_tokens", isinstance(ct.input_tokens, int) and ct.input_tokens > 0, ct)


def openai_steps(ac, oc, base):
    # Turn 3: Responses streaming -> function_call
    inp = [{"role": "user", "content": "List /tmp"}]
    seen = []
    with oc.responses.stream(model="gpt-5-codex", input=inp, tools=[SHELL_TOOL]) as stream:
        for ev in stream:
            seen.append(ev.type)
        resp = stream.get_final_response()
    check("openai stream: created first, completed last",
          seen[:1] == ["response.created"] and seen[-1:] == ["response.completed"], seen)
    for t in ("response.output_item.added", "response.function_call_arguments.delta", "response.output_item.done"):
        check(f"openai stream: has {t}", t in seen, seen)
    fcs = [o for o in resp.output if o.type == "function_call"]
    check("openai stream: one function_call", len(fcs) == 1 and len(resp.output) == 1, resp.output)
    fc = fcs[0]
    check("openai stream: function name", fc.name == "shell", fc.name)
    check("openai stream: call_id", fc.call_id.startswith("call_"), fc.call_id)
    check("openai stream: arguments JSON", json.loads(fc.arguments) == SCRIPT[3]["tool_call"]["arguments"],
          fc.arguments)
    check("openai stream: parsed_arguments (strict tool)",
          fc.parsed_arguments == SCRIPT[3]["tool_call"]["arguments"], fc.parsed_arguments)
    check("openai stream: usage", resp.usage is not None and resp.usage.total_tokens > 0, resp.usage)
    check("openai stream: status completed", resp.status == "completed", resp.status)

    # Turn 4: follow-up with function_call_output, streamed, collecting text deltas.
    inp2 = inp + [{"type": "function_call", "call_id": fc.call_id, "name": fc.name, "arguments": fc.arguments},
                  {"type": "function_call_output", "call_id": fc.call_id, "output": "a.txt\nb.txt"}]
    deltas = []
    with oc.responses.stream(model="gpt-5-codex", input=inp2, tools=[SHELL_TOOL]) as stream:
        for ev in stream:
            if ev.type == "response.output_text.delta":
                deltas.append(ev.delta)
        resp2 = stream.get_final_response()
    check("openai follow-up: output_text", resp2.output_text == SCRIPT[4]["text"], resp2.output_text)
    check("openai follow-up: deltas join to text", "".join(deltas) == SCRIPT[4]["text"], deltas)
    check("openai follow-up: message item",
          [o.type for o in resp2.output] == ["message"] and resp2.output[0].role == "assistant", resp2.output)

    # Same call through the raw create(stream=True) iterator, checking event order.
    # (Turn 5 is used by the non-streaming call below, so this one is a side request: no tools.)
    raw = oc.responses.create(model="gpt-5-codex", input="title please", stream=True)
    types = [e.type for e in raw]
    check("openai raw stream (side request): message event order", types == [
        "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
        "response.output_text.delta", "response.output_text.done", "response.content_part.done",
        "response.output_item.done", "response.completed"], types)

    # Turn 5: non-streaming
    r3 = oc.responses.create(model="gpt-5-codex", input="hello", tools=[SHELL_TOOL])
    check("openai non-stream: output_text", r3.output_text == SCRIPT[5]["text"], r3.output_text)
    check("openai non-stream: id/object", r3.id.startswith("resp_") and r3.object == "response", r3.id)

    # Script exhausted -> "done"
    r4 = oc.responses.create(model="gpt-5-codex", input="more?", tools=[SHELL_TOOL])
    check("openai exhausted script answers 'done'", r4.output_text == "done", r4.output_text)
    m = ac.messages.create(model="claude-sonnet-4-5", max_tokens=100, tools=[READ_TOOL],
                           messages=[{"role": "user", "content": "more?"}])
    check("anthropic exhausted script answers 'done'",
          m.content[0].text == "done" and m.stop_reason == "end_turn", m.content)

    models = oc.models.list()
    ids = [x.id for x in models]
    check("openai models.list", len(ids) >= 2 and "gpt-5-codex" in ids, ids)
    amodels = [x.id for x in ac.models.list()]
    check("anthropic models.list", "claude-sonnet-4-5" in amodels, amodels)


def misc_steps(ac, oc, base):
    req = urllib.request.Request(base + "/v1/nonexistent?x=1", data=b"{}", method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        urllib.request.urlopen(req, timeout=10)
        check("unknown path answers 404", False, "got 2xx")
    except urllib.error.HTTPError as e:
        body = json.loads(e.read())
        check("unknown path answers JSON 404", e.code == 404 and body.get("type") == "error", body)
    try:
        ac.post("/v1/other", cast_to=object, body={})
        check("anthropic SDK sees NotFoundError", False, "no error")
    except anthropic.NotFoundError:
        check("anthropic SDK sees NotFoundError", True)


def log_steps(log_path):
    with open(log_path) as f:
        raw = f.read()
    check("log never holds the API key", API_KEY not in raw and "SECRET" not in raw)
    log = read_log(log_path)
    msgs = [r for r in log if r.get("kind") == "messages"]
    resps = [r for r in log if r.get("kind") == "responses"]
    check("log: 5 Messages requests", len(msgs) == 5, [r.get("turn") for r in msgs])
    check("log: 5 Responses requests", len(resps) == 5, [r.get("turn") for r in resps])
    check("log: turns consumed in order, side requests consume none",
          [r.get("turn") for r in log if r.get("kind") in ("messages", "responses")]
          == [None, 0, 1, 2, 3, 4, None, 5, None, None], [(r.get("path"), r.get("turn")) for r in log])
    check("log: side flags", [r["side"] for r in msgs][:1] == [True] and all(not r["side"] for r in msgs[1:]),
          [r.get("side") for r in msgs])
    first = msgs[1]
    check("log: path/model/tools of the first real request",
          first["path"] == "/v1/messages" and first["model"] == "claude-sonnet-4-5"
          and first["tools"] == ["get_weather", "read_file"] and first["stream"] is True, first)
    tr = msgs[2]["tool_results"]
    check("log: tool_result with name, is_error and content",
          len(tr) == 1 and tr[0]["name"] == "get_weather" and tr[0]["is_error"] is True
          and tr[0]["id"] == state.get("tool_use_id")
          and tr[0]["content"] == "fenzi: request to api.weather.example denied by policy" and tr[0]["new"], tr)
    check("log: reply recorded", msgs[1]["reply"]["tool_calls"][0]["name"] == "get_weather", msgs[1]["reply"])
    fo = resps[1]["tool_results"]
    check("log: function_call_output with name and content",
          len(fo) == 1 and fo[0]["name"] == "shell" and fo[0]["content"] == "a.txt\nb.txt", fo)
    check("log: responses tools", resps[0]["tools"] == ["shell"], resps[0])
    ct = [r for r in log if r.get("kind") == "count_tokens"]
    check("log: count_tokens logged", len(ct) == 1 and ct[0]["path"] == "/v1/messages/count_tokens", ct)
    unk = [r for r in log if r.get("kind") == "unknown"]
    check("log: unknown paths logged as 404",
          [(r["path"], r["status"]) for r in unk] == [("/v1/nonexistent", 404), ("/v1/other", 404)], unk)
    check("log: no request headers", not any("headers" in r for r in log))


if __name__ == "__main__":
    main()
