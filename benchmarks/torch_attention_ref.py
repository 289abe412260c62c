"""PyTorch SDPA alone on the shapes of benchmarks/attention_bench.sh, the references for
dissect's fused attention:

    torch_attention_ref.py B,T,H,Hkv,Dh [B,T,H,Hkv,Dh ...] [--reps 20] [--backends flash,cudnn]

Backends: "flash" (SDPBackend.FLASH_ATTENTION, FlashAttention-2, the issue's reference) and
"cudnn" (SDPBackend.CUDNN_ATTENTION, cuDNN's fused flash attention, which has Hopper kernels);
a backend this PyTorch or GPU lacks is skipped with a line on stderr.

q, dout ~ N(0, 1) [B, H, T, Dh] bf16; k, v [B, Hkv, T, Dh] passed with enable_gqa=True
(flash attention's native GQA) when this PyTorch accepts it on the flash backend, otherwise
repeated to H heads (the JSON says which). Causal. Median of REPS CUDA-event-timed calls after
3 warm-ups, forward and backward (autograd.grad of q, k, v) timed separately. One JSON line per
shape and backend: {"impl": "sdpa-flash" | "sdpa-cudnn", "shape", "gqa": "native"|"expanded", "fwd_ms", "bwd_ms",
"fwd_tflops", "bwd_tflops"} with the FLOP count of attention_bench.c.
"""
import argparse
import json
import statistics
import sys

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

ap = argparse.ArgumentParser()
ap.add_argument("shapes", nargs="+", help="B,T,H,Hkv,Dh")
ap.add_argument("--reps", type=int, default=20)
ap.add_argument("--backends", default="flash", help="comma-separated: flash, cudnn")
a = ap.parse_args()
F = torch.nn.functional


def time_it(fn, n):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
    for s, e in ev:
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in ev)


BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def run(name, B, T, H, Hkv, Dh):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(B, H, T, Dh, device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
    k = torch.randn(B, Hkv, T, Dh, device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
    v = torch.randn(B, Hkv, T, Dh, device="cuda", dtype=torch.bfloat16, generator=g, requires_grad=True)
    gqa = "native"
    with sdpa_kernel(BACKENDS[name]):
        try:
            fwd_fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=Hkv != H)
            o = fwd_fn()
        except (RuntimeError, TypeError):
            gqa = "expanded"
            k = k.detach().repeat_interleave(H // Hkv, dim=1).requires_grad_()
            v = v.detach().repeat_interleave(H // Hkv, dim=1).requires_grad_()
            fwd_fn = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
            o = fwd_fn()
        fwd = time_it(fwd_fn, a.reps)
        dout = torch.randn_like(o)
        bwd = time_it(lambda: torch.autograd.grad(o, (q, k, v), dout, retain_graph=True), a.reps)
    fl = 4 * B * H * Dh * T * (T + 1) / 2
    print(json.dumps(dict(impl="sdpa-" + name, shape=[B, T, H, Hkv, Dh], gqa=gqa, fwd_ms=fwd, bwd_ms=bwd,
                          fwd_tflops=fl / fwd / 1e9, bwd_tflops=2.5 * fl / bwd / 1e9)), flush=True)


for shape in a.shapes:
    B, T, H, Hkv, Dh = (int(x) for x in shape.split(","))
    for name in a.backends.split(","):
        if name not in BACKENDS:
            ap.error(f"--backends: unknown backend {name!r} (flash, cudnn)")
        try:
            run(name, B, T, H, Hkv, Dh)
        except RuntimeError as e:  # this backend cannot run the shape here
            print(f"torch_attention_ref.py: sdpa-{name} at {shape}: {str(e).splitlines()[0]}", file=sys.stderr)
        torch.cuda.empty_cache()
