#!/usr/bin/env bash
# A/B of cuda builds on the GPU machine, from the repository root (how docs/kernel-design.md
# reads one: its "How the numbers are read"):
#   scripts/gpu_ab.sh [--attention] OUTDIR NAME=DIR[@VAR=VALUE...] ...
# Each DIR holds a libkvq_cuda.so built from one kernel version (carried under build/lib);
# each runs in turn as build/lib/kvq/plugins' plugin, same inputs, one process per version (with
# the environment variables after '@', for builds that read an A/B switch), and the table
# compares them; under each table, how far one build's own rounds lie apart (the noise a
# difference between builds must clear). Env: KVQ_AB_SHAPES, KVQ_AB_TOKENS (the sweep), KVQ_AB_ROUNDS (times
# through the list, interleaved, default 2: clocks drift between runs), KVQ_AB_ARGS (more
# `kvq bench` options for every run, e.g. "--fused-qkv 32").
# --attention: the decode attention instead (`kvq bench --attention`; KVQ_AB_ARGS replaces its
# sweep, default below): a table of graph-replay time per case and build, best of its rounds.
set -uo pipefail
attention=0
if [[ ${1:-} == --attention ]]; then
  attention=1
  shift
fi
out=${1:?usage: scripts/gpu_ab.sh [--attention] OUTDIR NAME=DIR[@VAR=VALUE...] ...}
shift
shapes=${KVQ_AB_SHAPES:-8x128,1x128,8x64,32x128}
tokens=${KVQ_AB_TOKENS:-1024,4096,16384,65536}
rounds=${KVQ_AB_ROUNDS:-2}
if ((attention)); then
  read -ra sweep <<< "${KVQ_AB_ARGS:---seqs 1,32 --contexts 512,4096,131072 --gqa 4,8 --formats nvfp4,fp8_e4m3,bf16 --iterations 10}"
  args=(--attention "${sweep[@]}")
else
  read -ra extra <<< "${KVQ_AB_ARGS:-}"
  args=(--shapes "$shapes" --tokens "$tokens" "${extra[@]}")
fi
export LD_LIBRARY_PATH="$PWD/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
plugin=build/lib/kvq/plugins/libkvq_cuda.so
mkdir -p "$out"
cp "$plugin" "$out/.built.so"
for ((r = 1; r <= rounds; ++r)); do
  for spec in "$@"; do
    name=${spec%%=*} dir=${spec#*=}
    IFS=@ read -ra vars <<< "$dir"
    dir=${vars[0]}
    cp "$dir/libkvq_cuda.so" "$plugin"
    env "${vars[@]:1}" timeout 150 build/bin/kvq bench configs/nvfp4_sm100.yaml \
      --backend cuda "${args[@]}" \
      --json "$out/$name.$r.json" \
      > "$out/$name.$r.txt" 2>&1
    echo "gpu_ab.sh: $name round $r: exit $?" >&2
  done
done
cp "$out/.built.so" "$plugin"
python3 - "$out" "$@" <<'PY' | tee "$out/ab.txt"
import glob, json, os, sys
from collections import defaultdict
out, specs = sys.argv[1], [s.split("=", 1)[0] for s in sys.argv[2:]]
docs = {}
for name in specs:
    for f in sorted(glob.glob(os.path.join(out, f"{name}.*.json"))):
        try:
            docs[f] = (name, json.load(open(f)))
        except ValueError:
            print(f"{f}: no JSON (see its .txt)")
if any(doc.get("kind") == "attention" for _, doc in docs.values()):
    runs = defaultdict(list)  # (name, format, group, seqs, context) -> (graph us, %) a round
    for name, doc in docs.values():
        for c in doc.get("cases", []):
            if "graph_us" in c:
                runs[(name, c["format"], c["group"], c["num_seqs"], c["context"])].append(
                    (c["graph_us"], c["percent_of_copy"]))
    print("decode attention: graph replay us (% of copy), the best round of each build")
    print(f"{'format':>9} {'G':>2} {'seqs':>4} {'context':>7} | " + " ".join(f"{n:>16}" for n in specs))
    for fmt, g, s, t in sorted({k[1:] for k in runs}):
        cells = []
        for n in specs:
            v = runs.get((n, fmt, g, s, t))
            cells.append(f"{min(v)[0]:9.1f} ({max(p for _, p in v):3.0f}%)" if v else f"{'-':>16}")
        print(f"{fmt:>9} {g:>2} {s:>4} {t:>7} | " + " ".join(cells))
    spread = sorted((max(u for u, _ in v) / min(u for u, _ in v) - 1) * 100
                    for v in runs.values() if len(v) > 1)
    if spread:
        print(f"  one build's rounds apart: median {spread[len(spread) // 2]:.1f}%, "
              f"at most {spread[-1]:.1f}%")
    sys.exit(0)
# title -> (name, H, D, block size, T) -> the round's median % of copy, one per round
titles = ("write, direct", "write, graph", "read, direct", "read, graph")
runs = {title: defaultdict(list) for title in titles}
for name, doc in docs.values():
    for c in doc.get("cases", []):
        if c.get("error") or not c.get("write"):
            continue
        sh = c["shape"]  # 8x128 runs block sizes 16, 64 and 128: one row each
        k = (name, sh["num_kv_heads"], sh["head_size"], c["block_size"], c["tokens"])
        w, r = c["write"], c.get("read") or {}
        for title, m in zip(titles, (w, w.get("graph"), r, r.get("graph"))):
            if m:
                runs[title][k].append(m["percent_of_copy"])
keys = sorted({k[1:] for k in runs["write, direct"]})
for title in titles:
    table = runs[title]
    print(f"{title}, % of copy (best median of the rounds)")
    print(f"{'H':>3} {'D':>4} {'B':>4} {'T':>6} | " + " ".join(f"{n:>10}" for n in specs))
    for h, d, b, t in keys:
        print(f"{h:>3} {d:>4} {b:>4} {t:>6} | " +
              " ".join(f"{max(table.get((n, h, d, b, t), [float('nan')])):10.1f}" for n in specs))
    # How far one build's own rounds disagree: a difference between builds smaller than this is
    # not one (docs/kernel-design.md reads A/Bs against it).
    spreads = sorted((max(v) - min(v), k) for k, v in table.items() if len(v) > 1)
    if spreads:
        top, (n, h, d, b, t) = spreads[-1]
        print(f"  one build's rounds apart: median {spreads[len(spreads) // 2][0]:.1f} points, "
              f"at most {top:.1f} ({n}, {h}x{d} bs {b} T = {t})")
PY
# Packed beside OUTDIR, then moved in: tar exits 1 on a directory that changes while it reads it.
tar -C "$out" -czf "$out.tgz" --exclude .built.so . && mv "$out.tgz" "$out/ab.tgz"
