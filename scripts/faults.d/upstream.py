#!/usr/bin/env python3
"""Misbehaving upstreams for scripts/faults, all on loopback, each counting what it receives.

    upstream.py --events FILE --ready FILE [--cert PEM --key PEM] NAME=MODE[@ADDR][+tls] ...

Every listener binds ADDR (default 127.0.0.1) on a free port. Once all are bound, the ports are
written to --ready as one JSON object {NAME: PORT} (atomically: temporary file, then rename). Every
event is appended to --events as one line, `NAME accept` when a connection is accepted and
`NAME request METHOD PATH` once a request head (and its Content-Length body) has been read, so the
caller can assert what reached the upstream instead of assuming it.

Modes (what happens once the request has been read):
  ok           answers 200 with a short body (a healthy upstream, for counting)
  refuse       nothing listens: the port stays bound (so no other listener or process gets the
               same number) but never listens, so a connection attempt is refused
  reset        closes the connection with SO_LINGER 0, so the peer gets a TCP RST
  stall        never answers; keeps the connection open until the peer closes it
  cut-length   sends a 200 head with Content-Length 100000 and 1000 bytes of body, then closes
  cut-chunked  sends a chunked 200 head and one 1000-byte chunk, then closes without the last chunk
`+tls` serves TLS with --cert/--key (an MCP server's transport); the handshake completes first, so
the fault happens at the HTTP layer.
"""

import argparse
import json
import os
import socket
import ssl
import struct
import sys
import threading
import time

MODES = {"ok", "refuse", "reset", "stall", "cut-length", "cut-chunked"}
HEAD_LIMIT = 64 * 1024
BODY_LIMIT = 8 * 1024 * 1024
PARTIAL = b"x" * 1000
DECLARED = 100_000


class Events:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()

    def note(self, line: str) -> None:
        with self.lock, open(self.path, "a", encoding="utf-8") as f:
            f.write(line + "\n")


def read_request(conn) -> tuple[str, str] | None:
    """Reads one request head and its Content-Length body; returns (method, path) or None."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(4096)
        if not chunk:
            return None
        data += chunk
        if len(data) > HEAD_LIMIT:
            return None
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) < 2:
        return None
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = min(int(value.strip() or 0), BODY_LIMIT)
    while len(rest) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        rest += chunk
    return parts[0], parts[1]


def serve_one(conn, name: str, mode: str, tls: ssl.SSLContext | None, events: Events) -> None:
    try:
        conn.settimeout(30)
        if tls is not None:
            conn = tls.wrap_socket(conn, server_side=True)
        req = read_request(conn)
        if req is None:
            return
        method, path = req
        events.note(f"{name} request {method} {path}")
        if mode == "ok":
            body = f"ok {name} {path}\n".encode()
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
        elif mode == "reset":
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        elif mode == "stall":
            conn.settimeout(120)
            while conn.recv(4096):
                pass
        elif mode == "cut-length":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {DECLARED}\r\n\r\n".encode()
                + PARTIAL
            )
            time.sleep(0.2)
        elif mode == "cut-chunked":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + f"{len(PARTIAL):x}\r\n".encode()
                + PARTIAL
                + b"\r\n"
            )
            time.sleep(0.2)
    except (OSError, ssl.SSLError, ValueError):
        pass
    finally:
        # No TLS close_notify: a cut is a cut, whatever the transport.
        try:
            conn.close()
        except OSError:
            pass


# Sockets of `refuse` listeners, held open for the life of the process.
HELD: list[socket.socket] = []


def listen(name: str, mode: str, addr: str, tls: ssl.SSLContext | None, events: Events) -> int:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if mode != "refuse":
        # Not on a refuse socket: two SO_REUSEADDR sockets that do not listen may share a port.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((addr, 0))
    port = sock.getsockname()[1]
    if mode == "refuse":
        # Bound but not listening: Linux answers a SYN with RST, and the number stays ours. (Closing
        # it let the next listener draw the same port, and the policy then named one port twice.)
        HELD.append(sock)
        return port
    sock.listen(128)

    def accept_loop() -> None:
        while True:
            conn, _ = sock.accept()
            events.note(f"{name} accept")
            threading.Thread(
                target=serve_one, args=(conn, name, mode, tls, events), daemon=True
            ).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    return port


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", required=True)
    p.add_argument("--ready", required=True)
    p.add_argument("--cert")
    p.add_argument("--key")
    p.add_argument("listeners", nargs="+", metavar="NAME=MODE[@ADDR][+tls]")
    args = p.parse_args()
    events = Events(args.events)
    tls_ctx = None
    if args.cert:
        tls_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        tls_ctx.load_cert_chain(args.cert, args.key)
        tls_ctx.set_alpn_protocols(["http/1.1"])
    ports = {}
    for spec in args.listeners:
        name, _, rest = spec.partition("=")
        use_tls = rest.endswith("+tls")
        rest = rest.removesuffix("+tls")
        mode, _, addr = rest.partition("@")
        if mode not in MODES or not name:
            p.error(f"bad listener {spec!r}")
        if use_tls and tls_ctx is None:
            p.error(f"{spec}: +tls needs --cert and --key")
        ports[name] = listen(name, mode, addr or "127.0.0.1", tls_ctx if use_tls else None, events)
    tmp = args.ready + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(ports, f)
    os.rename(tmp, args.ready)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
