#!/usr/bin/env python3
"""A scripted stand-in for a model API, for end-to-end tests of coding agents.

Impersonates, on 127.0.0.1 only, enough of two model APIs for the official
clients (and for Claude Code / Codex pointed at it with a base URL):

  Anthropic Messages API
    POST /v1/messages               streaming (SSE) and non-streaming
    POST /v1/messages/count_tokens  {"input_tokens": N}
  OpenAI Responses API
    POST /v1/responses              streaming (SSE) and non-streaming
    GET  /v1/models                 a small list (shaped for both SDKs)

Anything else answers a JSON 404 (and is logged). Query strings are ignored
(Claude Code sends /v1/messages?beta=true).

The replies come from a JSON script (--script FILE): a list of turns, or an
object {"turns": [...], "side_text": "..."}. A turn is

  {"text": "..."}
  {"tool_call": {"name": "Bash", "arguments": {"command": "ls"}}}
  {"tool_calls": [{"name": ..., "arguments": {...}}, ...]}
  {"text": "...", "tool_calls": [...]}        # text first, then the calls

("tool_call" may also be a list). Each model request consumes the next turn;
once the script is exhausted every request gets the text "done".

Side requests do not consume a turn. The rule: a request is a side request
when it offers no tools (its "tools" field is absent or an empty list). An
agent's real turns always offer its tools; the extra calls Claude Code makes
around a session do not: the quota probe (max_tokens 1), model validation,
session-title, tool-use-summary and bash-prefix requests (Claude Code 2.1.x
sends them with "tools" empty or absent, and max_tokens anywhere from 1 to the
model's default, so max_tokens alone does not tell them apart). With
--side-max-tokens N a tool-less request must also have max_tokens (OpenAI:
max_output_tokens) <= N to count as a side request; --no-side turns the rule
off. Side requests get the short text "side_text" (default "ok").

Every request is appended as one JSON line to --log FILE:
  seq, time, method, path (query string dropped), status, kind
  ("messages" | "count_tokens" | "responses" | "models" | "unknown"), api,
  model, stream, max_tokens / max_output_tokens, tools (names offered; a
  built-in tool without a name is listed by its type), side (bool), turn
  (index of the script turn consumed, null for side requests and once the
  script is exhausted), reply (text and tool calls answered), error (if any),
  tool_results: every tool_result (Anthropic) / function_call_output (OpenAI)
  in the request, as {id, name, content, new, is_error (Anthropic only)}:
  name is resolved from the tool_use / function_call in the same history,
  content is flattened to a string (text blocks joined by newlines), new is
  false when an earlier request already carried that result (agents resend
  the whole history every turn).
Request headers are never logged (they carry API keys); any API key is
accepted.

The first line on stdout is "listening on 127.0.0.1:PORT" (--port 0 picks a
free port). Python 3 standard library only.
"""

import argparse
import gzip
import json
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

FINAL_TEXT = "done"
CHUNK = 24  # characters per streamed text/argument delta


def chunks(s, n=CHUNK):
    if s == "":
        return [""]
    return [s[i:i + n] for i in range(0, len(s), n)]


def approx_tokens(obj):
    """A rough, deterministic token count: ~4 characters a token, at least 1."""
    return max(1, len(json.dumps(obj, ensure_ascii=False)) // 4)


def normalize_turn(turn):
    """-> (text or None, [(name, arguments_dict_or_str)])"""
    if not isinstance(turn, dict):
        raise ValueError(f"turn must be an object: {turn!r}")
    text = turn.get("text")
    if text is not None and not isinstance(text, str):
        raise ValueError(f"turn text must be a string: {turn!r}")
    calls = []
    for key in ("tool_call", "tool_calls"):
        v = turn.get(key)
        if v is None:
            continue
        for c in v if isinstance(v, list) else [v]:
            if not isinstance(c, dict) or not isinstance(c.get("name"), str):
                raise ValueError(f"tool call needs a name: {c!r}")
            args = c.get("arguments", {})
            if not isinstance(args, (dict, str)):
                raise ValueError(f"tool call arguments must be an object or a JSON string: {c!r}")
            calls.append((c["name"], args))
    if text is None and not calls:
        raise ValueError(f"turn needs text or a tool call: {turn!r}")
    return text, calls


def args_json(args):
    return args if isinstance(args, str) else json.dumps(args, separators=(",", ":"))


def args_obj(args):
    if isinstance(args, dict):
        return args
    try:
        v = json.loads(args)
        return v if isinstance(v, dict) else {}
    except ValueError:
        return {}


def flatten_content(content):
    """Tool-result content (string or list of blocks) -> one string."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for b in content:
            if isinstance(b, str):
                parts.append(b)
            elif isinstance(b, dict):
                if isinstance(b.get("text"), str):
                    parts.append(b["text"])
                else:
                    parts.append(f"[{b.get('type', 'block')}]")
        return "\n".join(parts)
    return json.dumps(content)


def tool_names(tools):
    names = []
    for t in tools or []:
        if isinstance(t, dict):
            # Anthropic: {"name": ...}; OpenAI function/custom: {"type": "function", "name": ...};
            # built-ins such as {"type": "web_search"} have only a type.
            names.append(t.get("name") or (t.get("function") or {}).get("name") or t.get("type"))
    return names


def anthropic_tool_results(messages):
    """Every tool_result block in the conversation, with the tool's name."""
    names = {}
    results = []
    for m in messages or []:
        content = m.get("content") if isinstance(m, dict) else None
        if not isinstance(content, list):
            continue
        for b in content:
            if not isinstance(b, dict):
                continue
            if b.get("type") in ("tool_use", "server_tool_use"):
                names[b.get("id")] = b.get("name")
            elif b.get("type") == "tool_result":
                tid = b.get("tool_use_id")
                results.append({
                    "id": tid,
                    "name": names.get(tid),
                    "is_error": bool(b.get("is_error", False)),
                    "content": flatten_content(b.get("content")),
                })
    return results


def openai_tool_results(inp):
    """Every function_call_output (and custom_tool_call_output) item, with the name."""
    if not isinstance(inp, list):
        return []
    names = {}
    results = []
    for it in inp:
        if not isinstance(it, dict):
            continue
        t = it.get("type")
        if t in ("function_call", "custom_tool_call"):
            names[it.get("call_id")] = it.get("name")
        elif t in ("function_call_output", "custom_tool_call_output"):
            cid = it.get("call_id")
            results.append({
                "id": cid,
                "name": names.get(cid),
                "content": flatten_content(it.get("output")),
            })
    return results


class Script:
    def __init__(self, turns, side_text="ok"):
        self.turns = [normalize_turn(t) for t in turns]
        self.side_text = side_text
        self.next = 0
        self.lock = threading.Lock()

    @classmethod
    def load(cls, path):
        if path is None:
            return cls([])
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        if isinstance(data, dict):
            return cls(data.get("turns", []), data.get("side_text", "ok"))
        if isinstance(data, list):
            return cls(data)
        raise ValueError("script must be a list of turns or an object with \"turns\"")

    def take(self):
        """-> (turn index or None when exhausted, (text, calls))"""
        with self.lock:
            if self.next < len(self.turns):
                i = self.next
                self.next += 1
                return i, self.turns[i]
            return None, (FINAL_TEXT, [])


class State:
    def __init__(self, script, log_path, side_max_tokens, verbose):
        self.script = script
        self.log_path = log_path
        self.side_max_tokens = side_max_tokens
        self.verbose = verbose
        self.lock = threading.Lock()
        self.seq = 0
        self.seen_results = set()

    def is_side(self, tools, budget):
        if self.side_max_tokens == "off" or tools:
            return False
        if self.side_max_tokens is None:
            return True
        return isinstance(budget, int) and budget <= self.side_max_tokens

    def next_seq(self):
        with self.lock:
            self.seq += 1
            return self.seq

    def mark_new(self, results):
        with self.lock:
            for r in results:
                key = r.get("id")
                r["new"] = key not in self.seen_results
                self.seen_results.add(key)

    def log(self, rec):
        if self.log_path is None:
            return
        line = json.dumps(rec, ensure_ascii=False)
        with self.lock:
            with open(self.log_path, "a", encoding="utf-8") as f:
                f.write(line + "\n")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-model/1"
    sys_version = ""

    # --- plumbing -------------------------------------------------------

    def log_message(self, fmt, *args):  # the default logs to stderr; keep it terse
        if self.server.state.verbose:
            sys.stderr.write("fake_model: " + (fmt % args) + "\n")

    @property
    def state(self):
        return self.server.state

    def read_body(self):
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            data = b""
            while True:
                size_line = self.rfile.readline()
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data += self.rfile.read(size)
                self.rfile.readline()
        else:
            n = int(self.headers.get("Content-Length") or 0)
            data = self.rfile.read(n) if n > 0 else b""
        enc = (self.headers.get("Content-Encoding") or "").lower().strip()
        if enc == "gzip":
            data = gzip.decompress(data)
        elif enc == "deflate":
            data = zlib.decompress(data)
        elif enc not in ("", "identity"):
            raise ValueError(f"unsupported Content-Encoding {enc!r}")
        return data

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("request-id", f"req_fake_{self.seq:04d}")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def start_sse(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("request-id", f"req_fake_{self.seq:04d}")
        self.end_headers()

    def sse(self, event, data):
        payload = f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()
        self.wfile.write(b"%x\r\n%s\r\n" % (len(payload), payload))
        self.wfile.flush()

    def end_sse(self):
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    @staticmethod
    def error_json(etype, message):
        # Shaped so both SDKs read it: Anthropic wants {"type":"error","error":{type,message}},
        # OpenAI reads error.message / error.type / error.code.
        return {"type": "error", "error": {"type": etype, "message": message, "code": etype}}

    # --- dispatch -------------------------------------------------------

    def handle_any(self):
        self.seq = self.state.next_seq()
        path = self.path.split("?", 1)[0]
        rec = {"seq": self.seq, "time": round(time.time(), 3), "method": self.command, "path": path}
        try:
            body = None
            if self.command in ("POST", "PUT", "PATCH"):
                raw = self.read_body()
                try:
                    body = json.loads(raw) if raw else {}
                except ValueError:
                    rec.update(status=400, error="body is not JSON")
                    self.send_json(400, self.error_json("invalid_request_error", "body is not JSON"))
                    return
                if not isinstance(body, dict):
                    rec.update(status=400, error="body is not a JSON object")
                    self.send_json(400, self.error_json("invalid_request_error", "body must be an object"))
                    return
            route = (self.command, path.rstrip("/"))
            if route == ("POST", "/v1/messages"):
                self.anthropic_messages(body, rec)
            elif route == ("POST", "/v1/messages/count_tokens"):
                rec.update(api="anthropic", kind="count_tokens", model=body.get("model"),
                           tools=tool_names(body.get("tools")))
                n = approx_tokens({k: body.get(k) for k in ("system", "messages", "tools")})
                rec.update(status=200, input_tokens=n)
                self.send_json(200, {"input_tokens": n})
            elif route == ("POST", "/v1/responses"):
                self.openai_responses(body, rec)
            elif route == ("GET", "/v1/models"):
                rec.update(status=200, kind="models")
                self.send_json(200, models_list())
            else:
                rec.update(status=404, kind="unknown")
                self.send_json(404, self.error_json("not_found_error",
                                                    f"fake model: no route for {self.command} {path}"))
        except (BrokenPipeError, ConnectionResetError):
            rec["error"] = "client went away"
        except Exception as e:  # report, don't hang the client
            rec.update(status=500, error=f"{type(e).__name__}: {e}")
            try:
                self.send_json(500, self.error_json("api_error", f"fake model: {e}"))
            except Exception:
                pass
        finally:
            self.state.log(rec)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = handle_any

    # --- shared turn logic ----------------------------------------------

    def pick_turn(self, body, budget_key, rec):
        tools = body.get("tools")
        budget = body.get(budget_key)
        rec.update(model=body.get("model"), stream=bool(body.get("stream")),
                   tools=tool_names(tools), **{budget_key: budget})
        if self.state.is_side(tools, budget):
            rec.update(side=True, turn=None)
            return self.state.script.side_text, []
        idx, (text, calls) = self.state.script.take()
        rec.update(side=False, turn=idx)
        return text, calls

    # --- Anthropic Messages ---------------------------------------------

    def anthropic_messages(self, body, rec):
        rec.update(api="anthropic", kind="messages")
        results = anthropic_tool_results(body.get("messages"))
        self.state.mark_new(results)
        rec["tool_results"] = results
        text, calls = self.pick_turn(body, "max_tokens", rec)
        model = body.get("model") or "claude-fake"
        msg_id = f"msg_fake_{self.seq:04d}"
        blocks = []
        if text is not None:
            blocks.append({"type": "text", "text": text})
        for i, (name, args) in enumerate(calls):
            blocks.append({"type": "tool_use", "id": f"toolu_fake_{self.seq:04d}_{i}",
                           "name": name, "input": args_obj(args), "_json": args_json(args)})
        stop_reason = "tool_use" if calls else "end_turn"
        in_tok = approx_tokens({k: body.get(k) for k in ("system", "messages", "tools")})
        out_tok = max(1, sum(len(b.get("text", "")) + len(b.get("_json", "")) for b in blocks) // 4)
        rec["reply"] = {"text": text, "tool_calls": [{"id": b["id"], "name": b["name"], "input": b["input"]}
                                                     for b in blocks if b["type"] == "tool_use"],
                        "stop_reason": stop_reason}
        rec["status"] = 200

        def public(b):
            return {k: v for k, v in b.items() if not k.startswith("_")}

        if not body.get("stream"):
            self.send_json(200, {
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": [public(b) for b in blocks],
                "stop_reason": stop_reason, "stop_sequence": None,
                "usage": {"input_tokens": in_tok, "output_tokens": out_tok,
                          "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
            })
            return

        self.start_sse()
        self.sse("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": in_tok, "output_tokens": 1,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0},
        }})
        self.sse("ping", {"type": "ping"})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                self.sse("content_block_start", {"type": "content_block_start", "index": i,
                                                 "content_block": {"type": "text", "text": ""}})
                for piece in chunks(b["text"]):
                    self.sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "text_delta", "text": piece}})
            else:
                self.sse("content_block_start", {"type": "content_block_start", "index": i,
                                                 "content_block": {"type": "tool_use", "id": b["id"],
                                                                   "name": b["name"], "input": {}}})
                for piece in [""] + chunks(b["_json"]):
                    self.sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "input_json_delta",
                                                               "partial_json": piece}})
            self.sse("content_block_stop", {"type": "content_block_stop", "index": i})
        self.sse("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                                   "usage": {"output_tokens": out_tok}})
        self.sse("message_stop", {"type": "message_stop"})
        self.end_sse()

    # --- OpenAI Responses -----------------------------------------------

    def openai_responses(self, body, rec):
        rec.update(api="openai", kind="responses")
        results = openai_tool_results(body.get("input"))
        self.state.mark_new(results)
        rec["tool_results"] = results
        text, calls = self.pick_turn(body, "max_output_tokens", rec)
        model = body.get("model") or "gpt-fake"
        resp_id = f"resp_fake_{self.seq:04d}"
        created = int(time.time())
        items = []
        if text is not None:
            items.append({"id": f"msg_fake_{self.seq:04d}", "type": "message", "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": text, "annotations": []}]})
        for i, (name, args) in enumerate(calls):
            items.append({"id": f"fc_fake_{self.seq:04d}_{i}", "type": "function_call", "status": "completed",
                          "call_id": f"call_fake_{self.seq:04d}_{i}", "name": name,
                          "arguments": args_json(args)})
        in_tok = approx_tokens({k: body.get(k) for k in ("instructions", "input", "tools")})
        out_tok = max(1, sum(len(json.dumps(it)) for it in items) // 4)
        usage = {"input_tokens": in_tok,
                 "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                 "output_tokens": out_tok,
                 "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": in_tok + out_tok}
        rec["reply"] = {"text": text, "tool_calls": [{"call_id": it["call_id"], "name": it["name"],
                                                      "arguments": it["arguments"]}
                                                     for it in items if it["type"] == "function_call"]}
        rec["status"] = 200

        def response(status, output, usage_):
            return {
                "id": resp_id, "object": "response", "created_at": created, "status": status,
                "completed_at": int(time.time()) if status == "completed" else None,
                "error": None, "incomplete_details": None,
                "instructions": body.get("instructions"), "max_output_tokens": body.get("max_output_tokens"),
                "model": model, "output": output, "parallel_tool_calls": bool(body.get("parallel_tool_calls", True)),
                "previous_response_id": body.get("previous_response_id"),
                "reasoning": {"effort": None, "summary": None}, "store": bool(body.get("store", False)),
                "temperature": 1.0, "text": {"format": {"type": "text"}},
                "tool_choice": body.get("tool_choice", "auto"), "tools": [], "top_p": 1.0,
                "truncation": "disabled", "usage": usage_, "user": None, "metadata": {},
            }

        if not body.get("stream"):
            self.send_json(200, response("completed", items, usage))
            return

        self.start_sse()
        seq = [0]

        def emit(etype, **fields):
            self.sse(etype, {"type": etype, "sequence_number": seq[0], **fields})
            seq[0] += 1

        emit("response.created", response=response("in_progress", [], None))
        emit("response.in_progress", response=response("in_progress", [], None))
        for idx, it in enumerate(items):
            if it["type"] == "message":
                text_ = it["content"][0]["text"]
                emit("response.output_item.added", output_index=idx,
                     item={**it, "status": "in_progress", "content": []})
                part0 = {"type": "output_text", "text": "", "annotations": []}
                emit("response.content_part.added", item_id=it["id"], output_index=idx, content_index=0,
                     part=part0)
                for piece in chunks(text_):
                    emit("response.output_text.delta", item_id=it["id"], output_index=idx, content_index=0,
                         delta=piece, logprobs=[])
                emit("response.output_text.done", item_id=it["id"], output_index=idx, content_index=0,
                     text=text_, logprobs=[])
                emit("response.content_part.done", item_id=it["id"], output_index=idx, content_index=0,
                     part=it["content"][0])
            else:
                emit("response.output_item.added", output_index=idx,
                     item={**it, "status": "in_progress", "arguments": ""})
                for piece in chunks(it["arguments"]):
                    emit("response.function_call_arguments.delta", item_id=it["id"], output_index=idx,
                         delta=piece)
                emit("response.function_call_arguments.done", item_id=it["id"], output_index=idx,
                     arguments=it["arguments"])
            emit("response.output_item.done", output_index=idx, item=it)
        emit("response.completed", response=response("completed", items, usage))
        self.end_sse()


def models_list():
    """One list that both SDKs (and agents probing /v1/models) can read."""
    now = int(time.time())
    ids = ["claude-sonnet-4-5", "claude-haiku-4-5", "gpt-5-codex", "gpt-5"]
    data = [{"id": m, "object": "model", "created": now, "owned_by": "fake-model",
             "type": "model", "display_name": m, "created_at": "2025-01-01T00:00:00Z"} for m in ids]
    return {"object": "list", "data": data, "has_more": False, "first_id": ids[0], "last_id": ids[-1]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--script", help="JSON script of turns (default: none, every request gets \"done\")")
    ap.add_argument("--log", help="append one JSON line per request to this file")
    ap.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0 = pick a free one)")
    ap.add_argument("--side-max-tokens", type=int, default=None, metavar="N",
                    help="a tool-less request is a side request only if max_tokens / max_output_tokens <= N "
                         "(default: any tool-less request is a side request)")
    ap.add_argument("--no-side", action="store_true",
                    help="no side requests: every model request consumes a turn")
    ap.add_argument("--verbose", action="store_true", help="log request lines (never headers) to stderr")
    a = ap.parse_args(argv)
    try:
        script = Script.load(a.script)
    except (OSError, ValueError) as e:
        print(f"fake_model: bad script: {e}", file=sys.stderr)
        return 2
    server = ThreadingHTTPServer(("127.0.0.1", a.port), Handler)
    server.daemon_threads = True
    server.state = State(script, a.log, "off" if a.no_side else a.side_max_tokens, a.verbose)
    print(f"listening on 127.0.0.1:{server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
