#!/usr/bin/env bash
# Hardening, round 2 (issue 19), under mpirun: a rank stopped right after spawn (item 8), ranks with the same flags
# but other files (item 9), SHARDPLAN_RANKS_PER_NODE on one rank only and --raw on a FIFO (item 22), a calibrate
# rank stopped mid-run (item 22), a reference run too large for the machine on 2 ranks (item 18). Every case must
# end in bounded time with exactly one `error:` line naming the cause, and leave no rank running.
# Usage: hardening_faults.sh SHARDPLAN MPIRUN
set -uo pipefail
bin=$1 mpirun=$2
source "$(dirname "$0")/common.sh"
mpi=("$mpirun" --oversubscribe)

one_error() {  # one_error NAME PATTERN: exactly one error line, matching PATTERN
  local n
  n=$(grep -c '^error: ' "$work/err")
  [ "$n" = 1 ] || { cat "$work/err"; fail "$1: $n error lines, expected 1"; }
  grep -q "^error: .*$2" "$work/err" || { cat "$work/err"; fail "$1: the error line does not say '$2'"; }
}

# 1. A rank stopped before MPI_Init: the others waited in MPI_Init for ever, whatever --timeout said.
for cmd in "calibrate --quick --quiet --out $work/p.yaml" "validate --preset tiny --steps 1 --warmup 0 --quiet --steps-out $work/s.jsonl"; do
  start=$(date +%s)
  timeout 120 "${mpi[@]}" -np 1 "$bin" $cmd --timeout 3 : -np 1 bash -c "kill -STOP \$\$; exec '$bin' $cmd --timeout 3" \
    >"$work/out" 2>"$work/err"
  code=$?
  took=$(( $(date +%s) - start ))
  no_rank_left "stopped at spawn (${cmd%% *})"
  [ "$code" != 0 ] && [ "$code" != 124 ] || { cat "$work/err"; fail "stopped at spawn (${cmd%% *}): exit $code"; }
  [ "$took" -le 30 ] || fail "stopped at spawn (${cmd%% *}): took $took s with --timeout 3"
  one_error "stopped at spawn (${cmd%% *})" "start-up did not finish"
  echo "ok: stopped at spawn (${cmd%% *}): exit $code after $took s"
done

# 2. Same flags, other working folders, other m.yaml: a silently wrong measurement or MPI_ERR_TRUNCATE before.
mkdir -p "$work/a" "$work/b"
model="layers: 2\nhidden: 64\nheads: 4\nkv_heads: 2\nffn_hidden: 176\nvocab: 256\nseq: 32\nmlp: swiglu\nnorm: rmsnorm\ntied_embeddings: false\n"
printf "name: m\n$model" > "$work/a/m.yaml"
printf "name: m\n${model/hidden: 64/hidden: 128}" > "$work/b/m.yaml"
args=(validate --model m.yaml --steps 1 --warmup 0 --quiet --timeout 10 --steps-out "$work/s.jsonl")
timeout 120 "${mpi[@]}" -np 1 -wdir "$work/a" "$bin" "${args[@]}" : -np 1 -wdir "$work/b" "$bin" "${args[@]}" \
  >"$work/out" 2>"$work/err"
code=$?
no_rank_left "other files"
[ "$code" = 2 ] || { cat "$work/err"; fail "other files: exit $code, expected 2"; }
one_error "other files" "rank(s) 1 resolved another configuration"
echo "ok: other files: $(grep '^error: ' "$work/err")"

# 3. SHARDPLAN_RANKS_PER_NODE given to rank 0 only: named, not "nodes run 1 to 2 ranks each".
timeout 120 "${mpi[@]}" -np 1 -x SHARDPLAN_RANKS_PER_NODE=1 "$bin" calibrate --quick --quiet --out "$work/p.yaml" : \
  -np 1 "$bin" calibrate --quick --quiet --out "$work/p.yaml" >"$work/out" 2>"$work/err"
code=$?
no_rank_left "ranks per node on one rank"
[ "$code" = 2 ] || { cat "$work/err"; fail "ranks per node on one rank: exit $code, expected 2"; }
one_error "ranks per node on one rank" "SHARDPLAN_RANKS_PER_NODE"
echo "ok: ranks per node on one rank: $(grep '^error: ' "$work/err")"

# 4. --raw on a FIFO: refused (before: rank 0 blocked opening it and rank 1 was blamed).
mkfifo "$work/raw.fifo"
timeout 60 "${mpi[@]}" -np 2 "$bin" calibrate --quick --quiet --timeout 5 --out "$work/p.yaml" --raw "$work/raw.fifo" \
  >"$work/out" 2>"$work/err"
code=$?
no_rank_left "raw FIFO"
[ "$code" = 2 ] || { cat "$work/err"; fail "raw FIFO: exit $code, expected 2"; }
one_error "raw FIFO" "--raw .*FIFO"
echo "ok: raw FIFO: $(grep '^error: ' "$work/err")"

# 5. A reference run that cannot fit: bad input before training, one line (before: one per rank, exit 1).
timeout 60 "${mpi[@]}" -np 2 "$bin" validate --preset tiny --micro-batch 100000 --quiet --steps-out "$work/s.jsonl" \
  >"$work/out" 2>"$work/err"
code=$?
no_rank_left "too large a run"
[ "$code" = 2 ] || { cat "$work/err"; fail "too large a run: exit $code, expected 2"; }
one_error "too large a run" "GB"
echo "ok: too large a run: $(grep '^error: ' "$work/err")"

# 6. A calibrate rank stopped mid-run (SIGSTOP): the error names it, within the timeout.
rank_pid() {  # the pid of rank $1 of the job whose command line holds $work
  local p r
  for p in $(pgrep -f "$work/p2.yaml"); do
    r=$(tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep '^OMPI_COMM_WORLD_RANK=' | cut -d= -f2)
    [ "$r" = "$1" ] && { echo "$p"; return 0; }
  done
  return 1
}
start=$(date +%s)
timeout 120 "${mpi[@]}" -np 2 "$bin" calibrate --quick --quiet --timeout 3 --out "$work/p2.yaml" >"$work/out" 2>"$work/err" &
launcher=$!
victim=""
for _ in $(seq 1 100); do victim=$(rank_pid 1) && break; sleep 0.05; done
[ -n "$victim" ] || fail "stopped rank: rank 1 never started"
sleep 0.5
kill -STOP "$victim"
wait "$launcher"
code=$?
took=$(( $(date +%s) - start ))
kill -CONT "$victim" 2>/dev/null
no_rank_left "stopped rank"
[ "$code" != 0 ] || fail "stopped rank: exit 0"
[ "$took" -le 40 ] || fail "stopped rank: took $took s with --timeout 3"
one_error "stopped rank" "rank 1 "
echo "ok: stopped rank: exit $code after $took s: $(grep '^error: ' "$work/err")"
exit 0
