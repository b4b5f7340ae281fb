#!/usr/bin/env bash
# Faults in a multi-rank `validate`: a rank that stalls, a rank that dies, ranks started with other flags. Every
# surviving rank must end within the timeout, the run must fail with a message naming the cause, and no rank may
# be left running. Usage: validate_faults.sh SHARDPLAN MPIRUN
set -uo pipefail
bin=$1 mpirun=$2
source "$(dirname "$0")/common.sh"
# --steps-out puts $work on every rank's command line, for no_rank_left.
args=(validate --preset tiny --zero 3 --steps 3 --warmup 1 --quiet --timeout 5 --steps-out "$work/steps.jsonl")

# A stalled rank: the others time out in their next collective (5 s), say which wait failed, and end the job.
start=$(date +%s)
SHARDPLAN_VALIDATE_FAULT=hang:1 "$mpirun" --oversubscribe -x SHARDPLAN_VALIDATE_FAULT -np 2 "$bin" "${args[@]}" >"$work/out" 2>"$work/err"
code=$?
took=$(( $(date +%s) - start ))
no_rank_left "stalled rank"
[ "$code" != 0 ] || fail "stalled rank: exit 0"
[ "$took" -le 60 ] || fail "stalled rank: took $took s with --timeout 5"
grep -q '^error: rank 0' "$work/err" || { cat "$work/err"; fail "stalled rank: no error line from rank 0"; }
echo "ok: stalled rank: exit $code after $took s: $(grep -m1 '^error: ' "$work/err")"

# A dead rank: mpirun ends the others and says which process exited.
SHARDPLAN_VALIDATE_FAULT=exit:1 "$mpirun" --oversubscribe -x SHARDPLAN_VALIDATE_FAULT -np 2 "$bin" "${args[@]}" \
  >"$work/out" 2>"$work/err"
code=$?
no_rank_left "dead rank"
[ "$code" != 0 ] || fail "dead rank: exit 0"
echo "ok: dead rank: exit $code"

# Ranks started with other flags (MPMD): refused before training, one error line naming the rank, exit 2.
"$mpirun" --oversubscribe -np 1 "$bin" "${args[@]}" : -np 1 "$bin" validate --preset tiny --zero 2 --steps 3 \
  --warmup 1 --quiet --timeout 5 --steps-out "$work/steps.jsonl" >"$work/out" 2>"$work/err"
code=$?
no_rank_left "mismatched flags"
[ "$code" = 2 ] || { cat "$work/err"; fail "mismatched flags: exit $code, expected 2"; }
n=$(grep -c '^error: ' "$work/err")
[ "$n" = 1 ] || { cat "$work/err"; fail "mismatched flags: $n error lines, expected 1"; }
grep -q 'rank(s) 1 ' "$work/err" || { cat "$work/err"; fail "mismatched flags: rank 1 not named"; }
echo "ok: mismatched flags: $(grep '^error: ' "$work/err")"
exit 0
