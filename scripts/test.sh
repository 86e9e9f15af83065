#!/usr/bin/env bash
# Builds kvq from a clean configure and runs the whole test suite (labels unit, plugin, gpu; the
# gpu tests skip with a message where no CUDA device is present). Warnings are errors, and every
# C++/CUDA file must be formatted by the root .clang-format. Called by .ci/run.
#   scripts/test.sh [BUILD_DIR]     (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
jobs=$(nproc)

scripts/install-deps.sh
scripts/check-format.sh
# --fresh: a new cache (an earlier configure's, e.g. one that found no nvcc or had tests off, is not
# kept); the object files are, so a rebuild is incremental.
cmake --fresh -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DKVQ_WERROR=ON \
  -DKVQ_BUILD_TESTS=ON
cmake --build "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure --no-tests=error -j"$jobs"
