#!/usr/bin/env bash
# Prepares what the Kubernetes tests (k8s_manifests.sh, k8s_fence.sh) need, idempotently:
#   - .venv-k8s at the repository root with scripts/e2e/k8s-requirements.txt, reinstalled only
#     when that file changes (so a CI run after the first installs nothing);
#   - with --fence, the Debian tools the fence test runs (nft, ip, setpriv, curl), when missing.
# Usage: scripts/e2e/k8s_setup.sh [--fence]
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
REQ="$ROOT/scripts/e2e/k8s-requirements.txt"
VENV="$ROOT/.venv-k8s"
STAMP="$VENV/.fenzi-k8s-requirements"
PYTHON=${PYTHON:-python3}

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"

if [ "${1:-}" = "--fence" ]; then
    missing=()
    command -v nft >/dev/null 2>&1 || [ -x /usr/sbin/nft ] || missing+=(nftables)
    command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || missing+=(iproute2)
    command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
    command -v curl >/dev/null 2>&1 || missing+=(curl)
    [ ${#missing[@]} -eq 0 ] || apt_install "k8s setup" "${missing[@]}"
fi

command -v "$PYTHON" >/dev/null 2>&1 || apt_install "k8s setup" python3 python3-venv
pinned_venv "k8s setup" "$PYTHON" "$VENV" "$REQ" "$STAMP" 'import kubernetes_validate, yaml, dockerfile'
