#!/usr/bin/env bash
# A program that ignores the proxy variables, end to end: the official MCP TypeScript SDK client on
# Node's own fetch (Node 20 and 22 ignore HTTPS_PROXY) runs in `fenzi run` with no configuration of
# its own. It reaches the Python SDK server (TLS, on 127.0.0.1) only through the sandbox's
# transparent path, lists the tools, gets the allowed one answered and the denied one refused as that
# call's error; the server never sees the denied call, and each decision is in the audit log.
# The SDK is installed from npm into .work/node-e2e (kept between runs; reinstalled when
# testdata/e2e/node/package.json changes).
# Prints PASS/FAIL per check and `node-fetch: N passed, M failed`; exits 1 on any failure.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
export NO_COLOR=1
# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "FAIL setup: node and npm are needed (the machine's Node.js)"; exit 1
fi
bash scripts/e2e/setup.sh || { echo "FAIL setup: scripts/e2e/setup.sh failed"; exit 1; }
PY="$ROOT/.venv/bin/python"
NODE_DIR="$ROOT/.work/node-e2e"
if ! cmp -s testdata/e2e/node/package.json "$NODE_DIR/package.json"; then
    rm -rf "$NODE_DIR" && mkdir -p "$NODE_DIR"
    cp testdata/e2e/node/package.json "$NODE_DIR/"
    (cd "$NODE_DIR" && npm install --silent --no-audit --no-fund >/dev/null) \
        || { echo "FAIL setup: npm install of the MCP TypeScript SDK"; rm -rf "$NODE_DIR"; exit 1; }
fi
cp testdata/e2e/node/client.mjs "$NODE_DIR/"

build_fenzi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-node.XXXXXX")
export XDG_STATE_HOME="$WORK/state" XDG_CONFIG_HOME="$WORK/config" FENZI_CREDSTORE=memory
cleanup() {
    stop_pids 5
    [ "$FAILS" -eq 0 ] && rm -rf "$WORK"
    echo "node-fetch: $PASSES passed, $FAILS failed"
}
trap cleanup EXIT

"$PY" testdata/e2e/gen_certs.py "$WORK/certs" >/dev/null
PIDS=()
"$PY" testdata/e2e/mcp_server.py --cert "$WORK/certs/server.pem" \
    --key "$WORK/certs/server-key.pem" --calls "$WORK/calls" >"$WORK/mcp.out" 2>"$WORK/mcp.err" &
PIDS+=($!)
wait_first_line "$WORK/mcp.out" '^listening on 127\.0\.0\.1:([0-9]+)$' "${PIDS[0]}" \
    || { echo "FAIL setup: the MCP server did not start"; exit 1; }
PORT=$MATCH

cat >"$WORK/fenzi.yaml" <<YAML
version: 1
mcp:
  demo:
    url: https://127.0.0.1:$PORT/mcp
    tools:
      allow: [echo]
      deny: [delete_everything]
YAML

# The proxy variables are removed as well, so that only the transparent path can carry the calls.
(cd "$WORK" && "$FENZI" run --no-machine --upstream-ca "$WORK/certs/test-ca.pem" -- \
    env -u HTTPS_PROXY -u https_proxy -u HTTP_PROXY -u http_proxy -u ALL_PROXY -u all_proxy \
    node "$NODE_DIR/client.mjs" "https://127.0.0.1:$PORT/mcp" echo delete_everything) \
    >"$WORK/client.out" 2>"$WORK/run.err"
rc=$?
out=$(cat "$WORK/client.out")
check "fenzi run with the Node client exits 0" test "$rc" = 0
check "the tools are listed through the transparent path" grep -q '^tools .*echo' <<<"$out"
check "the allowed tool is answered" grep -q '^called echo hi from node' <<<"$out"
check "the denied tool is refused as that call's error" grep -q '^refused delete_everything .*policy_denied' <<<"$out"
check "the server never saw the denied call" bash -c "! grep -q delete_everything '$WORK/calls'"
check "the server saw the allowed call" grep -qx echo "$WORK/calls"
log=$("$FENZI" log --json 2>/dev/null)
check "the tunnel is recorded as a CONNECT to the literal" grep -q "\"method\":\"CONNECT\",\"host\":\"127.0.0.1\",\"port\":$PORT" <<<"$log"
check "the denied call is recorded as denied" grep -q '"decision":"denied","reason":"policy_denied".*"tool":"delete_everything"' <<<"$log"
check "the log verifies" "$FENZI" log --verify
[ "$FAILS" -eq 0 ] || { echo "--- client"; cat "$WORK/client.out"; echo "--- fenzi run"; cat "$WORK/run.err"; }
[ "$FAILS" -eq 0 ]
