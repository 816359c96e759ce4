#!/usr/bin/env bash
# End to end: the real Claude Code in `fenzi run --agent claude`, with no real model behind it, all on
# 127.0.0.1:
#   - the model is testdata/agents/fake_model.py (a scripted Anthropic Messages API), listed in the
#     policy's `hosts` and reached through fenzi like any other host;
#   - the MCP server is the official Python SDK server (testdata/e2e/mcp_server.py) over TLS, named by
#     an IP literal (https://127.0.0.1:PORT/mcp), a `token: true` server that requires
#     `Authorization: Bearer <real token>`. The real token is in fenzi's environment only
#     (FENZI_SECRET_MCP_E2E); Claude Code gets the policy's servers from fenzi (--mcp-config) with
#     the placeholder, and trusts fenzi's session CA the way fenzi sets it up, nothing else;
#   - the scripted model calls whoami (allowed; returns the Authorization header the server got),
#     then delete_everything (denied by the policy, and hidden from the tool list), then answers.
# Checks: Claude Code exits 0; the MCP tools were listed through fenzi (an IP-literal server over TLS
# with the session CA); delete_everything was not offered; whoami returned `Bearer <placeholder>` to
# the model, never the real token, and the real token is nowhere in Claude's output, the model's log
# or the audit log; the server ran whoami and never delete_everything; the delete_everything call
# came back to the model as an error; `fenzi log` shows whoami allowed with secrets:MCP_E2E; no
# client TLS failure in the audit log; nothing in this script turns TLS verification off.
# Prints PASS/FAIL per check and a closing `agent claude: N passed, M failed`; exits 1 on any failure.
#
# Usage: scripts/e2e/agent_claude.sh   (builds fenzi unless FENZI=/path/to/fenzi is given)
#   FENZI_AGENT_CACHE=DIR  where Claude Code is installed from npm (default .work/agents; DIR/claude)
#   E2E_KEEP=1             keep the work directory even when everything passed
set -uo pipefail

START_NS=$(date +%s%N)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

# The Claude Code version this test was verified with (the fake model speaks what it sends).
CLAUDE_VERSION=2.1.197
CLAUDE_DIR="${FENZI_AGENT_CACHE:-$ROOT/.work/agents}/claude"

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"

elapsed() { echo "$(( ($(date +%s%N) - START_NS) / 1000000 ))" | sed 's/\(...\)$/.\1/; s/^\./0./'; }

bash scripts/e2e/setup.sh || { echo "FAIL setup: scripts/e2e/setup.sh failed"; exit 1; }
PY="$ROOT/.venv/bin/python"
E2E="$ROOT/testdata/e2e"

if [ -z "${FENZI:-}" ]; then
    cargo build -q -p fenzi --bin fenzi || { echo "FAIL build: cargo build -p fenzi"; exit 1; }
    FENZI="$(cargo_target_dir)/debug/fenzi"
fi

# Claude Code from npm, pinned, cached between runs.
CLAUDE_BIN="$CLAUDE_DIR/node_modules/.bin/claude"
installed_version() {
    "$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' \
        "$CLAUDE_DIR/node_modules/@anthropic-ai/claude-code/package.json" 2>/dev/null
}
if [ "$(installed_version)" != "$CLAUDE_VERSION" ] || [ ! -x "$CLAUDE_BIN" ]; then
    echo "     installing @anthropic-ai/claude-code@$CLAUDE_VERSION into $CLAUDE_DIR" >&2
    mkdir -p "$CLAUDE_DIR"
    npm install --prefix "$CLAUDE_DIR" --no-audit --no-fund --loglevel=error \
        "@anthropic-ai/claude-code@$CLAUDE_VERSION" >&2 \
        || { echo "FAIL install: npm install @anthropic-ai/claude-code@$CLAUDE_VERSION"; exit 1; }
fi
GOT_VERSION=$("$CLAUDE_BIN" --version 2>/dev/null)
if [[ "$GOT_VERSION" == "$CLAUDE_VERSION "* ]]; then
    pass "Claude Code $GOT_VERSION from $CLAUDE_DIR"
else
    fail "Claude Code: \`claude --version\` says '$GOT_VERSION', expected $CLAUDE_VERSION"
    echo "agent claude: $PASSES passed, $FAILS failed"
    exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-agent-claude.XXXXXX")
PROJECT="$WORK/project" # the agent's current directory, with fenzi.yaml
HOMEDIR="$WORK/home"
mkdir -p "$PROJECT" "$HOMEDIR/.claude" "$WORK/config" "$WORK/state" "$WORK/cache" "$WORK/tmp"

cleanup() {
    stop_pids 5
    if [ "$FAILS" -eq 0 ] && [ -z "${E2E_KEEP:-}" ]; then
        rm -rf "$WORK"
    else
        echo "agent claude: work directory kept: $WORK"
    fi
    echo "agent claude: $PASSES passed, $FAILS failed in $(elapsed)s"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# start NAME CMD...: CMD in the background (stdout/stderr in $WORK/NAME.{out,err}); waits for its
# first line `listening on 127.0.0.1:PORT` and sets PORT.
start() {
    local name=$1; shift
    "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    local pid=$!
    PIDS+=("$pid")
    wait_first_line "$WORK/$name.out" '^listening on 127\.0\.0\.1:([0-9]+)$' "$pid" || return 1
    PORT=$MATCH
}

# ---------------------------------------------------------------------------------------------------
# Peers: the test CA, the token MCP server (TLS, IP literal), the fake model.

"$PY" "$E2E/gen_certs.py" "$WORK/certs" || { fail "test CA: gen_certs.py"; exit 1; }
CERTS="$WORK/certs"

# The real token: random per run, in the MCP server's and fenzi's environments only.
TOKEN=$("$PY" -c 'import secrets; print("e2e-real-" + secrets.token_urlsafe(24))')
CALLS="$WORK/tool-calls"
start mcp-server env E2E_REQUIRED_TOKEN="$TOKEN" "$PY" "$E2E/mcp_server.py" \
    --cert "$CERTS/server.pem" --key "$CERTS/server-key.pem" --calls "$CALLS" \
    --require-bearer-env E2E_REQUIRED_TOKEN || { fail "MCP server start"; exit 1; }
MCP_PORT=$PORT

# The model's turns: whoami, delete_everything, then a final answer. Claude Code names MCP tools
# mcp__<server>__<tool>.
FINAL="fenzi-e2e: both tool calls came back."
cat >"$WORK/turns.json" <<EOF
[
  {"text": "Asking the MCP server who I am.", "tool_call": {"name": "mcp__e2e__whoami", "arguments": {}}},
  {"text": "Now the destructive one.", "tool_call": {"name": "mcp__e2e__delete_everything", "arguments": {}}},
  {"text": "$FINAL"}
]
EOF
MODEL_LOG="$WORK/model.jsonl"
start model python3 "$ROOT/testdata/agents/fake_model.py" --script "$WORK/turns.json" \
    --log "$MODEL_LOG" --port 0 || { fail "fake model start"; exit 1; }
MODEL_PORT=$PORT
pass "peers: token MCP server https://127.0.0.1:$MCP_PORT/mcp, fake model http://127.0.0.1:$MODEL_PORT"

cat >"$PROJECT/fenzi.yaml" <<EOF
version: 1
hosts:
  - "127.0.0.1:$MODEL_PORT"
mcp:
  e2e:
    url: https://127.0.0.1:$MCP_PORT/mcp
    token: true
    tools:
      allow: [echo, whoami]
      deny: [delete_everything]
EOF

# Claude Code's state for a non-interactive run: onboarding done, the project trusted.
cat >"$HOMEDIR/.claude.json" <<EOF
{
  "hasCompletedOnboarding": true,
  "lastOnboardingVersion": "$CLAUDE_VERSION",
  "numStartups": 1,
  "autoUpdates": false,
  "projects": {"$PROJECT": {"hasTrustDialogAccepted": true, "allowedTools": []}}
}
EOF

# ---------------------------------------------------------------------------------------------------
# The session. fenzi gets exactly this environment (nothing inherited from the caller, so no proxy or
# CA variable of ours can help or hide anything): the real token only as FENZI_SECRET_MCP_E2E, HOME
# and XDG_* in the work directory. Claude Code's proxy and CA variables come from fenzi alone.

AUDIT="$WORK/audit.jsonl"
SESSION_ENV=(
    PATH="$CLAUDE_DIR/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"
    HOME="$HOMEDIR"
    USER=fenzi-e2e
    TMPDIR="$WORK/tmp"
    XDG_CONFIG_HOME="$WORK/config"
    XDG_STATE_HOME="$WORK/state"
    XDG_CACHE_HOME="$WORK/cache"
    XDG_DATA_HOME="$WORK/data"
    LANG=C.UTF-8
    NO_COLOR=1
    FENZI_CREDSTORE=memory
    FENZI_SECRET_MCP_E2E="$TOKEN"
    ANTHROPIC_BASE_URL="http://127.0.0.1:$MODEL_PORT"
    ANTHROPIC_API_KEY=sk-ant-fenzi-e2e-fake-model
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
    DISABLE_AUTOUPDATER=1
    DISABLE_TELEMETRY=1
    DISABLE_ERROR_REPORTING=1
    DISABLE_BUG_COMMAND=1
    CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1
    CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1
    CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1
    MCP_TIMEOUT=30000
)
PROMPT="Call the MCP tool whoami, then delete_everything, and tell me what came back."
# Non-interactive permission: the e2e server's tools are allowed by Claude Code itself (all of them,
# delete_everything included), so any refusal below is fenzi's.
(cd "$PROJECT" && timeout 300 env -i "${SESSION_ENV[@]}" "$FENZI" run --agent claude --no-machine \
    --audit "$AUDIT" --upstream-ca "$CERTS/test-ca.pem" -- \
    -p "$PROMPT" --output-format json --allowedTools "mcp__e2e" \
    </dev/null >"$WORK/claude.out" 2>"$WORK/claude.err")
RC=$?
if [ "$RC" -eq 0 ]; then
    pass "fenzi run --agent claude -- -p ... exited 0"
else
    fail "fenzi run --agent claude -- -p ... exited $RC (stdout, stderr, session log follow)"
    tail -c 3000 "$WORK/claude.out" | sed 's/^/    /'
    tail -n 30 "$WORK/claude.err" | sed 's/^/    /'
    sed 's/^/    /' "${AUDIT%.jsonl}.log" 2>/dev/null | tail -n 30
fi
info "fenzi's status lines: $(grep -E '^(proxy|mcp|secrets|audit)' "$WORK/claude.err" | tr '\n' ';')"

"$FENZI" log --file "$AUDIT" >"$WORK/log.txt" 2>"$WORK/log.err" \
    || fail "fenzi log --file $AUDIT: $(cat "$WORK/log.err")"
"$FENZI" log --file "$AUDIT" --json >"$WORK/log.json" 2>/dev/null

# ---------------------------------------------------------------------------------------------------
# What the model saw (the fake model's log), checked in one place; each finding becomes a line.

"$PY" - "$MODEL_LOG" "$WORK/claude.out" "$FINAL" >"$WORK/model-checks.txt" <<'EOF'
import json, re, sys
log, out, final = sys.argv[1:4]
reqs = [json.loads(l) for l in open(log) if l.strip()]
turns = [r for r in reqs if r.get("kind") == "messages" and not r.get("side")]
offered = sorted({t for r in turns for t in (r.get("tools") or []) if t.startswith("mcp__")})
def say(ok, msg): print(("PASS " if ok else "FAIL ") + msg)
print("INFO model requests: %d (%d turns, %d side); MCP tools offered: %s" % (
    len(reqs), len(turns), len(reqs) - len(turns), ", ".join(offered) or "none"))
say("mcp__e2e__whoami" in offered and "mcp__e2e__echo" in offered,
    "the model was offered the MCP tools listed through fenzi (IP-literal server, TLS, session CA): "
    + (", ".join(offered) or "none"))
say("mcp__e2e__delete_everything" not in offered,
    "delete_everything was not offered to the model (fenzi filtered tools/list)")
say("mcp__e2e__add" not in offered, "add (not allowed) was not offered either")
results = {}
for r in reqs:
    for t in r.get("tool_results") or []:
        if t.get("new"):
            results.setdefault(t.get("name"), t)
who = results.get("mcp__e2e__whoami")
if who is None:
    say(False, "the model received a whoami result: none in the log")
else:
    content = who.get("content", "")
    print("WHOAMI " + content)
    say(bool(re.fullmatch(r"Bearer fenzi_ph_[A-Za-z0-9_-]+", content)) and not who.get("is_error"),
        "whoami came back to the model as `Bearer <placeholder>`: " + re.sub(r"fenzi_ph_\S+", "fenzi_ph_…", content))
de = results.get("mcp__e2e__delete_everything")
if de is None:
    say(False, "the model received a delete_everything result: none in the log")
else:
    print("DENIAL " + json.dumps(de.get("content", "")))
    say(bool(de.get("is_error")) and "everything deleted" not in de.get("content", ""),
        "the delete_everything call came back to the model as an error (is_error=%s)" % de.get("is_error"))
try:
    res = json.loads(open(out).read())
    say(res.get("result") == final and not res.get("is_error"),
        "Claude's JSON result is the scripted final text: %r" % res.get("result"))
except Exception as e:
    say(False, "Claude's output is JSON with a result: %s" % e)
EOF
while IFS= read -r line; do
    case "$line" in
        PASS\ *) pass "${line#PASS }" ;;
        FAIL\ *) fail "${line#FAIL }" ;;
        INFO\ *) info "${line#INFO }" ;;
        WHOAMI\ *) WHOAMI=${line#WHOAMI } ;;
        DENIAL\ *) DENIAL=${line#DENIAL }; info "the denial as the model received it: $DENIAL" ;;
    esac
done <"$WORK/model-checks.txt"
[ -s "$WORK/model-checks.txt" ] || fail "reading the fake model's log ($MODEL_LOG) failed"

# The placeholder whoami returned is the session's own: a 52-character fenzi placeholder, not the token.
PLACEHOLDER=${WHOAMI#Bearer }
if [[ "${WHOAMI:-}" == "Bearer "* ]] && [ "${#PLACEHOLDER}" -eq 52 ] && [[ "$PLACEHOLDER" != *"$TOKEN"* ]]; then
    pass "the bearer the MCP tool result showed is a 52-character placeholder, not the real token"
else
    fail "the whoami result: '${WHOAMI:-none}'"
fi

# The real token: nowhere the agent or the log could leak it.
for where in "$WORK/claude.out" "$WORK/claude.err" "$MODEL_LOG" "$AUDIT" "$WORK/log.txt" \
    "${AUDIT%.jsonl}.log"; do
    [ -e "$where" ] || continue
    if grep -qF -- "$TOKEN" "$where"; then
        fail "the real token appears in $(basename "$where")"
    else
        pass "the real token is not in $(basename "$where")"
    fi
done
if grep -rqF -- "$TOKEN" "$HOMEDIR" "$PROJECT" "$WORK/tmp" 2>/dev/null; then
    fail "the real token appears in Claude Code's state: $(grep -rlF -- "$TOKEN" "$HOMEDIR" "$PROJECT" "$WORK/tmp")"
else
    pass "the real token is not in Claude Code's state (HOME, project, TMPDIR)"
fi

# ---------------------------------------------------------------------------------------------------
# The MCP server and the audit log.

check "the MCP server ran whoami (with the real token: no unauthorized request)" \
    bash -c "grep -qx whoami '$CALLS' && ! grep -qx unauthorized '$CALLS'"
check "the MCP server never ran delete_everything" bash -c "! grep -qx delete_everything '$CALLS'"
info "the MCP server's calls: $(tr '\n' ' ' <"$CALLS" 2>/dev/null)"

M="127\.0\.0\.1:$MCP_PORT"
# expect_line DESCRIPTION REGEX: `fenzi log` has a matching line.
expect_line() {
    if grep -qE "^[0-9]{2}:[0-9]{2}:[0-9]{2} $2" "$WORK/log.txt"; then
        pass "fenzi log shows $1"
    else
        fail "fenzi log shows $1: no line matches /$2/"
    fi
}
expect_line "the MCP server's tunnel (IP literal)" "allowed CONNECT $M$"
expect_line "tools/list filtered (add and delete_everything hidden)" "filtered POST $M/mcp tools/list hidden:2( |$)"
expect_line "whoami allowed with the token swapped in" "allowed POST $M/mcp tools/call whoami +secrets:MCP_E2E$"
expect_line "the model's requests to the fake model" "allowed POST 127\.0\.0\.1:$MODEL_PORT/v1/messages"
if grep -qE "tools/call delete_everything" "$WORK/log.txt"; then
    info "delete_everything reached fenzi: $(grep -E 'tools/call delete_everything' "$WORK/log.txt")"
    expect_line "delete_everything denied" "denied  POST $M/mcp tools/call delete_everything  policy_denied$"
else
    info "delete_everything never reached fenzi (Claude Code refused a tool it was not offered)"
fi
if grep -qE "client TLS handshake" "$WORK/log.txt"; then
    fail "a client TLS failure in the audit log: $(grep -E 'client TLS handshake' "$WORK/log.txt" | head -n 3)"
else
    pass "no client TLS handshake failure in the audit log (Claude Code trusted the session CA)"
fi
DENIED=$(grep -cE '^[0-9:]{8} denied ' "$WORK/log.txt")
info "audit log: $(wc -l <"$AUDIT") records, $DENIED denied"
grep -E '^[0-9:]{8} (denied|failed)' "$WORK/log.txt" | head -n 10 | sed 's/^/       /'
check "fenzi log --verify passes" bash -c "'$FENZI' log --file '$AUDIT' --verify >/dev/null"

# Nothing here turns TLS verification off (the names are split so this check does not find itself).
TRUST_OFF='NODE_TLS_''REJECT_UNAUTHORIZED|GIT_SSL_''NO_VERIFY|PYTHONHTTPS''VERIFY|--in''secure|verify''=False|rejectUn''authorized'
if grep -qE -- "$TRUST_OFF" "$0"; then
    fail "this script disables TLS verification somewhere: $(grep -nE -- "$TRUST_OFF" "$0")"
else
    pass "no trust-disabling variable or flag in this script (fenzi's environment is exactly SESSION_ENV)"
fi

info "run time: $(elapsed)s"
[ "$FAILS" -eq 0 ]
