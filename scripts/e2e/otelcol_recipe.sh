#!/usr/bin/env bash
# The OpenTelemetry Collector recipe (docs/otelcol/fenzi-filelog.yaml, shown in docs/export.md),
# checked without a Collector: a real `fenzi proxy` writes an audit log with allowed, denied and
# failed records (curl through it to an HTTP server on 127.0.0.1, to a host the policy does not
# allow, and to a port nothing listens on), then scripts/e2e/otelcol_recipe.py parses the config,
# checks its structure and runs its operators over those lines (see that file).
# Prints PASS/FAIL per check and `otelcol-recipe: N passed, M failed`; exits 1 on any failure.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
export NO_COLOR=1
# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"

bash scripts/e2e/setup.sh || { echo "FAIL setup: scripts/e2e/setup.sh failed"; exit 1; }
PY="$ROOT/.venv/bin/python"
build_fenzi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-otelcol.XXXXXX")
export XDG_STATE_HOME="$WORK/state" XDG_CONFIG_HOME="$WORK/config" FENZI_CREDSTORE=memory
cleanup() {
    stop_pids 5
    rm -rf "$WORK"
}
trap cleanup EXIT

# Two free ports drawn while both are held, so they differ (one drawn after the other was closed
# could be the same number, and the policy would name it twice).
read -r HTTP_PORT DEAD_PORT < <("$PY" -c 'import socket
held = [socket.socket() for _ in range(2)]
for s in held: s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in held))')
mkdir -p "$WORK/www" && echo hello >"$WORK/www/index.html"
"$PY" -m http.server "$HTTP_PORT" --bind 127.0.0.1 --directory "$WORK/www" \
    >"$WORK/http.out" 2>"$WORK/http.err" &
PIDS+=("$!")
cat >"$WORK/fenzi.yaml" <<YAML
version: 1
hosts:
  - "127.0.0.1:$HTTP_PORT"
  - "127.0.0.1:$DEAD_PORT"
YAML
start proxy "$FENZI" proxy --config "$WORK/fenzi.yaml" --listen 127.0.0.1:0 \
    --audit "$WORK/audit.jsonl" --ca-dir "$WORK/ca" \
    || { echo "FAIL start: fenzi proxy"; exit 1; }
PROXY="http://127.0.0.1:$PORT"
for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$HTTP_PORT/" && break; sleep 0.1; done
curl -s -o /dev/null -x "$PROXY" "http://127.0.0.1:$HTTP_PORT/" || true
curl -s -o /dev/null -x "$PROXY" "http://blocked.example/" || true
curl -s -o /dev/null -x "$PROXY" "http://127.0.0.1:$DEAD_PORT/" || true
kill -TERM "$proxy_PID" && wait "$proxy_PID" 2>/dev/null

"$PY" scripts/e2e/otelcol_recipe.py docs/otelcol/fenzi-filelog.yaml "$WORK/audit.jsonl" \
    policy/src/audit.rs docs/export.md | tee "$WORK/result"
PASSES=$(grep -c '^PASS' "$WORK/result")
FAILS=$(grep -c '^FAIL' "$WORK/result")
grep -q '"decision":"allowed"' "$WORK/audit.jsonl" && grep -q '"decision":"denied"' "$WORK/audit.jsonl" \
    && grep -q '"decision":"failed"' "$WORK/audit.jsonl" \
    && pass "the log has allowed, denied and failed records" \
    || fail "the log has allowed, denied and failed records: $(cat "$WORK/audit.jsonl")"
echo "otelcol-recipe: $PASSES passed, $FAILS failed"
[ "$FAILS" -eq 0 ]
