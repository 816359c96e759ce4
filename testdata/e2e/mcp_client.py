#!/usr/bin/env python3
"""The end-to-end MCP client: the official Python SDK's `Client` (`mcp` on PyPI) over Streamable HTTP.

    mcp_client.py --url https://127.0.0.1:PORT/mcp [--mode legacy|2026-07-28|auto]... [--direct]
                  [--placeholders FILE --secret NAME] [--dump-env FILE]
                  [--expect-tools NAME,NAME...] [--changed TOOL]

For each protocol mode it connects, lists tools, calls `echo` (allowed) and checks the result, calls
`delete_everything` and checks the outcome, then calls `add` to prove the session still works.

Through fenzi (the default) `delete_everything` must fail promptly with fenzi's JSON-RPC error for that
call ("... not permitted by policy: tools/call delete_everything", data.reason = policy_denied). With
--direct (no proxy, for developing the harness) it must succeed instead.

Modes: `legacy` is the initialize handshake (the SDK negotiates 2025-11-25); `2026-07-28` pins the
modern single-exchange protocol; `auto` probes `server/discover` first. The proxy and trust come from
the environment, as for any client: HTTPS_PROXY and SSL_CERT_FILE. Prints PASS/FAIL per check; exits 1
on any failure.

--expect-tools names exactly the tools `tools/list` must show through fenzi: the ones the policy
allows, every other one hidden by fenzi's list filtering. --changed TOOL says TOOL's definition
changed since it was pinned: it must not be listed, and calling it must fail with fenzi's error whose
data.reason is `tool_changed` (in place of the `echo` call when TOOL is echo).

With --placeholders FILE --secret NAME the client is set up the way fenzi sets up an agent for a
`token: true` server: it reads NAME's placeholder from FILE (fenzi's `placeholders.env`) and sends
`Authorization: Bearer <placeholder>` on every request, through the SDK's own transport options
(an httpx client with default headers). It then also calls `whoami` and checks that the
Authorization the server reports comes back as the placeholder it sent: fenzi swapped in the real
token on the way up and swapped it back out of the answer. --dump-env writes the client's
environment and arguments to FILE so the test can prove the real token was never among them.
"""

import argparse
import sys
import time

import json
import os
from contextlib import AsyncExitStack

import anyio
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import TextContent

EXPECTED_VERSION = {"legacy": "2025-11-25", "2026-07-28": "2026-07-28", "auto": "2026-07-28"}
STEP_TIMEOUT = 20.0


class Failure(Exception):
    pass


def text_of(result) -> str:
    if result.is_error:
        raise Failure(f"the tool reported an error: {result.content!r}")
    texts = [c.text for c in result.content if isinstance(c, TextContent)]
    if not texts:
        raise Failure(f"no text content in {result!r}")
    return "".join(texts)


def check(cond: bool, what: str) -> None:
    if not cond:
        raise Failure(what)


def read_placeholder(path: str, name: str) -> str:
    """NAME's placeholder from a `placeholders.env` (NAME=placeholder lines)."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            key, sep, value = line.rstrip("\n").partition("=")
            if sep and key == name:
                return value
    raise Failure(f"{path} has no line for {name}")


async def expect_denied(client, tool: str, reason: str, direct: bool) -> str:
    """Calls `tool` and checks fenzi refused it with `reason`; returns the step's description."""
    started = time.monotonic()
    try:
        result = await client.call_tool(tool, {})
    except MCPError as e:
        elapsed = time.monotonic() - started
        check(not direct, f"direct call to {tool} failed: {e.message}")
        got = e.data.get("reason") if isinstance(e.data, dict) else None
        check(got == reason, f"{tool}: error data.reason = {got!r}, expected {reason!r} ({e.message!r})")
        check(f"tools/call {tool}" in e.message, f"{tool}: the error does not name the call: {e.message!r}")
        check(elapsed < 5, f"the denial took {elapsed:.1f}s")
        return f"denied call: {tool} -> {e.code} {reason}"
    check(False, f"{tool} was NOT denied: {result!r}")
    return ""


async def run_mode(
    url: str,
    mode: str,
    direct: bool,
    bearer: str | None,
    expect_tools: set[str] | None = None,
    changed: str | None = None,
) -> list[str]:
    done: list[str] = []
    with anyio.fail_after(STEP_TIMEOUT * 4):
        async with AsyncExitStack() as stack:
            server = url
            if bearer is not None:
                # The SDK's transport options: an httpx client whose every request carries the header.
                http = await stack.enter_async_context(
                    create_mcp_http_client(headers={"Authorization": f"Bearer {bearer}"})
                )
                server = streamable_http_client(url, http_client=http)
            client = await stack.enter_async_context(
                Client(server, mode=mode, read_timeout_seconds=STEP_TIMEOUT)
            )
            version = client.protocol_version
            check(
                version == EXPECTED_VERSION[mode],
                f"negotiated protocol {version}, expected {EXPECTED_VERSION[mode]}",
            )
            done.append(f"connected ({version})")

            listed = {t.name for t in (await client.list_tools()).tools}
            if expect_tools is not None and not direct:
                check(listed == expect_tools,
                      f"tools/list shows {sorted(listed)}, expected exactly {sorted(expect_tools)}")
                done.append(f"tools/list shows only {', '.join(sorted(listed))}")
            else:
                wanted = {"echo", "add"} - ({changed} if changed else set())
                check(wanted <= listed, f"tools/list lacks {sorted(wanted)}: {sorted(listed)}")
                done.append("tools/list")
            if changed and not direct:
                check(changed not in listed, f"the changed tool {changed} is still listed")

            if changed == "echo":
                done.append(await expect_denied(client, "echo", "tool_changed", direct))
            else:
                greeting = f"hello through fenzi, mode {mode}"
                got = text_of(await client.call_tool("echo", {"text": greeting}))
                check(got == greeting, f"echo returned {got!r}")
                done.append("allowed call: echo")

            if bearer is not None:
                seen = text_of(await client.call_tool("whoami", {}))
                check(
                    seen == f"Bearer {bearer}",
                    # Never print what came back: it might be the real token.
                    "the server's echo of its Authorization did not come back as the placeholder"
                    f" (got {len(seen)} characters)",
                )
                done.append("whoami: the echoed token came back as the placeholder")

            started = time.monotonic()
            try:
                result = await client.call_tool("delete_everything", {})
            except MCPError as e:
                elapsed = time.monotonic() - started
                check(not direct, f"direct call to delete_everything failed: {e.message}")
                check(
                    "not permitted by policy" in e.message
                    and "tools/call delete_everything" in e.message,
                    f"denied call error lacks fenzi's message: code {e.code} {e.message!r}",
                )
                data = e.data if isinstance(e.data, dict) else {}
                reason = data.get("reason")
                check(reason == "policy_denied", f"denied call error data.reason = {reason!r}")
                # The policy lists it under deny: the rule says so, and the hint does not suggest
                # `fenzi approve` (it would refuse).
                rule, hint = data.get("rule") or "", data.get("hint") or ""
                check(
                    rule.endswith('.tools.deny "delete_everything"'),
                    f"denied call error data.rule = {rule!r}",
                )
                check(
                    hint.startswith("denied by the policy's deny list") and "does not undo" in hint,
                    f"denied call error data.hint = {hint!r}",
                )
                check(elapsed < 5, f"the denial took {elapsed:.1f}s")
                done.append(f"denied call: delete_everything -> {e.code} {e.message!r}")
            else:
                check(direct, f"delete_everything was NOT denied: {result!r}")
                check(text_of(result) == "everything deleted", f"unexpected result {result!r}")
                done.append("direct call: delete_everything")

            got = text_of(await client.call_tool("add", {"a": 2, "b": 40}))
            check(got == "42", f"add returned {got!r}")
            done.append("allowed call afterwards: add")
    return done


def leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in leaves(sub)]
    return [exc]


async def main_async(args: argparse.Namespace) -> int:
    failed = 0
    if args.dump_env:
        with open(args.dump_env, "w", encoding="utf-8") as f:
            json.dump({"environ": dict(os.environ), "argv": sys.argv}, f)
    bearer = None
    if args.placeholders:
        bearer = read_placeholder(args.placeholders, args.secret)
        print(f"PASS mcp client holds the placeholder of {args.secret} from {args.placeholders}", flush=True)
    expect_tools = set(args.expect_tools.split(",")) if args.expect_tools else None
    for mode in args.mode or ["legacy", "2026-07-28"]:
        try:
            for step in await run_mode(args.url, mode, args.direct, bearer, expect_tools, args.changed):
                print(f"PASS mcp [{mode}] {step}", flush=True)
        except BaseException as exc:  # noqa: BLE001 - report every failure, then go on to the next mode
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            failed += 1
            for leaf in leaves(exc):
                detail = str(leaf) if isinstance(leaf, Failure) else f"{type(leaf).__name__}: {leaf}"
                print(f"FAIL mcp [{mode}] {detail}", flush=True)
    return 1 if failed else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--mode", action="append", choices=sorted(EXPECTED_VERSION), help="repeatable")
    p.add_argument("--direct", action="store_true", help="no proxy: delete_everything must succeed")
    p.add_argument("--placeholders", metavar="FILE", help="fenzi's placeholders.env")
    p.add_argument("--secret", metavar="NAME", help="send this secret's placeholder as the bearer token")
    p.add_argument("--dump-env", metavar="FILE", help="write the environment and arguments here")
    p.add_argument("--expect-tools", metavar="NAMES", help="exactly these tools are listed (comma-separated)")
    p.add_argument("--changed", metavar="TOOL", help="TOOL changed since it was pinned: hidden and tool_changed")
    args = p.parse_args()
    if bool(args.placeholders) != bool(args.secret):
        p.error("--placeholders and --secret go together")
    return anyio.run(main_async, args)


if __name__ == "__main__":
    sys.exit(main())
