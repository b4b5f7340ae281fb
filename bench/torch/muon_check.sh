#!/usr/bin/env bash
# ctest muon_torch_check: runs bench/torch/muon_check.py (torch.optim.Muon's Newton–Schulz FLOPs and state against
# planner/optimizer.hpp's) in the venv that scripts/torch-venv.sh makes; exit 77 (ctest SKIP_RETURN_CODE) when that
# venv is absent or its torch has no optim.Muon (before 2.9).
#   bench/torch/muon_check.sh [VENV]   (default: .venv-torch in the repository root)
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
venv=${1:-$root/.venv-torch}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch; torch.optim.Muon" >/dev/null 2>&1; then
  echo "skip: no PyTorch venv with torch.optim.Muon at $venv (scripts/torch-venv.sh creates it)"
  exit 77
fi
exec "$venv/bin/python" "$root/bench/torch/muon_check.py"
