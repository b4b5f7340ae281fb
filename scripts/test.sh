#!/usr/bin/env bash
# Builds and runs every test twice: a Release build, then an AddressSanitizer + UndefinedBehaviorSanitizer build;
# then runs each fuzz target for a few seconds (clang's libFuzzer) when clang is present.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$jobs"
ctest --test-dir build --output-on-failure

# Sanitized: -O1 keeps it fast enough; leaks are reported too (LeakSanitizer).
# CUDA sources are compiled (and their GPU tests skipped) in the Release pass; the sanitizer and fuzz passes check
# the host code only.
cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSHARDPLAN_SANITIZE=ON -DSHARDPLAN_TESTS=ON -DSHARDPLAN_CUDA=OFF \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g"
cmake --build build-asan -j"$jobs"
# The multi-rank tests run under mpirun in the Release pass only: OpenMPI's own allocations are reported as leaks.
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -E '_mpi_'

if command -v clang++ >/dev/null 2>&1; then
  cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DSHARDPLAN_FUZZ=ON -DSHARDPLAN_CUDA=OFF \
    -DSHARDPLAN_TESTS=OFF
  cmake --build build-fuzz -j"$jobs" --target fuzz_targets
  fuzz/run.sh build-fuzz/fuzz "${SHARDPLAN_FUZZ_SECONDS:-10}"
fi
