#!/usr/bin/python3
"""How a dissect op-level trace reduced the decoder layers' gradients over DP.

usage: check_reductions.py TRACE.h5 EXPECT [rounded]

Counts the events of module "layer" with op all_reduce or reduce_scatter (all ranks and steps) by
op and when they ran: "in_backward" (traced with the micro-batch of a backward, i.e. started by a
layer's post-backward hook) or "after_backward" (micro-batch -1: after the last backward). EXPECT
is the only (op, when) pair the trace may hold, e.g. "reduce_scatter in_backward". Prints one
line "ok ..." or "FAIL ..." with the counts; exit status 1 on FAIL.

With "rounded" (DX_ZERO_REDUCE_ACT=1: reduce-scatters in the compute dtype X), every layer
reduce-scatter must come with a memcpy of the same rank, step, micro-batch and layer whose bytes
are (A + X) / X times the reduce-scatter's (the gradient bucket of A rounded to X: 2 where
X == A, the CPU; 3 for fp32 -> bf16), and a layer's adds in a step (the shard accumulated into A,
once the collective is waited for: later in the backward, or in the optimizer step) must be as
many as its reduce-scatters.
"""
import collections
import sys

import h5py


def main():
    path, expect = sys.argv[1], sys.argv[2]
    rounded = len(sys.argv) > 3 and sys.argv[3] == "rounded"
    with h5py.File(path, "r") as f:
        ev = f["events"]
        ops = {v: k for k, v in h5py.check_enum_dtype(ev.dtype["op"]).items()}
        mods = {v: k for k, v in h5py.check_enum_dtype(ev.dtype["module"]).items()}
        e = ev[:]
    n = collections.Counter((ops[o], "in_backward" if mb >= 0 else "after_backward")
                            for o, m, mb in zip(e["op"], e["module"], e["micro"])
                            if mods[m] == "layer" and ops[o] in ("all_reduce", "reduce_scatter"))
    got = ", ".join(f"{o} {w} {c}" for (o, w), c in sorted(n.items())) or "none"
    if rounded:
        key = lambda i: (int(e["rank"][i]), int(e["step"][i]), int(e["micro"][i]), int(e["layer"][i]))
        copies, adds, rs = collections.defaultdict(set), collections.Counter(), collections.Counter()
        key3 = lambda i: (int(e["rank"][i]), int(e["step"][i]), int(e["layer"][i]))
        for i in range(len(e)):
            if mods[e["module"][i]] != "layer":
                continue
            if ops[e["op"][i]] == "memcpy":
                copies[key(i)].add(int(e["bytes"][i]))
            elif ops[e["op"][i]] == "add":
                adds[key3(i)] += 1
        missing = 0
        for i in range(len(e)):
            if mods[e["module"][i]] == "layer" and ops[e["op"][i]] == "reduce_scatter":
                b = int(e["bytes"][i])
                rs[key3(i)] += 1
                if not copies[key(i)] & {2 * b, 3 * b}:
                    missing += 1
        missing += sum(abs(rs[k] - adds[k]) for k in set(rs) | set(adds))
        got += f"; reduce-scatters without the rounding copy, or adds not matching them: {missing}"
        if missing:
            print(f"FAIL {path}: {got}")
            return 1
    if len(n) == 1 and " ".join(next(iter(n))) == expect:
        print(f"ok   {path}: layer gradients reduced by {got}")
        return 0
    print(f"FAIL {path}: want only '{expect}' layer reductions, the trace has: {got}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
