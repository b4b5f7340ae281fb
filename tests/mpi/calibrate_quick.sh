#!/usr/bin/env bash
# A quick CPU calibration under mpirun --oversubscribe -np N: the profile is written (atomically: no temporary
# left), its fits reproduce the raw medians (typical error — the median over sizes — ≤ 100 %, and at every size
# but three inside the measured p10–p90 spread widened by 200 %: oversubscribed ranks on a shared 2-core machine are
# noisy, see calibrate/README.md), every
# collective came back correct, `predict --cluster` reads it and its times change, and --resume measures only
# what is missing.
set -euo pipefail
bin=$1 check=$2 mpirun=$3 np=$4
source "$(dirname "$0")/common.sh"

"$mpirun" --oversubscribe -np "$np" "$bin" calibrate --backend mpi --quick --quiet --preset 2b \
  --out "$work/cpu.yaml" >"$work/stdout" 2>"$work/stderr" || { cat "$work/stderr"; fail "calibrate exited $?"; }
no_rank_left "calibrate"
cat "$work/stdout"
test -s "$work/cpu.yaml" || fail "no profile"
test -s "$work/cpu.raw.csv" || fail "no raw CSV"
ls "$work" | grep -q '\.tmp\.' && fail "a temporary file was left"
grep -q '^kind: calibration-profile' "$work/cpu.yaml" || fail "not a profile"
# The nccl-tests table on stdout (issue 16): its header, and a block per collective.
grep -Eq '^# +size +count +type +time +algbw +busbw +#wrong$' "$work/stdout" || fail "no nccl-tests table header"
for op in all_gather reduce_scatter all_reduce all_to_all send_recv; do
  grep -q "^# $op, world ($np ranks" "$work/stdout" || fail "no nccl-tests block for $op"
done
grep -q "^  ranks: $np\$" "$work/cpu.yaml" || fail "meta.ranks is not $np"
grep -q '^  wrong: 0$' "$work/cpu.yaml" || fail "collectives came back wrong"
"$check" "$work/cpu.yaml" 100 200 3 || fail "fits do not reproduce the medians"
# CPU ranks also measure the elementwise rate (an AdamW pass): positive, and below the copy bandwidth, since the
# pass computes a division and a square root per element where the copy only moves bytes.
copy=$(grep -o '^  copy_gbps: [0-9.e+-]*' "$work/cpu.yaml" | grep -o '[0-9.e+-]*$')
elementwise=$(grep -o '^  elementwise_gbps: [0-9.e+-]*' "$work/cpu.yaml" | grep -o '[0-9.e+-]*$' || true)
[ -n "$elementwise" ] || fail "no hardware.elementwise_gbps in the CPU profile"
awk -v e="$elementwise" -v c="$copy" 'BEGIN { exit !(e > 0 && e < c) }' ||
  fail "elementwise rate $elementwise GB/s is not between 0 and the copy's $copy GB/s"

# predict uses the profile: the measured CPU ranks are far slower than the a800x8 preset it refines.
"$bin" predict --preset 2b --gpus "$np" --cluster "$work/cpu.yaml" --format json >"$work/cal.json" || fail "predict --cluster profile"
"$bin" predict --preset 2b --gpus "$np" --cluster a800x8 --format json >"$work/base.json" || fail "predict a800x8"
cal=$(grep -o '"step_s": *[0-9.e+-]*' "$work/cal.json" | head -1 | grep -o '[0-9.e+-]*$')
base=$(grep -o '"step_s": *[0-9.e+-]*' "$work/base.json" | head -1 | grep -o '[0-9.e+-]*$')
awk -v c="$cal" -v b="$base" 'BEGIN { exit !(c > 10 * b) }' || fail "step time with the profile ($cal s) is not slower than the preset's ($base s)"

# --resume after an interruption: keep the header and 4 records, rerun, the missing ones come back.
if [ "$np" = 2 ]; then
  lines=$(wc -l <"$work/cpu.raw.csv")
  head -n 6 "$work/cpu.raw.csv" >"$work/partial.csv"
  printf 'collective,all_gather,wor' >>"$work/partial.csv"  # a line cut by the interruption
  cp "$work/partial.csv" "$work/cpu.raw.csv"
  "$mpirun" --oversubscribe -np 2 "$bin" calibrate --backend mpi --quick --preset 2b --resume \
    --out "$work/cpu.yaml" >"$work/stdout2" 2>"$work/stderr2" || { cat "$work/stderr2"; fail "--resume exited $?"; }
  no_rank_left "--resume"
  [ "$(grep -c '\[resumed\]' "$work/stderr2")" = 4 ] || fail "--resume did not skip exactly the 4 kept records"
  [ "$(wc -l <"$work/cpu.raw.csv")" = "$lines" ] || fail "--resume did not complete the raw CSV"
  head -n 6 "$work/cpu.raw.csv" | cmp -s - <(head -n 6 "$work/partial.csv") || fail "--resume changed kept records"
  "$check" "$work/cpu.yaml" 100 200 3 || fail "fits after --resume"
fi
echo "ok: $np ranks"
