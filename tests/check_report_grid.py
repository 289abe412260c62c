#!/usr/bin/python3
"""Checks `dissect report` and examples/plot_trace.py on a real pipeline + tensor-parallel trace
(tests/test_report_grid.sh: 4 ranks, PP 2 x TP 2, 1F1B, 4 micro-batches per step, op level).

usage: check_report_grid.py --dissect BIN --srcdir DIR --trace T.h5 --tmp DIR
                            [--pp 2 --tp 2 --dp 1 --micro 4 --layers 4]

Checks, against the trace read with h5py:
  - /metadata: the grid sizes, schedule, micro-batches, pipeline_bubble_theory = (p-1)/(m+p-1);
    /metadata/grid holds every (pp, dp, tp) once, and every event's (pp, dp, tp) equals
    /metadata/grid[rank];
  - pipeline recv / send events only where the schedule puts them: the first stage receives only
    output gradients (phase backward) and sends only activations (forward), the last stage the
    reverse, each m per rank and step;
  - the report: the grid in the run summary; a "Pipeline (per stage)" table with one row per stage,
    the theory column = (p-1)/(m+p-1), the measured bubble in [0, 1] and between idle / step and
    (idle + recv wait) / step, busy <= step, and the bytes
    sent per step equal to the trace's; a "Tensor-parallel collectives per layer" table with every
    layer 0..L-1 and calls per step equal to the trace's; grid coordinates in the ranks table;
  - --chrome: one process track per rank named "rank R (pp P, dp D, tp T)", sorted by rank, and the
    micro-batch track showing the 1F1B order (first stage F0 .. F(p-1) then alternating B / F,
    last stage F0 B0 F1 B1 ...);
  - plot_trace.py writes PREFIX_pipeline.png (an image of plausible size);
  - a copy of the trace without the grid (no /metadata grid, no pp/dp/tp event fields, as written
    before the process grid) is reported as a DP-only job; a copy whose grid sizes do not multiply
    to the world size is refused with one error line naming the file.
The last line is "N passed, M failed"; exit status 1 if any failed.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import h5py
import numpy as np

passed = failed = 0


def check(ok, what, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   " + what)
    else:
        failed += 1
        print("FAIL " + what + (": " + detail if detail else ""))
    return ok


def section(text, title):
    """The lines of the report section whose title line starts with `title` (up to a blank line)."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(title):
            out = []
            for rest in lines[i + 1:]:
                if not rest.strip():
                    break
                out.append(rest)
            return out
    return None


def enum_ids(ds, field):
    return dict(h5py.check_enum_dtype(ds.dtype[field]))


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p.returncode, p.stdout, p.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dissect", required=True)
    ap.add_argument("--srcdir", required=True)
    ap.add_argument("--trace", required=True)
    ap.add_argument("--tmp", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--tp", type=int, default=2)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--micro", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    a = ap.parse_args()
    P, T, D, M, L = a.pp, a.tp, a.dp, a.micro, a.layers
    world = P * T * D
    theory = (P - 1) / (M + P - 1)

    # ---- the trace ----------------------------------------------------------------------
    with h5py.File(a.trace, "r") as f:
        md = f["metadata"].attrs
        check(int(f.attrs["world_size"]) == world, "world_size %d" % world)
        got = (int(md["pipeline_model_parallel_size"]), int(md["data_parallel_size"]),
               int(md["tensor_model_parallel_size"]))
        check(got == (P, D, T), "/metadata grid sizes PP x DP x TP = %d x %d x %d" % (P, D, T), str(got))
        sched = md["pipeline_schedule"]
        sched = sched.decode() if isinstance(sched, bytes) else str(sched)
        check(sched == "1f1b" and int(md["num_micro_batches"]) == M and int(md["num_model_chunks"]) == 1,
              "/metadata schedule 1f1b, %d micro-batches, 1 chunk" % M,
              "%s, %s, %s" % (sched, md["num_micro_batches"], md["num_model_chunks"]))
        check(abs(float(md["pipeline_bubble_theory"]) - theory) < 1e-12,
              "/metadata pipeline_bubble_theory = (p-1)/(m+p-1) = %.4f" % theory,
              str(md["pipeline_bubble_theory"]))
        grid = np.asarray(f["metadata/grid"][()], dtype=np.int64)
        check(grid.shape == (world, 3) and
              sorted(map(tuple, grid.tolist())) == [(p, d, t) for p in range(P) for d in range(D) for t in range(T)],
              "/metadata/grid holds every (pp, dp, tp) once", str(grid.tolist()))
        ds = f["events"]
        ev = ds[()]
        ops, mods, phs = enum_ids(ds, "op"), enum_ids(ds, "module"), enum_ids(ds, "phase")
        steps_rows = [int(s) for s in f["steps"]["step"]]
    coords = np.stack([ev["pp"], ev["dp"], ev["tp"]], 1).astype(np.int64)
    bad = np.flatnonzero(np.any(coords != grid[ev["rank"]], axis=1))
    check(len(ev) > 0 and len(bad) == 0, "every event's (pp, dp, tp) equals /metadata/grid[rank] (%d events)" % len(ev),
          "%d differ, e.g. rank %d at %s" % (len(bad), ev["rank"][bad[0]], coords[bad[0]].tolist()) if len(bad) else "")
    stage = grid[:, 0]
    steps = sorted(set(int(s) for s in ev["step"] if s > 0))
    check(steps == steps_rows, "events for every /steps row", "%s vs %s" % (steps, steps_rows))
    pipe = ev["module"] == mods["pipeline"]
    recv = ev[pipe & (ev["op"] == ops["recv"])]
    send = ev[pipe & (ev["op"] == ops["send"])]
    # the process group of each collective and transfer (field group): pipeline sends and receives
    # on pp, collectives of the compute modules in the forward and backward on tp or (the
    # parameter groups' gradient reductions: ZeRO-2 here) dp, every other event none
    grp = enum_ids(ds, "group") if "group" in ds.dtype.names else {}
    if check(set(grp) == {"none", "world", "dp", "tp", "pp"}, "/events has the enum field group", str(grp)):
        ptp = np.isin(ev["op"], [ops["send"], ops["recv"]])
        coll = np.isin(ev["op"], [ops[n] for n in ("all_reduce", "all_gather", "reduce_scatter", "broadcast")])
        check(len(send) > 0 and np.all(ev["group"][ptp] == grp["pp"]), "every send and recv has group pp")
        check(np.all(ev["group"][~ptp & ~coll] == grp["none"]), "every non-collective event has group none")
        cg = ev["group"][coll]
        check(np.all(np.isin(cg, [grp["world"], grp["dp"], grp["tp"]])) and np.any(cg == grp["tp"]) and
              np.any(cg == grp["dp"]), "collectives are on world, dp or tp (both tp and dp present)",
              str(sorted(set(cg.tolist()))))
    for name, sel, first_phase, last_phase in (("recv", recv, "backward", "forward"),
                                               ("send", send, "forward", "backward")):
        for r in range(world):
            mine = sel[sel["rank"] == r]
            s = int(stage[r])
            want = set()
            if s == 0:
                want.add(phs[first_phase])
            if s == P - 1:
                want.add(phs[last_phase])
            if 0 < s < P - 1:
                want = {phs["forward"], phs["backward"]}
            per_step = {st: int(np.sum(mine["step"] == st)) for st in steps}
            n_want = M * len(want)
            check(set(int(x) for x in mine["phase"]) == want and all(v == n_want for v in per_step.values()),
                  "rank %d (stage %d): %s events only in phase %s, %d per step" %
                  (r, s, name, "/".join(sorted(k for k, v in phs.items() if v in want)), n_want),
                  "phases %s, per step %s" % (sorted(set(int(x) for x in mine["phase"])), per_step))

    # ---- the report ---------------------------------------------------------------------
    chrome = os.path.join(a.tmp, "grid.json")
    rc, out, err = run([a.dissect, "report", a.trace, "--chrome", chrome])
    check(rc == 0 and not err, "dissect report exits 0", err.strip())
    with open(os.path.join(a.tmp, "report.txt"), "w") as fo:
        fo.write(out)
    sel_steps = steps[1:] if len(steps) > 1 else steps  # the default range leaves out step 1
    check(re.search(r"^\s+grid \(PP x DP x TP\)\s+%d x %d x %d\s*$" % (P, D, T), out, re.M) is not None,
          "run summary: grid (PP x DP x TP) %d x %d x %d" % (P, D, T))
    check(re.search(r"^\s+sequence parallel\s+no\s*$", out, re.M) is not None, "run summary: sequence parallel no")
    check(re.search(r"^\s+pipeline schedule\s+1f1b \(1 model chunk per rank; bubble in theory %.3f\)" % theory,
                    out, re.M) is not None, "run summary: schedule, chunks, theory")
    check(re.search(r"^\s+micro-batches per step\s+%d\s*$" % M, out, re.M) is not None,
          "run summary: %d micro-batches per step" % M)

    pl = section(out, "Pipeline (per stage")
    if check(pl is not None, "report has a 'Pipeline (per stage)' table"):
        rows = [ln.split() for ln in pl[1:] if re.match(r"^\s+\d+\s", ln)]
        check([int(r[0]) for r in rows] == list(range(P)), "pipeline table: one row per stage 0..%d" % (P - 1),
              str([r[0] for r in rows]))
        for r in rows:
            if len(r) != 10:
                check(False, "pipeline row of 10 columns", " ".join(r))
                continue
            st, nr, step_ms, busy, recv_ms, send_ms, idle_ms, mib, bub, th = r
            check(int(nr) == world // P, "stage %s: %d ranks" % (st, world // P), nr)
            check(abs(float(th) - theory) < 5e-4, "stage %s: theory %s = %.3f" % (st, th, theory))
            check(0 <= float(bub) <= 1, "stage %s: measured bubble %s in [0, 1]" % (st, bub))
            # the bubble counts the idle time (and the recv wait in forward/backward, <= recv wait)
            check(float(idle_ms) / float(step_ms) - 1e-3 <= float(bub) <=
                  (float(idle_ms) + float(recv_ms)) / float(step_ms) + 1e-3,
                  "stage %s: idle/step <= bubble %s <= (idle + recv wait)/step" % (st, bub),
                  "idle %s recv %s step %s" % (idle_ms, recv_ms, step_ms))
            check(0 < float(busy) <= float(step_ms), "stage %s: 0 < busy %s <= step %s ms" % (st, busy, step_ms))
            check(float(recv_ms) > 0 and float(send_ms) >= 0, "stage %s: recv wait %s ms > 0" % (st, recv_ms))
        in_range = np.isin(send["step"], sel_steps)
        want_bytes = float(send["bytes"][in_range].sum()) / len(sel_steps)
        m = [re.search(r"bytes sent between stages per step \(all ranks\): (\d+)", ln) for ln in pl]
        m = [x for x in m if x]
        check(m and abs(float(m[0].group(1)) - want_bytes) < 0.5,
              "pipeline table: bytes sent per step = %.0f (the trace's)" % want_bytes,
              m[0].group(0) if m else "no bytes line")

    tpt = section(out, "Tensor-parallel collectives per layer")
    if check(tpt is not None, "report has a 'Tensor-parallel collectives per layer' table"):
        rows = {ln.split()[0]: ln.split() for ln in tpt[1:]}
        check(all(str(layer) in rows for layer in range(L)), "TP table lists every layer 0..%d" % (L - 1),
              str(sorted(rows)))
        tpops = {"all_reduce": 0, "all_gather": 1, "reduce_scatter": 2}
        tpmods = [mods[n] for n in ("embedding", "attention", "mlp", "rmsnorm", "lm_head")]
        tsel = ev[np.isin(ev["step"], sel_steps) & np.isin(ev["module"], tpmods) &
                  np.isin(ev["phase"], [phs["forward"], phs["backward"]]) &
                  np.isin(ev["op"], [ops[n] for n in tpops])]
        for layer in range(L):
            if str(layer) not in rows:
                continue
            lrow = rows[str(layer)]
            le = tsel[tsel["layer"] == layer]
            nranks = len(set(int(x) for x in le["rank"]))
            ok = len(lrow) == 10 and int(lrow[1]) == nranks and nranks == T * D
            want = []
            for name, k in tpops.items():
                n = np.sum(le["op"] == ops[name]) / max(nranks, 1) / len(sel_steps)
                want.append(n)
                ok = ok and len(lrow) == 10 and abs(float(lrow[2 + 2 * k]) - n) < 0.051
            check(ok and sum(want) > 0, "TP table layer %d: %d ranks, calls per step AR/AG/RS = %s" %
                  (layer, T * D, "/".join("%.1f" % x for x in want)), " ".join(lrow))
        # outside the layers (one row per module): only the TP group's collectives; the DP
        # gradient reductions of the embedding's and the head's parameter groups stay out
        for name in ("embedding", "lm_head"):
            le = tsel[(tsel["layer"] == -1) & (tsel["module"] == mods[name])]
            if grp:
                le = le[le["group"] == grp["tp"]]
            nranks = len(set(int(x) for x in le["rank"]))
            want = [np.sum(le["op"] == ops[n]) / max(nranks, 1) / len(sel_steps) for n in tpops]
            lrow = rows.get(name)
            ok = (lrow is None and sum(want) == 0) or (
                lrow is not None and len(lrow) == 10 and int(lrow[1]) == nranks and
                all(abs(float(lrow[2 + 2 * k]) - want[k]) < 0.051 for k in range(3)))
            check(ok, "TP table row %s: calls per step AR/AG/RS = %s (the TP group's only)" %
                  (name, "/".join("%.1f" % x for x in want)), " ".join(lrow) if lrow else "no row")

    rk = section(out, "Ranks (")
    if check(rk is not None, "report has a 'Ranks' table"):
        ok = True
        for ln in rk[1:]:
            w = ln.split()
            if w and w[0].isdigit():
                r = int(w[0])
                ok = ok and [int(x) for x in w[-3:]] == grid[r].tolist()
        check(ok and rk[0].split()[-3:] == ["pp", "dp", "tp"], "ranks table: each rank's pp dp tp")

    # ---- Chrome export ------------------------------------------------------------------
    try:
        d = json.load(open(chrome))
        cev = d["traceEvents"]
    except Exception as e:  # noqa: BLE001
        check(False, "--chrome writes parseable JSON", str(e))
        cev = []
    pnames = {e["pid"]: e["args"]["name"] for e in cev if e.get("ph") == "M" and e["name"] == "process_name"}
    want_names = {r: "rank %d (pp %d, dp %d, tp %d)" % (r, *grid[r].tolist()) for r in range(world)}
    check(len(pnames) == world and pnames == want_names, "chrome: %d process tracks named with coordinates" % world,
          str(pnames))
    sidx = {e["pid"]: e["args"]["sort_index"] for e in cev if e.get("ph") == "M" and e["name"] == "process_sort_index"}
    check(sidx == {r: r for r in range(world)}, "chrome: processes sorted by rank", str(sidx))
    x = [e for e in cev if e.get("ph") == "X"]
    check({e["pid"] for e in x} == set(range(world)), "chrome: events on every rank's track")
    tnames = {(e["pid"], e["tid"]): e["args"]["name"] for e in cev if e.get("ph") == "M" and e["name"] == "thread_name"}
    check(all((r, 0) in tnames and tnames[(r, 0)] == "compute" and (r, 1) in tnames for r in range(world)),
          "chrome: a thread per stream")
    mb = [e for e in x if e.get("cat") == "micro-batch"]
    st = sel_steps[0]
    for r in range(world):
        seq = [e["name"] for e in sorted((e for e in mb if e["pid"] == r and e["args"]["step"] == st),
                                         key=lambda e: e["ts"])]
        s = int(stage[r])
        warm = min(P - s - 1, M)  # 1F1B: warm-up forwards, then one forward one backward, then cool-down
        want = ["F%d" % k for k in range(warm)]
        f_next, b_next = warm, 0
        while f_next < M:
            want += ["F%d" % f_next, "B%d" % b_next]
            f_next += 1
            b_next += 1
        want += ["B%d" % k for k in range(b_next, M)]
        check(seq == want, "chrome: rank %d (stage %d) micro-batch track of step %d is 1F1B: %s" %
              (r, s, st, " ".join(want)), " ".join(seq))

    # ---- plot_trace.py ------------------------------------------------------------------
    prefix = os.path.join(a.tmp, "plot")
    rc, pout, perr = run([a.python, os.path.join(a.srcdir, "examples", "plot_trace.py"), a.trace,
                          "--step", str(st), "--out", prefix])
    png = prefix + "_pipeline.png"
    ok = rc == 0 and os.path.exists(png) and os.path.getsize(png) > 10000
    if ok:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        img = plt.imread(png)
        ok = img.shape[0] >= 200 and img.shape[1] >= 800
    check(ok, "plot_trace.py writes plot_pipeline.png", (perr or pout).strip()[-400:])

    # ---- traces without the grid; a grid that does not fit ------------------------------
    old = os.path.join(a.tmp, "old.h5")
    with h5py.File(a.trace, "r") as src, h5py.File(old, "w") as dst:
        for k, v in src.attrs.items():
            dst.attrs[k] = v
        g = dst.create_group("metadata")
        for k, v in src["metadata"].attrs.items():
            if k in ("config_json", "trace_level", "device", "blas", "mpi_version", "hdf5_version"):
                g.attrs[k] = v
        src.copy("steps", dst)
        e = src["events"][()]
        names = [n for n in e.dtype.names if n not in ("pp", "dp", "tp")]
        new = np.zeros(len(e), np.dtype([(n, src["events"].dtype[n]) for n in names]))
        for n in names:
            new[n] = e[n]
        dst.create_dataset("events", data=new, chunks=True, maxshape=(None,))
    rc, oout, oerr = run([a.dissect, "report", old, "--chrome", os.path.join(a.tmp, "old.json")])
    check(rc == 0 and re.search(r"grid \(PP x DP x TP\)\s+1 x %d x 1 \(not recorded" % world, oout) is not None
          and "Pipeline (per stage" not in oout and "Step breakdown" in oout,
          "a trace without the grid: reported as DP = %d" % world, (oerr or oout).strip()[-400:])
    onames = {}
    try:
        onames = {e["pid"]: e["args"]["name"] for e in json.load(open(os.path.join(a.tmp, "old.json")))["traceEvents"]
                  if e.get("ph") == "M" and e["name"] == "process_name"}
    except Exception:  # noqa: BLE001
        pass
    check(onames == {r: "rank %d" % r for r in range(world)}, "a trace without the grid: chrome tracks 'rank R'",
          str(onames))
    bad_grid = os.path.join(a.tmp, "badgrid.h5")
    shutil.copy(a.trace, bad_grid)
    with h5py.File(bad_grid, "r+") as f:
        f["metadata"].attrs["tensor_model_parallel_size"] = np.int32(3)
    rc, bout, berr = run([a.dissect, "report", bad_grid])
    check(rc == 1 and not bout and len(berr.strip().splitlines()) == 1 and "badgrid.h5" in berr,
          "a grid that does not fit the world size: one error line", (berr or bout).strip()[-400:])

    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
