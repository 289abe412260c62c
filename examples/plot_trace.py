#!/usr/bin/python3
"""Plots the /events of a dissect trace (layout: src/trace/trace.h).

    python3 examples/plot_trace.py runs/run.h5 --step 2 --out runs/run
    # writes runs/run_timeline.png, runs/run_ops.png and runs/run_pipeline.png

(a) PREFIX_timeline.png: a timeline of step K, one row per (rank, stream), every op a bar colored
    by op name (the step span is the grey band behind each rank's rows; module spans are left out).
(b) PREFIX_ops.png: total time by op name over the whole run (all ranks and steps).
(c) PREFIX_pipeline.png: the pipeline timeline of step K: one row per rank, grouped by pipeline
    stage and labelled with its (pp, dp, tp) coordinates; the forward of each micro-batch in
    blues, the backward in oranges (a box per run of consecutive compute-stream module spans --
    or, in a trace without module spans, ops -- of one phase, micro-batch and model chunk, with
    the micro-batch number written in it when it fits; with several model chunks per rank the
    second chunk is lighter), the optimizer in light purple, and pipeline recv waits (bubble plus
    transfer) hatched grey. A 1F1B schedule shows as a staircase. Works on DP-only traces too
    (then it shows the micro-batches of gradient accumulation on each rank).
Needs h5py, numpy and matplotlib (Debian: python3-h5py python3-matplotlib); uses the Agg backend,
so no display is needed. The trace must have /events (trace.level "op" or "module"). Traces
written before the process grid (no /metadata/grid, no pp/dp/tp event fields) are read as DP-only:
rank r at (pp 0, dp r, tp 0).
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
        meta = f["metadata"].attrs if "metadata" in f else {}
        grid = {
            "pp": int(meta.get("pipeline_model_parallel_size", 1)),
            "tp": int(meta.get("tensor_model_parallel_size", 1)),
            "dp": int(meta.get("data_parallel_size", world)),
            "chunks": int(meta.get("num_model_chunks", 1)),
            "micro": int(meta.get("num_micro_batches", 0)),
            "schedule": meta.get("pipeline_schedule", "none"),
            "bubble": float(meta.get("pipeline_bubble_theory", float("nan"))),
        }
        if isinstance(grid["schedule"], bytes):
            grid["schedule"] = grid["schedule"].decode()
        if "metadata" in f and "grid" in f["metadata"]:
            coords = np.asarray(f["metadata/grid"][()], dtype=np.int64).reshape(world, 3)
        else:  # a trace written before the process grid: DP only
            coords = np.stack([np.zeros(world, np.int64), np.arange(world), np.zeros(world, np.int64)], 1)
        grid["coords"] = coords
    return ev, names, world, grid


def merge_runs(spans, key_fn):
    """spans: rows of one rank sorted by start; merges consecutive rows with the same key into
    boxes (key, start_ns, end_ns)."""
    boxes = []
    for e in spans:
        k = key_fn(e)
        s0, s1 = int(e["start_ns"]), int(e["end_ns"])
        if boxes and boxes[-1][0] == k:
            boxes[-1][2] = max(boxes[-1][2], s1)
        else:
            boxes.append([k, s0, s1])
    return boxes


def chunk_of_layers(layers):
    """{layer: model chunk} for one rank: its layers split into contiguous runs (chunk 0, 1, ...)."""
    out, c, prev = {}, -1, None
    for layer in sorted(set(int(x) for x in layers if x >= 0)):
        if prev is None or layer != prev + 1:
            c += 1
        out[layer] = c
        prev = layer
    return out


def plot_pipeline(path, ev, names, world, grid, step, prefix):
    """(c): the pipeline timeline of one step (see the module docstring)."""
    inv = {k: {n: v for v, n in names[k].items()} for k in names}
    op_id, mod_id, ph_id, st_id = inv["op"], inv["module"], inv["phase"], inv["stream"]
    F, B, O = ph_id.get("forward", 0), ph_id.get("backward", 1), ph_id.get("optimizer", 2)
    compute = st_id.get("compute", 0)
    module_op, step_op = op_id.get("module", -1), op_id.get("step", -1)
    coll = {op_id[n] for n in ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "send", "recv")
            if n in op_id}
    recv_op, pipe_mod = op_id.get("recv", -1), mod_id.get("pipeline", -1)
    sel = ev[ev["step"] == step]
    coords = grid["coords"]
    spans = sel[sel["op"] == step_op]
    t0 = int(spans["start_ns"].min()) if len(spans) else int(sel["start_ns"].min())
    use_modules = np.any((sel["op"] == module_op) & (sel["stream"] == compute))
    unit = (sel["stream"] == compute) & (sel["op"] != step_op) & ~np.isin(sel["op"], list(coll))
    is_mod = sel["op"] == module_op
    fb = np.isin(sel["phase"], [F, B])
    # forward / backward from module spans when there are any, else ops; the optimizer (which
    # has no module spans) from its ops
    unit &= (fb & (is_mod if use_modules else ~is_mod)) | ((sel["phase"] == O) & ~is_mod)
    units = sel[unit]
    recvs = sel[(sel["op"] == recv_op) & (sel["module"] == pipe_mod)]

    ranks = sorted(range(world), key=lambda r: (int(coords[r][0]), int(coords[r][1]), int(coords[r][2]), r))
    row_of = {r: i for i, r in enumerate(ranks)}
    nch = max(1, grid["chunks"])
    fig_h = 1.6 + 0.42 * world
    fig, ax = plt.subplots(figsize=(14, fig_h))
    blues, oranges = plt.get_cmap("Blues"), plt.get_cmap("Oranges")
    boxes_by_row = {}
    t_max = 0.0
    for sp in spans:
        i = row_of.get(int(sp["rank"]))
        if i is None:
            continue
        ax.broken_barh([((sp["start_ns"] - t0) / 1e6, (sp["end_ns"] - sp["start_ns"]) / 1e6)],
                       (i - 0.45, 0.9), facecolors="0.96", edgecolors="0.75", linewidth=0.5, zorder=0)
        t_max = max(t_max, (sp["end_ns"] - t0) / 1e6)
    for r in ranks:
        i = row_of[r]
        rv = recvs[recvs["rank"] == r]
        if len(rv):
            ax.broken_barh([((a - t0) / 1e6, (b - a) / 1e6) for a, b in zip(rv["start_ns"], rv["end_ns"])],
                           (i - 0.32, 0.64), facecolors="0.85", edgecolors="0.45", hatch="////",
                           linewidth=0.4, zorder=1)
        u = units[units["rank"] == r]
        u = u[np.argsort(u["start_ns"], kind="stable")]
        chunk = chunk_of_layers(u["layer"]) if nch > 1 else {}
        last_chunk = max(chunk.values()) if chunk else 0

        def key(e):
            ph = int(e["phase"])
            if ph == O:
                return (O, -1, 0)
            layer = int(e["layer"])
            if layer >= 0:
                c = chunk.get(layer, 0)
            else:  # the embedding opens the first chunk; the final norm, head and loss close the last
                c = 0 if int(e["module"]) == mod_id.get("embedding", -1) else last_chunk
            return (ph, int(e["micro"]), c)

        boxes = merge_runs(u, key)
        boxes_by_row[i] = boxes
        for (ph, micro, c), a, b in boxes:
            if ph == O:
                col = "#c9b3e6"
            else:
                cmap = blues if ph == F else oranges
                shade = 0.75 - 0.12 * (micro % 3) if c == 0 else 0.42 - 0.08 * (micro % 2)
                col = cmap(shade)
            ax.broken_barh([((a - t0) / 1e6, (b - a) / 1e6)], (i - 0.32, 0.64), facecolors=col,
                           edgecolors="white", linewidth=0.4, zorder=2)
            t_max = max(t_max, (b - t0) / 1e6)
    ax.set_xlim(0, t_max * 1.01 if t_max > 0 else 1)
    ax.set_ylim(world - 0.5, -0.5)
    # micro-batch numbers where they fit (the axis width in pixels over its time range)
    fig.canvas.draw()
    px_per_ms = ax.get_window_extent().width / (ax.get_xlim()[1] - ax.get_xlim()[0])
    for i, boxes in boxes_by_row.items():
        for (ph, micro, c), a, b in boxes:
            if ph == O or micro < 0:
                continue
            label = str(micro)
            if (b - a) / 1e6 * px_per_ms >= 6.5 * len(label) + 2:
                ax.text((a + b) / 2e6 - t0 / 1e6, i, label, ha="center", va="center", fontsize=7,
                        color="white" if (ph == F and c == 0) else "black", zorder=3)
    labels = []
    for r in ranks:
        p, d, t = (int(x) for x in coords[r])
        labels.append("rank %d  (pp %d, dp %d, tp %d)" % (r, p, d, t))
    ax.set_yticks(range(world))
    ax.set_yticklabels(labels, fontsize=8)
    stages = [int(coords[r][0]) for r in ranks]
    for i in range(1, world):
        if stages[i] != stages[i - 1]:
            ax.axhline(i - 0.5, color="0.3", linewidth=0.8)
    ax.set_xlabel("time since rank 0's step start (ms)")
    if grid["pp"] > 1:
        sub = "PP %d x DP %d x TP %d, %s, %d chunk%s per rank, %d micro-batches; bubble in theory %.3f" % (
            grid["pp"], grid["dp"], grid["tp"], grid["schedule"], nch, "" if nch == 1 else "s",
            grid["micro"], grid["bubble"])
    else:
        sub = "PP %d x DP %d x TP %d (no pipeline parallelism)" % (grid["pp"], grid["dp"], grid["tp"])
    ax.set_title("%s: step %d, pipeline timeline\n%s" % (path, step, sub), fontsize=10)
    handles = [Patch(color=blues(0.75), label="forward (micro-batch no.)"),
               Patch(color=oranges(0.75), label="backward")]
    if nch > 1:
        handles += [Patch(color=blues(0.42), label="forward, later chunk"),
                    Patch(color=oranges(0.42), label="backward, later chunk")]
    handles += [Patch(color="#c9b3e6", label="optimizer"),
                Patch(facecolor="0.85", edgecolor="0.45", hatch="////", label="pipeline recv wait")]
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(prefix + "_pipeline.png", dpi=120)
    plt.close(fig)


def main():
    ap = argparse.ArgumentParser(description="Plot a dissect trace's events.")
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=None,
                    help="step to draw (default: the second step in the trace, else the first)")
    ap.add_argument("--out", default=None, help="output prefix (default: the trace path without .h5)")
    a = ap.parse_args()
    prefix = a.out or (a.trace[:-3] if a.trace.endswith(".h5") else a.trace)

    ev, names, world, grid = load(a.trace)
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

    # (c) pipeline timeline of one step
    plot_pipeline(a.trace, ev, names, world, grid, step, prefix)
    print("wrote %s_timeline.png, %s_ops.png and %s_pipeline.png" % (prefix, prefix, prefix))


if __name__ == "__main__":
    main()
