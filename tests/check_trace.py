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

PHASES = ["forward", "backward", "optimizer", "step", "eval", "recompute"]
MODULES = ["embedding", "attention", "mlp", "rmsnorm", "lm_head", "loss", "optimizer", "layer",
           "data", "step", "pipeline"]
OPS = ["gemm", "attention", "rmsnorm", "rope", "swiglu", "cross_entropy", "adamw", "all_reduce",
       "reduce_scatter", "all_gather", "broadcast", "send", "recv", "memcpy", "embedding", "add",
       "memset", "grad_norm", "module", "step", "memcpy_d2h", "memcpy_h2d", "lora_gemm", "dequantize",
       "adamw_redo"]
STREAMS = ["compute", "comm", "host", "copy", "optimizer", "aux"]
GROUPS = ["none", "world", "dp", "tp", "pp"]
STEP_MS = [750, 1750, 2750]
BASE_MS = [100, 1000, 3000]


def synth_events(rank, r):
    """The events test_trace.c writes for one rank and /steps row r, in the order written:
    tuples (start_ns, end_ns, bytes, flops, rank, step, micro, layer, phase, module, op, stream,
    pp, dp, tp, group) with the enums as names (the job is DP = 2: dp = rank; the all-reduce on
    group dp, the rest none)."""
    u = STEP_MS[r] * 10000
    base = BASE_MS[r] * 1000000 + rank * 50000
    out = []

    def push(u0, u1, phase, module, op, stream, layer, micro):
        s, e = base + u0 * u, base + u1 * u
        d = e - s
        flops = {"gemm": 50 * d, "attention": 20 * d, "adamw": d}.get(op, 0)
        nbytes = {"memcpy": 10 * d, "all_reduce": 2 * d, "module": 0, "step": 0}.get(op, 4 * d)
        out.append((s, e, nbytes, flops, rank, 10 * (r + 1), micro, layer, phase, module, op,
                    stream, 0, rank, 0, "dp" if op == "all_reduce" else "none"))

    t = [0]

    def seq(phase, layer, ops):
        for module, op, dur in ops:
            push(t[0], t[0] + dur, phase, module, op, "compute", layer, 0)
            t[0] += dur

    def layer_ops(phase, layer, attn, mlp, attn_first):
        for is_attn in ((True, False) if attn_first else (False, True)):
            t0 = t[0]
            seq(phase, layer, attn if is_attn else mlp)
            push(t0, t[0], phase, "attention" if is_attn else "mlp", "module", "compute", layer, 0)

    push(0, 2, "forward", "data", "memcpy", "host", -1, 0)
    t[0] = 2
    seq("forward", -1, [("embedding", "embedding", 2)])
    for l in (0, 1):
        layer_ops("forward", l, [("attention", "gemm", 3), ("attention", "attention", 2)],
                  [("mlp", "gemm", 4), ("mlp", "swiglu", 1)], True)
    seq("forward", -1, [("lm_head", "gemm", 4), ("loss", "cross_entropy", 2)])
    seq("backward", -1, [("loss", "cross_entropy", 1), ("lm_head", "gemm", 8)])
    for l in (1, 0):
        layer_ops("backward", l,
                  [("attention", "attention", 4), ("attention", "gemm", 8 if rank == 1 and l == 0 else 6)],
                  [("mlp", "gemm", 8), ("mlp", "swiglu", 1)], False)
    seq("backward", -1, [("embedding", "embedding", 3)])
    push(60, 85, "backward", "layer", "all_reduce", "comm", -1, -1)
    push(85, 87, "optimizer", "optimizer", "grad_norm", "compute", -1, -1)
    push(87, 95, "optimizer", "optimizer", "adamw", "compute", -1, -1)
    push(0, 100, "step", "step", "step", "host", -1, -1)
    return out


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
        check(m.get("trace_level") == "op", "/metadata trace_level = 'op'")
        env = m.get("environment", None)
        check(isinstance(env, str), "/metadata environment is str: %r" % (env,))
        lines = (env or "").split("\n")
        check("DX_TRACE_TEST_SWITCH=on" in lines and "NCCL_TRACE_TEST=2" in lines
              and all(l.split("=")[0].startswith(("DX_", "NCCL_", "OMP_")) for l in lines if l),
              "/metadata environment holds the DX_/NCCL_/OMP_ switches set (test_trace.sh) and nothing else: %r" % (env,))
        hosts = f["metadata/hosts"]
        check(hosts.shape == (world,), "/metadata/hosts shape (2,): %r" % (hosts.shape,))
        check(list(hosts.asstr()[()]) == ["node-a", "node-b.example.org"],
              "/metadata/hosts = ['node-a', 'node-b.example.org']: %r" % (list(hosts.asstr()[()]),))

        s = f["steps"]
        names = ("step", "loss", "grad_norm", "lr", "tokens", "step_time_s", "tokens_per_s",
                 "val_loss", "forward_s", "backward_s", "optimizer_s", "comm_s", "energy_j",
                 "power_capped_s", "peak_mem_bytes", "params_bytes", "grads_bytes", "optim_bytes",
                 "activations_bytes", "host_peak_bytes")
        check(s.dtype.names == names, "/steps fields in order: %r" % (s.dtype.names,))
        check(s.shape == (3,), "/steps has 3 rows: %r" % (s.shape,))
        check(s.maxshape == (None,), "/steps extendible (maxshape None): %r" % (s.maxshape,))
        check(s.chunks == (64,), "/steps chunked 64 rows: %r" % (s.chunks,))
        check(s.compression == "gzip", "/steps deflate-compressed: %r" % (s.compression,))
        for name in ("step", "tokens"):
            check(s.dtype[name] == np.dtype("<i8"), "/steps %s is int64" % name)
        for name in ("forward_s", "backward_s", "optimizer_s", "comm_s", "energy_j", "power_capped_s"):
            check(s.dtype[name].shape == (world,) and s.dtype[name].base == np.dtype("<f8"),
                  "/steps %s is f64[2]" % name)
        for name in ("peak_mem_bytes", "params_bytes", "grads_bytes", "optim_bytes",
                     "activations_bytes", "host_peak_bytes"):
            check(s.dtype[name].shape == (world,) and s.dtype[name].base == np.dtype("<i8"),
                  "/steps %s is i64[2]" % name)

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
                "energy_j": [512.5 * (r + 1) + 8 * k for k in range(world)],
                "peak_mem_bytes": [1000000 * (r + 1) + k + (1 << 40) for k in range(world)],
                "params_bytes": [4096 * (r + 1) + k for k in range(world)],
                "grads_bytes": [2048 * (r + 1) + k for k in range(world)],
                "optim_bytes": [8192 * (r + 1) + k + (1 << 35) for k in range(world)],
                # row 2 was written with activations_bytes = NULL
                "activations_bytes": ([100000 * (r + 1) + k for k in range(world)] if r < 2
                                      else [-1] * world),
                "host_peak_bytes": [3 * (r + 1) + k + (1 << 37) for k in range(world)],
            }
            for k, v in per_rank.items():
                check(list(row[k]) == v, "row %d %s = %r: %r" % (r, k, v, list(row[k])))
            # row 2 was written with power_capped_s = NULL (stored as NaN)
            pc = list(row["power_capped_s"])
            check(pc == [0.375 * (r + 1) + 0.125 * k for k in range(world)] if r < 2
                  else all(math.isnan(x) for x in pc), "row %d power_capped_s: %r" % (r, pc))

        names = f["metadata/device_names"]
        check(names.shape == (world,) and list(names.asstr()[()]) == ["Test GPU", "Test GPU"],
              "/metadata/device_names = ['Test GPU', 'Test GPU']: %r" % (list(names.asstr()[()]),))
        peaks = f["metadata/device_peak_tflops"]
        check(peaks.dtype == np.float64 and list(peaks[()]) == [1e-4, 1e-4],
              "/metadata/device_peak_tflops is f64 [1e-4, 1e-4]: %r %r" % (peaks.dtype, list(peaks[()])))
        # /metadata/clock_offset_ns
        check("clock_offset_ns" in f["metadata"], "/metadata/clock_offset_ns exists")
        off = f["metadata/clock_offset_ns"]
        check(off.shape == (world,) and off.dtype == np.dtype("<i8"),
              "/metadata/clock_offset_ns is int64[2]: %r %r" % (off.shape, off.dtype))
        check(list(off[()]) == [0, -123456789],
              "/metadata/clock_offset_ns = [0, -123456789]: %r" % (list(off[()]),))

        # /events
        check("events" in f, "/events exists")
        ev = f["events"]
        fields = ("start_ns", "end_ns", "bytes", "flops", "rank", "step", "micro", "layer",
                  "phase", "module", "op", "stream", "pp", "dp", "tp", "group")
        check(ev.dtype.names == fields, "/events fields in order: %r" % (ev.dtype.names,))
        types = {"start_ns": "<i8", "end_ns": "<i8", "bytes": "<i8", "flops": "<i8",
                 "rank": "<i4", "step": "<i4", "micro": "<i2", "layer": "<i2", "pp": "<i2",
                 "dp": "<i2", "tp": "<i2"}
        for k, t in types.items():
            check(ev.dtype[k] == np.dtype(t), "/events %s is %s: %r" % (k, t, ev.dtype[k]))
        check(ev.dtype.itemsize == 55, "/events rows are packed (55 bytes): %d" % ev.dtype.itemsize)
        check(ev.maxshape == (None,), "/events extendible: %r" % (ev.maxshape,))
        check(ev.chunks == (16384,), "/events chunked 16384 rows: %r" % (ev.chunks,))
        check(ev.compression == "gzip", "/events deflate-compressed: %r" % (ev.compression,))
        enums = {"phase": PHASES, "module": MODULES, "op": OPS, "stream": STREAMS, "group": GROUPS}
        for k, names in enums.items():
            mapping = h5py.check_enum_dtype(ev.dtype[k])
            want = {n: i for i, n in enumerate(names)}
            check(mapping == want and ev.dtype[k].base == np.dtype("u1"),
                  "/events %s is a uint8 enum with the names of events.h: %r" % (k, mapping))
        expect = []
        for r in (0, 1, 2):
            for rank in range(world):
                expect += synth_events(rank, r)
        check(ev.shape == (len(expect),), "/events has %d rows: %r" % (len(expect), ev.shape))
        data = ev[()]
        inv = {k: {i: n for i, n in enumerate(names)} for k, names in enums.items()}
        got = [tuple(int(row[k]) if k not in enums else inv[k][int(row[k])] for k in fields)
               for row in data]
        bad = [i for i, (a, b) in enumerate(zip(got, expect)) if a != b]
        check(len(got) == len(expect) and not bad,
              "/events rows equal the synthetic events in the order written%s"
              % ("" if not bad else ": first difference at row %d: %r != %r"
                 % (bad[0], got[bad[0]], expect[bad[0]])))
        for rank in range(world):
            for step in (10, 20, 30):
                sel = (data["rank"] == rank) & (data["step"] == step)
                n_span = int(np.sum(sel & (data["op"] == OPS.index("step"))))
                check(np.sum(sel) == 35 and n_span == 1,
                      "/events rank %d step %d: 35 events, one step span (%d, %d)"
                      % (rank, step, int(np.sum(sel)), n_span))


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
