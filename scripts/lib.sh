# Shared by the test scripts (scripts/e2e/run.sh, scripts/load, scripts/faults); source it. It owns
# the PASS/FAIL/SKIP lines and their counts, waiting for a background process's first stdout line,
# and stopping the background processes a script started. Each script keeps its own summary line
# and work directory.

PASSES=0
FAILS=0
SKIPS=0
PIDS=()

# cargo_target_dir: where cargo puts its builds for this workspace, wherever that is
# (CARGO_TARGET_DIR, relative or absolute, or build.target-dir in a cargo config), as cargo says.
cargo_target_dir() {
    cargo metadata --format-version 1 --no-deps 2>/dev/null \
        | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p'
}

# agent_cache_dir: where the agent tests install the agents from npm, kept between runs and clones
# (FENZI_AGENT_CACHE, else $XDG_CACHE_HOME/fenzi/agents, else ~/.cache/fenzi/agents).
agent_cache_dir() {
    echo "${FENZI_AGENT_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/fenzi/agents}"
}

# apt_install WHO PACKAGE...: installs Debian packages (root only; otherwise says what is missing,
# as WHO, and exits 1). The package lists are updated once per script run.
APT_UPDATED=0
apt_install() {
    local who=$1; shift
    if [ "$(id -u)" -ne 0 ]; then
        echo "$who: $* missing and not root: install it with your package manager" >&2
        exit 1
    fi
    echo "$who: installing $* from Debian" >&2
    if [ "$APT_UPDATED" = 0 ]; then
        apt-get update -qq >/dev/null
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

# build_fenzi: FENZI names the fenzi binary a test script drives: the caller's, or a debug build
# made now (a failed build is a FAIL line and exit 1).
build_fenzi() {
    [ -n "${FENZI:-}" ] && return
    cargo build -q -p fenzi --bin fenzi || { echo "FAIL build: cargo build -p fenzi"; exit 1; }
    FENZI="$(cargo_target_dir)/debug/fenzi"
}

# pinned_venv WHO PYTHON VENV REQUIREMENTS STAMP [IMPORTS]: makes VENV with PYTHON (installing
# python3-venv when the interpreter cannot), installs the pinned REQUIREMENTS whenever they differ
# from the copy kept at STAMP, and with IMPORTS (a Python import statement) checks the venv works.
pinned_venv() {
    local who=$1 python=$2 venv=$3 req=$4 stamp=$5 imports=${6:-}
    if [ ! -x "$venv/bin/python" ]; then
        if ! "$python" -m venv "$venv" 2>/dev/null; then
            rm -rf "$venv"
            apt_install "$who" python3-venv
            "$python" -m venv "$venv"
        fi
    fi
    if ! cmp -s "$req" "$stamp"; then
        echo "$who: installing $(grep -c '^[a-zA-Z]' "$req") pinned Python packages into $venv" >&2
        "$venv/bin/python" -m pip install --disable-pip-version-check -q -r "$req"
        cp "$req" "$stamp"
    fi
    if [ -n "$imports" ] && ! "$venv/bin/python" -c "$imports"; then
        echo "$who: the venv at $venv is broken; remove it and run again" >&2
        exit 1
    fi
}

pass() { echo "PASS $*"; PASSES=$((PASSES + 1)); }
fail() { echo "FAIL $*"; FAILS=$((FAILS + 1)); }
skip() { echo "SKIP $*"; SKIPS=$((SKIPS + 1)); }
info() { echo "     $*"; }
section() { printf '\n== %s\n' "$*"; }
# relay_results PREFIX FILE: the PASS/FAIL lines another program wrote to FILE count as ours, each
# name prefixed with PREFIX.
relay_results() {
    local prefix=$1 file=$2 line
    while IFS= read -r line; do
        case "$line" in
            PASS\ *) pass "$prefix${line#PASS }" ;;
            FAIL\ *) fail "$prefix${line#FAIL }" ;;
        esac
    done <"$file"
}
check() { # check NAME COMMAND...: PASS when the command succeeds
    local name=$1; shift
    if "$@"; then pass "$name"; else fail "$name"; fi
}

# wait_first_line FILE REGEX PID [SECONDS]: waits (20 s unless SECONDS) for FILE's first line to
# match REGEX and sets MATCH to its first group. Returns 1, saying why on stderr (with the tail of
# FILE's .err sibling), when PID exits first, the line does not match, or time runs out.
wait_first_line() {
    local file=$1 re=$2 pid=$3 seconds=${4:-20} first
    for _ in $(seq $((seconds * 10))); do
        first=$(head -n 1 "$file" 2>/dev/null || true)
        if [[ "$first" =~ $re ]]; then
            MATCH=${BASH_REMATCH[1]}
            return 0
        fi
        if [ -n "$first" ]; then
            echo "$file: the first line is not \`$re\`: $first" >&2
            return 1
        fi
        if ! kill -0 "$pid" 2>/dev/null; then
            echo "$file: the process exited early:" >&2
            tail -n 20 "${file%.out}.err" >&2 2>/dev/null || true
            return 1
        fi
        sleep 0.1
    done
    echo "$file: no \`$re\` within ${seconds}s" >&2
    return 1
}

# start NAME CMD...: runs CMD in the background (stdout/stderr in $WORK/NAME.{out,err}), waits for its
# first stdout line `listening on 127.0.0.1:PORT` and sets PORT
# (and NAME_PID, dashes as underscores). Returns 1 if it exits or never listens.
start() {
    local name=$1; shift
    "$@" >"$WORK/$name.out" 2>"$WORK/$name.err" &
    local pid=$!
    PIDS+=("$pid")
    eval "${name//-/_}_PID=$pid"
    wait_first_line "$WORK/$name.out" '^listening on 127\.0\.0\.1:([0-9]+)$' "$pid" || return 1
    PORT=$MATCH
}

# e2e_prelude NAME: what an end-to-end script over the MCP SDK does first: the pinned venv (PY, and
# E2E for testdata/e2e), fenzi built (FENZI), and a WORK directory of its own with its own XDG state
# and config and an in-memory credential store. At exit its processes are stopped, WORK is removed
# when nothing failed (kept and named otherwise), and `NAME: N passed, M failed` is the last line.
e2e_prelude() {
    E2E_NAME=$1
    bash "$ROOT/scripts/e2e/setup.sh" || { echo "FAIL setup: scripts/e2e/setup.sh failed"; exit 1; }
    PY="$ROOT/.venv/bin/python"
    E2E="$ROOT/testdata/e2e"
    build_fenzi
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-$E2E_NAME.XXXXXX")
    export XDG_STATE_HOME="$WORK/state" XDG_CONFIG_HOME="$WORK/config" FENZI_CREDSTORE=memory
    mkdir -p "$XDG_CONFIG_HOME"
    trap e2e_finish EXIT
    trap 'exit 130' INT TERM
}

e2e_finish() {
    stop_pids 5
    if [ "$FAILS" -eq 0 ]; then rm -rf "$WORK"; else echo "$E2E_NAME: work directory kept: $WORK"; fi
    echo "$E2E_NAME: $PASSES passed, $FAILS failed"
}

# stop_pids [SECONDS]: SIGTERM to every process in PIDS, then SIGKILL to any still running after
# SECONDS (default 5), and reaps them all.
stop_pids() {
    local seconds=${1:-5} pid
    # Safe under `set -e`: a process already gone is not an error here.
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq $((seconds * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
}
