#!/usr/bin/env bash
# A/B of cuda_nvfp4 builds on the GPU machine, from the repository root (docs/perf-notes.md):
#   scripts/gpu_ab.sh OUTDIR NAME=DIR[@VAR=VALUE...] ...
# Each DIR holds a libkvq_cuda_nvfp4.so built from one kernel version (carried under build/lib);
# each runs in turn as build/lib/kvq/plugins' plugin, same inputs, one process per version (with
# the environment variables after '@', for builds that read an A/B switch), and the table
# compares them. Env: KVQ_AB_SHAPES, KVQ_AB_TOKENS (the sweep), KVQ_AB_ROUNDS (times
# through the list, interleaved, default 2: clocks drift between runs), KVQ_AB_ARGS (more
# `kvq bench` options for every run, e.g. "--fused-qkv 32").
set -uo pipefail
out=${1:?usage: scripts/gpu_ab.sh OUTDIR NAME=DIR[@VAR=VALUE...] ...}
shift
shapes=${KVQ_AB_SHAPES:-8x128,1x128,8x64,32x128}
tokens=${KVQ_AB_TOKENS:-1024,4096,16384,65536}
rounds=${KVQ_AB_ROUNDS:-2}
read -ra extra <<< "${KVQ_AB_ARGS:-}"
export LD_LIBRARY_PATH="$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
plugin=build/lib/kvq/plugins/libkvq_cuda_nvfp4.so
mkdir -p "$out"
cp "$plugin" "$out/.built.so"
for ((r = 1; r <= rounds; ++r)); do
  for spec in "$@"; do
    name=${spec%%=*} dir=${spec#*=}
    IFS=@ read -ra vars <<< "$dir"
    dir=${vars[0]}
    cp "$dir/libkvq_cuda_nvfp4.so" "$plugin"
    env "${vars[@]:1}" timeout 150 build/bin/kvq bench configs/nvfp4_sm100.yaml \
      --backend cuda_nvfp4 --shapes "$shapes" --tokens "$tokens" "${extra[@]}" \
      --json "$out/$name.$r.json" \
      > "$out/$name.$r.txt" 2>&1
    echo "gpu_ab.sh: $name round $r: exit $?" >&2
  done
done
cp "$out/.built.so" "$plugin"
python3 - "$out" "$@" <<'PY' | tee "$out/ab.txt"
import glob, json, os, sys
out, specs = sys.argv[1], [s.split("=", 1)[0] for s in sys.argv[2:]]
# (name, H, D, block size, T) -> best median % of copy over rounds: write and read, direct and graph replay
best, graph, read, read_graph = {}, {}, {}, {}
for name in specs:
    for f in sorted(glob.glob(os.path.join(out, f"{name}.*.json"))):
        try:
            doc = json.load(open(f))
        except ValueError:
            print(f"{f}: no JSON (see its .txt)")
            continue
        for c in doc.get("cases", []):
            if c.get("error") or not c.get("write"):
                continue
            sh = c["shape"]  # 8x128 runs block sizes 16, 64 and 128: one row each
            k = (name, sh["num_kv_heads"], sh["head_size"], c["block_size"], c["tokens"])
            best[k] = max(best.get(k, 0), c["write"]["percent_of_copy"])
            g = c["write"].get("graph")
            if g:
                graph[k] = max(graph.get(k, 0), g["percent_of_copy"])
            r = c.get("read")
            if r:
                read[k] = max(read.get(k, 0), r["percent_of_copy"])
                if r.get("graph"):
                    read_graph[k] = max(read_graph.get(k, 0), r["graph"]["percent_of_copy"])
keys = sorted({k[1:] for k in best})
for title, table in (("write, direct", best), ("write, graph", graph), ("read, direct", read),
                     ("read, graph", read_graph)):
    print(f"{title}, % of copy (best median of the rounds)")
    print(f"{'H':>3} {'D':>4} {'B':>4} {'T':>6} | " + " ".join(f"{n:>10}" for n in specs))
    for h, d, b, t in keys:
        print(f"{h:>3} {d:>4} {b:>4} {t:>6} | " +
              " ".join(f"{table.get((n, h, d, b, t), float('nan')):10.1f}" for n in specs))
PY
# Packed beside OUTDIR, then moved in: tar exits 1 on a directory that changes while it reads it.
tar -C "$out" -czf "$out.tgz" --exclude .built.so . && mv "$out.tgz" "$out/ab.tgz"
