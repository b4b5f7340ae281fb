#!/usr/bin/env bash
# `shardplan validate` on CPU ranks: the reference loop trains tiny under ZeRO-0..3 and the prediction is held
# against it; the step log replays through --measurements; bad input gives one error line from rank 0.
# Usage: validate_cpu.sh SHARDPLAN MPIRUN NP
set -uo pipefail
bin=$1 mpirun=$2 np=$3
source "$(dirname "$0")/common.sh"

# field FILE KEY: the first number after "KEY": in a pretty-printed JSON file (no jq/python on CI machines).
field() { grep -m1 -o "\"$2\": *[-0-9.eE+]*" "$1" | sed 's/.*: *//'; }
# within PCT VALUE: |VALUE| ≤ PCT
within() { awk -v v="$2" -v b="$1" 'BEGIN { exit !(v == v + 0 && (v < 0 ? -v : v) <= b) }'; }

# tiny: Llama-style (RMSNorm, SwiGLU, rotary, GQA); small: GPT-2-style (LayerNorm, GELU, learned positions,
# tied, biases). The issue's bound: the predicted peak within 5 % of the measured one.
# Mixed precision (bf16 tensors; amp-bf16 adds the fp32 master copy) under three ZeRO stages.
for run in "tiny 0" "tiny 1" "tiny 2" "tiny 3" "small 0" "small 3" "tiny 3 amp-bf16" "tiny 1 pure-bf16" \
           "small 2 amp-bf16"; do
  set -- $run
  model=$1 zero=$2 precision=${3:-fp32}
  [ "$precision" = fp32 ] || zero="$zero-$precision"  # names the run's files
  "$mpirun" --oversubscribe -np "$np" "$bin" validate --preset "$model" --zero "${zero%%-*}" --precision "$precision" \
    --micro-batch 2 --steps 3 --warmup 1 --format json --steps-out "$work/steps_${model}_$zero.jsonl" \
    >"$work/v_${model}_$zero.json" 2>"$work/err"
  code=$?
  no_rank_left "$model zero $zero"
  [ "$code" = 0 ] || { cat "$work/err"; fail "$model zero $zero: exit $code"; }
  # Progress under mpirun (stderr is no TTY): plain lines from rank 0 with the ETA, the first and the last step at
  # least (issue 16).
  grep -Eq '^validate: step 1/4 \(warm-up\), loss [0-9.]+, [0-9.]+ s, peak [0-9.]+ MB, ETA [0-9]+ s$' "$work/err" ||
    { cat "$work/err"; fail "$model zero $zero: no progress line for step 1/4"; }
  grep -Eq '^validate: step 4/4, loss .*, ETA 0 s$' "$work/err" || { cat "$work/err"; fail "$model zero $zero: no last progress line"; }
  [ "$(grep -c '^validate: step' "$work/err")" -le 4 ] || fail "$model zero $zero: progress from more than rank 0"
  # The memory prediction of the reference loop must hold: every byte of it is designed, none is a guess.
  sed -n '/"error_pct"/,/}/p' "$work/v_${model}_$zero.json" > "$work/err_pct"
  peak_err=$(field "$work/err_pct" peak_bytes)
  within 5 "$peak_err" || { head -60 "$work/v_${model}_$zero.json"; fail "$model zero $zero: peak memory off by $peak_err %"; }
  lines=$(wc -l < "$work/steps_${model}_$zero.jsonl")
  [ "$lines" = 4 ] || fail "$model zero $zero: --steps-out has $lines lines, expected 4 (1 warm-up + 3)"
  echo "ok: $model zero $zero: peak error $peak_err %"
done

# The step log replays: --measurements gives the same measured peak.
"$bin" validate --preset tiny --gpus "$np" --zero 3 --micro-batch 2 --precision fp32 --framework reference \
  --measurements "$work/steps_tiny_3.jsonl" --format json >"$work/replay.json" 2>"$work/err" ||
  { cat "$work/err"; fail "replay: exit $?"; }
sed -n '/"measured"/,/}/p' "$work/v_tiny_3.json" > "$work/m_run"
sed -n '/"measured"/,/}/p' "$work/replay.json" > "$work/m_replay"
[ "$(field "$work/m_run" peak_bytes)" = "$(field "$work/m_replay" peak_bytes)" ] ||
  fail "replay: measured peak $(field "$work/m_replay" peak_bytes) differs from the run's $(field "$work/m_run" peak_bytes)"
echo "ok: replay"

expect_bad() {  # expect_bad NAME ARGS...
  local name=$1
  shift
  "$mpirun" --oversubscribe -np "$np" "$bin" validate "$@" >"$work/out" 2>"$work/err"
  local code=$?
  no_rank_left "$name"
  [ "$code" = 2 ] || { cat "$work/err"; fail "$name: exit $code, expected 2"; }
  local n
  n=$(grep -c '^error: ' "$work/err")
  [ "$n" = 1 ] || { cat "$work/err"; fail "$name: $n error lines, expected 1"; }
  echo "ok: $name: $(grep '^error: ' "$work/err")"
}
expect_bad "tensor parallelism" --preset tiny --tp 2
expect_bad "rank count" --preset tiny --gpus 7
expect_bad "cuda backend" --preset tiny --backend cuda
expect_bad "precision the loop does not run" --preset tiny --precision megatron-bf16
expect_bad "unknown flag" --preset tiny --bogus
expect_bad "bad number" --preset tiny --steps many
expect_bad "unwritable --steps-out" --preset tiny --steps 1 --warmup 0 --steps-out "$work/no/such/dir/s.jsonl"
[ -e "$work/no" ] && fail "a folder was created for bad input"
exit 0
