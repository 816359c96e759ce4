#!/usr/bin/env bash
# deploy/k8s's egress fence, rebuilt on one machine: the pod's network namespace and "the internet"
# are two network namespaces this script makes (a veth pair between them, created inside them: the
# host's own interfaces, addresses, routes and rules are never touched), with an HTTP server on
# the internet side, on IPv4 and IPv6.
#
# Nothing here is a copy of the manifests: k8s_manifests.py renders deploy/k8s as `kubectl apply -k`
# would and hands over the fence init container's argv (nft -D fenzi_uid=$(FENZI_UID) -f the
# fenzi-fence ConfigMap's fence.nft, `$(VAR)` expanded as the kubelet does), the sidecar's argv
# (`fenzi proxy` with the fenzi-policy ConfigMap's files), the uids and groups, and the agent's
# HTTPS_PROXY. Volumes become directories; the one change is the machine file, which here names the
# test server's private range. It then shows, as the agent's uid:
#   - before the fence, a direct dial to the server works (so what follows is the fence's doing);
#   - with the fence, a direct dial (TCP over IPv4 and IPv6, and UDP) is refused at once, for root
#     too, while fenzi's uid still gets out;
#   - the same request through fenzi succeeds (IPv4, and IPv6, which needs neighbour discovery
#     through the fence); a host the policy does not list gets 403 and never reaches the server;
#   - the agent reads fenzi's CA and placeholders (not the secret value), not the audit log; the
#     log verifies and holds the decisions.
# Prints PASS/FAIL per check and `k8s fence: N passed, M failed`; exits 1 on any failure. Needs root.
#
# Usage: scripts/e2e/k8s_fence.sh   (builds fenzi unless FENZI=/path/to/fenzi is given)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
unset HTTP_PROXY http_proxy HTTPS_PROXY https_proxy ALL_PROXY all_proxy NO_PROXY no_proxy
export NO_COLOR=1 PATH="$PATH:/usr/sbin:/sbin"

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"

if [ "$(id -u)" -ne 0 ]; then
    echo "FAIL k8s fence: needs root (network namespaces, nft, setpriv)"
    exit 1
fi
bash scripts/e2e/k8s_setup.sh --fence || { echo "FAIL setup: scripts/e2e/k8s_setup.sh failed"; exit 1; }
PY="$ROOT/.venv-k8s/bin/python"
build_fenzi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-k8s.XXXXXX")
chmod 755 "$WORK"
POD=fzk8s-pod-$$
NET=fzk8s-net-$$

cleanup() {
    stop_pids 5
    ip netns del "$POD" 2>/dev/null
    ip netns del "$NET" 2>/dev/null
    if [ "$FAILS" -eq 0 ] && [ -z "${E2E_KEEP:-}" ]; then
        rm -rf "$WORK"
    else
        echo "k8s fence: work directory kept: $WORK"
    fi
    echo "k8s fence: $PASSES passed, $FAILS failed"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The pod's volumes as directories, and what the manifests say (FENCE_ARGV, FENZI_ARGV, FENZI_UID, ...).
assignments=$("$PY" scripts/e2e/k8s_manifests.py materialise deploy/k8s "$WORK/volumes") \
    || { fail "render deploy/k8s"; exit 1; }
eval "$assignments"
info "fenzi uid $FENZI_UID, agent uid $AGENT_UID (groups $AGENT_GROUPS), proxy $AGENT_PROXY"
check "the fence lets out the uid the sidecar runs as ($FENZI_UID)" [ "$FENCE_UID" = "$FENZI_UID" ]

# The binary where uid $FENZI_UID can run it (the build directory may not be open to others).
install -D -m 0755 "$FENZI" "$WORK/bin/fenzi"
# The test server's names, seen by fenzi alone (bind-mounted over /etc/hosts in its own mount
# namespace), like a cluster's DNS: web and web6 are in the policy, other is not.
printf '%s\n' "127.0.0.1 localhost" "10.77.0.2 web.internal.test other.internal.test" \
    "fd77::2 web6.internal.test" >"$WORK/hosts"
# The policy: the shipped fenzi.yaml as is; the machine file names the test server's ranges (the
# shipped one names none, and private ranges may come only from the machine file).
cat >"$POLICY_VOLUME/mcp.yaml" <<'EOF'
version: 1
hosts:
  - {host: "web.internal.test:8080", private: ["10.77.0.0/24"]}
  - {host: "web6.internal.test:8080", private: ["fd77::/64"]}
EOF

section "two network namespaces: the pod and the internet"
ip netns add "$POD" && ip netns add "$NET" || { fail "ip netns add"; exit 1; }
# Made inside the pod's namespace, its peer moved straight into the other: never in the host's.
ip -n "$POD" link add eth0 type veth peer name eth0 netns "$NET" || { fail "veth pair"; exit 1; }
for ns in "$POD" "$NET"; do ip -n "$ns" link set lo up; done
ip -n "$POD" addr add 10.77.0.1/24 dev eth0
ip -n "$POD" addr add fd77::1/64 dev eth0 nodad
ip -n "$NET" addr add 10.77.0.2/24 dev eth0
ip -n "$NET" addr add fd77::2/64 dev eth0 nodad
ip -n "$POD" link set eth0 up
ip -n "$NET" link set eth0 up

TOKEN="fence-$(od -An -N8 -tx1 /dev/urandom | tr -d ' \n')"
mkdir -p "$WORK/www" && echo "$TOKEN" >"$WORK/www/hello.txt"
# The internet's server: dual-stack on [::]:8080, one log line per request it answers.
ip netns exec "$NET" python3 -m http.server --bind :: --directory "$WORK/www" 8080 \
    >"$WORK/server.out" 2>"$WORK/server.err" &
PIDS+=($!)
# And a UDP port the agent could send its DNS queries or anything else to.
ip netns exec "$NET" python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("10.77.0.2", 53))
while True:
    data, peer = s.recvfrom(2048); print(peer[0], data.decode(errors="replace"), flush=True)
' >"$WORK/udp.out" 2>"$WORK/udp.err" &
PIDS+=($!)
for _ in $(seq 100); do
    ip netns exec "$NET" curl -s -o /dev/null --max-time 1 http://10.77.0.2:8080/hello.txt && break
    sleep 0.1
done
served() { grep -c '"GET /hello.txt' "$WORK/server.err"; }

# as UID GID GROUPS CMD...: CMD in the pod's namespace as that user, with no capabilities at all.
as() {
    local uid=$1 gid=$2 groups=$3; shift 3
    local g=(--clear-groups)
    [ -n "$groups" ] && g=(--groups "$groups")
    ip netns exec "$POD" setpriv --reuid "$uid" --regid "$gid" "${g[@]}" --no-new-privs \
        --inh-caps=-all --bounding-set=-all env -i PATH=/usr/bin:/bin HOME=/nonexistent "$@"
}
agent() { as "$AGENT_UID" "$AGENT_GID" "$AGENT_GROUPS" "$@"; }
# direct URL: curl without any proxy; prints the body, or fails.
direct() { curl -sS --noproxy '*' --max-time 5 "$1"; }
# fails CMD...: CMD (a function here included) exits non-zero.
fails() { ! "$@" 2>/dev/null; }
udp_send() { bash -c 'exec 3<>/dev/udp/10.77.0.2/53 && printf "%s" "$1" >&3' _ "$1"; }

section "before the fence: the agent's direct dial works (the namespaces are wired)"
check "agent -> http://10.77.0.2:8080 directly, no fence yet" \
    [ "$(agent bash -c "$(declare -f direct); direct http://10.77.0.2:8080/hello.txt")" = "$TOKEN" ]
check "agent -> http://[fd77::2]:8080 directly, no fence yet" \
    [ "$(agent bash -c "$(declare -f direct); direct 'http://[fd77::2]:8080/hello.txt'")" = "$TOKEN" ]
agent bash -c "$(declare -f udp_send); udp_send before-fence" 2>/dev/null
sleep 0.3
check "agent -> udp 10.77.0.2:53, no fence yet" grep -q before-fence "$WORK/udp.out"

section "the fence: the init container's command, in the pod's namespace"
info "${FENCE_ARGV[*]}"
[ -x "${FENCE_ARGV[0]}" ] || FENCE_ARGV[0]=$(command -v nft)
check "nft loads deploy/k8s/fence.nft" ip netns exec "$POD" "${FENCE_ARGV[@]}"
check "loading it again replaces it (the init container may run twice)" ip netns exec "$POD" "${FENCE_ARGV[@]}"
ip netns exec "$POD" nft list ruleset >"$WORK/ruleset.txt"
tables=$(grep -c 'table inet fenzi_fence' "$WORK/ruleset.txt")
uids=$(grep -c "meta skuid $FENZI_UID " "$WORK/ruleset.txt")
check "one fence table, letting out skuid $FENZI_UID" [ "$tables:$uids" = 1:1 ]
check "without the uid the file does not load (the pod would not start)" \
    bash -c '! ip netns exec "$1" nft -c -f "$2" 2>/dev/null' _ "$POD" "${FENCE_ARGV[-1]}"

# Forget the neighbours the dials above found: with the fence, IPv6 must find them again, through it.
ip -n "$POD" neigh flush all

section "with the fence: direct dials are refused"
before=$(served)
# refused URL WHO...: the dial fails with curl's "could not connect" (7), within 2 s (refused, not
# dropped until a timeout).
refused() {
    local url=$1 start rc; shift
    start=$(date +%s%N)
    "$@" bash -c "$(declare -f direct); direct '$url'" >/dev/null 2>"$WORK/refused.err"
    rc=$?
    [ "$rc" -eq 7 ] && [ $(( ($(date +%s%N) - start) / 1000000 )) -lt 2000 ] \
        || { info "curl exit $rc: $(cat "$WORK/refused.err")"; return 1; }
}
check "agent -> http://10.77.0.2:8080 directly: refused" refused http://10.77.0.2:8080/hello.txt agent
check "agent -> http://[fd77::2]:8080 directly: refused" refused 'http://[fd77::2]:8080/hello.txt' agent
check "root without fenzi's uid -> http://10.77.0.2:8080 directly: refused" \
    refused http://10.77.0.2:8080/hello.txt as 0 0 ""
check "agent -> udp 10.77.0.2:53 (DNS, anything): refused" \
    fails agent bash -c "$(declare -f udp_send); udp_send after-fence"
sleep 0.3
check "the server saw none of them" [ "$(served)" = "$before" ]
check "the UDP port got nothing" [ "$(grep -c after-fence "$WORK/udp.out")" = 0 ]
check "fenzi's uid -> http://10.77.0.2:8080 directly: gets out" \
    [ "$(as "$FENZI_UID" "$FENZI_GID" "" bash -c "$(declare -f direct); direct http://10.77.0.2:8080/hello.txt")" = "$TOKEN" ]

section "fenzi: the sidecar's command, as uid $FENZI_UID"
SECRET="sk-k8s-test-$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
secret_env=()
for name in "${FENZI_SECRET_ENV[@]}"; do secret_env+=("$name=$SECRET"); done
FENZI_ARGV[0]="$WORK/bin/fenzi"
info "${FENZI_ARGV[*]}"
# The sidecar's root file system is read-only: no HOME, no XDG directories, only its volumes.
start fenzi ip netns exec "$POD" unshare --mount --propagation private -- \
    sh -c 'mount --bind "$1" /etc/hosts && shift && exec "$@"' sh "$WORK/hosts" \
    setpriv --reuid "$FENZI_UID" --regid "$FENZI_GID" --clear-groups --no-new-privs \
    --inh-caps=-all --bounding-set=-all \
    env -i PATH=/usr/bin:/bin HOME=/nonexistent TMPDIR=/nonexistent "${secret_env[@]}" "${FENZI_ARGV[@]}" \
    || { fail "fenzi proxy did not start"; cat "$WORK/fenzi.err"; exit 1; }
check "fenzi listens where the agent's HTTPS_PROXY points" [ "http://127.0.0.1:$PORT" = "$AGENT_PROXY" ]

section "the agent, through fenzi"
before=$(served)
via() { curl -sS --max-time 10 -x "$1" -o /dev/null -w '%{http_code}' "$2"; }
body=$(agent curl -sS --max-time 10 -x "$AGENT_PROXY" http://web.internal.test:8080/hello.txt)
check "agent -> fenzi -> web.internal.test (10.77.0.2): the server's answer" [ "$body" = "$TOKEN" ]
body=$(agent curl -sS --max-time 10 -x "$AGENT_PROXY" http://web6.internal.test:8080/hello.txt)
check "agent -> fenzi -> web6.internal.test (fd77::2): the server's answer" [ "$body" = "$TOKEN" ]
check "the server answered exactly those two" [ "$(served)" = $((before + 2)) ]
code=$(agent bash -c "$(declare -f via); via '$AGENT_PROXY' http://other.internal.test:8080/hello.txt")
check "agent -> fenzi -> other.internal.test (not in the policy): 403" [ "$code" = 403 ]
code=$(agent bash -c "$(declare -f via); via '$AGENT_PROXY' http://10.77.0.2:8080/hello.txt")
check "agent -> fenzi -> 10.77.0.2 by address (not in the policy): 403" [ "$code" = 403 ]
check "the refused ones never reached the server" [ "$(served)" = $((before + 2)) ]

section "the shared volume and the audit volume"
check "agent reads fenzi's ca.pem" agent grep -q 'BEGIN CERTIFICATE' "$CA_VOLUME/ca.pem"
for name in "${FENZI_SECRET_ENV[@]}"; do
    n=${name#FENZI_SECRET_}
    check "agent reads the placeholder for $n (placeholders.env, group-readable)" \
        agent grep -q "^$n=." "$CA_VOLUME/placeholders.env"
done
check "the secret value is in neither file" bash -c '! grep -rqF "$1" "$2"' _ "$SECRET" "$CA_VOLUME"
check "agent cannot read the audit log" fails agent cat "$AUDIT_VOLUME/audit.jsonl"
check "the audit log verifies" "$FENZI" log --file "$AUDIT_VOLUME/audit.jsonl" --verify
"$FENZI" log --file "$AUDIT_VOLUME/audit.jsonl" --json >"$WORK/records.jsonl"
check "the log holds the allowed requests and the refusal" \
    "$PY" -c '
import json, sys
recs = [json.loads(l) for l in open(sys.argv[1])]
def has(host, decision):
    return any(host in json.dumps(r) and r.get("decision") == decision for r in recs)
sys.exit(0 if has("web.internal.test", "allowed") and has("web6.internal.test", "allowed")
         and has("other.internal.test", "denied") else 1)' "$WORK/records.jsonl"
check "the secret value is not in the log" bash -c '! grep -qF "$1" "$2"' _ "$SECRET" "$WORK/records.jsonl"

[ "$FAILS" -eq 0 ]
