#!/usr/bin/env bash
# A/B of decode-attention builds on the GPU machine, from the repository root:
#   scripts/gpu_attention_ab.sh OUTDIR NAME=DIR ...
# Each DIR holds a libkvq_cuda.so built from one kernel version; each runs in turn as
# build/lib/kvq/plugins' plugin under the same `kvq bench --attention` sweep, the list run
# KVQ_AB_ROUNDS times (default 2, interleaved: clocks drift between runs). The table gives each
# case's graph-replay time per build (the best of its rounds) and, under it, how far one build's
# own rounds lie apart: a difference between builds smaller than that is not one. KVQ_AB_ARGS
# replaces the sweep's options (default below). Correctness is not checked here: run
# tests/cuda/run_attention_suite.sh on the build under test.
set -uo pipefail
out=${1:?usage: scripts/gpu_attention_ab.sh OUTDIR NAME=DIR ...}
shift
rounds=${KVQ_AB_ROUNDS:-2}
read -ra sweep <<< "${KVQ_AB_ARGS:---seqs 1,32 --contexts 512,4096,131072 --gqa 4,8 --formats nvfp4,fp8_e4m3,bf16 --iterations 10}"
export LD_LIBRARY_PATH="$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
plugin=build/lib/kvq/plugins/libkvq_cuda.so
mkdir -p "$out"
cp "$plugin" "$out/.built.so"
for ((r = 1; r <= rounds; ++r)); do
  for spec in "$@"; do
    name=${spec%%=*} dir=${spec#*=}
    cp "$dir/libkvq_cuda.so" "$plugin"
    timeout 150 build/bin/kvq bench configs/nvfp4_sm100.yaml --attention --backend cuda \
      "${sweep[@]}" --json "$out/$name.$r.json" > "$out/$name.$r.txt" 2>&1
    echo "gpu_attention_ab.sh: $name round $r: exit $?" >&2
  done
done
cp "$out/.built.so" "$plugin"
python3 - "$out" "$@" <<'PY' | tee "$out/ab.txt"
import glob, json, os, sys
from collections import defaultdict
out, names = sys.argv[1], [s.split("=", 1)[0] for s in sys.argv[2:]]
runs = defaultdict(list)  # (name, format, group, seqs, context) -> graph us, one per round
for name in names:
    for f in sorted(glob.glob(os.path.join(out, f"{name}.*.json"))):
        try:
            doc = json.load(open(f))
        except ValueError:
            print(f"{f}: no JSON (see its .txt)")
            continue
        for c in doc.get("cases", []):
            if "graph_us" in c:
                key = (name, c["format"], c["group"], c["num_seqs"], c["context"])
                runs[key].append((c["graph_us"], c["percent_of_copy"]))
cases = sorted({k[1:] for k in runs})
print("graph replay us (% of copy), the best round of each build")
print(f"{'format':>9} {'G':>2} {'seqs':>4} {'context':>7} | " + " ".join(f"{n:>16}" for n in names))
for fmt, g, s, t in cases:
    cells = []
    for n in names:
        v = runs.get((n, fmt, g, s, t))
        cells.append(f"{min(v)[0]:9.1f} ({max(p for _, p in v):3.0f}%)" if v else f"{'-':>16}")
    print(f"{fmt:>9} {g:>2} {s:>4} {t:>7} | " + " ".join(cells))
spread = sorted((max(u for u, _ in v) / min(u for u, _ in v) - 1) * 100 for v in runs.values()
                if len(v) > 1)
if spread:
    print(f"one build's rounds apart: median {spread[len(spread) // 2]:.1f}%, at most {spread[-1]:.1f}%")
PY
tar -C "$out" -czf "$out.tgz" --exclude .built.so . && mv "$out.tgz" "$out/ab.tgz"
