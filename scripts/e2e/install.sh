#!/usr/bin/env bash
# The install story, as a new user would take it:
#   1. `cargo install --locked` from the repository (debug profile, into a root of its own, reusing
#      the workspace's build) gives a working `fenzi`;
#   2. scripts/build-deb packages the same binary with cargo-deb; the .deb is installed with dpkg,
#      and its binary, man pages and bash/zsh/fish completions are where the system looks: `man
#      fenzi-doctor` renders, bash completes a subcommand, zsh and fish parse their scripts;
#   3. the installed `fenzi --version` names the commit, `fenzi doctor` passes, and the package
#      is removed cleanly.
# Needs root for dpkg (CI is root); elsewhere the .deb's contents are checked without installing.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"
build_fenzi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-install.XXXXXX")
installed=0
finish() {
    if [ "$installed" = 1 ]; then dpkg -r fenzi >/dev/null 2>&1 || true; fi
    if [ "$FAILS" -eq 0 ]; then rm -rf "$WORK"; else echo "install: work directory kept: $WORK"; fi
    echo "install: $PASSES passed, $FAILS failed"
}
trap finish EXIT
commit=$(git rev-parse --short=12 HEAD)

section "cargo install --locked from the repository"
if CARGO_TARGET_DIR="$(cargo_target_dir)" cargo install --quiet --locked --debug --path cli \
        --root "$WORK/cargo-root" 2>"$WORK/cargo-install.err"; then
    pass "cargo install --locked --path cli"
    version=$("$WORK/cargo-root/bin/fenzi" --version)
    check "the installed fenzi names the commit ($version)" grep -q "commit $commit" <<<"$version"
else
    fail "cargo install --locked --path cli: $(tail -5 "$WORK/cargo-install.err")"
fi

section "the .deb (scripts/build-deb, cargo-deb)"
if deb=$(scripts/build-deb --binary "$FENZI" -- --fast --strip 2>"$WORK/build-deb.err" | tail -1) && [ -f "$deb" ]; then
    pass "scripts/build-deb built $(basename "$deb") ($(du -h "$deb" | cut -f1))"
else
    fail "scripts/build-deb: $(tail -5 "$WORK/build-deb.err")"
    exit 1
fi
dpkg-deb --contents "$deb" | awk '{print $6}' > "$WORK/contents"
for path in ./usr/bin/fenzi ./usr/share/man/man1/fenzi.1.gz ./usr/share/man/man1/fenzi-doctor.1.gz \
        ./usr/share/man/man1/fenzi-mcp-add.1.gz ./usr/share/bash-completion/completions/fenzi \
        ./usr/share/zsh/vendor-completions/_fenzi ./usr/share/fish/vendor_completions.d/fenzi.fish \
        ./usr/share/doc/fenzi/README.md; do
    check "the .deb carries $path" grep -qx "$path" "$WORK/contents"
done
check "the .deb's control names the package, version and libc dependency" \
    bash -c "dpkg-deb --field '$deb' Package Version Depends | tee '$WORK/control' | grep -q '^Package: fenzi' && grep -q '^Depends: .*libc6' '$WORK/control'"

if [ "$(id -u)" -ne 0 ]; then
    skip "installing the .deb needs root (dpkg -i); its contents were checked above"
    exit $((FAILS > 0))
fi
for tool in zsh fish man; do
    command -v "$tool" >/dev/null || apt_install install "$([ "$tool" = man ] && echo man-db || echo "$tool")"
done

section "dpkg -i, then the installed files in use"
if dpkg -i "$deb" >"$WORK/dpkg.out" 2>&1; then
    installed=1
    pass "dpkg -i $(basename "$deb")"
else
    fail "dpkg -i: $(tail -5 "$WORK/dpkg.out")"
    exit 1
fi
check "/usr/bin/fenzi --version names the commit" bash -c "/usr/bin/fenzi --version | grep -q 'commit $commit'"
check "man fenzi-doctor renders the doctor's page" \
    bash -c "MANPAGER=cat man fenzi-doctor 2>/dev/null | grep -q -- '--json'"
check "man fenzi lists the subcommands" bash -c "MANPAGER=cat man fenzi 2>/dev/null | grep -q 'fenzi-doctor'"
# bash: the packaged script registers a completion, and it completes `fenzi doc` to `doctor`.
check "bash completes \`fenzi doc\` to doctor" bash -c '
    source /usr/share/bash-completion/completions/fenzi
    COMP_WORDS=(fenzi doc); COMP_CWORD=1; COMP_LINE="fenzi doc"; COMP_POINT=${#COMP_LINE}
    _fenzi fenzi doc fenzi
    printf "%s\n" "${COMPREPLY[@]}" | grep -qx doctor'
check "zsh parses the packaged _fenzi" zsh -n /usr/share/zsh/vendor-completions/_fenzi
check "fish parses the packaged fenzi.fish" fish --no-execute /usr/share/fish/vendor_completions.d/fenzi.fish
check "fish completes \`fenzi doc\` to doctor" \
    bash -c "fish -c 'complete -C \"fenzi doc\"' | grep -q '^doctor'"
HOME="$WORK/home" XDG_RUNTIME_DIR="" FENZI_CREDSTORE=memory /usr/bin/fenzi doctor >"$WORK/doctor.out" 2>&1 \
    && pass "the installed fenzi doctor: fenzi run can isolate here" \
    || fail "the installed fenzi doctor: $(cat "$WORK/doctor.out")"

section "dpkg -r"
if dpkg -r fenzi >"$WORK/dpkg-r.out" 2>&1; then
    installed=0
    check "the binary and the pages are gone" \
        bash -c '! [ -e /usr/bin/fenzi ] && ! [ -e /usr/share/man/man1/fenzi.1.gz ]'
else
    fail "dpkg -r fenzi: $(tail -5 "$WORK/dpkg-r.out")"
fi
exit $((FAILS > 0))
