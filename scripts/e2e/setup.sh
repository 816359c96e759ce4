#!/usr/bin/env bash
# Prepares what the end-to-end tests need, from a fresh clone, idempotently:
#   - .venv at the repository root with the packages pinned in scripts/e2e/requirements.txt
#     (the official MCP Python SDK, uvicorn, cryptography), reinstalled when that file changes;
#   - curl (from Debian) when it is missing.
# Usage: scripts/e2e/setup.sh        (PYTHON=python3.12 to choose the interpreter)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
REQ="$ROOT/scripts/e2e/requirements.txt"
VENV="$ROOT/.venv"
STAMP="$VENV/.fenzi-e2e-requirements"
PYTHON=${PYTHON:-python3}

# shellcheck source=../lib.sh
source "$ROOT/scripts/lib.sh"

command -v curl >/dev/null 2>&1 || apt_install "setup" curl ca-certificates
command -v "$PYTHON" >/dev/null 2>&1 || apt_install "setup" python3 python3-venv
PYTHON=$(command -v "$PYTHON" || command -v python3)

if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "setup: $PYTHON is $("$PYTHON" --version 2>&1); the MCP SDK needs Python 3.10 or newer" >&2
    exit 1
fi

pinned_venv "setup" "$PYTHON" "$VENV" "$REQ" "$STAMP" 'import mcp, uvicorn, cryptography, yaml'
