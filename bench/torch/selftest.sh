#!/usr/bin/env bash
# ctest fsdp2_memory_selfcheck: runs bench/torch/selftest.py in the venv that scripts/torch-venv.sh makes;
# exit 77 (ctest SKIP_RETURN_CODE) when that venv is absent or cannot import torch.
#   bench/torch/selftest.sh [VENV]   (default: .venv-torch in the repository root)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-$root/.venv-torch}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, transformers" >/dev/null 2>&1; then
  echo "skip: no PyTorch venv at $venv (scripts/torch-venv.sh creates it)"
  exit 77
fi
exec "$venv/bin/python" "$root/bench/torch/selftest.py"
