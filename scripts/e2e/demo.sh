#!/usr/bin/env bash
# Runs the README's demo (scripts/demo) and checks what it must show: the SDK client inside `fenzi run`
# held a placeholder, the allowed call worked, the denied call was refused as that call's error, the
# server got the real token while the echo came back as the placeholder, the leak and the unlisted host
# were refused, and the audit log verifies. Exits 1 naming every expectation that was not met.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$(NO_COLOR=1 "$ROOT/scripts/demo" 2>&1)
status=$?
fails=0
expect() {
    if grep -qF -- "$1" <<<"$out"; then echo "PASS demo: $1"; else echo "FAIL demo: missing: $1"; fails=$((fails + 1)); fi
}
[ "$status" -eq 0 ] || { echo "FAIL demo: scripts/demo exited $status"; fails=$((fails + 1)); }
expect "agent: MCP_DEMO holds a placeholder"
expect "agent: echo (allowed) -> 'hello through fenzi'"
expect "agent: delete_everything (denied) -> error -31001: POST /mcp not permitted by policy: tools/call delete_everything"
expect "what came back is my placeholder again"
expect "HTTP 403 credential_endpoint_mismatch"
expect "HTTP 403 host_not_allowed"
expect "tools/call echo secrets:MCP_DEMO"
expect "tools/call delete_everything  policy_denied"
expect "ok: "
expect "chain intact, head matches"
# The local (stdio) server: started by fenzi in its own sandbox, its list filtered, checked per tool.
expect "local server: fenzi started it in its own sandbox; its list shows add, echo"
expect "local add (allowed) -> '5'"
expect "local delete_everything (denied) -> error -31001"
expect "notes.stdio.fenzi.internal:80/mcp tools/call delete_everything"
if [ "$fails" -gt 0 ]; then
    echo "$out" | tail -40
    echo "demo: $fails expectation(s) not met"
    exit 1
fi
echo "demo: all expectations met"
