#!/usr/bin/env bash
# Codex, the real agent, end to end in `fenzi run --agent codex`, all on 127.0.0.1 with no model
# behind it: testdata/agents/fake_model.py plays the OpenAI Responses API from a turn script
# (through testdata/agents/codex/fake_model_ns.py, which adds Codex's tool namespaces to it), and the
# official Python MCP SDK server is a `token: true` server over TLS that requires the real token.
# Codex (pinned below, installed from npm into the agent cache, see lib.sh) gets the
# policy's server from fenzi (`-c mcp_servers=...`) and reaches the model and the server only through
# fenzi. Three sessions, each with its own fake model, turn script and audit log:
#
#   1 filtered  (testdata/agents/codex/turns-filtered.json): echo, then delete_everything, then text.
#               fenzi filters tools/list, so Codex offers the model echo and whoami only; the echo
#               result comes back to the model; delete_everything is refused by Codex itself as an
#               unknown tool and never leaves the sandbox. Codex exits 0.
#   2 whoami    (turns-whoami.json): whoami returns the Authorization header the server got. Codex
#               holds only the placeholder; fenzi swaps in the real token on the way up (the server
#               answers 401 to anything else) and swaps the echoed token back to the placeholder on
#               the way down, so Codex sees `Bearer <placeholder>`. Codex then sends that result to
#               the model, and fenzi refuses the request as credential_endpoint_mismatch (README,
#               "Secrets": a placeholder in the conversation cannot go to the model API), so the
#               model never sees it and Codex exits non-zero. That refusal is what is checked.
#   3 list-all  (turns-list-all.json): the same server with `list: all`, so Codex offers
#               delete_everything and calls it; fenzi denies the tools/call (policy_denied) and the
#               denial comes back to the model as that tool's error. Codex exits 0.
#   (4 first and 5 children: see their sections)
#   6 stdio     three real stdio servers installed by name (server-everything and server-filesystem
#               from npm, mcp-server-time from PyPI, pinned in testdata/e2e/stdio-servers, cached in
#               .work/) as `command` entries: fenzi starts each in a sandbox of its own and Codex
#               reaches it at http://NAME.stdio.fenzi.internal/mcp (the URL its rendered config
#               names). The model runs a command in exec_command (the agent's environment: no
#               placeholder for the time server's secret), then calls echo, get-env (denied:
#               policy_denied), read_text_file and get_current_time; each answer reaches the model,
#               each call has its record with transport stdio and the server's name (stdio_checks in
#               agents_lib.sh).
#
# Throughout: the real token is only in fenzi's environment (FENZI_SECRET_MCP_E2E, FENZI_CREDSTORE=
# memory) and the server's; it appears nowhere in Codex's output or state, the model's log, the
# audit logs or fenzi's session logs. Everything fenzi let through went to 127.0.0.1.
# HOME, XDG_* and CODEX_HOME are in the work directory.
# Prints PASS/FAIL per check, the run time and `agent codex: N passed, M failed`; exits 1 on any failure.
#
# Usage: scripts/e2e/agent_codex.sh   (builds fenzi unless FENZI=/path/to/fenzi is given)
#   FENZI_AGENT_CACHE=DIR   where agents are installed (default .work/agents; Codex in DIR/codex)
#   E2E_KEEP=1              keep the work directory even when everything passed
set -uo pipefail

CODEX_VERSION=0.171.0

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
export NO_COLOR=1

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=agents_lib.sh
source "$ROOT/scripts/e2e/agents_lib.sh"

agent_prelude Codex codex

# Codex, pinned, from npm (the only traffic that leaves this machine, and it is npm's own).
CODEX_DIR="$(agent_cache_dir)/codex"
codex_installed() {
    node -e 'process.stdout.write(require(process.argv[1]).version)' \
        "$CODEX_DIR/node_modules/@openai/codex/package.json" 2>/dev/null
}
if [ "$(codex_installed)" != "$CODEX_VERSION" ]; then
    echo "agent codex: installing @openai/codex@$CODEX_VERSION into $CODEX_DIR"
    mkdir -p "$CODEX_DIR"
    npm install --prefix "$CODEX_DIR" --no-audit --no-fund --silent --save-exact \
        "@openai/codex@$CODEX_VERSION" >/dev/null \
        || { echo "FAIL setup: npm install @openai/codex@$CODEX_VERSION"; exit 1; }
fi
# The machine's trust settings were for npm (a registry may sit behind the machine's own CA); from
# here on nothing reaches the network but through fenzi, which sets the agent's trust itself.
unset SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS
CODEX_BIN="$CODEX_DIR/node_modules/.bin"
CODEX_SAYS=$("$CODEX_BIN/codex" --version 2>/dev/null | tail -n 1)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-agent-codex.XXXXXX")
PROJECT="$WORK/project"
# Hermetic: no user files are read or written, by fenzi or by Codex.
export HOME="$WORK/home"
export XDG_CONFIG_HOME="$HOME/.config" XDG_STATE_HOME="$HOME/.local/state" \
    XDG_CACHE_HOME="$HOME/.cache" XDG_DATA_HOME="$HOME/.local/share" XDG_RUNTIME_DIR="$HOME/.run"
export CODEX_HOME="$HOME/.codex" FENZI_CREDSTORE=memory
export FAKE_MODEL_API_KEY="fake-model-key" # Codex wants a key for the provider; the fake takes any
mkdir -p "$PROJECT" "$XDG_CONFIG_HOME" "$XDG_STATE_HOME" "$XDG_CACHE_HOME" "$XDG_DATA_HOME" "$CODEX_HOME"
mkdir -m 700 "$XDG_RUNTIME_DIR"

cleanup() {
    stop_pids 5
    if [ "$FAILS" -eq 0 ] && [ -z "${E2E_KEEP:-}" ]; then
        rm -rf "$WORK"
    else
        echo "agent codex: work directory kept: $WORK"
    fi
    echo "agent codex: took $((SECONDS))s (Codex $CODEX_VERSION)"
    echo "agent codex: $PASSES passed, $FAILS failed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


if [ "$CODEX_SAYS" = "codex-cli $CODEX_VERSION" ]; then
    pass "Codex installed from npm: $CODEX_SAYS ($CODEX_DIR)"
else
    fail "Codex in $CODEX_DIR says '$CODEX_SAYS', expected codex-cli $CODEX_VERSION"; exit 1
fi

# ---------------------------------------------------------------------------------------------------
# The MCP server: a token server over TLS, with a random real token known to it and to fenzi only.

start_token_server

# codex_config MODEL_PORT: $CODEX_HOME/config.toml, the model provider pointed at the fake model.
# Codex's own sandbox is off: fenzi's is the boundary here (and the turn scripts run no commands).
# No retries: a refused model request fails the turn at once.
codex_config() {
    cat >"$CODEX_HOME/config.toml" <<EOF
model = "fake-model"
model_provider = "fake"
approval_policy = "never"
sandbox_mode = "danger-full-access"

[model_providers.fake]
name = "fake model (testdata/agents)"
base_url = "http://127.0.0.1:$1/v1"
wire_api = "responses"
env_key = "FAKE_MODEL_API_KEY"
request_max_retries = 0
stream_max_retries = 0
EOF
}

# session NAME SCRIPT [EXTRA]: a fake model playing SCRIPT (log $WORK/NAME.model.jsonl), the policy
# $PROJECT/NAME.yaml, and `fenzi run --agent codex -- exec` in $PROJECT (output $WORK/NAME.{out,err},
# audit log $WORK/NAME.audit.jsonl, fenzi's session log beside it). Sets RC and MODEL_PORT.
session() {
    local name=$1 script=$2 extra=${3:-}
    start "$name-model" "$PY" "$FIX/fake_model_ns.py" --script "$script" \
        --log "$WORK/$name.model.jsonl" --port 0 || { fail "[$name] fake model start"; return 1; }
    MODEL_PORT=$PORT
    touch "$WORK/$name.model.jsonl"
    local dir=$PROJECT config=$PROJECT/$name.yaml
    if [ -n "${FIRST:-}" ]; then
        # A project of its own, with the policy `fenzi init --agent codex` wrote (Codex's key here
        # is the fake provider's, so the OPENAI_API_KEY secret init names is left without a value).
        dir=$WORK/$name config=$WORK/$name/fenzi.yaml
        init_project "$dir" codex "$MODEL_PORT" || return 1
    elif [ -n "${STDIO:-}" ]; then
        stdio_policy "$config" "$MODEL_PORT"
    else
        policy "$config" "$MODEL_PORT" "$extra"
    fi
    codex_config "$MODEL_PORT"
    # RUST_BACKTRACE (set by some developer shells) would make Codex append a stack trace to every
    # tool error the model sees; leave it out so the model gets what a user's Codex sends.
    (cd "$dir" && env -u RUST_BACKTRACE FENZI_SECRET_MCP_E2E="$TOKEN" "${STDIO_ENV[@]}" PATH="$CODEX_BIN:$PATH" timeout 300 \
        "$FENZI" run --config "$config" --no-machine --upstream-ca "$CERTS/test-ca.pem" \
        --audit "$WORK/$name.audit.jsonl" --agent codex -- \
        exec --json --skip-git-repo-check "Use the e2e MCP server's tools." \
        </dev/null >"$WORK/$name.out" 2>"$WORK/$name.err")
    RC=$?
    "$FENZI" log --file "$WORK/$name.audit.jsonl" >"$WORK/$name.log.txt" 2>&1
}

# on_failure NAME: what a failed session left behind.
on_failure() {
    local name=$1
    echo "---- [$name] fenzi run / Codex stderr (tail)"; tail -n 25 "$WORK/$name.err"
    echo "---- [$name] Codex --json (tail)"; tail -n 10 "$WORK/$name.out" | cut -c1-600
    echo "---- [$name] fenzi log"; cat "$WORK/$name.log.txt"
    echo "---- [$name] session log"; cat "$WORK/$name.audit.log" 2>/dev/null
}

# mq NAME CHECK: CHECK (Python) holds over session NAME's model log, where `turns` are the requests
# that offered tools (one per model turn), `offered` the tool names each of them offered, and
# `results` the tool results the model received, {tool name: content}.
mq() {
    "$PY" - "$WORK/$1.model.jsonl" "$2" <<'EOF'
import json, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
turns = [r for r in reqs if r.get("kind") == "responses" and not r.get("side")]
offered = [set(r.get("tools") or []) for r in turns]
results = {t["name"]: t["content"] for r in turns for t in r.get("tool_results", []) if t.get("new")}
sys.exit(0 if eval(sys.argv[2]) else 1)
EOF
}
# result NAME TOOL: the content of the result the model received for TOOL.
result() {
    "$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    for t in json.loads(l).get("tool_results", []):
        if t.get("new") and t["name"] == sys.argv[2]:
            print(t["content"])
' "$WORK/$1.model.jsonl" "$2"
}
# codex_item NAME TOOL FIELD: from Codex's --json events, the completed mcp_tool_call of TOOL:
# FIELD `text` (its result's text) or `error` (its error message).
codex_item() {
    "$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    try:
        ev = json.loads(l)
    except ValueError:
        continue
    it = ev.get("item") or {}
    if ev.get("type") == "item.completed" and it.get("type") == "mcp_tool_call" and it.get("tool") == sys.argv[2]:
        if sys.argv[3] == "error":
            print((it.get("error") or {}).get("message", ""))
        else:
            print("\n".join(c.get("text", "") for c in (it.get("result") or {}).get("content", [])))
' "$WORK/$1.out" "$2" "$3"
}
# expect_log NAME DESCRIPTION REGEX [COUNT]: `fenzi log` of session NAME has COUNT (default: at
# least one) lines matching REGEX (after the time).
expect_log() {
    local n
    n=$(grep -cE "^[0-9:]{8} $3" "$WORK/$1.log.txt")
    if { [ -n "${4:-}" ] && [ "$n" -eq "$4" ]; } || { [ -z "${4:-}" ] && [ "$n" -ge 1 ]; }; then
        pass "[$1] fenzi log: $2"
    else
        fail "[$1] fenzi log: $2: $n lines match /$3/"
    fi
}
final_message() { # final_message NAME: Codex's last agent message
    "$PY" -c '
import json, sys
text = ""
for l in open(sys.argv[1]):
    try:
        ev = json.loads(l)
    except ValueError:
        continue
    if ev.get("type") == "item.completed" and (ev.get("item") or {}).get("type") == "agent_message":
        text = ev["item"].get("text", "")
print(text)
' "$WORK/$1.out"
}

# ---------------------------------------------------------------------------------------------------
section "1 filtered: echo allowed, delete_everything not even offered"

F0=$FAILS
session filtered "$FIX/turns-filtered.json"
check "[filtered] Codex exited 0" test "$RC" -eq 0
check "[filtered] Codex played the whole script (final message \`finished\`)" \
    test "$(final_message filtered)" = finished
check "[filtered] Codex offered the model the MCP tools echo and whoami (listed through fenzi)" \
    mq filtered 'len(turns) == 3 and all({"mcp__e2e__echo", "mcp__e2e__whoami"} <= o for o in offered)'
check "[filtered] delete_everything (and add) were not offered: fenzi filtered tools/list" \
    mq filtered 'not any({"mcp__e2e__delete_everything", "mcp__e2e__add"} & o for o in offered)'
check "[filtered] the echo result came back to the model" \
    mq filtered '"hello through fenzi" in results.get("mcp__e2e__echo", "")'
DENIAL1=$(result filtered mcp__e2e__delete_everything)
if [[ "$DENIAL1" == *"unsupported call"* ]]; then
    pass "[filtered] the scripted delete_everything came back to the model as an unknown-tool error"
    info "Codex told the model: $DENIAL1"
else
    fail "[filtered] delete_everything's result: '$DENIAL1'"
fi
expect_log filtered "tools/list with add and delete_everything hidden" "filtered POST $M/mcp tools/list hidden:2( |$)"
expect_log filtered "echo allowed, with the real token swapped in" "allowed POST $M/mcp tools/call echo +secrets:MCP_E2E$" 1
check "[filtered] no tools/call delete_everything ever reached fenzi (Codex did not send it)" \
    bash -c "! grep -q 'tools/call delete_everything' '$WORK/filtered.log.txt'"
[ "$FAILS" -eq "$F0" ] || on_failure filtered

# ---------------------------------------------------------------------------------------------------
section "2 whoami: the real token goes up, the placeholder comes back, and stays away from the model"

F0=$FAILS
session whoami "$FIX/turns-whoami.json"
WHOAMI=$(codex_item whoami whoami text)
PLACEHOLDER=${WHOAMI#Bearer }
if [[ "$WHOAMI" =~ ^Bearer\ fenzi_ph_[A-Za-z0-9_-]{40,}$ ]] && [[ "$WHOAMI" != *"$TOKEN"* ]]; then
    pass "[whoami] Codex got whoami's answer as \`Bearer <placeholder>\` (fenzi swapped the echoed token back)"
    info "Codex saw: Bearer ${PLACEHOLDER:0:12}… (${#PLACEHOLDER} characters)"
else
    fail "[whoami] whoami's answer in Codex: '$(printf %s "$WHOAMI" | sed "s/$TOKEN/<REAL TOKEN>/g")'"
fi
expect_log whoami "whoami allowed, with the real token swapped in" "allowed POST $M/mcp tools/call whoami +secrets:MCP_E2E$" 1
check "[whoami] the server ran whoami, and every request it got carried the real token (no 401)" \
    bash -c "grep -qx whoami '$WORK/calls' && ! grep -qx unauthorized '$WORK/calls'"
expect_log whoami "the model request carrying the placeholder refused" \
    "denied  POST 127\.0\.0\.1:$MODEL_PORT/v1/responses +secrets:MCP_E2E +credential_endpoint_mismatch$"
check "[whoami] the fake model never received the whoami result (one request, turn 0 only)" \
    mq whoami 'len(turns) == 1 and turns[0]["turn"] == 0 and not results'
if [ -n "$PLACEHOLDER" ] && ! grep -qF -- "$PLACEHOLDER" "$WORK/whoami.model.jsonl"; then
    pass "[whoami] the placeholder never reached the fake model"
else
    fail "[whoami] the placeholder is in the fake model's log (or whoami gave none)"
fi
if [ "$RC" -ne 0 ] && grep -q '"turn.failed".*credential_endpoint_mismatch' "$WORK/whoami.out"; then
    pass "[whoami] Codex's turn failed on the refusal (exit $RC): the placeholder cannot go to the model API"
else
    fail "[whoami] expected Codex to fail the turn on credential_endpoint_mismatch; exit $RC"
fi
[ "$FAILS" -eq "$F0" ] || on_failure whoami

# ---------------------------------------------------------------------------------------------------
section "3 list-all: delete_everything offered and called, fenzi denies it"

F0=$FAILS
session list-all "$FIX/turns-list-all.json" "list: all"
check "[list-all] Codex exited 0" test "$RC" -eq 0
check "[list-all] Codex played the whole script (final message \`finished\`)" \
    test "$(final_message list-all)" = finished
check "[list-all] with \`list: all\` Codex offered delete_everything" \
    mq list-all 'len(turns) == 2 and all("mcp__e2e__delete_everything" in o for o in offered)'
expect_log list-all "delete_everything denied" "denied  POST $M/mcp tools/call delete_everything +policy_denied$" 1
DENIAL3=$(result list-all mcp__e2e__delete_everything)
if [[ "$DENIAL3" == *"not permitted by policy: tools/call delete_everything"* ]] \
    && [[ "$DENIAL3" == *'"reason":"policy_denied"'* ]]; then
    pass "[list-all] the denial came back to the model as delete_everything's error"
    info "Codex told the model:"
    sed 's/^/       | /' <<<"$DENIAL3"
else
    fail "[list-all] delete_everything's result: '$(head -c 600 <<<"$DENIAL3")'"
fi
check "[list-all] Codex reported the call as failed" test -n "$(codex_item list-all delete_everything error)"
[ "$FAILS" -eq "$F0" ] || on_failure list-all

# ---------------------------------------------------------------------------------------------------
section "4 first: the policy fenzi init wrote; npm install from the loopback registry, then echo"

F0=$FAILS
start_npm_registry
FIRST=1 session first "$FIX/turns-install.json"
check "[first] Codex exited 0" test "$RC" -eq 0
install_checks first "$WORK/first" "$WORK/first.audit.jsonl" "$WORK/first.log.txt"
info "[first] what npm said to the model: $(result first exec_command | tr '\n' ' ' | cut -c1-200)"
[ "$FAILS" -eq "$F0" ] || on_failure first

section "5 children: curl, python and node that Codex starts are refused at its server (DESIGN §17)"

# Codex's shell tool is `exec_command`. The agent is the native `codex` its npm launcher starts.
children_turns exec_command cmd "$WORK/turns-children.json"
ECHOES=$(grep -cx echo "$WORK/calls")
F0=$FAILS
session children "$WORK/turns-children.json"
check "[children] Codex exited 0" test "$RC" -eq 0
check_children children "$WORK/children.audit.jsonl" "$WORK/calls" $((ECHOES + 1))
[ "$FAILS" -eq "$F0" ] || on_failure children

section "6 stdio: server-everything, server-filesystem and mcp-server-time behind fenzi's bridge (DESIGN §18)"

# Three real stdio servers from npm and PyPI, started by fenzi in sandboxes of their own and given to
# Codex as http://NAME.stdio.fenzi.internal/mcp (stdio_policy, stdio_turns, stdio_checks in
# agents_lib.sh).
info "$STDIO_VERSIONS"
STDIO_START=$SECONDS
stdio_turns codex exec_command cmd "$WORK/turns-stdio.json" "$PROJECT"
F0=$FAILS
STDIO=1 session stdio "$WORK/turns-stdio.json"
check "[stdio] Codex exited 0" test "$RC" -eq 0
check "[stdio] Codex played the whole script (final message \`finished\`)" test "$(final_message stdio)" = finished
stdio_checks stdio codex "$WORK/stdio.model.jsonl" "$WORK/stdio.audit.jsonl" "$PROJECT" "$PROJECT/stdio.yaml" exec_command
[ "$FAILS" -eq "$F0" ] || on_failure stdio
info "[stdio] the session and its checks took $((SECONDS - STDIO_START))s"

# ---------------------------------------------------------------------------------------------------
section "every session"

check "the MCP server never ran delete_everything" bash -c "! grep -qx delete_everything '$WORK/calls'"
no_token_anywhere "Codex's output and state (\$CODEX_HOME), the model logs, audit and session logs"
placeholder_not_in_logs
session_logs_hold filtered whoami list-all first
other_hosts_tried Codex
trust_never_off "$0" "$FIX"/*

[ "$FAILS" -eq 0 ]
