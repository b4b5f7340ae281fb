#!/usr/bin/env bash
# The reference loop under mpirun --oversubscribe -np N: ZeRO-0/1/2/3 training (and no_sync accumulation with
# full recompute; fp32, and bf16 under pure-bf16 / amp-bf16 with bf16 tolerances) gives the same parameters and
# losses as 1-rank training on the same global batch, and each
# rank's parameter, gradient and optimizer bytes equal the hand-computed values (reference/train_check.cpp).
# Then a rank that stops responding: the others end the job with an `error:` line within the time-out, no hang.
set -euo pipefail
check=$1 mpirun=$2 np=$3
source "$(dirname "$0")/common.sh"

"$mpirun" --oversubscribe -np "$np" "$check" "$work" >"$work/stdout" 2>"$work/stderr" \
  || { cat "$work/stdout" "$work/stderr"; fail "shardplan_reference_check exited $?"; }
no_rank_left "shardplan_reference_check"
cat "$work/stdout"
grep -q 'MISMATCH' "$work/stdout" && fail "a run differs from the 1-rank run or from the expected bytes"
[ "$(tail -n 1 "$work/stdout")" = ok ] || fail "the check did not end with ok"
[ "$(grep -c ' on '"$np"' ranks:' "$work/stdout")" = 13 ] || fail "not every case ran"

start=$(date +%s)
set +e
timeout 60 "$mpirun" --oversubscribe -np "$np" "$check" --stall "$work" >"$work/stall.out" 2>"$work/stall.err"
rc=$?
set -e
no_rank_left "--stall"
[ "$rc" != 0 ] || fail "--stall exited 0: the stalled rank went unnoticed"
[ "$rc" != 124 ] || fail "--stall hung until the test's own 60 s time-out"
grep -q '^error: .*did not finish within 2 s' "$work/stall.err" || { cat "$work/stall.err"; fail "no error: line naming the time-out"; }
[ $(( $(date +%s) - start )) -le 20 ] || fail "--stall took more than 20 s to end"
echo "ok: $np ranks"
