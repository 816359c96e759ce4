#!/usr/bin/env python3
"""The bridge's client: the official Python SDK's `Client` over Streamable HTTP, against a local
(stdio) server that fenzi's bridge offers at --url (testdata/e2e/mcp_stdio_server.py behind it).

    bridge_client.py --url http://127.0.0.1:PORT/mcp [--mode legacy|auto] [--crash]

Checks, each a PASS or FAIL line: the tools list; `echo` and `add`; `progress`, whose three
progress notifications must reach the callback before the answer; `ask`, whose sampling request
(server-initiated) must reach the client and whose answer must reach the server (legacy mode:
sampling is deprecated in 2026-07-28); two sessions at once are two server processes (`whoami`'s
process ids differ). With --crash: `crash` ends the server process, and the call must fail promptly with
an error (never hang); after the crash backoff a new session works again. Exits 1 on any failure.
"""

import argparse
import sys
import time

import anyio
from mcp.client.client import Client
from mcp_types import CreateMessageResult, TextContent

STEP_TIMEOUT = 20.0
FAILS = 0


def result(ok: bool, name: str, detail: str = "") -> None:
    global FAILS
    if ok:
        print(f"PASS {name}", flush=True)
    else:
        FAILS += 1
        print(f"FAIL {name}: {detail}", flush=True)


def text(r) -> str:
    return "".join(c.text for c in r.content if isinstance(c, TextContent))


async def sampling(ctx, params):
    question = params.messages[0].content.text
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text=f"answer to {question}"), model="fake"
    )


def client(url: str, mode: str) -> Client:
    return Client(url, mode=mode, sampling_callback=sampling, read_timeout_seconds=STEP_TIMEOUT)


async def basics(url: str, mode: str) -> None:
    async with client(url, mode) as c:
        tools = sorted(t.name for t in (await c.list_tools()).tools)
        result("crash" in tools and "echo" in tools, f"{mode}: tools/list through the bridge", str(tools))
        r = await c.call_tool("echo", {"text": "hello bridge"})
        result(text(r) == "hello bridge", f"{mode}: echo", repr(r))
        r = await c.call_tool("add", {"a": 2, "b": 40})
        result(text(r) == "42", f"{mode}: add", repr(r))
        seen = []

        async def on_progress(progress, total, message):
            seen.append(progress)

        r = await c.call_tool("progress", {}, progress_callback=on_progress)
        result(text(r) == "done" and seen == [1, 2, 3], f"{mode}: progress notifications before the answer", f"{seen} {r!r}")
        if mode == "legacy":
            r = await c.call_tool("ask", {"question": "six times seven"})
            result(text(r) == "the model said: answer to six times seven", f"{mode}: a sampling request from the server, answered", repr(r))


async def two_sessions(url: str) -> None:
    async with client(url, "legacy") as a, client(url, "legacy") as b:
        # The process id the server drew at start (pids repeat across sandboxes: each is pid 2).
        pa = text(await a.call_tool("whoami", {})).split()[1]
        pb = text(await b.call_tool("whoami", {})).split()[1]
        result(pa != pb and pa.startswith("process="), "two sessions are two server processes", f"{pa} {pb}")


async def crash(url: str) -> None:
    async with client(url, "legacy") as c:
        started = time.monotonic()
        try:
            r = await c.call_tool("crash", {})
            failed = r.is_error
            detail = repr(r)
        except Exception as e:  # the SDK raises the JSON-RPC error
            failed, detail = True, str(e)
        took = time.monotonic() - started
        result(failed and took < 10, "a crashed server: the call fails promptly", f"{took:.1f}s {detail}")
        result("exited" in detail, "the error says the server exited", detail)
    # The first restart waits out a short backoff.
    await anyio.sleep(1.0)
    async with client(url, "legacy") as c:
        r = await c.call_tool("echo", {"text": "back"})
        result(text(r) == "back", "after the crash a new session starts a new server", repr(r))


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--mode", action="append")
    parser.add_argument("--crash", action="store_true")
    args = parser.parse_args()
    for mode in args.mode or ["legacy", "auto"]:
        try:
            with anyio.fail_after(60):
                await basics(args.url, mode)
        except Exception as e:
            result(False, f"{mode}: session", repr(e))
    try:
        with anyio.fail_after(60):
            await two_sessions(args.url)
    except Exception as e:
        result(False, "two sessions", repr(e))
    if args.crash:
        try:
            with anyio.fail_after(60):
                await crash(args.url)
        except Exception as e:
            result(False, "crash", repr(e))


anyio.run(main)
sys.exit(1 if FAILS else 0)
