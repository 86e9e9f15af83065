#!/usr/bin/env bash
# Everything kvq checks on a GPU machine, in one call; it never builds. Run from the repository
# root with build/bin, build/lib and build/test-plugins (whose fixture plugins the demo tests
# load) built on another machine, the shared libraries they need copied into build/lib (the GPU
# machine needs only the driver):   scripts/gpu_session.sh OUTDIR [STEPS]
# STEPS: a comma list of tests,suite,bench,demo,attention,python (default: all; a device call of
# at most 10 minutes takes a few at a time: tests,suite then bench,demo then attention then
# python). attention runs tests/cuda/run_attention_suite.sh (tests, memcheck, `kvq attend`
# against reference_cpu, the sweep with its plot); python runs tests/python/run_gpu_python.sh
# (pytest with torch, the example, the write-overhead breakdown; PYTHON and KVQ_WHEELHOUSE as
# that script says, the wheel from build/python-dist). Every step has its own time cap;
# one summary line per step goes to stdout, and OUTDIR/results.tgz packs every log, bench and demo
# JSON included: the only file it leaves in OUTDIR, so that one file carries a run back.
set -uo pipefail
out=${1:?usage: gpu_session.sh OUTDIR [STEPS]}
steps=${2:-tests,suite,bench,demo,attention,python}
work=$(mktemp -d)
export LD_LIBRARY_PATH="$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export KVQ_BUILD_DIR="$PWD/build" KVQ_SOURCE_DIR="$PWD"
# GPU tests that find no CUDA device fail here instead of skipping (tests/support/require_gpu.h),
# so a driver/runtime mismatch cannot pass as a run of skips.
export KVQ_REQUIRE_GPU=1
mkdir -p "$out"
has() { [[ ",$steps," == *",$1,"* ]]; }
nvidia-smi --query-gpu=name,driver_version,compute_cap,clocks.max.sm,memory.total --format=csv | tee "$work/device.txt"
build/bin/kvq backends > "$work/backends.txt" 2>&1; cat "$work/backends.txt"

if has tests; then  # every test binary, GPU tests included (CTest files hold this machine's paths)
  mkdir -p "$work/tests"
  for t in build/bin/*_test build/bin/*_tests; do
    name=$(basename "$t")
    [[ $name == plugin_* ]] && continue  # fixture plugins and the install test need the build tree
    has suite && [[ $name == cuda_gpu_tests ]] && continue  # the suite step runs it
    timeout 240 "$t" > "$work/tests/$name.log" 2>&1
    rc=$?
    printf '%-36s rc=%-3s %s\n' "$name" "$rc" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$work/tests/$name.log" | tr '\n' ' ' | cut -c1-110)"
  done
fi
if has suite; then  # cuda: gpu tests (json), memcheck, perf report
  timeout 300 tests/cuda/run_gpu_suite.sh "$work/cuda"
fi
if has bench; then
  timeout 330 scripts/gpu_bench.sh "$work/bench" 2>&1 | tail -60
fi
if has demo; then
  timeout 60 build/bin/kvq-demo --backend cuda --verify --json "$work/demo.json" 2>&1 | tail -20
  timeout 60 build/bin/kvq-demo --json "$work/demo_auto.json" > "$work/demo_auto.txt" 2>&1
  echo "kvq-demo (auto) rc=$?"
fi
if has attention; then
  timeout 420 tests/cuda/run_attention_suite.sh "$work/attention"
fi
if has python; then
  timeout 300 tests/python/run_gpu_python.sh "$work/python" build
fi
tar -C "$work" -czf "$out/results.tgz" .
echo "gpu_session: results in $out/results.tgz"
