#!/usr/bin/env python3
"""What one intercepted MCP `tools/call` costs each proxy thread: CPU, context switches and (with
--strace) system calls per call, for one or more fenzi builds side by side in alternating rounds.

    scripts/bench --per-call [--calls 40000] [--connections 32] [--rounds 2] [--strace] [--perf]
                             [--floor] [--wakes] [--kernel] [LABEL=FENZI_BINARY ...]

Run through `scripts/bench`, which installs oha and the venv and builds fenzi, `bench_upstream` and
`floor_proxy`. Without binaries it measures the build `scripts/bench` made (label `fenzi`); with
--floor also proxy/examples/floor_proxy.rs (the same two TLS hops with no policy). Each run starts the
upstream and a fresh proxy (audit log on, in the work directory), warms up with 500 calls, reads
/proc/PID/task/*/stat and status before and after `oha -n CALLS -c CONNECTIONS`, and prints per
thread: CPU per call (user + system), voluntary and involuntary switches per call. --strace adds one
more run of each under `strace -f -c` (slow: its per-call counts are what matters, not its times).
--perf adds one more run of each under `perf record` (no call graph) and prints the functions with the
most CPU of their own, in microseconds per call. --phases adds one more run of each under `perf record
--call-graph dwarf` and files every sample of the shard threads under the first phase of the call
(PHASES, in order) that its stack passes through: the profile of the intercepted path by phase. --callgrind adds one more run of each under valgrind's
callgrind (--callgrind-calls calls, one connection, counted after the warm-up) and prints the
instructions per call in user space and the functions with the most of their own: unlike times,
these counts repeat from run to run on this VM (no hardware counters here), so they tell a change of
a few percent from noise. --wakes adds one more run of each under a system-wide scheduler trace (`perf
record -a -e sched:sched_waking,sched:sched_switch`) and prints, for every hand-over between the load
generator, the proxy and the upstream, how often it happens per call and how long the woken thread
waited to run, apart for a thread woken on the waker's CPU and on the other one: at one connection
most of a call's latency is these waits, not any process's work (docs/benchmarks.md, round six).
--kernel adds one more run of each under `perf stat -a` and prints what the kernel did per call on
the whole machine (KERNEL_EVENTS: interprocessor interrupts, timers armed and cancelled, wake-ups,
switches, migrations; the half second before the calls is counted too): on a VM each interrupt
sent and each timer reprogrammed may be an exit to the host, a cost no process's own profile shows
(docs/benchmarks.md, round seven).
The numbers are this machine's, side by side in one run; compare builds, not machines.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import first_line  # noqa: E402  (waits for a process's line, naming its stderr if not)

TICK = os.sysconf("SC_CLK_TCK")

# The phases of an intercepted call, as frames its stack passes through (`--phases`). A sample goes
# to the first phase in this order that any of its frames names, so a phase inside another (the
# audit write inside the decision) comes first; the last takes what is left.
PHASES = [
    ("audit record: SHA-256 of the line", ["line_hash"]),
    ("audit record: write(2)", ["write_line"]),
    ("audit record: fields, line, lock", ["SessionContext::record"]),
    ("request: strict JSON parse", ["parse_to_depth", "json::parse"]),
    ("request: MCP classification and rules", ["mcp_enforce::classify"]),
    ("request: secrets check", ["secrets::"]),
    ("request: decide, other (records' entries, limits)", ["decide::decide"]),
    ("request: body read", ["request_body"]),
    ("upstream send (pool, hyper's client dispatch, timer)", ["upstream::Upstream"]),
    ("response: strict read", ["mcp_response"]),
    ("response: head, scrub check, body wrapping", ["response::finish"]),
    ("request phases, other (head, future moves)", ["exchange::phases", "exchange::exchange"]),
    ("tunnel checks (authority, SNI)", ["Tunnel::check", "Tunnel::handle"]),
    ("upstream hop: hyper client, rustls, socket I/O", ["upstream::handshake"]),
    ("client hop: hyper server, rustls, socket I/O", ["serve_h1", "intercept::serve"]),
    ("tokio, epoll, scheduler, other", []),
]


# What `--kernel` counts, machine-wide, per call.
KERNEL_EVENTS = [
    "irq_vectors:call_function_single_entry",  # an interprocessor interrupt received (a remote wake-up)
    "irq_vectors:reschedule_entry",
    "irq_vectors:local_timer_entry",
    "timer:hrtimer_start",
    "timer:hrtimer_cancel",  # e.g. a sleep with a timeout that ended early
    "sched:sched_wakeup",
    "sched:sched_switch",
    "sched:sched_migrate_task",
]


def threads(pid: int) -> dict[str, list[int]]:
    """Per thread (named `comm#tid-order`): [cpu ticks, voluntary, involuntary switches]."""
    out = {}
    tasks = sorted(Path(f"/proc/{pid}/task").iterdir(), key=lambda p: int(p.name))
    for i, task in enumerate(tasks):
        try:
            comm = (task / "comm").read_text().strip()
            stat = (task / "stat").read_text().rsplit(")", 1)[1].split()
            status = (task / "status").read_text()
        except FileNotFoundError:
            continue
        v = int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
        nv = int(re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", status, re.M).group(1))
        out[f"{comm}#{i}"] = [int(stat[11]) + int(stat[12]), v, nv]
    return out


class Run:
    def __init__(self, args, work: Path, certs: Path, mcp_port: int, upstream_pid: int):
        self.args, self.work, self.certs, self.mcp = args, work, certs, mcp_port
        self.upstream_pid = upstream_pid
        # The process id of the last `oha` run (the load generator, for --wakes).
        self.load_pid = 0

    def start(self, label: str, binary: str, wrapper: list[str] | None = None,
              connections: int | None = None) -> tuple[subprocess.Popen, list[str]]:
        """Starts one proxy (under `wrapper`, e.g. valgrind, if given); returns it and the oha
        arguments that reach the upstream through it."""
        wrapper = wrapper or []
        wait = 120.0 if wrapper else 30.0
        out, err = self.work / f"{label}.out", self.work / f"{label}.err"
        common = ["--no-tui", "--ipv4", "-c", str(connections or self.args.connections), "-m", "POST",
                  "-D", str(self.work / "call.json"), "-T", "application/json",
                  "-H", "Accept: application/json, text/event-stream"]
        if label == "floor":
            p = subprocess.Popen([*wrapper, binary, "--cert", str(self.certs / "server.pem"),
                                  "--key", str(self.certs / "server-key.pem"),
                                  "--ca", str(self.certs / "test-ca.pem"), "--upstream", str(self.mcp)],
                                 stdout=open(out, "w"), stderr=open(err, "w"))
            port = first_line(out, r"listening on 127\.0\.0\.1:(\d+)", p, wait).group(1)
            return p, common + ["--cacert", str(self.certs / "test-ca.pem"), f"https://127.0.0.1:{port}/mcp"]
        audit = self.work / f"{label}.jsonl"
        for stale in self.work.glob(f"{label}.jsonl*"):
            stale.unlink()
        ca = self.work / f"{label}-ca"
        p = subprocess.Popen([*wrapper, binary, "proxy", "--config", str(self.work / "fenzi.yaml"), "--no-machine",
                              "--listen", "127.0.0.1:0", "--audit", str(audit), "--ca-dir", str(ca),
                              "--upstream-ca", str(self.certs / "test-ca.pem"), "--drain-timeout", "1s"],
                             stdout=open(out, "w"), stderr=open(err, "w"),
                             env=dict(os.environ, XDG_CONFIG_HOME=str(self.work / "xdg"),
                                      XDG_STATE_HOME=str(self.work / "xdg")))
        port = first_line(out, r"^listening on 127\.0\.0\.1:(\d+)$", p, wait).group(1)
        return p, common + ["-x", f"http://127.0.0.1:{port}", "--cacert", str(ca / "ca.pem"),
                            f"https://127.0.0.1:{self.mcp}/mcp"]

    def oha(self, argv: list[str], calls: int) -> dict:
        load = subprocess.Popen([self.args.oha, "-n", str(calls), "--output-format", "json", *argv],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.load_pid = load.pid
        stdout, stderr = load.communicate(timeout=600)
        if load.returncode != 0:
            raise SystemExit(f"per-call: oha failed: {stderr[-1000:]}")
        data = json.loads(stdout)
        ok = sum(n for code, n in data["statusCodeDistribution"].items() if code == "200")
        if ok != calls:
            raise SystemExit(f"per-call: {calls - ok} of {calls} calls were not answered 200: {data['statusCodeDistribution']}")
        return data

    def measure(self, label: str, binary: str) -> dict:
        p, argv = self.start(label, binary)
        try:
            self.oha(argv, 500)
            time.sleep(float(os.environ.get("PER_CALL_SETTLE", "0")))
            before = threads(p.pid)
            data = self.oha(argv, self.args.calls)
            after = threads(p.pid)
        finally:
            p.terminate()
            p.wait(timeout=30)
        n = self.args.calls
        per = {}
        for name, (cpu, v, nv) in after.items():
            c0, v0, nv0 = before.get(name, [0, 0, 0])
            if (cpu - c0, v - v0, nv - nv0) != (0, 0, 0):
                per[name] = ((cpu - c0) * 1e6 / TICK / n, (v - v0) / n, (nv - nv0) / n)
        return {"rps": data["summary"]["requestsPerSec"], "p50_ms": data["latencyPercentiles"]["p50"] * 1000,
                "cpu_us": sum(x[0] for x in per.values()), "threads": per}

    def traced(self, label: str, binary: str, tracer: list[str], calls: int, stop: signal.Signals,
               system_wide: bool = False) -> int:
        """`calls` through a fresh proxy, warmed up first, with `tracer -p PID` attached to it (or
        `tracer -a`, the whole system) for the measured calls only; `stop` ends the tracer (it
        writes its own output file). Returns the proxy's process id."""
        p, argv = self.start(label, binary)
        try:
            self.oha(argv, 500)
            target = ["-a"] if system_wide else ["-p", str(p.pid)]
            t = subprocess.Popen([*tracer, *target], stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
            time.sleep(0.5)
            self.oha(argv, calls)
            t.send_signal(stop)
            t.wait(timeout=60)
        finally:
            p.terminate()
            p.wait(timeout=30)
        return p.pid

    def perf(self, label: str, binary: str, top: int = 30) -> list[tuple[str, float]]:
        """Self CPU per call (us) of the `top` busiest symbols, from `perf record -F 4999`."""
        data = self.work / f"{label}.perf.data"
        freq = 4999
        self.traced(label, binary, ["perf", "record", "-q", "-F", str(freq), "-o", str(data)],
                    self.args.calls, signal.SIGINT)
        report = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--sort", "sym",
                                 "--stdio", "-F", "sample,sym"], capture_output=True, text=True).stdout
        rows = []
        for line in report.splitlines():
            f = line.split(None, 1)
            if len(f) == 2 and f[0].isdigit():
                sym = re.sub(r"^\[[.k]\]\s*", "", f[1].strip())
                rows.append((sym, int(f[0]) / freq * 1e6 / self.args.calls))
        return sorted(rows, key=lambda r: -r[1])[:top]

    def callgrind(self, label: str, binary: str, calls: int, top: int = 30) -> tuple[float, list[tuple[str, float]]]:
        """User-space instructions per call (all threads) and the `top` functions by their own
        instructions per call, under callgrind; counting starts after a warm-up."""
        out = self.work / f"{label}.callgrind"
        out.unlink(missing_ok=True)
        p, argv = self.start(label, binary, ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"], 1)
        try:
            self.oha(argv, 200)
            subprocess.run(["callgrind_control", "-z", str(p.pid)], check=True, capture_output=True)
            self.oha(argv, calls)
            subprocess.run(["callgrind_control", "-d", str(p.pid)], check=True, capture_output=True)
        finally:
            p.terminate()
            p.wait(timeout=60)
        # The dump taken after the measured calls is the first with a number after it.
        dumps = sorted((f for f in self.work.glob(f"{label}.callgrind.*") if f.suffix[1:].isdigit()),
                       key=lambda f: int(f.suffix[1:]))
        if not dumps:
            raise SystemExit(f"per-call: callgrind wrote no dump for {label}")
        kept = self.work / f"{label}.callgrind.out"
        dumps[0].replace(kept)
        for stale in [out, *dumps[1:]]:
            stale.unlink(missing_ok=True)
        report = subprocess.run(["callgrind_annotate", "--inclusive=no", "--tree=none", "--threshold=100", str(kept)],
                                capture_output=True, text=True, check=True).stdout
        total, rows = 0.0, []
        for line in report.splitlines():
            m = re.match(r"^\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(.*)$", line)
            if not m:
                continue
            n, what = int(m.group(1).replace(",", "")) / calls, m.group(2).strip()
            if what.startswith("PROGRAM TOTALS"):
                total = n
            elif what and not what.startswith(("file:function", "events annotated", "=>", "*")):
                rows.append((re.sub(r"^\S+?:(?=[^/])", "", what, count=1) if ":" in what else what, n))
        # The threads' roots (start_thread, the runtime's block_on) count everything below them.
        return total, sorted((r for r in rows if r[1] < total / 2), key=lambda r: -r[1])[:top]

    def phases(self, label: str, binary: str) -> tuple[float, list[tuple[str, float]], dict[str, float]]:
        """The shard threads' samples filed by phase (PHASES), in microseconds per call: the CPU per
        call of a run without the profiler, shared out as the profiled run's samples are."""
        data = self.work / f"{label}.phases.data"
        # Enough samples that a phase of a few percent is not a handful of them.
        calls = max(self.args.calls // 2, 10000)
        self.traced(label, binary, ["perf", "record", "-q", "--call-graph", "dwarf,16384", "-F", "1999",
                                    "-o", str(data)], calls, signal.SIGINT)
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "comm,ip,sym", "--inline"],
                                capture_output=True, text=True).stdout
        data.unlink(missing_ok=True)
        counts: dict[str, int] = {}
        threads: dict[str, int] = {}
        for sample in script.split("\n\n"):
            lines = [line.strip() for line in sample.strip().splitlines() if line.strip()]
            if not lines:
                continue
            thread = lines[0].split()[0]
            threads[thread] = threads.get(thread, 0) + 1
            if not thread.startswith("fenzi-shard"):
                continue
            frames = lines[1:]
            phase = next(name for name, marks in PHASES if not marks or any(m in f for f in frames for m in marks))
            counts[phase] = counts.get(phase, 0) + 1
        total = sum(threads.values()) or 1
        cpu = self.measure(label, binary)["cpu_us"]
        rows = [(name, counts.get(name, 0) / total * cpu) for name, _ in PHASES]
        return cpu, rows, {t: n / total * cpu for t, n in threads.items()}

    def wakes(self, label: str, binary: str) -> tuple[int, list[tuple[str, float, float]]]:
        """Calls traced, and per hand-over (`waker -> woken, same/other CPU`): wakes per call and the
        median microseconds from the wake to the woken thread running, from a system-wide trace of
        the scheduler during `calls` calls (after a warm-up)."""
        data = self.work / f"{label}.wakes.data"
        calls = max(self.args.calls // 10, 2000)
        proxy = self.traced(label, binary, ["perf", "record", "-q", "-e", "sched:sched_waking,sched:sched_switch",
                                            "-o", str(data)], calls, signal.SIGINT, system_wide=True)
        roles = {proxy: "proxy", self.upstream_pid: "upstream", self.load_pid: "load generator"}
        script = subprocess.run(["perf", "script", "-i", str(data), "-F", "pid,tid,cpu,time,event,trace"],
                                capture_output=True, text=True).stdout
        data.unlink(missing_ok=True)
        event = re.compile(r"^\s*(\d+)/(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(sched_waking|sched_switch):\s*(.*)$")
        lines = [m.groups() for m in map(event.match, script.splitlines()) if m]
        # A thread's process: every thread is the current one in some event of its own.
        process = {int(tid): int(pid) for pid, tid, *_ in lines}

        def role(tid: int) -> str | None:
            return roles.get(process.get(tid, -1))

        waking: dict[int, tuple[float, int, str]] = {}
        waits: dict[str, list[float]] = {}
        for pid, tid, cpu, t, kind, rest in lines:
            if kind == "sched_waking":
                woken = int(re.search(r"\bpid=(\d+)", rest).group(1))
                waker = roles.get(int(pid))
                if waker and role(woken):
                    waking[woken] = (float(t), int(cpu), waker)
            else:
                woken = int(re.search(r"next_pid=(\d+)", rest).group(1))
                if woken in waking:
                    t0, waker_cpu, waker = waking.pop(woken)
                    where = "same CPU" if int(cpu) == waker_cpu else "other CPU"
                    waits.setdefault(f"{waker} -> {role(woken)}, {where}", []).append((float(t) - t0) * 1e6)
        rows = [(name, len(v) / calls, sorted(v)[len(v) // 2]) for name, v in waits.items()]
        return calls, sorted(rows, key=lambda r: -r[1] * r[2])

    def kernel(self, label: str, binary: str) -> tuple[int, list[tuple[str, float]]]:
        """Calls counted, and per KERNEL_EVENTS event its count per call on the whole machine
        (`perf stat -a`) during `calls` calls (after a warm-up)."""
        out = self.work / f"{label}.kernel.csv"
        calls = max(self.args.calls // 4, 2000)
        self.traced(label, binary, ["perf", "stat", "-x,", "-o", str(out), "-e", ",".join(KERNEL_EVENTS)],
                    calls, signal.SIGINT, system_wide=True)
        rows = []
        for line in out.read_text().splitlines():
            f = line.split(",")
            if len(f) > 2 and f[0].strip().isdigit():
                rows.append((f[2], int(f[0]) / calls))
        out.unlink(missing_ok=True)
        return calls, rows

    def strace(self, label: str, binary: str) -> list[tuple[str, float]]:
        out = self.work / f"{label}.strace"
        calls = max(self.args.calls // 10, 1000)
        self.traced(label, binary, ["strace", "-f", "-c", "-o", str(out)], calls, signal.SIGTERM)
        rows = []
        for line in out.read_text().splitlines():
            f = line.split()
            if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
                rows.append((f[-1], int(f[3]) / calls))
        return sorted(rows, key=lambda r: -r[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fenzi", required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--oha", required=True)
    p.add_argument("--floor-binary", required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--calls", type=int, default=40000)
    p.add_argument("--connections", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--strace", action="store_true")
    p.add_argument("--perf", action="store_true")
    p.add_argument("--phases", action="store_true")
    p.add_argument("--floor", action="store_true")
    p.add_argument("--callgrind", action="store_true")
    p.add_argument("--wakes", action="store_true")
    p.add_argument("--kernel", action="store_true")
    p.add_argument("--callgrind-calls", type=int, default=2000)
    p.add_argument("builds", nargs="*", metavar="LABEL=FENZI_BINARY")
    args = p.parse_args()

    contenders = [tuple(b.split("=", 1)) for b in args.builds] or [("fenzi", args.fenzi)]
    if args.floor:
        contenders.append(("floor", args.floor_binary))
    work = args.work / "per-call"
    work.mkdir(parents=True, exist_ok=True)
    certs = work / "certs"
    subprocess.run([args.python, str(ROOT / "testdata/e2e/gen_certs.py"), str(certs)], check=True)
    (work / "call.json").write_text(json.dumps({
        "jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "echo", "arguments": {"text": "x" * 900}}}))
    up_out = work / "upstream.out"
    up = subprocess.Popen([args.upstream, "--cert", str(certs / "server.pem"), "--key", str(certs / "server-key.pem"),
                           "--download-bytes", "1000"], stdout=open(up_out, "w"), stderr=subprocess.STDOUT)
    try:
        mcp = int(first_line(up_out, r"mcp=(\d+)", up).group(1))
        (work / "fenzi.yaml").write_text(
            f"version: 1\nmcp:\n  bench:\n    url: https://127.0.0.1:{mcp}/mcp\n    tools:\n      allow: [echo]\n")
        run = Run(args, work, certs, mcp, up.pid)
        results: dict[str, list[dict]] = {label: [] for label, _ in contenders}
        for r in range(args.rounds):
            for label, binary in (contenders if r % 2 == 0 else contenders[::-1]):
                res = run.measure(label, binary)
                results[label].append(res)
                print(f"per-call: round {r + 1} {label:<12} {res['rps']:>8.0f} req/s  p50 {res['p50_ms']:.3f} ms"
                      f"  {res['cpu_us']:.1f} us CPU/call", file=sys.stderr)
        print(f"\n{args.calls} tools/call over {args.connections} connection(s), {args.rounds} rounds; "
              "per call, median of rounds (CPU in us; switches voluntary / involuntary)")
        for label, rounds in results.items():
            mid = sorted(rounds, key=lambda x: x["cpu_us"])[len(rounds) // 2]
            print(f"\n{label}: {mid['rps']:.0f} req/s, p50 {mid['p50_ms']:.3f} ms, {mid['cpu_us']:.1f} us CPU/call "
                  f"(rounds: {', '.join(format(x['cpu_us'], '.1f') for x in rounds)})")
            for name, (cpu, v, nv) in sorted(mid["threads"].items(), key=lambda kv: -kv[1][0]):
                print(f"  {name.split('#')[0]:<20} {cpu:7.1f} us  {v:5.2f} / {nv:5.2f}")
        if args.strace:
            for label, binary in contenders:
                print(f"\n{label}: system calls per call (strace -f -c)")
                for name, per in run.strace(label, binary)[:12]:
                    print(f"  {name:<16} {per:6.2f}")
        if args.perf:
            for label, binary in contenders:
                print(f"\n{label}: own CPU per call of the busiest functions (perf record, us; "
                      "the run under perf is slower)")
                for name, per in run.perf(label, binary):
                    print(f"  {per:6.2f}  {name[:110]}")
        if args.phases:
            for label, binary in contenders:
                cpu, rows, threads = run.phases(label, binary)
                print(f"\n{label}: {cpu:.1f} us CPU per call, by phase (perf --call-graph dwarf, each shard "
                      "sample under the first phase its stack passes through; other threads by name):")
                for name, per in rows:
                    print(f"  {per:6.2f}  {name}")
                for thread, per in sorted(threads.items(), key=lambda kv: -kv[1]):
                    if not thread.startswith("fenzi-shard"):
                        print(f"  {per:6.2f}  thread {thread}")
        if args.wakes:
            for label, binary in contenders:
                calls, rows = run.wakes(label, binary)
                print(f"\n{label}: hand-overs per call and the woken thread's wait to run (median), "
                      f"{calls} calls on {args.connections} connection(s), system-wide scheduler trace:")
                for name, per, wait in rows:
                    if per >= 0.05:
                        print(f"  {per:5.2f} per call  {wait:6.1f} us  {name}")
        if args.kernel:
            for label, binary in contenders:
                calls, rows = run.kernel(label, binary)
                print(f"\n{label}: the kernel's events per call on the whole machine (perf stat -a), "
                      f"{calls} calls on {args.connections} connection(s):")
                for name, per in rows:
                    print(f"  {per:7.2f}  {name}")
        if args.callgrind:
            for label, binary in contenders:
                total, rows = run.callgrind(label, binary, args.callgrind_calls)
                print(f"\n{label}: {total:,.0f} instructions per call in user space, all threads "
                      f"(callgrind, {args.callgrind_calls} calls on one connection; the dump is "
                      f"{run.work / (label + '.callgrind.out')}); the functions with the most of their own:")
                for name, per in rows:
                    print(f"  {per:9,.0f}  {name[:110]}")
    finally:
        up.terminate()
        up.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
