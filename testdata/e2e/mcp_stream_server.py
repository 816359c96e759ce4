#!/usr/bin/env python3
"""An MCP server that asks the client something on its standalone GET stream, built with the official
Python SDK (`mcp` on PyPI), for the stream-order test (scripts/e2e/stream_order.sh).

    mcp_stream_server.py --cert server.pem --key server-key.pem [--port 0]

Serves Streamable HTTP at https://127.0.0.1:PORT/mcp and prints `listening on 127.0.0.1:PORT`. Its
one tool, `ask`, sends `sampling/createMessage` to the client as a request of the session, not of
the call: the SDK routes it to the standalone GET stream, and drops it when the client's GET has
not reached the server yet (the client then waits for an answer that never comes). So `ask`
answers only when the client's GET reached the server before its `tools/call` did, which is the
order the SDK client sends them in.
"""

import argparse
import asyncio
import socket

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent


def build() -> MCPServer:
    server = MCPServer("fenzi-stream-order")

    @server.tool()
    async def ask(ctx: Context) -> str:
        """Asks the client for a completion on the session's GET stream."""
        result = await ctx.session.create_message(
            messages=[SamplingMessage(role="user", content=TextContent(type="text", text="hi"))],
            max_tokens=8,
        )
        content = result.content
        return content.text if isinstance(content, TextContent) else "?"

    return server


async def serve(args: argparse.Namespace) -> None:
    app = build().streamable_http_app(host="127.0.0.1")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, ssl_certfile=args.cert, ssl_keyfile=args.key, log_level="warning", lifespan="on"
    )
    print(f"listening on 127.0.0.1:{port}", flush=True)
    await uvicorn.Server(config).serve(sockets=[sock])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cert", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(serve(parser.parse_args()))


if __name__ == "__main__":
    main()
