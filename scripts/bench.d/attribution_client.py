"""The client side of scripts/bench-attribution, run inside `fenzi run`: the cost of a new
connection (TCP connect to the proxy, CONNECT, its 200) and of a request on an open one
(absolute-form GET on one keep-alive connection), each timed here, in the sandbox.

Usage: attribution_client.py HOST:PORT CONNECTIONS REQUESTS
Prints one JSON object: microsecond samples' median and p90 for each.
"""

import json
import os
import socket
import sys
import time
import urllib.parse


def proxy():
    url = urllib.parse.urlsplit(os.environ["HTTP_PROXY"])
    return url.hostname, url.port


def read_head(sock):
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(4096)
        if not chunk:
            raise SystemExit("the proxy closed the connection")
        data += chunk
    return data


def new_connections(target, n):
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        s = socket.create_connection(proxy())
        s.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
        head = read_head(s)
        samples.append((time.perf_counter_ns() - start) / 1000)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"CONNECT refused: {head[:80]!r}")
        s.close()
    return samples


def requests_on_one_connection(target, n):
    s = socket.create_connection(proxy())
    request = f"GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n".encode()
    samples = []
    for _ in range(n):
        start = time.perf_counter_ns()
        s.sendall(request)
        head = read_head(s)
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        body = head.split(b"\r\n\r\n", 1)[1]
        while len(body) < length:
            body += s.recv(4096)
        samples.append((time.perf_counter_ns() - start) / 1000)
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"GET refused: {head[:80]!r}")
    s.close()
    return samples


def summary(samples):
    samples = sorted(samples)
    return {
        "median_us": round(samples[len(samples) // 2], 1),
        "p90_us": round(samples[int(len(samples) * 0.9)], 1),
        "n": len(samples),
    }


target, connections, requests = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
new_connections(target, 20)  # warm up: the first connection hashes the interpreter
print(
    json.dumps(
        {
            "new_connection": summary(new_connections(target, connections)),
            "request_on_open_connection": summary(requests_on_one_connection(target, requests)),
        }
    ),
    flush=True,
)
