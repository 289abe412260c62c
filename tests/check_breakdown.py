#!/usr/bin/env python3
"""The step breakdown's columns at trace levels step and module (tests/test_trace_e2e.sh).

usage: check_breakdown.py STEP.h5 MODULE.h5 MODULE_REPORT.txt

STEP.h5 (level step): for every step, rank 0's forward_s + backward_s + optimizer_s + comm_s
add up to at most step_time_s (rank 0's step) plus 2 us of rounding, and comm_s is positive
somewhere (the run has collectives): the collectives a host-timed phase calls are counted in
comm_s, not in that phase too (worker.h, dx_step_stats).
MODULE.h5 and its `dissect report` (level module): the report's "mean  rank 0" row of the step
breakdown has an optimizer column of at least half the mean of /steps' optimizer_s of rank 0 over
the report's steps (all but the first): the optimizer's module span is in the trace.
Prints one line per check; exit 1 if any fails.
"""
import re
import sys

import h5py
import numpy as np

failed = 0


def check(ok, what):
    global failed
    print(("ok   " if ok else "FAIL ") + what)
    failed += 0 if ok else 1


def main(step_h5, module_h5, module_txt):
    s = h5py.File(step_h5, "r")["steps"][()]
    parts = sum(s[k][:, 0] for k in ("forward_s", "backward_s", "optimizer_s", "comm_s"))
    over = [(int(st), p * 1e3, t * 1e3) for st, p, t in zip(s["step"], parts, s["step_time_s"]) if p > t + 2e-6]
    check(len(s) > 0 and not over,
          "level step: rank 0's forward + backward + optimizer + comm <= its step time in all %d steps%s"
          % (len(s), "" if not over else "; over in (step, sum ms, step ms) " + repr(over[:4])))
    check(float(np.max(s["comm_s"])) > 0, "level step: comm_s > 0 in some step (max %.6f s)" % float(np.max(s["comm_s"])))

    m = h5py.File(module_h5, "r")["steps"][()]
    m = m[m["step"] > int(m["step"].min())]
    want = float(np.mean(m["optimizer_s"][:, 0])) * 1e3
    text = open(module_txt).read()
    sec = text.split("Step breakdown", 1)[1] if "Step breakdown" in text else ""
    row = re.search(r"^\s*mean\s+rank 0\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)",
                    sec, re.M)
    got = float(row[3]) if row else float("nan")
    check(row is not None and got >= 0.5 * want,
          "level module: the report's optimizer column %.3f ms >= half of /steps' optimizer_s %.3f ms"
          % (got, want))


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    try:
        main(*sys.argv[1:])
    except Exception as e:  # a crash counts as one failed check
        check(False, "reading: %s: %s" % (type(e).__name__, e))
    sys.exit(1 if failed else 0)
