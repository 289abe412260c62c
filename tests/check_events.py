#!/usr/bin/python3
"""Consistency checks of the /events of a dissect trace (layout: src/coordinator/trace.h).

usage: check_events.py TRACE.h5 [--require-op gemm [--require-op all_reduce ...]]

For every (rank, step) with step > 0 in /events (one line per check and rank, over all steps):
  - the step span (op "step") exists, exactly once;
  - every other event of that rank and step lies within the span, except that an op on stream
    "optimizer" (AdamW beside the next forward, which runs on into the next step) only starts
    after the span's start;
    (Ops on stream "aux", RMSNorm's backward beside a weight gradient, lie within the span and
    count as the other streams' do below.)
  - the ops on the compute and host streams do not overlap each other: their summed durations,
    plus the time covered only by other streams' ops (exposed communication), plus idle
    (= the span minus the union of all ops), equal the span within 2%. (Module and step spans
    are not ops.)
and, over the run:
  - every rank 0..world_size-1 has events for every step in /steps;
  - the op names given with --require-op occur.
The last line is "N passed, M failed"; exit status 1 if any failed.
"""
import argparse
import sys

import h5py
import numpy as np

passed = failed = 0
TOLERANCE = 0.02


def check(ok, what):
    global passed, failed
    ok = bool(ok)
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def union_len(s, e):
    """Length of the union of the intervals [s[i], e[i])."""
    if len(s) == 0:
        return 0
    order = np.argsort(s, kind="stable")
    s = s[order].astype(np.float64)
    e = e[order].astype(np.float64)
    m = np.maximum.accumulate(e)
    prev = np.concatenate(([-np.inf], m[:-1]))
    return float(np.sum(np.maximum(0.0, m - np.maximum(s, prev))))


def some(steps, n=5):
    steps = list(steps)
    return ", ".join(str(s) for s in steps[:n]) + (" ..." if len(steps) > n else "")


def main(path, required):
    with h5py.File(path, "r") as f:
        if f.attrs.get("format") != "dissect-trace":
            check(False, "%s is a dissect trace (format %r)" % (path, f.attrs.get("format")))
            return
        world = int(f.attrs["world_size"])
        steps = sorted(set(int(s) for s in f["steps"]["step"])) if "steps" in f else []
        check("events" in f, "/events exists")
        if "events" not in f:
            return
        ds = f["events"]
        names = {}
        for k in ("phase", "module", "op", "stream"):
            mapping = h5py.check_enum_dtype(ds.dtype[k])
            check(mapping is not None, "/events %s is an HDF5 enum" % k)
            names[k] = {v: n for n, v in (mapping or {}).items()}
        ev = ds[()]
    op_val = {n: v for v, n in names["op"].items()}
    stream_val = {n: v for v, n in names["stream"].items()}
    step_op, module_op = op_val.get("step", -1), op_val.get("module", -1)
    compute_streams = [stream_val.get("compute", -1), stream_val.get("host", -1)]
    side_stream = stream_val.get("optimizer", -1)
    print("%s: %d events, world size %d, %d steps in /steps" % (path, len(ev), world, len(steps)))

    # times are ns since the run's start on rank 0's clock: nothing precedes the start, and no
    # step outlasts the whole run (catches device timestamps that were never resolved)
    check(len(ev) == 0 or int(ev["start_ns"].min()) >= 0,
          "every event starts after the run's start (min start %d ns)" % (int(ev["start_ns"].min()) if len(ev) else 0))
    with h5py.File(path, "r") as f:
        run_ns = float(np.sum(f["steps"]["step_time_s"])) * 1e9 if "steps" in f else 0.0
    dur = (ev["end_ns"] - ev["start_ns"]).astype(np.float64)
    check(len(ev) == 0 or dur.max() <= 1.5 * run_ns + 1e9,
          "no event lasts longer than the run (longest %.3f s, run %.3f s)" % (dur.max() / 1e9 if len(ev) else 0, run_ns / 1e9))
    ev = ev[ev["step"] > 0]
    order = np.lexsort((ev["start_ns"], ev["step"], ev["rank"]))
    ev = ev[order]
    key = ev["rank"].astype(np.int64) * (1 << 32) + ev["step"].astype(np.int64)
    bounds = np.flatnonzero(np.diff(key)) + 1
    groups = np.split(np.arange(len(ev)), bounds) if len(ev) else []

    by_rank = {}  # rank -> lists of failing steps per check
    for idx in groups:
        g = ev[idx]
        rank, step = int(g["rank"][0]), int(g["step"][0])
        bad = by_rank.setdefault(rank, {"span": [], "within": [], "sum": [], "n": 0, "worst": 0.0})
        bad["n"] += 1
        is_span = g["op"] == step_op
        if np.sum(is_span) != 1:
            bad["span"].append(step)
            continue
        s0, s1 = int(g["start_ns"][is_span][0]), int(g["end_ns"][is_span][0])
        rest = g[~is_span]
        side = rest["stream"] == side_stream
        if np.any(rest["start_ns"] < s0) or np.any(rest["end_ns"][~side] > s1) or np.any(
                rest["end_ns"] < rest["start_ns"]):
            bad["within"].append(step)
        ops = rest[rest["op"] != module_op]
        s = np.clip(ops["start_ns"], s0, s1)
        e = np.clip(ops["end_ns"], s0, s1)
        on_compute = np.isin(ops["stream"], compute_streams)
        span = s1 - s0
        sum_compute = float(np.sum(e[on_compute] - s[on_compute]))
        u_all = union_len(s, e)
        u_compute = union_len(s[on_compute], e[on_compute])
        other_only = u_all - u_compute
        idle = span - u_all
        err = abs(sum_compute + other_only + idle - span) / span if span > 0 else 1.0
        bad["worst"] = max(bad["worst"], err)
        if err > TOLERANCE:
            bad["sum"].append(step)

    for rank in sorted(by_rank):
        b = by_rank[rank]
        check(not b["span"], "rank %d: one step span in each of its %d steps%s"
              % (rank, b["n"], "" if not b["span"] else "; missing or repeated in steps " + some(b["span"])))
        check(not b["within"], "rank %d: every event lies within its step span%s"
              % (rank, "" if not b["within"] else "; not in steps " + some(b["within"])))
        check(not b["sum"], "rank %d: compute+host op time + exposed comm + idle = step time "
              "within 2%% (worst %.3f%%)%s" % (rank, 100 * b["worst"],
                                              "" if not b["sum"] else "; off in steps " + some(b["sum"])))

    present = set(zip(ev["rank"].tolist(), ev["step"].tolist()))
    for rank in range(world):
        missing = [s for s in steps if (rank, s) not in present]
        check(not missing, "rank %d has events for all %d steps of /steps%s"
              % (rank, len(steps), "" if not missing else "; none for steps " + some(missing)))
    extra = sorted(set(r for r, _ in present) - set(range(world)))
    check(not extra, "events name only ranks 0..%d%s" % (world - 1, "" if not extra else ": also %r" % extra))
    seen = set(names["op"].get(int(v), "?") for v in np.unique(ev["op"]))
    for op in required:
        check(op in seen, "op '%s' occurs" % op)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--require-op", action="append", default=[], metavar="OP")
    a = ap.parse_args()
    try:
        main(a.trace, a.require_op)
    except Exception as e:  # a crash counts as one failed check
        check(False, "reading %s: %s: %s" % (a.trace, type(e).__name__, e))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
