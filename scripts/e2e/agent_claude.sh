#!/usr/bin/env bash
# End to end: the real Claude Code (from npm, pinned) in `fenzi run --agent claude -- -p ...`, with a
# scripted model behind it, everything on 127.0.0.1:
#   - the model is testdata/agents/fake_model.py (the Anthropic Messages API), a `hosts` entry of the
#     policy, reached through fenzi like any other host;
#   - the MCP server is the official Python SDK server (testdata/e2e/mcp_server.py) over TLS, named by
#     an IP literal (https://127.0.0.1:PORT/mcp: fenzi's session CA must be acceptable to Claude Code
#     for an IP-literal name), a `token: true` server requiring `Authorization: Bearer <real token>`.
#     The real token is in fenzi's environment only (FENZI_SECRET_MCP_E2E, FENZI_CREDSTORE=memory);
#     Claude Code gets the server from fenzi (--mcp-config) with the placeholder, and trusts fenzi's
#     session CA through the variables fenzi sets, nothing else.
#
# Three sessions, each with its own servers, HOME and audit log:
#   deny:   the model calls delete_everything (denied by the policy, so fenzi hides it from the list
#           and Claude Code answers "No such tool available"), then echo (allowed), then answers.
#           Claude Code exits 0.
#   listed: the same with `list: all`: Claude Code is offered delete_everything and sends the call,
#           fenzi refuses it (403 policy_denied) and Claude Code hands that error to the model; echo
#           still works afterwards. Claude Code exits 0.
#   token:  the model calls whoami (allowed; returns the Authorization header the server got), then
#           would call delete_everything and answer. whoami comes back to Claude Code as
#           `Bearer <placeholder>`; the next model request carries that placeholder to the model's
#           host and fenzi refuses it (credential_endpoint_mismatch; README, "Secrets": "That includes
#           the model API ... This is deliberate"), so the model never sees it and Claude Code stops
#           with fenzi's refusal as its result (exit 1, expected).
# Then "first" (the policy fenzi init wrote, npm install), "children" (programs Claude Code starts
# are refused at its server) and:
#   stdio:    three real stdio servers installed by name (server-everything and server-filesystem
#             from npm, mcp-server-time from PyPI, pinned in testdata/e2e/stdio-servers, cached in
#             .work/) as `command` entries: fenzi starts each in a sandbox of its own and Claude
#             Code reaches it at http://NAME.stdio.fenzi.internal/mcp (the URL its rendered config
#             names). The model runs a command in Bash (the agent's environment: no placeholder for
#             the time server's secret), then calls echo, get-env (denied: policy_denied),
#             read_text_file and get_current_time; each answer reaches the model, each call has its
#             record with transport stdio and the server's name (stdio_checks in agents_lib.sh).
# Checks: the MCP tools listed through fenzi reach the model; delete_everything not offered (filter)
# and its call an error; fenzi log shows the allowed calls with secrets:MCP_E2E; the server got the
# real token and never ran delete_everything; the real token is nowhere in Claude's output or files,
# the model's log or the audit log; no host outside the policy was tried; no client TLS failure;
# nothing here turns TLS verification off. Prints PASS/FAIL per check, the run time and a closing
# `agent claude: N passed, M failed`; exits 1 on any failure.
#
# Usage: scripts/e2e/agent_claude.sh   (builds fenzi unless FENZI=/path/to/fenzi is given)
#   FENZI_AGENT_CACHE=DIR  where Claude Code is installed from npm (DIR/claude; default ~/.cache/fenzi/agents, see lib.sh)
#   E2E_KEEP=1             keep the work directory even when everything passed
set -uo pipefail

START_NS=$(date +%s%N)
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

# The Claude Code version this test was verified with.
CLAUDE_VERSION=2.1.197

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=agents_lib.sh
source "$ROOT/scripts/e2e/agents_lib.sh"
CLAUDE_DIR="$(agent_cache_dir)/claude"

elapsed() { # seconds since the start, to the millisecond
    local ms=$(( ($(date +%s%N) - START_NS) / 1000000 ))
    printf '%d.%03d' $((ms / 1000)) $((ms % 1000))
}

bash scripts/e2e/setup.sh || { echo "FAIL setup: scripts/e2e/setup.sh failed"; exit 1; }
PY="$ROOT/.venv/bin/python"
E2E="$ROOT/testdata/e2e"

build_fenzi
stdio_servers_install

# Claude Code from npm, pinned, installed once into the cache.
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
    pass "Claude Code $GOT_VERSION, from $CLAUDE_DIR"
else
    fail "Claude Code: \`claude --version\` says '$GOT_VERSION', expected $CLAUDE_VERSION"
    echo "agent claude: $PASSES passed, $FAILS failed"
    exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-agent-claude.XXXXXX")
cleanup() {
    stop_pids 5
    if [ "$FAILS" -eq 0 ] && [ -z "${E2E_KEEP:-}" ]; then
        rm -rf "$WORK"
    else
        echo "agent claude: work directory kept: $WORK"
    fi
    echo "agent claude: run time $(elapsed)s"
    echo "agent claude: $PASSES passed, $FAILS failed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


"$PY" "$E2E/gen_certs.py" "$WORK/certs" >/dev/null || { fail "test CA: gen_certs.py"; exit 1; }
CERTS="$WORK/certs"
# The real token: random per run, in the MCP servers' and fenzi's environments only.
TOKEN=$("$PY" -c 'import secrets; print("e2e-real-" + secrets.token_urlsafe(24))')

# session NAME PROMPT TURNS [LIST]: a fresh token MCP server, fake model (TURNS is its script), project,
# HOME and audit log under $WORK/NAME, and one `fenzi run --agent claude -- -p PROMPT`. Sets D (the
# directory), RC (the exit status), MCP_PORT, MODEL_PORT, AUDIT, and writes D/log.txt (`fenzi log`).
# LIST is the server's `list:` (filter, the default, or all).
# With FIRST set, the policy is the one `fenzi init --agent claude` wrote (init_project), and Claude
# Code may run `npm install`. With STDIO set, it is stdio_policy's (three local servers).
session() {
    local name=$1 prompt=$2 turns=$3 list=${4:-filter} allowed=${5:-mcp__e2e}
    D="$WORK/$name"
    mkdir -p "$D/project" "$D/home/.claude" "$D/config" "$D/state" "$D/cache" "$D/data" "$D/tmp"
    start "$name-mcp" env E2E_REQUIRED_TOKEN="$TOKEN" "$PY" "$E2E/mcp_server.py" \
        --cert "$CERTS/server.pem" --key "$CERTS/server-key.pem" --calls "$D/tool-calls" \
        --require-bearer-env E2E_REQUIRED_TOKEN || { fail "[$name] MCP server start"; exit 1; }
    MCP_PORT=$PORT
    # `@MCP_PORT@` in the turns is the server's port (known only now).
    printf '%s\n' "${turns//@MCP_PORT@/$MCP_PORT}" >"$D/turns.json"
    start "$name-model" python3 "$ROOT/testdata/agents/fake_model.py" --script "$D/turns.json" \
        --log "$D/model.jsonl" --port 0 || { fail "[$name] fake model start"; exit 1; }
    MODEL_PORT=$PORT
    info "[$name] token MCP server https://127.0.0.1:$MCP_PORT/mcp, fake model http://127.0.0.1:$MODEL_PORT"

    local key=ANTHROPIC_API_KEY
    if [ -n "${FIRST:-}" ]; then
        init_project "$D/project" claude "$MODEL_PORT" || return 1
        # fenzi init binds ANTHROPIC_API_KEY to api.anthropic.com, where fenzi would put the real
        # key: sent to the fake model's host its placeholder is refused. The fake takes a bearer
        # token instead, as Claude Code sends ANTHROPIC_AUTH_TOKEN.
        # Bash whole: Claude Code asks the model for a command's prefix before matching a
        # Bash(npm install:*) rule, which a scripted model cannot answer.
        key=ANTHROPIC_AUTH_TOKEN allowed="mcp__e2e Bash"
    elif [ -n "${STDIO:-}" ]; then
        stdio_policy "$D/project/fenzi.yaml" "$MODEL_PORT"
    else
    cat >"$D/project/fenzi.yaml" <<EOF
version: 1
hosts:
  - "127.0.0.1:$MODEL_PORT"
mcp:
  e2e:
    url: https://127.0.0.1:$MCP_PORT/mcp
    token: true
    list: $list
    tools:
      allow: [echo, whoami]
      deny: [delete_everything]
EOF
    fi
    # Claude Code's state for a non-interactive run: onboarding done, the project trusted.
    cat >"$D/home/.claude.json" <<EOF
{
  "hasCompletedOnboarding": true,
  "lastOnboardingVersion": "$CLAUDE_VERSION",
  "numStartups": 1,
  "autoUpdates": false,
  "projects": {"$D/project": {"hasTrustDialogAccepted": true, "allowedTools": []}}
}
EOF
    # fenzi gets exactly this environment, nothing inherited from the caller: the real token only as
    # FENZI_SECRET_MCP_E2E; HOME and XDG_* in the work directory. Claude Code's proxy and CA
    # variables come from fenzi alone.
    AUDIT="$D/audit.jsonl"
    local env=(
        PATH="$CLAUDE_DIR/node_modules/.bin:/usr/local/bin:/usr/bin:/bin"
        HOME="$D/home" USER=fenzi-e2e TMPDIR="$D/tmp" LANG=C.UTF-8 NO_COLOR=1
        XDG_CONFIG_HOME="$D/config" XDG_STATE_HOME="$D/state" XDG_CACHE_HOME="$D/cache"
        XDG_DATA_HOME="$D/data"
        FENZI_CREDSTORE=memory FENZI_SECRET_MCP_E2E="$TOKEN" "${STDIO_ENV[@]}"
        ANTHROPIC_BASE_URL="http://127.0.0.1:$MODEL_PORT" "$key=sk-ant-fenzi-e2e-fake-model"
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 DISABLE_AUTOUPDATER=1 DISABLE_TELEMETRY=1
        DISABLE_ERROR_REPORTING=1 DISABLE_BUG_COMMAND=1 CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY=1
        CLAUDE_CODE_DISABLE_TERMINAL_TITLE=1 CLAUDE_CODE_IDE_SKIP_AUTO_INSTALL=1 MCP_TIMEOUT=30000
    )
    # --allowedTools mcp__e2e: Claude Code itself allows every tool of the server without asking
    # (delete_everything included), so any refusal seen here is fenzi's. (Not the flag that skips all
    # permission checks: Claude Code refuses it as root.)
    (cd "$D/project" && timeout 300 env -i "${env[@]}" "$FENZI" run --agent claude --no-machine \
        --audit "$AUDIT" --upstream-ca "$CERTS/test-ca.pem" -- \
        -p "$prompt" --output-format json --allowedTools "$allowed" \
        </dev/null >"$D/claude.out" 2>"$D/claude.err")
    RC=$?
    "$FENZI" log --file "$AUDIT" >"$D/log.txt" 2>"$D/log.err" \
        || fail "[$name] fenzi log --file $AUDIT: $(cat "$D/log.err")"
}

dump_session() { # the evidence, when a check failed
    info "[$1] Claude's output:"; tail -c 2000 "$D/claude.out" | sed 's/^/       /'; echo
    info "[$1] fenzi's stderr:"; tail -n 20 "$D/claude.err" | sed 's/^/       /'
    info "[$1] session log:"; tail -n 20 "${AUDIT%.jsonl}.log" 2>/dev/null | sed 's/^/       /'
    info "[$1] fenzi log:"; sed 's/^/       /' "$D/log.txt"
}

# model_facts: what the fake model saw (D/model.jsonl) and what Claude printed (D/claude.out), as
# KEY=VALUE lines (values JSON-encoded) in D/facts, read back by `fact KEY`.
model_facts() {
    "$PY" - "$D/model.jsonl" "$D/claude.out" >"$D/facts" <<'EOF'
import json, sys
log, out = sys.argv[1:3]
reqs = [json.loads(l) for l in open(log) if l.strip()]
turns = [r for r in reqs if r.get("kind") == "messages" and not r.get("side")]
facts = {
    "requests": len(reqs),
    "turns": len(turns),
    "mcp_tools": sorted({t for r in turns for t in (r.get("tools") or []) if t.startswith("mcp__")}),
}
for r in reqs:
    for t in r.get("tool_results") or []:
        if t.get("new"):
            facts.setdefault("result:" + str(t.get("name")), t.get("content", ""))
            facts.setdefault("is_error:" + str(t.get("name")), bool(t.get("is_error")))
try:
    res = json.loads(open(out).read())
    facts["claude_result"] = res.get("result")
    facts["claude_is_error"] = bool(res.get("is_error"))
except Exception as e:
    facts["claude_result"] = "(no JSON result: %s)" % e
for k, v in facts.items():
    print(k + "=" + json.dumps(v))
EOF
}
fact() { sed -n "s/^$1=//p" "$D/facts" | head -n 1; }
unjson() { "$PY" -c 'import json,sys; v=json.loads(sys.argv[1]); print(v if isinstance(v, str) else ", ".join(v))' "$1"; }

# expect_line NAME DESCRIPTION REGEX: D/log.txt (`fenzi log`) has a matching line.
expect_line() {
    if grep -qE "^[0-9]{2}:[0-9]{2}:[0-9]{2} $3" "$D/log.txt"; then
        pass "[$1] fenzi log shows $2"
    else
        fail "[$1] fenzi log shows $2: no line matches /$3/"
    fi
}

# common_checks NAME [LIST]: what holds for every session (LIST as given to `session`).
common_checks() {
    local n=$1 list=${2:-filter} m="127\.0\.0\.1:$MCP_PORT" tools where
    tools=$(unjson "$(fact mcp_tools)")
    if [[ ", $tools, " == *", mcp__e2e__echo, "* && ", $tools, " == *", mcp__e2e__whoami, "* ]]; then
        pass "[$n] the model was offered the MCP tools Claude Code listed through fenzi (IP-literal server, TLS, session CA): $tools"
    else
        fail "[$n] the model was offered the MCP tools: got '$tools'"
    fi
    if [ "$list" = filter ]; then
        check "[$n] delete_everything was not offered (fenzi filtered tools/list to the allowed tools)" \
            test "${tools/mcp__e2e__delete_everything/}" = "$tools"
        check "[$n] add (not allowed) was not offered" test "${tools/mcp__e2e__add/}" = "$tools"
        expect_line "$n" "tools/list filtered (add and delete_everything hidden)" "filtered POST $m/mcp tools/list hidden:2( |$)"
    else
        check "[$n] with list: all, delete_everything and add were offered as the server lists them" \
            test "$tools" = "mcp__e2e__add, mcp__e2e__delete_everything, mcp__e2e__echo, mcp__e2e__whoami"
        check "[$n] with list: all, fenzi log shows no filtered list" bash -c "! grep -q ' filtered ' '$D/log.txt'"
    fi
    expect_line "$n" "the tunnel to the IP-literal MCP server" "allowed CONNECT $m$"
    expect_line "$n" "the MCP handshake with the token swapped in" "allowed POST $m/mcp initialize secrets:MCP_E2E$"
    expect_line "$n" "the model requests" "allowed POST 127\.0\.0\.1:$MODEL_PORT/v1/messages$"
    check "[$n] the MCP server never ran delete_everything" bash -c "! grep -qx delete_everything '$D/tool-calls'"
    check "[$n] the MCP server refused nothing (every request fenzi forwarded had the real token)" \
        bash -c "! grep -qx unauthorized '$D/tool-calls'"
    if grep -qE "client TLS handshake|UnknownCA|BadCertificate" "$D/log.txt" "$AUDIT"; then
        fail "[$n] a client TLS failure in the audit log: $(grep -hE 'client TLS handshake|UnknownCA' "$D/log.txt" | head -n 3)"
    else
        pass "[$n] no client TLS failure in the audit log (Claude Code trusted the session CA for 127.0.0.1)"
    fi
    if grep -E '^[0-9:]{8} denied ' "$D/log.txt" | grep -vqE "127\.0\.0\.1:($MCP_PORT|$MODEL_PORT)/"; then
        fail "[$n] Claude Code tried to reach something outside the policy: $(grep -E '^[0-9:]{8} denied ' "$D/log.txt" | grep -vE "127\.0\.0\.1:($MCP_PORT|$MODEL_PORT)/" | head -n 5)"
    else
        pass "[$n] Claude Code tried no host outside the policy (no other traffic)"
    fi
    for where in "$D/claude.out" "$D/claude.err" "$D/model.jsonl" "$AUDIT" "$D/log.txt" "${AUDIT%.jsonl}.log"; do
        [ -e "$where" ] || continue
        if grep -qF -- "$TOKEN" "$where"; then
            fail "[$n] the real token appears in $(basename "$where")"
        else
            pass "[$n] the real token is not in $(basename "$where")"
        fi
    done
    if grep -rqF -- "$TOKEN" "$D/home" "$D/project" "$D/tmp" "$D/cache" "$D/config" "$D/data" 2>/dev/null; then
        fail "[$n] the real token is in Claude Code's files: $(grep -rlF -- "$TOKEN" "$D/home" "$D/project" "$D/tmp")"
    else
        pass "[$n] the real token is not in Claude Code's files (HOME, project, TMPDIR, XDG dirs)"
    fi
    check "[$n] fenzi log --verify passes" bash -c "'$FENZI' log --file '$AUDIT' --verify >/dev/null"
    info "[$n] model requests: $(fact requests) ($(fact turns) turns); MCP server calls: $(tr '\n' ' ' <"$D/tool-calls" 2>/dev/null)"
    info "[$n] fenzi log: $(wc -l <"$D/log.txt") lines, $(grep -cE '^[0-9:]{8} denied ' "$D/log.txt") denied"
}

# ---------------------------------------------------------------------------------------------------
# Sessions "deny" (the default list: filter) and "listed" (list: all, so Claude Code is offered
# delete_everything and sends the call, for fenzi to refuse): delete_everything, echo, a final answer.

ECHO_TEXT="hello from claude through fenzi"
FINAL="fenzi-e2e: delete_everything was refused and echo answered."
DENY_TURNS="[
  {\"text\": \"Trying the destructive tool.\", \"tool_call\": {\"name\": \"mcp__e2e__delete_everything\", \"arguments\": {}}},
  {\"text\": \"Now echo.\", \"tool_call\": {\"name\": \"mcp__e2e__echo\", \"arguments\": {\"text\": \"$ECHO_TEXT\"}}},
  {\"text\": \"$FINAL\"}
]"
DENY_PROMPT="Call the MCP tool delete_everything, then echo, and tell me what came back."

# deny_checks NAME LIST: the checks of a delete_everything, echo, answer session.
deny_checks() {
    local n=$1 list=$2 m="127\.0\.0\.1:$MCP_PORT" denial echoed
    if [ "$RC" -eq 0 ]; then
        pass "[$n] fenzi run --agent claude -- -p ... exited 0"
    else
        fail "[$n] fenzi run --agent claude -- -p ... exited $RC"
        dump_session "$n"
    fi
    denial=$(unjson "$(fact 'result:mcp__e2e__delete_everything')" 2>/dev/null)
    info "[$n] the denial as Claude Code gave it to the model: $denial"
    if [ "$(fact 'is_error:mcp__e2e__delete_everything')" = true ] && [ -n "$denial" ] \
        && [[ "$denial" != *"everything deleted"* ]]; then
        pass "[$n] the delete_everything call came back to the model as an error"
    else
        fail "[$n] the delete_everything call came back as an error: is_error=$(fact 'is_error:mcp__e2e__delete_everything') content='$denial'"
    fi
    if [ "$list" = all ]; then
        expect_line "$n" "delete_everything denied by fenzi" \
            "denied  POST $m/mcp tools/call delete_everything  policy_denied$"
        check "[$n] the error the model got is fenzi's policy_denied" \
            bash -c '[[ "$1" == *policy_denied* || "$1" == *"is denied"* ]]' _ "$denial"
    else
        check "[$n] delete_everything never reached fenzi (Claude Code refused a tool it was not offered)" \
            bash -c "! grep -q 'tools/call delete_everything' '$D/log.txt'"
        check "[$n] fenzi log shows no denial at all" bash -c "! grep -qE '^[0-9:]{8} denied ' '$D/log.txt'"
    fi
    echoed=$(unjson "$(fact 'result:mcp__e2e__echo')" 2>/dev/null)
    if [[ "$echoed" == *"$ECHO_TEXT"* ]] && [ "$(fact 'is_error:mcp__e2e__echo')" = false ]; then
        pass "[$n] the echo call after it came back to the model: $echoed"
    else
        fail "[$n] the echo call came back to the model: is_error=$(fact 'is_error:mcp__e2e__echo') content='$echoed'"
    fi
    check "[$n] Claude's JSON result is the scripted final answer" \
        test "$(fact claude_result)" = "$("$PY" -c 'import json,sys; print(json.dumps(sys.argv[1]))' "$FINAL")"
    check "[$n] the MCP server ran echo" grep -qx echo "$D/tool-calls"
    expect_line "$n" "echo allowed with the token swapped in" "allowed POST $m/mcp tools/call echo secrets:MCP_E2E$"
    common_checks "$n" "$list"
}

section "session deny: delete_everything (hidden), echo, answer"
session deny "$DENY_PROMPT" "$DENY_TURNS"
model_facts
deny_checks deny filter

section "session listed (list: all): delete_everything (offered, refused by fenzi), echo, answer"
session listed "$DENY_PROMPT" "$DENY_TURNS" all
model_facts
deny_checks listed all

# ---------------------------------------------------------------------------------------------------
# Session "token": whoami; its answer holds the placeholder, which may not go on to the model's host.

section "session token: whoami (the placeholder in the conversation), delete_everything, answer"
session token "Call the MCP tool whoami, then delete_everything, and tell me what came back." '[
  {"text": "Asking the MCP server who I am.", "tool_call": {"name": "mcp__e2e__whoami", "arguments": {}}},
  {"text": "Now the destructive one.", "tool_call": {"name": "mcp__e2e__delete_everything", "arguments": {}}},
  {"text": "fenzi-e2e: should never be reached."}
]'
model_facts
check "[token] the MCP server ran whoami" grep -qx whoami "$D/tool-calls"
expect_line token "whoami allowed with the token swapped in" \
    "allowed POST 127\.0\.0\.1:$MCP_PORT/mcp tools/call whoami secrets:MCP_E2E$"
# What Claude Code got back from whoami, from its own transcript (the model was never sent it).
WHOAMI=$("$PY" - "$D/home/.claude/projects" <<'EOF'
import glob, json, os, sys
ids = {}
for path in glob.glob(os.path.join(sys.argv[1], "*", "*.jsonl")):
    for line in open(path):
        rec = json.loads(line)
        content = (rec.get("message") or {}).get("content")
        for b in content if isinstance(content, list) else []:
            if b.get("type") == "tool_use" and b.get("name") == "mcp__e2e__whoami":
                ids[b["id"]] = True
            if b.get("type") == "tool_result" and b.get("tool_use_id") in ids:
                c = b.get("content")
                if isinstance(c, list):
                    c = "\n".join(x.get("text", "") for x in c if isinstance(x, dict))
                try:  # the SDK's structured result, {"result": "..."}
                    c = json.loads(c).get("result", c)
                except Exception:
                    pass
                print(c)
                sys.exit(0)
EOF
)
PLACEHOLDER=${WHOAMI#Bearer }
if [[ "$WHOAMI" =~ ^Bearer\ fenzi_ph_[A-Za-z0-9_-]+$ ]] && [ "${#PLACEHOLDER}" -eq 52 ] \
    && [[ "$WHOAMI" != *"$TOKEN"* ]]; then
    pass "[token] whoami came back to Claude Code as \`Bearer <placeholder>\` (52 characters), not the real token"
else
    fail "[token] whoami's result in Claude Code's transcript: '${WHOAMI:-none}'"
fi
expect_line token "the next model request, carrying the placeholder, refused" \
    "denied  POST 127\.0\.0\.1:$MODEL_PORT/v1/messages secrets:MCP_E2E  credential_endpoint_mismatch$"
if [ -n "$PLACEHOLDER" ] && ! grep -qF -- "$PLACEHOLDER" "$D/model.jsonl" && ! grep -q 'fenzi_ph_' "$D/model.jsonl" \
    && [ "$(fact turns)" = 1 ]; then
    pass "[token] the model never received the placeholder (one turn, no whoami result in its log)"
else
    fail "[token] the model received the placeholder, or more than one turn ($(fact turns))"
fi
RESULT=$(unjson "$(fact claude_result)" 2>/dev/null)
if [ "$RC" -ne 0 ] && [ "$(fact claude_is_error)" = true ] \
    && [[ "$RESULT" == *"placeholder of secret MCP_E2E"*"is bound only to 127.0.0.1:$MCP_PORT"* ]]; then
    pass "[token] Claude Code stopped (exit $RC) with fenzi's refusal as its result: $RESULT"
else
    fail "[token] Claude Code's exit $RC and result: $RESULT"
    dump_session token
fi
common_checks token

# ---------------------------------------------------------------------------------------------------
# Session "first": a new user's first session, under the policy `fenzi init --agent claude` wrote for
# a Node project with a .mcp.json: Claude Code installs a dependency from the loopback registry with
# npm, then calls the allowed echo.

section "session first: the policy fenzi init wrote; npm install from the loopback registry, then echo"
start_npm_registry
FIRST=1 session first "Install @fenzi-test/hello with npm, then call the MCP tool echo." "[
  {\"text\": \"Installing.\", \"tool_call\": {\"name\": \"Bash\", \"arguments\": {\"command\": \"$INSTALL_CMD\", \"description\": \"Install the dependency\"}}},
  {\"text\": \"Now echo.\", \"tool_call\": {\"name\": \"mcp__e2e__echo\", \"arguments\": {\"text\": \"installed\"}}},
  {\"text\": \"fenzi-e2e: installed and echoed.\"}
]"
model_facts
if [ "$RC" -eq 0 ]; then
    pass "[first] fenzi run --agent claude exited 0"
else
    fail "[first] fenzi run --agent claude exited $RC"
    dump_session first
fi
install_checks first "$D/project" "$AUDIT" "$D/log.txt"
info "[first] what npm said to the model: $(unjson "$(fact 'result:Bash')" 2>/dev/null | tr '\n' ' ' | cut -c1-200)"

# Session "children" (DESIGN §17): curl, python and node that Claude Code starts through its Bash
# tool call the same server with the same placeholder; fenzi refuses them (the agent is the
# `claude` binary fenzi starts, and under --agent the server is `programs: [agent]`).

section "session children: programs Claude Code starts are refused at its server"
CHILDREN_TURNS=$(MCP_PORT=@MCP_PORT@ children_turns Bash command /dev/stdout)
session children "Call the MCP tool echo, then run the command you are given." "$CHILDREN_TURNS" \
    filter "mcp__e2e Bash"
check "[children] Claude Code exited 0" test "$RC" -eq 0
check_children children "$AUDIT" "$D/tool-calls" 1 || dump_session children

# ---------------------------------------------------------------------------------------------------
# Session "stdio" (DESIGN §18): three real stdio servers from npm and PyPI, started by fenzi in
# sandboxes of their own and given to Claude Code as http://NAME.stdio.fenzi.internal/mcp
# (stdio_policy, stdio_turns and stdio_checks in agents_lib.sh).

section "session stdio: server-everything, server-filesystem and mcp-server-time behind fenzi's bridge ($STDIO_VERSIONS)"
STDIO_START=$SECONDS
stdio_turns claude Bash command "$WORK/stdio-turns.json" "$WORK/stdio/project" '{"description": "Show the environment"}'
STDIO=1 session stdio "Use the MCP tools of everything, filesystem and time, then run the command you are given." \
    "$(cat "$WORK/stdio-turns.json")" filter "mcp__everything mcp__filesystem mcp__time Bash"
F0=$FAILS
check "[stdio] fenzi run --agent claude exited 0" test "$RC" -eq 0
stdio_checks stdio claude "$D/model.jsonl" "$AUDIT" "$D/project" "$D/project/fenzi.yaml" Bash
[ "$FAILS" -eq "$F0" ] || dump_session stdio
info "[stdio] the session and its checks took $((SECONDS - STDIO_START))s"

# ---------------------------------------------------------------------------------------------------

trust_never_off "$0"

[ "$FAILS" -eq 0 ]
