#!/usr/bin/env bash
# Every check that needs a GPU, in ONE call of the team's device tool (see DEVELOPERS.md).
#
#   scripts/gpu_session.sh prepare [--build-dir DIR] [--bundle DIR] [--no-build]
#       HERE (a developer machine): builds a Release vramscope and libvramscope_inject.so (CUPTI),
#       and copies them with the shared libraries the device machine lacks (libfmt, libsqlite3,
#       ...: everything ldd names but glibc itself) into an ignored folder, .gpu-session/ by
#       default, that the device call carries. The binary's RUNPATH is set to its bundled libs,
#       so nothing is put on LD_LIBRARY_PATH (the training processes it starts never see them).
#
#   scripts/gpu_session.sh run --out DIR [--bundle DIR] [--python PY] [--budget S] [--only A,B]
#                              [--dry-run-cpu]
#       THERE (the GPU machine), from the repository root. Steps, in this order, each timed out
#       against what is left of --budget (default 540 s, under the tool's 600 s per call):
#         preflight    the bundle runs, the injection library loads into a Python with torch,
#                      the GPU is there, every script below exists
#         device_overheads  scripts/measure_device_overheads.py (goldens/<gpu>/device_overheads.json:
#                      the CUDA context, cuBLAS/cuBLASLt, cuDNN and NCCL memory outside torch's
#                      allocator, the idle device's; short, so first)
#         run_goldens  `vramscope run --phase-memory` on examples/training (scripts/
#                      capture_run_goldens.py: 10 trainings, the OOM case, JAX natively if present)
#         native       `vramscope run --native` on a PyTorch training (CUPTI found on the
#                      machine), and the report of its .vstrace
#         pytest_plugin  the pytest plugin's GPU path: tests/install/plugin_project/step_limits.py
#                      measured on the GPU (one step under its gpu_memory limit, one over)
#         techniques   scripts/capture_hf_goldens.py --suite techniques (goldens/<gpu>/techniques/:
#                      checkpointing every 2nd block, op-level selective checkpointing and chunked
#                      cross-entropy on a LLaMA-style decoder and GPT-2, in plain torch;
#                      scripts/accuracy.py compares them with `predict`'s flags once unpacked)
#         overhead     bench/capture_overhead.py (plain / stacks python / stacks all / on-oom / native only)
#         modern_goldens  scripts/capture_modern_goldens.py (goldens/<gpu>/modern/: torch.compile
#                      default and reduce-overhead, CUDA graphs with a shared and with separate
#                      pools, MemPool; placed before the steps whose goldens already exist)
#         goldens      scripts/capture_goldens.py (refreshes goldens/<gpu>/)
#         oom_golden   scripts/capture_oom_golden.py
#         hf_goldens   scripts/capture_hf_goldens.py (goldens/<gpu>/hf/)
#       A step that does not fit in the time left is skipped and said so; --only runs a subset
#       (a second call finishes what a first one had no time for). Into DIR (the tool's $OUT) it
#       writes four files: gpu-session.tar.gz (goldens/<gpu>/... and the logs), results.json and
#       results.md (the GPU's metadata and every step's outcome) and session.log.
#       --dry-run-cpu runs the same plumbing on a machine without a GPU: each step's command with
#       the CPU stand-in the repository has (the bootstrap's VRAMSCOPE_CAPTURE_CPU mode, the
#       scripts' --dry-run-cpu / --cpu), on a few cases; a step with no stand-in is printed, not
#       run. Nothing it writes is ground truth, and no step of it is ever reported as "ok".
#
#   scripts/gpu_session.sh unpack DIR [--into REPO]
#       HERE, after the call: DIR is where the tool put the files (files_at). Puts goldens/<gpu>/
#       (with gpu_session.json and gpu_session.md) into the repository (or REPO), for
#       `git add goldens/<gpu>`; a later call on the same GPU model adds to an earlier one's results
#       (scripts/gpu_session_results.py writes and merges them).
#
# Exit status of run: 0 every selected step ran and passed; 1 a step failed (or the bundle is
# missing); 2 none failed but some were skipped (out of time, or not selected with --only).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STEPS=(preflight device_overheads jax_goldens run_goldens native pytest_plugin techniques overhead
  modern_goldens goldens oom_golden hf_goldens)

die() {
  echo "gpu_session: $*" >&2
  exit 1
}

# ---------------------------------------------------------------------------------------------
# prepare (here)
# ---------------------------------------------------------------------------------------------

# Libraries every Linux the device may run has (glibc's own); everything else ldd names goes
# into the bundle.
is_system_lib() {
  case "$1" in
    linux-vdso.so* | ld-linux*.so* | libc.so* | libm.so* | libpthread.so* | libdl.so* | librt.so* | \
      libresolv.so* | libutil.so*) return 0 ;;
  esac
  return 1
}

cmd_prepare() {
  local build=$ROOT/build-gpu bundle=$ROOT/.gpu-session no_build=0
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --build-dir) build=$2; shift 2 ;;
      --bundle) bundle=$2; shift 2 ;;
      --no-build) no_build=1; shift ;;
      *) die "prepare: unknown option $1" ;;
    esac
  done
  build=$(realpath -m "$build")
  bundle=$(realpath -m "$bundle")
  cd "$ROOT"
  command -v patchelf >/dev/null ||
    die "prepare needs patchelf (to point the binary at its bundled libraries): apt-get install patchelf"
  if [[ $no_build == 0 ]]; then
    echo "== building a Release vramscope and libvramscope_inject.so in $build =="
    if [[ ! -f $build/CMakeCache.txt ]]; then  # an existing build keeps its own settings
      cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMSCOPE_BUILD_TESTS=OFF \
        -DVRAMSCOPE_BUILD_BENCH=OFF -DVRAMSCOPE_NATIVE_CAPTURE=ON >/dev/null ||
        die "prepare: configuring $build failed (VRAMSCOPE_NATIVE_CAPTURE=ON needs CUPTI: the CUDA toolkit)"
    fi
    cmake --build "$build" -j"${JOBS:-1}" --target vramscope vramscope_inject
  fi
  local bin=$build/vramscope inject=$build/libvramscope_inject.so
  [[ -x $bin ]] || die "prepare: no $bin (build it, or drop --no-build)"
  [[ -f $inject ]] || die "prepare: no $inject: the native capture library was not built (CUPTI missing?); --native cannot be checked without it"
  local build_type
  build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
  [[ $build_type == Release ]] ||
    echo "gpu_session: warning: $build is a '${build_type:-unknown}' build, not Release: its timings are not the product's" >&2

  rm -rf "$bundle"
  mkdir -p "$bundle/bin" "$bundle/lib"
  cp "$bin" "$bundle/bin/vramscope"
  cp "$inject" "$bundle/bin/libvramscope_inject.so"
  local lib name path
  while read -r name path; do
    is_system_lib "$name" && continue
    [[ -f $path ]] || die "prepare: ldd names $name but it is not found ($path)"
    cp -L "$path" "$bundle/lib/$name"
  done < <(ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }')
  ldd "$bin" | grep -q "not found" && die "prepare: $bin has unresolved libraries: $(ldd "$bin" | grep 'not found')"
  patchelf --set-rpath '$ORIGIN/../lib' "$bundle/bin/vramscope"
  # The native recorder's fast unwinder (src/native_capture/unwinder.h), which it loads with
  # dlopen by soname: carried, and found through the library's run path, so that the device
  # measures the stacks users get where libunwind8 is installed.
  local unwind
  # awk reads to the end: an early exit would SIGPIPE ldconfig, which pipefail makes fatal.
  unwind=$(/sbin/ldconfig -p 2>/dev/null | awk '$1 == "libunwind.so.8" && !found { print $NF; found = 1 }')
  if [[ -n $unwind && -f $unwind ]]; then
    cp -L "$unwind" "$bundle/lib/libunwind.so.8"
    patchelf --set-rpath '$ORIGIN/../lib' "$bundle/bin/libvramscope_inject.so"
  else
    echo "gpu_session: warning: no libunwind.so.8 here (apt-get install libunwind8): --native stacks on the device will use glibc's backtrace()" >&2
  fi
  # Only the bundle must resolve what is not glibc: check it with nothing else on the path.
  if env -u LD_LIBRARY_PATH ldd "$bundle/bin/vramscope" | awk '$2 == "=>"' | while read -r name _ path _; do
    is_system_lib "$name" || [[ $(realpath "$path") == "$(realpath "$bundle/lib")/$name" ]] ||
      echo "$name => $path"
  done | grep .; then
    die "prepare: the bundled binary resolves the libraries above outside $bundle/lib"
  fi
  "$bundle/bin/vramscope" --version >/dev/null || die "prepare: the bundled binary does not run"
  {
    echo "vramscope GPU-session bundle (scripts/gpu_session.sh prepare)"
    echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
    echo "build: $build ($build_type)"
    echo "version: $("$bundle/bin/vramscope" --version)"
    echo "glibc needed: $(objdump -T "$bundle/bin/vramscope" "$bundle/bin/libvramscope_inject.so" 2>/dev/null |
      grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n 1)"
    echo "files:"
    (cd "$bundle" && find bin lib -type f | sort | xargs sha256sum)
  } >"$bundle/MANIFEST.txt"
  local bytes
  bytes=$(du -sb "$bundle" | cut -f1)
  # A Release bundle must fit what the device call carries; a Debug or sanitizer build (the test
  # suite's) is bundled to check the script, never sent to the device, and is far bigger.
  if ((bytes >= 48 * 1024 * 1024)); then
    [[ $build_type != Release ]] ||
      die "prepare: $bundle is $bytes bytes; with the working tree it must stay under the device tool's 64 MiB"
    echo "gpu_session: warning: $bundle is $bytes bytes, too big for the device call (the device tool carries 64 MiB): bundle a Release build to send it" >&2
  fi
  echo "bundle ready: $bundle ($((bytes / 1024)) KiB)"
  cat "$bundle/MANIFEST.txt"
  if ! git check-ignore -q "$bundle/MANIFEST.txt" 2>/dev/null; then
    echo "gpu_session: warning: $bundle is not ignored by git; the device call must carry it (add it to .git/info/exclude)" >&2
  fi
  local carried=${bundle#"$ROOT"/}
  [[ $carried == /* ]] && echo "gpu_session: warning: $bundle is outside the repository: the device tool carries only paths inside it" >&2
  cat <<EOF

Now, in ONE call of the device tool (from the checkout the session was started in):
  run(command="scripts/gpu_session.sh run --out \"\$OUT\"", carry=["$carried"], timeout_s=600)
then here: scripts/gpu_session.sh unpack <files_at>
EOF
}

# ---------------------------------------------------------------------------------------------
# run (there)
# ---------------------------------------------------------------------------------------------

# Each step is a function run in a child bash under `timeout`; these are what they read.
export GS_ROOT GS_BIN GS_INJECT GS_PY GS_STAGE GS_WORK GS_SLUG GS_DRY

# A line on the terminal and in $GS_LOG (session.log, one of the files that come back).
log() {
  local line
  line="[$(date -u +%H:%M:%S)] $*"
  echo "$line"
  [[ -n ${GS_LOG:-} ]] && echo "$line" >>"$GS_LOG"
  return 0
}

# What a dry run does instead of a step that has no CPU stand-in.
not_run() {
  echo "DRY RUN, not run (needs a GPU): $*"
  exit 99
}
export -f not_run

step_preflight() {
  set -euo pipefail
  cd "$GS_ROOT"
  local missing=0 f
  for f in scripts/capture_run_goldens.py scripts/capture_goldens.py scripts/capture_oom_golden.py \
    scripts/capture_hf_goldens.py scripts/capture_modern_goldens.py bench/capture_overhead.py \
    examples/training/hf_models.py \
    scripts/measure_device_overheads.py scripts/capture_jax_goldens.py scripts/golden_capture/driver.py \
    examples/training/train.py; do
    [[ -f $f ]] || { echo "missing: $f"; missing=1; }
  done
  [[ $missing == 0 ]] || { echo "the checkout lacks the scripts above"; exit 1; }
  echo "== the bundle's binary =="
  if ldd "$GS_BIN" | grep "not found"; then
    echo "the bundled vramscope misses the libraries above: prepare the bundle again"
    exit 1
  fi
  "$GS_BIN" --version
  "$GS_BIN" run --help | grep -q -- "--native" || { echo "this vramscope has no 'run --native'"; exit 1; }
  echo "== Python =="
  "$GS_PY" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)'
  local asan
  asan=$(ldd "$GS_INJECT" | awk '/libasan/ { print $3 }')
  if [[ -n $asan ]]; then
    # A sanitizer build (the tests' bundle): its library loads only after its runtime, and a
    # Python with torch under that runtime is no check of the product. The Release bundle a GPU
    # session carries has no such runtime and takes the check below.
    echo "== the injection library loads (a sanitizer build: with $asan preloaded, without torch) =="
    LD_PRELOAD=$asan ASAN_OPTIONS=detect_leaks=0 "$GS_PY" -c 'import ctypes, sys; lib = ctypes.CDLL(sys.argv[1]); lib.InitializeInjection; print("ok:", sys.argv[1])' "$GS_INJECT"
  else
    echo "== the injection library loads into a process with torch =="
    "$GS_PY" -c 'import ctypes, sys, torch; lib = ctypes.CDLL(sys.argv[1]); lib.InitializeInjection; print("ok:", sys.argv[1])' "$GS_INJECT"
  fi
  if [[ $GS_DRY == 1 ]]; then
    echo "dry run: no GPU, CUPTI or nvidia-smi needed"
    return 0
  fi
  echo "== GPU =="
  nvidia-smi -L
  "$GS_PY" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"; print(torch.cuda.get_device_name(0))'
  echo "libcupti (for --native): ${VRAMSCOPE_CUPTI_LIB:-not found: the native step will fail}"
}

step_device_overheads() {
  set -euo pipefail
  cd "$GS_ROOT"
  # Five cases one after the other, each inside the step's own time-out (GS_LIMIT).
  local limit=${GS_LIMIT:-120}
  local per_case=$(((limit - 10) / 5))
  per_case=$((per_case > 90 ? 90 : per_case < 10 ? 10 : per_case))
  local out="$GS_STAGE/goldens/$GS_SLUG/device_overheads.json"
  if [[ $GS_DRY == 1 ]]; then
    "$GS_PY" scripts/measure_device_overheads.py --out "$out" --timeout "$per_case" --dry-run-cpu
  else
    "$GS_PY" scripts/measure_device_overheads.py --out "$out" --timeout "$per_case"
  fi
}

step_run_goldens() {
  set -euo pipefail
  cd "$GS_ROOT"
  if [[ $GS_DRY == 1 ]]; then
    "$GS_PY" scripts/capture_run_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG/run" \
      --vramscope "$GS_BIN" --python "$GS_PY" --dry-run-cpu \
      --only linear_sgd_fp32 oom_gpt_fp32 ranks2_ddp_gpt_adamw_fp32 ranks2_tp_llama_adamw_fp32
  else
    # VRAMSCOPE_RUN_GOLDEN_CASES (space-separated case names) reruns only those: a second call
    # that redoes the cases the first one failed.
    local only=()
    [[ -n ${VRAMSCOPE_RUN_GOLDEN_CASES:-} ]] && read -ra only <<<"--only $VRAMSCOPE_RUN_GOLDEN_CASES"
    "$GS_PY" scripts/capture_run_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG/run" \
      --vramscope "$GS_BIN" --python "$GS_PY" "${only[@]}"
  fi
}

step_native() {
  set -euo pipefail
  cd "$GS_ROOT"
  local cap="$GS_WORK/native"
  local run=(
    "$GS_BIN" run --native --steps 3 --stacks python --phase-memory --no-report --force -o "$GS_WORK/native"
    -- "$GS_PY" examples/training/train.py --model mlp --optimizer adam --steps 3 --seed 0)
  [[ $GS_DRY == 1 ]] && not_run "${run[*]} --device cuda; then $GS_BIN report <capture>.vstrace --json"
  [[ -n ${VRAMSCOPE_CUPTI_LIB:-} && -f ${VRAMSCOPE_CUPTI_LIB:-} ]] ||
    { echo "no libcupti.so found (looked in /usr/local/cuda*, ldconfig and the Python's nvidia packages)"; exit 1; }
  echo "libcupti: $VRAMSCOPE_CUPTI_LIB"
  PYTHONUNBUFFERED=1 "${run[@]}" --device cuda
  local traces=("$cap"/*.vstrace)
  [[ -f ${traces[0]} ]] || { echo "no .vstrace written in $cap: $(ls "$cap")"; exit 1; }
  "$GS_BIN" report "${traces[0]}" --json --summary-only >"$GS_WORK/native_report.json"
  "$GS_PY" - "$GS_WORK/native_report.json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
src = doc["source"]
assert "native" in src["format"].lower(), src["format"]
assert src["events"] > 0, "the native trace holds no event"
peak = max(d["peak_allocated"]["bytes"] for d in doc["devices"]) if doc["devices"] else 0
assert peak > 0, "no driver allocation recorded"
print(f"native trace: {src['events']} events, peak driver allocation {peak} B; notes: {doc['notes']}")
EOF
  local dest="$GS_STAGE/goldens/$GS_SLUG/run"
  mkdir -p "$dest"
  cp "${traces[0]}" "$dest/native_mlp_adam_fp32.vstrace"
  cp "$GS_WORK/native_report.json" "$dest/native_mlp_adam_fp32.report.json"
  local sidecars=("$cap"/*.sidecar.json)
  [[ -f ${sidecars[0]} ]] && cp "${sidecars[0]}" "$dest/native_mlp_adam_fp32.sidecar.json"
  return 0
}

step_overhead() {
  set -euo pipefail
  cd "$GS_ROOT"
  local out="$GS_STAGE/goldens/$GS_SLUG/capture_overhead.txt"
  mkdir -p "$(dirname "$out")"
  if [[ $GS_DRY == 1 ]]; then
    "$GS_PY" bench/capture_overhead.py --vramscope "$GS_BIN" --python "$GS_PY" --cpu \
      --model linear --optimizer sgd --steps 3 --runs 1 | tee "$out"
  else
    "$GS_PY" bench/capture_overhead.py --vramscope "$GS_BIN" --python "$GS_PY" \
      --steps 50 --runs 2 | tee "$out"
  fi
}

step_modern_goldens() {
  set -euo pipefail
  cd "$GS_ROOT"
  # Each case's time-out fits inside the step's (GS_LIMIT), so a case that is too slow is
  # stopped by the driver, which still writes metadata.json for the cases that finished.
  local limit=${GS_LIMIT:-240}
  local per_case=$((limit - 20 < 180 ? limit - 20 : 180))
  per_case=$((per_case > 30 ? per_case : 30))
  if [[ $GS_DRY == 1 ]]; then
    # One compiled case (reduce-overhead: the compile path and the per-step cudagraph mark) on
    # a small MLP (Inductor's CPU backend compiles the GPT for minutes on a few cores), and the
    # graph and pool cases, which run their stages where CUDA would.
    "$GS_PY" scripts/capture_modern_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG/modern" \
      --dry-run-cpu --compile-model mlp --cases compile_reduce_overhead,graphs_shared_pool,mempool \
      --jobs 2 --timeout "$per_case"
  else
    "$GS_PY" scripts/capture_modern_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG/modern" --jobs 3 \
      --timeout "$per_case"
  fi
}

step_jax_goldens() {
  set -euo pipefail
  cd "$GS_ROOT"
  local limit=${GS_LIMIT:-150}
  local per_case=$(((limit - 10) / 4 > 20 ? (limit - 10) / 4 : 20))
  if [[ $GS_DRY == 1 ]]; then
    "$GS_PY" -c 'import jax' 2>/dev/null ||
      not_run "$GS_PY scripts/capture_jax_goldens.py --dry-run-cpu (this Python has no JAX)"
    "$GS_PY" scripts/capture_jax_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG/jax" --dry-run-cpu \
      --timeout "$per_case"
  else
    "$GS_PY" scripts/capture_jax_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG/jax" --timeout "$per_case"
  fi
}

# The pytest plugin's measured path (python/vramscope/pytest_plugin.py): the same two tests the
# CPU predicts in tests/install/test_pytest_plugin.py, now measured; its output is kept. The dry
# run is the CPU's prediction (the tracer), through the same plumbing.
step_pytest_plugin() {
  set -euo pipefail
  cd "$GS_ROOT"
  local out="$GS_STAGE/goldens/$GS_SLUG/pytest_plugin.txt" rc=0
  mkdir -p "$(dirname "$out")"
  VRAMSCOPE_BIN=$GS_BIN PYTHONPATH=$GS_ROOT/python "$GS_PY" -m pytest -q -p no:cacheprovider \
    -p vramscope.pytest_plugin tests/install/plugin_project/step_limits.py >"$out" 2>&1 || rc=$?
  tail -n 5 "$out"
  local how="measured on"
  [[ $GS_DRY == 1 ]] && how="predicted without a GPU"
  # One test under its limit passes, one over it fails, saying how the step was sized.
  [[ $rc == 1 ]] && grep -q "1 failed, 1 passed" "$out" && grep -q "$how" "$out"
}

# Issue 40's ground truth: the memory-saving techniques `predict` models, measured on the GPU in
# plain torch (examples/training/hf_models.py's TECHNIQUE_SUITE), each beside its baseline of the
# hf suite. The dry run trains one of them on the CPU at tiny sizes.
step_techniques() {
  set -euo pipefail
  cd "$GS_ROOT"
  local out="$GS_STAGE/goldens/$GS_SLUG/techniques"
  if [[ $GS_DRY == 1 ]]; then
    "$GS_PY" scripts/capture_hf_goldens.py --suite techniques --out "$out" --dry-run-cpu \
      --cases llama_b4s1024_bf16_ckptops --jobs 1
  else
    "$GS_PY" scripts/capture_hf_goldens.py --suite techniques --out "$out" --jobs 3
  fi
}

step_goldens() {
  set -euo pipefail
  cd "$GS_ROOT"
  if [[ $GS_DRY == 1 ]]; then
    "$GS_PY" scripts/capture_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG" --dry-run-cpu \
      --cases linear_sgd_fp32 --jobs 1
  else
    "$GS_PY" scripts/capture_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG" --jobs 4
  fi
}

step_oom_golden() {
  set -euo pipefail
  cd "$GS_ROOT"
  local cmd=("$GS_PY" scripts/capture_oom_golden.py --out "$GS_STAGE/goldens/$GS_SLUG")
  [[ $GS_DRY == 1 ]] && not_run "${cmd[*]} (the script has no CPU mode)"
  "${cmd[@]}"
}

step_hf_goldens() {
  set -euo pipefail
  cd "$GS_ROOT"
  if [[ $GS_DRY == 1 ]]; then
    "$GS_PY" scripts/capture_hf_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG/hf" --dry-run-cpu \
      --cases gpt2_b8s512_fp32 --jobs 1
  else
    "$GS_PY" scripts/capture_hf_goldens.py --out "$GS_STAGE/goldens/$GS_SLUG/hf" --jobs 3
  fi
}
export -f step_preflight step_device_overheads step_jax_goldens step_run_goldens step_native step_overhead step_modern_goldens \
  step_goldens step_oom_golden step_hf_goldens step_pytest_plugin step_techniques

# Seconds a step needs at least (else it is skipped) and at most (its own time-out).
step_limits() {
  case "$1" in
    preflight) echo "5 90" ;;
    # Five fresh Pythons that initialize CUDA (a NCCL communicator in one): expected to take
    # well under a minute on the device (not yet measured there); 60 s so that a case is never
    # cut short by the step's own time-out.
    device_overheads) echo "60 120" ;;
    # Two small JAX trainings and two out-of-memory messages, each a fresh Python: 30 s in all on
    # the H200 (2026-11-28).
    jax_goldens) echo "40 150" ;;
    # Measured on the H200 (2026-11-28): the whole suite does not finish in 300 s (its 13 torchrun
    # layouts take 10-40 s each); what finished is kept (metadata.json is written after every
    # case) and VRAMSCOPE_RUN_GOLDEN_CASES reruns the rest in a second call.
    run_goldens) echo "60 300" ;;
    native) echo "30 120" ;;
    # Two training steps of a 2-layer MLP, each measured in the pytest process: seconds on a
    # GPU (not yet measured there); on the CPU the tracer's two predictions take about 30 s.
    pytest_plugin) echo "20 90" ;;
    # Six HF trainings of 3 steps, 3 at a time (the hf suite's cases take seconds each on the
    # H100); on the CPU the one tiny case takes about 80 s on 2 shared cores.
    techniques) echo "60 200" ;;
    overhead) echo "60 200" ;;
    # Two compiled GPT trainings (cold Inductor compiles: expected to take about a minute each
    # on 16 cores, not yet measured on the device: its first gpu_session.md will say) run beside
    # three cases of seconds. 90 s lets the fast cases finish; 240 s holds a case that hangs to
    # its own 180 s time-out and leaves the driver time to write metadata.json.
    modern_goldens) echo "90 240" ;;
    goldens) echo "60 240" ;;
    oom_golden) echo "20 90" ;;
    hf_goldens) echo "60 300" ;;
  esac
}

# The libcupti the native library and NVTX should use, on the device.
find_cupti() {
  local c
  for c in /usr/local/cuda/extras/CUPTI/lib64/libcupti.so* /usr/local/cuda*/extras/CUPTI/lib64/libcupti.so* \
    /usr/local/cuda/lib64/libcupti.so* /usr/local/cuda*/lib64/libcupti.so* /usr/local/cuda*/lib/libcupti.so* \
    /usr/local/cuda*/targets/x86_64-linux/lib/libcupti.so*; do
    [[ -f $c ]] && { echo "$c"; return; }
  done
  c=$(ldconfig -p 2>/dev/null | awk '/libcupti\.so/ && !found { print $NF; found = 1 }')
  [[ -n $c ]] && { echo "$c"; return; }
  "$GS_PY" - 2>/dev/null <<'EOF' || true
import glob, os, site
for base in site.getsitepackages():
    for p in sorted(glob.glob(os.path.join(base, "nvidia", "*cupti*", "lib", "libcupti.so*"))):
        print(p)
        raise SystemExit
EOF
}

# The GPU's metadata (nvidia-smi, torch) as JSON on stdout; the folder name goldens/<gpu> too.
gpu_facts() {
  "$GS_PY" - "$GS_DRY" "$GS_BIN" <<'EOF'
import json, platform, re, subprocess, sys
dry, binary = sys.argv[1] == "1", sys.argv[2]
facts = {"python": platform.python_version(), "platform": platform.platform()}
def version(module):
    try:
        return __import__(module).__version__
    except Exception as e:  # noqa: BLE001 - recorded, not fatal
        return None
for module in ("torch", "transformers", "lightning", "jax"):
    facts[module] = version(module)
try:
    import torch
    facts["torch_cuda"] = torch.version.cuda
except Exception:  # noqa: BLE001
    pass
facts["vramscope"] = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout.strip()
if dry:
    facts.update({"name": "none (dry run on the CPU)", "driver_version": None, "slug": "dry-run-cpu"})
else:
    q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,compute_cap",
                        "--format=csv,noheader"], capture_output=True, text=True, check=True)
    name, driver, memory, cc = [x.strip() for x in q.stdout.splitlines()[0].split(",")]
    facts.update({"name": name, "driver_version": driver, "memory_total": memory,
                  "compute_capability": cc})
    m = re.search(r"\b([A-Za-z]+\d+[A-Za-z]*)\b", name.replace("NVIDIA", ""))
    facts["slug"] = (m.group(1) if m else re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")).lower()
    try:
        facts["cuda_driver"] = subprocess.run(["nvidia-smi"], capture_output=True, text=True).stdout \
            .split("CUDA Version:")[1].split()[0]
    except Exception:  # noqa: BLE001
        facts["cuda_driver"] = None
print(json.dumps(facts))
EOF
}

cmd_run() {
  local out=${OUT:-} bundle=$ROOT/.gpu-session budget=540 only="" dry=0
  GS_PY=python3
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --out) out=$2; shift 2 ;;
      --bundle) bundle=$2; shift 2 ;;
      --python) GS_PY=$2; shift 2 ;;
      --budget) budget=$2; shift 2 ;;
      --only) only=$2; shift 2 ;;
      --dry-run-cpu) dry=1; shift ;;
      *) die "run: unknown option $1" ;;
    esac
  done
  [[ -n $out ]] || die "run: --out DIR is required (in the device call: --out \"\$OUT\")"
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  [[ $bundle == /* ]] || bundle=$(realpath -m "$bundle")
  local s
  for s in ${only//,/ }; do
    [[ " ${STEPS[*]} " == *" $s "* ]] || die "run: unknown step '$s' in --only (steps: ${STEPS[*]})"
  done
  cd "$ROOT"
  [[ -d $bundle ]] || die "run: no bundle at $bundle: run 'scripts/gpu_session.sh prepare' on a developer machine and carry $bundle in the device call"
  bundle=$(cd "$bundle" && pwd)
  GS_ROOT=$ROOT GS_BIN=$bundle/bin/vramscope GS_INJECT=$bundle/bin/libvramscope_inject.so GS_DRY=$dry
  [[ -x $GS_BIN ]] || die "run: the bundle lacks bin/vramscope: prepare it again"
  local start deadline reserve=25
  start=$(date +%s)
  deadline=$((start + budget))
  GS_STAGE=$(mktemp -d "${TMPDIR:-/tmp}/vramscope-gpu-session.XXXXXX")
  GS_WORK=$GS_STAGE/work
  mkdir -p "$GS_STAGE/logs" "$GS_WORK"
  GS_LOG=$out/session.log
  : >"$GS_LOG"
  log "gpu_session run: budget ${budget}s, bundle $bundle$([[ $dry == 1 ]] && echo ', DRY RUN on the CPU')"
  [[ -f $bundle/MANIFEST.txt ]] && log "$(head -n 5 "$bundle/MANIFEST.txt" | sed 's/^/  /')"
  if [[ $dry == 0 ]]; then
    VRAMSCOPE_CUPTI_LIB=$(find_cupti)
    export VRAMSCOPE_CUPTI_LIB
  fi
  GS_SLUG=unknown
  local results=$GS_STAGE/steps.tsv
  : >"$results"
  local preflight=ok name min max left limit t0 rc status
  for name in "${STEPS[@]}"; do
    read -r min max < <(step_limits "$name")
    if [[ -n $only && $name != preflight && ",$only," != *",$name,"* ]]; then
      printf '%s\tskipped: not selected (--only %s)\t0\n' "$name" "$only" >>"$results"
      continue
    fi
    if [[ $preflight != ok ]]; then
      printf '%s\tskipped: preflight %s\t0\n' "$name" "$preflight" >>"$results"
      continue
    fi
    left=$((deadline - $(date +%s) - reserve))
    if ((left < min)); then
      printf '%s\tskipped: not enough time left (needs at least %ss, %ss left)\t0\n' "$name" "$min" \
        "$((left > 0 ? left : 0))" >>"$results"
      log "$name: skipped, not enough time left"
      [[ $name == preflight ]] && preflight="did not run"
      continue
    fi
    limit=$((left < max ? left : max))
    log "$name: running (time-out ${limit}s)"
    t0=$(date +%s)
    set +e
    # GS_LIMIT: the step's own time-out, for a step that sizes its cases' time-outs by it.
    GS_LIMIT=$limit timeout --kill-after=10 "$limit" bash -c "step_$name" >"$GS_STAGE/logs/$name.log" 2>&1
    rc=$?
    set -e
    local took=$(($(date +%s) - t0))
    if [[ $rc == 0 && $dry == 1 ]]; then
      status="dry-run ok: the CPU stand-in ran"
    elif [[ $rc == 0 ]]; then
      status=ok
    elif [[ $rc == 99 && $dry == 1 ]]; then
      status="dry-run: printed, not run (needs a GPU)"
    elif [[ $rc == 124 || $rc == 137 ]]; then
      status="failed: timed out after ${limit}s"
    else
      status="failed: exit $rc"
    fi
    printf '%s\t%s\t%s\n' "$name" "$status" "$took" >>"$results"
    log "$name: $status (${took}s)"
    if [[ $status == failed* ]]; then
      log "$(tail -n 15 "$GS_STAGE/logs/$name.log" | sed 's/^/    /')"
    fi
    if [[ $name == preflight ]]; then
      [[ $status == failed* ]] && preflight=failed
      local facts
      if facts=$(gpu_facts 2>"$GS_STAGE/logs/gpu_facts.log"); then
        echo "$facts" >"$GS_STAGE/gpu.json"
        GS_SLUG=$("$GS_PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))["slug"])' "$GS_STAGE/gpu.json")
      else
        echo '{}' >"$GS_STAGE/gpu.json"
        preflight=failed
        log "preflight: the GPU's metadata could not be read: $(tail -n 3 "$GS_STAGE/logs/gpu_facts.log")"
        sed -i '$ s/\tok\t/\tfailed: no GPU metadata\t/' "$results"
      fi
      log "GPU: $(cat "$GS_STAGE/gpu.json")"
    fi
  done

  # Results: JSON and markdown, beside the goldens and in $OUT; everything in one tarball.
  mkdir -p "$GS_STAGE/goldens/$GS_SLUG"
  "$GS_PY" "$ROOT/scripts/gpu_session_results.py" write "$GS_STAGE" "$GS_SLUG" "$dry" "$budget" \
    "$(($(date +%s) - start))" "$bundle/MANIFEST.txt"
  cp "$GS_STAGE/results.json" "$GS_STAGE/goldens/$GS_SLUG/gpu_session.json"
  cp "$GS_STAGE/results.md" "$GS_STAGE/goldens/$GS_SLUG/gpu_session.md"
  # Logs go in whole up to 256 KiB each (their ends).
  local l
  for l in "$GS_STAGE"/logs/*.log; do
    [[ -f $l ]] && [[ $(stat -c %s "$l") -gt 262144 ]] && { tail -c 262144 "$l" >"$l.tail" && mv "$l.tail" "$l"; }
  done
  tar -czf "$out/gpu-session.tar.gz" -C "$GS_STAGE" goldens logs results.json results.md
  cp "$GS_STAGE/results.json" "$GS_STAGE/results.md" "$out/"
  local size
  size=$(stat -c %s "$out/gpu-session.tar.gz")
  if ((size > 16 * 1024 * 1024)); then
    log "gpu-session.tar.gz is $size bytes, over the device tool's 16 MiB per file: it will not come back"
  fi
  local failed skipped
  failed=$(cut -f2 "$results" | grep -c '^failed' || true)
  skipped=$(cut -f2 "$results" | grep -c '^skipped' || true)
  rm -rf "$GS_STAGE"
  log "done in $(($(date +%s) - start))s: $failed failed, $skipped skipped; $out holds $(cd "$out" && ls | tr '\n' ' ')"
  log "$(sed -n '/^| step/,$p' "$out/results.md")"
  ((failed == 0)) || return 1
  ((skipped == 0)) || return 2
  return 0
}

# ---------------------------------------------------------------------------------------------
# unpack (here, after the call)
# ---------------------------------------------------------------------------------------------

cmd_unpack() {
  local dir="" into=$ROOT
  while [[ $# -gt 0 ]]; do
    case "$1" in
      --into) into=$2; shift 2 ;;
      *) [[ -z $dir ]] || die "unpack: one folder only"; dir=$1; shift ;;
    esac
  done
  [[ -n $dir ]] || die "unpack DIR [--into REPO]: DIR is the folder the device tool put the files in (files_at)"
  [[ -f $dir/gpu-session.tar.gz ]] || die "unpack: no gpu-session.tar.gz in $dir"
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  tar -xzf "$dir/gpu-session.tar.gz" -C "$tmp"
  python3 - "$tmp/results.json" <<'EOF' || die "unpack: this is a dry run's output; nothing in it is ground truth, so nothing goes into goldens/"
import json, sys
sys.exit(1 if json.load(open(sys.argv[1]))["dry_run"] else 0)
EOF
  python3 - "$tmp/results.json" <<'EOF' || die "unpack: no step of this session ran on a GPU (its preflight failed, see results.md); nothing goes into goldens/"
import json, sys
doc = json.load(open(sys.argv[1]))
sys.exit(0 if doc["gpu"].get("slug") and any(s["status"] == "ok" for s in doc["steps"]) else 1)
EOF
  local slug
  slug=$(ls "$tmp/goldens")
  [[ -n $slug && $(echo "$slug" | wc -l) == 1 ]] || die "unpack: expected one goldens/<gpu> folder, found: $slug"
  mkdir -p "$into/goldens/$slug"
  # A suite's metadata.json from a call that reran some cases (VRAMSCOPE_RUN_GOLDEN_CASES,
  # --cases) keeps the earlier call's other cases.
  python3 - "$tmp/goldens/$slug" "$into/goldens/$slug" <<'EOF'
import json, pathlib, sys
new_root, old_root = map(pathlib.Path, sys.argv[1:])
for new_path in new_root.rglob("metadata.json"):
    old_path = old_root / new_path.relative_to(new_root)
    try:
        old, new = json.loads(old_path.read_text()), json.loads(new_path.read_text())
    except (OSError, ValueError):
        continue
    if isinstance(old.get("cases"), dict) and isinstance(new.get("cases"), dict) \
            and old.get("format") == new.get("format") and not old.get("dry_run_cpu"):
        new["cases"] = {**old["cases"], **new["cases"]}
        new_path.write_text(json.dumps(new, indent=1) + "\n")
EOF
  (cd "$tmp/goldens/$slug" && find . -type f ! -name 'gpu_session.*' -print0 |
    xargs -0 -I{} cp --parents {} "$into/goldens/$slug/")
  # A second call on the same GPU model (--only: what the first had no time for, or a rerun) adds to the
  # first's results rather than replacing them.
  python3 "$ROOT/scripts/gpu_session_results.py" merge "$into/goldens/$slug/gpu_session.json" \
    "$tmp/results.json" "$into/goldens/$slug"
  echo "goldens/$slug updated from $dir:"
  sed -n '/^| step/,$p' "$into/goldens/$slug/gpu_session.md"
  (cd "$into" && git status --short "goldens/$slug" 2>/dev/null | head -n 40) || true
  echo "commit with: git add goldens/$slug && git commit -m 'goldens/$slug: GPU session <date> (<what changed>)'"
}

case "${1:-}" in
  prepare) shift; cmd_prepare "$@" ;;
  run) shift; cmd_run "$@" ;;
  unpack) shift; cmd_unpack "$@" ;;
  *)
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
