#!/usr/bin/env python3
"""A local (stdio) MCP server for the bridge's tests, built with the official Python SDK.

    mcp_stdio_server.py [--calls FILE]

Speaks MCP on stdin/stdout (the SDK's stdio transport), as `command` servers do. Tools: `echo`,
`add`, `fetch` (GETs a URL through the proxy its environment names, with a variable's value as
its bearer token: the server's own egress), `whoami` (the process's pid and environment names, so a test can tell processes apart and
see what the server's environment holds), `write` (tries to write a file, says whether it could), `progress` (reports three progress steps before it
answers), `ask` (asks the client to sample a message: a server-initiated request), `crash` (the
process exits at once, without answering), and `delete_everything`, which a policy should never let
through. Every call is appended to --calls (one name per line). Writes a line to stderr at start,
which the bridge puts in the session log.
"""

import argparse
import os
import sys

from mcp.server.mcpserver import Context, MCPServer
from mcp_types import SamplingMessage, TextContent


PROCESS = os.urandom(6).hex()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls")
    args = parser.parse_args()
    server = MCPServer("fenzi-stdio", instructions="A stdio test server for fenzi's bridge.")

    def note(name: str) -> None:
        if args.calls:
            with open(args.calls, "a", encoding="utf-8") as f:
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
    def fetch(url: str, token_var: str = "", direct: bool = False) -> str:
        """GETs url (through HTTPS_PROXY, trusting SSL_CERT_FILE; with direct, ignoring the proxy
        variables as some programs do); with token_var, sends that variable's value as a bearer
        token. Returns the status and body, or the error."""
        import urllib.error
        import urllib.request

        note("fetch")
        request = urllib.request.Request(url)
        if token_var:
            request.add_header("Authorization", "Bearer " + os.environ.get(token_var, ""))
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({})) if direct else None
        try:
            with (opener.open if opener else urllib.request.urlopen)(request, timeout=10) as answer:
                return f"{answer.status} {answer.read().decode(errors='replace')}"
        except urllib.error.HTTPError as e:
            return f"{e.code} {e.read().decode(errors='replace')}"
        except OSError as e:
            return f"error: {e}"

    @server.tool()
    def whoami() -> str:
        """The server process's pid and the names in its environment."""
        note("whoami")
        # `process` tells processes apart where pids do not (each sandbox's server is pid 2).
        return f"pid={os.getpid()} process={PROCESS} home={os.environ.get('HOME', '')} env={','.join(sorted(os.environ))}"

    @server.tool()
    async def progress(ctx: Context) -> str:
        """Reports three steps of progress, then answers."""
        note("progress")
        for step in range(1, 4):
            await ctx.report_progress(step, 3, f"step {step}")
        return "done"

    @server.tool()
    async def ask(question: str, ctx: Context) -> str:
        """Asks the client's model (sampling) and returns its answer."""
        note("ask")
        result = await ctx.request_context.session.create_message(
            [SamplingMessage(role="user", content=TextContent(type="text", text=question))],
            max_tokens=50,
        )
        return f"the model said: {result.content.text}"

    @server.tool()
    def write(path: str) -> str:
        """Writes a small file at path; says `wrote` or the error (the sandbox tests' probe)."""
        note("write")
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write("written by the stdio server\n")
            return "wrote"
        except OSError as e:
            return f"refused: {e.strerror}"

    @server.tool()
    def crash() -> str:
        """Ends the server process at once, without answering."""
        note("crash")
        sys.stdout.flush()
        os._exit(3)

    @server.tool()
    def delete_everything() -> str:
        """Deletes everything (a tool a policy should deny)."""
        note("delete_everything")
        return "deleted"

    print(f"fenzi-stdio server {os.getpid()} starting", file=sys.stderr, flush=True)
    server.run("stdio")


if __name__ == "__main__":
    main()
