#!/usr/bin/env python3
"""Where the compute stream idles inside a step of a dissect op-level trace (trace.level "op").

usage: step_gaps.py TRACE.h5 [--rank 0] [--skip-steps 1] [--top 12]

For each step after the skipped ones, takes rank RANK's op events on the compute stream (not the
module and step spans), merges overlapping ones and measures the gaps between them, from the
step span's start (op "step") to its end. Each gap is named by the ops on either side of it
(phase/module/op, micro-batch) and by whether the side streams ("optimizer", "aux", "comm")
had a kernel running during it. Prints, per step: step ms, compute-stream busy ms, idle ms and
the idle's split (before the first op, between ops inside micro-batches, between micro-batches,
after the last backward op, after the last op); then the largest kinds of gap, summed over the
steps (ms per step), with the count per step and the median gap (us).
"""
import argparse
import sys
from collections import defaultdict

import h5py
import numpy as np


def merged(iv):
    out = []
    for s, e, i in sorted(iv):
        if out and s <= out[-1][1]:
            if e > out[-1][1]:
                out[-1][1] = e
                out[-1][3] = i
        else:
            out.append([s, e, i, i])  # start, end, first event index, last event index
    return out


def busy_in(iv, s, e):
    """ns of [s, e) covered by the (merged) intervals iv"""
    t = 0
    for a, b, *_ in iv:
        lo, hi = max(a, s), min(b, e)
        if hi > lo:
            t += hi - lo
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--skip-steps", type=int, default=1)
    ap.add_argument("--top", type=int, default=12)
    a = ap.parse_args()
    try:
        with h5py.File(a.trace, "r") as f:
            if "events" not in f:
                sys.exit(f"step_gaps.py: {a.trace}: no /events (trace level step); "
                         "record the run with --trace-level op")
            ev = f["events"][:]
    except OSError as e:
        sys.exit(f"step_gaps.py: {a.trace}: {e}")
    en = {k: dict((v, n) for n, v in h5py.check_enum_dtype(ev.dtype[k]).items())
          for k in ("phase", "module", "op", "stream")}
    op_id = {v: k for k, v in en["op"].items()}
    st_id = {v: k for k, v in en["stream"].items()}
    ev = ev[(ev["rank"] == a.rank) & (ev["step"] > a.skip_steps)]
    if not np.any((ev["op"] == op_id["step"]) & (ev["stream"] == st_id["host"])) or \
            not np.any((ev["stream"] == st_id["compute"]) & (ev["op"] != op_id["module"])):
        sys.exit(f"step_gaps.py: {a.trace}: no step spans with op events on the compute stream for rank "
                 f"{a.rank} after step {a.skip_steps} (trace level op, --rank, --skip-steps)")
    kinds = defaultdict(list)
    print(f"{'step':>4} {'step ms':>8} {'busy ms':>8} {'idle ms':>8} {'first':>7} {'in mb':>7} "
          f"{'betw mb':>7} {'bwd end':>7} {'last':>7}   (idle ms; side = a side stream ran)")
    steps = sorted(set(int(s) for s in ev["step"]))
    tot = defaultdict(float)
    for st in steps:
        es = ev[ev["step"] == st]
        span = es[es["op"] == op_id["step"]]
        if len(span) == 0:
            continue
        s0, s1 = int(span["start_ns"].min()), int(span["end_ns"].max())
        ops = (es["stream"] == st_id["compute"]) & (es["op"] != op_id["module"]) & (es["op"] != op_id["step"])
        c = es[ops]

        def clipped(evs):  # (start, end, index) inside the step span
            return [(max(int(e["start_ns"]), s0), min(int(e["end_ns"]), s1), i) for i, e in enumerate(evs)
                    if min(int(e["end_ns"]), s1) > max(int(e["start_ns"]), s0)]

        iv = merged(clipped(c))
        side = {}
        for name in ("optimizer", "aux", "comm"):
            if name in st_id:
                side[name] = merged(clipped(es[(es["stream"] == st_id[name]) & (es["op"] != op_id["module"])]))
        if not iv:
            continue
        busy = sum(e - s for s, e, *_ in iv)
        split = defaultdict(float)

        def name(e):
            return f"{en['phase'][int(e['phase'])]}/{en['module'][int(e['module'])]}/{en['op'][int(e['op'])]}"

        gaps = [(s0, iv[0][0], None, c[iv[0][2]])]
        for k in range(1, len(iv)):
            gaps.append((iv[k - 1][1], iv[k][0], c[iv[k - 1][3]], c[iv[k][2]]))
        gaps.append((iv[-1][1], s1, c[iv[-1][3]], None))
        for g0, g1, pe, ne in gaps:
            d = g1 - g0
            if d <= 0:
                continue
            if pe is None:
                where = "first"
            elif ne is None:
                where = "last"
            elif int(pe["micro"]) != int(ne["micro"]):
                where = "betw mb" if int(ne["micro"]) >= 0 else "bwd end"
            else:
                where = "in mb"
            split[where] += d
            ran = [n for n, v in side.items() if busy_in(v, g0, g1) > d // 2]
            key = (where, name(pe) if pe is not None else "-", name(ne) if ne is not None else "-",
                   ",".join(ran) or "-")
            kinds[key].append(d)
        idle = (s1 - s0) - busy
        for k in ("first", "in mb", "betw mb", "bwd end", "last"):
            tot[k] += split[k]
        tot["step"] += s1 - s0
        tot["busy"] += busy
        tot["n"] += 1
        print(f"{st:>4} {(s1 - s0) * 1e-6:8.2f} {busy * 1e-6:8.2f} {idle * 1e-6:8.2f} "
              + " ".join(f"{split[k] * 1e-6:7.2f}" for k in ("first", "in mb", "betw mb", "bwd end", "last")))
    n = int(tot["n"])
    if not n:
        sys.exit(f"step_gaps.py: {a.trace}: no step of rank {a.rank} has compute-stream ops inside its span")
    print(f"mean {tot['step'] * 1e-6 / n:8.2f} {tot['busy'] * 1e-6 / n:8.2f} "
          f"{(tot['step'] - tot['busy']) * 1e-6 / n:8.2f} "
          + " ".join(f"{tot[k] * 1e-6 / n:7.2f}" for k in ("first", "in mb", "betw mb", "bwd end", "last")))
    print(f"\nlargest gaps by kind (ms per step, count per step, median us; side = side streams busy)")
    rows = sorted(kinds.items(), key=lambda kv: -sum(kv[1]))[: a.top]
    for (where, p, q, ran), ds in rows:
        print(f"{sum(ds) * 1e-6 / n:7.3f} {len(ds) / n:7.1f} {np.median(ds) * 1e-3:9.1f}  {where:<8} {p} -> {q}  side {ran}")


if __name__ == "__main__":
    main()
