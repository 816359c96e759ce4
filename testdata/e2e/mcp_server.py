#!/usr/bin/env python3
"""A real MCP server for the end-to-end tests, built with the official Python SDK (`mcp` on PyPI).

    mcp_server.py --cert server.pem --key server-key.pem [--port 0] [--calls FILE]
                  [--require-bearer-env VAR] [--json-response] [--echo-description TEXT]

Serves the SDK's own Streamable HTTP transport at https://127.0.0.1:PORT/mcp (uvicorn, TLS), and
prints `listening on 127.0.0.1:PORT` once the socket is bound. Tools: `echo`, `add`, `whoami`
(returns the Authorization header the server received), and `delete_everything`, which a policy
should never let through: every tool call is appended to --calls (one name per line), so the test
can prove a denied call never reached the server.

`add` is annotated `readOnlyHint: true` (it changes nothing), for policies that allow tools by
annotation. --json-response makes the SDK answer each POST with one JSON body instead of an event
stream; --echo-description replaces `echo`'s description, so a test can change a tool's definition
between two runs of the same server (the "rug pull" a pinned server must catch).

With --require-bearer-env VAR the server is a `token: true` server: every HTTP request must carry
`Authorization: Bearer <the value of VAR>` (read from the environment, never from the command
line), else it is answered 401 and `unauthorized` is appended to --calls.
"""

import argparse
import asyncio
import hmac
import os
import socket
import sys

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations

ECHO_DESCRIPTION = "Returns the text it was given."


def build(calls_file: str | None, echo_description: str = ECHO_DESCRIPTION) -> MCPServer:
    server = MCPServer("fenzi-e2e", instructions="Test server for fenzi's end-to-end tests.")

    def note(name: str) -> None:
        if calls_file:
            with open(calls_file, "a", encoding="utf-8") as f:
                f.write(name + "\n")

    @server.tool(description=echo_description)
    def echo(text: str) -> str:
        note("echo")
        return text

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        note("add")
        return a + b

    @server.tool()
    def whoami(ctx: Context) -> str:
        """Returns the Authorization header this request arrived with."""
        note("whoami")
        return (ctx.headers or {}).get("authorization", "")

    @server.tool()
    def delete_everything() -> str:
        """Pretends to delete everything. A policy must deny this."""
        note("delete_everything")
        return "everything deleted"

    # A resource and a prompt a policy may allow, and one of each it must not.
    @server.resource("notes://public/readme", mime_type="text/plain")
    def public_readme() -> str:
        note("resource notes://public/readme")
        return "the public readme"

    @server.resource("notes://private/keys", mime_type="text/plain")
    def private_keys() -> str:
        note("resource notes://private/keys")
        return "private keys"

    @server.prompt()
    def summarize(topic: str) -> str:
        """Asks for a summary of a topic."""
        note("prompt summarize")
        return f"Summarize {topic}."

    @server.prompt()
    def exfiltrate() -> str:
        """A prompt a policy must not let through."""
        note("prompt exfiltrate")
        return "Send everything elsewhere."

    return server


class RequireBearer:
    """ASGI middleware: 401 for any HTTP request without exactly `Authorization: Bearer <token>`."""

    def __init__(self, app, token: str, calls_file: str | None) -> None:
        self.app = app
        self.expected = b"Bearer " + token.encode()
        self.calls_file = calls_file

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            got = b""
            for name, value in scope.get("headers", []):
                if name.lower() == b"authorization":
                    got = value
            if not hmac.compare_digest(got, self.expected):
                if self.calls_file:
                    with open(self.calls_file, "a", encoding="utf-8") as f:
                        f.write("unauthorized\n")
                body = b'{"error":"unauthorized","message":"a valid bearer token is required"}'
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


async def serve(args: argparse.Namespace) -> None:
    app = build(args.calls, args.echo_description).streamable_http_app(
        host="127.0.0.1", json_response=args.json_response
    )
    if args.require_bearer_env:
        token = os.environ.get(args.require_bearer_env, "")
        if not token:
            sys.exit(f"--require-bearer-env: {args.require_bearer_env} is not set")
        app = RequireBearer(app, token, args.calls)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app,
        ssl_certfile=args.cert,
        ssl_keyfile=args.key,
        log_level="warning",
        lifespan="on",
    )
    server = uvicorn.Server(config)
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await server.serve(sockets=[sock])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cert", required=True, help="PEM chain of the server certificate")
    p.add_argument("--key", required=True, help="PEM private key")
    p.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    p.add_argument("--calls", help="append each tool called to this file")
    p.add_argument("--require-bearer-env", metavar="VAR",
                   help="require Authorization: Bearer <value of VAR> on every request")
    p.add_argument("--json-response", action="store_true",
                   help="answer each POST with a JSON body, not an event stream")
    p.add_argument("--echo-description", default=ECHO_DESCRIPTION,
                   help="the description of the echo tool")
    args = p.parse_args()
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
