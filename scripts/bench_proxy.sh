#!/usr/bin/env bash
# Benchmarks an allowed MCP `tools/call` through `fenzi proxy` (CONNECT + TLS interception + policy +
# audit record) against the same upstream reached directly, and samples the proxy's RSS at idle and
# under load. Prints numbers; asserts nothing.
#
#   scripts/bench_proxy.sh                 # release build, 16 connections, 10 s per run
#   CONNS=64 SECS=20 scripts/bench_proxy.sh
#   PROFILE=dev scripts/bench_proxy.sh     # quicker build, slower numbers
set -euo pipefail
cd "$(dirname "$0")/.."

PROFILE=${PROFILE:-release}
CONNS=${CONNS:-16}
SECS=${SECS:-10}
dir_of_profile=$([ "$PROFILE" = dev ] && echo debug || echo "$PROFILE")

cargo build --quiet --profile "$PROFILE" -p fenzi --bin fenzi
cargo build --quiet --profile "$PROFILE" -p fenzi-proxy --example bench_proxy
fenzi=target/$dir_of_profile/fenzi
bench=target/$dir_of_profile/examples/bench_proxy

work=$(mktemp -d)
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

# Waits for a line matching $2 in file $1 and prints it.
wait_line() {
    for _ in $(seq 100); do
        if line=$(grep -m1 "$2" "$1" 2>/dev/null); then echo "$line"; return 0; fi
        sleep 0.1
    done
    echo "timed out waiting for '$2' in $1" >&2
    cat "$1" >&2 || true
    return 1
}

"$bench" upstream "$work" >"$work/upstream.out" &
pids+=($!)
port=$(wait_line "$work/upstream.out" '^port ' | cut -d' ' -f2)

cat >"$work/fenzi.yaml" <<YAML
version: 1
mcp:
  bench:
    url: https://127.0.0.1:$port/mcp
    tools:
      allow: [echo]
YAML

"$fenzi" proxy --config "$work/fenzi.yaml" --no-machine --listen 127.0.0.1:0 \
    --audit "$work/audit.jsonl" --ca-dir "$work/ca" --upstream-ca "$work/upstream-ca.pem" \
    >"$work/proxy.out" 2>"$work/proxy.err" &
proxy_pid=$!
pids+=("$proxy_pid")
proxy_addr=$(wait_line "$work/proxy.out" '^listening on ' | cut -d' ' -f3)

rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$proxy_pid/status"; }

echo "machine: $(nproc) cores; profile $PROFILE; $CONNS connections, ${SECS}s per run"
echo "proxy RSS at idle: $(rss_kib) KiB"

echo -n "direct:        "
"$bench" load "$port" "$work/upstream-ca.pem" --connections "$CONNS" --seconds "$SECS"

peak=0
(
    while kill -0 "$proxy_pid" 2>/dev/null; do rss_kib; sleep 0.2; done
) >"$work/rss.samples" &
sampler=$!
pids+=("$sampler")
echo -n "through proxy: "
"$bench" load "$port" "$work/ca/ca.pem" "$proxy_addr" --connections "$CONNS" --seconds "$SECS"
kill "$sampler" 2>/dev/null || true
peak=$(sort -n "$work/rss.samples" | tail -1)
echo "proxy RSS under load (peak): ${peak} KiB; after: $(rss_kib) KiB"
echo "audit records written: $(wc -l <"$work/audit.jsonl")"
