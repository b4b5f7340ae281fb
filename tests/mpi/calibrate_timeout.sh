#!/usr/bin/env bash
# A hung rank (fault injection: rank 1 stops before its first measurement) ends every rank within --timeout
# with an error naming rank 1, exit non-zero, and no rank left running.
set -uo pipefail
bin=$1 mpirun=$2
source "$(dirname "$0")/common.sh"

start=$(date +%s)
SHARDPLAN_CALIBRATE_FAULT=hang:1 "$mpirun" --oversubscribe -np 2 -x SHARDPLAN_CALIBRATE_FAULT "$bin" calibrate \
  --backend mpi --quick --quiet --timeout 3 --out "$work/p.yaml" >"$work/out" 2>"$work/err"
code=$?
elapsed=$(( $(date +%s) - start ))
no_rank_left "hang"
[ "$code" != 0 ] || fail "a hung rank did not fail the run"
grep -q '^error: .*rank 1 did not reach' "$work/err" || { cat "$work/err"; fail "the error does not name rank 1"; }
[ "$elapsed" -lt 30 ] || fail "took $elapsed s to end (timeout 3 s)"
[ -e "$work/p.yaml" ] && fail "a profile was written"
echo "ok: hung rank 1 named, all ranks ended after $elapsed s"
