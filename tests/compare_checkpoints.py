#!/usr/bin/env python3
"""Compares every tensor of dissect checkpoints against a reference checkpoint.

Usage: compare_checkpoints.py --rtol 1e-5 REF.h5 OTHER.h5 [OTHER.h5 ...]
Per tensor: ||other - ref|| / ||ref|| <= rtol. Prints one line per file and the closing
'N passed, M failed'; exit 1 on any failure.
"""
import argparse
import sys

import h5py
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--rtol", type=float, default=1e-5)
ap.add_argument("ref")
ap.add_argument("others", nargs="+")
a = ap.parse_args()

with h5py.File(a.ref, "r") as f:
    ref = {k: np.asarray(v, dtype=np.float64) for k, v in f["params"].items()}
passed = failed = 0
for path in a.others:
    with h5py.File(path, "r") as f:
        other = {k: np.asarray(v, dtype=np.float64) for k, v in f["params"].items()}
    worst, worst_name = 0.0, ""
    ok = set(other) == set(ref) and len(ref) > 0
    for k in ref:
        if k not in other or other[k].shape != ref[k].shape:
            ok = False
            worst_name = k
            break
        rel = float(np.linalg.norm(other[k] - ref[k]) / np.linalg.norm(ref[k]))
        if not np.isfinite(rel) or rel > worst:
            worst, worst_name = (rel if np.isfinite(rel) else float("inf")), k
    ok = ok and worst <= a.rtol
    print(f"{'ok  ' if ok else 'FAIL'} {path}: {len(other)} tensors, worst relative difference {worst:.2e} "
          f"({worst_name}; bound {a.rtol:.0e})")
    passed += ok
    failed += not ok
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
