#!/usr/bin/env bash
# Creates the Python venv that bench/torch/ (the PyTorch FSDP2 memory cross-check, issue 15) runs in:
# pinned torch and transformers from PyPI. The C++ build does not need it.
#   scripts/torch-venv.sh [DIR]     (default: .venv-torch in the repository root)
# Idempotent: when DIR already has the pinned versions it does nothing.
set -euo pipefail
TORCH_VERSION=2.15.0
TRANSFORMERS_VERSION=5.24.0
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/.venv-torch}

have_pins() {
  [ -x "$venv/bin/python" ] || return 1
  "$venv/bin/python" - "$TORCH_VERSION" "$TRANSFORMERS_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if (version("torch"), version("transformers")) == (sys.argv[1], sys.argv[2]) else 1)
EOF
}

if have_pins; then
  echo "torch-venv: $venv already has torch $TORCH_VERSION and transformers $TRANSFORMERS_VERSION"
  exit 0
fi
command -v python3 >/dev/null || { echo "error: python3 not found; install Debian's python3 and python3-venv" >&2; exit 1; }
start=$(date +%s)
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" || {
  echo "error: python3 -m venv $venv failed; install Debian's python3-venv" >&2; exit 1; }
# PyPI only (the torch wheel there brings its CUDA runtime packages; nothing else is downloaded at run time).
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION"
have_pins || { echo "error: $venv does not report torch $TORCH_VERSION / transformers $TRANSFORMERS_VERSION after install" >&2; exit 1; }
echo "torch-venv: installed torch $TORCH_VERSION and transformers $TRANSFORMERS_VERSION into $venv in $(( $(date +%s) - start )) s"
