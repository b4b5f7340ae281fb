#!/usr/bin/env bash
# One prepared run on the lent GPU machine (one H200), inside its 15-minute budget. Prepare first, here:
#   bash scripts/gpu-bundle.sh
# then call the device tool with carry [".gpu-bundle"] and the command `bash scripts/gpu-session.sh`, timeout
# about 540 s. Results land in $OUT (at most 8 files come back); commit what they show to reports/.
#   1. the CUDA kernels against their CPU twins (shardplan_tests -tc='*cuda*')
#   2. bf16 cuBLASLt GEMMs and the device copy bandwidth: calibrate --gemm-only (one rank), a GPU profile
#   3. the reference loop on the GPU (validate --backend cuda): tiny with ZeRO-0 and 3 (fp32) and ZeRO-3 in
#      pure-bf16 and amp-bf16, and gpt2-1.2b in amp-bf16 (cuBLASLt bf16 GEMMs)
#   4. PyTorch (the machine's torch) running plan --emit's FSDP2 script on a TinyLlama-1.1B-shaped model, held
#      against the planner's prediction with validate --measurements
# At most 7 files come back: session.log, gpu-tests.log, h200-gemm.yaml, validate-tiny.md, validate-1.2b.md,
# torch-1.1b.jsonl, validate-torch-1.1b.md.
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-env.sh
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
log="$OUT/session.log"
step() { echo "== $(date +%T) $*" | tee -a "$log"; }

# One rank: through the bundle's mpirun, or as an MPI singleton where mpirun cannot start on this image.
if mpirun --version > /dev/null 2>&1; then one_rank=(mpirun -np 1); else one_rank=(); fi

step "machine"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; } 2>&1 | tee -a "$log"
{ cat /etc/os-release | head -2; ldd --version | head -1; } 2>&1 | tee -a "$log"
ldd .gpu-bundle/bin/shardplan | grep -E "not found|nccl|cublas|cudart|stdc" | tee -a "$log"
echo "one rank: ${one_rank[*]:-MPI singleton}" | tee -a "$log"

step "1. CUDA kernels against the CPU twins"
timeout 120 shardplan_tests -tc='*cuda*' -s 2>&1 | tail -40 > "$OUT/gpu-tests.log"
tail -4 "$OUT/gpu-tests.log" | tee -a "$log"

step "2. GEMM and copy calibration (bf16 cuBLASLt, one rank)"
timeout 240 "${one_rank[@]}" shardplan calibrate --backend nccl --gemm-only --preset gpt2-1.2b --quiet \
  --out "$OUT/h200-gemm.yaml" --raw /tmp/h200-gemm.raw.csv >> "$log" 2>&1
echo "calibrate exit $?" | tee -a "$log"

step "3. the reference loop on the GPU (fp32, pure-bf16, amp-bf16)"
cluster=(--gpu h200)
[ -s "$OUT/h200-gemm.yaml" ] && cluster=(--cluster "$OUT/h200-gemm.yaml")
for run in "0 fp32" "3 fp32" "3 pure-bf16" "3 amp-bf16"; do
  set -- $run
  echo "## tiny, ZeRO-$1, $2" >> "$OUT/validate-tiny.md"
  timeout 60 "${one_rank[@]}" shardplan validate --backend cuda --preset tiny --zero "$1" --precision "$2" \
    "${cluster[@]}" --steps 6 --quiet --format markdown >> "$OUT/validate-tiny.md" 2>> "$log"
  echo "tiny z$1 $2 exit $?" | tee -a "$log"
done
timeout 150 "${one_rank[@]}" shardplan validate --backend cuda --preset gpt2-1.2b --zero 0 --precision amp-bf16 --micro-batch 4 \
  --global-batch 4 "${cluster[@]}" --steps 5 --warmup 2 --quiet --format markdown \
  > "$OUT/validate-1.2b.md" 2>> "$log"
echo "gpt2-1.2b exit $?" | tee -a "$log"

step "4. PyTorch on the same GPU: the FSDP2 script of plan --emit, a TinyLlama-1.1B-shaped model, then validate"
# TinyLlama-1.1B's published shape (config.json of TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T).
mkdir -p /tmp/tl && cat > /tmp/tl/config.json <<'JSON'
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 2048, "intermediate_size": 5632,
 "num_hidden_layers": 22, "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
 "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": false,
 "hidden_act": "silu"}
JSON
flags=(--hf-config /tmp/tl/config.json --gpus 1 --cluster h200x8 --zero 0 --micro-batch 8 --global-batch 8
       --seq 2048 --recompute none --precision amp-bf16 --framework fsdp)
rm -rf /tmp/tl/emit
shardplan predict "${flags[@]}" >> "$log" 2>&1
shardplan plan --hf-config /tmp/tl/config.json --gpus 1 --cluster h200x8 --global-batch 8 --seq 2048 \
  --emit /tmp/tl/emit >> "$log" 2>&1
# The emitted script with the strategy above and 20 steps (the plan's own choice is in session.log).
sed -i -e 's/^MICRO_BATCH, GRAD_ACCUM, SEQ = .*/MICRO_BATCH, GRAD_ACCUM, SEQ = 8, 1, 2048/' \
       -e 's/^RECOMPUTE = .*/RECOMPUTE = "none"/' -e 's/^ZERO = .*/ZERO = 0/' -e 's/^STEPS = .*/STEPS = 20/' \
       /tmp/tl/emit/train_fsdp2.py
# PyTorch uses the machine's own libraries, not the bundle's (an older libstdc++ there would break torch).
( cd /tmp/tl/emit && env -u LD_LIBRARY_PATH MODEL=/tmp/tl SHARDPLAN_STEPS="$OUT/torch-1.1b.jsonl" \
    timeout 240 torchrun --standalone --nproc_per_node 1 train_fsdp2.py ) >> "$log" 2>&1
echo "torchrun exit $?" | tee -a "$log"
shardplan validate "${flags[@]}" --measurements "$OUT/torch-1.1b.jsonl" --warmup 3 --format markdown \
  > "$OUT/validate-torch-1.1b.md" 2>> "$log"
echo "validate --measurements exit $?" | tee -a "$log"
step "done"
tail -n 25 "$OUT"/validate-*.md
