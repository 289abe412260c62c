#!/usr/bin/env python3
"""Per-GEMM rates of a dissect op-level trace (trace.level "op"), by phase and position in the layer.

usage: gemm_breakdown.py TRACE.h5 [--rank 0] [--skip-steps 1]

For each decoder layer's GEMMs (op "gemm" on the compute stream) in each (step, micro-batch,
phase), numbers them in issue order (k = 0, 1, ...) and prints, per (phase, module, k) over the
layers and steps after the skipped ones: count, the GEMM's FLOPs (GFLOP), mean duration (us) and
rate (TFLOP/s = FLOPs over duration). Also the LM head's GEMMs (layer -1) per phase. Output ends
with the totals per (phase, module): ms per step and the rate.
"""
import argparse
from collections import defaultdict

import h5py
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--skip-steps", type=int, default=1)
    a = ap.parse_args()
    with h5py.File(a.trace, "r") as f:
        ev = f["events"][:]
        en = {k: dict((v, n) for n, v in h5py.check_enum_dtype(ev.dtype[k]).items())
              for k in ("phase", "module", "op", "stream")}
    op_id = {v: k for k, v in en["op"].items()}
    st_id = {v: k for k, v in en["stream"].items()}
    sel = ((ev["op"] == op_id["gemm"]) & (ev["stream"] == st_id["compute"]) &
           (ev["rank"] == a.rank) & (ev["step"] > a.skip_steps))
    g = ev[sel]
    steps = len(np.unique(g["step"]))
    seq = defaultdict(list)
    for e in g:
        seq[(int(e["step"]), int(e["micro"]), int(e["phase"]), int(e["layer"]))].append(e)
    rows = defaultdict(list)
    tot = defaultdict(lambda: [0.0, 0.0])
    for (step, micro, ph, layer), es in seq.items():
        es.sort(key=lambda e: e["start_ns"])
        for k, e in enumerate(es):
            d = (int(e["end_ns"]) - int(e["start_ns"])) * 1e-9
            key = (en["phase"][ph], en["module"][int(e["module"])], k if layer >= 0 else -1, int(e["flops"]))
            rows[key].append(d)
            t = tot[(en["phase"][ph], en["module"][int(e["module"])])]
            t[0] += d
            t[1] += float(e["flops"])
    print(f"{'phase':<10} {'module':<10} {'k':>3} {'GFLOP':>8} {'count':>6} {'mean us':>9} {'TFLOP/s':>8}")
    for (ph, mod, k, fl), ds in sorted(rows.items(), key=lambda r: (r[0][0], r[0][2], r[0][1])):
        m = float(np.mean(ds))
        print(f"{ph:<10} {mod:<10} {k:>3} {fl * 1e-9:8.1f} {len(ds):>6} {m * 1e6:9.1f} {fl / m * 1e-12:8.1f}")
    print(f"\n{'phase':<10} {'module':<10} {'ms/step':>8} {'TFLOP/s':>8}   ({steps} steps)")
    for (ph, mod), (d, fl) in sorted(tot.items()):
        print(f"{ph:<10} {mod:<10} {d * 1e3 / steps:8.2f} {fl / d * 1e-12:8.1f}")


if __name__ == "__main__":
    main()
