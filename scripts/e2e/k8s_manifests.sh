#!/usr/bin/env bash
# deploy/k8s, validated offline (no cluster, no registry):
#   - every object `kubectl apply -k deploy/k8s` would create, strictly (unknown fields refused)
#     against the Kubernetes 1.29 and newest JSON schemas that kubernetes-validate bundles, plus the
#     properties the fence depends on (scripts/e2e/k8s_manifests.py validate lists them);
#   - each of those property checks fails on a pod that breaks it (mutated copies of deploy/k8s);
#   - the Dockerfile parses with BuildKit's parser and builds what the pod runs;
#   - the pod's policy files pass `fenzi check`.
# Prints PASS/FAIL per check and `k8s manifests: N passed, M failed`; exits 1 on any failure.
#
# Usage: scripts/e2e/k8s_manifests.sh   (builds fenzi unless FENZI=/path/to/fenzi is given)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
export NO_COLOR=1
# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"

bash scripts/e2e/k8s_setup.sh || { echo "FAIL setup: scripts/e2e/k8s_setup.sh failed"; exit 1; }
PY="$ROOT/.venv-k8s/bin/python"
build_fenzi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/fenzi-k8s-manifests.XXXXXX")
trap 'rm -rf "$WORK"; echo "k8s manifests: $PASSES passed, $FAILS failed"' EXIT

# relay CMD...: CMD's PASS/FAIL lines become ours; CMD failing without a FAIL line is one.
relay() {
    local rc
    "$@" >"$WORK/relay.out" 2>&1
    rc=$?
    relay_results "" "$WORK/relay.out"
    if [ "$rc" -ne 0 ] && ! grep -q '^FAIL' "$WORK/relay.out"; then
        fail "$* exited $rc: $(tail -n 5 "$WORK/relay.out")"
    fi
}

section "deploy/k8s as applied: schemas and the fence's properties"
relay "$PY" scripts/e2e/k8s_manifests.py validate deploy/k8s

section "each property check refuses a pod that breaks it"
# broken NAME EXPECTED_FAIL PYTHON: a copy of deploy/k8s whose pod.yaml PYTHON edits (as `pod`,
# the parsed Pod) must fail validation with a FAIL line containing EXPECTED_FAIL.
broken() {
    local name=$1 expected=$2 edit=$3 dir="$WORK/broken-$1"
    cp -r deploy/k8s "$dir"
    "$PY" - "$dir/pod.yaml" "$edit" <<'EOF' || { fail "$name: the edit did not apply"; return; }
import sys, yaml
path, edit = sys.argv[1], sys.argv[2]
pod = yaml.safe_load(open(path))
inits, ctns = pod["spec"]["initContainers"], pod["spec"]["containers"]
exec(edit)
yaml.safe_dump(pod, open(path, "w"))
EOF
    if "$PY" scripts/e2e/k8s_manifests.py validate "$dir" >"$WORK/broken.out" 2>&1; then
        fail "$name: accepted"
    elif grep -q "^FAIL .*$expected" "$WORK/broken.out"; then
        pass "$name: refused ($expected)"
    else
        fail "$name: refused, but not by \"$expected\": $(grep '^FAIL' "$WORK/broken.out" | head -3)"
    fi
}
broken "agent with NET_ADMIN" "no NET_ADMIN" \
    'ctns[0]["securityContext"]["capabilities"]["add"] = ["NET_ADMIN"]'
broken "agent as root" "runAsNonRoot and a uid" \
    'ctns[0]["securityContext"].update(runAsUser=0, runAsNonRoot=False)'
broken "agent as fenzi's uid" "runAsNonRoot and a uid" 'ctns[0]["securityContext"]["runAsUser"] = 10001'
broken "agent mounts the audit volume" "does not mount the audit volume" \
    'ctns[0]["volumeMounts"].append({"name": "fenzi-audit", "mountPath": "/audit", "readOnly": True})'
broken "agent writes the CA volume" "CA volume read-only" \
    'ctns[0]["volumeMounts"][0]["readOnly"] = False'
broken "fenzi under another uid than the fence's" "runAsUser is the uid the fence lets out" \
    'inits[1]["securityContext"]["runAsUser"] = 10002'
broken "fence uid changed alone" "runAsUser is the uid the fence lets out" \
    'inits[0]["env"][0]["value"] = "10002"'
broken "fenzi not a native sidecar" "native sidecar" 'del inits[1]["restartPolicy"]'
broken "fence after fenzi" "fence init container comes first" 'inits.reverse()'
broken "fence with more than NET_ADMIN" "exactly NET_ADMIN" \
    'inits[0]["securityContext"]["capabilities"]["add"].append("NET_RAW")'
broken "pod on the host network" "not on the host's network" 'pod["spec"]["hostNetwork"] = True'
broken "fenzi listening on every address" "loopback only" \
    'a = inits[1]["args"]; a[a.index("--listen") + 1] = "0.0.0.0:3128"'
broken "agent outside fenzi's group" "supplementalGroups holds fenzi's group" \
    'pod["spec"]["securityContext"]["supplementalGroups"] = []'
broken "an unknown field" "schema 1.29.0 (strict)" 'ctns[0]["securityContxt"] = {}'

section "the image"
relay "$PY" scripts/e2e/k8s_manifests.py dockerfile deploy/k8s "$ROOT"

section "the pod's policy"
check "fenzi check: deploy/k8s/policy/fenzi.yaml with mcp.yaml" \
    "$FENZI" check --config deploy/k8s/policy/fenzi.yaml --machine deploy/k8s/policy/mcp.yaml \
    --cases deploy/k8s/policy/cases.yaml

[ "$FAILS" -eq 0 ]
