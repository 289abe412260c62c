#!/usr/bin/env python3
"""PyTorch's CPU AdamW alone: the optimizer step that FSDP2 CPU offload (benchmarks/torch_offload_ref.py)
runs on the host, measured without a model or a GPU.

    python3 benchmarks/torch_adamw_cpu.py [--params 1000000000] [--threads T] [--steps 5]

Parameters: --params N fp32 CPU tensors (nn.Parameter) shaped like Llama-2-7B's: first the token
embedding (--vocab x --hidden), then decoder layers (q, k, v, o: hidden x hidden; gate, up:
intermediate x hidden; down: hidden x intermediate; two RMSNorm weights: hidden) over and over until
N elements; a tensor above --max-numel (64 Mi) elements is split into row blocks, and the last one
is cut to make the total exactly N. Values normal(0, 0.02); gradients normal(0, 1e-3) (randn x
1e-3), fixed for the whole run. torch.set_num_threads(--threads).

For each mode in --modes ("plain" = foreach=False, the per-tensor for-loop; "foreach" =
foreach=True; "fused" = fused=True, optional): torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95),
eps=1e-8, weight_decay=0.1, ...), one warm-up step (it allocates the m and v states), then --steps
timed opt.step() calls (time.perf_counter), median. The parameters and gradients are shared by the
modes; each mode's optimizer and states are freed (del + gc.collect()) before the next.
The foreach mode materialises intermediate lists over all tensors, so it needs more memory.

One JSON line per mode on stdout: impl ("torch-adamw-cpu-plain" | "torch-adamw-cpu-foreach" |
"torch-adamw-cpu-fused"), params, threads, step_s (median), params_per_s, gbps = N x 28 / step_s /
1e9 (the minimal traffic: fp32 grad read 4 B, fp32 master read + write 8, m read + write 8,
v read + write 8), steps, step_s_min, step_s_max, tensors, torch. If allocation fails (MemoryError
or RuntimeError) the mode's line is {"impl", "params", "threads", "error", "torch"}. Progress goes
to stderr.
"""
import argparse
import gc
import json
import math
import os
import statistics
import sys
import time
from itertools import chain, cycle

import torch
import torch.nn as nn

MODES = {"plain": dict(foreach=False), "foreach": dict(foreach=True), "fused": dict(fused=True)}

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--params", type=int, default=1_000_000_000, help="total parameter count N")
ap.add_argument("--threads", type=int, default=os.cpu_count(), help="torch.set_num_threads")
ap.add_argument("--steps", type=int, default=5, help="timed steps after one warm-up step")
ap.add_argument("--modes", default="plain,foreach", help="comma-separated: plain, foreach, fused")
ap.add_argument("--hidden", type=int, default=4096, help="tensor shapes: Llama hidden size")
ap.add_argument("--intermediate", type=int, default=11008, help="tensor shapes: MLP size")
ap.add_argument("--vocab", type=int, default=32000, help="tensor shapes: embedding rows")
ap.add_argument("--max-numel", type=int, default=64 * 2**20, help="largest tensor, in elements")
a = ap.parse_args()
modes = [m for m in a.modes.split(",") if m]
if any(m not in MODES for m in modes):
    ap.error(f"--modes: choose from {', '.join(MODES)}")
if a.params < 1 or a.steps < 1 or a.threads < 1 or a.max_numel < 1:
    ap.error("--params, --steps, --threads and --max-numel must be >= 1")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def llama_shapes(n, h, inter, vocab, cap):
    """Shapes summing to exactly n elements: embedding, then decoder layers cyclically; row blocks of
    at most cap elements; the last tensor cut short."""
    layer = [(h, h)] * 4 + [(inter, h), (inter, h), (h, inter), (h,), (h,)]
    out, rem = [], n
    for shape in chain([(vocab, h)], cycle(layer)):
        rows, cols = shape[0], math.prod(shape[1:])
        block = max(1, cap // cols)
        for r0 in range(0, rows, block):
            r = min(block, rows - r0)
            if r * cols >= rem:
                r = rem // cols
                if r:
                    out.append((r,) + shape[1:])
                if rem - r * cols:
                    out.append((rem - r * cols,))
                return out
            out.append((r,) + shape[1:])
            rem -= r * cols
    return out


def result(mode, **kw):
    return json.dumps(dict(impl=f"torch-adamw-cpu-{mode}", params=a.params, threads=a.threads, **kw,
                           torch=torch.__version__))


torch.set_num_threads(a.threads)
N = a.params
shapes = llama_shapes(N, a.hidden, a.intermediate, a.vocab, a.max_numel)
assert sum(math.prod(s) for s in shapes) == N
params = None
try:
    t0 = time.perf_counter()
    g = torch.Generator().manual_seed(0)
    params = []
    for s in shapes:
        p = nn.Parameter(torch.empty(s, dtype=torch.float32).normal_(0.0, 0.02, generator=g))
        p.grad = torch.empty_like(p).normal_(0.0, 1e-3, generator=g)  # randn x 1e-3
        params.append(p)
    log(f"{N / 1e9:.3f} B parameters in {len(params)} tensors (largest {max(map(math.prod, shapes))} "
        f"elements), {a.threads} threads; set up in {time.perf_counter() - t0:.1f} s")
except (MemoryError, RuntimeError) as e:
    msg = f"allocating {N} parameters and gradients: {type(e).__name__}: {e}".replace("\n", " | ")[:1500]
    params = None
    gc.collect()
    for mode in modes:
        print(result(mode, error=msg), flush=True)
    sys.exit(0)

for mode in modes:
    opt = None
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                                **MODES[mode])
        t0 = time.perf_counter()
        opt.step()  # warm-up: allocates m and v
        log(f"{mode}: warm-up step {time.perf_counter() - t0:.2f} s")
        times = []
        for i in range(a.steps):
            t0 = time.perf_counter()
            opt.step()
            times.append(time.perf_counter() - t0)
            log(f"{mode}: step {i + 1}/{a.steps} {times[-1]:.3f} s")
        t = statistics.median(times)
        print(result(mode, step_s=t, params_per_s=N / t, gbps=N * 28 / t / 1e9, steps=len(times),
                     step_s_min=min(times), step_s_max=max(times), tensors=len(params)), flush=True)
    except (MemoryError, RuntimeError) as e:
        print(result(mode, error=f"{type(e).__name__}: {e}".replace("\n", " | ")[:1500]), flush=True)
    finally:
        del opt
        gc.collect()
