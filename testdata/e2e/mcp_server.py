#!/usr/bin/env python3
"""A real MCP server for the end-to-end tests, built with the official Python SDK (`mcp` on PyPI).

    mcp_server.py --cert server.pem --key server-key.pem [--port 0] [--calls FILE]

Serves the SDK's own Streamable HTTP transport at https://127.0.0.1:PORT/mcp (uvicorn, TLS), and
prints `listening on 127.0.0.1:PORT` once the socket is bound. Tools: `echo`, `add`, and
`delete_everything`, which a policy should never let through: every tool call is appended to
--calls (one name per line), so the test can prove a denied call never reached the server.
"""

import argparse
import asyncio
import socket
import sys

import uvicorn
from mcp.server.mcpserver import MCPServer


def build(calls_file: str | None) -> MCPServer:
    server = MCPServer("fenzi-e2e", instructions="Test server for fenzi's end-to-end tests.")

    def note(name: str) -> None:
        if calls_file:
            with open(calls_file, "a", encoding="utf-8") as f:
                f.write(name + "\n")

    @server.tool()
    def echo(text: str) -> str:
        """Returns the text it was given."""
        note("echo")
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Adds two integers."""
        note("add")
        return a + b

    @server.tool()
    def delete_everything() -> str:
        """Pretends to delete everything. A policy must deny this."""
        note("delete_everything")
        return "everything deleted"

    return server


async def serve(args: argparse.Namespace) -> None:
    app = build(args.calls).streamable_http_app(host="127.0.0.1")
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
    args = p.parse_args()
    asyncio.run(serve(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
