#!/usr/bin/env bash
# Signing in through fenzi, end to end (README, "Signing in to OAuth servers"): an MCP server built
# with the official Python SDK that is its own OAuth authorization server (testdata/e2e/oauth_server.py:
# the SDK's metadata, /authorize, /token, /register and /revoke routes on the server's own origin, TLS
# from a test CA), and the SDK's own OAuth client (testdata/e2e/oauth_client.py: discovery, dynamic
# registration, PKCE, the authorization GET as the browser, the token request, then a tool call)
# through `fenzi proxy`, trusting only the proxy's session CA. Checks: the sign-in and the call pass;
# each request of the flow has its own `allowed` record naming its step; and no code, challenge,
# state, client secret or token the client saw is in the audit log or the proxy's output.
# Prints PASS/FAIL per check and `oauth-sign-in: N passed, M failed`; exits 1 on any failure.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
unset SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE
export NO_COLOR=1
# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"

e2e_prelude oauth-sign-in

"$PY" "$E2E/gen_certs.py" "$WORK/certs" || { fail "test CA: gen_certs.py"; exit 1; }
start oauth-server "$PY" "$E2E/oauth_server.py" --cert "$WORK/certs/server.pem" \
    --key "$WORK/certs/server-key.pem" --calls "$WORK/calls" || { fail "OAuth MCP server start"; exit 1; }
SERVER_PORT=$PORT
cat >"$WORK/fenzi.yaml" <<YAML
version: 1
mcp:
  own:
    url: https://127.0.0.1:$SERVER_PORT/mcp
    tools:
      allow: [echo]
YAML
AUDIT="$WORK/audit.jsonl"
start proxy "$FENZI" proxy --config "$WORK/fenzi.yaml" --listen 127.0.0.1:0 --audit "$AUDIT" \
    --ca-dir "$WORK/ca" --upstream-ca "$WORK/certs/test-ca.pem" || { fail "fenzi proxy start"; exit 1; }
PROXY="http://127.0.0.1:$PORT"

HTTPS_PROXY=$PROXY SSL_CERT_FILE="$WORK/ca/ca.pem" timeout 120 "$PY" "$E2E/oauth_client.py" \
    --url "https://127.0.0.1:$SERVER_PORT/mcp" --secrets "$WORK/seen" >"$WORK/client.out" 2>"$WORK/client.err"
rc=$?
relay_results "python sdk oauth client: " "$WORK/client.out"
if [ "$rc" -ne 0 ] && ! grep -q '^FAIL' "$WORK/client.out"; then
    fail "the OAuth client exited $rc (stderr follows)"
    tail -n 20 "$WORK/client.err" | sed 's/^/    /'
fi
check "the server issued a token and ran echo" grep -qx echo "$WORK/calls"

# Each step has its own allowed record, named by its rule.
for rule in "oauth protected-resource metadata" "oauth authorization-server metadata" \
    "oauth registration endpoint" "oauth authorization endpoint" "oauth token endpoint"; do
    check "an allowed record for the $rule" \
        grep -q "\"decision\":\"allowed\".*\"rule\":\"mcp.own $rule\"" "$AUDIT"
done
check "no denied or failed record" bash -c "! grep -qE '\"decision\":\"(denied|failed)\"' '$AUDIT'"

# Nothing the client saw of the flow is in the log or the proxy's output.
leaked=0
while IFS= read -r secret; do
    [ -n "$secret" ] || continue
    if grep -qF -- "$secret" "$AUDIT" "$WORK/proxy.out" "$WORK/proxy.err"; then leaked=$((leaked + 1)); fi
done <"$WORK/seen"
check "the client saw codes, challenges, states and tokens ($(grep -c . "$WORK/seen" 2>/dev/null || echo 0))" \
    test "$(grep -c . "$WORK/seen" 2>/dev/null || echo 0)" -ge 4
check "none of them is in the audit log or the proxy's output" test "$leaked" -eq 0
check "fenzi log --verify passes" bash -c "'$FENZI' log --file '$AUDIT' --verify >/dev/null"
[ "$FAILS" -eq 0 ]
