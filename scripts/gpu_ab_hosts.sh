#!/usr/bin/env bash
# A/B of whole kvq builds on the GPU machine (for changes that scripts/gpu_ab.sh cannot swap in as
# a plugin alone, such as a new plugin ABI), from the repository root:
#   scripts/gpu_ab_hosts.sh OUTDIR NAME=DIR ...
# Each DIR holds a build's bin/ and lib/ (lib/kvq/plugins inside, the shared libraries bundled);
# each runs its own `kvq bench` of the main sweep (configs/nvfp4_sm100.yaml) in turn, the same
# inputs, interleaved over KVQ_AB_ROUNDS rounds (default 2, the second in reverse order) while
# the rounds fit in KVQ_AB_SECONDS (default 480). Per build and round: NAME.R.json and .txt.
set -uo pipefail
out=${1:?usage: scripts/gpu_ab_hosts.sh OUTDIR NAME=DIR ...}
shift
rounds=${KVQ_AB_ROUNDS:-2}
budget=${KVQ_AB_SECONDS:-480}
mkdir -p "$out"
start=$SECONDS
specs=("$@")
for ((r = 1; r <= rounds; ++r)); do
  if ((r > 1 && SECONDS - start > budget * (r - 1) / rounds)); then
    echo "gpu_ab_hosts.sh: round $r skipped: $((SECONDS - start)) s used of $budget" >&2
    break
  fi
  order=("${specs[@]}")
  ((r % 2 == 0)) && mapfile -t order < <(printf '%s\n' "${specs[@]}" | tac)
  for spec in "${order[@]}"; do
    name=${spec%%=*} dir=${spec#*=}
    LD_LIBRARY_PATH="$PWD/$dir/lib" timeout 200 "$dir/bin/kvq" bench configs/nvfp4_sm100.yaml \
      --json "$out/$name.$r.json" > "$out/$name.$r.txt" 2>&1
    echo "gpu_ab_hosts.sh: $name round $r: exit $? at $((SECONDS - start)) s" >&2
  done
done
# Per case: each build's write GB/s (direct and graph replay), median over its rounds, and the
# change of every build against the first.
python3 - "$out" "${specs[@]%%=*}" <<'PY'
import glob, json, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
def key(c):
    s = c["shape"]
    return (s["num_kv_heads"], s["head_size"], c["block_size"], c["tokens"])
rates = {}
for n in names:
    for f in sorted(glob.glob(f"{out}/{n}.*.json")):
        for c in json.load(open(f))["cases"]:
            w = c.get("write")
            if not w: continue
            for mode, gbps in (("direct", w.get("gbps")), ("graph", (w.get("graph") or {}).get("gbps"))):
                if gbps:
                    rates.setdefault((key(c), mode), {}).setdefault(n, []).append(gbps)
base = names[0]
print(f"{'H x D bs T':24} {'mode':10} " + " ".join(f"{n:>10}" for n in names) + "   change vs " + base)
worst = 0.0
for (k, mode), by in sorted(rates.items()):
    med = {n: statistics.median(v) for n, v in by.items()}
    if base not in med: continue
    row = " ".join(f"{med.get(n, float('nan')):10.1f}" for n in names)
    ch = [100 * (med[n] / med[base] - 1) for n in names[1:] if n in med]
    worst = min([worst] + ch)
    print(f"{k[0]}x{k[1]} bs{k[2]} T={k[3]:<8} {mode:10} {row}   " + " ".join(f"{c:+.1f}%" for c in ch))
print(f"largest drop against {base}: {worst:.1f}%")
PY
