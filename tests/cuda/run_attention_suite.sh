#!/usr/bin/env bash
# The decode-attention GPU suite, for the GPU machine. Run from the repository root with a build
# made elsewhere (never runs cmake):
#   tests/cuda/run_attention_suite.sh OUTDIR [BUILD_DIR]        (BUILD_DIR default: build)
# Steps (one summary line each; logs and JSON in OUTDIR):
#   1. plan tests       cuda_unit_tests AttentionPlan.* (host planning)        -> plan.log
#   2. gpu tests        cuda_attention_gpu_tests: >= 100 random cases against reference_cpu,
#                       out-of-range device values, write + attend in one graph -> gpu_tests.json
#   3. memcheck         compute-sanitizer --tool memcheck on the out-of-range, workspace, graph,
#                       misaligned-cache and long-sequence tests and on a quick sweep of every format           -> memcheck.log
#   4. cli              kvq attend with the cuda backend on make_kv.py / make_query.py files,
#                       against reference_cpu's output                        -> cli.log
#   5. bench            kvq bench --attention (the full sweep)   -> bench.json, bench.txt, and
#                       bench.png where a python3 has matplotlib
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
export KVQ_SOURCE_DIR="$PWD"
export KVQ_REQUIRE_GPU=1  # a GPU test that finds no device fails instead of skipping
bin="$build/bin"
failed=0

gtest_counts() {
  local log=$1 passed failed skipped
  passed=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$log" | tail -1)
  failed=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= tests?, listed below)' "$log" | tail -1)
  skipped=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= tests?, listed below)' "$log" | tail -1)
  echo "passed ${passed:-0}, failed ${failed:-0}, skipped ${skipped:-0}"
}

step() {  # step NAME RC LOG DETAIL
  local name=$1 rc=$2 log=$3 detail=$4
  if [[ $rc -eq 0 ]]; then
    printf '%-10s OK    %s  (%s)\n' "$name" "$detail" "$log"
  else
    printf '%-10s FAIL  rc=%s %s  (%s)\n' "$name" "$rc" "$detail" "$log"
    failed=1
  fi
}

nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader > "$out/device.txt" 2>&1 || true

# 1. plan
"$bin/cuda_unit_tests" --gtest_filter='AttentionPlan.*' > "$out/plan.log" 2>&1
step "plan" $? "$out/plan.log" "$(gtest_counts "$out/plan.log")"

# 2. gpu tests
start=$(date +%s)
"$bin/cuda_attention_gpu_tests" --gtest_output="json:$out/gpu_tests.json" > "$out/gpu_tests.log" 2>&1
rc=$?
step "gpu-tests" $rc "$out/gpu_tests.log" "$(gtest_counts "$out/gpu_tests.log"), $(( $(date +%s) - start )) s"

# 3. memcheck (the random-case test is long under the sanitizer: the shorter tests, and a quick
#    sweep through the kvq program for every format and a split call)
sanitizer=$(command -v compute-sanitizer)
for candidate in /usr/local/cuda/bin/compute-sanitizer \
  /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z "$sanitizer" && -x "$candidate" ]] && sanitizer=$candidate
done
if [[ -n "$sanitizer" ]]; then
  cfg=$(mktemp --suffix=.yaml)
  sed 's/^backend:.*/backend: cuda/' configs/nvfp4_sm100.yaml > "$cfg"
  {
    "$sanitizer" --tool memcheck --error-exitcode 97 "$bin/cuda_attention_gpu_tests" \
      --gtest_filter='GpuAttention.DeviceValues*:GpuAttention.Refuses*:GpuAttention.WriteThen*:GpuAttention.OneLong*:GpuAttention.Misaligned*'
    echo "rc=$?"
    "$sanitizer" --tool memcheck --error-exitcode 97 "$bin/kvq" bench "$cfg" --attention \
      --seqs 1,3 --contexts 100,5000 --gqa 1,8 --iterations 1 --backend cuda
    echo "rc=$?"
  } > "$out/memcheck.log" 2>&1
  rc=0
  grep -q '^rc=[1-9]' "$out/memcheck.log" && rc=1
  summary=$(grep -oP 'ERROR SUMMARY: .*' "$out/memcheck.log" | sort | uniq -c | tr '\n' ' ')
  step "memcheck" $rc "$out/memcheck.log" "${summary:-no summary}"
  rm -f "$cfg"
else
  step "memcheck" 127 "-" "compute-sanitizer not found (PATH, /usr/local/cuda)"
fi

# 4. cli: the same files through reference_cpu and cuda, outputs compared
work=$(mktemp -d)
{
  python3 examples/make_kv.py "$work/kv.safetensors" -T 3000 &&
    python3 examples/make_query.py "$work/q.safetensors" -T 3000 &&
    "$bin/kvq" write configs/nvfp4_sm100.yaml --input "$work/kv.safetensors" \
      --output "$work/cache.safetensors" --backend reference_cpu &&
    "$bin/kvq" attend configs/nvfp4_sm100.yaml --cache "$work/cache.safetensors" \
      --query "$work/q.safetensors" --output "$work/ref.safetensors" --backend reference_cpu &&
    "$bin/kvq" attend configs/nvfp4_sm100.yaml --cache "$work/cache.safetensors" \
      --query "$work/q.safetensors" --output "$work/gpu.safetensors" --backend cuda &&
    python3 - "$work/ref.safetensors" "$work/gpu.safetensors" <<'PY'
import json, struct, sys
import numpy as np
def load(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
        t = h["output"]
        f.seek(8 + n + t["data_offsets"][0])
        return np.frombuffer(f.read(t["data_offsets"][1] - t["data_offsets"][0]), np.float32)
ref, gpu = load(sys.argv[1]), load(sys.argv[2])
ratio = np.abs(ref - gpu).max() / np.abs(ref).max()
print(f"max |cuda - reference_cpu| / max |reference_cpu| = {ratio:.3g} (bound 2e-3)")
sys.exit(0 if ratio <= 2e-3 else 1)
PY
} > "$out/cli.log" 2>&1
rc=$?
step "cli" $rc "$out/cli.log" "$(tail -1 "$out/cli.log")"
rm -rf "$work"

# 5. bench
cfg=$(mktemp --suffix=.yaml)
sed 's/^backend:.*/backend: cuda/' configs/nvfp4_sm100.yaml > "$cfg"
"$bin/kvq" bench "$cfg" --attention --backend cuda --json "$out/bench.json" \
  > "$out/bench.txt" 2> "$out/bench.log"
rc=$?
step "bench" $rc "$out/bench.txt" "$(grep -c ' us ' "$out/bench.txt") rows"
rm -f "$cfg"
# The plot for docs/benchmarks.md, where a python3 has matplotlib (not a step: the numbers stand
# without it).
for python in python3 /usr/bin/python3; do
  if "$python" scripts/plot_bench.py --check 2>/dev/null; then
    "$python" scripts/plot_bench.py "$out/bench.json" "$out/bench.png" && echo "plot: $out/bench.png"
    break
  fi
done

exit $failed
