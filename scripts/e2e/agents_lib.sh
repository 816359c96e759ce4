# shellcheck shell=bash
# What the real-agent scripts (scripts/e2e/agent_*.sh) share: the set-up before the agent is
# installed, the token MCP server and its policy, and the checks every script ends with. Sourced
# after scripts/lib.sh; uses its pass/fail/check/start and the script's WORK, TOKEN, PLACEHOLDER.

# agent_prelude AGENT FIXTURES: node and npm present (AGENT comes from npm), the e2e venv set up,
# fenzi built unless FENZI names it, the stdio servers installed (stdio_servers_install). Sets PY,
# E2E, FIX (testdata/agents/FIXTURES), FENZI and STDIO_VERSIONS.
agent_prelude() {
    if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
        echo "FAIL setup: node and npm are needed ($1 is installed from npm)"; exit 1
    fi
    bash scripts/e2e/setup.sh || { echo "FAIL setup: scripts/e2e/setup.sh failed"; exit 1; }
    PY="$ROOT/.venv/bin/python"
    E2E="$ROOT/testdata/e2e"
    FIX="$ROOT/testdata/agents/$2"
    build_fenzi
    stdio_servers_install
}

# start_token_server: the official MCP SDK server over TLS (a test CA made here), requiring a random
# real token known to it and to fenzi only. Sets CERTS, TOKEN, MCP_PORT and M (its host:port as a
# regex, for log checks).
start_token_server() {
    "$PY" "$E2E/gen_certs.py" "$WORK/certs" >/dev/null || { fail "test CA: gen_certs.py"; exit 1; }
    CERTS="$WORK/certs"
    TOKEN=$("$PY" -c 'import secrets; print("e2e-real-" + secrets.token_urlsafe(24))')
    start mcp-server env E2E_REQUIRED_TOKEN="$TOKEN" "$PY" "$E2E/mcp_server.py" \
        --cert "$CERTS/server.pem" --key "$CERTS/server-key.pem" --calls "$WORK/calls" \
        --require-bearer-env E2E_REQUIRED_TOKEN || { fail "MCP server start"; exit 1; }
    MCP_PORT=$PORT
    M="127\.0\.0\.1:$MCP_PORT"
    pass "MCP SDK token server on https://127.0.0.1:$MCP_PORT/mcp"
}

# policy FILE MODEL_PORT [EXTRA]: the server e2e (token: true, echo and whoami allowed,
# delete_everything denied; EXTRA is one more key such as `list: all`) and the fake model's host.
policy() {
    cat >"$1" <<EOF
version: 1
hosts:
  - "127.0.0.1:$2"              # the fake model (plain HTTP)
mcp:
  e2e:
    url: https://127.0.0.1:$MCP_PORT/mcp
    token: true
${3:+    $3
}    tools:
      allow: [echo, whoami]
      deny: [delete_everything]
EOF
}

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

# ---------------------------------------------------------------------------------------------------
# A new user's first session: the project's policy is what `fenzi init --agent X` wrote, and the
# agent installs a dependency from a registry on loopback before it calls an allowed tool.

# start_npm_registry: the loopback npm registry (testdata/e2e/registries.py --plain-npm, plain HTTP)
# serving the scoped package @fenzi-test/hello. Sets NPM_PORT.
start_npm_registry() {
    start npm-registry "$PY" "$E2E/registries.py" --out "$WORK/npm-registry" --plain-npm \
        || { fail "loopback npm registry start"; exit 1; }
    NPM_PORT=$PORT
}

# INSTALL_CMD: what the model asks the agent to run in its shell.
INSTALL_CMD="npm install --no-fund --no-audit @fenzi-test/hello@1.0.0"

# init_project DIR AGENT MODEL_PORT: DIR as a new user's Node project (package.json, an .npmrc naming
# the loopback registry as npm's registry, a .mcp.json naming the e2e server with its token in an
# Authorization header), and DIR/fenzi.yaml as `fenzi init --agent AGENT` wrote it there, plus one
# edit: the loopback registry's and the fake model's host:port, which stand in for
# registry.npmjs.org and the model API. fenzi init's own output is in DIR.init.
init_project() {
    local dir=$1 agent=$2 model_port=$3
    mkdir -p "$dir"
    printf '{"name": "first-session", "version": "1.0.0", "private": true}\n' >"$dir/package.json"
    printf 'registry=http://127.0.0.1:%s/\n' "$NPM_PORT" >"$dir/.npmrc"
    # shellcheck disable=SC2016 # the ${...} is the .mcp.json's own, never expanded by fenzi
    printf '{"mcpServers": {"e2e": {"type": "http", "url": "https://127.0.0.1:%s/mcp", "headers": {"Authorization": "Bearer ${E2E_TOKEN}"}}}}\n' \
        "$MCP_PORT" >"$dir/.mcp.json"
    if ! (cd "$dir" && env -i PATH=/usr/bin:/bin HOME="$dir" XDG_CONFIG_HOME="$dir.no-machine-file" \
        NO_COLOR=1 "$FENZI" init --agent "$agent" >"$dir.init" 2>&1); then
        fail "fenzi init --agent $agent: $(cat "$dir.init")"; return 1
    fi
    sed -i "/^hosts:/a\\  - \"127.0.0.1:$NPM_PORT\"  # the test's npm registry, for registry.npmjs.org\n  - \"127.0.0.1:$model_port\"  # the test's fake model, for the model API" \
        "$dir/fenzi.yaml"
}

# install_checks NAME PROJECT AUDIT LOGTXT: the dependency is installed in PROJECT, fenzi let the
# agent's npm reach the loopback registry (packument and tarball; `fenzi log` names npm's program,
# a child of the agent), and the e2e server's echo was allowed, in the audit log AUDIT (`fenzi
# log` in LOGTXT).
install_checks() {
    local n=$1 p=$2 audit=$3 logtxt=$4
    check "[$n] fenzi init wrote the npm registry, the model key's secret and the e2e server" \
        bash -c "grep -q '^  - registry.npmjs.org' '$p/fenzi.yaml' && grep -q '^secrets:' '$p/fenzi.yaml' && grep -q '^  e2e:' '$p/fenzi.yaml'"
    check "[$n] the agent installed @fenzi-test/hello from the loopback registry into the project" \
        test -f "$p/node_modules/@fenzi-test/hello/index.js"
    check "[$n] fenzi let npm fetch the packument and the tarball" bash -c \
        "grep -qE 'allowed GET 127\.0\.0\.1:$NPM_PORT/@fenzi-test(%2f|/)hello( by [^ ]+)?$' '$logtxt' && grep -q 'allowed GET 127\.0\.0\.1:$NPM_PORT/@fenzi-test/hello/-/hello-1.0.0.tgz' '$logtxt'"
    check "[$n] then the allowed tool echo went through" \
        grep -qE "allowed POST 127\.0\.0\.1:$MCP_PORT/mcp tools/call echo( |$)" "$logtxt"
    check "[$n] fenzi log --verify" bash -c "'$FENZI' log --file '$audit' --verify >/dev/null"
}

# DESIGN §17 under a real agent. children_command: a shell command the agent runs through its own
# shell tool: curl, python and node, each started by the agent, call the e2e server's echo with the
# agent's own placeholder ($MCP_E2E) the way the agent would (curl and python through the proxy
# variables, node's fetch straight at the address, caught on the transparent path). The MCP
# server's default under --agent is `programs: [agent]`: every one of them must be refused.
children_command() {
    cat <<EOF
export U=https://127.0.0.1:$MCP_PORT/mcp B='{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"echo","arguments":{"text":"from a child"}}}'
/usr/bin/curl -s -o /dev/null -w 'curl=%{http_code}\n' -H "Authorization: Bearer \$MCP_E2E" -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' --data "\$B" "\$U"
/usr/bin/python3 -c 'import os, urllib.request as u
r = u.Request(os.environ["U"], data=os.environ["B"].encode(), headers={"Authorization": "Bearer " + os.environ["MCP_E2E"], "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
try: print("python=", u.urlopen(r, timeout=10).status)
except Exception as e: print("python=", getattr(e, "code", e))'
/usr/bin/node -e 'fetch(process.env.U, {method: "POST", body: process.env.B, headers: {authorization: "Bearer " + process.env.MCP_E2E, "content-type": "application/json", accept: "application/json, text/event-stream"}}).then(r => console.log("node=" + r.status), e => console.log("node=refused " + (e.cause && e.cause.code)))'
EOF
}

# children_turns TOOL ARG FILE [ECHO] [EXTRA]: a turn script in FILE in which the model calls the
# e2e server's echo (ECHO: the agent's name for it; the agent itself, allowed), then the agent's
# shell tool TOOL with {ARG: children_command} and the arguments of the JSON object EXTRA.
children_turns() {
    "$PY" - "$1" "$2" "$(children_command)" "$3" "${4:-mcp__e2e__echo}" "${5:-{\}}" <<'PY'
import json, sys
tool, arg, command, out, echo, extra = sys.argv[1:7]
json.dump([
    {"tool_call": {"name": echo, "arguments": {"text": "from the agent"}}},
    {"tool_call": {"name": tool, "arguments": {arg: command, **json.loads(extra)}}},
    {"text": "finished"},
], open(out, "w"))
PY
}

# agent_echo NAME AUDIT: passes when session NAME's audit log AUDIT has an allowed echo on the e2e
# server ($MCP_PORT) made as the agent, naming the agent's executable and pid (DESIGN §17).
agent_echo() {
    local agent
    agent=$("$PY" - "$2" "$MCP_PORT" <<'PY'
import json, sys
port = int(sys.argv[2])
for line in open(sys.argv[1]):
    r = json.loads(line)
    p = r.get("program") or {}
    if r["port"] == port and r.get("tool") == "echo" and r["decision"] == "allowed" and p.get("agent"):
        print(p["exe"], "pid", p["pid"])
        break
PY
)
    if [ -n "$agent" ]; then
        pass "[$1] the agent's own echo was allowed (the agent: $agent)"
    else
        fail "[$1] no echo allowed as the agent"
    fi
}

# check_children NAME AUDIT CALLS ECHOES: session NAME's audit log AUDIT shows the agent's own echo
# allowed (as the agent) and curl, python and node refused at the same server (program_not_allowed,
# by the default rule, each named by its executable); the server's CALLS file has run echo ECHOES
# times in all (the agents').
check_children() {
    local name=$1 audit=$2 calls=$3 echoes=$4 who
    agent_echo "$name" "$audit"
    for who in /usr/bin/curl /usr/bin/python3 /usr/bin/node; do
        check "[$name] $who, started by the agent, was refused at the same server (program_not_allowed)" \
            "$PY" -c '
import json, sys
port, who = int(sys.argv[2]), sys.argv[3]
hit = [r for r in map(json.loads, open(sys.argv[1])) if r["port"] == port
       and r.get("reason") == "program_not_allowed" and r.get("rule") == "mcp.e2e default programs [agent]"
       and (r.get("program") or {}).get("exe", "").startswith(who) and not r["program"]["agent"]]
sys.exit(0 if hit else 1)' "$audit" "$MCP_PORT" "$who"
    done
    check "[$name] the MCP server ran echo $echoes times in all: the agents', none for the children" \
        test "$(grep -cx echo "$calls")" -eq "$echoes"
}

# ---------------------------------------------------------------------------------------------------
# Local (stdio) servers behind fenzi's bridge (DESIGN §18) under a real agent: three real servers
# installed by name from the registries (the reference server-everything and server-filesystem from
# npm, mcp-server-time from PyPI), each a `command` entry that fenzi starts in a sandbox of its own
# and offers the agent at http://NAME.stdio.fenzi.internal/mcp, the URL every agent's rendered
# config names. Installation uses the registries; the session itself is loopback and sandboxes only.

STDIO_PKG="$ROOT/testdata/e2e/stdio-servers"
STDIO_NPM="$ROOT/.work/stdio-servers"
STDIO_VENV="$ROOT/.work/stdio-venv"
STDIO_ENV=() # fenzi's extra environment in a stdio session: the time server's secret
STDIO_ECHO="stdio echo through fenzi's bridge"

# stdio_servers_install: the pinned servers of testdata/e2e/stdio-servers (package.json: npm,
# into .work/stdio-servers, npm's cache in .work/npm-cache; requirements.txt: PyPI, into the venv
# .work/stdio-venv), each reinstalled only when its pins change. Says which versions are there.
stdio_servers_install() {
    if ! cmp -s "$STDIO_PKG/package.json" "$STDIO_NPM/package.json" \
        || [ ! -x "$STDIO_NPM/node_modules/.bin/mcp-server-everything" ] \
        || [ ! -x "$STDIO_NPM/node_modules/.bin/mcp-server-filesystem" ]; then
        echo "stdio servers: installing server-everything and server-filesystem from npm into $STDIO_NPM" >&2
        rm -rf "$STDIO_NPM" && mkdir -p "$STDIO_NPM" && cp "$STDIO_PKG/package.json" "$STDIO_NPM/"
        (cd "$STDIO_NPM" && npm_config_cache="${npm_config_cache:-$ROOT/.work/npm-cache}" \
            npm install --silent --no-audit --no-fund >/dev/null) \
            || { echo "FAIL setup: npm install in $STDIO_NPM"; rm -rf "$STDIO_NPM"; exit 1; }
    fi
    pinned_venv "stdio servers" python3 "$STDIO_VENV" "$STDIO_PKG/requirements.txt" \
        "$STDIO_VENV/.fenzi-stdio-requirements" 'import mcp_server_time'
    STDIO_VERSIONS=$(node -e '
        const v = p => require(process.argv[1] + "/node_modules/@modelcontextprotocol/server-" + p + "/package.json").version;
        process.stdout.write("server-everything " + v("everything") + ", server-filesystem " + v("filesystem"))' "$STDIO_NPM") \
        || { echo "FAIL setup: the npm stdio servers in $STDIO_NPM cannot be read"; exit 1; }
    STDIO_VERSIONS+=", mcp-server-time $("$STDIO_VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("mcp-server-time"))')"
}

# stdio_policy FILE MODEL_PORT: the policy of a stdio session (FILE in the project directory, where
# fenzi runs): the fake model's host and three command servers, each with tools it allows, denies
# or hides:
#   everything  (list: all) echo and get-sum allowed, get-env denied (offered, refused by fenzi);
#   filesystem  on the project's stdio-files (one known file; inside the project because an agent
#               that answers roots/list, Claude Code, narrows the server to the project):
#               read_text_file and list_directory allowed, write_file denied, the rest hidden;
#   time        get_current_time allowed; a secret TIME_API_TOKEN bound to its own host, given a
#               real value in fenzi's environment only (STDIO_ENV), so that the agent's sandbox
#               can be checked for its placeholder.
# Sets STDIO_FILE (the known file), STDIO_TEXT (its content) and STDIO_SECRET (the real value).
stdio_policy() {
    local files
    files="$(cd "$(dirname "$1")" && pwd)/stdio-files"
    mkdir -p "$files"
    STDIO_FILE="$files/known.txt"
    STDIO_TEXT="known file $("$PY" -c 'import secrets; print(secrets.token_hex(8))')"
    printf '%s\n' "$STDIO_TEXT" >"$STDIO_FILE"
    STDIO_SECRET=$("$PY" -c 'import secrets; print("stdio-real-" + secrets.token_urlsafe(24))')
    STDIO_ENV=(FENZI_SECRET_TIME_API_TOKEN="$STDIO_SECRET")
    cat >"$1" <<EOF
version: 1
hosts:
  - "127.0.0.1:$2"              # the fake model (plain HTTP)
mcp:
  everything:
    command: [$STDIO_NPM/node_modules/.bin/mcp-server-everything, stdio]
    list: all
    tools:
      allow: [echo, get-sum]
      deny: [get-env]
  filesystem:
    command: [$STDIO_NPM/node_modules/.bin/mcp-server-filesystem, $files]
    tools:
      allow: [read_text_file, list_directory]
      deny: [write_file]
  time:
    command: [$STDIO_VENV/bin/mcp-server-time]
    secrets: [TIME_API_TOKEN]
    hosts: [time-api.example.com]
    tools:
      allow: [get_current_time]
EOF
}

# STDIO_SHELL: what the agent runs in its shell tool: whether its environment (the agent's sandbox's,
# inherited) holds any placeholder, the time server's secret variable, or a fenzi secret. It waits
# 3 s first (see stdio_session.py turns).
# shellcheck disable=SC2016 # expanded by the agent's shell, not here
STDIO_SHELL='sleep 3; echo "agent-env: placeholders=$(env | grep -c fenzi_ph_) TIME_API_TOKEN=${TIME_API_TOKEN-unset} fenzi_secrets=$(env | grep -c ^FENZI_SECRET_)"'

# stdio_turns AGENT SHELL_TOOL SHELL_ARG OUT PROJECT [EXTRA]: the turn script (OUT) of a stdio session
# under AGENT (claude, codex, opencode or grok: how it names MCP tools) in PROJECT: the agent's shell
# tool SHELL_TOOL with {SHELL_ARG: STDIO_SHELL, ...EXTRA}, everything's echo, its get-env (denied),
# filesystem's read_text_file of the known file, time's get_current_time, then a final text
# (testdata/agents/stdio_session.py turns).
stdio_turns() {
    "$PY" "$ROOT/testdata/agents/stdio_session.py" turns "$1" "$2" "$3" "$4" \
        "$5/stdio-files/known.txt" "$STDIO_SHELL" "$STDIO_ECHO" "${6:-{\}}"
}

# stdio_checks NAME AGENT MODEL_LOG AUDIT PROJECT CONFIG SHELL_TOOL: what a stdio session under AGENT
# must show. In the fake model's log MODEL_LOG: each allowed tool's answer (the echoed text, the
# known file's content, the time tool's structure), get-env's refusal, the shell's view of the
# agent's environment (no placeholder, no TIME_API_TOKEN), read_text_file and get-env offered,
# write_file not. In the audit log AUDIT: one allowed record per allowed call, made as the agent,
# with transport stdio and the server's name; get-env denied (policy_denied) with transport stdio;
# filesystem's tools/list filtered; nothing let through but to 127.0.0.1 and the bridges; `fenzi
# log --verify`. `fenzi mcp render --agent AGENT --config CONFIG` (in PROJECT) names the three
# bridge URLs and no header, variable or command. The real secret is in no file under $WORK.
stdio_checks() {
    local n=$1 agent=$2 model=$3 audit=$4 project=$5 config=$6 shell=$7 rendered
    "$PY" "$ROOT/testdata/agents/stdio_session.py" model "$agent" "$model" "$shell" "$STDIO_ECHO" \
        "$STDIO_TEXT" >"$WORK/$n.stdio-checks" 2>&1 || fail "[$n] the model log could not be checked: $(tail -n 3 "$WORK/$n.stdio-checks")"
    relay_results "[$n] " "$WORK/$n.stdio-checks"
    "$PY" "$ROOT/testdata/agents/stdio_session.py" audit "$audit" >"$WORK/$n.stdio-audit-checks" 2>&1 \
        || fail "[$n] the audit log could not be checked: $(tail -n 3 "$WORK/$n.stdio-audit-checks")"
    relay_results "[$n] " "$WORK/$n.stdio-audit-checks"
    check "[$n] fenzi log --verify" bash -c "'$FENZI' log --file '$audit' --verify >/dev/null"
    rendered=$(cd "$project" && env -i PATH=/usr/bin:/bin HOME="$WORK/no-home" \
        XDG_CONFIG_HOME="$WORK/no-machine-file" "$FENZI" mcp render --agent "$agent" --config "$config" 2>&1)
    if [ "$(grep -oE 'http://(everything|filesystem|time)\.stdio\.fenzi\.internal/mcp' <<<"$rendered" | sort -u | wc -l)" -eq 3 ] \
        && ! grep -qiE 'TIME_API_TOKEN|header|authorization|"env"|command|mcp-server' <<<"$rendered"; then
        pass "[$n] fenzi mcp render --agent $agent names the three bridge URLs, with no header, variable or command"
    else
        fail "[$n] fenzi mcp render --agent $agent: $rendered"
    fi
    if grep -rqaF -- "$STDIO_SECRET" "$WORK" 2>/dev/null; then
        fail "[$n] the time server's real secret is in: $(grep -rlaF -- "$STDIO_SECRET" "$WORK")"
    else
        pass "[$n] the time server's real secret is in no file under the work directory"
    fi
}
