#!/usr/bin/python3
"""How a dissect op-level trace reduced the decoder layers' gradients over DP.

usage: check_reductions.py TRACE.h5 EXPECT

Counts the events of module "layer" with op all_reduce or reduce_scatter (all ranks and steps) by
op and when they ran: "in_backward" (traced with the micro-batch of a backward, i.e. started by a
layer's post-backward hook) or "after_backward" (micro-batch -1: after the last backward). EXPECT
is the only (op, when) pair the trace may hold, e.g. "reduce_scatter in_backward". Prints one
line "ok ..." or "FAIL ..." with the counts; exit status 1 on FAIL.
"""
import collections
import sys

import h5py


def main():
    path, expect = sys.argv[1], sys.argv[2]
    with h5py.File(path, "r") as f:
        ev = f["events"]
        ops = {v: k for k, v in h5py.check_enum_dtype(ev.dtype["op"]).items()}
        mods = {v: k for k, v in h5py.check_enum_dtype(ev.dtype["module"]).items()}
        e = ev[:]
    n = collections.Counter((ops[o], "in_backward" if mb >= 0 else "after_backward")
                            for o, m, mb in zip(e["op"], e["module"], e["micro"])
                            if mods[m] == "layer" and ops[o] in ("all_reduce", "reduce_scatter"))
    got = ", ".join(f"{o} {w} {c}" for (o, w), c in sorted(n.items())) or "none"
    if len(n) == 1 and " ".join(next(iter(n))) == expect:
        print(f"ok   {path}: layer gradients reduced by {got}")
        return 0
    print(f"FAIL {path}: want only '{expect}' layer reductions, the trace has: {got}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
