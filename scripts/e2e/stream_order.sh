#!/usr/bin/env bash
# Server-initiated requests on the standalone GET stream, through fenzi and directly (issue 36): the
# official Python SDK as server (testdata/e2e/mcp_stream_server.py, TLS with a test CA made here)
# sends `sampling/createMessage` on the session's GET stream when its tool is called, and the SDK
# drops it when the client's GET has not reached it yet. The SDK client
# (testdata/e2e/stream_order_client.py) runs N sessions straight to the server and N through
# `fenzi proxy` (HTTPS_PROXY, trusting only the session CA), each calling the tool once.
# Passes when no run through fenzi is lost, and fenzi loses no more runs than the direct path.
# Prints PASS/FAIL per check and `stream-order: N passed, M failed`; exits 1 on any failure.
#
# Usage: scripts/e2e/stream_order.sh [RUNS]   (default 10; FENZI=/path/to/fenzi skips the build)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
unset SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE
export NO_COLOR=1
RUNS=${1:-10}

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"
e2e_prelude stream-order

"$PY" "$E2E/gen_certs.py" "$WORK/certs" >/dev/null || { fail "test CA: gen_certs.py"; exit 1; }
CERTS="$WORK/certs"
start server "$PY" "$E2E/mcp_stream_server.py" --cert "$CERTS/server.pem" --key "$CERTS/server-key.pem" \
    || { fail "MCP server start"; exit 1; }
SERVER_PORT=$PORT
cat >"$WORK/fenzi.yaml" <<YAML
version: 1
mcp:
  order:
    url: https://127.0.0.1:$SERVER_PORT/mcp
    tools:
      allow: [ask]
YAML
start proxy "$FENZI" proxy --config "$WORK/fenzi.yaml" --listen 127.0.0.1:0 --audit "$WORK/audit.jsonl" \
    --ca-dir "$WORK/ca" --upstream-ca "$CERTS/test-ca.pem" || { fail "fenzi proxy start"; exit 1; }
PROXY="http://127.0.0.1:$PORT"
URL="https://127.0.0.1:$SERVER_PORT/mcp"

# lost LABEL: the number of lost runs in $WORK/LABEL.out (its summary line), or 999 without one.
lost() {
    sed -n "s/^$1: [0-9]* runs, [0-9]* answered, \([0-9]*\) lost, [0-9]* failed$/\1/p" "$WORK/$1.out" \
        | grep . || echo 999
}

SSL_CERT_FILE="$CERTS/test-ca.pem" timeout 600 "$PY" "$E2E/stream_order_client.py" --url "$URL" \
    --runs "$RUNS" --label direct >"$WORK/direct.out" 2>"$WORK/direct.err"
HTTPS_PROXY=$PROXY SSL_CERT_FILE="$WORK/ca/ca.pem" timeout 600 "$PY" "$E2E/stream_order_client.py" \
    --url "$URL" --runs "$RUNS" --label fenzi >"$WORK/fenzi.out" 2>"$WORK/fenzi.err"
info "$(tail -n 1 "$WORK/direct.out")"
info "$(tail -n 1 "$WORK/fenzi.out")"
DIRECT_LOST=$(lost direct)
FENZI_LOST=$(lost fenzi)
check "direct: every run ended (answered or lost, none failed otherwise)" \
    grep -q "^direct: $RUNS runs, [0-9]* answered, [0-9]* lost, 0 failed$" "$WORK/direct.out"
check "through fenzi: all $RUNS runs answered (the server's request on the GET stream arrived)" \
    grep -qx "fenzi: $RUNS runs, $RUNS answered, 0 lost, 0 failed" "$WORK/fenzi.out"
check "through fenzi no more runs lost than directly ($FENZI_LOST <= $DIRECT_LOST)" \
    test "$FENZI_LOST" -le "$DIRECT_LOST"
# Every session's sampling answer went up as a client response, and was recorded as one.
check "each run's tools/call is recorded as allowed" \
    test "$(grep -c '"decision":"allowed".*"rpc":"tools/call".*"tool":"ask"' "$WORK/audit.jsonl")" -ge "$RUNS"
[ "$FAILS" -eq 0 ] || { echo "--- through fenzi"; tail -n 20 "$WORK/fenzi.out" "$WORK/fenzi.err"; }
[ "$FAILS" -eq 0 ]
