#!/usr/bin/env python3
"""The end-to-end client for what fenzi's policy reads beyond tool names: argument rules, resources
and prompts, with the official Python SDK's `Client` over Streamable HTTP, through fenzi.

    mcp_kinds_client.py --url https://127.0.0.1:PORT/mcp [--mode legacy|2026-07-28]...

The policy it expects (scripts/e2e/run.sh writes it): tools echo (argument `text` must start with
"ok:") and add (`a` at most 100; `b` equal to 13 denied); resources `notes://public/*`; prompts
`summarize`; limits: add at 2/h. For each mode it checks that the lists show only what the policy allows, that the calls
within the rules come back with the server's answer, and that every call outside them fails with
fenzi's JSON-RPC error (data.reason policy_denied) naming the call. Prints PASS/FAIL per check;
exits 1 on any failure. Proxy and trust come from the environment (HTTPS_PROXY, SSL_CERT_FILE).
"""

import argparse
import sys

import anyio
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent

STEP_TIMEOUT = 20.0


class Failure(Exception):
    pass


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


def text_of(result) -> str:
    parts = [c.text for c in result.content if isinstance(c, TextContent)]
    return "".join(parts)


async def denied(what: str, call, want: str = "policy_denied") -> str:
    """Runs `call` and checks fenzi refused it with `want`; returns the step's description."""
    try:
        result = await call()
    except MCPError as e:
        reason = e.data.get("reason") if isinstance(e.data, dict) else None
        check(reason == want, f"{what}: data.reason = {reason!r}, expected {want!r} ({e.message!r})")
        if want == "policy_denied":
            check("not permitted by policy" in e.message, f"{what}: not fenzi's error: {e.message!r}")
        return f"denied: {what} -> {e.code} {reason}"
    raise Failure(f"{what} was NOT denied: {result!r}")


async def run_mode(url: str, mode: str) -> list[str]:
    done: list[str] = []
    with anyio.fail_after(STEP_TIMEOUT * 4):
        async with Client(url, mode=mode, read_timeout_seconds=STEP_TIMEOUT) as client:
            done.append(f"connected ({client.protocol_version})")

            tools = {t.name for t in (await client.list_tools()).tools}
            check(tools == {"echo", "add"}, f"tools/list shows {sorted(tools)}")
            got = text_of(await client.call_tool("echo", {"text": "ok: within the rule"}))
            check(got == "ok: within the rule", f"echo returned {got!r}")
            done.append("echo with /text starting ok: ran")
            done.append(await denied("echo without the ok: prefix",
                                     lambda: client.call_tool("echo", {"text": "rm -rf /"})))
            done.append(await denied("echo with no arguments", lambda: client.call_tool("echo", {})))
            got = text_of(await client.call_tool("add", {"a": 100, "b": 1}))
            check(got == "101", f"add returned {got!r}")
            done.append("add with a = 100 (the max, inclusive) ran")
            done.append(await denied("add with a = 100.5",
                                     lambda: client.call_tool("add", {"a": 100.5, "b": 1})))
            done.append(await denied("add with b = 13 (deny_args)",
                                     lambda: client.call_tool("add", {"a": 1, "b": 13})))

            resources = {str(r.uri) for r in (await client.list_resources()).resources}
            check(resources == {"notes://public/readme"}, f"resources/list shows {sorted(resources)}")
            done.append("resources/list shows only notes://public/readme")
            read = await client.read_resource("notes://public/readme")
            check(any(getattr(c, "text", "") == "the public readme" for c in read.contents),
                  f"resources/read returned {read!r}")
            done.append("resources/read notes://public/readme ran")
            done.append(await denied("resources/read notes://private/keys",
                                     lambda: client.read_resource("notes://private/keys")))

            prompts = {p.name for p in (await client.list_prompts()).prompts}
            check(prompts == {"summarize"}, f"prompts/list shows {sorted(prompts)}")
            done.append("prompts/list shows only summarize")
            got = await client.get_prompt("summarize", {"topic": "fenzi"})
            check("Summarize fenzi." in str(got.messages), f"prompts/get returned {got!r}")
            done.append("prompts/get summarize ran")
            done.append(await denied("prompts/get exfiltrate",
                                     lambda: client.get_prompt("exfiltrate")))
    return done


async def over_the_rate(url: str) -> list[str]:
    """The policy lets `add` run twice an hour: the two modes above used both."""
    with anyio.fail_after(STEP_TIMEOUT * 2):
        async with Client(url, mode="legacy", read_timeout_seconds=STEP_TIMEOUT) as client:
            return [await denied("a third add within the hour",
                                 lambda: client.call_tool("add", {"a": 1, "b": 2}), "rate_limited")]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--mode", action="append", choices=["legacy", "2026-07-28"], help="repeatable")
    p.add_argument("--rate-limited-add", action="store_true",
                   help="after the modes, a third `add` must be refused as rate_limited")
    args = p.parse_args()
    failed = 0
    for mode in args.mode or ["legacy", "2026-07-28"]:
        try:
            for step in anyio.run(run_mode, args.url, mode):
                print(f"PASS kinds [{mode}] {step}", flush=True)
        except Exception as exc:  # noqa: BLE001 - report, then go on to the next mode
            failed += 1
            leaves = exc.exceptions if isinstance(exc, BaseExceptionGroup) else [exc]
            for leaf in leaves:
                detail = str(leaf) if isinstance(leaf, Failure) else f"{type(leaf).__name__}: {leaf}"
                print(f"FAIL kinds [{mode}] {detail}", flush=True)
    if args.rate_limited_add:
        try:
            for step in anyio.run(over_the_rate, args.url):
                print(f"PASS kinds [limits] {step}", flush=True)
        except Exception as exc:  # noqa: BLE001
            failed += 1
            print(f"FAIL kinds [limits] {exc}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
