#!/usr/bin/env python3
"""PyTorch reference for dissect's optimizer offload: FSDP2 with CPU offload on one GPU (or on
every GPU of a host through torchrun: benchmarks/paper_tables.sh).

What a user would pick in PyTorch for "Llama-2-7B full-parameter training on one 80 GB GPU with
the optimizer on the CPU": a single process (world size 1), Hugging Face LlamaForCausalLM built from
LlamaConfig on the meta device, `fully_shard` on every decoder layer and then on the root with
CPUOffloadPolicy (fp32 master weights, fp32 gradients and the AdamW states live in host memory,
pinned unless --no-pin) and MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (each layer's
weights are copied to the GPU in bf16 for its forward and backward; its gradients come back to the
host in fp32). Activation checkpointing per decoder layer (Hugging Face's gradient checkpointing,
non-reentrant torch.utils.checkpoint) unless --no-recompute. torch.optim.AdamW (lr 1e-5, betas
0.9/0.95, weight decay 0.1) over the CPU parameters, so the optimizer step runs on the CPU
(--foreach picks its implementation; "auto" lets torch choose, which is the for-loop one on CPU),
after torch.nn.utils.clip_grad_norm_ (--clip, 0 = off). Weights: normal(0, 0.02) for Linear and
Embedding weights, ones for RMSNorm weights (drawn on the GPU from torch.manual_seed(0) and copied
into the local CPU shards). Data: --ids, a text file of whitespace-separated token ids, cut into
consecutive non-overlapping windows of seq+1 ids (wrapping around when the file runs out); without
it, random ids (torch.randint, seed 0). Input = window[:-1], target = window[1:]: the mean
cross-entropy over all seq positions of fp32 logits (computed here, as benchmarks/torch_ref.py
does, rather than by passing labels= to the model, whose internal shift would score only seq-1).

    python3 benchmarks/torch_offload_ref.py [--seq 350 --micro-batch 8 --grad-accum 1 ...]
    torchrun --standalone --nproc_per_node N benchmarks/torch_offload_ref.py [...]

Under torchrun (WORLD_SIZE N > 1) the layers are sharded over the N GPUs (a 1-D mesh, ZeRO-3 with
the shards on the host), each rank trains on its own windows, and the JSON line (rank 0's) counts
the tokens of every rank (tokens_per_step = N x micro-batch x seq x grad-accum), the loss is the
mean over ranks, and peak_gpu_gib / peak_host_gib are the largest rank's (a "gpus" key says N).

Per step: zero_grad(set_to_none=True); --grad-accum micro-batches of --micro-batch sequences,
each forward + backward of loss / grad_accum (FSDP2 moves each micro-batch's gradients to the host
and accumulates them there); clip; opt.step(). Timed with torch.cuda.synchronize() +
time.perf_counter(): the whole step, the forward+backward phase (through the last gradient's copy
to the host) and the optimizer phase (clip + step), median over --steps steps after --warmup.

Prints one JSON line on stdout: impl "fsdp2-cpu-offload", seq, micro_batch, grad_accum,
tokens_per_step, step_ms, fwd_bwd_ms, optim_ms, tokens_per_s, mfu, peak_gpu_gib
(torch.cuda.max_memory_allocated over the timed loop), peak_host_gib (ru_maxrss of the process over
its whole life: pinned buffers included), losses (mean loss of every step, warm-up included),
grad_norms, foreach (the argument) and foreach_effective (what AdamW resolves it to), torch and a
few settings. Progress goes to stderr. On an exception: one JSON line {"impl", "error"}, exit 1.

MFU = tokens/s x (6 x non-embedding params + 12 x layers x hidden x seq) / (--peak-tflops x 1e12),
non-embedding params from the config: L x (2h + h^2 + 2 h kv hd + h^2 + 3 h I) + h + V h
(hd = h / heads, kv = kv heads; the LM head counts, the input embedding does not).
"""
import argparse
import json
import os
import resource
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

IMPL = "fsdp2-cpu-offload"

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--hidden", type=int, default=4096)
ap.add_argument("--layers", type=int, default=32)
ap.add_argument("--heads", type=int, default=32)
ap.add_argument("--kv-heads", type=int, default=32)
ap.add_argument("--intermediate", type=int, default=11008)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--seq", type=int, default=350)
ap.add_argument("--micro-batch", type=int, default=8, help="sequences per micro-batch")
ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
ap.add_argument("--warmup", type=int, default=2)
ap.add_argument("--steps", type=int, default=5, help="timed steps after --warmup")
ap.add_argument("--ids", default=None, help="text file of whitespace-separated token ids (default: random)")
ap.add_argument("--clip", type=float, default=1.0, help="gradient-norm clip (0 = off)")
ap.add_argument("--foreach", choices=("auto", "on", "off"), default="auto",
                help="AdamW foreach= (auto: None, torch decides)")
ap.add_argument("--no-pin", dest="pin", action="store_false", help="CPUOffloadPolicy(pin_memory=False)")
ap.add_argument("--no-recompute", dest="recompute", action="store_false",
                help="no activation checkpointing")
ap.add_argument("--peak-tflops", type=float, default=989.0, help="GPU dense bf16 peak, for the MFU")
ap.add_argument("--master-port", type=int, default=29533)
ap.add_argument("--backend", default="cuda:nccl,cpu:gloo",
                help="process-group backend; the CPU (gloo) one is needed by clip_grad_norm_ on "
                     "the CPU-resident DTensor gradients")
a = ap.parse_args()
if min(a.seq, a.micro_batch, a.grad_accum, a.steps) < 1 or a.warmup < 0:
    ap.error("--seq, --micro-batch, --grad-accum and --steps must be >= 1, --warmup >= 0")
if a.hidden % a.heads or a.heads % a.kv_heads:
    ap.error("--hidden must divide by --heads, and --heads by --kv-heads")


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def import_fsdp():
    try:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch < 2.5
        from torch.distributed._tensor import DTensor
    return fully_shard, CPUOffloadPolicy, MixedPrecisionPolicy, DTensor


def load_windows(n_windows, seq, vocab):
    """(n_windows, seq + 1) int64 token windows: consecutive, non-overlapping, from --ids (wrapping
    around) or random (seed 0)."""
    w = seq + 1
    if a.ids is None:
        g = torch.Generator().manual_seed(0)
        return torch.randint(0, vocab, (n_windows, w), generator=g, dtype=torch.int64), "random (seed 0)"
    with open(a.ids) as f:
        ids = torch.tensor([int(t) for t in f.read().split()], dtype=torch.int64)
    avail = ids.numel() // w
    if avail == 0:
        raise ValueError(f"{a.ids}: {ids.numel()} ids, fewer than one window of {w}")
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0 or hi >= vocab:
        raise ValueError(f"{a.ids}: ids span [{lo}, {hi}], outside the vocabulary [0, {vocab})")
    table = ids[: avail * w].view(avail, w)
    rows = torch.arange(n_windows) % avail
    wrap = "wrapped" if n_windows > avail else "no wrap"
    return table[rows], f"{a.ids} ({ids.numel()} ids, {avail} windows, {wrap})"


def main():
    from transformers import LlamaConfig, LlamaForCausalLM

    fully_shard, CPUOffloadPolicy, MixedPrecisionPolicy, DTensor = import_fsdp()
    from torch.distributed.device_mesh import init_device_mesh

    world, rank = dist.get_world_size(), dist.get_rank()
    dev = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    torch.backends.cuda.matmul.allow_tf32 = True
    L, D, H, Hkv, I, V, S = a.layers, a.hidden, a.heads, a.kv_heads, a.intermediate, a.vocab, a.seq
    Dh = D // H
    nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
    total_params = nonembed + V * D
    flops_per_token = 6 * nonembed + 12 * L * D * S
    B, G = a.micro_batch, a.grad_accum
    tokens_per_step = B * S * G * world

    # ---------------------------------------------------------------- model: meta -> FSDP2 -> CPU
    cfg = LlamaConfig(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=Hkv,
                      intermediate_size=I, vocab_size=V, max_position_embeddings=max(S, 4096),
                      rms_norm_eps=1e-5, tie_word_embeddings=False, use_cache=False,
                      attn_implementation="sdpa")
    t0 = time.perf_counter()
    with torch.device("meta"):
        model = LlamaForCausalLM(cfg)
    model.to(torch.float32)  # fp32 master weights whatever the config's default dtype
    model.train()
    if a.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    mesh = init_device_mesh("cuda", (world,))
    kw = dict(mesh=mesh, offload_policy=CPUOffloadPolicy(pin_memory=a.pin),
              mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32))
    for layer in model.model.layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)
    model.to_empty(device="cpu")

    # buffers are not FSDP's: the rotary tables (the only ones in current Llama) are rebuilt on the GPU
    for name, mod in list(model.named_modules()):
        if type(mod).__name__.endswith("RotaryEmbedding"):
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name) if parent_name else model, attr,
                    type(mod)(config=cfg, device=dev))
    stray = [n for n, b in model.named_buffers() if b.device.type != "cuda"]
    if stray:
        raise RuntimeError(f"buffers left uninitialised on the host (transformers too old?): {stray}")

    torch.manual_seed(rank)
    done = set()

    def local(p):
        return p.to_local() if isinstance(p, DTensor) else p

    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, (nn.Linear, nn.Embedding)):
                w = local(mod.weight)
                w.copy_(torch.empty(w.shape, device=dev, dtype=w.dtype).normal_(0.0, 0.02))
                done.add(id(mod.weight))
                if getattr(mod, "bias", None) is not None:
                    local(mod.bias).zero_()
                    done.add(id(mod.bias))
            elif type(mod).__name__.endswith("RMSNorm"):
                local(mod.weight).fill_(1.0)
                done.add(id(mod.weight))
    missed = [n for n, p in model.named_parameters() if id(p) not in done]
    if missed:
        raise RuntimeError(f"parameters with no initialiser: {missed[:8]}")
    torch.cuda.synchronize()
    p0 = next(model.parameters())
    log(f"model built and initialised in {time.perf_counter() - t0:.1f} s: {total_params / 1e9:.3f} B "
        f"params, {type(p0).__name__} on {local(p0).device}; recompute {a.recompute}, pin {a.pin}")

    # ------------------------------------------------------------------------------------ optimizer
    foreach = {"auto": None, "on": True, "off": False}[a.foreach]
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, foreach=foreach)
    foreach_effective = foreach
    if foreach is None:
        try:
            from torch.optim.optimizer import _default_to_fused_or_foreach
            foreach_effective = bool(_default_to_fused_or_foreach(params, False, False)[1])
        except Exception:  # private helper: report "unknown" rather than fail
            foreach_effective = None

    # ----------------------------------------------------------------------------------------- data
    n_steps = a.warmup + a.steps
    windows, source = load_windows(n_steps * G * B * world, S, V)
    windows = windows.view(world, n_steps * G, B, S + 1)[rank].to(dev)  # this rank's windows
    log(f"data: {source}; {tokens_per_step} tokens per step ({G} x {B} x {S})")

    # ----------------------------------------------------------------------------------------- loop
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    step_t, fb_t, opt_t, losses, norms = [], [], [], [], []
    for i in range(n_steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss_sum = torch.zeros((), device=dev)
        for m in range(G):
            w = windows[i * G + m]
            logits = model(input_ids=w[:, :-1]).logits
            loss = F.cross_entropy(logits.float().flatten(0, 1), w[:, 1:].flatten())
            (loss / G).backward()
            loss_sum += loss.detach()
            del logits, loss
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        gn = torch.nn.utils.clip_grad_norm_(params, a.clip) if a.clip > 0 else None
        opt.step()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        if world > 1:
            dist.all_reduce(loss_sum)
        losses.append(loss_sum.item() / G / world)
        if gn is not None:
            norms.append(float(gn.full_tensor() if isinstance(gn, DTensor) else gn))
        if i >= a.warmup:
            step_t.append(t2 - t0)
            fb_t.append(t1 - t0)
            opt_t.append(t2 - t1)
        log(f"step {i + 1}/{n_steps}{' (warm-up)' if i < a.warmup else ''}: loss {losses[-1]:.4f}"
            f"{f', grad norm {norms[-1]:.3f}' if norms else ''}; {(t2 - t0) * 1e3:.0f} ms "
            f"(fwd+bwd {(t1 - t0) * 1e3:.0f}, optimizer {(t2 - t1) * 1e3:.0f})")

    t = statistics.median(step_t)
    tok = tokens_per_step / t
    # the largest rank's peaks (host: ru_maxrss in KiB, over the process's life)
    peaks = torch.tensor([torch.cuda.max_memory_allocated(dev) / 2**30,
                          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20], device=dev)
    if world > 1:
        dist.all_reduce(peaks, op=dist.ReduceOp.MAX)
    if rank != 0:
        return
    out = dict(impl=IMPL, gpus=world, seq=S, micro_batch=B, grad_accum=G, tokens_per_step=tokens_per_step,
               step_ms=t * 1e3, fwd_bwd_ms=statistics.median(fb_t) * 1e3,
               optim_ms=statistics.median(opt_t) * 1e3, tokens_per_s=tok,
               mfu=tok * flops_per_token / (a.peak_tflops * 1e12 * world),
               peak_gpu_gib=float(peaks[0]), peak_host_gib=float(peaks[1]),
               losses=losses, grad_norms=norms, foreach=a.foreach, foreach_effective=foreach_effective,
               steps=len(step_t), step_ms_min=min(step_t) * 1e3, step_ms_max=max(step_t) * 1e3,
               params=total_params, nonembed_params=nonembed, flops_per_token=flops_per_token,
               recompute=a.recompute, pin_memory=a.pin, params_pinned=local(params[0]).is_pinned(),
               clip=a.clip, cpu_threads=torch.get_num_threads(),
               data=source, torch=torch.__version__)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    for k, v in (("MASTER_ADDR", "127.0.0.1"), ("MASTER_PORT", str(a.master_port)), ("RANK", "0"),
                 ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(k, v)
    rc = 0
    try:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group(a.backend)
        main()
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        msg = f"{type(e).__name__}: {e}".strip().replace("\n", " | ")[:1500]
        print(json.dumps({"impl": IMPL, "error": msg}), flush=True)
        rc = 1
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    sys.exit(rc)
