#!/usr/bin/env bash
# Creates the Python venv that bench/torch/ (the PyTorch FSDP2 memory cross-check, issue 15) runs in:
# pinned torch, transformers and torchao (bench/torch/float8_tp_saved.py) from PyPI. The C++ build does not need it.
#   scripts/torch-venv.sh [--torchtitan] [DIR]     (default: .venv-torch in the repository root)
# --torchtitan also installs torchtitan 0.3.0 and 0.2.2, for tests/emit_torchtitan_args.sh, into DIR/torchtitan-0.3 and
# DIR/torchtitan-0.2 (pip --target, put first on PYTHONPATH by that test only: torchtitan's datasets pins an older
# huggingface_hub than transformers wants, so they stay out of the venv's own site-packages).
# Idempotent: what DIR already has at the pinned versions is not installed again.
set -euo pipefail
with_torchtitan=0
if [ "${1:-}" = "--torchtitan" ]; then with_torchtitan=1; shift; fi
TORCH_VERSION=2.15.0
TRANSFORMERS_VERSION=5.24.0
TORCHAO_VERSION=0.18.0
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/.venv-torch}

have_pins() {
  [ -x "$venv/bin/python" ] || return 1
  "$venv/bin/python" - "$TORCH_VERSION" "$TRANSFORMERS_VERSION" "$TORCHAO_VERSION" <<'EOF' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if (version("torch"), version("transformers"), version("torchao")) == tuple(sys.argv[1:4]) else 1)
EOF
}

# torchtitan 0.3.0 and what importing its config registries needs, each pinned and installed without its own
# dependencies (torch comes from the venv; wandb and its telemetry are not imported by the config system).
TORCHTITAN_PINS="torchtitan==0.3.0 torchao==0.18.0 tyro==1.0.17 docstring_parser==0.18.0 typeguard==4.6.1
  typing_extensions==4.16.0 rich==15.0.0 shtab==1.13.0 markdown-it-py==4.3.0 mdurl==0.1.2 Pygments==2.21.0
  torchdata==0.11.0 torch_checkpointing==0.1.1 spmd_types==0.2.3 einops==0.8.2 safetensors==0.8.0 tokenizers==0.23.3
  datasets==4.7.0 pyarrow==26.0.1 pandas==3.1.1 numpy==2.4.6 python-dateutil==4.0.0 tzdata==2026.6 dill==0.4.1
  multiprocess==0.70.19 xxhash==4.1.0 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 anyio==4.16.0 idna==3.20
  certifi==2026.10.19.post1 requests==2.34.2 urllib3==2.8.0 charset-normalizer==3.5.3 tensorboard==2.21.0
  tensorboard-data-server==0.7.2 protobuf==7.36.2 grpcio==1.85.3 absl-py==2.5.1 Markdown==3.11.3 Werkzeug==3.1.9
  MarkupSafe==3.0.4 packaging==26.4 pillow==13.0.0 setuptools==84.2.1"

install_torchtitan() {
  local start
  start=$(date +%s)
  if ! PYTHONPATH="$venv/torchtitan-0.3" "$venv/bin/python" -c "import torchtitan.config.manager" 2>/dev/null; then
    rm -rf "$venv/torchtitan-0.3"
    # shellcheck disable=SC2086 (the pins are words)
    "$venv/bin/python" -m pip install --quiet --no-deps --target "$venv/torchtitan-0.3" $TORCHTITAN_PINS
  fi
  if [ ! -d "$venv/torchtitan-0.2/torchtitan" ]; then
    rm -rf "$venv/torchtitan-0.2"
    "$venv/bin/python" -m pip install --quiet --no-deps --target "$venv/torchtitan-0.2" torchtitan==0.2.2
  fi
  PYTHONPATH="$venv/torchtitan-0.3" "$venv/bin/python" -c "import torchtitan.models.llama3.config_registry" || {
    echo "error: torchtitan 0.3.0 in $venv/torchtitan-0.3 does not import" >&2; exit 1; }
  echo "torch-venv: torchtitan 0.3.0 and 0.2.2 in $venv/torchtitan-0.{3,2} ($(( $(date +%s) - start )) s)"
}

if have_pins; then
  echo "torch-venv: $venv already has torch $TORCH_VERSION, transformers $TRANSFORMERS_VERSION and torchao $TORCHAO_VERSION"
  [ "$with_torchtitan" = 1 ] && install_torchtitan
  exit 0
fi
command -v python3 >/dev/null || { echo "error: python3 not found; install Debian's python3 and python3-venv" >&2; exit 1; }
start=$(date +%s)
[ -x "$venv/bin/python" ] || python3 -m venv "$venv" || {
  echo "error: python3 -m venv $venv failed; install Debian's python3-venv" >&2; exit 1; }
# PyPI only (the torch wheel there brings its CUDA runtime packages; nothing else is downloaded at run time).
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION"
# torchao without its optional dependencies: its float8 training and TP plan need only torch.
"$venv/bin/python" -m pip install --quiet --no-deps "torchao==$TORCHAO_VERSION"
have_pins || { echo "error: $venv does not report torch $TORCH_VERSION / transformers $TRANSFORMERS_VERSION / torchao $TORCHAO_VERSION after install" >&2; exit 1; }
echo "torch-venv: installed torch $TORCH_VERSION, transformers $TRANSFORMERS_VERSION and torchao $TORCHAO_VERSION into $venv in $(( $(date +%s) - start )) s"
[ "$with_torchtitan" = 1 ] && install_torchtitan
exit 0
