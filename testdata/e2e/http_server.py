#!/usr/bin/env python3
"""A tiny web server for the end-to-end curl cases (plain HTTP, or HTTPS with --cert/--key).

    http_server.py [--cert server.pem --key server-key.pem] [--port 0] [--auth-log FILE]

Answers every GET with 200 and `hello from the fenzi e2e server` plus the path, and prints
`listening on 127.0.0.1:PORT` once bound. Listens on 127.0.0.1 only. With --auth-log, appends the
Authorization header each request carried (a line, empty when none) to FILE: what a test checks
a secret was swapped into.
"""

import argparse
import http.server
import ssl
import sys


class Handler(http.server.BaseHTTPRequestHandler):
    auth_log = None

    def do_GET(self) -> None:  # noqa: N802 (stdlib naming)
        if Handler.auth_log:
            with open(Handler.auth_log, "a", encoding="utf-8") as f:
                f.write(self.headers.get("Authorization", "") + "\n")
        body = f"hello from the fenzi e2e server: {self.path}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, fmt: str, *args) -> None:
        sys.stderr.write("http_server: " + (fmt % args) + "\n")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--auth-log")
    args = p.parse_args()
    Handler.auth_log = args.auth_log
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    if args.cert:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(args.cert, args.key)
        httpd.socket = ctx.wrap_socket(httpd.socket, server_side=True)
    print(f"listening on 127.0.0.1:{httpd.server_address[1]}", flush=True)
    httpd.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
