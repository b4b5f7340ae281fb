#!/usr/bin/env bash
# ctest emit_torchtitan_args (issue 17): the torchtitan launch files that `plan --emit` writes are read by torchtitan's
# own ConfigManager, and what torchtitan read is the plan: batch, sequence, every parallel degree, schedule, compile,
# async TP, recompute.
#   torchtitan.sh    by torchtitan 0.3 (its config_registry function, every --section.key override through tyro, its
#                    validation): a stand-in `torchrun` on PATH runs tests/torchtitan_parse.py with the arguments
#                    torchtitan.sh gives torchtitan.train
#   torchtitan.toml  by torchtitan 0.2.2 (--job.config_file; unknown keys are refused)
# Exit 77 (ctest SKIP_RETURN_CODE) when scripts/torch-venv.sh --torchtitan has not installed them.
#   tests/emit_torchtitan_args.sh SHARDPLAN_BIN REPO_ROOT [VENV]
set -euo pipefail
bin=$(realpath "$1")
root=$(realpath "$2")
venv=${3:-$root/.venv-torch}
site="$venv/torchtitan-0.3"      # torchtitan 0.3.0 and what its config registries import
site_toml="$venv/torchtitan-0.2"  # torchtitan 0.2.2 alone (its imports come from $site)
if [ ! -x "$venv/bin/python" ] || ! PYTHONPATH="$site" "$venv/bin/python" -c "import torchtitan.config.manager" \
    >/dev/null 2>&1 || [ ! -d "$site_toml/torchtitan" ]; then
  echo "skip: no torchtitan at $site (scripts/torch-venv.sh --torchtitan installs it)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir "$work/bin"
cat > "$work/bin/torchrun" <<STUB
#!/usr/bin/env bash
# Drops torchrun's own options and "-m torchtitan.train"; parses the rest as torchtitan would.
while [ \$# -gt 0 ] && [ "\$1" != "-m" ]; do shift; done
shift 2
PYTHONPATH="$site" exec "$venv/bin/python" "$root/tests/torchtitan_parse.py" "\$@"
STUB
chmod +x "$work/bin/torchrun"

# What torchtitan read (tests/torchtitan_parse.py) against the recommended candidate of plan's JSON.
cat > "$work/compare.py" <<'PY'
import json, os, sys
plan = json.load(open(sys.argv[1]))
c = plan["candidates"][plan["recommended"]]["config"]
got = json.load(open(sys.argv[2]))
name, version = sys.argv[3], sys.argv[4]
shard = c["shard_degree"] // c["cp"] if c["zero"] > 0 else 1
local = c["micro_batch"] * (c["grad_accum"] if c["pp"] > 1 else 1)
want = {"global_batch_size": c["global_batch"], "seq_len": c["seq"], "tp": c["tp"], "pp": c["pp"], "cp": c["cp"],
        "dp_shard": shard, "dp_replicate": c["dp"] // shard, "local_batch_size": local,
        "compile": c["compile"], "ac": c["recompute"],
        "reshard": "always" if c["zero"] >= 3 else "never", "checkpoint": False}
# 0.3 splits no expert by TP (EP spans dp_shard·cp·tp): ep·etp ranks of whole experts; 0.2 takes the plan's expert TP
# (expert_tensor_parallel_degree: 1, or tp).
if version == "0.3":
    want["ep"] = c["ep"] * c["etp"] if c["ep"] > 1 else 1
else:
    want["ep"] = c["ep"]
    if c["ep"] > 1:
        want["etp"] = c["etp"]
want["async_tp"] = os.environ.get("EXPECT_ASYNC_TP") == "1"
if c["pp"] > 1:
    want["pp_microbatch_size"] = c["micro_batch"]
    want["schedule"] = {"one_f_one_b": "1F1B", "1f1b": "1F1B", "interleaved": "Interleaved1F1B", "gpipe": "GPipe",
                        "zb-h1": "InterleavedZeroBubble", "zbv": "ZBVZeroBubble",
                        "dualpipev": "DualPipeV"}.get(c["schedule"], c["schedule"])
bad = {k: (v, got.get(k)) for k, v in want.items() if got.get(k) != v}
assert not bad, f"{name}: planned vs torchtitan {version} read {bad}"
print(f"ok {name}: torchtitan {version} read {got['model']} tp {got['tp']} pp {got['pp']} cp {got['cp']} ep {got['ep']} "
      f"dp {got['dp_replicate']}x{got['dp_shard']}, ac {got['ac']}")
PY

# check NAME PLAN_ARGS: plan with --emit, run its torchtitan.sh, compare what torchtitan parsed with the plan.
check() {
  local name=$1; shift
  "$bin" plan "$@" --format json --simulate-top 0 --emit "$work/$name" > "$work/$name.json"
  NODE_RANK=0 MASTER_ADDR=localhost PATH="$work/bin:$PATH" PARSED_JSON="$work/$name.parsed.json" bash "$work/$name/torchtitan.sh" > "$work/$name.log" 2>&1 ||
    { echo "FAIL $name: torchtitan did not accept torchtitan.sh"; tail -20 "$work/$name.log"; exit 1; }
  PYTHONPATH="$site_toml:$site" PARSED_JSON="$work/$name.toml.json" "$venv/bin/python" "$root/tests/torchtitan_parse.py" \
    --job.config_file "$work/$name/torchtitan.toml" > "$work/$name.toml.log" 2>&1 ||
    { echo "FAIL $name: torchtitan 0.2 did not accept torchtitan.toml"; tail -20 "$work/$name.toml.log"; exit 1; }
  python3 "$work/compare.py" "$work/$name.json" "$work/$name.parsed.json" "$name" 0.3
  python3 "$work/compare.py" "$work/$name.json" "$work/$name.toml.json" "$name" 0.2
}

check llama70b-fsdp --preset llama3-70b --gpus 64 --framework torchtitan --recompute full --compile
EXPECT_ASYNC_TP=1 check llama8b-tp --preset llama3-8b --gpus 16 --framework torchtitan --tp 2 --zero 3 --recompute selective \
  --compile --tp-comm-overlap
check llama405b-pp --preset llama3-405b --gpus 512 --framework torchtitan --tp 8 --pp 8 --schedule interleaved \
  --vpp 2 --recompute full
check qwen3-moe-ep --preset qwen3-30b-a3b --gpus 16 --framework torchtitan --ep 8 --pp 1 --recompute full
check qwen3-moe-tp-ep --preset qwen3-30b-a3b --gpus 32 --framework torchtitan --tp 2 --ep 4 --pp 1 --recompute full
# EP over the TP ranks too (expert TP 1, MoE Parallel Folding): ep 32 on tp 2 × dp 16.
check qwen3-moe-folded --preset qwen3-30b-a3b --gpus 32 --framework torchtitan --tp 2 --ep 32 --pp 1 --recompute full
check llama8b-cp --preset llama3-8b --gpus 16 --framework torchtitan --cp 2 --seq 32768 --recompute full
check deepseek-ep --preset deepseek-v3 --mtp-layers 0 --gpus 512 --framework torchtitan --ep 64 --pp 8 --recompute full
echo "ok: torchtitan 0.3 read every torchtitan.sh, torchtitan 0.2 every torchtitan.toml, as planned"
