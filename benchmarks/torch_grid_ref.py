#!/usr/bin/env python3
"""PyTorch reference for dissect's 2-GPU grid benchmark (benchmarks/grid_bench.sh): a plain Llama
(torchtitan style, written here) trained with tensor, pipeline or fully sharded data parallelism.

    torchrun --standalone --nproc_per_node 2 benchmarks/torch_grid_ref.py --mode tp|pp|fsdp [...]

Model: nn.Embedding, N blocks of RMSNorm -> attention (wq, wk, wv, wo without bias, RoPE, GQA via
scaled_dot_product_attention(is_causal=True, enable_gqa=True)) -> residual, RMSNorm -> SwiGLU MLP
(w1 gate, w3 up, w2 down) -> residual; final RMSNorm; untied LM head. TinyLlama-1.1B shapes by
default. Recipe as benchmarks/torch_ref.py: fp32 parameters, bf16 autocast around the forward (the
residual stream stays fp32, as in Hugging Face's model under autocast), fp32 logits into the
cross-entropy, fused AdamW (lr 1e-4, betas 0.9/0.95, weight decay 0.1), global gradient-norm clip
1.0 (computed here from the local pieces of DTensor or per-stage gradients: one all-reduce).
Random token ids, the same on every rank.

Modes (world = number of processes, 2 on the benchmark host):
  tp    tensor parallelism over a 1-D DeviceMesh with parallelize_module: wq/wk/wv/w1/w3
        ColwiseParallel, wo/w2 RowwiseParallel, embedding RowwiseParallel(input_layouts=Replicate()),
        LM head ColwiseParallel(output_layouts=Shard(-1), use_local_output=False) with loss_parallel
        (torchtitan's plan without sequence parallelism). One micro-batch of --micro-batch sequences
        per step; every rank sees the same data; tokens counted once.
  pp    torch.distributed.pipelining: `world` stages (layers split evenly; stage 0 holds the
        embedding, the last stage the final norm, LM head and loss), PipelineStage over each
        stage's own module, Schedule1F1B with --micro-batches micro-batches of --micro-batch
        sequences per step.
  fsdp  FSDP2 (fully_shard per block, then the root) data parallel, --micro-batch sequences per
        GPU per step; tokens counted over all GPUs.

--compile (tp, fsdp): each block compiled with torch.compile after its tensor-parallel plan and
before fully_shard (torchtitan's order); impl gets "+compile".

Timing: torch.cuda.synchronize + dist.barrier around each step, median of --steps steps after
--warmup. Rank 0 prints one JSON line: impl, tokens_per_s, step_ms, host_ms (median CPU time of
rank 0's main thread per step, time.thread_time: near step_ms when the step is bound by the
host's dispatch of kernels rather than by the GPU), mfu (tokens/s x (6 x
non-embedding params + 12 x layers x hidden x seq) / (989e12 x GPUs)), peak_mem_gib (max over
ranks), loss, notes. On an exception the rank prints {"impl", "error", "rank"} and exits 0.
"""
import argparse
import datetime
import json
import math
import os
import statistics
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

IMPL = {"tp": "pytorch-tp", "pp": "pytorch-pp-1f1b", "fsdp": "pytorch-fsdp2"}

ap = argparse.ArgumentParser()
ap.add_argument("--mode", choices=sorted(IMPL), required=True)
ap.add_argument("--hidden", type=int, default=2048)
ap.add_argument("--layers", type=int, default=22)
ap.add_argument("--heads", type=int, default=32)
ap.add_argument("--kv-heads", type=int, default=4)
ap.add_argument("--intermediate", type=int, default=5632)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--seq", type=int, default=2048)
ap.add_argument("--micro-batch", type=int, default=8)
ap.add_argument("--micro-batches", type=int, default=8, help="micro-batches per step (pp)")
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--steps", type=int, default=7)
ap.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clip (0 = off)")
ap.add_argument("--compile", action="store_true", help="torch.compile each block (tp, fsdp)")
ap.add_argument("--peak-tflops", type=float, default=989.0, help="per GPU, for the MFU")
a = ap.parse_args()


# ------------------------------------------------------------------------------------------ model
def rope_tables(seq, head_dim, device, theta=10000.0):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    f = torch.outer(torch.arange(seq, device=device, dtype=torch.float32), inv)
    f = torch.cat((f, f), dim=-1)  # (seq, head_dim), rotate-half layout
    return f.cos(), f.sin()


def apply_rope(x, cos, sin):  # x: (B, H, S, Dh)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Attention(nn.Module):
    def __init__(self, dim, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = n_heads, n_kv_heads, dim // n_heads
        self.wq = nn.Linear(dim, n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(dim, n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(n_heads * self.head_dim, dim, bias=False)

    def forward(self, x, cos, sin):
        B, S, _ = x.shape
        # -1: the local head count (n_heads / tp under tensor parallelism), as torchtitan does
        q = self.wq(x).view(B, S, -1, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(B, S, -1, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(B, S, -1, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.wo(o.transpose(1, 2).reshape(B, S, -1))


class FeedForward(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.w1 = nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention_norm = nn.RMSNorm(c.hidden, eps=1e-5)
        self.attention = Attention(c.hidden, c.heads, c.kv_heads)
        self.ffn_norm = nn.RMSNorm(c.hidden, eps=1e-5)
        self.feed_forward = FeedForward(c.hidden, c.intermediate)

    def forward(self, x, cos, sin):
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))


class Llama(nn.Module):
    """The whole model (first and last) or one pipeline stage: layers [lo, hi)."""

    def __init__(self, c, lo=0, hi=None, first=True, last=True):
        super().__init__()
        hi = c.layers if hi is None else hi
        self.tok_embeddings = nn.Embedding(c.vocab, c.hidden) if first else None
        self.layers = nn.ModuleDict({str(i): Block(c) for i in range(lo, hi)})
        self.norm = nn.RMSNorm(c.hidden, eps=1e-5) if last else None
        self.output = nn.Linear(c.hidden, c.vocab, bias=False) if last else None
        cos, sin = rope_tables(c.seq, c.hidden // c.heads, self.layers_device())
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def layers_device(self):
        return next(self.parameters()).device

    def forward(self, x):
        # autocast inside the forward only: the backward (run by the pipeline schedule or by
        # loss.backward()) stays outside it, as torch.autocast's documentation recommends
        with torch.autocast("cuda", dtype=torch.bfloat16):
            h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
            for layer in self.layers.values():
                h = layer(h, self.cos, self.sin)
            if self.output is None:
                return h  # fp32 residual stream to the next stage
            h = self.norm(h)
            return self.output(h).float()  # fp32 logits, as torch_ref.py feeds the loss


def cross_entropy(logits, target):
    return F.cross_entropy(logits.flatten(0, 1), target.flatten(0, 1))


# ---------------------------------------------------------------------------------- grad clipping
def clip_grad_norm(params, max_norm, plain_is_sharded):
    """Global L2 norm over all ranks' gradients, then in-place scaling by min(1, max/norm).
    DTensor gradients: a Shard placement counts the local piece in a sum over ranks, Replicate
    counts once; a Partial one is reduced first. Plain tensors: summed over ranks when
    plain_is_sharded (pipeline stages hold different parameters), else replicated (TP's norms)."""
    from torch.distributed.tensor import DTensor

    summed, local, pieces = [], [], []
    for p in params:
        g = p.grad
        if g is None:
            continue
        if isinstance(g, DTensor):
            lt = g.to_local()
            pieces.append(lt)
            if any(not (pl.is_shard() or pl.is_replicate()) for pl in g.placements):  # Partial
                local.append(torch.linalg.vector_norm(g.full_tensor(), dtype=torch.float32))
            elif any(pl.is_shard() for pl in g.placements):
                summed.append(torch.linalg.vector_norm(lt, dtype=torch.float32))
            else:
                local.append(torch.linalg.vector_norm(lt, dtype=torch.float32))
        else:
            pieces.append(g)
            (summed if plain_is_sharded else local).append(torch.linalg.vector_norm(g, dtype=torch.float32))
    dev = torch.device("cuda", torch.cuda.current_device())
    s = torch.stack(summed).square().sum() if summed else torch.zeros((), device=dev)
    dist.all_reduce(s)
    if local:
        s = s + torch.stack(local).square().sum()
    norm = s.sqrt()
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for t in pieces:
        t.mul_(coef)
    return norm


# ------------------------------------------------------------------------------------------- run
def main(rank, world, local_rank):
    dev = torch.device("cuda", local_rank)
    torch.backends.cuda.matmul.allow_tf32 = True
    L, D, H, Hkv, I, V, S = a.layers, a.hidden, a.heads, a.kv_heads, a.intermediate, a.vocab, a.seq
    Dh = D // H
    nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
    flops_per_token = 6 * nonembed + 12 * L * D * S
    B = a.micro_batch
    notes = []

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)  # same token ids on every rank
    schedule = None
    if a.mode == "tp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import DTensor, Replicate, Shard
        from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel, loss_parallel,
                                                       parallelize_module)
        if H % world or Hkv % world or V % world:
            raise ValueError(f"heads {H}, kv heads {Hkv} and vocab {V} must divide by tp {world}")
        mesh = init_device_mesh("cuda", (world,))
        with torch.device(dev):
            model = Llama(a)
        parallelize_module(model, mesh, {
            "tok_embeddings": RowwiseParallel(input_layouts=Replicate()),
            "output": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False),
        })
        for blk in model.layers.values():
            parallelize_module(blk, mesh, {
                "attention.wq": ColwiseParallel(),
                "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(),
                "attention.wo": RowwiseParallel(),
                "feed_forward.w1": ColwiseParallel(),
                "feed_forward.w2": RowwiseParallel(),
                "feed_forward.w3": ColwiseParallel(),
            })
            blk.attention.n_heads //= world  # local heads (the forward uses -1 in its views)
            blk.attention.n_kv_heads //= world
            if a.compile:
                blk.compile()
        # fused AdamW takes DTensor parameters, but not DTensor and plain tensors in one call:
        # the RMSNorm weights (replicated, plain tensors) get their own optimizer
        dparams = [p for p in model.parameters() if isinstance(p, DTensor)]
        pparams = [p for p in model.parameters() if not isinstance(p, DTensor)]
        opts = [torch.optim.AdamW(ps, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
                for ps in (dparams, pparams) if ps]
        x = torch.randint(0, V, (B, S + 1), generator=gen).to(dev)
        inp, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()
        tokens_per_step = B * S
        clip_plain_sharded = False
        notes.append(f"TP={world} (1-D DeviceMesh, parallelize_module: wq/wk/wv/w1/w3 Colwise, wo/w2 "
                     "Rowwise, embedding Rowwise(input Replicate), LM head Colwise(output Shard(-1)) + "
                     "loss_parallel; no sequence parallelism); one micro-batch per step, same data on "
                     "every rank, tokens counted once; 2 fused AdamW (DTensor params, RMSNorm weights)")

        def step():
            logits = model(inp)
            with loss_parallel():
                loss = cross_entropy(logits, tgt)
                loss.backward()
            return loss.to_local().detach() if isinstance(loss, DTensor) else loss.detach()

    elif a.mode == "pp":
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B
        if L < world:
            raise ValueError(f"{L} layers do not split over {world} stages")
        if a.micro_batches < world:
            raise ValueError(f"Schedule1F1B needs >= {world} micro-batches, got {a.micro_batches}")
        per, extra = divmod(L, world)
        lo = rank * per + min(rank, extra)
        hi = lo + per + (1 if rank < extra else 0)
        first, last = rank == 0, rank == world - 1
        with torch.device(dev):
            model = Llama(a, lo, hi, first=first, last=last)
        stage = PipelineStage(model, stage_index=rank, num_stages=world, device=dev)
        schedule = Schedule1F1B(stage, n_microbatches=a.micro_batches, loss_fn=cross_entropy)
        opts = [torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=True)]
        M = a.micro_batches
        x = torch.randint(0, V, (M * B, S + 1), generator=gen).to(dev)
        inp, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()
        tokens_per_step = M * B * S
        clip_plain_sharded = True
        notes.append(f"PP={world} stages (layers {per}{'+1' if extra else ''} each), PipelineStage on "
                     f"each stage's module, Schedule1F1B with {M} micro-batches of {B} sequences per "
                     "step (global batch per step = micro-batch x micro-batches); fp32 activations "
                     "between stages (the autocast residual stream); grads scaled 1/micro-batches")

        def step():
            losses = []
            if first:
                schedule.step(inp)
            elif last:
                schedule.step(target=tgt, losses=losses)
            else:
                schedule.step()
            if losses:
                return torch.stack([l.detach().float() for l in losses]).mean()
            return torch.zeros((), device=dev)

    else:  # fsdp
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cuda", (world,))
        with torch.device(dev):
            model = Llama(a)
        for blk in model.layers.values():
            if a.compile:
                blk.compile()
            fully_shard(blk, mesh=mesh)
        fully_shard(model, mesh=mesh)
        opts = [torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                                  fused=True)]
        x = torch.randint(0, V, (B, S + 1), generator=gen).to(dev)
        inp, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()
        tokens_per_step = world * B * S
        clip_plain_sharded = True
        notes.append(f"FSDP2 over {world} GPUs (fully_shard per block, then the root; default "
                     "MixedPrecisionPolicy, i.e. fp32 all-gathers and reduce-scatters, bf16 compute by "
                     f"autocast); {B} sequences per GPU per step, tokens counted over all GPUs")

        def step():
            logits = model(inp)
            loss = cross_entropy(logits, tgt)
            loss.backward()
            return loss.detach()

    params = list(model.parameters())
    if a.clip > 0:
        notes.append(f"grad clip {a.clip} (global norm from local pieces, one all-reduce)")
    else:
        notes.append("no grad clip")

    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.reset_peak_memory_stats()
    times, host = [], []
    loss = None
    for i in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        dist.barrier()
        t0, h0 = time.perf_counter(), time.thread_time()
        loss = step()
        if a.clip > 0:
            clip_grad_norm(params, a.clip, clip_plain_sharded)
        for o in opts:
            o.step()
        for o in opts:
            o.zero_grad(set_to_none=True)
        h1 = time.thread_time()  # before the synchronize, whose wait may spin
        torch.cuda.synchronize()
        dist.barrier()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
            host.append(h1 - h0)

    t = statistics.median(times)
    peak = torch.tensor([torch.cuda.max_memory_allocated(dev)], dtype=torch.float64, device=dev)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    lt = loss.float().reshape(1).clone()
    if a.mode == "pp":  # the loss lives on the last stage
        dist.all_reduce(lt)
    tok = tokens_per_step / t
    if a.compile and a.mode != "pp":
        notes.append("torch.compile per block")
    out = dict(impl=IMPL[a.mode] + ("+compile" if a.compile and a.mode != "pp" else ""), gpus=world,
               tokens_per_s=tok, step_ms=t * 1e3, host_ms=statistics.median(host) * 1e3,
               mfu=tok * flops_per_token / (a.peak_tflops * 1e12 * world),
               peak_mem_gib=float(peak.item()) / 2**30, loss=float(lt.item()), steps=len(times),
               step_ms_min=min(times) * 1e3, step_ms_max=max(times) * 1e3,
               tokens_per_step=tokens_per_step, seq=S, micro_batch=B,
               micro_batches=a.micro_batches if a.mode == "pp" else 1,
               grad_clip=a.clip, torch=torch.__version__, notes="; ".join(notes))
    if rank == 0:
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    try:
        torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=int(os.environ.get(
            "TORCH_GRID_PG_TIMEOUT", "120"))))
        main(rank, world, local_rank)
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # a failed reference must not hide the other measurements
        traceback.print_exc(file=sys.stderr)
        msg = f"{type(e).__name__}: {e}".strip().replace("\n", " | ")[:1500]
        print(json.dumps({"impl": IMPL[a.mode], "error": msg, "rank": rank}), flush=True)
        sys.stderr.flush()
        os._exit(0)
