#!/usr/bin/env bash
# Grok Build (xAI's `grok`, the real agent) end to end in `fenzi run --agent grok`, all on 127.0.0.1
# with no model behind it: testdata/agents/fake_model.py plays the Anthropic Messages API from a turn
# script (through testdata/agents/grok/fake_model_grok.py, which treats Grok's session-title request
# as a side request and names `use_tool` results after the MCP tool they called), and the official
# Python MCP SDK server is a `token: true` server over TLS that requires the real token. Grok
# (pinned below, installed from npm into ${FENZI_AGENT_CACHE:-${XDG_CACHE_HOME:-~/.cache}/fenzi/
# agents}/grok) reaches the model (a `[model.fake]` with `api_backend = "messages"` in its
# config.toml) and the server only through fenzi, headless (`grok -p ... --output-format json`).
#
# Grok reaches MCP tools through two meta-tools: `search_tool` (lists the servers' tools as
# `SERVER__TOOL`) and `use_tool` (`{"tool_name": "e2e__echo", "tool_input": {...}}`). So what the
# model is "offered" is what search_tool answers.
#
# The handover: Grok reads MCP servers only from its own settings files (a GROK_CONFIG_PATH overlay
# may not add any), so `fenzi run --agent grok` shows Grok, inside the sandbox, a session copy of
# $HOME/.grok/config.toml: the user's settings with the policy's servers in place of the file's own
# `mcp_servers`. Check 0 runs `grok mcp list --json` inside `fenzi run --agent grok` with a config
# that names a server of its own (`mine`): Grok must list e2e and only e2e, and the user's file must
# be byte for byte what it was. The sessions below run the same way: the config names only the fake
# model, and the servers come from fenzi.
#
# Three sessions, each with its own fake model, turn script and audit log:
#
#   1 filtered  (testdata/agents/grok/turns-filtered.json): search_tool, use_tool echo, use_tool
#               delete_everything, then text. fenzi filters tools/list, so search_tool finds echo
#               and whoami only; the echo result comes back to the model; delete_everything is
#               refused by Grok itself ("Tool not found") and never leaves the sandbox. Exit 0.
#   2 whoami    (turns-whoami.json): search_tool, use_tool whoami (returns the Authorization header
#               the server got). Grok holds only the placeholder; fenzi swaps in the real token on
#               the way up (the server answers 401 to anything else) and swaps the echoed token back
#               on the way down, so Grok sees `Bearer <placeholder>`. Grok then sends that result to
#               the model, and fenzi refuses the request as credential_endpoint_mismatch (README,
#               "Secrets"), so the model never sees it. That refusal is what is checked.
#   3 list-all  (turns-list-all.json): the same server with `list: all`, so search_tool finds
#               delete_everything and the model calls it; fenzi denies the tools/call
#               (policy_denied) and the denial comes back to the model as that call's result. Exit 0.
#   (4 first and 5 children: see their sections)
#   6 stdio     three real stdio servers installed by name (server-everything and server-filesystem
#               from npm, mcp-server-time from PyPI, pinned in testdata/e2e/stdio-servers, cached in
#               .work/) as `command` entries: fenzi starts each in a sandbox of its own and Grok
#               reaches it at http://NAME.stdio.fenzi.internal/mcp (the URL its rendered config
#               names). The model runs a command in run_terminal_command (the agent's environment:
#               no placeholder for the time server's secret), then calls echo, get-env (denied:
#               policy_denied), read_text_file and get_current_time; each answer reaches the model,
#               each call has its record with transport stdio and the server's name (stdio_checks in
#               agents_lib.sh).
#
# Throughout: the real token is only in fenzi's environment (FENZI_SECRET_MCP_E2E, FENZI_CREDSTORE=
# memory) and the server's; it appears nowhere in Grok's output or state ($HOME/.grok), the model's
# log, the audit logs or fenzi's session logs. Everything fenzi let through went to 127.0.0.1.
# fenzi runs with exactly the environment set here (env -i); HOME and XDG_* are in the work directory.
# Prints PASS/FAIL per check, the run time and `agent grok: N passed, M failed`; exits 1 on any failure.
#
# Usage: scripts/e2e/agent_grok.sh   (builds fenzi unless FENZI=/path/to/fenzi is given)
#   FENZI_AGENT_CACHE=DIR   where agents are installed (default ${XDG_CACHE_HOME:-~/.cache}/fenzi/
#                           agents; Grok in DIR/grok)
#   E2E_KEEP=1              keep the work directory even when everything passed
set -uo pipefail

GROK_VERSION=1.0.41

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export NO_COLOR=1

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"
# shellcheck source=agents_lib.sh
source "$ROOT/scripts/e2e/agents_lib.sh"

agent_prelude Grok grok

# Grok, pinned, from npm (the only traffic that leaves this machine, and it is npm's own). The
# package's postinstall unpacks the native binary from @xai-official/grok-<platform> beside its
# launcher and also copies it to $GROK_HOME/bin (default ~/.grok): GROK_HOME points into the cache
# so the install leaves the user's ~/.grok alone.
GROK_DIR="$(agent_cache_dir)/grok"
grok_installed() {
    node -e 'process.stdout.write(require(process.argv[1]).version)' \
        "$GROK_DIR/node_modules/@xai-official/grok/package.json" 2>/dev/null
}
GROK_BIN="$GROK_DIR/node_modules/.bin"
if [ "$(grok_installed)" != "$GROK_VERSION" ] || [ ! -x "$GROK_BIN/grok" ]; then
    echo "agent grok: installing @xai-official/grok@$GROK_VERSION into $GROK_DIR"
    mkdir -p "$GROK_DIR/grok-home"
    GROK_HOME="$GROK_DIR/grok-home" npm install --prefix "$GROK_DIR" --no-audit --no-fund \
        --loglevel=error --save-exact "@xai-official/grok@$GROK_VERSION" >/dev/null \
        || { echo "FAIL setup: npm install @xai-official/grok@$GROK_VERSION"; exit 1; }
    rm -rf "$GROK_DIR/grok-home" # the postinstall's second copy of the binary (160 MB), unused here
fi

# The setup, the build and npm ran with the caller's proxy and CA variables (a registry may need
# them); nothing after this does. fenzi and Grok get exactly BASE_ENV below.
unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
unset SSL_CERT_FILE SSL_CERT_DIR REQUESTS_CA_BUNDLE CURL_CA_BUNDLE NODE_EXTRA_CA_CERTS

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-agent-grok.XXXXXX")
PROJECT="$WORK/project"
# Hermetic: no user files are read or written, by fenzi or by Grok.
H="$WORK/home"
mkdir -p "$PROJECT" "$H/.grok" "$H/.config" "$H/.local/state" "$H/.cache" "$H/.local/share" "$WORK/tmp"
mkdir -m 700 "$H/.run"
BASE_ENV=(
    PATH="$GROK_BIN:/usr/local/bin:/usr/bin:/bin"
    HOME="$H" USER=fenzi-e2e TMPDIR="$WORK/tmp" LANG=C.UTF-8 NO_COLOR=1
    XDG_CONFIG_HOME="$H/.config" XDG_STATE_HOME="$H/.local/state" XDG_CACHE_HOME="$H/.cache"
    XDG_DATA_HOME="$H/.local/share" XDG_RUNTIME_DIR="$H/.run"
    FENZI_CREDSTORE=memory
    FAKE_MODEL_API_KEY=fake-model-key # the model's env_key; the fake takes any key
    GROK_TELEMETRY_ENABLED=0
)
GROK_SAYS=$(env -i "${BASE_ENV[@]}" "$GROK_BIN/grok" --version 2>/dev/null | head -n 1)

cleanup() {
    stop_pids 5
    if [ "$FAILS" -eq 0 ] && [ -z "${E2E_KEEP:-}" ]; then
        rm -rf "$WORK"
    else
        echo "agent grok: work directory kept: $WORK"
    fi
    echo "agent grok: took $((SECONDS))s (Grok $GROK_VERSION)"
    echo "agent grok: $PASSES passed, $FAILS failed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM


if [[ "$GROK_SAYS" == "grok $GROK_VERSION "* ]]; then
    pass "Grok installed from npm: $GROK_SAYS ($GROK_DIR)"
else
    fail "Grok in $GROK_DIR says '$GROK_SAYS', expected grok $GROK_VERSION"; exit 1
fi

# ---------------------------------------------------------------------------------------------------
# The MCP server: a token server over TLS, with a random real token known to it and to fenzi only.

start_token_server

# grok_config MODEL_PORT [OWN_SERVER]: the user's $HOME/.grok/config.toml: the fake model as the
# default model, nothing that would go online (updates, telemetry, model-catalog fetches), and with
# OWN_SERVER a server of the user's own (`mine`), which fenzi leaves out for its sessions. Records
# its SHA-256 in GROK_CONFIG_SHA.
grok_config() {
    cat >"$H/.grok/config.toml" <<EOF
[cli]
auto_update = false

[features]
telemetry = false
remote_fetch = false
feedback = false
codebase_indexing = false

[models]
default = "fake"

[model.fake]
model = "fake-model"
name = "fake model (testdata/agents)"
base_url = "http://127.0.0.1:$1/v1"
api_backend = "messages"
env_key = "FAKE_MODEL_API_KEY"
context_window = 200000
max_completion_tokens = 4096
max_retries = 0
EOF
    if [ -n "${2:-}" ]; then
        cat >>"$H/.grok/config.toml" <<EOF

# the user's own server: not in the policy, so not given to Grok under fenzi
[mcp_servers.mine]
url = "https://mine.invalid/mcp"
EOF
    fi
    GROK_CONFIG_SHA=$(sha256sum "$H/.grok/config.toml")
}
# grok_config_kept NAME: the user's config.toml is what grok_config wrote.
grok_config_kept() {
    check "[$1] the user's ~/.grok/config.toml is byte for byte as it was" \
        test "$(sha256sum "$H/.grok/config.toml")" = "$GROK_CONFIG_SHA"
}

# fenzi_grok NAME POLICY ARGS...: `fenzi run --agent grok -- ARGS` in $PROJECT with exactly
# BASE_ENV and the real token (output $WORK/NAME.{out,err}, audit log $WORK/NAME.audit.jsonl,
# fenzi's session log beside it, `fenzi log` in $WORK/NAME.log.txt). Sets RC.
fenzi_grok() {
    local name=$1 pol=$2; shift 2
    (cd "${DIR:-$PROJECT}" && timeout 300 env -i "${BASE_ENV[@]}" FENZI_SECRET_MCP_E2E="$TOKEN" "${STDIO_ENV[@]}" \
        "$FENZI" run --config "$pol" --no-machine --upstream-ca "$CERTS/test-ca.pem" \
        --audit "$WORK/$name.audit.jsonl" --agent grok -- "$@" \
        </dev/null >"$WORK/$name.out" 2>"$WORK/$name.err")
    RC=$?
    "$FENZI" log --file "$WORK/$name.audit.jsonl" >"$WORK/$name.log.txt" 2>&1
}

# session NAME SCRIPT [EXTRA]: a fake model playing SCRIPT (log $WORK/NAME.model.jsonl), the policy
# $PROJECT/NAME.yaml, Grok's config, and `fenzi run --agent grok -- -p ... --output-format json`.
# Sets RC and MODEL_PORT.
session() {
    local name=$1 script=$2 extra=${3:-}
    start "$name-model" "$PY" "$FIX/fake_model_grok.py" --script "$script" \
        --log "$WORK/$name.model.jsonl" --port 0 || { fail "[$name] fake model start"; return 1; }
    MODEL_PORT=$PORT
    touch "$WORK/$name.model.jsonl"
    local config=$PROJECT/$name.yaml
    if [ -n "${FIRST:-}" ]; then
        # A project of its own, with the policy `fenzi init --agent grok` wrote (Grok's key here is
        # the fake model's env_key, so the XAI_API_KEY secret init names is left without a value).
        DIR=$WORK/$name config=$WORK/$name/fenzi.yaml
        init_project "$DIR" grok "$MODEL_PORT" || return 1
    elif [ -n "${STDIO:-}" ]; then
        stdio_policy "$config" "$MODEL_PORT"
    else
        policy "$config" "$MODEL_PORT" "$extra"
    fi
    grok_config "$MODEL_PORT"
    # --always-approve: Grok itself runs every tool call without asking (delete_everything
    # included), so any refusal seen here is fenzi's (or, for a tool fenzi hid, Grok's "not found").
    fenzi_grok "$name" "$config" \
        -p "Use the e2e MCP server's tools." --output-format json --always-approve
}

# on_failure NAME: what a failed session left behind.
on_failure() {
    local name=$1
    echo "---- [$name] fenzi run / Grok stderr (tail)"; tail -n 25 "$WORK/$name.err"
    echo "---- [$name] Grok output (tail)"; tail -n 30 "$WORK/$name.out" | cut -c1-600
    echo "---- [$name] fenzi log"; cat "$WORK/$name.log.txt"
    echo "---- [$name] session log"; cat "$WORK/$name.audit.log" 2>/dev/null
}

# mq NAME CHECK: CHECK (Python) holds over session NAME's model log, where `turns` are the requests
# that consumed a scripted turn, `found` the MCP tool names search_tool answered with, and
# `results` the tool results the model received, {tool name: content} (a use_tool result is named
# after the tool it called).
mq() {
    "$PY" - "$WORK/$1.model.jsonl" "$2" <<'EOF'
import json, re, sys
reqs = [json.loads(l) for l in open(sys.argv[1])]
turns = [r for r in reqs if r.get("kind") == "messages" and r.get("turn") is not None]
results = {t["name"]: t["content"] for r in reqs for t in r.get("tool_results", []) if t.get("new")}
found = set(re.findall(r'"tool_name":\s*"(e2e__[A-Za-z_]+)"', results.get("search_tool", "")))
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
final_text() { # final_text NAME: the `text` of Grok's --output-format json result
    "$PY" -c '
import json, sys
try:
    print(json.load(open(sys.argv[1])).get("text", ""))
except Exception as e:
    print("(no JSON result: %s)" % e)
' "$WORK/$1.out"
}

# ---------------------------------------------------------------------------------------------------
section "0 handover: Grok gets the policy's servers, and only those, in place of its own"

F0=$FAILS
start handover-model "$PY" "$FIX/fake_model_grok.py" --log "$WORK/handover.model.jsonl" --port 0 \
    || fail "[handover] fake model start"
policy "$PROJECT/handover.yaml" "$PORT"
grok_config "$PORT" own-server
fenzi_grok handover "$PROJECT/handover.yaml" mcp list --json
LISTED=$("$PY" -c '
import json, sys
try:
    print(" ".join(s.get("name", "?") for s in json.loads(open(sys.argv[1]).read())))
except Exception as e:
    print("(not JSON: %s)" % e)
' "$WORK/handover.out")
if [ "$RC" -eq 0 ] && [ "$LISTED" = e2e ]; then
    pass "[handover] \`grok mcp list\` in \`fenzi run --agent grok\` shows the policy's server e2e and not the user's own"
else
    fail "[handover] \`grok mcp list\` in \`fenzi run --agent grok\` shows '${LISTED:-nothing}' (exit $RC), expected e2e alone"
fi
check "[handover] fenzi said it left the user's server out" \
    grep -q "Grok's own MCP servers in $H/.grok/config.toml are left out for this session: mine" "$WORK/handover.err"
grok_config_kept handover
[ "$FAILS" -eq "$F0" ] || on_failure handover

# ---------------------------------------------------------------------------------------------------
section "1 filtered: echo allowed, delete_everything not even found"

F0=$FAILS
session filtered "$FIX/turns-filtered.json"
grok_config_kept filtered
check "[filtered] Grok exited 0" test "$RC" -eq 0
check "[filtered] Grok played the whole script (final text \`finished\`)" \
    test "$(final_text filtered)" = finished
check "[filtered] search_tool found the MCP tools echo and whoami (listed through fenzi)" \
    mq filtered '{"e2e__echo", "e2e__whoami"} <= found'
check "[filtered] search_tool found neither delete_everything nor add: fenzi filtered tools/list" \
    mq filtered 'not {"e2e__delete_everything", "e2e__add"} & found'
check "[filtered] the echo result came back to the model" \
    mq filtered '"hello through fenzi" in results.get("e2e__echo", "")'
DENIAL1=$(result filtered e2e__delete_everything)
if [[ "$DENIAL1" == *"Tool not found: e2e__delete_everything"* ]]; then
    pass "[filtered] the scripted delete_everything came back to the model as Grok's unknown-tool error"
    info "Grok told the model: $DENIAL1"
else
    fail "[filtered] delete_everything's result: '$DENIAL1'"
fi
expect_log filtered "tools/list with add and delete_everything hidden" "filtered POST $M/mcp tools/list hidden:2( |$)"
expect_log filtered "echo allowed, with the real token swapped in" "allowed POST $M/mcp tools/call echo +secrets:MCP_E2E$" 1
check "[filtered] no tools/call delete_everything ever reached fenzi (Grok did not send it)" \
    bash -c "! grep -q 'tools/call delete_everything' '$WORK/filtered.log.txt'"
[ "$FAILS" -eq "$F0" ] || on_failure filtered

# ---------------------------------------------------------------------------------------------------
section "2 whoami: the real token goes up, the placeholder comes back, and stays away from the model"

F0=$FAILS
session whoami "$FIX/turns-whoami.json"
grok_config_kept whoami
# What Grok got back from whoami: its own session files hold the tool result (the model was never
# sent it).
WHOAMI=$(grep -rhoE 'Bearer fenzi_ph_[A-Za-z0-9_-]+|Bearer e2e-real-[A-Za-z0-9_-]+' "$H/.grok/sessions" 2>/dev/null \
    | sort -u | head -n 1)
PLACEHOLDER=${WHOAMI#Bearer }
if [[ "$WHOAMI" =~ ^Bearer\ fenzi_ph_[A-Za-z0-9_-]{40,}$ ]] && [[ "$WHOAMI" != *"$TOKEN"* ]]; then
    pass "[whoami] Grok got whoami's answer as \`Bearer <placeholder>\` (fenzi swapped the echoed token back)"
    info "Grok saw: Bearer ${PLACEHOLDER:0:12}… (${#PLACEHOLDER} characters)"
else
    fail "[whoami] whoami's answer in Grok's session: '$(printf %s "$WHOAMI" | sed "s/$TOKEN/<REAL TOKEN>/g")'"
fi
expect_log whoami "whoami allowed, with the real token swapped in" "allowed POST $M/mcp tools/call whoami +secrets:MCP_E2E$" 1
check "[whoami] the server ran whoami, and every request it got carried the real token (no 401)" \
    bash -c "grep -qx whoami '$WORK/calls' && ! grep -qx unauthorized '$WORK/calls'"
expect_log whoami "the model request carrying the placeholder refused" \
    "denied  POST 127\.0\.0\.1:$MODEL_PORT/v1/messages +secrets:MCP_E2E +credential_endpoint_mismatch$"
check "[whoami] the fake model never received the whoami result" \
    mq whoami '"e2e__whoami" not in results and "search_tool" in results'
if [ -n "$PLACEHOLDER" ] && ! grep -qF -- "$PLACEHOLDER" "$WORK/whoami.model.jsonl" \
    && ! grep -q fenzi_ph_ "$WORK/whoami.model.jsonl"; then
    pass "[whoami] the placeholder never reached the fake model"
else
    fail "[whoami] the placeholder is in the fake model's log (or whoami gave none)"
fi
WHOAMI_ERR=$("$PY" -c '
import json, sys
try:
    r = json.load(open(sys.argv[1]))
    msg = r.get("message", "")
    try:  # "Internal error: {"message": "API error (...)", ...}"
        msg = json.loads(msg[msg.index("{"):])["message"]
    except (ValueError, KeyError, TypeError):
        pass
    print(r.get("type", ""), msg)
except Exception as e:
    print("(no JSON result: %s)" % e)
' "$WORK/whoami.out")
if [ "$RC" -ne 0 ] && [[ "$WHOAMI_ERR" == "error "*"403 Forbidden): credential_endpoint_mismatch"* ]]; then
    pass "[whoami] Grok stopped on the refusal (exit $RC): the placeholder cannot go to the model API"
    info "Grok's result: $WHOAMI_ERR"
else
    fail "[whoami] expected Grok to stop on credential_endpoint_mismatch; exit $RC, result: $WHOAMI_ERR"
fi
[ "$FAILS" -eq "$F0" ] || on_failure whoami

# ---------------------------------------------------------------------------------------------------
section "3 list-all: delete_everything found and called, fenzi denies it"

F0=$FAILS
session list-all "$FIX/turns-list-all.json" "list: all"
grok_config_kept list-all
check "[list-all] Grok exited 0" test "$RC" -eq 0
check "[list-all] Grok played the whole script (final text \`finished\`)" \
    test "$(final_text list-all)" = finished
check "[list-all] with \`list: all\` search_tool found delete_everything" \
    mq list-all '"e2e__delete_everything" in found'
# Grok answers an MCP error by reconnecting (server/discover) and sending the call once more, so
# fenzi denies it twice.
expect_log list-all "delete_everything denied (Grok sends it again after the error)" \
    "denied  POST $M/mcp tools/call delete_everything +policy_denied$"
info "[list-all] tools/call delete_everything denied $(grep -c 'tools/call delete_everything' "$WORK/list-all.log.txt") times"
DENIAL3=$(result list-all e2e__delete_everything)
if [[ "$DENIAL3" == *"not permitted by policy: tools/call delete_everything"* ]] \
    && [[ "$DENIAL3" == *"policy_denied"* ]]; then
    pass "[list-all] the denial came back to the model as delete_everything's result"
    info "Grok told the model:"
    sed 's/^/       | /' <<<"$DENIAL3"
else
    fail "[list-all] delete_everything's result: '$(head -c 600 <<<"$DENIAL3")'"
fi
[ "$FAILS" -eq "$F0" ] || on_failure list-all

# ---------------------------------------------------------------------------------------------------
section "4 first: the policy fenzi init wrote; npm install from the loopback registry, then echo"

F0=$FAILS
start_npm_registry
FIRST=1 session first "$FIX/turns-install.json"
DIR=
check "[first] Grok exited 0" test "$RC" -eq 0
install_checks first "$WORK/first" "$WORK/first.audit.jsonl" "$WORK/first.log.txt"
info "[first] what npm said to the model: $(result first run_terminal_command | tr '\n' ' ' | cut -c1-200)"
[ "$FAILS" -eq "$F0" ] || { on_failure first; info "[first] offered: $(head -n 1 "$WORK/first.model.jsonl" | cut -c1-1500)"; }

section "5 children: curl, python and node that Grok starts are refused at its server (DESIGN §17)"

# Grok finds the server's tools with `search_tool`, calls them with `use_tool`, and runs commands
# with `run_terminal_command`. The agent is the `grok` binary itself.
"$PY" - "$(children_command)" "$WORK/turns-children.json" <<'PY'
import json, sys
json.dump([
    {"tool_call": {"name": "search_tool", "arguments": {"query": "e2e", "limit": 10}}},
    {"tool_call": {"name": "use_tool", "arguments": {"tool_name": "e2e__echo", "tool_input": {"text": "from the agent"}}}},
    {"tool_call": {"name": "run_terminal_command", "arguments": {"command": sys.argv[1], "description": "Run three clients"}}},
    {"text": "finished"},
], open(sys.argv[2], "w"))
PY
ECHOES=$(grep -cx echo "$WORK/calls")
F0=$FAILS
session children "$WORK/turns-children.json"
check "[children] Grok exited 0" test "$RC" -eq 0
check_children children "$WORK/children.audit.jsonl" "$WORK/calls" $((ECHOES + 1))
[ "$FAILS" -eq "$F0" ] || on_failure children

section "6 stdio: server-everything, server-filesystem and mcp-server-time behind fenzi's bridge (DESIGN §18)"

# Three real stdio servers from npm and PyPI, started by fenzi in sandboxes of their own and given to
# Grok as http://NAME.stdio.fenzi.internal/mcp (stdio_policy, stdio_turns, stdio_checks in
# agents_lib.sh). Grok finds them with search_tool and calls them with use_tool.
info "$STDIO_VERSIONS"
STDIO_START=$SECONDS
stdio_turns grok run_terminal_command command "$WORK/turns-stdio.json" "$PROJECT" '{"description": "Show the environment"}'
F0=$FAILS
STDIO=1 session stdio "$WORK/turns-stdio.json"
grok_config_kept stdio
check "[stdio] Grok exited 0" test "$RC" -eq 0
check "[stdio] Grok played the whole script (final text \`finished\`)" test "$(final_text stdio)" = finished
stdio_checks stdio grok "$WORK/stdio.model.jsonl" "$WORK/stdio.audit.jsonl" "$PROJECT" "$PROJECT/stdio.yaml" run_terminal_command
[ "$FAILS" -eq "$F0" ] || on_failure stdio
info "[stdio] the session and its checks took $((SECONDS - STDIO_START))s"

# ---------------------------------------------------------------------------------------------------
section "every session"

check "the MCP server never ran delete_everything" bash -c "! grep -qx delete_everything '$WORK/calls'"
no_token_anywhere "Grok's output and state (\$HOME/.grok), the model logs, audit and session logs"
placeholder_not_in_logs
session_logs_hold filtered whoami list-all first
other_hosts_tried Grok
trust_never_off "$0" "$FIX"/*

[ "$FAILS" -eq 0 ]
