#!/usr/bin/env bash
# Bad input under mpirun: exactly one `error:` line (rank 0 only), exit 2, no rank left running.
set -uo pipefail
bin=$1 mpirun=$2
source "$(dirname "$0")/common.sh"

expect_bad() {  # expect_bad NAME NP ARGS...
  local name=$1 np=$2
  shift 2
  "$mpirun" --oversubscribe -np "$np" "$bin" calibrate "$@" >"$work/out" 2>"$work/err"
  local code=$?
  no_rank_left "$name"
  [ "$code" = 2 ] || { cat "$work/err"; fail "$name: exit $code, expected 2"; }
  local n
  n=$(grep -c '^error: ' "$work/err")
  [ "$n" = 1 ] || { cat "$work/err"; fail "$name: $n error lines, expected 1"; }
  echo "ok: $name: $(grep '^error: ' "$work/err")"
}

expect_bad "unknown backend" 2 --backend gloo --out "$work/p.yaml"
expect_bad "one rank" 1 --backend mpi --quick --out "$work/p.yaml"
expect_bad "sizes below one element per rank" 2 --quick --min-bytes 4 --out "$work/p.yaml"
expect_bad "sizes above the limit" 2 --quick --max-bytes 2G --out "$work/p.yaml"
expect_bad "unwritable --out" 2 --quick --out "$work/no/such/folder/p.yaml"
expect_bad "unknown flag" 2 --quick --bogus --out "$work/p.yaml"
[ -e "$work/p.yaml" ] && fail "a profile was written for bad input"
exit 0
