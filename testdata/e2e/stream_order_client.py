#!/usr/bin/env python3
"""Runs the stream-order check N times with the official Python SDK client (`mcp` on PyPI).

    stream_order_client.py --url https://127.0.0.1:PORT/mcp --runs N [--timeout SECONDS] [--label L]

Each run is a new session: connect (initialize handshake), call `ask` (testdata/e2e/
mcp_stream_server.py), answer the server's sampling request, check the tool's answer, close. A run
whose call gets no answer within --timeout counts as lost: the server's request went to a GET stream
it did not have yet. Proxy and trust come from the environment (HTTPS_PROXY, SSL_CERT_FILE).
Prints one line per run and `L: R runs, K answered, T lost, E failed`; exits 0 when every run was
answered.
"""

import argparse
import sys

import anyio
from mcp.client.client import Client
from mcp_types import CreateMessageResult, TextContent

ANSWER = "sampled by the client"


async def sampling(_context, _params) -> CreateMessageResult:
    return CreateMessageResult(
        role="assistant", content=TextContent(type="text", text=ANSWER), model="test"
    )


async def one(url: str, timeout: float) -> str:
    with anyio.fail_after(timeout * 2 + 10):
        async with Client(
            url, mode="legacy", sampling_callback=sampling, read_timeout_seconds=timeout
        ) as client:
            try:
                result = await client.call_tool("ask", {})
            except Exception as e:  # the SDK's read timeout, as an MCPError
                if "timed out" in str(e).lower() or "timeout" in type(e).__name__.lower():
                    return "lost"
                return f"failed: {type(e).__name__}: {e}"
            texts = [c.text for c in result.content if isinstance(c, TextContent)]
            if result.is_error or texts != [ANSWER]:
                return f"failed: the tool answered {texts!r}"
            return "answered"


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--timeout", type=float, default=5.0)
    parser.add_argument("--label", default="runs")
    args = parser.parse_args()
    counts = {"answered": 0, "lost": 0, "failed": 0}
    for n in range(args.runs):
        try:
            outcome = await one(args.url, args.timeout)
        except Exception as e:
            outcome = f"failed: {type(e).__name__}: {e}"
        counts[outcome.split(":")[0]] += 1
        print(f"run {n + 1}: {outcome}", flush=True)
    print(
        f"{args.label}: {args.runs} runs, {counts['answered']} answered, {counts['lost']} lost, "
        f"{counts['failed']} failed",
        flush=True,
    )
    return 0 if counts["answered"] == args.runs else 1


if __name__ == "__main__":
    sys.exit(anyio.run(main))
