#!/usr/bin/env bash
# Faults in a multi-rank `calibrate`: a rank that dies, ranks started with other flags, and an interrupted run
# (SIGINT to mpirun). The previous profile must stay intact, no rank may be left running, and --resume must
# finish the interrupted run from its raw CSV. Usage: calibrate_faults.sh SHARDPLAN MPIRUN
set -uo pipefail
bin=$1 mpirun=$2
source "$(dirname "$0")/common.sh"
echo "previous profile" > "$work/p.yaml"
cp "$work/p.yaml" "$work/previous.yaml"

# A dead rank: the job ends, the previous profile is untouched.
SHARDPLAN_CALIBRATE_FAULT=exit:1 "$mpirun" --oversubscribe -np 2 -x SHARDPLAN_CALIBRATE_FAULT "$bin" calibrate \
  --backend mpi --quick --quiet --timeout 5 --out "$work/p.yaml" >"$work/out" 2>"$work/err"
code=$?
no_rank_left "dead rank"
[ "$code" != 0 ] || fail "dead rank: exit 0"
cmp -s "$work/p.yaml" "$work/previous.yaml" || fail "dead rank: the previous profile was changed"
echo "ok: dead rank: exit $code, previous profile intact"

# Other flags on rank 1: refused before measuring, one error line naming rank 1, exit 2.
"$mpirun" --oversubscribe -np 1 "$bin" calibrate --backend mpi --quick --quiet --out "$work/p.yaml" : \
  -np 1 "$bin" calibrate --backend mpi --quick --quiet --max-bytes 64K --out "$work/p.yaml" >"$work/out" 2>"$work/err"
code=$?
no_rank_left "mismatched flags"
[ "$code" = 2 ] || { cat "$work/err"; fail "mismatched flags: exit $code, expected 2"; }
[ "$(grep -c '^error: ' "$work/err")" = 1 ] || { cat "$work/err"; fail "mismatched flags: not one error line"; }
grep -q 'rank(s) 1 ' "$work/err" || { cat "$work/err"; fail "mismatched flags: rank 1 not named"; }
echo "ok: mismatched flags: $(grep '^error: ' "$work/err")"

# SIGINT while measuring: the previous profile stays, the raw CSV keeps what was measured, --resume finishes.
"$mpirun" --oversubscribe -np 2 "$bin" calibrate --backend mpi --quick --quiet --out "$work/p.yaml" \
  >"$work/out" 2>"$work/err" &
launcher=$!
for _ in $(seq 1 100); do  # until a few measurements are on disk (at most 10 s)
  [ "$(grep -vc '^#' "$work/p.raw.csv" 2>/dev/null || echo 0)" -ge 4 ] && break
  sleep 0.1
done
kill -INT "$launcher"
wait "$launcher"
code=$?
no_rank_left "interrupted"
[ "$code" != 0 ] || echo "note: the run finished before SIGINT arrived"
cmp -s "$work/p.yaml" "$work/previous.yaml" || fail "interrupted: the previous profile was changed"
kept=$(grep -vc '^#' "$work/p.raw.csv")
[ "$kept" -ge 1 ] || fail "interrupted: the raw CSV kept nothing"
"$mpirun" --oversubscribe -np 2 "$bin" calibrate --backend mpi --quick --resume --out "$work/p.yaml" \
  >"$work/out" 2>"$work/err" || { cat "$work/err"; fail "resume: exit $?"; }
no_rank_left "resume"
grep -q '^kind: calibration-profile' "$work/p.yaml" || fail "resume: no profile written"
resumed=$(grep -c 'resumed' "$work/err")
[ "$resumed" -ge 1 ] || { cat "$work/err"; fail "resume: nothing was taken from the raw CSV"; }
echo "ok: interrupted after $kept raw lines (exit $code); --resume reused $resumed measurements and wrote the profile"
exit 0
