#!/usr/bin/env python3
"""The demo's "agent": a program inside `fenzi run` that uses an MCP server the way an agent does,
with the official Python SDK, and then tries what a steered agent might try.

    agent.py MCP_URL PLAIN_URL [LOCAL_URL]

LOCAL_URL is a local (stdio) server fenzi runs in a sandbox of its own and serves over Streamable
HTTP (http://NAME.stdio.fenzi.internal/mcp): the agent uses it like any other, with no token.

It only has what the sandbox gives it: HTTPS_PROXY pointing at fenzi, the session CA in SSL_CERT_FILE,
and in MCP_DEMO the placeholder of the server's token (never the token itself).
"""

import os
import sys

import anyio
import httpx2 as httpx  # the HTTP client the MCP SDK itself uses
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError


def say(text: str) -> None:
    print(f"  agent: {text}", flush=True)


async def use_the_server(url: str, bearer: str) -> None:
    async with create_mcp_http_client(headers={"Authorization": f"Bearer {bearer}"}) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            say(f"connected; the server offers {', '.join(tools)}")
            result = await client.call_tool("echo", {"text": "hello through fenzi"})
            say(f"echo (allowed) -> {result.content[0].text!r}")
            try:
                await client.call_tool("delete_everything", {})
                say("delete_everything went through (it should not have!)")
            except MCPError as e:
                say(f"delete_everything (denied) -> error {e.code}: {e.message}")
            seen = (await client.call_tool("whoami", {})).content[0].text
            mine = seen.removeprefix("Bearer ") == bearer
            say(
                "whoami: the server checked the real token; what came back is "
                + ("my placeholder again (the proxy scrubbed the echo)" if mine else "something else!")
            )


async def use_the_local_server(url: str) -> None:
    async with create_mcp_http_client() as http:
        async with Client(streamable_http_client(url, http_client=http), mode="legacy") as client:
            tools = sorted(t.name for t in (await client.list_tools()).tools)
            say(f"local server: fenzi started it in its own sandbox; its list shows {', '.join(tools)}")
            result = await client.call_tool("add", {"a": 2, "b": 3})
            say(f"local add (allowed) -> {result.content[0].text!r}")
            try:
                await client.call_tool("delete_everything", {})
                say("local delete_everything went through (it should not have!)")
            except MCPError as e:
                say(f"local delete_everything (denied) -> error {e.code}: {e.message}")


def try_to_leak(plain_url: str, bearer: str) -> None:
    # A prompt-injected agent might send its token to another allowed host.
    r = httpx.get(plain_url, headers={"Authorization": f"Bearer {bearer}"}, trust_env=True)
    say(f"sending the token to {plain_url} -> HTTP {r.status_code} {r.json().get('error')}")
    try:
        r = httpx.get("http://example.org/", trust_env=True)
        say(f"reaching a host the policy does not list -> HTTP {r.status_code} {r.json().get('error')}")
    except httpx.HTTPError as e:
        say(f"reaching a host the policy does not list -> {e}")


def main() -> int:
    mcp_url, plain_url = sys.argv[1], sys.argv[2]
    bearer = os.environ.get("MCP_DEMO", "")
    say(
        "MCP_DEMO holds a "
        + (f"placeholder ({len(bearer)} characters, fenzi_ph_...)" if bearer.startswith("fenzi_ph_") else "value I did not expect")
    )
    anyio.run(use_the_server, mcp_url, bearer)
    if len(sys.argv) > 3:
        anyio.run(use_the_local_server, sys.argv[3])
    try_to_leak(plain_url, bearer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
