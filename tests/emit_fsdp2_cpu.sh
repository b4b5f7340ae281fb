#!/usr/bin/env bash
# ctest emit_fsdp2_cpu (issues 16, 17): the launch files of `plan --emit` run as written. The tiny preset's plan on 2
# ranks is emitted, its torchrun.sh starts train_fsdp2.py for 3 steps on CPU (gloo; SHARDPLAN_DEVICE=cpu) from another
# folder than the emit folder, and the README's own validate command holds the step log against the prediction. Then
# two MoE models (tests/data/tiny-moe.yaml, Mixtral's layout; tiny-mla.yaml, DeepSeek-V3's) are emitted with the
# config.json shardplan writes for them, trained 3 steps the same way, and the model transformers built from that
# config has shardplan's parameter count.
# Exit 77 (ctest SKIP_RETURN_CODE) when the venv of scripts/torch-venv.sh is absent or cannot import torch.
#   tests/emit_fsdp2_cpu.sh SHARDPLAN_BIN REPO_ROOT [VENV]
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
venv=${3:-$root/.venv-torch}
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c "import torch, transformers" >/dev/null 2>&1; then
  echo "skip: no PyTorch venv at $venv (scripts/torch-venv.sh creates it)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# 2 ranks × micro-batch 1 × 2 accumulation steps = global batch 4 of 128 tokens: seconds per step on CPU.
"$bin" plan --preset tiny --gpus 2 --gpu h100-sxm --zero 3 --global-batch 4 --micro-batch 1 --simulate-top 0 \
  --emit "$work/launch" >/dev/null
[ -f "$work/launch/config.json" ] || { echo "FAIL: no config.json beside the launch files"; exit 1; }
mkdir "$work/elsewhere"
cd "$work/elsewhere"
# torchrun from the venv; MODEL defaults to the emit folder (its config.json), the log to the emit folder.
PATH="$venv/bin:$PATH" SHARDPLAN_DEVICE=cpu STEPS=3 OMP_NUM_THREADS=1 timeout 600 "$work/launch/torchrun.sh"
log="$work/launch/shardplan_steps.jsonl"
[ "$(wc -l < "$log")" -eq 3 ] || { echo "FAIL: expected 3 step lines in $log"; cat "$log"; exit 1; }
# The README's command, as a user would paste it (absolute paths: it works from this folder too).
cmd=$(grep '^shardplan validate ' "$work/launch/README.md")
[ -n "$cmd" ] || { echo "FAIL: no validate command in README.md"; exit 1; }
eval "\"\$bin\" ${cmd#shardplan } --format json" > validate.json
# validate drops the first step (warm-up) and takes the median of the rest: steps 1 and 2 → their mean.
python3 - "$log" validate.json <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
v = json.load(open(sys.argv[2]))
timed = sorted(s["step_s"] for s in steps[1:])
median = (timed[0] + timed[1]) / 2
assert all(s["step_s"] > 0 and s["peak_bytes"] > 0 for s in steps), steps
assert abs(v["measured"]["step_s"] - median) <= 1e-9 * median, (v["measured"], median)
assert v["measured"]["peak_bytes"] == max(s["peak_bytes"] for s in steps[1:]), v["measured"]
assert v["predicted"]["step_s"] > 0 and v["predicted"]["peak_bytes"] > 0, v["predicted"]
losses = [s["loss"] for s in steps]
assert all(l == l and 0 < l < 10 for l in losses), losses  # finite, about ln(256) = 5.5 at the start
print(f"ok: 3 steps, measured step {v['measured']['step_s']:.3f} s (predicted for an H100: {v['predicted']['step_s']:.4f} s)")
PY

# MoE: the config.json written for each model builds, in transformers, the model shardplan counted, and it trains.
for model in tiny-moe tiny-mla; do
  "$bin" plan --model "$root/tests/data/$model.yaml" --gpus 2 --gpu h100-sxm --zero 3 --global-batch 4 --micro-batch 1 \
    --simulate-top 0 --emit "$work/$model" >/dev/null
  "$bin" predict --model "$root/tests/data/$model.yaml" --gpus 2 --gpu h100-sxm --zero 3 --format json \
    > "$work/$model.json"
  PATH="$venv/bin:$PATH" SHARDPLAN_DEVICE=cpu STEPS=3 OMP_NUM_THREADS=1 timeout 600 "$work/$model/torchrun.sh" \
    > "$work/$model.log" 2>&1 || { echo "FAIL: $model did not train"; tail -20 "$work/$model.log"; exit 1; }
  python3 - "$work/$model/shardplan_steps.jsonl" "$work/$model.json" "$work/$model/config.json" <<'PY'
import json, sys
steps = [json.loads(line) for line in open(sys.argv[1])]
model = json.load(open(sys.argv[2]))["model"]
config = json.load(open(sys.argv[3]))
assert len(steps) == 3 and all(0 < s["loss"] < 10 for s in steps), steps
built = steps[0]["param_count"]
# DeepseekV3TopkRouter keeps e_score_correction_bias as a buffer (updated by a rule, not by the optimizer): one per
# routed expert in each MoE layer, which shardplan counts with the router as the checkpoint stores it.
buffers = 0
if config["model_type"] == "deepseek_v3" and config["topk_method"] == "noaux_tc":
    buffers = config["n_routed_experts"] * (config["num_hidden_layers"] - config["first_k_dense_replace"])
assert built + buffers == model["params"], (config["model_type"], built, buffers, model["params"])
print(f"ok: {config['architectures'][0]} from shardplan's config.json: {built} parameters (+{buffers} router-bias "
      f"buffers) = shardplan's {model['params']}; 3 steps, loss {steps[-1]['loss']:.3f}")
PY
done

# --fsdp-end-units own: the loop wraps the embedding and [final norm, LM head] as units of their own (torchtitan's
# units) and trains.
"$bin" plan --preset tiny --gpus 2 --gpu h100-sxm --zero 3 --global-batch 4 --micro-batch 1 --simulate-top 0 \
  --framework fsdp --fsdp-end-units own --emit "$work/own" >/dev/null
grep -q '^END_UNITS_OWN = True' "$work/own/train_fsdp2.py" || { echo "FAIL: END_UNITS_OWN not set"; exit 1; }
PATH="$venv/bin:$PATH" SHARDPLAN_DEVICE=cpu STEPS=3 OMP_NUM_THREADS=1 timeout 600 "$work/own/torchrun.sh" \
  > "$work/own.log" 2>&1 || { echo "FAIL: --fsdp-end-units own did not train"; tail -20 "$work/own.log"; exit 1; }
python3 - "$work/own/shardplan_steps.jsonl" <<'PY'
import json, sys
own = [json.loads(line) for line in open(sys.argv[1])]
assert len(own) == 3 and all(0 < s["loss"] < 10 and s["peak_bytes"] > 0 for s in own), own
print(f"ok: own end units train: 3 steps, loss {own[-1]['loss']:.3f}")
PY
