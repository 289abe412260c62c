#!/usr/bin/env python3
"""Checks that per-rank memory falls as ZeRO predicts (Rajbhandari et al. 2020, Sec. 5.1).

Usage: check_zero_memory.py --dp P CKPT.h5 STAGE0.h5 STAGE1.h5 STAGE2.h5 STAGE3.h5
The traces come from runs with P data-parallel ranks; the checkpoint gives the parameter groups
(embedding, each decoder layer, final norm + head). For every rank, the allocator's bytes in
/steps must equal the prediction exactly (fp32 everything on the CPU backend, groups padded to a
multiple of P), and the ratios against stage 0 must be the ZeRO ones: stage 1 optimizer states
/P; stage 2 also gradients /P; stage 3 also parameters /P -- up to padding and the one gathered
group buffers (stage 2: two gradient buckets; stage 3: also two slots of gathered parameters, the
group in use and the prefetched next one).
"""
import argparse
import math
import re
import sys

import h5py
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--dp", type=int, required=True)
ap.add_argument("ckpt")
ap.add_argument("traces", nargs=4)
a = ap.parse_args()
P, E = a.dp, 4  # ranks, bytes per element (fp32 act and acc on the CPU backend)

groups = {}
with h5py.File(a.ckpt, "r") as f:
    for name, d in f["params"].items():
        m = re.match(r"model\.layers\.(\d+)\.", name)
        key = ("layer", int(m.group(1))) if m else ("embed",) if "embed_tokens" in name else ("head",)
        groups[key] = groups.get(key, 0) + int(np.prod(d.shape))
n = list(groups.values())
pad = [math.ceil(x / P) * P for x in n]
shard = [p // P for p in pad]
pred = {
    0: dict(params=sum(pad) * E, grads=sum(pad) * E, optim=3 * sum(n) * E),
    1: dict(params=sum(pad) * E, grads=sum(pad) * E, optim=3 * sum(shard) * E),
    # stage 2: two gradient buckets of the largest group; stage 3: also two gathered-parameter slots
    2: dict(params=sum(pad) * E, grads=(sum(shard) + 2 * max(pad)) * E, optim=3 * sum(shard) * E),
    3: dict(params=(sum(shard) + 2 * max(pad)) * E, grads=(sum(shard) + 2 * max(pad)) * E, optim=3 * sum(shard) * E),
}
passed = failed = 0


def check(ok, msg):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + msg)
    passed += bool(ok)
    failed += not ok


got = {}
for stage, path in enumerate(a.traces):
    with h5py.File(path, "r") as f:
        s = f["steps"]
        got[stage] = {k: np.asarray(s[k + "_bytes"][-1]) for k in ("params", "grads", "optim")}
    for k in ("params", "grads", "optim"):
        v = got[stage][k]
        check(len(v) == P and np.all(v == pred[stage][k]),
              f"stage {stage} {k}: every rank holds {v.tolist()} bytes, predicted {pred[stage][k]}")
base = got[0]
slack = lambda k, st: (pred[st][k] - pred[0][k] / P) / pred[0][k]  # padding + working buffer share
for st, shrunk in ((1, ["optim"]), (2, ["optim", "grads"]), (3, ["optim", "grads", "params"])):
    for k in ("params", "grads", "optim"):
        r = float(got[st][k][0] / base[k][0])
        if k in shrunk:
            check(1 / P <= r <= 1 / P + slack(k, st) + 1e-12,
                  f"stage {st} {k}: {r:.3f} of stage 0 (ZeRO: 1/{P} = {1/P:.3f}, + {slack(k, st):.3f} padding and working buffers)")
        else:
            check(abs(r - 1) < 1e-12, f"stage {st} {k}: {r:.3f} of stage 0 (ZeRO: unchanged)")
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
