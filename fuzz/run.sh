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
  echo "fuzz: $name for ${seconds}s"
  "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix="$work/" "$work" "$root/corpus/$target" 2>"$work/log" || {
    tail -40 "$work/log"
    echo "fuzz: $name FAILED; reproducer(s) in $work"
    exit 1
  }
  grep -E "stat::number_of_executed_units" "$work/log" || true
  rm -rf "$work"
done
echo "fuzz: all targets clean"
