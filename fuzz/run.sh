#!/usr/bin/env bash
# Runs every fuzz target in DIR for SECONDS each, starting from fuzz/corpus/<target>/ (read-only: new inputs go to
# a temporary corpus). Fails on the first crash, leak, sanitizer report or timeout.
set -euo pipefail
dir=${1:?usage: fuzz/run.sh BUILD/fuzz SECONDS}
seconds=${2:-10}
root=$(cd "$(dirname "$0")" && pwd)
for exe in "$dir"/fuzz_*; do
  name=$(basename "$exe")
  target=${name#fuzz_}
  work=$(mktemp -d)
  # A hang is one input over 10 s; fuzz_cli's inputs can be a whole `plan` (search + simulated re-rank of the top
  # three), which takes up to ~12 s under ASan + UBSan + coverage on a busy 2-core machine: 60 s there.
  per_input=10
  [ "$name" = fuzz_cli ] && per_input=60
  echo "fuzz: $name for ${seconds}s"
  "$exe" -max_total_time="$seconds" -timeout="$per_input" -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work" "$root/corpus/$target" 2>"$work/log" || {
    tail -40 "$work/log"
    echo "fuzz: $name FAILED; reproducer(s) in $work"
    exit 1
  }
  grep -E "stat::number_of_executed_units" "$work/log" || true
  rm -rf "$work"
done
echo "fuzz: all targets clean"
