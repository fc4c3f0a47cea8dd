#!/usr/bin/env bash
# The whole test suite, as CI runs it (.ci/run):
#   1. unit tests (GoogleTest), the viewer's JavaScript tests (node --test), end-to-end tests
#      (pytest, the viewer's in headless Chromium) under ASan + UBSan, via CTest;
#   2. every libFuzzer target (pickle reader, allocator replay, profiler-trace, memory-timeline and
#      native-trace sources, the predictor's inputs, the capture sidecar, the report database behind
#      `vramscope view`, any input file plain or gzipped) under ASan + UBSan for a bounded number
#      of runs, within the resource contract's memory and time limits.
# The tracer's and the capture bootstrap's tests (tests/tracer, tests/capture) run with PyTorch,
# transformers, peft, accelerate and lightning from PyPI, installed once into a virtual environment
# under ~/.cache/vramscope (VRAMSCOPE_TORCH_VENV to choose another).
# Set VRAMSCOPE_FUZZ_RUNS=0 to skip the fuzzing step. The run is reproducible (a fixed seed,
# VRAMSCOPE_FUZZ_SEED, default 1); exploratory fuzzing is a separate, longer run (see docs/guide/development.md).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/install-deps.sh --test

# pytest in a private virtual environment (Debian's Python refuses system-wide pip installs).
venv=$root/build-test/venv
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -c 'import pytest, playwright, jsonschema, nbclient, ipykernel' 2>/dev/null ||
  "$venv/bin/python" -m pip install -q pytest playwright jsonschema nbclient nbformat ipykernel
# Every --json document the end-to-end tests make is validated against schemas/ (must, here).
export VRAMSCOPE_REQUIRE_SCHEMAS=1
# The tracer's and the bootstrap's tests need PyTorch, transformers and the training frameworks
# (from PyPI: several GB). They get their own virtual environment outside the checkout, made once
# and reused by later runs (like pip's cache).
torch_venv=${VRAMSCOPE_TORCH_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vramscope/torch-venv}
torch_modules="torch, transformers, peft, accelerate, lightning, torchao, pytest, nbclient, ipykernel"
if ! "$torch_venv/bin/python" -c "import $torch_modules" 2>/dev/null; then
  echo "== installing torch, transformers, peft, accelerate, lightning and torchao into $torch_venv (once) =="
  mkdir -p "$(dirname "$torch_venv")"
  [[ -x $torch_venv/bin/python ]] || python3 -m venv "$torch_venv"
  "$torch_venv/bin/python" -m pip install -q torch transformers peft accelerate lightning torchao pytest \
    nbclient nbformat ipykernel
fi
# vramscope.xla's tests record real jitted steps with jax[cpu], optax and flax (nnx models;
# about 130 MB from PyPI), in their own environment beside the torch one, made once.
jax_venv=${VRAMSCOPE_JAX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vramscope/jax-venv}
if ! "$jax_venv/bin/python" -c "import jax, optax, flax, pytest" 2>/dev/null; then
  echo "== installing jax[cpu], optax and flax into $jax_venv (once) =="
  mkdir -p "$(dirname "$jax_venv")"
  [[ -x $jax_venv/bin/python ]] || python3 -m venv "$jax_venv"
  "$jax_venv/bin/python" -m pip install -q "jax[cpu]" optax flax pytest
fi
# vramscope.tf's tests record real TensorFlow profiles with tensorflow-cpu (Keras comes with it;
# about 600 MB from PyPI), in a third environment, made once.
tf_venv=${VRAMSCOPE_TF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vramscope/tf-venv}
if ! "$tf_venv/bin/python" -c "import tensorflow, keras, pytest" 2>/dev/null; then
  echo "== installing tensorflow-cpu into $tf_venv (once) =="
  mkdir -p "$(dirname "$tf_venv")"
  [[ -x $tf_venv/bin/python ]] || python3 -m venv "$tf_venv"
  "$tf_venv/bin/python" -m pip install -q tensorflow-cpu pytest
fi
# The viewer's browser tests drive Debian's Chromium (Playwright's own browser download is not
# needed); here they must run, not skip.
export VRAMSCOPE_CHROMIUM=${VRAMSCOPE_CHROMIUM:-$(command -v chromium || true)}
export VRAMSCOPE_REQUIRE_BROWSER=1
# `pip install .` into a fresh virtual environment (tests/install) must run here, not skip.
export VRAMSCOPE_REQUIRE_INSTALL=1

# The compiler cache, kept beside the torch environment (like pip's cache): a run rebuilds only
# what changed since an earlier run on this machine, in any checkout (paths are hashed relative to
# the checkout). Set VRAMSCOPE_CCACHE=0 to build without it.
launcher=()
if [[ ${VRAMSCOPE_CCACHE:-1} != 0 ]] && command -v ccache >/dev/null; then
  export CCACHE_DIR=${CCACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vramscope/ccache}
  export CCACHE_BASEDIR=$root CCACHE_NOHASHDIR=1 CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi

echo "== build (ASan + UBSan) =="
cmake -S . -B build-test -G Ninja -DCMAKE_BUILD_TYPE=Debug "${launcher[@]}" \
  -DCMAKE_CXX_FLAGS="-O1" -DVRAMSCOPE_SANITIZE=address,undefined \
  -DPython3_EXECUTABLE="$venv/bin/python" -DVRAMSCOPE_TORCH_PYTHON="$torch_venv/bin/python" -DVRAMSCOPE_JAX_PYTHON="$jax_venv/bin/python" \
  -DVRAMSCOPE_TF_PYTHON="$tf_venv/bin/python" \
  >/dev/null
cmake --build build-test

echo "== tests =="
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
# Two at a time: most tests drive one single-threaded process, and this machine has 2 cores; the
# longest start first (their COST in tests/CMakeLists.txt).
ctest --test-dir build-test --output-on-failure -j2

runs=${VRAMSCOPE_FUZZ_RUNS:-50000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# fuzz TITLE TARGET_PATH CORPUS_GLOB MAX_LEN [extra libFuzzer flags...]: a reproducible bounded run
# from a copy of the committed corpus (libFuzzer adds to the corpus it is given). FUZZ_RUNS, when
# set for one call, replaces $runs for that target.
# The resource contract (docs/design/resource-contract.md) holds under fuzzing: an input of at
# most 64 KiB may cost 64 MiB + 32 x 64 KiB = 66 MiB; ASan's shadow, quarantine and the fuzzer's
# own state add about 300 MiB (peaks measured: 67-396 MiB), so a run past 768 MiB is a finding.
# No single allocation may approach 128 MiB, and no input may take 20 s, even under ASan.
fuzz() {
  local title=$1 target=$2 seeds=$3 max_len=$4
  shift 4
  local target_runs=${FUZZ_RUNS:-$runs}
  echo "== fuzz: $title, $target_runs runs (ASan + UBSan) =="
  local corpus="$work/$(basename "$target")"
  mkdir -p "$corpus"
  cp $seeds "$corpus/"
  "$target" -seed="${VRAMSCOPE_FUZZ_SEED:-1}" -runs="$target_runs" -max_len="$max_len" \
    -rss_limit_mb=768 -malloc_limit_mb=128 -timeout=20 \
    -max_total_time=300 -print_final_stats=1 "$@" "$corpus" 2>&1 | tail -n 12
}
if [[ $runs != 0 ]]; then
  CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS="-O1" \
    "${launcher[@]}" \
    -DVRAMSCOPE_SANITIZE=address,undefined -DVRAMSCOPE_BUILD_FUZZERS=ON \
    -DVRAMSCOPE_BUILD_TESTS=OFF >/dev/null
  cmake --build build-fuzz --target pickle_reader_fuzzer replay_fuzzer kineto_source_fuzzer \
    memory_timeline_source_fuzzer predict_input_fuzzer native_trace_fuzzer capture_sidecar_fuzzer \
    viewer_report_fuzzer input_file_fuzzer oom_message_text_fuzzer xla_analysis_source_fuzzer \
    pprof_source_fuzzer xspace_source_fuzzer json_sax_fuzzer
  # Two lanes, one per core, each running its targets one after another (their seconds under
  # ASan on 2 cores, measured: lane 1 about 200, lane 2 about 215); each lane's output is
  # printed when both are done, and a finding in either fails the run.
  lane1() {
    fuzz "allocator model + replay (model invariants)" build-fuzz/fuzz/replay_fuzzer \
      "fuzz/replay/corpus/*" 2048
    fuzz "predict inputs (model descriptions, tracer streams) + simulation" \
      build-fuzz/fuzz/predict_input_fuzzer "fuzz/predict_input/corpus/*" 4096 \
      -dict=fuzz/predict_input/predict_input_fuzzer.dict
    fuzz "pickle reader + snapshot source" build-fuzz/fuzz/pickle_reader_fuzzer \
      "fuzz/pickle_reader/corpus/*.pickle" 8192
    fuzz "JSON reader against nlohmann's (differential)" build-fuzz/fuzz/json_sax_fuzzer \
      "fuzz/json_sax/corpus/*.json" 4096 -dict=fuzz/kineto_source/kineto_source_fuzzer.dict
    fuzz "profiler trace source + analysis" build-fuzz/fuzz/kineto_source_fuzzer \
      "fuzz/kineto_source/corpus/*.json" 4096 -dict=fuzz/kineto_source/kineto_source_fuzzer.dict
    fuzz "memory timeline source + analysis" \
      build-fuzz/fuzz/memory_timeline_source_fuzzer \
      "fuzz/memory_timeline_source/corpus/*.json" 4096 \
      -dict=fuzz/memory_timeline_source/memory_timeline_source_fuzzer.dict
    fuzz "pprof device memory profiles (JAX's) + analysis" build-fuzz/fuzz/pprof_source_fuzzer \
      "fuzz/pprof_source/corpus/*" 8192
    fuzz "profiler XSpace memory events (TensorFlow's .xplane.pb) + analysis" \
      build-fuzz/fuzz/xspace_source_fuzzer "fuzz/xspace_source/corpus/*" 8192 \
      -dict=fuzz/xspace_source/xspace_source_fuzzer.dict
    fuzz "any input file by content, plain or gzipped (streaming inflation, bombs of each kind)" \
      build-fuzz/fuzz/input_file_fuzzer "fuzz/input_file/corpus/*" 8192
  }
  lane2() {
    fuzz "out-of-memory messages in any text (vramscope explain: parse, explain, render)" \
      build-fuzz/fuzz/oom_message_text_fuzzer \
      "fuzz/oom_message_text/corpus/*" 8192 \
      -dict=fuzz/oom_message_text/oom_message_text_fuzzer.dict
    fuzz "native capture traces (.vstrace reader + source) + analysis" \
      build-fuzz/fuzz/native_trace_fuzzer \
      "fuzz/native_trace/corpus/*" 4096
    # Each run of this one opens and queries a SQLite database (about 250 runs/s under ASan): a
    # fifth of the runs keeps the whole suite within CI's half hour. Longer runs: see docs/guide/development.md.
    FUZZ_RUNS=$((runs / 5)) fuzz "report database behind 'vramscope view' (load + pyramid + blob)" \
      build-fuzz/fuzz/viewer_report_fuzzer "fuzz/viewer_report/corpus/*.sqlite" \
      65536 -dict=fuzz/viewer_report/viewer_report_fuzzer.dict
    fuzz "capture sidecar (parse + apply to traces) + analysis" \
      build-fuzz/fuzz/capture_sidecar_fuzzer \
      "fuzz/capture_sidecar/corpus/*" 8192 \
      -dict=fuzz/capture_sidecar/capture_sidecar_fuzzer.dict
    fuzz "XLA memory analysis of a jitted JAX step (vramscope.xla's JSON) + analysis" \
      build-fuzz/fuzz/xla_analysis_source_fuzzer "fuzz/xla_analysis_source/corpus/*" 16384 \
      -dict=fuzz/xla_analysis_source/xla_analysis_source_fuzzer.dict
  }
  lane1 >"$work/lane1.log" 2>&1 &
  lane1_pid=$!
  lane2 >"$work/lane2.log" 2>&1 &
  lane2_pid=$!
  lanes_ok=1
  wait "$lane1_pid" || lanes_ok=0
  wait "$lane2_pid" || lanes_ok=0
  cat "$work/lane1.log" "$work/lane2.log"
  if [[ $lanes_ok != 1 ]]; then
    echo "fuzz: a target found a crash, leak, timeout or memory overrun (its output above)" >&2
    exit 1
  fi
  echo "fuzz: no finding in $runs runs of each target ($((runs / 5)) of the report database's)"
fi
