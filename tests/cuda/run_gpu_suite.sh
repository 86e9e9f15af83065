#!/usr/bin/env bash
# The cuda GPU suite, for the GPU machine. Run from the repository root with a build made
# elsewhere (never runs cmake):
#   tests/cuda/run_gpu_suite.sh OUTDIR [BUILD_DIR]        (BUILD_DIR default: build)
# Steps (one summary line each; logs and JSON in OUTDIR):
#   1. unit + plugin tests   cuda_unit_tests, cuda_plugin_test (the probe on a GPU)
#   2. gpu tests             cuda_gpu_tests, all but GpuPerf.* (nvfp4, and GpuElement.* for
#                            fp8_e4m3, fp8_e5m2 and bf16 pages)  -> gpu_tests.json
#   3. memcheck              compute-sanitizer --tool memcheck on the gpu tests, without the
#                            2^32 exhaustive ones, the report, and the test that makes a CUDA
#                            call fail on purpose (the sanitizer counts API errors)
#                                                                     -> memcheck.log
#                            (the per-element kernels' tests run under it too: GpuElement.*)
#   4. perf report           GpuPerf.* (bandwidth vs the measured copy ceiling; no pass/fail
#                            on time; GpuPerf.ElementFormatsReport for fp8 and bf16 pages)
#                                                                     -> perf.json, perf.log
# Exit status: 0 when every step passed.
set -uo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 OUTDIR [BUILD_DIR]" >&2
  exit 2
fi
out=$1
build=${2:-build}
mkdir -p "$out"
export LD_LIBRARY_PATH="$PWD/$build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVQ_BUILD_DIR="$PWD/$build"
# On the GPU machine a GPU test that finds no device fails instead of skipping (require_gpu.h):
# a driver/runtime mismatch must not pass as a run of skips.
export KVQ_REQUIRE_GPU=1
bin="$build/bin"
failed=0

# "passed N, failed N, skipped N" from a gtest log.
gtest_counts() {
  local log=$1
  local passed failed skipped
  passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" | tail -1)
  failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= tests?, listed below)' "$log" | tail -1)
  skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= tests?, listed below)' "$log" | tail -1)
  echo "passed ${passed:-0}, failed ${failed:-0}, skipped ${skipped:-0}"
}

step() {  # step NAME RC LOG DETAIL
  local name=$1 rc=$2 log=$3 detail=$4
  if [[ $rc -eq 0 ]]; then
    printf '%-14s OK    %s  (%s)\n' "$name" "$detail" "$log"
  else
    printf '%-14s FAIL  rc=%s %s  (%s)\n' "$name" "$rc" "$detail" "$log"
    failed=1
  fi
}

nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader > "$out/device.txt" 2>&1 || true

# 1. unit + plugin
"$bin/cuda_unit_tests" --gtest_output="json:$out/unit_tests.json" > "$out/unit_tests.log" 2>&1
rc=$?
"$bin/cuda_plugin_test" --gtest_output="json:$out/plugin_test.json" > "$out/plugin_test.log" 2>&1
rc2=$?
probe=$(grep -m1 -oP '^cuda: \K.*' "$out/plugin_test.log")
step "unit+plugin" $((rc | rc2)) "$out/unit_tests.log" "$(gtest_counts "$out/unit_tests.log"); probe: ${probe:-?}"

# 2. gpu tests
"$bin/cuda_gpu_tests" --gtest_filter='-GpuPerf.*' --gtest_output="json:$out/gpu_tests.json" \
  > "$out/gpu_tests.log" 2>&1
rc=$?
step "gpu-tests" $rc "$out/gpu_tests.log" "$(gtest_counts "$out/gpu_tests.log")"

# 3. memcheck
sanitizer=$(command -v compute-sanitizer)
for candidate in /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z "$sanitizer" && -x "$candidate" ]] && sanitizer=$candidate
done
if [[ -n "$sanitizer" ]]; then
  "$sanitizer" --tool memcheck --error-exitcode 97 \
    "$bin/cuda_gpu_tests" --gtest_filter='-*Exhaustive*:GpuPerf.*:GpuGraph.ErrorLeftOverFromEarlierWorkIsNotBlamedOnTheWrite' > "$out/memcheck.log" 2>&1
  rc=$?
  summary=$(grep -m1 -oP 'ERROR SUMMARY: .*' "$out/memcheck.log")
  step "memcheck" $rc "$out/memcheck.log" "${summary:-no summary}; $(gtest_counts "$out/memcheck.log")"
else
  step "memcheck" 127 "-" "compute-sanitizer not found (PATH, /usr/local/cuda)"
fi

# 4. perf report
"$bin/cuda_gpu_tests" --gtest_filter='GpuPerf.*' --gtest_output="json:$out/perf.json" \
  > "$out/perf.log" 2>&1
rc=$?
main=$(grep -m1 -E '^write T=65536 H=8  D=128 bs=16  HND K linear V sm100_swizzled' "$out/perf.log")
fp8=$(grep -m1 -E '^fp8_e4m3 write T=65536 ' "$out/perf.log")
step "perf-report" $rc "$out/perf.log" "${main:-see log}${fp8:+; $fp8}"

exit $failed
