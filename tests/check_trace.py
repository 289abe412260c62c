#!/usr/bin/python3
"""Checks the trace file written by tests/test_trace.c (layout: src/coordinator/trace.h).

usage: check_trace.py FILE.h5
One line per check; the last line is "N passed, M failed"; exit status 1 if any failed.
"""
import json
import math
import re
import sys
import time

import h5py
import numpy as np

passed = failed = 0


def check(ok, what):
    global passed, failed
    ok = bool(ok)
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1


def main(path):
    world = 2
    with h5py.File(path, "r") as f:
        a = f.attrs
        check(a.get("format") == "dissect-trace" and isinstance(a.get("format"), str),
              "/ format = 'dissect-trace' (str): %r" % (a.get("format"),))
        check(a.get("format_version") == 1, "/ format_version = 1: %r" % (a.get("format_version"),))
        dv = a.get("dissect_version")
        check(isinstance(dv, str) and re.fullmatch(r"\d+\.\d+\.\d+.*", dv),
              "/ dissect_version is a version str: %r" % (dv,))
        check(a.get("world_size") == world, "/ world_size = 2: %r" % (a.get("world_size"),))
        created = int(a.get("created_unix_ns", 0))
        check(abs(created - time.time_ns()) < 3600 * 10**9,
              "/ created_unix_ns within an hour of now: %d" % created)

        check("metadata" in f, "/metadata exists")
        m = f["metadata"].attrs
        for key in ("config_json", "mpi_version", "hdf5_version", "blas", "device",
                    "trace_level"):
            check(isinstance(m.get(key), str), "/metadata %s is str: %r" % (key, m.get(key)))
        cfg = json.loads(m.get("config_json", "null"))
        check(cfg == {"model": {"preset": "tiny"}, "seq_length": 32},
              "/metadata config_json parses to the written config")
        check("MPI" in m.get("mpi_version", ""), "/metadata mpi_version mentions MPI")
        check(re.fullmatch(r"\d+\.\d+\.\d+", m.get("hdf5_version", "")),
              "/metadata hdf5_version is x.y.z: %r" % (m.get("hdf5_version"),))
        # "OpenBLAS 0.3.x ..." when the binary loads OpenBLAS (with --as-needed, a test that
        # calls no BLAS routine does not), else "unknown (not OpenBLAS)"
        blas = m.get("blas", "")
        check(blas.startswith("OpenBLAS ") or blas.startswith("unknown"),
              "/metadata blas: %r" % (blas,))
        check(m.get("device") == "cpu", "/metadata device = 'cpu'")
        check(m.get("trace_level") == "step", "/metadata trace_level = 'step'")
        hosts = f["metadata/hosts"]
        check(hosts.shape == (world,), "/metadata/hosts shape (2,): %r" % (hosts.shape,))
        check(list(hosts.asstr()[()]) == ["node-a", "node-b.example.org"],
              "/metadata/hosts = ['node-a', 'node-b.example.org']: %r" % (list(hosts.asstr()[()]),))

        s = f["steps"]
        names = ("step", "loss", "grad_norm", "lr", "tokens", "step_time_s", "tokens_per_s",
                 "val_loss", "forward_s", "backward_s", "optimizer_s", "comm_s", "peak_mem_bytes")
        check(s.dtype.names == names, "/steps fields in order: %r" % (s.dtype.names,))
        check(s.shape == (3,), "/steps has 3 rows: %r" % (s.shape,))
        check(s.maxshape == (None,), "/steps extendible (maxshape None): %r" % (s.maxshape,))
        check(s.chunks == (64,), "/steps chunked 64 rows: %r" % (s.chunks,))
        check(s.compression == "gzip", "/steps deflate-compressed: %r" % (s.compression,))
        for name in ("step", "tokens"):
            check(s.dtype[name] == np.dtype("<i8"), "/steps %s is int64" % name)
        for name in ("forward_s", "backward_s", "optimizer_s", "comm_s"):
            check(s.dtype[name].shape == (world,) and s.dtype[name].base == np.dtype("<f8"),
                  "/steps %s is f64[2]" % name)
        check(s.dtype["peak_mem_bytes"].shape == (world,)
              and s.dtype["peak_mem_bytes"].base == np.dtype("<i8"), "/steps peak_mem_bytes is i64[2]")

        rows = s[()]
        for r in range(3):
            row = rows[r]
            exp = {
                "step": 10 * (r + 1),
                "loss": 4.0 - 0.5 * r,
                "grad_norm": 1.5 + r,
                "lr": 1e-3 * (r + 1),
                "tokens": 256 * (r + 1),
                "step_time_s": 0.75 + r,
                "tokens_per_s": 256.0 * (r + 1) / (0.75 + r),
            }
            for k, v in exp.items():
                check(row[k] == v, "row %d %s = %r: %r" % (r, k, v, row[k]))
            if r == 1:
                check(row["val_loss"] == 3.25, "row 1 val_loss = 3.25: %r" % (row["val_loss"],))
            else:
                check(math.isnan(row["val_loss"]), "row %d val_loss is NaN: %r" % (r, row["val_loss"]))
            per_rank = {
                "forward_s": [0.125 * (r + 1) + 0.5 * k for k in range(world)],
                "backward_s": [0.25 * (r + 1) + 0.5 * k for k in range(world)],
                "optimizer_s": [0.0625 * (r + 1) + k for k in range(world)],
                "comm_s": [0.01 * (r + 1) + 0.001 * k for k in range(world)],
                "peak_mem_bytes": [1000000 * (r + 1) + k + (1 << 40) for k in range(world)],
            }
            for k, v in per_rank.items():
                check(list(row[k]) == v, "row %d %s = %r: %r" % (r, k, v, list(row[k])))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    try:
        main(sys.argv[1])
    except Exception as e:  # a crash counts as one failed check
        check(False, "reading %s: %s: %s" % (sys.argv[1], type(e).__name__, e))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
