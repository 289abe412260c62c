#!/usr/bin/env python3
"""Compares the per-step losses of dissect traces against a reference trace.

Usage: compare_traces.py --rtol 1e-5 REF.h5 OTHER.h5 [OTHER.h5 ...]
Prints one line per file and the closing 'N passed, M failed'; exit 1 on any failure.
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


def losses(path):
    with h5py.File(path, "r") as f:
        return np.asarray(f["steps"]["loss"], dtype=np.float64)


ref = losses(a.ref)
passed = failed = 0
for path in a.others:
    other = losses(path)
    ok = len(other) == len(ref) and len(ref) > 0
    rel = float(np.max(np.abs(other - ref) / np.abs(ref))) if ok else float("inf")
    ok = ok and rel <= a.rtol and np.all(np.isfinite(other))
    print(f"{'ok  ' if ok else 'FAIL'} {path}: {len(other)} steps, max relative loss difference {rel:.2e} (bound {a.rtol:.0e}); "
          f"loss {ref[0]:.4f} -> {ref[-1]:.4f}")
    passed += ok
    failed += not ok
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
