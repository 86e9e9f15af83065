#!/usr/bin/env python3
"""Draws `kvq bench --json` results: GB/s against T per shape, with the device's copy
bandwidth as the ceiling (a labelled line; the GB/s axis is logarithmic when every series sits
under a fifth of it), for the writer and the reader, and their times (direct launches solid,
CUDA-graph replays dashed, named in the legend only when measured). x ticks are the measured T.
`kvq bench --attention --json` results (kind "attention") get one column per GQA group: percent
of the same run's copy bandwidth and time per attend against the context, a color per cache
format and a marker per num_seqs.

    plot_bench.py BENCH.json OUT.png     draw
    plot_bench.py --check                exit 0 when matplotlib can be imported (kvq bench --plot
                                         calls this before it starts timing)
Needs python3 and matplotlib (Debian: apt-get install python3-matplotlib).
"""
import json
import sys


def load_matplotlib(quiet=False):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError as e:
        if quiet:  # --check: kvq tries the next python3 and reports what it tried
            sys.exit(3)
        sys.stderr.write(f"plot_bench.py: matplotlib is missing ({e}): "
                         "apt-get install python3-matplotlib\n")
        sys.exit(3)


def series_key(case):
    shape = case["shape"]
    label = f"H={shape['num_kv_heads']} D={shape['head_size']} bs={case['block_size']}"
    if case.get("threads"):
        label += f" {case['threads']} thr"
    return label


def collect(cases, side):
    """label -> sorted [(T, gbps, median_ms, graph_median_ms or None)]"""
    series = {}
    for c in cases:
        m = c.get(side)
        if c.get("error") or not m:
            continue
        graph = m["graph"]["ms"]["median"] if m.get("graph") else None
        series.setdefault(series_key(c), []).append(
            (c["tokens"], m["gbps"], m["ms"]["median"], graph))
    for points in series.values():
        points.sort()
    return series


def bandwidth_axis(ax, series, copy_gbps):
    """The y-axis shows the data: linear from 0 when the series reach a fifth of the copy
    bandwidth, else log (a CPU's writes sit far under its memcpy line and would be drawn flat).
    The ceiling is a labelled line either way."""
    values = [p[1] for pts in series.values() for p in pts if p[1] > 0]
    top = max(values + [copy_gbps])
    if values and max(values) < copy_gbps / 5:
        ax.set_yscale("log")
        ax.set_ylim(min(values) / 1.5, top * 1.5)
        return "log"
    ax.set_ylim(0, top * 1.1)
    return "linear"


def measured_ticks(ax, series, plain):
    """x ticks exactly at the T values measured."""
    ts = sorted({p[0] for pts in series.values() for p in pts})
    if ts:
        ax.set_xticks(ts)
        ax.set_xticks([], minor=True)
        ax.xaxis.set_major_formatter(plain)
        if len(ts) > 10:
            for label in ax.get_xticklabels():
                label.set_rotation(45)


def draw(doc, out):
    plt = load_matplotlib()
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FuncFormatter
    copy_gbps = doc["copy_bandwidth"]["gbps"]
    cases = doc["cases"]
    fig, axes = plt.subplots(2, 2, figsize=(15, 10))
    cfg = doc["config"]
    layout = cfg["layout"]
    fig.suptitle(f"kvq bench: {cfg['backend']} on {doc['device']['name']}, {layout['order']} "
                 f"K {layout['k_scales']} V {layout['v_scales']} ({doc['date']})")
    cmap = plt.get_cmap("tab20")
    plain = FuncFormatter(lambda x, _: f"{x:g}")
    on_gpu = doc["device"]["id"].startswith("cuda")
    for col, side in enumerate(("write", "read")):
        series = collect(cases, side)
        bw, tm = axes[0][col], axes[1][col]
        any_graph = False
        for i, (label, pts) in enumerate(sorted(series.items())):
            color = cmap(i % 20)
            t = [p[0] for p in pts]
            bw.plot(t, [p[1] for p in pts], marker="o", ms=3, color=color, label=label)
            tm.plot(t, [p[2] * 1e3 for p in pts], marker="o", ms=3, color=color, label=label)
            g = [(p[0], p[3] * 1e3) for p in pts if p[3] is not None]
            if g:
                any_graph = True
                tm.plot([x for x, _ in g], [y for _, y in g], ls="--", marker="x", ms=3,
                        color=color)
        bw.set_xscale("log", base=2)
        scale = bandwidth_axis(bw, series, copy_gbps)
        bw.axhline(copy_gbps, color="black", ls="--", lw=1.2,
                   label=f"copy bandwidth {copy_gbps:.0f} GB/s (ceiling)")
        measured_ticks(bw, series, plain)
        bw.set_xlabel("tokens per write (T)")
        bw.set_ylabel("GB/s (least bytes / median time)" +
                      (", log scale" if scale == "log" else ""))
        bw.set_title(f"{side}: bandwidth")
        bw.grid(True, which="major", alpha=0.3)
        if series:
            bw.legend(fontsize=7, ncol=2)
        tm.set_xscale("log", base=2)
        tm.set_yscale("log")
        measured_ticks(tm, series, plain)
        tm.set_xlabel("tokens per write (T)")
        tm.set_ylabel("median time (us)")
        tm.set_title(f"{side}: time")
        tm.grid(True, which="major", alpha=0.3)
        # The time legend names the line styles that are drawn, and nothing else.
        handles = []
        if series and any_graph:
            handles += [Line2D([], [], color="gray", marker="o", ms=3, label="direct launch"),
                        Line2D([], [], color="gray", ls="--", marker="x", ms=3,
                               label="CUDA-graph replay (per launch)")]
        if on_gpu and side == "write" and series:  # issue 7's decode targets
            handles.append(tm.axhline(3, color="gray", ls=":", lw=1, label="3 us (graph target)"))
            handles.append(tm.axhline(6, color="gray", ls="-.", lw=1,
                                      label="6 us (direct target)"))
        if handles:
            tm.legend(handles=handles, fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=110, format="png")  # the name as given, whatever its ending


def draw_attention(doc, out):
    plt = load_matplotlib()
    from matplotlib.ticker import FuncFormatter
    cases = [c for c in doc["cases"] if "gbps" in c]
    groups = sorted({c["group"] for c in cases}) or [0]
    formats = sorted({c["format"] for c in cases})
    seqs = sorted({c["num_seqs"] for c in cases})
    fig, axes = plt.subplots(2, len(groups), figsize=(7.5 * len(groups), 10), squeeze=False)
    fig.suptitle(f"kvq bench --attention: {doc.get('backend', '?')} on {doc['device']}, "
                 f"H={doc['num_kv_heads']} D={doc['head_size']} block {doc['block_size']}, "
                 f"copy {doc['copy_gbps']:.0f} GB/s ({doc.get('date', '')})")
    cmap = plt.get_cmap("tab10")
    markers = "osD^vP*X"
    plain = FuncFormatter(lambda x, _: f"{x:g}")
    for col, group in enumerate(groups):
        pct, tm = axes[0][col], axes[1][col]
        for fi, fmt in enumerate(formats):
            for si, n in enumerate(seqs):
                pts = sorted((c["context"], c["percent_of_copy"], c.get("graph_us", c["direct_us"]))
                             for c in cases
                             if c["group"] == group and c["format"] == fmt and c["num_seqs"] == n)
                if not pts:
                    continue
                style = dict(color=cmap(fi % 10), marker=markers[si % len(markers)], ms=4)
                label = f"{fmt}, {n} seq" + ("s" if n > 1 else "")
                pct.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **style)
                tm.plot([p[0] for p in pts], [p[2] for p in pts], label=label, **style)
        pct.axhline(100, color="black", ls="--", lw=1.2, label="a same-size copy (100%)")
        contexts = sorted({c["context"] for c in cases})
        for ax in (pct, tm):
            ax.set_xscale("log", base=2)
            if contexts:
                ax.set_xticks(contexts)
                ax.set_xticks([], minor=True)
                ax.xaxis.set_major_formatter(plain)
            ax.set_xlabel("context (tokens a sequence)")
            ax.grid(True, which="major", alpha=0.3)
        pct.set_ylim(0, 110)
        pct.set_ylabel("% of copy bandwidth (bytes it must read / time)")
        pct.set_title(f"GQA {group}: bandwidth")
        tm.set_yscale("log")
        tm.set_ylabel("time per attend (us; graph replay where measured)")
        tm.set_title(f"GQA {group}: time")
        pct.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110, format="png")


def main(argv):
    if len(argv) == 2 and argv[1] == "--check":
        load_matplotlib(quiet=True)
        return 0
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1]) as f:
        doc = json.load(f)
    (draw_attention if doc.get("kind") == "attention" else draw)(doc, argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
