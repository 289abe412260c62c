#!/usr/bin/python3
"""Plots the /events of a dissect trace (layout: src/coordinator/trace.h).

    python3 examples/plot_trace.py runs/run.h5 --step 2 --out runs/run
    # writes runs/run_timeline.png and runs/run_ops.png

(a) PREFIX_timeline.png: a timeline of step K, one row per (rank, stream), every op a bar colored
    by op name (the step span is the grey band behind each rank's rows; module spans are left out).
(b) PREFIX_ops.png: total time by op name over the whole run (all ranks and steps).
Needs h5py, numpy and matplotlib (Debian: python3-h5py python3-matplotlib); uses the Agg backend,
so no display is needed. The trace must have /events (trace.level "op" or "module").
"""
import argparse
import sys

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402


def enum_names(ds, field):
    mapping = h5py.check_enum_dtype(ds.dtype[field])
    return {v: n for n, v in mapping.items()} if mapping else {}


def load(path):
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != "dissect-trace":
            sys.exit("%s: not a dissect trace" % path)
        if "events" not in f:
            sys.exit("%s: no /events in this trace (trace level %r); nothing to plot"
                     % (path, f["metadata"].attrs.get("trace_level") if "metadata" in f else None))
        ds = f["events"]
        names = {k: enum_names(ds, k) for k in ("phase", "module", "op", "stream")}
        ev = ds[()]
        world = int(f.attrs.get("world_size", 1))
    return ev, names, world


def main():
    ap = argparse.ArgumentParser(description="Plot a dissect trace's events.")
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=None,
                    help="step to draw (default: the second step in the trace, else the first)")
    ap.add_argument("--out", default=None, help="output prefix (default: the trace path without .h5)")
    a = ap.parse_args()
    prefix = a.out or (a.trace[:-3] if a.trace.endswith(".h5") else a.trace)

    ev, names, world = load(a.trace)
    op_names, stream_names = names["op"], names["stream"]
    inv_op = {n: v for v, n in op_names.items()}
    step_op, module_op = inv_op.get("step", -1), inv_op.get("module", -1)
    steps = sorted(set(int(s) for s in ev["step"] if s > 0))
    if not steps:
        sys.exit("%s: no events inside steps" % a.trace)
    step = a.step if a.step is not None else (steps[1] if len(steps) > 1 else steps[0])
    if step not in steps:
        sys.exit("%s: no events for step %d (steps %d..%d)" % (a.trace, step, steps[0], steps[-1]))

    is_op = (ev["op"] != step_op) & (ev["op"] != module_op)
    ops_all = ev[is_op]
    used_ops = sorted(set(int(o) for o in ops_all["op"]))
    cmap = plt.get_cmap("tab20")
    color = {o: cmap(i % 20) for i, o in enumerate(used_ops)}

    # (a) timeline of one step
    sel = ev[ev["step"] == step]
    spans = sel[sel["op"] == step_op]
    t0 = int(spans["start_ns"].min()) if len(spans) else int(sel["start_ns"].min())
    ops = sel[(sel["op"] != step_op) & (sel["op"] != module_op)]
    rows = sorted(set((int(r), int(s)) for r, s in zip(ops["rank"], ops["stream"])))
    row_of = {rs: i for i, rs in enumerate(rows)}
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.45 * max(len(rows), 1)))
    for sp in spans:
        rr = [row_of[rs] for rs in rows if rs[0] == int(sp["rank"])]
        if rr:
            ax.broken_barh([((sp["start_ns"] - t0) / 1e6, (sp["end_ns"] - sp["start_ns"]) / 1e6)],
                           (min(rr) - 0.45, max(rr) - min(rr) + 0.9), facecolors="0.92",
                           edgecolors="0.6", linewidth=0.5, zorder=0)
    for o in used_ops:
        m = ops["op"] == o
        if not np.any(m):
            continue
        for (r, s), i in row_of.items():
            mm = m & (ops["rank"] == r) & (ops["stream"] == s)
            if np.any(mm):
                bars = [((st - t0) / 1e6, (en - st) / 1e6)
                        for st, en in zip(ops["start_ns"][mm], ops["end_ns"][mm])]
                ax.broken_barh(bars, (i - 0.35, 0.7), facecolors=color[o], edgecolors="white",
                               linewidth=0.3, zorder=2)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(["rank %d %s" % (r, stream_names.get(s, s)) for r, s in rows])
    ax.invert_yaxis()
    ax.set_xlabel("time since rank 0's step start (ms)")
    ax.set_title("%s: step %d" % (a.trace, step))
    present = [o for o in used_ops if np.any(ops["op"] == o)]
    ax.legend(handles=[Patch(color=color[o], label=op_names.get(o, str(o))) for o in present],
              loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(prefix + "_timeline.png", dpi=120)
    plt.close(fig)

    # (b) total time by op over the run
    dur = (ops_all["end_ns"] - ops_all["start_ns"]).astype(np.float64) / 1e6
    totals = sorted(((float(dur[ops_all["op"] == o].sum()), o) for o in used_ops), reverse=True)
    fig, ax = plt.subplots(figsize=(8, 1.0 + 0.35 * max(len(totals), 1)))
    ax.barh([op_names.get(o, str(o)) for _, o in totals], [t for t, _ in totals],
            color=[color[o] for _, o in totals])
    ax.invert_yaxis()
    ax.set_xlabel("total time over the run, all %d ranks (ms)" % world)
    ax.set_title("%s: time by op (%d steps)" % (a.trace, len(steps)))
    fig.tight_layout()
    fig.savefig(prefix + "_ops.png", dpi=120)
    plt.close(fig)
    print("wrote %s_timeline.png and %s_ops.png" % (prefix, prefix))


if __name__ == "__main__":
    main()
