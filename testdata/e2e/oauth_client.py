#!/usr/bin/env python3
"""Signs in to an OAuth MCP server with the official Python SDK's OAuth client, then calls a tool.

    oauth_client.py --url https://127.0.0.1:PORT/mcp [--direct]

The SDK's `OAuthClientProvider` does what it does for any server: meets the 401, discovers the
protected-resource and authorization-server metadata, registers (RFC 7591), sends the user to the
authorization endpoint with PKCE, and exchanges the code at the token endpoint. The browser is this
script: it GETs the authorization URL (through the same proxy and trust) and reads the code from the
redirect it gets back. Then it lists tools and calls `echo`. The proxy and trust come from the
environment (HTTPS_PROXY, SSL_CERT_FILE). Prints PASS/FAIL per check, and the codes and tokens it
saw to --secrets FILE (so the test can prove none reached fenzi's log); exits 1 on any failure.
"""

import argparse
import sys
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken
from mcp_types import TextContent

REDIRECT = "http://127.0.0.1:9/callback"


class Memory:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, client_info):
        self.client = client_info


async def run(args) -> int:
    seen: list[str] = []
    redirect: dict[str, str] = {}

    async def browser(url: str) -> None:
        query = parse_qs(urlparse(url).query)
        seen.extend(v for k in ("code_challenge", "state") for v in query.get(k, []))
        async with httpx2.AsyncClient(follow_redirects=False) as http:
            answer = await http.get(url)
        location = answer.headers.get("location", "")
        if answer.status_code not in (302, 303, 307) or not location.startswith(REDIRECT):
            raise RuntimeError(f"the authorization endpoint answered {answer.status_code}")
        back = parse_qs(urlparse(location).query)
        redirect["code"] = back["code"][0]
        redirect["state"] = back.get("state", [None])[0]
        seen.append(redirect["code"])

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=redirect["code"], state=redirect["state"])

    storage = Memory()
    auth = OAuthClientProvider(
        server_url=args.url,
        client_metadata=OAuthClientMetadata(
            client_name="fenzi-e2e", redirect_uris=[REDIRECT],
            grant_types=["authorization_code", "refresh_token"], response_types=["code"],
        ),
        storage=storage,
        redirect_handler=browser,
        callback_handler=callback,
    )
    failures = 0
    async with create_mcp_http_client(auth=auth) as http:
        async with Client(streamable_http_client(args.url, http_client=http), mode="legacy") as client:
            tools = await client.list_tools()
            names = sorted(t.name for t in tools.tools)
            print(("PASS" if names == ["echo"] else "FAIL") + f" signed in and listed tools: {names}")
            failures += names != ["echo"]
            result = await client.call_tool("echo", {"text": "signed in"})
            text = "".join(c.text for c in result.content if isinstance(c, TextContent))
            ok = not result.is_error and text == "signed in"
            print(("PASS" if ok else "FAIL") + " called echo with the token")
            failures += not ok
    if storage.tokens:
        seen += [storage.tokens.access_token, storage.tokens.refresh_token or ""]
    if storage.client and storage.client.client_secret:
        seen.append(storage.client.client_secret)
    if args.secrets:
        with open(args.secrets, "w", encoding="utf-8") as f:
            f.write("\n".join(s for s in seen if s) + "\n")
    return 1 if failures else 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", required=True)
    p.add_argument("--secrets", help="write the codes, challenges, states and tokens seen here")
    args = p.parse_args()
    try:
        return anyio.run(run, args)
    except Exception as e:  # noqa: BLE001 - one line for the harness
        print(f"FAIL sign-in: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
