# shellcheck shell=bash
# Checks every real-agent script (scripts/e2e/agent_*.sh) ends with, the same for each agent.
# Sourced after scripts/lib.sh; uses its pass/fail/check and the script's WORK, TOKEN, PLACEHOLDER,
# FENZI and PY.

# no_token_anywhere WHAT: the real token is in no file under $WORK (WHAT says what that covers).
no_token_anywhere() {
    local leaks
    leaks=$(grep -rlaF -- "$TOKEN" "$WORK" 2>/dev/null)
    if [ -z "$leaks" ]; then
        pass "the real token is nowhere: $1"
    else
        fail "the real token appears in: $leaks"
    fi
}

# placeholder_not_in_logs: the session's placeholder (seen by the agent) is in no audit log, no
# `fenzi log` output and no session log.
placeholder_not_in_logs() {
    if [ -n "${PLACEHOLDER:-}" ] && ! grep -qF -- "$PLACEHOLDER" "$WORK"/*.audit.jsonl "$WORK"/*.log.txt \
        "$WORK"/*.audit.log 2>/dev/null; then
        pass "the placeholder is not in the audit logs, fenzi log or the session logs"
    else
        fail "the placeholder appears in an audit or session log (or there is none)"
    fi
}

# session_logs_hold NAME...: each session's audit log verifies, and everything fenzi let through
# went to 127.0.0.1 (the MCP server or that session's fake model).
session_logs_hold() {
    local name
    for name in "$@"; do
        check "[$name] fenzi log --verify" bash -c "'$FENZI' log --file '$WORK/$name.audit.jsonl' --verify >/dev/null"
        if "$PY" - "$WORK/$name.audit.jsonl" <<'EOF'
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
out = [r for r in recs if r["decision"] not in ("denied", "reload_refused") and r.get("host") != "127.0.0.1"]
for r in out:
    print(f"    let through: {r['method']} {r.get('host')}:{r.get('port')}")
sys.exit(1 if out else 0)
EOF
        then
            pass "[$name] everything fenzi let through went to 127.0.0.1"
        else
            fail "[$name] fenzi let something through to another host"
        fi
    done
}

# other_hosts_tried AGENT: says which hosts the agent tried that fenzi refused (host_not_allowed).
other_hosts_tried() {
    local others
    others=$(cat "$WORK"/*.log.txt | sed -n 's/.* denied  CONNECT \([^ ]*\) .*/\1/p' | sort -u | tr '\n' ' ')
    [ -z "$others" ] || info "$1 also tried (denied, host_not_allowed): $others"
}

# trust_never_off FILE...: nothing in FILE... (the script, its fixtures) or the environment turns TLS
# verification off. The names are split so that this file does not match itself.
trust_never_off() {
    local off='NODE_TLS_''REJECT_UNAUTHORIZED|GIT_SSL_''NO_VERIFY|PYTHONHTTPS''VERIFY|CURL_IN''SECURE|--in''secure|verify''=False|rejectUn''authorized|--dangerously''-skip'
    if grep -qE -- "$off" "$@" || env | grep -qE "^($off)="; then
        fail "verification is turned off somewhere: $(grep -nE -- "$off" "$@" | head -n 3)"
    else
        pass "no trust-disabling variable or flag in this script, its fixtures or its environment (fenzi runs with env -i)"
    fi
}
