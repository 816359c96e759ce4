#!/usr/bin/env bash
# Package managers inside `fenzi run`, end to end, against registries served on loopback under the
# real registries' own names: npm, pnpm, Yarn 1, pip, uv, cargo and go each install a dependency in
# a project whose policy `fenzi init` wrote, as root and as a normal user.
#
# How the names reach loopback: the script re-runs itself in a network and mount namespace of its
# own (unshare --net --mount), where the only network is a loopback it brings up, so nothing can
# reach the internet whatever goes wrong. There testdata/e2e/registries.py serves
# registry.npmjs.org, registry.yarnpkg.com, pypi.org, files.pythonhosted.org, index.crates.io,
# static.crates.io and proxy.golang.org on 127.0.0.1:443 (one certificate from a CA made for the
# run), /etc/hosts names them 127.0.0.1 and the system CA bundle also holds that CA (both bind
# mounts, in this namespace only). The package managers then run with their default registries and
# no configuration of their own: what they request is what they would request on the internet.
# The machine file allows those names their loopback address (`private: ["127.0.0.1"]`), as a
# company's machine file allows its internal mirror; the project's policy is what `fenzi init`
# wrote, unchanged.
#
# For each user (root; uid 4242, a user this namespace's /etc/passwd adds) and each tool:
#   - `fenzi init` in a fresh project finds the ecosystem (package.json, yarn.lock,
#     requirements.txt, Cargo.toml, go.mod) and writes its hosts;
#   - `fenzi run -- <install>` exits 0 and the installed package runs;
#   - the hosts fenzi let the tool reach (the audit log) are exactly the hosts `fenzi init` wrote
#     for that tool's ecosystem row (policy/src/ecosystems.rs), and nothing was denied. Go runs with
#     GONOSUMDB for the test module (no checksum database is served), so sum.golang.org, in its row,
#     is not asked for;
#   - the tool's cache is in the project's sandbox cache ($XDG_CACHE_HOME/fenzi/sandbox/...);
# and after all of them, nothing in the user's home was written outside fenzi's own directories:
# no ~/.npm, ~/.cache/pip, ~/.cache/uv, ~/.cargo, ~/go, ~/.cache/go-build, pnpm's or Yarn's caches.
# Prints PASS/FAIL per check and `package-managers: N passed, M failed`; exits 1 on any failure.
#
# Needs root (the namespaces, and becoming uid 4242), node and npm, python3 with venv, go (Debian's
# golang-go) and cargo. pnpm 9 and Yarn 1 come from npm and uv from PyPI, pinned, into
# .work/package-managers (kept between runs).
#
# Usage: scripts/e2e/package_managers.sh   (builds fenzi unless FENZI=/path/to/fenzi is given)
#   E2E_KEEP=1   keep the work directory even when everything passed
set -uo pipefail

PNPM_VERSION=9.15.9
YARN_VERSION=1.22.22
UV_VERSION=0.13.10
TOOL_USER=4242
NAMES="registry.npmjs.org registry.yarnpkg.com pypi.org files.pythonhosted.org index.crates.io static.crates.io proxy.golang.org sum.golang.org"

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export NO_COLOR=1
unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"
PM="$ROOT/.work/package-managers"

if [ "${1:-}" != --inside ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "FAIL setup: needs root (a network and mount namespace of its own, and a second user)"
        echo "package-managers: 0 passed, 1 failed"; exit 1
    fi
    for tool in node npm cargo; do
        command -v "$tool" >/dev/null || { echo "FAIL setup: $tool is needed"; exit 1; }
    done
    command -v go >/dev/null || apt_install package-managers golang-go
    command -v ip >/dev/null || apt_install package-managers iproute2
    /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || apt_install package-managers python3-venv
    bash scripts/e2e/setup.sh || { echo "FAIL setup: scripts/e2e/setup.sh failed"; exit 1; }
    build_fenzi
    mkdir -p "$PM"
    if [ "$(cat "$PM/node.stamp" 2>/dev/null)" != "pnpm@$PNPM_VERSION yarn@$YARN_VERSION" ]; then
        rm -rf "$PM/node" && mkdir -p "$PM/node"
        npm install --prefix "$PM/node" --no-audit --no-fund --loglevel=error --save-exact \
            "pnpm@$PNPM_VERSION" "yarn@$YARN_VERSION" >/dev/null \
            || { echo "FAIL setup: npm install pnpm yarn"; exit 1; }
        echo "pnpm@$PNPM_VERSION yarn@$YARN_VERSION" >"$PM/node.stamp"
    fi
    if [ "$("$PM/uv/bin/uv" --version 2>/dev/null)" != "uv $UV_VERSION" ]; then
        rm -rf "$PM/uv"
        /usr/bin/python3 -m venv "$PM/uv" && "$PM/uv/bin/pip" install -q "uv==$UV_VERSION" \
            || { echo "FAIL setup: pip install uv==$UV_VERSION"; exit 1; }
    fi
    export FENZI RUST_SYSROOT
    RUST_SYSROOT=$(rustc --print sysroot)
    exec unshare --net --mount --propagation private -- bash "$0" --inside
fi

# ---------------------------------------------------------------------------------------------------
# Inside the namespaces.

PY="$ROOT/.venv/bin/python"
WORK=$(mktemp -d "$PM/run.XXXXXX") # outside the temporary directories, which the sandbox may write
chmod 755 "$WORK"
cleanup() {
    stop_pids 5
    if awk '{print $5}' /proc/self/mountinfo | grep -qF "$WORK"; then
        # Never remove through a mount: that would remove what it shows.
        echo "package-managers: something is mounted beneath $WORK; it is kept"
    elif [ "$FAILS" -eq 0 ] && [ -z "${E2E_KEEP:-}" ]; then
        chmod -R u+w "$WORK" 2>/dev/null # Go's module cache is read-only
        rm -rf "$WORK"
    else
        echo "package-managers: work directory kept: $WORK"
    fi
    echo "package-managers: $PASSES passed, $FAILS failed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip link set lo up || { fail "setup: bring up the namespace's loopback"; exit 1; }
start registries "$PY" testdata/e2e/registries.py --out "$WORK/registries" \
    || { fail "setup: the loopback registries did not start: $(tail -n 3 "$WORK/registries.err")"; exit 1; }
printf '127.0.0.1 localhost\n::1 localhost\n127.0.0.1 %s\n' "$NAMES" >"$WORK/hosts"
mount --bind "$WORK/hosts" /etc/hosts
cat /etc/ssl/certs/ca-certificates.crt "$WORK/registries/test-ca.pem" >"$WORK/ca-certificates.crt"
mount --bind "$WORK/ca-certificates.crt" /etc/ssl/certs/ca-certificates.crt
for name in $NAMES; do
    if [ "$(getent hosts "$name" | awk '{print $1}')" != 127.0.0.1 ]; then
        fail "setup: $name does not resolve to 127.0.0.1 in the test's namespace"; exit 1
    fi
done
pass "the registries' names resolve to the loopback registries, in this namespace only"
# A second user, in this namespace's /etc/passwd only.
cp /etc/passwd "$WORK/passwd" && cp /etc/group "$WORK/group"
echo "fenzi-pm:x:$TOOL_USER:$TOOL_USER:package managers:/nonexistent:/bin/sh" >>"$WORK/passwd"
echo "fenzi-pm:x:$TOOL_USER:" >>"$WORK/group"
mount --bind "$WORK/passwd" /etc/passwd && mount --bind "$WORK/group" /etc/group

# Everything the tools need, where any user can run it: fenzi, pnpm and Yarn, uv, the Rust
# toolchain (rustup's lives under /root, which only root may enter). On a tmpfs of this namespace,
# never beneath $WORK (which is removed at the end), and the toolchain read-only.
TOOLS=/mnt
mount -t tmpfs -o size=1m,mode=755 fenzi-package-managers "$TOOLS" \
    || { fail "setup: a tmpfs for the tools"; exit 1; }
mkdir -p "$TOOLS/bin" "$TOOLS/rust"
touch "$TOOLS/bin/fenzi"
for bind in "$FENZI:$TOOLS/bin/fenzi" "$RUST_SYSROOT:$TOOLS/rust"; do
    mount --bind "${bind%%:*}" "${bind#*:}" && mount -o remount,bind,ro "${bind#*:}" \
        || { fail "setup: ${bind%%:*}, read-only, for every user"; exit 1; }
done
ln -s "$PM/node/node_modules/.bin/pnpm" "$PM/node/node_modules/.bin/yarn" "$PM/uv/bin/uv" "$TOOLS/bin/"
TOOL_PATH="$TOOLS/bin:$TOOLS/rust/bin:/usr/local/bin:/usr/bin:/bin"

# project TOOL DIR: a project that installs the tool's test package. Sets CMD (what runs inside),
# ROW (the ecosystem row of fenzi init whose hosts the tool needs) and CACHE (its sandbox cache).
project() {
    local tool=$1 dir=$2
    mkdir -p "$dir"
    case $tool in
        npm|pnpm|yarn)
            echo '{"name": "p", "version": "1.0.0", "private": true}' >"$dir/package.json"
            local use="node -e 'console.log(require(\"@fenzi-test/hello\")())'"
            case $tool in
                npm) CMD="npm install --no-fund @fenzi-test/hello@1.0.0 && $use"; ROW=npm; CACHE=npm ;;
                # pnpm's store cannot hard-link into the project across the sandbox's mounts, so
                # pnpm keeps it in the project (.pnpm-store); its metadata cache is XDG's.
                pnpm) CMD="pnpm add @fenzi-test/hello@1.0.0 && $use"; ROW=npm; CACHE=xdg/pnpm ;;
                yarn) : >"$dir/yarn.lock"
                      CMD="yarn add --non-interactive @fenzi-test/hello@1.0.0 && $use"; ROW=Yarn; CACHE=yarn ;;
            esac ;;
        pip|uv)
            echo "fenzi-test-hello==1.0.0" >"$dir/requirements.txt"
            local use=".venv/bin/python -c 'import fenzi_test_hello as h; print(h.hello())'"
            ROW=Python
            if [ "$tool" = pip ]; then
                CMD="/usr/bin/python3 -m venv .venv && .venv/bin/pip install --disable-pip-version-check -q -r requirements.txt && $use"; CACHE=pip
            else
                CMD="uv venv -q --python /usr/bin/python3 .venv && uv pip install -q --python .venv/bin/python -r requirements.txt && $use"; CACHE=uv
            fi ;;
        cargo)
            mkdir -p "$dir/src"
            # `[workspace]`: a project of its own, not a member of fenzi's workspace it lies under.
            printf '[package]\nname = "p"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nfenzi-test-hello = "0.1.0"\n\n[workspace]\n' >"$dir/Cargo.toml"
            echo 'fn main() { println!("{}", fenzi_test_hello::hello()); }' >"$dir/src/main.rs"
            CMD="cargo run -q"; ROW=Rust; CACHE=cargo ;;
        go)
            printf 'module p\n\ngo 1.19\n' >"$dir/go.mod"
            printf 'package main\n\nimport (\n\t"fmt"\n\n\t"fenzi.test/hello"\n)\n\nfunc main() { fmt.Println(hello.Hello()) }\n' >"$dir/main.go"
            CMD="go get fenzi.test/hello@v0.1.0 && go run ."; ROW=Go; CACHE=go ;;
    esac
}

# row_hosts POLICY LABEL: the hosts fenzi init wrote under the comment of ecosystem LABEL.
row_hosts() {
    awk -v label="  # $2 (" 'index($0, label) == 1 {on = 1; next} /^  #/ {on = 0} on && /^  - / {print $2}' "$1" | sort
}

# as USER CMD...: CMD as USER (root: as it is), with exactly the environment ENV.
as() {
    local user=$1; shift
    if [ "$user" = root ]; then
        env -i "${ENV[@]}" "$@"
    else
        setpriv --reuid="$TOOL_USER" --regid="$TOOL_USER" --clear-groups env -i "${ENV[@]}" "$@"
    fi
}

for user in root user; do
    U="$WORK/$user"
    H="$U/home"
    mkdir -p "$H/.config/fenzi"
    {
        echo "version: 1"
        echo "# the loopback registries: the names resolve to 127.0.0.1 in the test's namespace"
        echo "hosts:"
        for name in $NAMES; do echo "  - {host: $name, private: [\"127.0.0.1\"]}"; done
    } >"$H/.config/fenzi/mcp.yaml"
    [ "$user" = user ] && chown -R "$TOOL_USER:$TOOL_USER" "$U"
    ENV=(PATH="$TOOL_PATH" HOME="$H" USER="$user" LANG=C.UTF-8 NO_COLOR=1 TMPDIR=/tmp
         FENZI_CREDSTORE=memory
         # The registries' certificate is trusted as a public one would be: through the system
         # bundle (fenzi builds its own from it), which Node reads only with --use-openssl-ca.
         NODE_OPTIONS=--use-openssl-ca
         # No checksum database is served for the test module; uv may not fetch a Python.
         GONOSUMDB=fenzi.test UV_PYTHON_DOWNLOADS=never)
    for tool in npm pnpm yarn pip uv cargo go; do
        P="$U/$tool"
        project "$tool" "$P"
        [ "$user" = user ] && chown -R "$TOOL_USER:$TOOL_USER" "$P"
        label="[$user $tool]"
        (cd "$P" && as "$user" fenzi init >"$U/$tool.init" 2>&1)
        check "$label fenzi init wrote the $ROW registry hosts" grep -q "^  # $ROW (" "$P/fenzi.yaml"
        (cd "$P" && as "$user" timeout 600 fenzi run --audit "$U/$tool.audit.jsonl" \
            -- sh -c "$CMD" </dev/null >"$U/$tool.out" 2>"$U/$tool.err")
        rc=$?
        if [ "$rc" = 0 ] && grep -q "^hello from the loopback" "$U/$tool.out"; then
            pass "$label installs the package inside fenzi run, and it runs"
        else
            fail "$label install inside fenzi run (exit $rc)"
            tail -n 15 "$U/$tool.err" | sed 's/^/    /'
        fi
        want=$(row_hosts "$P/fenzi.yaml" "$ROW")
        [ "$tool" = go ] && want=$(grep -vx sum.golang.org <<<"$want")
        got=$("$PY" -c '
import json, sys
hosts = {r["host"] for r in map(json.loads, open(sys.argv[1])) if r["decision"] == "allowed"}
print("\n".join(sorted(hosts)))' "$U/$tool.audit.jsonl" 2>/dev/null)
        if [ -n "$want" ] && [ "$got" = "$want" ]; then
            pass "$label it reached exactly the hosts of fenzi init's $ROW row: $(echo $got)"
        else
            fail "$label it reached [$(echo $got)]; fenzi init's $ROW row says [$(echo $want)]"
        fi
        denied=$(grep -c '"decision":"denied"' "$U/$tool.audit.jsonl" 2>/dev/null)
        check "$label nothing was denied (${denied:-no log})" test "${denied:-x}" = 0
        check "$label the audit log verifies" as "$user" sh -c "fenzi log --file '$U/$tool.audit.jsonl' --verify >/dev/null"
        cache=$(ls -d "$H/.cache/fenzi/sandbox/$tool-"*/"$CACHE" 2>/dev/null | head -n 1)
        check "$label its cache is the project's sandbox cache (${cache#"$H"/})" \
            test -n "$cache" -a -n "$(ls -A "$cache" 2>/dev/null)"
    done
    # Nothing outside fenzi's own directories in the home, which holds only what this script wrote.
    written=$(cd "$H" && find . -mindepth 1 \
        -not -path ./.cache -not -path './.cache/fenzi' -not -path './.cache/fenzi/*' \
        -not -path ./.config -not -path './.config/fenzi' -not -path './.config/fenzi/*' \
        -not -path ./.local -not -path ./.local/state -not -path './.local/state/fenzi' \
        -not -path './.local/state/fenzi/*' | sort | tr '\n' ' ')
    check "[$user] the person's own caches were not written (~/.npm, ~/.cache/pip, ~/.cargo, ~/go, ...): ${written:-nothing}" \
        test -z "$written"
done

requests=$(awk '{print $1}' "$WORK/registries/requests.log" | sort | uniq -c | awk '{print $2"("$1")"}' | tr '\n' ' ')
info "requests the loopback registries served: $requests"
[ "$FAILS" -eq 0 ]
