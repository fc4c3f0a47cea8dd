#!/usr/bin/env bash
# Quick start: installs what is missing, builds vramscope and runs `vramscope report` on the
# built-in example (a snapshot recorded on an NVIDIA H200: a 2-layer MLP trained with Adam for 3
# steps). Writes vramscope-example.sqlite in the repository root.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DVRAMSCOPE_BUILD_TESTS=OFF >/dev/null
cmake --build build --target vramscope
echo
exec build/vramscope report  # a second run replaces the vramscope-example.sqlite of the first
