#!/usr/bin/env bash
# One prepared run on the lent GPU machine (one H200), inside its 15-minute budget. Prepare first, here:
#   bash scripts/gpu-bundle.sh
# then call the device tool with carry [".gpu-bundle"] and the command `bash scripts/gpu-session.sh`, timeout
# about 540 s. Results land in $OUT (at most 8 files come back); commit what they show to reports/.
#   1. the CUDA kernels against their CPU twins (shardplan_tests -tc='*cuda*')
#   2. bf16 cuBLASLt GEMMs and the device copy bandwidth: calibrate --gemm-only (one rank), a GPU profile
#   3. the reference loop on the GPU (validate --backend cuda): tiny with ZeRO-0 and 3, and gpt2-1.2b (fp32)
set -uo pipefail
cd "$(dirname "$0")/.."
source scripts/gpu-env.sh
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
log="$OUT/session.log"
step() { echo "== $(date +%T) $*" | tee -a "$log"; }

step "machine"
{ nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv; } 2>&1 | tee -a "$log"
ldd .gpu-bundle/bin/shardplan | grep -E "not found|nccl|cublas|cudart" | tee -a "$log"

step "1. CUDA kernels against the CPU twins"
timeout 120 shardplan_tests -tc='*cuda*' -s 2>&1 | tail -40 > "$OUT/gpu-tests.log"
tail -4 "$OUT/gpu-tests.log" | tee -a "$log"

step "2. GEMM and copy calibration (bf16 cuBLASLt, one rank)"
timeout 240 mpirun -np 1 shardplan calibrate --backend nccl --gemm-only --preset gpt2-1.2b --quiet \
  --out "$OUT/h200-gemm.yaml" >> "$log" 2>&1
echo "calibrate exit $?" | tee -a "$log"

step "3. the reference loop on the GPU"
cluster=(--gpu h200)
[ -s "$OUT/h200-gemm.yaml" ] && cluster=(--cluster "$OUT/h200-gemm.yaml")
for z in 0 3; do
  timeout 60 mpirun -np 1 shardplan validate --backend cuda --preset tiny --zero "$z" "${cluster[@]}" --steps 6 \
    --quiet --format markdown > "$OUT/validate-tiny-z$z.md" 2>> "$log"
  echo "tiny z$z exit $?" | tee -a "$log"
done
timeout 150 mpirun -np 1 shardplan validate --backend cuda --preset gpt2-1.2b --zero 0 --micro-batch 4 \
  --global-batch 4 "${cluster[@]}" --steps 5 --warmup 2 --quiet --format markdown \
  --steps-out "$OUT/steps-1.2b.jsonl" > "$OUT/validate-1.2b.md" 2>> "$log"
echo "gpt2-1.2b exit $?" | tee -a "$log"
step "done"
tail -n 30 "$OUT"/validate-*.md
