#!/usr/bin/env bash
# ctest emit_megatron_args: the megatron_args.sh that `plan --emit` writes is accepted by Megatron-LM's own
# parse_args + validate_args (tests/megatron_parse.py), and what Megatron read is the plan: every parallel degree,
# micro and global batch, sequence, layers, virtual stages, sequence parallelism, the ZeRO mapping, recompute.
# Megatron-LM's training package is not on PyPI (megatron-core ships megatron/core only), so this needs a checkout:
#   git clone https://github.com/NVIDIA/Megatron-LM; MEGATRON_LM_DIR=$PWD/Megatron-LM ctest -R emit_megatron_args
# (checked at d98e8a6, 2026-08-22), and the venv of scripts/torch-venv.sh for torch. Exit 77 (skip) without either.
#   tests/emit_megatron_args.sh SHARDPLAN_BIN REPO_ROOT [VENV]
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
venv=${3:-$root/.venv-torch}
megatron=${MEGATRON_LM_DIR:-}
if [ -z "$megatron" ] || [ ! -f "$megatron/megatron/training/arguments.py" ] || [ ! -x "$venv/bin/python" ]; then
  echo "skip: set MEGATRON_LM_DIR to a Megatron-LM checkout and run scripts/torch-venv.sh"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat > "$work/compare.py" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
c = plan["candidates"][plan["recommended"]]["config"]
got, name = json.load(open(sys.argv[2])), sys.argv[3]
want = {"tp": c["tp"], "pp": c["pp"], "cp": c["cp"], "ep": c["ep"], "dp": c["dp"], "micro_batch": c["micro_batch"],
        "global_batch": c["global_batch"], "seq": c["seq"], "vpp": c["vpp"] if c["pp"] > 1 else 1,
        "sp": bool(c["sp"]), "distributed_optimizer": c["zero"] >= 1, "megatron_fsdp": c["zero"] >= 2,
        "recompute": c["recompute"]}
# Transformer Engine has no rowwise recipe: blockwise is written (with a note).
want["fp8"] = {"off": "off", "tensorwise": "tensorwise", "rowwise": "blockwise"}.get(c["fp8"], c["fp8"])
want["fp8_param_gather"], want["offload_optimizer"] = c["fp8_all_gather"], c["offload_optimizer"]
# MXFP8 parameters borrow the gradient buffer for their all-gather (Megatron-Bridge bf16_with_mxfp8_mixed); Megatron
# turns the flag off under Megatron-FSDP.
want["reuse_grad_buf_for_mxfp8_param_ag"] = c["fp8_all_gather"] and c["fp8"] == "mxfp8" and c["zero"] < 2
# The precision-aware optimizer as priced (optimizer offload needs it too), and the Adam moments' dtype.
want["precision_aware_optimizer"] = c["precision_aware_optimizer"] or c["offload_optimizer"]
want["adam_moments"] = c["adam_moments"]
want["optimizer"] = {"adamw": "adam", "muon": "muon"}[c["optimizer"]]
if c["optimizer"] == "muon":
    want["muon_tp_mode"] = c["muon_tp_mode"]
want["loss_fusion"] = c["loss"] == "fused"
want["offload_activation_layers"] = c["offload_activation_layers"]
if c["recompute"] == "selective":
    want["recompute_modules"] = ",".join(sorted(c["recompute_modules"].split(",")))
# The expert TP priced (written out whenever tp > 1; Megatron's own default, tp, otherwise) and the EP overlap.
if c["ep"] > 1:
    want["etp"] = c["etp"]
    want["ep_comm_overlap"] = bool(c.get("ep_comm_overlap", False))
    want["dispatcher"] = c["moe_dispatcher"]
want["cuda_graphs"] = {"none": "none", "partial": "transformer_engine", "full": "full_iteration"}[c["cuda_graphs"]]
if c["moe_capacity_factor"] > 0:
    want["capacity_factor"] = c["moe_capacity_factor"]
if c["zero"] >= 2:
    want["sharding"] = "optim_grads_params" if c["zero"] == 3 else "optim_grads"
# A layout written out (--pp-layout, or another runtime's split stage by stage): the blocks of every rank's chunks.
if got.get("layout_blocks") is not None:
    want["layout_blocks"] = c["pipeline"]["chunk_layers"]
bad = {k: (v, got.get(k)) for k, v in want.items() if got.get(k) != v}
assert not bad, f"{name}: planned vs Megatron read {bad}"
print(f"ok {name}: Megatron read tp {got['tp']} pp {got['pp']} (vpp {got['vpp']}) cp {got['cp']} ep {got['ep']} "
      f"dp {got['dp']}, {got['layers']} layers, {got['experts']} experts, fsdp {got['sharding'] if got['megatron_fsdp'] else '-'}")
PY

# check NAME GPUS PLAN_ARGS: plan with --emit, have Megatron parse its megatron_args.sh, compare with the plan.
check() {
  local name=$1 gpus=$2; shift 2
  "$bin" plan --gpus "$gpus" "$@" --format json --simulate-top 0 --emit "$work/$name" > "$work/$name.json"
  "$venv/bin/python" "$root/tests/megatron_parse.py" "$megatron" "$work/$name/megatron_args.sh" "$gpus" \
    "$work/$name.parsed.json" > "$work/$name.log" 2>&1 ||
    { echo "FAIL $name: Megatron-LM refused megatron_args.sh"; grep -v Warning "$work/$name.log" | tail -5; exit 1; }
  python3 "$work/compare.py" "$work/$name.json" "$work/$name.parsed.json" "$name"
}

check llama405b-interleaved 1024 --preset llama3-405b --cluster dgx-h100 --framework megatron --zero 1
check llama405b-uneven 128 --preset llama3-405b --cluster dgx-h100 --framework megatron --tp 8 --pp 16 \
  --pp-first-layers 7 --pp-last-layers 7
check llama8b-cp 64 --preset llama3-8b --cluster dgx-h100 --framework megatron --cp 4 --seq 65536
check deepseek-v3 256 --preset deepseek-v3 --cluster dgx-h100 --framework megatron --pp 16 --ep 16 --recompute full \
  --precision-aware-optimizer --adam-moments bf16
check gpt-oss 64 --preset gpt-oss-120b --cluster dgx-h100 --framework megatron --ep 8 --pp 4 \
  --recompute-modules layernorm,moe_act --precision-aware-optimizer
# Muon (planner/optimizer.hpp): --optimizer muon with the distributed optimizer, which Megatron makes layer-wise.
check llama8b-muon 16 --preset llama3-8b --cluster dgx-h100 --framework megatron --optimizer muon --tp 2
check llama8b-muon-distributed 16 --preset llama3-8b --cluster dgx-h100 --framework megatron --optimizer muon --tp 2 \
  --muon-tp-mode distributed
check mixtral-tp-ep 256 --preset mixtral-8x7b --cluster dgx-h100 --framework megatron --ep 8 --tp 2
# MoE Parallel Folding: EP 32 over TP 2 × DP 16 (expert TP 1), with the batch-level EP overlap (Megatron-Bridge's
# Qwen3-235B H100 layout).
check deepseek-v3-layout 256 --preset deepseek-v3 --cluster dgx-b200 --framework megatron --pp 4 --ep 64 \
  --pp-layout 'Et*4|(t*4|)*14tmL' --recompute selective --recompute-modules mla_up_proj --global-batch 1024
check qwen3-235b-folded 256 --preset qwen3-235b-a22b --cluster dgx-h100 --framework megatron --tp 2 --pp 8 --ep 32 \
  --ep-comm-overlap --pp-embedding-layers 1 --pp-loss-layers 1 --cuda-graphs partial --max-hbm-fraction 1.0
check qwen3-30b-graphs 16 --preset qwen3-30b-a3b --cluster dgx-h100 --framework megatron --ep 16 --cuda-graphs full \
  --moe-capacity-factor 1 --moe-dispatcher hybridep
check qwen3-30b-deepep 16 --preset qwen3-30b-a3b --cluster dgx-h100 --framework megatron --ep 8 --pp 2 \
  --moe-dispatcher deepep
check llama8b-act-offload 8 --preset llama3-8b --cluster dgx-h100 --framework megatron --pp 1 --recompute none \
  --offload-activations 16
check llama8b-megatron-fsdp 8 --preset llama3-8b --cluster dgx-h100 --framework megatron --zero 3 --fp8 tensorwise
check llama8b-megatron-fsdp-fp8-params 8 --preset llama3-8b --cluster dgx-h100 --framework megatron --zero 3 \
  --fp8 tensorwise --fp8-all-gather
check llama70b-megatron-hsdp 64 --preset llama3-70b --cluster dgx-h100 --framework megatron --zero 3 --hsdp 8 --tp 4
check llama70b-fp8 64 --preset llama3-70b --cluster dgx-h100 --framework megatron --tp 8 --fp8 tensorwise --loss fused
check llama70b-fp8-params 64 --preset llama3-70b --cluster dgx-h100 --framework megatron --tp 8 --fp8 tensorwise \
  --fp8-all-gather
check qwen3-30b-mxfp8-params 8 --preset qwen3-30b-a3b --cluster dgx-b200 --framework megatron --ep 8 --fp8 mxfp8 \
  --fp8-all-gather
check llama70b-fp8-block 64 --preset llama3-70b --cluster dgx-h100 --framework megatron --tp 8 --fp8 blockwise
check llama70b-offload 16 --preset llama3-70b --cluster dgx-h100 --framework megatron --tp 8 --zero 1 --offload-optimizer
check llama8b-fp8-gather 64 --preset llama3-8b --cluster dgx-h100 --framework fsdp --zero 3 --fp8 tensorwise --fp8-all-gather
# Other runtimes' plans: ZeRO-2/3 as Megatron-FSDP (tied embeddings, hybrid sharding), their pipeline splits.
check mpt30b-hsdp 64 --preset mpt-30b --cluster dgx-h100 --framework fsdp1 --zero 3 --hsdp 8
check llama8b-zero2 64 --preset llama3-8b --cluster dgx-h100 --framework fsdp --zero 2 --hsdp 8
check llama70b-titan-pp 64 --preset llama3-70b --cluster dgx-h100 --framework torchtitan --pp 4 --zero 3
check qwen3-moe-titan 64 --preset qwen3-30b-a3b --cluster dgx-h100 --framework torchtitan --ep 8
check bloom-deepspeed 384 --preset bloom-176b --cluster jean-zay-a100 --framework deepspeed --tp 4 --pp 12 --zero 1 \
  --recompute full
echo "ok: Megatron-LM accepted every megatron_args.sh and read the plan"
