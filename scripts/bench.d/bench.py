#!/usr/bin/env python3
"""Runs fenzi's benchmark scenarios; `scripts/bench` installs the tools and builds, then calls this.

Every scenario runs its contenders side by side in one run, alternating (round 1 in order, round 2
reversed, ...), for a fixed time each, so ratios hold on a noisy machine. Load comes from oha; the
upstream is `bench_upstream` (a hyper server); the proxies are `fenzi proxy` (release build, audit log
on), tinyproxy (Debian) and mitmdump (PyPI). Each contender's numbers: requests/s, p50, p99 (oha); the
proxy's peak RSS during the run (VmHWM after resetting it through /proc/PID/clear_refs, and VmRSS
sampled every 50 ms); and the proxy's CPU time and thread context switches per answered request (from
/proc). Nothing here asserts: it prints a table, writes JSON, and says which targets of issue 6 were met.

The secret scenario runs only once `fenzi proxy` writes `placeholders.env`: the upstream answers 401 to
anything but the real token, so its req/s also proves the placeholder was swapped. `--compare` measures
other fenzi builds (or settings, with `--compare-env`) side by side with the main one; `--perf` adds a
profile of fenzi per scenario (perf_summary.py). Only stdlib. Run `bench.py --help` for the options.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import signal
import socket
import ssl
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent

# MCP server names in the bench policies; `bench-secret` has `token: true`, so its secret is named
# MCP_BENCH_SECRET (README, "Secrets").
SECRET_NAME = "MCP_BENCH_SECRET"
REAL_TOKEN = "bench-real-token-" + "r" * 40


def log(msg: str) -> None:
    print(f"bench: {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------------
# processes and memory


class Procs:
    """Every process this run started, stopped by pid (never by name) at the end."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self.started: list[subprocess.Popen] = []

    def start(self, name: str, argv: list[str], env: dict | None = None) -> subprocess.Popen:
        out = open(self.work / f"{name}.out", "wb")
        err = open(self.work / f"{name}.err", "wb")
        p = subprocess.Popen(
            argv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True
        )
        p.bench_name = name  # type: ignore[attr-defined]
        self.started.append(p)
        return p

    def stop(self, p: subprocess.Popen, timeout: float = 5.0) -> None:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p in self.started:
            self.started.remove(p)

    def stop_all(self) -> None:
        for p in list(reversed(self.started)):
            self.stop(p)


def first_line(path: Path, pattern: str, proc: subprocess.Popen, timeout: float = 30.0) -> re.Match:
    """Waits for a line matching `pattern` in `path` (the process's stdout)."""
    deadline = time.monotonic() + timeout
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        try:
            for line in path.read_text(errors="replace").splitlines():
                m = rx.search(line)
                if m:
                    return m
        except FileNotFoundError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    err = path.with_suffix(".err")
    detail = err.read_text(errors="replace")[-2000:] if err.exists() else ""
    raise RuntimeError(f"{path.stem} did not print /{pattern}/ (exit {proc.poll()}): {detail}")


def wait_port(port: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited ({proc.returncode}) before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


CLK_TCK = os.sysconf("SC_CLK_TCK")


def children(pid: int) -> list[int]:
    """The live child processes of `pid` (nginx's workers; fenzi proxy has none)."""
    kids = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(k) for k in f.read().split()]
    except (OSError, ValueError):
        pass
    return kids


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of `pid` (all its threads) and of its live children (a master process's
    workers), from /proc/PID/stat."""
    total = 0.0
    for i, p in enumerate([pid] + children(pid)):
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / CLK_TCK
        except (OSError, IndexError, ValueError):
            if i == 0:
                return None
    return total


def machine_ticks() -> tuple[int, int]:
    """All CPUs' busy and idle (idle + iowait) ticks so far, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields[:8]) - idle, idle


def context_switches(pid: int) -> int | None:
    """Voluntary + involuntary context switches of all of `pid`'s threads, and its live children's,
    so far."""
    total = 0
    for i, p in enumerate([pid] + children(pid)):
        try:
            for tid in os.listdir(f"/proc/{p}/task"):
                try:
                    with open(f"/proc/{p}/task/{tid}/status") as f:
                        for line in f:
                            if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                                total += int(line.split()[1])
                except OSError:
                    pass  # a thread that just ended
        except OSError:
            if i == 0:
                return None
    return total


def reset_hwm(pid: int) -> bool:
    """Resets VmHWM to the current RSS (Linux: `5` into clear_refs). False when not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


class PeakRss:
    """Peak RSS of `pid` over a `with` block: VmHWM (reset at entry) and VmRSS sampled every 50 ms;
    also the CPU time `pid` used in the block."""

    def __init__(self, pid: int | None) -> None:
        self.pid = pid
        self.peak: int | None = None
        self.start: int | None = None
        self.cpu: float | None = None
        self.switches: int | None = None
        self._stop = threading.Event()
        self._samples: list[int] = []

    def __enter__(self) -> "PeakRss":
        self._machine0 = machine_ticks()
        if self.pid is None:
            return self
        self.start = status_kib(self.pid, "VmRSS")
        self._hwm = reset_hwm(self.pid)
        self._cpu0 = cpu_seconds(self.pid)
        self._cs0 = context_switches(self.pid)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.is_set():
            v = status_kib(self.pid, "VmRSS")  # type: ignore[arg-type]
            if v is not None:
                self._samples.append(v)
            self._stop.wait(0.05)

    def __exit__(self, *exc) -> None:
        busy1, idle1 = machine_ticks()
        busy0, idle0 = self._machine0
        self.machine_busy = (busy1 - busy0) / CLK_TCK
        self.machine_idle = (idle1 - idle0) / CLK_TCK
        if self.pid is None:
            return
        self._stop.set()
        cpu1 = cpu_seconds(self.pid)
        if cpu1 is not None and self._cpu0 is not None:
            self.cpu = cpu1 - self._cpu0
        cs1 = context_switches(self.pid)
        if cs1 is not None and self._cs0 is not None:
            self.switches = cs1 - self._cs0
        self._thread.join()
        peaks = list(self._samples)
        if self._hwm:
            hwm = status_kib(self.pid, "VmHWM")
            if hwm is not None:
                peaks.append(hwm)
        self.peak = max(peaks) if peaks else None


# ---------------------------------------------------------------------------------------------------
# load


class Oha:
    def __init__(self, path: str, seconds: float, connections: int) -> None:
        self.path = path
        self.seconds = seconds
        self.connections = connections

    def run(self, url: str, *, proxy: int | None = None, cacert: Path | None = None,
            body: Path | None = None, headers: list[str] = (), keepalive: bool = True,
            seconds: float | None = None, out: Path | None = None,
            connections: int | None = None) -> dict:
        argv = [self.path, "--no-tui", "--output-format", "json", "-z", f"{seconds or self.seconds}s",
                "-c", str(connections or self.connections), "--ipv4"]
        if proxy is not None:
            argv += ["-x", f"http://127.0.0.1:{proxy}"]
        if cacert is not None:
            argv += ["--cacert", str(cacert)]
        if body is not None:
            argv += ["-m", "POST", "-D", str(body), "-T", "application/json"]
        for h in headers:
            argv += ["-H", h]
        if not keepalive:
            argv.append("--disable-keepalive")
        argv.append(url)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=(seconds or self.seconds) + 60)
        if out is not None:
            out.write_text(done.stdout + "\n--- stderr\n" + done.stderr)
        if done.returncode != 0:
            raise RuntimeError(f"oha failed ({done.returncode}): {done.stderr[-1000:]}")
        return summarize_oha(json.loads(done.stdout))


def summarize_oha(data: dict) -> dict:
    summary = data.get("summary", {})
    pct = data.get("latencyPercentiles", {})
    codes = {str(k): v for k, v in (data.get("statusCodeDistribution") or {}).items()}
    errors = {k: v for k, v in (data.get("errorDistribution") or {}).items()
              if "deadline" not in k.lower()}
    ok = codes.get("200", 0)
    bad = sum(v for k, v in codes.items() if k != "200") + sum(errors.values())
    ms = lambda v: None if v is None else v * 1000.0  # noqa: E731
    # req/s counts only 200s: a proxy that answers errors fast must not look fast.
    total = summary.get("total") or 0
    return {
        "rps": ok / total if total else 0.0,
        "p50_ms": ms(pct.get("p50")),
        "p99_ms": ms(pct.get("p99")),
        "ok": ok,
        "errors": bad,
        "error_kinds": dict(list({**{f"HTTP {k}": v for k, v in codes.items() if k != "200"},
                                   **errors}.items())[:5]),
    }


# ---------------------------------------------------------------------------------------------------
# the bench


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.work: Path = args.work
        self.procs = Procs(self.work)
        self.oha = Oha(args.oha, args.seconds, args.connections)
        self.results: dict = {"scenarios": {}, "idle": {}, "notes": []}
        self.pids: dict[str, int] = {}
        self.perf_files: list[str] = []

    # --- setup -------------------------------------------------------------------------------------

    def setup(self) -> None:
        certs = self.work / "certs"
        subprocess.run([self.args.python, str(ROOT / "testdata/e2e/gen_certs.py"), str(certs)],
                       check=True, stdout=subprocess.DEVNULL)
        self.upstream_ca = certs / "test-ca.pem"
        env = dict(os.environ, BENCH_BEARER=REAL_TOKEN)
        up = self.procs.start("upstream", [self.args.upstream, "--cert", str(certs / "server.pem"),
                                           "--key", str(certs / "server-key.pem"),
                                           "--download-bytes", str(self.args.download_mib << 20)], env)
        m = first_line(self.work / "upstream.out",
                       r"^ports http=(\d+) tls=(\d+) mcp=(\d+) mcp_secret=(\d+)$", up)
        self.port = dict(zip(["http", "tls", "mcp", "mcp_secret"], map(int, m.groups())))
        self.pids["upstream"] = up.pid

        # A 1 KiB tools/call body.
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                "params": {"name": "echo", "arguments": {"text": ""}}}
        text = json.dumps(call, separators=(",", ":"))
        call["params"]["arguments"]["text"] = "x" * (1024 - len(text))
        self.body = self.work / "tools-call-1k.json"
        self.body.write_text(json.dumps(call, separators=(",", ":")))
        assert self.body.stat().st_size == 1024
        # A tools/list request: the upstream answers 200 tools (about 93 KB), which fenzi reads and
        # filters (get_* and list_* are allowed: 80 kept, 120 hidden).
        self.list_body = self.work / "tools-list.json"
        self.list_body.write_text('{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}')

        (self.work / "fenzi.yaml").write_text(
            "version: 1\n"
            "hosts:\n"
            f'  - "127.0.0.1:{self.port["http"]}"\n'
            f'  - "127.0.0.1:{self.port["tls"]}"\n'
            "mcp:\n"
            "  bench:\n"
            f"    url: https://127.0.0.1:{self.port['mcp']}/mcp\n"
            "    tools:\n"
            '      allow: [echo, "get_*", "list_*"]\n')
        (self.work / "fenzi-secret.yaml").write_text(
            "version: 1\n"
            "mcp:\n"
            "  bench-secret:\n"
            f"    url: https://127.0.0.1:{self.port['mcp_secret']}/mcp\n"
            "    token: true\n"
            "    tools:\n"
            "      allow: [echo]\n")

        self.fenzi = self.start_fenzi("fenzi", "fenzi.yaml")
        # Other builds (or settings) of fenzi, measured side by side with the main one.
        self.alts = []
        for spec in self.args.compare:
            label, path = spec.split("=", 1)
            env = [kv.split("=", 1)[1] for kv in self.args.compare_env if kv.startswith(label + "=")]
            self.alts.append((f"fenzi:{label}", f"fenzi-{label}",
                              self.start_fenzi(f"fenzi-{label}", "fenzi.yaml", binary=path, extra_env=env)))
        self.metrics_label = None
        if self.args.metrics or self.args.otlp:
            # The same binary with `--metrics` on, and with --otlp also its audit export to a
            # receiver in this process (issue 16: their cost must stay within 3%).
            extra = ["--metrics", "127.0.0.1:0"]
            self.metrics_label = "fenzi+metrics"
            if self.args.otlp:
                self.otlp = OtlpReceiver()
                extra += ["--otlp", f"http://127.0.0.1:{self.otlp.port}/v1/logs"]
                self.metrics_label = "fenzi+metrics+otlp"
            fenzi = self.start_fenzi("fenzi-metrics", "fenzi.yaml", extra_args=extra)
            m = first_line(self.work / "fenzi-metrics.err", r"metrics on http://(127\.0\.0\.1:\d+)/metrics", fenzi[0])
            self.metrics_addr = m.group(1)
            self.alts.append((self.metrics_label, "fenzi-metrics", fenzi))
        time.sleep(0.5)
        self.results["idle"]["fenzi_start_rss_kib"] = status_kib(self.fenzi[0].pid, "VmRSS")
        self.tiny = self.start_tinyproxy("tinyproxy")
        self.mitm = self.start_mitm("mitmproxy")
        self.nginx = self.start_nginx("nginx", certs)
        self.floor = self.start_floor("floor", certs)
        self.secret = self.start_fenzi_secret()

    def start_fenzi(self, name: str, config: str, env: dict | None = None, binary: str | None = None,
                    extra_env: list[str] = (), extra_args: list[str] = ()):
        audit = self.args.audit_dir / f"{name}.jsonl"
        for stale in (audit, audit.with_name(audit.name + ".head")):
            stale.unlink(missing_ok=True)
        ca_dir = self.work / f"{name}-ca"
        shutil.rmtree(ca_dir, ignore_errors=True)
        env = dict(env or os.environ, XDG_CONFIG_HOME=str(self.work / "xdg-config"),
                   XDG_STATE_HOME=str(self.work / "xdg-state"))
        env.update(kv.split("=", 1) for kv in list(self.args.fenzi_env) + list(extra_env))
        p = self.procs.start(name, [binary or self.args.fenzi, "proxy", "--config", str(self.work / config),
                                    "--no-machine", "--listen", "127.0.0.1:0", "--audit", str(audit),
                                    "--ca-dir", str(ca_dir), "--upstream-ca", str(self.upstream_ca),
                                    "--drain-timeout", "1s", *extra_args], env)
        m = first_line(self.work / f"{name}.out", r"^listening on 127\.0\.0\.1:(\d+)$", p)
        self.pids[name] = p.pid
        return p, int(m.group(1)), ca_dir / "ca.pem", audit

    def start_tinyproxy(self, name: str):
        port = free_port()
        conf = self.work / f"{name}.conf"
        conf.write_text(
            f"Port {port}\nListen 127.0.0.1\nTimeout 600\nMaxClients 4096\nAllow 127.0.0.1\n"
            f"ConnectPort {self.port['tls']}\nDisableViaHeader Yes\n"
            # One log line per connection, like fenzi's one record per decision.
            f'LogFile "{self.work}/{name}.log"\nLogLevel Connect\n')
        p = self.procs.start(name, [self.args.tinyproxy, "-d", "-c", str(conf)])
        wait_port(port, p)
        self.pids[name] = p.pid
        return p, port

    def start_nginx(self, name: str, certs: Path):
        """nginx doing the same two TLS hops as an intercepted call, with no policy: it terminates
        the client's TLS (the upstream's own certificate, so clients trust the test CA) and
        re-encrypts to the MCP upstream over kept-alive, verified connections. It logs one line per
        request, buffered, as fenzi writes one record per decision."""
        if not self.args.nginx:
            return None
        port = free_port()
        prefix = self.work / name
        prefix.mkdir(exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(f"""worker_processes 2;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 8192; }}
http {{
    access_log {prefix}/access.log combined buffer=64k flush=1s;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    upstream mcp {{ server 127.0.0.1:{self.port['mcp']}; keepalive 64; }}
    server {{
        listen 127.0.0.1:{port} ssl;
        ssl_certificate {certs}/server.pem;
        ssl_certificate_key {certs}/server-key.pem;
        keepalive_requests 1000000;
        location / {{
            proxy_pass https://mcp;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_ssl_verify on;
            proxy_ssl_trusted_certificate {certs}/test-ca.pem;
            # nginx checks the name against DNS names only; the test certificate also names
            # localhost beside its 127.0.0.1 address.
            proxy_ssl_name localhost;
            proxy_ssl_session_reuse on;
        }}
    }}
}}
""")
        p = self.procs.start(name, [self.args.nginx, "-p", str(prefix), "-c", str(conf),
                                    "-g", "daemon off;"])
        wait_port(port, p)
        self.pids[name] = p.pid
        return p, port

    def start_floor(self, name: str, certs: Path):
        """proxy/examples/floor_proxy.rs: nginx's job done with fenzi's libraries (tokio, hyper,
        rustls) and nothing else, so the table separates fenzi's own work from the stack's."""
        if not self.args.floor:
            return None
        p = self.procs.start(name, [self.args.floor, "--cert", str(certs / "server.pem"),
                                    "--key", str(certs / "server-key.pem"), "--ca", str(certs / "test-ca.pem"),
                                    "--upstream", str(self.port['mcp']), "--threads", str(os.cpu_count() or 2)])
        m = first_line(self.work / f"{name}.out", r"^listening on 127\.0\.0\.1:(\d+)$", p)
        self.pids[name] = p.pid
        return p, int(m.group(1))

    def start_mitm(self, name: str):
        port = free_port()
        confdir = self.work / f"{name}-conf"
        shutil.rmtree(confdir, ignore_errors=True)
        p = self.procs.start(name, [self.args.mitmdump, "-q", "--listen-host", "127.0.0.1",
                                    "--listen-port", str(port), "--set", f"confdir={confdir}",
                                    "--set", f"ssl_verify_upstream_trusted_ca={self.upstream_ca}"])
        wait_port(port, p)
        ca = confdir / "mitmproxy-ca-cert.pem"
        for _ in range(100):
            if ca.exists():
                break
            time.sleep(0.1)
        self.pids[name] = p.pid
        return p, port, ca

    def start_fenzi_secret(self):
        """The `token: true` proxy, or None (with the reason noted) while fenzi cannot substitute."""
        env = dict(os.environ, **{f"FENZI_SECRET_{SECRET_NAME}": REAL_TOKEN})
        try:
            p, port, ca, audit = self.start_fenzi("fenzi-secret", "fenzi-secret.yaml", env)
        except RuntimeError as e:
            self.secret_skip = f"fenzi proxy does not start with a `token: true` server: {str(e)[-300:]}"
            return None
        placeholders = ca.parent / "placeholders.env"
        placeholder = None
        for _ in range(40):
            if placeholders.exists():
                for line in placeholders.read_text().splitlines():
                    if line.startswith(SECRET_NAME + "="):
                        placeholder = line.split("=", 1)[1].strip()
                break
            time.sleep(0.05)
        if not placeholder:
            self.secret_skip = (f"fenzi proxy wrote no {SECRET_NAME}= line in {placeholders.name} "
                                "(this build does not mint placeholders for `fenzi proxy`)")
            self.procs.stop(p)
            return None
        self.secret_skip = None
        return p, port, ca, audit, placeholder

    # --- scenarios ---------------------------------------------------------------------------------

    def with_alts(self, contenders: list[dict]) -> list[dict]:
        """Adds a `fenzi:LABEL` contender after `fenzi` for every --compare build (and `fenzi+metrics`)."""
        out = []
        for c in contenders:
            out.append(c)
            if c["label"] != "fenzi" or c.get("proc") != "fenzi":
                continue
            for label, proc, (p, port, ca, _audit) in self.alts:
                oha = dict(c["oha"], proxy=port)
                if oha.get("cacert") == self.fenzi[2]:
                    oha["cacert"] = ca
                out.append({"label": label, "proc": proc, "oha": oha})
        return out

    def run_contenders(self, scenario: str, title: str, contenders: list[dict]) -> None:
        """Runs each contender `rounds` times, alternating order; one warm-up second each first."""
        contenders = self.with_alts(contenders)
        log(f"{scenario}: {title}")
        entry = {"title": title, "contenders": {c["label"]: {"rounds": []} for c in contenders}}
        self.results["scenarios"][scenario] = entry
        for c in contenders:
            self.oha.run(**c["oha"], seconds=1)
        for r in range(self.args.rounds):
            order = contenders if r % 2 == 0 else list(reversed(contenders))
            for c in order:
                pid = self.pids.get(c["proc"]) if c.get("proc") else None
                out = self.work / f"oha-{scenario}-{c['label']}-{r + 1}.json"
                with PeakRss(pid) as rss:
                    res = self.oha.run(**c["oha"], out=out)
                res["peak_rss_kib"] = rss.peak
                res["proxy_cpu_s"] = rss.cpu
                # CPU the proxy spent per answered request (all its threads and child processes, such
                # as nginx's workers; user + system).
                res["proxy_cpu_us_per_req"] = (res["proxy_cpu_s"] * 1e6 / res["ok"]) if res["proxy_cpu_s"] is not None and res["ok"] else None
                # Thread context switches in the proxy per answered request (wake-ups and hand-offs).
                res["proxy_switches_per_req"] = (rss.switches / res["ok"]) if rss.switches is not None and res["ok"] else None
                # The whole machine's CPU per answered request (proxy, load generator, upstream) and
                # the share of it left idle: a proxy can lose throughput by leaving a core idle.
                res["machine_cpu_us_per_req"] = (rss.machine_busy * 1e6 / res["ok"]) if res["ok"] else None
                res["machine_idle_pct"] = 100 * rss.machine_idle / max(rss.machine_busy + rss.machine_idle, 1e-9)
                entry["contenders"][c["label"]]["rounds"].append(res)
                log(f"  round {r + 1} {c['label']:<10} {res['rps']:>9.0f} req/s  p50 {fmt(res['p50_ms'], 3)} ms"
                    f"  p99 {fmt(res['p99_ms'])} ms  rss {mib(rss.peak)}  cpu/req {fmt(res['proxy_cpu_us_per_req'], 1)} us"
                    f"  switches/req {fmt(res['proxy_switches_per_req'], 1)}"
                    f"  machine {fmt(res['machine_cpu_us_per_req'], 1)} us/req idle {res['machine_idle_pct']:.0f}%"
                    f"  errors {res['errors']}")
        for c in contenders:
            agg = entry["contenders"][c["label"]]
            rounds = agg["rounds"]
            agg["rps"] = statistics.mean(x["rps"] for x in rounds)
            agg["p50_ms"] = median([x["p50_ms"] for x in rounds])
            agg["p99_ms"] = median([x["p99_ms"] for x in rounds])
            peaks = [x["peak_rss_kib"] for x in rounds if x["peak_rss_kib"] is not None]
            agg["peak_rss_kib"] = max(peaks) if peaks else None
            agg["errors"] = sum(x["errors"] for x in rounds)
            agg["proxy_cpu_us_per_req"] = median([x["proxy_cpu_us_per_req"] for x in rounds])
            agg["proxy_switches_per_req"] = median([x["proxy_switches_per_req"] for x in rounds])
        if self.args.perf:
            for c in contenders:
                if c.get("proc", "").startswith("fenzi"):
                    self.profile(scenario, c)

    def profile(self, scenario: str, c: dict) -> None:
        """One more run of `c` under `perf record` (not counted in the table)."""
        data = self.work / f"perf-{scenario}.data"
        perf = subprocess.Popen(["perf", "record", "-e", "cpu-clock", "-F", "1999", "--call-graph",
                                 "dwarf,8192", "-p", str(self.pids[c["proc"]]), "-o", str(data)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.3)
        try:
            self.oha.run(**c["oha"])
        finally:
            perf.send_signal(signal.SIGINT)
            perf.wait()
        report = self.work / f"perf-{scenario}.txt"
        with open(report, "w") as f:
            conns = c["oha"].get("connections") or self.args.connections
            f.write(f"fenzi under {scenario} ({c['label']}), {self.args.seconds} s, {conns} connection(s); "
                    "perf record -e cpu-clock -F 1999 --call-graph dwarf\n\n")
            f.flush()
            subprocess.run([sys.executable, str(HERE / "perf_summary.py"), str(data), "--folded",
                            str(self.work / f"perf-{scenario}.folded")], stdout=f, stderr=subprocess.STDOUT)
            f.write("\nhottest symbols (self time):\n")
            f.flush()
            top = subprocess.run(["perf", "report", "-i", str(data), "--no-children", "--stdio", "-q",
                                  "-F", "overhead,dso,sym", "-g", "none", "--percent-limit", "0.7"],
                                 capture_output=True, text=True)
            f.write("\n".join(line.rstrip()[:160] for line in top.stdout.splitlines() if line.strip()) + "\n")
        self.perf_files.append(str(report))
        log(f"  profile: {report}")

    def scenario_plain_http(self) -> None:
        url = f"http://127.0.0.1:{self.port['http']}/"
        self.run_contenders("plain_http", "plain HTTP GET, keep-alive to the proxy", [
            {"label": "direct", "oha": {"url": url}},
            {"label": "fenzi", "proc": "fenzi", "oha": {"url": url, "proxy": self.fenzi[1]}},
            {"label": "tinyproxy", "proc": "tinyproxy", "oha": {"url": url, "proxy": self.tiny[1]}},
        ])

    def scenario_connect(self) -> None:
        url = f"https://127.0.0.1:{self.port['tls']}/"
        ca = self.upstream_ca
        self.run_contenders("connect_tunnel", "HTTPS GET through a CONNECT tunnel, no inspection, keep-alive", [
            {"label": "direct", "oha": {"url": url, "cacert": ca}},
            {"label": "fenzi", "proc": "fenzi", "oha": {"url": url, "cacert": ca, "proxy": self.fenzi[1]}},
            {"label": "tinyproxy", "proc": "tinyproxy",
             "oha": {"url": url, "cacert": ca, "proxy": self.tiny[1]}},
        ])

    def mcp_contenders(self, keepalive: bool, connections: int | None = None,
                       body: Path | None = None) -> list[dict]:
        url = f"https://127.0.0.1:{self.port['mcp']}/mcp"
        common = {"url": url, "body": body or self.body, "keepalive": keepalive, "connections": connections,
                  "headers": ["Accept: application/json, text/event-stream"]}
        contenders = [
            {"label": "direct", "oha": {**common, "cacert": self.upstream_ca}},
            {"label": "fenzi", "proc": "fenzi",
             "oha": {**common, "cacert": self.fenzi[2], "proxy": self.fenzi[1]}},
        ]
        if self.nginx:
            # A reverse proxy: the client talks TLS to nginx itself, no CONNECT.
            url = f"https://127.0.0.1:{self.nginx[1]}/mcp"
            contenders.append({"label": "nginx", "proc": "nginx",
                               "oha": {**common, "url": url, "cacert": self.upstream_ca}})
        if self.floor and keepalive:
            # The same, with fenzi's libraries and no policy (proxy/examples/floor_proxy.rs); its
            # kept-alive path only: it is the floor under a call, not a proxy for every case.
            url = f"https://127.0.0.1:{self.floor[1]}/mcp"
            contenders.append({"label": "floor", "proc": "floor",
                               "oha": {**common, "url": url, "cacert": self.upstream_ca}})
        contenders.append({"label": "mitmproxy", "proc": "mitmproxy",
                           "oha": {**common, "cacert": self.mitm[2], "proxy": self.mitm[1]}})
        return contenders

    def scenario_mcp(self) -> None:
        self.run_contenders("mcp_tools_call",
                            "intercepted MCP tools/call, 1 KiB JSON body, keep-alive",
                            self.mcp_contenders(True))

    def scenario_mcp_tools_list(self) -> None:
        self.run_contenders("mcp_tools_list",
                            "intercepted MCP tools/list, a 200-tool (93 KB) answer read and filtered, keep-alive",
                            self.mcp_contenders(True, body=self.list_body))

    def scenario_mcp_sse_stream(self) -> None:
        """One GET of the MCP endpoint answered by an event stream of `--sse-events` small events,
        one per write; curl reads it whole. Events per second is the rate."""
        n = self.args.sse_events
        url = f"https://127.0.0.1:{self.port['mcp']}/mcp"
        title = f"an event stream of {n:,} small events (GET of the MCP endpoint), read event by event"
        log(f"mcp_sse_stream: {title}")
        contenders = [("direct", None, None, self.upstream_ca), ("fenzi", "fenzi", self.fenzi[1], self.fenzi[2])]
        contenders += [(label, proc, port, ca)
                       for label, proc, (_p, port, ca, _audit) in self.alts]
        entry = {"title": title, "contenders": {label: {"rounds": []} for label, *_ in contenders}}
        self.results["scenarios"]["mcp_sse_stream"] = entry
        rounds = max(3, self.args.rounds * 2)
        for r in range(rounds):
            order = contenders if r % 2 == 0 else list(reversed(contenders))
            for label, proc, port, ca in order:
                pid = self.pids.get(proc) if proc else None
                with PeakRss(pid) as rss:
                    code, got, secs, stderr = curl_get(url, ca, port, [f"x-bench-events: {n}",
                                                                       "accept: text/event-stream"])
                ok = code == "200" and int(got) > 0
                res = {"events_per_s": n / float(secs) if ok and float(secs) else 0.0, "bytes": int(got),
                       "seconds": float(secs), "ok": ok, "errors": 0 if ok else 1, "peak_rss_kib": rss.peak}
                if not ok:
                    res["error_kinds"] = {f"curl {code} {got} bytes": 1, stderr[:200]: 1}
                entry["contenders"][label]["rounds"].append(res)
                log(f"  round {r + 1} {label:<12} {res['events_per_s']:>9.0f} events/s  {res['seconds']:.3f} s  "
                    f"{got} bytes  ok {ok}")
        for label, *_ in contenders:
            c = entry["contenders"][label]
            c["events_per_s"] = median([x["events_per_s"] for x in c["rounds"]])
            c["bytes"] = c["rounds"][0]["bytes"]
            peaks = [x["peak_rss_kib"] for x in c["rounds"] if x["peak_rss_kib"] is not None]
            c["peak_rss_kib"] = max(peaks) if peaks else None
            c["errors"] = sum(x["errors"] for x in c["rounds"])

    def scenario_mcp_c32(self) -> None:
        self.run_contenders("mcp_tools_call_c32",
                            "the same at 32 connections (issue 18's nginx comparison)",
                            self.mcp_contenders(True, connections=32))

    def scenario_mcp_latency(self) -> None:
        self.run_contenders("mcp_tools_call_c1",
                            "the same, one connection: latency without queueing",
                            self.mcp_contenders(True, connections=1))

    def scenario_mcp_secret(self) -> None:
        title = "intercepted MCP tools/call with the token placeholder substituted, keep-alive"
        if self.secret is None:
            log(f"mcp_secret: SKIPPED: {self.secret_skip}")
            self.results["scenarios"]["mcp_secret"] = {"title": title, "skipped": self.secret_skip}
            return
        p, port, ca, _audit, placeholder = self.secret
        url = f"https://127.0.0.1:{self.port['mcp_secret']}/mcp"
        common = {"url": url, "body": self.body,
                  "headers": ["Accept: application/json, text/event-stream"]}
        self.run_contenders("mcp_secret", title, [
            {"label": "direct", "oha": {**common, "cacert": self.upstream_ca,
                                        "headers": common["headers"] + [f"Authorization: Bearer {REAL_TOKEN}"]}},
            {"label": "fenzi", "proc": "fenzi-secret",
             "oha": {**common, "cacert": ca, "proxy": port,
                     "headers": common["headers"] + [f"Authorization: Bearer {placeholder}"]}},
        ])
        # The upstream answers 401 to anything but the real token: errors mean no substitution.
        fz = self.results["scenarios"]["mcp_secret"]["contenders"]["fenzi"]
        if fz["errors"]:
            self.results["notes"].append(
                f"mcp_secret: {fz['errors']} requests through fenzi were not answered 200: the upstream "
                "did not receive the real token")

    def scenario_mcp_new_conn(self) -> None:
        self.run_contenders("mcp_new_connection",
                            "a new connection per request: CONNECT + TLS handshake + tools/call",
                            self.mcp_contenders(False))

    def scenario_download(self) -> None:
        size = self.args.download_mib << 20
        url = f"https://127.0.0.1:{self.port['mcp']}/mcp"
        title = f"{self.args.download_mib} MiB download (GET of the MCP endpoint) through the intercepted host"
        log(f"download: {title}")
        contenders = [("direct", None, None, self.upstream_ca), ("fenzi", "fenzi", self.fenzi[1], self.fenzi[2]),
                      ("mitmproxy", "mitmproxy", self.mitm[1], self.mitm[2])]
        entry = {"title": title, "contenders": {}}
        self.results["scenarios"]["download"] = entry
        for label, proc, port, ca in contenders:
            rounds = []
            for _ in range(self.args.rounds):
                pid = self.pids.get(proc) if proc else None
                with PeakRss(pid) as rss:
                    code, got, secs, stderr = curl_get(url, ca, port)
                ok = code == "200" and int(got) == size
                res = {"mib_per_s": (int(got) / (1 << 20)) / float(secs) if float(secs) else 0.0,
                       "seconds": float(secs), "ok": ok, "errors": 0 if ok else 1,
                       "peak_rss_kib": rss.peak, "start_rss_kib": rss.start,
                       "rss_growth_kib": (rss.peak - rss.start) if rss.peak and rss.start else None}
                if not ok:
                    res["error_kinds"] = {f"curl {code} {got} bytes": 1, stderr[:200]: 1}
                rounds.append(res)
                log(f"  {label:<10} {res['mib_per_s']:>8.0f} MiB/s  {res['seconds']:.2f} s  "
                    f"rss growth {mib(res['rss_growth_kib'])}  ok {ok}")
            entry["contenders"][label] = {
                "rounds": rounds,
                "mib_per_s": statistics.mean(r["mib_per_s"] for r in rounds),
                "peak_rss_kib": max((r["peak_rss_kib"] or 0) for r in rounds) or None,
                "rss_growth_kib": max((r["rss_growth_kib"] or 0) for r in rounds) if proc else None,
                "errors": sum(r["errors"] for r in rounds),
            }

    def scenario_idle_tunnels(self) -> None:
        """Each tunnel is an HTTPS connection that did one request and now sits idle: pass-through
        (TLS end to end with the upstream) or intercepted (TLS with the proxy, one tools/call)."""
        n = self.args.tunnels
        title = f"{n} idle HTTPS connections through the proxy, one request each (fresh proxy each)"
        log(f"idle_tunnels: {title}")
        entry = {"title": title, "contenders": {}}
        self.results["scenarios"]["idle_tunnels"] = entry
        tls_port, mcp_port = self.port["tls"], self.port["mcp"]
        def fenzi_cases(kind, target, intercepted):
            yield ("fenzi", kind, lambda: self.start_fenzi("fenzi-idle", "fenzi.yaml"), target, intercepted)
            for spec in self.args.compare:
                label, path = spec.split("=", 1)
                env = [kv.split("=", 1)[1] for kv in self.args.compare_env if kv.startswith(label + "=")]
                yield (f"fenzi:{label}", kind,
                       lambda path=path, env=env: self.start_fenzi("fenzi-idle", "fenzi.yaml", binary=path,
                                                                   extra_env=env), target, intercepted)

        cases = [
            *fenzi_cases("pass-through", tls_port, False),
            ("tinyproxy", "pass-through", lambda: self.start_tinyproxy("tinyproxy-idle"), tls_port, False),
            *fenzi_cases("intercepted", mcp_port, True),
            ("mitmproxy", "intercepted", lambda: self.start_mitm("mitmproxy-idle"), mcp_port, True),
        ]
        for label, kind, start, target, intercepted in cases:
            started = start()
            proc, port = started[0], started[1]
            ca = started[2] if intercepted else self.upstream_ca
            time.sleep(0.5)
            before = status_kib(proc.pid, "VmRSS")
            socks, err = open_tunnels(port, target, n, ca, self.body if intercepted else None)
            time.sleep(1.0)
            after = status_kib(proc.pid, "VmRSS")
            hwm = status_kib(proc.pid, "VmHWM")
            for s in socks:
                s.close()
            self.procs.stop(proc)
            per = (after - before) / len(socks) if socks and before and after else None
            key = f"{label} {kind}"
            entry["contenders"][key] = {
                "tunnels": len(socks), "rss_before_kib": before, "rss_after_kib": after,
                "peak_rss_kib": hwm, "kib_per_tunnel": per, "errors": n - len(socks),
                "error_kinds": {err: 1} if err else {},
            }
            if label == "fenzi" and kind == "pass-through":
                self.results["idle"]["fenzi_fresh_rss_kib"] = before
            log(f"  {key:<24} {len(socks)} tunnels: {mib(before)} -> {mib(after)}  "
                f"{fmt(per)} KiB/tunnel {('error: ' + err) if err else ''}")

    # --- driver ------------------------------------------------------------------------------------

    def run(self) -> dict:
        self.results["machine"] = machine_info(self.args)
        self.results["settings"] = {
            "seconds_per_run": self.args.seconds, "connections": self.args.connections,
            "rounds": self.args.rounds, "download_mib": self.args.download_mib,
            "tunnels": self.args.tunnels, "audit_log": str(self.args.audit_dir),
            "audit_log_fs": fs_type(self.args.audit_dir),
        }
        self.setup()
        wanted = self.args.only
        for name, fn in [("plain_http", self.scenario_plain_http),
                         ("connect_tunnel", self.scenario_connect),
                         ("mcp_tools_call", self.scenario_mcp),
                         ("mcp_tools_call_c1", self.scenario_mcp_latency),
                         ("mcp_tools_call_c32", self.scenario_mcp_c32),
                         ("mcp_tools_list", self.scenario_mcp_tools_list),
                         ("mcp_sse_stream", self.scenario_mcp_sse_stream),
                         ("mcp_secret", self.scenario_mcp_secret),
                         ("mcp_new_connection", self.scenario_mcp_new_conn),
                         ("download", self.scenario_download),
                         ("idle_tunnels", self.scenario_idle_tunnels)]:
            if wanted and name not in wanted:
                continue
            if name == "idle_tunnels":
                # The long-running proxy, idle after all the load above.
                self.results["idle"]["fenzi_after_load_rss_kib"] = status_kib(self.fenzi[0].pid, "VmRSS")
            fn()
        audit = self.fenzi[3]
        self.results["audit_records"] = sum(1 for _ in open(audit)) if audit.exists() else 0
        if self.metrics_label:
            self.results["metrics_check"] = self.check_metrics()
        if self.args.otlp:
            self.results["export_check"] = self.check_export()
        self.results["machine"]["loadavg_end"] = os.getloadavg()
        self.results["targets"] = targets(self.results)
        if self.perf_files:
            self.results["profiles"] = self.perf_files
        return self.results


    def check_metrics(self) -> dict:
        """One scrape of fenzi+metrics after the load: its decision count must equal its log's."""
        with urllib.request.urlopen(f"http://{self.metrics_addr}/metrics", timeout=10) as r:
            text = r.read().decode()
        counted = sum(int(float(line.rsplit(" ", 1)[1])) for line in text.splitlines()
                      if line.startswith("fenzi_decisions_total{"))
        audit = self.metrics_audit()
        logged = sum(1 for _ in open(audit)) if audit.exists() else 0
        log(f"{self.metrics_label}: fenzi_decisions_total {counted}, audit log {logged} records")
        if counted != logged:
            raise RuntimeError(f"fenzi_decisions_total {counted} != {logged} audit records")
        return {"decisions_total": counted, "audit_records": logged}

    def metrics_audit(self) -> Path:
        return next(a for label, _proc, (_p, _port, _ca, a) in self.alts if label == self.metrics_label)

    def check_export(self) -> dict:
        """After the load, the export must catch up: its cursor names the log's last record within
        30 s (it shipped while the load ran; this is what was still in flight)."""
        audit = self.metrics_audit()
        cursor = audit.with_name(audit.name + ".otlp-cursor")
        logged = sum(1 for _ in open(audit))
        deadline = time.time() + 30
        acked = 0
        while time.time() < deadline:
            if cursor.exists():
                acked = int(cursor.read_text().split()[0])
                if acked >= logged:
                    break
            time.sleep(0.2)
        log(f"{self.metrics_label}: export acknowledged up to seq {acked} of {logged} records, "
            f"{self.otlp.requests} OTLP requests, {self.otlp.bytes / 1e6:.1f} MB")
        if acked < logged:
            raise RuntimeError(f"the OTLP export did not catch up: {acked} of {logged} acknowledged")
        return {"acked": acked, "audit_records": logged, "requests": self.otlp.requests,
                "bytes": self.otlp.bytes}


class OtlpReceiver:
    """An OTLP/HTTP logs receiver for the export's cost: accepts every request with 200 and an empty
    ExportLogsServiceResponse (an empty protobuf message is zero bytes), on its own thread."""

    def __init__(self) -> None:
        import http.server
        receiver = self
        self.requests = 0
        self.bytes = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.requests += 1
                receiver.bytes += len(body)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def open_tunnels(proxy_port: int, target_port: int, n: int, ca: Path, body: Path | None):
    """Opens `n` CONNECT tunnels to 127.0.0.1:`target_port`, completes TLS inside each (trusting
    `ca`) and sends one request: POST /mcp with `body`, or GET / without. Returns the open sockets."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if body is not None:
        payload = body.read_bytes()
        request = (b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/json\r\n"
                   b"Accept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n"
                   % (target_port, len(payload)) + payload)
    else:
        request = b"GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n" % target_port
    socks = []
    try:
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", proxy_port), timeout=10)
            s.sendall(f"CONNECT 127.0.0.1:{target_port} HTTP/1.1\r\nHost: 127.0.0.1:{target_port}\r\n\r\n"
                      .encode())
            head = read_head(s)
            if not re.match(rb"HTTP/1\.[01] 200", head):
                s.close()
                return socks, f"CONNECT answered {head[:60]!r}"
            s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
            s.sendall(request)
            head = read_head(s)
            m = re.search(rb"(?i)content-length:\s*(\d+)", head)
            left = int(m.group(1)) - len(head.split(b"\r\n\r\n", 1)[1]) if m else 0
            while left > 0:
                chunk = s.recv(left)
                if not chunk:
                    break
                left -= len(chunk)
            if not head.startswith(b"HTTP/1.1 200"):
                s.close()
                return socks, f"the request in the tunnel was answered {head[:60]!r}"
            socks.append(s)
    except OSError as e:
        return socks, f"after {len(socks)} tunnels: {e}"
    return socks, None


def read_head(s: socket.socket) -> bytes:
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = s.recv(4096)
        if not chunk:
            break
        buf += chunk
    return buf


# ---------------------------------------------------------------------------------------------------
# targets and report


def targets(res: dict) -> list[dict]:
    sc = res["scenarios"]
    out = []

    def get(scn, who, key):
        try:
            return sc[scn]["contenders"][who][key]
        except (KeyError, TypeError):
            return None

    def add(name, value, threshold, met, unit=""):
        out.append({"target": name, "value": value, "threshold": threshold, "unit": unit,
                    "met": None if value is None else met})

    f, m = get("mcp_tools_call", "fenzi", "rps"), get("mcp_tools_call", "mitmproxy", "rps")
    v = f / m if f and m else None
    add("intercepted tools/call throughput vs mitmproxy", v, ">= 10x", v is not None and v >= 10, "x")
    for scn, what in [("mcp_tools_call", "16 connections"), ("mcp_tools_call_c1", "1 connection")]:
        f, d = get(scn, "fenzi", "p50_ms"), get(scn, "direct", "p50_ms")
        v = f / d if f and d else None
        add(f"intercepted tools/call p50 vs direct, {what}", v, "<= 2x", v is not None and v <= 2, "x")
    f, n = get("mcp_tools_call_c32", "fenzi", "rps"), get("mcp_tools_call_c32", "nginx", "rps")
    v = f / n if f and n else None
    add("intercepted tools/call throughput vs nginx, 32 connections", v, ">= 0.8x",
        v is not None and v >= 0.8, "x")
    f, n = get("mcp_tools_call_c1", "fenzi", "p50_ms"), get("mcp_tools_call_c1", "nginx", "p50_ms")
    v = f / n if f and n else None
    add("intercepted tools/call p50 vs nginx, 1 connection", v, "<= 1.1x", v is not None and v <= 1.1, "x")
    for scn, label in [("connect_tunnel", "CONNECT pass-through"), ("plain_http", "plain HTTP")]:
        f, t = get(scn, "fenzi", "rps"), get(scn, "tinyproxy", "rps")
        v = f / t if f and t else None
        add(f"{label} throughput vs tinyproxy", v, ">= 1x", v is not None and v >= 1.0, "x")
    idle = res["idle"].get("fenzi_start_rss_kib")
    add("idle RSS", idle and idle / 1024, "< 20 MiB", idle is not None and idle < 20 * 1024, "MiB")
    for kind in ["pass-through", "intercepted"]:
        v = get("idle_tunnels", f"fenzi {kind}", "kib_per_tunnel")
        add(f"RSS per idle {kind} tunnel", v, "< 64 KiB", v is not None and v < 64, "KiB")
    g = get("download", "fenzi", "rss_growth_kib")
    ok = get("download", "fenzi", "errors") == 0
    add("download peak RSS growth", g and g / 1024, "< 16 MiB", g is not None and ok and g < 16 * 1024, "MiB")
    return out


def fmt(v, digits=2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def mib(kib) -> str:
    return "-" if kib is None else f"{kib / 1024:.1f} MiB"


def curl_get(url: str, ca: Path, proxy_port: int | None, headers: list[str] = ()) -> tuple:
    """One GET with curl, read whole and discarded: (status, bytes, seconds, stderr) as strings."""
    argv = ["curl", "-sS", "-o", "/dev/null", "--cacert", str(ca), "-w",
            "%{http_code} %{size_download} %{time_total}", "--max-time", "120", url]
    for h in headers:
        argv[1:1] = ["-H", h]
    if proxy_port:
        argv[1:1] = ["--proxy", f"http://127.0.0.1:{proxy_port}"]
    done = subprocess.run(argv, capture_output=True, text=True,
                          env={k: v for k, v in os.environ.items() if "proxy" not in k.lower()})
    code, got, secs = (done.stdout.split() + ["0", "0", "0"])[:3]
    return code, got, float(secs), done.stderr.strip()


def median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def table(res: dict) -> str:
    lines = []
    m = res["machine"]
    lines.append(f"machine: {m['cpu']}, {m['nproc']} cores, {m['mem_gib']} GiB, Linux {m['kernel']}; "
                 f"load {m['loadavg_start'][0]:.2f} at start, {m.get('loadavg_end', [0])[0]:.2f} at end")
    s = res["settings"]
    lines.append(f"settings: {s['seconds_per_run']} s per run, {s['connections']} connections, "
                 f"{s['rounds']} alternating rounds (req/s is their mean, p50/p99 their median), "
                 f"audit log on {s['audit_log_fs']} ({s['audit_log']})")
    hdr = f"{'scenario':<20} {'contender':<24} {'req/s':>9} {'x direct':>8} {'p50 ms':>8} {'p99 ms':>8} " \
          f"{'peak RSS':>10} {'CPU/req':>8} {'cs/req':>6} {'errors':>6}  req/s of each round / notes"
    lines += ["", hdr, "-" * len(hdr)]
    for name, sc in res["scenarios"].items():
        if "skipped" in sc:
            lines.append(f"{name:<20} SKIPPED: {sc['skipped']}")
            continue
        for who, c in sc["contenders"].items():
            if name == "download":
                note = f"{fmt(c['mib_per_s'], 0)} MiB/s; RSS growth {mib(c['rss_growth_kib'])}"
                lines.append(f"{name:<20} {who:<24} {'':>9} {'':>8} {'':>8} {'':>8} "
                             f"{mib(c['peak_rss_kib']):>10} {'':>8} {'':>6} {c['errors']:>6}  {note}")
            elif name == "mcp_sse_stream":
                rounds = "/".join(f"{r['events_per_s']:.0f}" for r in c["rounds"])
                direct = sc["contenders"].get("direct", {}).get("events_per_s")
                ratio = f"{c['events_per_s'] / direct:.2f}" if direct else "-"
                note = f"{fmt(c['events_per_s'], 0)} events/s ({c['bytes']} bytes); rounds {rounds}"
                lines.append(f"{name:<20} {who:<24} {'':>9} {ratio:>8} {'':>8} {'':>8} "
                             f"{mib(c['peak_rss_kib']):>10} {'':>8} {'':>6} {c['errors']:>6}  {note}")
            elif name == "idle_tunnels":
                note = (f"{c['tunnels']} tunnels: {mib(c['rss_before_kib'])} -> {mib(c['rss_after_kib'])}, "
                        f"{fmt(c['kib_per_tunnel'], 1)} KiB per tunnel")
                lines.append(f"{name:<20} {who:<24} {'':>9} {'':>8} {'':>8} {'':>8} "
                             f"{mib(c['peak_rss_kib']):>10} {'':>8} {'':>6} {c['errors']:>6}  {note}")
            else:
                rounds = "/".join(f"{r['rps']:.0f}" for r in c["rounds"])
                direct = sc["contenders"].get("direct", {}).get("rps")
                ratio = f"{c['rps'] / direct:.2f}" if direct else "-"
                cpu = c.get("proxy_cpu_us_per_req")
                cpu = "-" if cpu is None else f"{cpu:.0f} us"
                cs = fmt(c.get("proxy_switches_per_req"), 1)
                lines.append(f"{name:<20} {who:<24} {c['rps']:>9.0f} {ratio:>8} {fmt(c['p50_ms'], 3):>8} "
                             f"{fmt(c['p99_ms'], 3):>8} {mib(c['peak_rss_kib']):>10} {cpu:>8} {cs:>6} {c['errors']:>6}  {rounds}")
            kinds = [k for r in c.get("rounds", [c]) for k in (r.get("error_kinds") or {})]
            if kinds:
                lines.append(f"{'':<20} {'':<24} errors seen: {'; '.join(sorted(set(kinds)))[:200]}")
    idle = res["idle"]
    lines += ["", "fenzi idle RSS: " + ", ".join(
        f"{k.replace('fenzi_', '').replace('_rss_kib', '')} {mib(v)}" for k, v in idle.items())]
    lines.append(f"audit records written by the main fenzi proxy: {res.get('audit_records')}")
    lines += ["", "targets (issue 6):"]
    for t in res["targets"]:
        state = "n/a " if t["met"] is None else ("MET " if t["met"] else "MISS")
        lines.append(f"  {state} {t['target']:<56} {fmt(t['value']):>6} {t['unit']:<4} (target {t['threshold']})")
    for n in res["notes"]:
        lines.append(f"note: {n}")
    return "\n".join(lines)


def fs_type(path: Path) -> str:
    for argv in (["findmnt", "-n", "-o", "FSTYPE", "-T", str(path)], ["stat", "-f", "-c", "%T", str(path)]):
        try:
            out = subprocess.run(argv, capture_output=True, text=True).stdout.strip()
        except OSError:
            continue
        if out:
            return out
    return "?"


def machine_info(args) -> dict:
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        mem = round(int(open("/proc/meminfo").readline().split()[1]) / (1 << 20), 1)
    except OSError:
        pass

    def version(argv):
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            return (out.stdout or out.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    commit = version(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"])
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return {
        "cpu": cpu, "nproc": os.cpu_count(), "mem_gib": mem, "kernel": platform.release(),
        "loadavg_start": os.getloadavg(), "fenzi_commit": commit + ("+dirty" if dirty else ""),
        "oha": version([args.oha, "--version"]), "tinyproxy": version([args.tinyproxy, "-v"]),
        "mitmproxy": version([args.mitmdump, "--version"]), "rustc": version(["rustc", "--version"]),
        "curl": version(["curl", "--version"]),
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--fenzi", required=True)
    p.add_argument("--upstream", required=True)
    p.add_argument("--oha", required=True)
    p.add_argument("--tinyproxy", required=True)
    p.add_argument("--mitmdump", required=True)
    p.add_argument("--python", default=sys.executable, help="a Python with `cryptography` (for the certs)")
    p.add_argument("--work", type=Path, required=True)
    p.add_argument("--audit-dir", type=Path, help="where fenzi writes its audit logs [default: WORK/audit]")
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--connections", type=int, default=16)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--download-mib", type=int, default=100)
    p.add_argument("--tunnels", type=int, default=1000)
    p.add_argument("--nginx", default=None, help="nginx binary (the re-encrypting contender)")
    p.add_argument("--floor", default=None,
                   help="floor_proxy binary (the same two hops with hyper and rustls, no policy)")
    p.add_argument("--sse-events", type=int, default=10000,
                   help="events in the mcp_sse_stream scenario's stream")
    p.add_argument("--only", type=lambda s: set(s.split(",")), default=None,
                   help="comma-separated scenarios: plain_http,connect_tunnel,mcp_tools_call,mcp_tools_call_c1,mcp_secret,"
                        "mcp_new_connection,download,idle_tunnels")
    p.add_argument("--fenzi-env", action="append", default=[], metavar="NAME=VALUE",
                   help="extra environment for the fenzi processes only (e.g. TOKIO_WORKER_THREADS=1)")
    p.add_argument("--compare", action="append", default=[], metavar="LABEL=PATH",
                   help="another fenzi binary to measure beside the main one (contender fenzi:LABEL)")
    p.add_argument("--compare-env", action="append", default=[], metavar="LABEL=NAME=VALUE",
                   help="extra environment for the --compare build LABEL")
    p.add_argument("--otlp", action="store_true",
                   help="with --metrics: that contender also exports its audit log over OTLP to a receiver "
                        "in the bench (contender fenzi+metrics+otlp), and the export must catch up")
    p.add_argument("--metrics", action="store_true",
                   help="also measure fenzi with --metrics on (contender fenzi+metrics), and check its counts")
    p.add_argument("--perf", action="store_true", help="profile fenzi (perf record) in each scenario")
    p.add_argument("--json-out", type=Path)
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    args.audit_dir = (args.audit_dir or args.work / "audit").resolve()
    args.audit_dir.mkdir(parents=True, exist_ok=True)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(hard, 65536) if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))

    bench = Bench(args)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        res = bench.run()
    finally:
        bench.procs.stop_all()
    text = table(res)
    print(text)
    (args.work / "table.txt").write_text(text + "\n")
    out = args.json_out or args.work / "results.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    print(f"\nJSON: {out}\nwork directory (logs, oha output, audit logs): {args.work}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
