#!/usr/bin/env bash
# Multi-node calibration on one machine: SHARDPLAN_RANKS_PER_NODE=2 makes 4 ranks two "nodes" of 2 (comm.hpp
# query_world), so calibrate measures its multi-node scopes — the world, one node (intra_node) and the rails (one
# rank per node) — and the planner reads them for groups that span nodes. The numbers are shared-memory numbers
# (this is one machine); what is tested is the layout, the profile and its use, and that bad layouts are refused.
set -euo pipefail
bin=$1 check=$2 mpirun=$3
source "$(dirname "$0")/common.sh"

"$mpirun" --oversubscribe -np 4 -x SHARDPLAN_RANKS_PER_NODE=2 "$bin" calibrate --backend mpi --quick --no-gemm \
  --quiet --out "$work/nodes.yaml" >"$work/stdout" 2>"$work/stderr" || { cat "$work/stderr"; fail "calibrate exited $?"; }
no_rank_left "calibrate with 2 nodes"
cat "$work/stdout"
p="$work/nodes.yaml"
grep -q '^gpus_per_node: 2$' "$p" || fail "gpus_per_node is not 2"
grep -q '^  nodes: 2$' "$p" || fail "meta.nodes is not 2"
grep -q '^  ranks_per_node: 2$' "$p" || fail "meta.ranks_per_node is not 2"
grep -q 'SHARDPLAN_RANKS_PER_NODE: "2"' "$p" || fail "the emulated layout is not recorded in meta.environment"
for scope in world intra_node rail; do
  [ "$(grep -c "^    scope: $scope\$" "$p")" = 5 ] || fail "not 5 collectives measured over scope $scope"
done
# The rails hold one rank of each node: 2 ranks, 1 per node.
grep -A2 '^    scope: rail$' "$p" | grep -q '^    ranks_per_node: 1$' || fail "rail groups are not one rank per node"
grep -q '^  wrong: 0$' "$p" || fail "collectives came back wrong"
"$check" "$p" 100 200 3 || fail "fits do not reproduce the medians"

# The planner reads the multi-node entries: FULL_SHARD over both nodes, and HSDP (shard in a node, replicate
# across the rails); both far slower than the a800x8 preset the profile refines. Only the collectives are measured
# (--no-gemm), so the ratio is the exposed share of shared-memory MPI against NVLink: 8× and more on the 2-core CI machine,
# depending on its load; a profile that was not read would give 1×. 3× is the bar.
for layout in "--zero 3" "--zero 3 --hsdp 2"; do
  # shellcheck disable=SC2086
  "$bin" predict --preset 2b --gpus 4 --cluster "$p" $layout --format json >"$work/cal.json" || fail "predict $layout"
  # shellcheck disable=SC2086
  "$bin" predict --preset 2b --gpus 4 --cluster a800x8 $layout --format json >"$work/base.json" || fail "predict a800x8"
  cal=$(grep -o '"step_s": *[0-9.e+-]*' "$work/cal.json" | head -1 | grep -o '[0-9.e+-]*$')
  base=$(grep -o '"step_s": *[0-9.e+-]*' "$work/base.json" | head -1 | grep -o '[0-9.e+-]*$')
  awk -v c="$cal" -v b="$base" 'BEGIN { exit !(c > 3 * b) }' || fail "$layout: the profile's step ($cal s) is not 3× the preset's ($base s)"
  echo "ok: predict $layout with the 2-node profile: $cal s (a800x8: $base s)"
done

# Bad layouts end with one error line and exit 2: a count that is not a number, nodes of unequal size.
expect_bad() {
  local name=$1 np=$2 value=$3
  set +e
  "$mpirun" --oversubscribe -np "$np" -x SHARDPLAN_RANKS_PER_NODE="$value" "$bin" calibrate --backend mpi --quick \
    --no-gemm --quiet --out "$work/bad.yaml" >"$work/out" 2>"$work/err"
  local code=$?
  set -e
  no_rank_left "$name"
  [ "$code" = 2 ] || { cat "$work/err"; fail "$name: exit $code, expected 2"; }
  [ "$(grep -c '^error: ' "$work/err")" = 1 ] || { cat "$work/err"; fail "$name: not exactly one error line"; }
  [ -e "$work/bad.yaml" ] && fail "$name: a profile was written"
  echo "ok: $name: $(grep '^error: ' "$work/err")"
}
expect_bad "ranks per node not a number" 2 two
expect_bad "nodes of unequal size" 3 2
echo "ok: multi-node scopes"
