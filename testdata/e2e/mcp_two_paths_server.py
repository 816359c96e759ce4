#!/usr/bin/env python3
"""Two MCP servers on one port, at two paths, built with the official Python SDK (`mcp` on PyPI).

    mcp_two_paths_server.py --cert server.pem --key server-key.pem --calls FILE
                            [--full-bearer-env VAR] [--readonly-bearer-env VAR]

The common layout fenzi tells apart by path (README, "Servers by path"): the full toolset at
https://127.0.0.1:PORT/mcp and a read-only one at https://127.0.0.1:PORT/mcp/readonly, one process,
one TLS port (uvicorn). Both offer the same tools, `echo` and `create_issue`, so what differs
between the two paths is only what fenzi's policy allows on each. Every tool call is appended to
--calls as `<server>:<tool>` (`full:create_issue`), so a test can prove which server a call reached
and that a denied one reached none. Each path may require its own bearer token, read from the
environment variable named: a request to that path without exactly `Authorization: Bearer
<value>` is answered 401 and `unauthorized <server>` is appended to --calls. Any other path is 404.

Prints `listening on 127.0.0.1:PORT` once the socket is bound. Answers are JSON bodies
(json_response) and the servers are stateless, so each POST stands alone.
"""

import argparse
import asyncio
import contextlib
import hmac
import os
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette


def build(name: str, calls_file: str) -> MCPServer:
    server = MCPServer(f"fenzi-{name}")

    def note(tool: str) -> None:
        with open(calls_file, "a", encoding="utf-8") as f:
            f.write(f"{name}:{tool}\n")

    @server.tool()
    def echo(text: str) -> str:
        """Returns the text it was given."""
        note("echo")
        return f"{name}: {text}"

    @server.tool()
    def create_issue(text: str) -> str:
        """Creates an issue (pretends to)."""
        note("create_issue")
        return f"{name} created {text}"

    return server


class RequireBearers:
    """ASGI middleware: each path's own bearer token, 401 without it."""

    def __init__(self, app, tokens: dict[str, tuple[str, bytes]], calls_file: str) -> None:
        self.app = app
        self.tokens = tokens
        self.calls_file = calls_file

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] in self.tokens:
            name, expected = self.tokens[scope["path"]]
            got = b""
            for header, value in scope.get("headers", []):
                if header.lower() == b"authorization":
                    got = value
            if not hmac.compare_digest(got, expected):
                with open(self.calls_file, "a", encoding="utf-8") as f:
                    f.write(f"unauthorized {name}\n")
                body = b'{"error":"unauthorized"}'
                await send({
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                    ],
                })
                await send({"type": "http.response.body", "body": body})
                return
        await self.app(scope, receive, send)


def app(args: argparse.Namespace):
    apps = {
        path: build(name, args.calls).streamable_http_app(
            streamable_http_path=path, json_response=True, stateless_http=True, host="127.0.0.1"
        )
        for name, path in (("full", "/mcp"), ("readonly", "/mcp/readonly"))
    }

    @contextlib.asynccontextmanager
    async def lifespan(_):
        async with contextlib.AsyncExitStack() as stack:
            for a in apps.values():
                await stack.enter_async_context(a.router.lifespan_context(a))
            yield

    routes = [route for a in apps.values() for route in a.routes]
    combined = Starlette(routes=routes, lifespan=lifespan)
    tokens = {}
    for name, path, var in (
        ("full", "/mcp", args.full_bearer_env),
        ("readonly", "/mcp/readonly", args.readonly_bearer_env),
    ):
        if var:
            value = os.environ.get(var, "")
            if not value:
                sys.exit(f"{var} is not set")
            tokens[path] = (name, b"Bearer " + value.encode())
    return RequireBearers(combined, tokens, args.calls) if tokens else combined


async def serve(args: argparse.Namespace) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app(args), ssl_certfile=args.cert, ssl_keyfile=args.key, log_level="warning", lifespan="on"
    )
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cert", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--calls", required=True)
    p.add_argument("--full-bearer-env", metavar="VAR")
    p.add_argument("--readonly-bearer-env", metavar="VAR")
    asyncio.run(serve(p.parse_args()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
