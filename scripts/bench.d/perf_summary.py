#!/usr/bin/env python3
"""Summarises a `perf record --call-graph dwarf` profile of fenzi by what the time was spent on.

    perf_summary.py PERF_DATA [--folded OUT]

Reads `perf script`, and prints: CPU per thread kind; then, for a fixed list of buckets (audit writer,
policy/JSON classification, TLS record crypto, HTTP/1 parsing, allocator, socket syscalls, epoll and
futex wake-ups, ...), the share of samples with a frame in that bucket anywhere on the stack
(inclusive, so rows overlap) and the share whose innermost matching bucket it is (exclusive, so rows
add up to 100%). With --folded it also writes folded stacks (flamegraph.pl / inferno input).
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys

# (bucket, regex on a frame's symbol). Exclusive attribution walks each stack from the leaf up and
# takes the first frame that matches any bucket, so put narrow buckets before the wide ones they sit in.
BUCKETS = [
    ("audit: record hashing (sha256)", r"sha2::|sha256|Sha256"),
    ("audit: record to JSON line", r"fenzi_policy::audit::(to_line|escape|format_timestamp)|AuditEntry>::into_record"),
    ("audit: write(2)/fdatasync/head", r"audit_writer::Syncer>::(sync|write_head)|fdatasync|\bfsync\b|renameat"),
    ("audit: append and sync thread other", r"audit_writer::(Shared|Syncer)>::"),
    ("policy: strict JSON parse", r"fenzi_policy::json::"),
    ("policy: MCP classify (rest)", r"fenzi_policy::mcp::|fenzi_policy::engine::"),
    ("TLS: record crypto (AES-GCM/ChaCha)", r"aes_gcm|aes_hw|gcm_|chacha|poly1305|ring_core_.*(aes|gcm|chacha)"),
    ("TLS: handshake (ECDHE/ECDSA/cert)", r"p256|ecdsa|x25519|curve25519|ecp_nistz|webpki::|rcgen::|ring::ec::|bn_mul|LIMBS_|ring_core_.*(p256|ecp|x25519|nistz)"),
    ("TLS: transcript hash/HKDF (SHA-384/512)", r"sha512|hkdf|hmac|ring::digest"),
    ("TLS: rustls framing/buffers", r"rustls::"),
    ("HTTP/1: hyper parse/encode", r"hyper::proto::h1::(role|encode|decode|io)|httparse::"),
    ("HTTP: headers/hop-by-hop", r"http::header::|strip_hop_by_hop|checked_authority"),
    ("alloc: malloc/free", r"^(malloc|free|cfree|realloc|calloc|_int_malloc|_int_free|_int_realloc|malloc_consolidate|__libc_(malloc|free|calloc|realloc)|tcache|unlink_chunk|_?mi_[a-z_]+)"),
    ("memcpy/memmove", r"memmove|memcpy|memset"),
    ("kernel: futex (thread wake/park)", r"futex"),
    ("kernel: epoll", r"epoll|ep_poll|ep_send_events"),
    ("kernel: file write/sync (audit)", r"ext4_|generic_perform_write|jbd2|file_write_and_wait|filemap_"),
    ("kernel: TCP send (incl. loopback delivery)", r"tcp_sendmsg|__sys_sendto|sock_sendmsg|sock_write_iter|tcp_write_xmit"),
    ("kernel: TCP receive", r"tcp_recvmsg|__sys_recvfrom|sock_recvmsg|sock_read_iter"),
    ("kernel: scheduler/context switch", r"\bschedule|finish_task_switch|__switch_to|pick_next|try_to_wake_up|enqueue_task|dequeue_task"),
    # Wide buckets: used for exclusive time only when no narrow bucket matches anywhere on the stack.
    ("tokio: scheduler/timers/io driver", r"tokio::runtime::|tokio::time::"),
    ("fenzi proxy code", r"fenzi_proxy::"),
    ("kernel: other syscalls/irq", r"\[k\]|do_syscall_64|entry_SYSCALL|irq|softirq"),
]
GENERIC = {"tokio: scheduler/timers/io driver", "fenzi proxy code", "kernel: other syscalls/irq"}
COMPILED = [(name, re.compile(rx)) for name, rx in BUCKETS]


def samples(data: str):
    out = subprocess.run(["perf", "script", "-i", data, "-F", "comm,tid,period,ip,sym,dso"],
                         capture_output=True, text=True, errors="replace")
    comm, frames = None, []
    for line in out.stdout.splitlines():
        if not line.strip():
            if comm is not None:
                yield comm, frames
            comm, frames = None, []
            continue
        if not line.startswith((" ", "\t")):
            comm = line.split()[0]
            frames = []
            continue
        # "   ffffffff8120 symbol+0x12 (dso)"
        parts = line.strip().split(" ", 1)
        sym = parts[1] if len(parts) > 1 else "?"
        dso = ""
        m = re.match(r"(.*) \((.*)\)$", sym)
        if m:
            sym, dso = m.group(1), m.group(2)
        sym = re.sub(r"\+0x[0-9a-f]+$", "", sym)
        if "kernel" in dso or dso.startswith("[k"):
            sym = "[k] " + sym
        frames.append(sym)
    if comm is not None:
        yield comm, frames


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("data")
    p.add_argument("--folded")
    args = p.parse_args()

    total = 0
    by_comm = collections.Counter()
    incl = collections.Counter()
    excl = collections.Counter()
    folded = collections.Counter()
    for comm, frames in samples(args.data):
        total += 1
        kind = "tokio worker" if comm.startswith("tokio") else comm
        by_comm[kind] += 1
        seen = set()
        first = None
        first_generic = None
        for sym in frames:  # leaf first
            for name, rx in COMPILED:
                if rx.search(sym):
                    seen.add(name)
                    if name in GENERIC:
                        first_generic = first_generic or name
                    elif first is None:
                        first = name
                    break
        first = first or first_generic
        for name in seen:
            incl[name] += 1
        excl[first or "other (user space, unmatched)"] += 1
        if args.folded:
            folded[";".join([kind] + list(reversed(frames)))] += 1
    if not total:
        print("no samples", file=sys.stderr)
        return 1
    print(f"{total} samples")
    print("\nby thread:")
    for k, v in by_comm.most_common():
        print(f"  {100 * v / total:5.1f}%  {k}")
    print(f"\n{'bucket':<40} {'inclusive':>9} {'exclusive':>9}")
    for name, _ in BUCKETS + [("other (user space, unmatched)", None)]:
        if incl[name] or excl[name]:
            print(f"{name:<40} {100 * incl[name] / total:8.1f}% {100 * excl[name] / total:8.1f}%")
    if args.folded:
        with open(args.folded, "w") as f:
            for stack, n in folded.most_common():
                f.write(f"{stack} {n}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
