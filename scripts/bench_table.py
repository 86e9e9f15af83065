#!/usr/bin/env python3
"""Markdown table of a `kvq bench --json` file, for docs/benchmarks.md.

usage: bench_table.py BENCH.json [--max-tokens N]
Per case: direct-launch and graph-replay medians (us per write), GB/s and percent of the
device-to-device copy bandwidth measured in the same run, and the reader's (percent of copy in
both launch modes).
"""
import json
import sys


def fmt_us(ms):
    return f"{ms * 1e3:.1f}" if ms is not None else "-"


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    with open(sys.argv[1]) as f:
        d = json.load(f)
    copy = d["copy_bandwidth"]["gbps"]
    print(f"{d['device']['name']}; copy bandwidth {copy:.0f} GB/s; {d['date']}; `{d['command']}`\n")
    print("| H | D | bs | T | write us (direct) | write us (graph) | GB/s direct | GB/s graph "
          "| % copy direct | % copy graph | read us | read GB/s | read % copy direct "
          "| read % copy graph |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in d["cases"]:
        w, r = c.get("write"), c.get("read")
        if not w:
            print(f"| {c['shape']['num_kv_heads']} | {c['shape']['head_size']} | {c['block_size']} "
                  f"| {c['tokens']} | error: {c.get('error')} ||||||||||")
            continue
        total = w["bytes"]["total"]
        g = w.get("graph")
        g_ms = g["ms"]["median"] if g else None
        g_gbps = total / (g_ms * 1e-3) / 1e9 if g_ms else None
        rg = r.get("graph") if r else None
        row = [c["shape"]["num_kv_heads"], c["shape"]["head_size"], c["block_size"], c["tokens"],
               fmt_us(w["ms"]["median"]), fmt_us(g_ms), f"{w['gbps']:.0f}",
               f"{g_gbps:.0f}" if g_gbps else "-", f"{w['percent_of_copy']:.1f}",
               f"{100 * g_gbps / copy:.1f}" if g_gbps else "-",
               fmt_us(r["ms"]["median"]) if r else "-", f"{r['gbps']:.0f}" if r else "-",
               f"{r['percent_of_copy']:.1f}" if r else "-",
               f"{rg['percent_of_copy']:.1f}" if rg else "-"]
        print("| " + " | ".join(str(x) for x in row) + " |")


if __name__ == "__main__":
    main()
