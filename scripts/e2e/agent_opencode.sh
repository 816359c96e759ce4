#!/usr/bin/env bash
# OpenCode, the real agent, end to end in `fenzi run --agent opencode -- run ...`, all on 127.0.0.1
# with no model behind it: testdata/agents/fake_model.py plays the Anthropic Messages API from a turn
# script, and the official Python MCP SDK server is a `token: true` server over TLS (named by an IP
# literal) that requires the real token. OpenCode (pinned below, installed from npm into
# $(agent_cache_dir)/opencode) is given the model as a custom provider (`@ai-sdk/anthropic`, which
# OpenCode bundles, with `baseURL` on the fake model) in its global config, and the policy's server by
# fenzi (`OPENCODE_CONFIG`, merged over the global config); it reaches both only through fenzi, and
# trusts fenzi's session CA through the variables fenzi sets, nothing else. Three sessions, each with
# its own fake model, turn script, HOME and audit log:
#
#   1 filtered  (testdata/agents/opencode/turns-filtered.json): echo, then delete_everything, then
#               text. fenzi filters tools/list, so OpenCode offers the model e2e_echo and e2e_whoami
#               only; the echo result comes back to the model; OpenCode turns the call of
#               delete_everything, a tool it does not have, into its `invalid` tool, whose error goes
#               back to the model, and the call never leaves the sandbox. OpenCode exits 0.
#   2 whoami    (turns-whoami.json): whoami returns the Authorization header the server got. OpenCode
#               holds only the placeholder; fenzi swaps in the real token on the way up (the server
#               answers 401 to anything else) and the echoed token back to the placeholder on the way
#               down, so OpenCode sees `Bearer <placeholder>`. OpenCode then sends that result to the
#               model, and fenzi refuses the request as credential_endpoint_mismatch (README,
#               "Secrets": a placeholder in the conversation cannot go to the model API), so the model
#               never sees it. That refusal is what is checked.
#   3 list-all  (turns-list-all.json): the same server with `list: all`, so OpenCode offers
#               e2e_delete_everything and calls it; fenzi denies the tools/call (policy_denied) and
#               the denial comes back to the model as that tool's error. OpenCode exits 0.
#   (4 first and 5 children: see their sections)
#   6 stdio     three real stdio servers installed by name (server-everything and server-filesystem
#               from npm, mcp-server-time from PyPI, pinned in testdata/e2e/stdio-servers, cached in
#               .work/) as `command` entries: fenzi starts each in a sandbox of its own and OpenCode
#               reaches it at http://NAME.stdio.fenzi.internal/mcp (the URL its rendered config
#               names). The model runs a command in its bash tool (the agent's environment: no
#               placeholder for the time server's secret), then calls echo, get-env (denied:
#               policy_denied), read_text_file and get_current_time; each answer reaches the model,
#               each call has its record with transport stdio and the server's name (stdio_checks in
#               agents_lib.sh).
#
# Offline: models.dev is not fetched (OPENCODE_DISABLE_MODELS_FETCH), no autoupdate, no sharing, no
# LSP downloads; OpenCode's background `npm install @opencode-ai/plugin` into its config directory
# (the type definitions for TypeScript plugins; there are none here) is answered beforehand by a
# package.json and lock that already list it, so OpenCode tries no host outside the policy.
# Throughout: the real token is only in fenzi's environment (FENZI_SECRET_MCP_E2E, FENZI_CREDSTORE=
# memory) and the server's; it appears nowhere in OpenCode's output or state (HOME, XDG dirs, its
# SQLite database and logs), the model's log, the audit logs or fenzi's session logs. Everything
# fenzi let through went to 127.0.0.1. fenzi and OpenCode get exactly the environment set here
# (env -i). Prints PASS/FAIL per check, the run time and `agent opencode: N passed, M failed`;
# exits 1 on any failure.
#
# Usage: scripts/e2e/agent_opencode.sh   (builds fenzi unless FENZI=/path/to/fenzi is given)
#   FENZI_AGENT_CACHE=DIR   where agents are installed (default $XDG_CACHE_HOME/fenzi/agents, else
#                           ~/.cache/fenzi/agents; OpenCode in DIR/opencode)
#   E2E_KEEP=1              keep the work directory even when everything passed
set -uo pipefail

OPENCODE_VERSION=1.18.33

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export NO_COLOR=1

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=agents_lib.sh
source "$ROOT/scripts/e2e/agents_lib.sh"

agent_prelude OpenCode opencode

# OpenCode, pinned, from npm (the only traffic that leaves this machine, and it is npm's own). The
# package's postinstall puts the platform's binary (opencode-linux-x64 etc.) behind .bin/opencode.
OPENCODE_DIR="$(agent_cache_dir)/opencode"
opencode_installed() {
    node -e 'process.stdout.write(require(process.argv[1]).version)' \
        "$OPENCODE_DIR/node_modules/opencode-ai/package.json" 2>/dev/null
}
if [ "$(opencode_installed)" != "$OPENCODE_VERSION" ] || [ ! -x "$OPENCODE_DIR/node_modules/.bin/opencode" ]; then
    echo "agent opencode: installing opencode-ai@$OPENCODE_VERSION into $OPENCODE_DIR"
    mkdir -p "$OPENCODE_DIR"
    npm install --prefix "$OPENCODE_DIR" --no-audit --no-fund --loglevel=error --save-exact \
        "opencode-ai@$OPENCODE_VERSION" >/dev/null \
        || { echo "FAIL setup: npm install opencode-ai@$OPENCODE_VERSION"; exit 1; }
fi
OPENCODE_BIN="$OPENCODE_DIR/node_modules/.bin"
OPENCODE_SAYS=$(env -i PATH=/usr/bin:/bin HOME=/nonexistent "$OPENCODE_BIN/opencode" --version 2>/dev/null | tail -n 1)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-agent-opencode.XXXXXX")
cleanup() {
    stop_pids 5
    if [ "$FAILS" -eq 0 ] && [ -z "${E2E_KEEP:-}" ]; then
        rm -rf "$WORK"
    else
        echo "agent opencode: work directory kept: $WORK"
    fi
    echo "agent opencode: took $((SECONDS))s (OpenCode $OPENCODE_VERSION)"
    echo "agent opencode: $PASSES passed, $FAILS failed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


if [ "$OPENCODE_SAYS" = "$OPENCODE_VERSION" ]; then
    pass "OpenCode installed from npm: opencode $OPENCODE_SAYS ($OPENCODE_DIR)"
else
    fail "OpenCode in $OPENCODE_DIR says '$OPENCODE_SAYS', expected $OPENCODE_VERSION"; exit 1
fi

declare -A MODEL_PORTS # session name -> its fake model's port

# ---------------------------------------------------------------------------------------------------
# The MCP server: a token server over TLS, with a random real token known to it and to fenzi only.

start_token_server

# opencode_config DIR MODEL_PORT: OpenCode's global config directory DIR ($XDG_CONFIG_HOME/opencode).
# opencode.json: the provider `fake` (OpenCode's bundled @ai-sdk/anthropic, baseURL on the fake
# model) as the model and the small model (session titles), no autoupdate, no sharing. Every tool is
# allowed without asking, so any refusal seen here is fenzi's. package.json and package-lock.json:
# OpenCode installs @opencode-ai/plugin into each config directory in the background unless
# node_modules exists and the lock lists every dependency; with these it has nothing to install.
opencode_config() {
    mkdir -p "$1/node_modules"
    cat >"$1/opencode.json" <<EOF
{
  "\$schema": "https://opencode.ai/config.json",
  "autoupdate": false,
  "share": "disabled",
  "model": "fake/fake-model",
  "small_model": "fake/fake-model",
  "permission": {"*": "allow"},
  "provider": {
    "fake": {
      "npm": "@ai-sdk/anthropic",
      "name": "fake model (testdata/agents)",
      "options": {"baseURL": "http://127.0.0.1:$2/v1", "apiKey": "fake-model-key"},
      "models": {
        "fake-model": {"name": "fake model", "tool_call": true, "limit": {"context": 200000, "output": 8192}}
      }
    }
  }
}
EOF
    printf '{"dependencies": {"@opencode-ai/plugin": "%s"}}\n' "$OPENCODE_VERSION" >"$1/package.json"
    printf '{"lockfileVersion": 3, "packages": {"": {"dependencies": {"@opencode-ai/plugin": "%s"}}}}\n' \
        "$OPENCODE_VERSION" >"$1/package-lock.json"
}

# session NAME SCRIPT [EXTRA]: a fake model playing SCRIPT (log $WORK/NAME.model.jsonl), the policy
# $WORK/NAME/project/fenzi.yaml, HOME and XDG dirs under $WORK/NAME, and `fenzi run --agent opencode
# -- run --format json` in the project (output $WORK/NAME.{out,err}, audit log $WORK/NAME.audit.jsonl,
# fenzi's session log beside it, `fenzi log` in $WORK/NAME.log.txt). Sets RC, D and MODEL_PORT.
session() {
    local name=$1 script=$2 extra=${3:-}
    D="$WORK/$name"
    mkdir -p "$D/project" "$D/home/.config" "$D/home/.local/share" "$D/home/.local/state" \
        "$D/home/.cache" "$D/tmp"
    start "$name-model" "$PY" "$ROOT/testdata/agents/fake_model.py" --script "$script" \
        --log "$WORK/$name.model.jsonl" --port 0 || { fail "[$name] fake model start"; return 1; }
    MODEL_PORT=$PORT
    MODEL_PORTS[$name]=$PORT
    touch "$WORK/$name.model.jsonl"
    if [ -n "${FIRST:-}" ]; then
        # The policy `fenzi init --agent opencode` wrote (OpenCode's key here is in its provider
        # config, so the ANTHROPIC_API_KEY secret init names is left without a value).
        init_project "$D/project" opencode "$MODEL_PORT" || return 1
    elif [ -n "${STDIO:-}" ]; then
        stdio_policy "$D/project/fenzi.yaml" "$MODEL_PORT"
    else
        policy "$D/project/fenzi.yaml" "$MODEL_PORT" "$extra"
    fi
    opencode_config "$D/home/.config/opencode" "$MODEL_PORT"
    local env=(
        PATH="$OPENCODE_BIN:/usr/local/bin:/usr/bin:/bin"
        HOME="$D/home" USER=fenzi-e2e TMPDIR="$D/tmp" LANG=C.UTF-8 NO_COLOR=1
        XDG_CONFIG_HOME="$D/home/.config" XDG_DATA_HOME="$D/home/.local/share"
        XDG_STATE_HOME="$D/home/.local/state" XDG_CACHE_HOME="$D/home/.cache"
        FENZI_CREDSTORE=memory FENZI_SECRET_MCP_E2E="$TOKEN" "${STDIO_ENV[@]}"
        OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_SHARE=1
        OPENCODE_DISABLE_LSP_DOWNLOAD=1 OPENCODE_DISABLE_TERMINAL_TITLE=1
    )
    (cd "$D/project" && timeout 300 env -i "${env[@]}" "$FENZI" run --config "$D/project/fenzi.yaml" \
        --no-machine --upstream-ca "$CERTS/test-ca.pem" --audit "$WORK/$name.audit.jsonl" \
        --agent opencode -- run --format json "Use the e2e MCP server's tools." \
        </dev/null >"$WORK/$name.out" 2>"$WORK/$name.err")
    RC=$?
    "$FENZI" log --file "$WORK/$name.audit.jsonl" >"$WORK/$name.log.txt" 2>&1
}

# on_failure NAME: what a failed session left behind.
on_failure() {
    local name=$1
    echo "---- [$name] fenzi run / OpenCode stderr (tail)"; tail -n 25 "$WORK/$name.err"
    echo "---- [$name] OpenCode --format json (tail)"; tail -n 10 "$WORK/$name.out" | cut -c1-600
    echo "---- [$name] OpenCode's log (warnings and errors)"
    grep -hE 'level=(WARN|ERROR)' "$WORK/$name"/home/.local/share/opencode/log/*.log 2>/dev/null \
        | tail -n 15 | cut -c1-600
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
turns = [r for r in reqs if r.get("kind") == "messages" and not r.get("side")]
offered = [set(r.get("tools") or []) for r in turns]
results = {t["name"]: t["content"] for r in turns for t in r.get("tool_results", []) if t.get("new")}
errors = {t["name"]: t.get("is_error") for r in turns for t in r.get("tool_results", []) if t.get("new")}
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
# oc_tool NAME TOOL FIELD: from OpenCode's --format json events, the tool part of TOOL: FIELD
# `output` (its result), `error` (its error) or `status`.
oc_tool() {
    "$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    try:
        ev = json.loads(l)
    except ValueError:
        continue
    p = ev.get("part") or {}
    if ev.get("type") == "tool_use" and p.get("tool") == sys.argv[2]:
        print((p.get("state") or {}).get(sys.argv[3], ""))
' "$WORK/$1.out" "$2" "$3"
}
# oc_events NAME TYPE: the number of OpenCode --format json events of TYPE.
oc_events() {
    "$PY" -c '
import json, sys
n = 0
for l in open(sys.argv[1]):
    try:
        n += json.loads(l).get("type") == sys.argv[2]
    except ValueError:
        pass
print(n)
' "$WORK/$1.out" "$2"
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
final_message() { # final_message NAME: OpenCode's last text part
    "$PY" -c '
import json, sys
text = ""
for l in open(sys.argv[1]):
    try:
        ev = json.loads(l)
    except ValueError:
        continue
    if ev.get("type") == "text":
        text = (ev.get("part") or {}).get("text", "")
print(text)
' "$WORK/$1.out"
}

# ---------------------------------------------------------------------------------------------------
section "1 filtered: echo allowed, delete_everything not even offered"

F0=$FAILS
session filtered "$FIX/turns-filtered.json"
check "[filtered] OpenCode exited 0" test "$RC" -eq 0
check "[filtered] OpenCode played the whole script (final text \`finished\`)" \
    test "$(final_message filtered)" = finished
check "[filtered] OpenCode offered the model the MCP tools e2e_echo and e2e_whoami (listed through fenzi)" \
    mq filtered 'len(turns) == 3 and all({"e2e_echo", "e2e_whoami"} <= o for o in offered)'
check "[filtered] delete_everything (and add) were not offered: fenzi filtered tools/list" \
    mq filtered 'not any({"e2e_delete_everything", "e2e_add"} & o for o in offered)'
check "[filtered] the echo result came back to the model" \
    mq filtered 'results.get("e2e_echo") == "hello through fenzi" and errors.get("e2e_echo") is False'
# OpenCode answers a call of a tool it does not have with its `invalid` tool (the call is renamed).
DENIAL1=$(result filtered invalid)
if [[ "$DENIAL1" == *"unavailable tool 'e2e_delete_everything'"* ]]; then
    pass "[filtered] the scripted delete_everything came back to the model as an unavailable-tool error"
    info "OpenCode told the model: $DENIAL1"
else
    fail "[filtered] delete_everything's result (OpenCode's invalid tool): '$DENIAL1'"
fi
expect_log filtered "tools/list with add and delete_everything hidden" "filtered POST $M/mcp tools/list hidden:2( |$)"
expect_log filtered "echo allowed, with the real token swapped in" "allowed POST $M/mcp tools/call echo +secrets:MCP_E2E$" 1
check "[filtered] no tools/call delete_everything ever reached fenzi (OpenCode did not send it)" \
    bash -c "! grep -q 'tools/call delete_everything' '$WORK/filtered.log.txt'"
[ "$FAILS" -eq "$F0" ] || on_failure filtered

# ---------------------------------------------------------------------------------------------------
section "2 whoami: the real token goes up, the placeholder comes back, and stays away from the model"

F0=$FAILS
session whoami "$FIX/turns-whoami.json"
WHOAMI=$(oc_tool whoami e2e_whoami output)
PLACEHOLDER=${WHOAMI#Bearer }
if [[ "$WHOAMI" =~ ^Bearer\ fenzi_ph_[A-Za-z0-9_-]{40,}$ ]] && [[ "$WHOAMI" != *"$TOKEN"* ]]; then
    pass "[whoami] OpenCode got whoami's answer as \`Bearer <placeholder>\` (fenzi swapped the echoed token back)"
    info "OpenCode saw: Bearer ${PLACEHOLDER:0:12}… (${#PLACEHOLDER} characters)"
else
    fail "[whoami] whoami's answer in OpenCode: '$(printf %s "$WHOAMI" | sed "s/$TOKEN/<REAL TOKEN>/g")'"
fi
expect_log whoami "whoami allowed, with the real token swapped in" "allowed POST $M/mcp tools/call whoami +secrets:MCP_E2E$" 1
check "[whoami] the server ran whoami, and every request it got carried the real token (no 401)" \
    bash -c "grep -qx whoami '$WORK/calls' && ! grep -qx unauthorized '$WORK/calls'"
expect_log whoami "the model request carrying the placeholder refused" \
    "denied  POST 127\.0\.0\.1:$MODEL_PORT/v1/messages +secrets:MCP_E2E +credential_endpoint_mismatch$"
check "[whoami] the fake model never received the whoami result (one turn, turn 0 only)" \
    mq whoami 'len(turns) == 1 and turns[0]["turn"] == 0 and not results'
if [ -n "$PLACEHOLDER" ] && ! grep -qF -- "$PLACEHOLDER" "$WORK/whoami.model.jsonl" \
    && ! grep -q 'fenzi_ph_' "$WORK/whoami.model.jsonl"; then
    pass "[whoami] the placeholder never reached the fake model"
else
    fail "[whoami] the placeholder is in the fake model's log (or whoami gave none)"
fi
WHOAMI_ERR=$("$PY" -c '
import json, sys
for l in open(sys.argv[1]):
    try:
        ev = json.loads(l)
    except ValueError:
        continue
    if ev.get("type") == "error":  # {"name": "APIError", "data": {"message", "statusCode", ...}}
        data = (ev.get("error") or {}).get("data") or {}
        status = (data.get("responseHeaders") or {}).get("proxy-status", "")
        print("%s %s; proxy-status: %s" % (data.get("statusCode"), data.get("message"), status))
' "$WORK/whoami.out")
if [ "$RC" -ne 0 ] && [[ "$WHOAMI_ERR" == *credential_endpoint_mismatch* ]] \
    && [ "$(final_message whoami)" != finished ]; then
    pass "[whoami] OpenCode stopped on fenzi's refusal (exit $RC): the placeholder cannot go to the model API"
    info "OpenCode reported: $WHOAMI_ERR"
else
    fail "[whoami] expected OpenCode to report credential_endpoint_mismatch; exit $RC, error: '${WHOAMI_ERR:-none}'"
fi
[ "$FAILS" -eq "$F0" ] || on_failure whoami

# ---------------------------------------------------------------------------------------------------
section "3 list-all: delete_everything offered and called, fenzi denies it"

F0=$FAILS
session list-all "$FIX/turns-list-all.json" "list: all"
check "[list-all] OpenCode exited 0" test "$RC" -eq 0
check "[list-all] OpenCode played the whole script (final text \`finished\`)" \
    test "$(final_message list-all)" = finished
check "[list-all] with \`list: all\` OpenCode offered e2e_delete_everything (and e2e_add)" \
    mq list-all 'len(turns) == 2 and all({"e2e_delete_everything", "e2e_add", "e2e_echo", "e2e_whoami"} <= o for o in offered)'
check "[list-all] with \`list: all\`, fenzi log shows no filtered list" \
    bash -c "! grep -q ' filtered ' '$WORK/list-all.log.txt'"
expect_log list-all "delete_everything denied" "denied  POST $M/mcp tools/call delete_everything +policy_denied$" 1
DENIAL3=$(result list-all e2e_delete_everything)
if [[ "$DENIAL3" == *"not permitted by policy: tools/call delete_everything"* ]] \
    && [[ "$DENIAL3" == *'"reason":"policy_denied"'* ]]; then
    pass "[list-all] the denial came back to the model as e2e_delete_everything's result"
    info "OpenCode told the model:"
    sed 's/^/       | /' <<<"$DENIAL3"
else
    fail "[list-all] e2e_delete_everything's result: '$(head -c 600 <<<"$DENIAL3")'"
fi
check "[list-all] OpenCode reported the call as failed (tool part status error)" \
    test "$(oc_tool list-all e2e_delete_everything status)" = error
[ "$FAILS" -eq "$F0" ] || on_failure list-all

# ---------------------------------------------------------------------------------------------------
section "4 first: the policy fenzi init wrote; npm install from the loopback registry, then echo"

F0=$FAILS
start_npm_registry
FIRST=1 session first "$FIX/turns-install.json"
check "[first] OpenCode exited 0" test "$RC" -eq 0
check "[first] OpenCode played the whole script (final text \`finished\`)" \
    test "$(final_message first)" = finished
install_checks first "$D/project" "$WORK/first.audit.jsonl" "$WORK/first.log.txt"
info "[first] what npm said to the model: $(result first bash | tr '\n' ' ' | cut -c1-200)"
[ "$FAILS" -eq "$F0" ] || on_failure first

section "5 children: curl, python and node that OpenCode starts are refused at its server (DESIGN §17)"

# OpenCode's shell tool is `bash` (with a `description`). The agent is the `opencode` binary itself.
children_turns bash command "$WORK/turns-children.json" e2e_echo '{"description": "Run three clients"}'
ECHOES=$(grep -cx echo "$WORK/calls")
F0=$FAILS
session children "$WORK/turns-children.json"
check "[children] OpenCode exited 0" test "$RC" -eq 0
check_children children "$WORK/children.audit.jsonl" "$WORK/calls" $((ECHOES + 1))
[ "$FAILS" -eq "$F0" ] || on_failure children

section "6 stdio: server-everything, server-filesystem and mcp-server-time behind fenzi's bridge (DESIGN §18)"

# Three real stdio servers from npm and PyPI, started by fenzi in sandboxes of their own and given to
# OpenCode as http://NAME.stdio.fenzi.internal/mcp (stdio_policy, stdio_turns, stdio_checks in
# agents_lib.sh).
info "$STDIO_VERSIONS"
STDIO_START=$SECONDS
stdio_turns opencode bash command "$WORK/turns-stdio.json" "$WORK/stdio/project" '{"description": "Show the environment"}'
F0=$FAILS
STDIO=1 session stdio "$WORK/turns-stdio.json"
check "[stdio] OpenCode exited 0" test "$RC" -eq 0
check "[stdio] OpenCode played the whole script (final text \`finished\`)" test "$(final_message stdio)" = finished
stdio_checks stdio opencode "$WORK/stdio.model.jsonl" "$WORK/stdio.audit.jsonl" "$D/project" "$D/project/fenzi.yaml" bash
[ "$FAILS" -eq "$F0" ] || on_failure stdio
info "[stdio] the session and its checks took $((SECONDS - STDIO_START))s"

# ---------------------------------------------------------------------------------------------------
section "every session"

check "the MCP server never ran delete_everything" bash -c "! grep -qx delete_everything '$WORK/calls'"
no_token_anywhere "OpenCode's output and state (HOME, XDG dirs, its database), the model logs, audit and session logs"
placeholder_not_in_logs
session_logs_hold filtered whoami list-all first
for name in filtered whoami list-all first; do
    OTHERS=$(grep -E '^[0-9:]{8} denied ' "$WORK/$name.log.txt" | grep -vE " 127\.0\.0\.1:($MCP_PORT|${MODEL_PORTS[$name]:-none})/")
    if [ -z "$OTHERS" ]; then
        pass "[$name] OpenCode tried no host outside the policy (no models.dev, npm, update or share traffic)"
    else
        fail "[$name] OpenCode tried to reach something outside the policy: $(head -n 5 <<<"$OTHERS")"
    fi
    if grep -qE "client TLS handshake|UnknownCA|BadCertificate" "$WORK/$name.log.txt" "$WORK/$name.audit.jsonl"; then
        fail "[$name] a client TLS failure in the audit log"
    else
        pass "[$name] no client TLS failure (OpenCode trusted the session CA for 127.0.0.1)"
    fi
done
other_hosts_tried OpenCode
trust_never_off "$0" "$FIX"/*

[ "$FAILS" -eq 0 ]
