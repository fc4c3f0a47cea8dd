#!/usr/bin/env bash
# Installs the Debian packages vramscope needs, only those missing. Used by quickstart.sh and
# test.sh; safe to run again. Needs root or sudo when something is missing.
set -euo pipefail

# libunwind8: the native capture's stacks (`run --native`, loaded at run time; without it they
# come from glibc's backtrace(), about 20 times slower).
packages=(cmake ninja-build g++ pkg-config libsqlite3-dev libcli11-dev nlohmann-json3-dev
          libfmt-dev libabsl-dev zlib1g-dev libdeflate-dev sqlite3 libunwind8 libprotobuf-dev protobuf-compiler)
if [[ "${1:-}" == "--test" ]]; then
  # Tests: GoogleTest, clang's libFuzzer and sanitizer runtimes, Python for the end-to-end suite,
  # Node.js for the viewer's unit tests, Chromium for its browser tests and patchelf for
  # scripts/gpu_session.sh's bundle (tests/gpu_session), ccache so that the suite's two sanitizer
  # builds reuse what an earlier run compiled.
  packages+=(libgtest-dev libgmock-dev clang libclang-rt-14-dev python3 python3-venv nodejs
             chromium patchelf ccache)
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A Python from elsewhere (pyenv, conda) with venv support stands in for Debian's.
if command -v python3 >/dev/null && python3 -c 'import venv, ensurepip' 2>/dev/null; then
  kept=()
  for p in "${missing[@]}"; do
    [[ $p == python3 || $p == python3-venv ]] || kept+=("$p")
  done
  missing=("${kept[@]}")
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

echo "vramscope: installing Debian packages: ${missing[*]}" >&2
if [[ $(id -u) -eq 0 ]]; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
elif command -v sudo >/dev/null; then
  sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
  echo "vramscope: please install these Debian packages first: ${missing[*]}" >&2
  exit 1
fi
