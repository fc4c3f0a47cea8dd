#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run):
#   1. unit tests (GoogleTest) and end-to-end tests (pytest) under ASan + UBSan, via CTest;
#   2. the pickle reader's libFuzzer target under ASan + UBSan for a bounded number of runs.
# Set VRAMSCOPE_FUZZ_RUNS=0 to skip the fuzzing step. The run is reproducible (a fixed seed,
# VRAMSCOPE_FUZZ_SEED, default 1); exploratory fuzzing is a separate, longer run (see README).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/install-deps.sh --test

# pytest in a private virtual environment (Debian's Python refuses system-wide pip installs).
venv=$root/build-test/venv
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -c 'import pytest' 2>/dev/null || "$venv/bin/python" -m pip install -q pytest

echo "== build (ASan + UBSan) =="
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS="-O1" -DVRAMSCOPE_SANITIZE=address,undefined \
  -DPython3_EXECUTABLE="$venv/bin/python" >/dev/null
cmake --build build-test

echo "== tests =="
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
ctest --test-dir build-test --output-on-failure

runs=${VRAMSCOPE_FUZZ_RUNS:-50000}
if [[ $runs != 0 ]]; then
  echo "== fuzz: pickle reader + snapshot source, $runs runs (ASan + UBSan) =="
  CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="-O1" \
    -DVRAMSCOPE_SANITIZE=address,undefined -DVRAMSCOPE_BUILD_FUZZERS=ON \
    -DVRAMSCOPE_BUILD_TESTS=OFF >/dev/null
  cmake --build build-fuzz --target pickle_reader_fuzzer replay_fuzzer
  corpus=$(mktemp -d)
  trap 'rm -rf "$corpus"' EXIT
  cp src/sources/pickle/fuzz_corpus/*.pickle "$corpus/"
  build-fuzz/src/sources/pickle/pickle_reader_fuzzer -seed="${VRAMSCOPE_FUZZ_SEED:-1}" \
    -runs="$runs" -max_len=8192 -max_total_time=300 -print_final_stats=1 "$corpus" 2>&1 |
    tail -n 12
  echo "== fuzz: allocator model + replay, $runs runs (ASan + UBSan, model invariants) =="
  replay_corpus=$(mktemp -d)
  trap 'rm -rf "$corpus" "$replay_corpus"' EXIT
  cp src/allocator/fuzz_corpus/* "$replay_corpus/"
  build-fuzz/src/allocator/replay_fuzzer -seed="${VRAMSCOPE_FUZZ_SEED:-1}" \
    -runs="$runs" -max_len=2048 -max_total_time=300 -print_final_stats=1 "$replay_corpus" 2>&1 |
    tail -n 12
  echo "fuzz: no finding in $runs runs of each target"
fi
