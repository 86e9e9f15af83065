#!/usr/bin/env python3
"""The markdown tables of one `kvq bench --json` run, for docs/benchmarks.md.

usage: bench_table.py BENCH.json [--commit HASH] [--max-tokens N]

Prints a heading naming the GPU, the commit and the date, the copy bandwidth and the command,
then three tables with one row per shape (H x D, block_size) and one column per T:
  - the write, % of copy in graph replay / in direct launches;
  - the write's time in us, graph replay / direct, for the decode sizes (T <= 256);
  - the reader, % of copy in graph replay / in direct launches.
% of copy: the bytes a write (read) must move over its median time, against the device-to-device
copy bandwidth measured in the same run (docs/benchmarks.md says which bytes). The JSON does
not record the commit: pass the one the plugin was built from (`git rev-parse --short HEAD`).
"""
import argparse
import json
import re

DECODE_MAX_TOKENS = 256


def pct(m):
    return f"{m['percent_of_copy']:.1f}" if m else "-"


def us(m):
    return f"{m['ms']['median'] * 1e3:.1f}" if m else "-"


def pair(graph, direct):
    return f"{graph} / {direct}"


def grid(cases, cell, tokens):
    """Rows (H x D, block_size, and the thread count of CPU runs) in the run's order, one cell
    per T."""
    rows, order = {}, []
    for c in cases:
        label = f"{c['shape']['num_kv_heads']}x{c['shape']['head_size']}, {c['block_size']}"
        if c.get("threads"):
            label += f", {c['threads']} thread" + ("s" if c["threads"] != 1 else "")
        if label not in rows:
            rows[label] = {}
            order.append(label)
        rows[label][c["tokens"]] = cell(c)
    lines = ["| H x D, bs | " + " | ".join(f"T = {t}" for t in tokens) + " |",
             "|---|" + "---:|" * len(tokens)]
    for label in order:
        lines.append(f"| {label} | " + " | ".join(rows[label].get(t, "") for t in tokens) + " |")
    return "\n".join(lines)


def write_pct(c):
    w = c.get("write")
    if not w:
        return f"error: {c.get('error')}"
    return pair(pct(w.get("graph")), pct(w))


def write_us(c):
    w = c.get("write")
    if not w:
        return f"error: {c.get('error')}"
    return pair(us(w.get("graph")), us(w))


def read_pct(c):
    r = c.get("read")
    if not r:
        return "-"
    return pair(pct(r.get("graph")), pct(r))


def command_words(command):
    # The --json path is wherever the run wrote it; its name is what identifies the file.
    return re.sub(r"(--json\s+)(\S*/)?(\S+)", r"\1\3", command)


def render(doc, commit=None, max_tokens=None):
    cases = [c for c in doc["cases"] if max_tokens is None or c["tokens"] <= max_tokens]
    tokens = sorted({c["tokens"] for c in cases})
    decode = [t for t in tokens if t <= DECODE_MAX_TOKENS]
    date = doc["date"][:10]
    out = [f"### {doc['device']['name']}: commit {commit or 'not given'}, {date}", "",
           f"Copy bandwidth {doc['copy_bandwidth']['gbps']:.0f} GB/s (read + written). "
           f"`{command_words(doc['command'])}`", "",
           "Write, % of copy, graph replay / direct:", "", grid(cases, write_pct, tokens), ""]
    if decode:
        out += ["Write, us, graph replay / direct (decode sizes):", "",
                grid(cases, write_us, decode), ""]
    out += ["Read, % of copy, graph replay / direct:", "", grid(cases, read_pct, tokens)]
    return "\n".join(out)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("json", help="a `kvq bench --json` file")
    p.add_argument("--commit", help="the commit the measured plugin was built from")
    p.add_argument("--max-tokens", type=int, help="leave out cases with more tokens")
    a = p.parse_args()
    with open(a.json) as f:
        doc = json.load(f)
    print(render(doc, a.commit, a.max_tokens))


if __name__ == "__main__":
    main()
