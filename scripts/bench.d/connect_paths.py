"""Runs inside `fenzi run`: the cost of one new connection plus one HTTP request to an allowed
literal, by the two ways a sandboxed program can get out.

  proxy        CONNECT through the proxy variable's address, then GET in the tunnel (what curl,
               Python and Node 24 do)
  transparent  a plain TCP connection to the address itself, caught by the sandbox's transparent
               path, then GET (what programs that ignore the proxy variables do)

Both go through fenzi's admission and leave one CONNECT record; the upstream is the same. Rounds
alternate between the two. Prints one line per path: connections, p50 and p99 in milliseconds.

Usage: python3 connect_paths.py HOST PORT PROXY_HOST PROXY_PORT [--count N] [--rounds R]
"""
import argparse
import socket
import statistics
import time


def request(sock: socket.socket, host: str, port: int) -> None:
    sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}:{port}\r\nConnection: close\r\n\r\n".encode())
    while sock.recv(65536):
        pass


def via_proxy(host: str, port: int, proxy: tuple) -> None:
    with socket.create_connection(proxy) as sock:
        sock.sendall(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = sock.recv(4096)
            if not chunk:
                raise RuntimeError("the proxy closed the connection")
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError(f"CONNECT refused: {head.splitlines()[0]!r}")
        request(sock, host, port)


def transparent(host: str, port: int, _proxy: tuple) -> None:
    with socket.create_connection((host, port)) as sock:
        request(sock, host, port)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("host")
    p.add_argument("port", type=int)
    p.add_argument("proxy_host")
    p.add_argument("proxy_port", type=int)
    p.add_argument("--count", type=int, default=300)
    p.add_argument("--rounds", type=int, default=4)
    a = p.parse_args()
    proxy = (a.proxy_host, a.proxy_port)
    times = {"proxy": [], "transparent": []}
    for _ in range(a.rounds):
        for name, run in (("proxy", via_proxy), ("transparent", transparent)):
            for _ in range(a.count):
                start = time.perf_counter()
                run(a.host, a.port, proxy)
                times[name].append((time.perf_counter() - start) * 1000)
    for name, samples in times.items():
        samples.sort()
        p99 = samples[int(len(samples) * 0.99) - 1]
        print(f"{name:<12} {len(samples):>6} connections  p50 {statistics.median(samples):.3f} ms  p99 {p99:.3f} ms")


if __name__ == "__main__":
    main()
