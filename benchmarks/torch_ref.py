#!/usr/bin/env python3
"""PyTorch reference for dissect's GPU benchmark: Hugging Face LlamaForCausalLM training steps.

Same shapes and recipe as the yardstick in the issue: bf16 autocast, fp32 master weights, fused
AdamW, SDPA attention; random token ids; median of --steps timed steps after --warmup. Prints one
JSON line per mode ("eager", "compile") with tokens/s, step ms, MFU and peak memory, and, with
--attention, SDPA's flash-backend forward/backward time on the model's attention shape.

MFU = tokens/s x (6 x non-embedding params + 12 x layers x hidden x seq) / 989e12 (dense bf16 peak).
"""
import argparse
import json
import statistics
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--hidden", type=int, default=2048)
ap.add_argument("--layers", type=int, default=22)
ap.add_argument("--heads", type=int, default=32)
ap.add_argument("--kv-heads", type=int, default=4)
ap.add_argument("--intermediate", type=int, default=5632)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--seq", type=int, default=2048)
ap.add_argument("--micro-batch", type=int, default=8)
ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches per optimizer step")
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--steps", type=int, default=7)
ap.add_argument("--modes", default="eager,compile")
ap.add_argument("--attention", action="store_true", help="also time SDPA (flash) fwd/bwd")
a = ap.parse_args()

torch.backends.cuda.matmul.allow_tf32 = True
dev = "cuda"
cfg = LlamaConfig(hidden_size=a.hidden, num_hidden_layers=a.layers, num_attention_heads=a.heads,
                  num_key_value_heads=a.kv_heads, intermediate_size=a.intermediate, vocab_size=a.vocab,
                  max_position_embeddings=max(a.seq, 2048), rms_norm_eps=1e-5, tie_word_embeddings=False,
                  attn_implementation="sdpa")
nonembed = None
flops_per_token = None


def run(mode):
    global nonembed, flops_per_token
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(dev)  # fp32 master weights
    nonembed = sum(p.numel() for n, p in model.named_parameters() if "embed_tokens" not in n)
    flops_per_token = 6 * nonembed + 12 * a.layers * a.hidden * a.seq
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    step_fn = model
    if mode == "compile":
        step_fn = torch.compile(model)
    x = torch.randint(0, a.vocab, (a.micro_batch, a.seq + 1), device=dev)
    inp, tgt = x[:, :-1].contiguous(), x[:, 1:].contiguous()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(a.warmup + a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.grad_accum):  # gradient accumulation: the loss of each micro-batch / N
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = step_fn(input_ids=inp).logits
            loss = torch.nn.functional.cross_entropy(logits.float().view(-1, a.vocab), tgt.view(-1))
            (loss / a.grad_accum).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    t = statistics.median(times)
    tok = a.micro_batch * a.seq * a.grad_accum / t
    out = dict(impl="pytorch-" + mode, step_ms=t * 1e3, tokens_per_s=tok, mfu=tok * flops_per_token / 989e12,
               peak_mem_gib=torch.cuda.max_memory_allocated() / 2**30, loss=float(loss), steps=len(times))
    print(json.dumps(out), flush=True)
    del model, opt, step_fn
    torch.cuda.empty_cache()


for mode in a.modes.split(","):
    run(mode)

if a.attention:
    B, T, H, Hkv, Dh = a.micro_batch, a.seq, a.heads, a.kv_heads, a.hidden // a.heads
    q = torch.randn(B, H, T, Dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(B, H, T, Dh, device=dev, dtype=torch.bfloat16, requires_grad=True)  # GQA expanded
    v = torch.randn(B, H, T, Dh, device=dev, dtype=torch.bfloat16, requires_grad=True)
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def time_it(fn, n=20):
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        for s, e in ev:
            s.record(); fn(); e.record()
        torch.cuda.synchronize()
        return statistics.median(s.elapsed_time(e) for s, e in ev)

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        fwd = time_it(lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True))
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        g = torch.randn_like(o)
        bwd = time_it(lambda: torch.autograd.grad(o, (q, k, v), g, retain_graph=True))
    fl = 4 * B * H * Dh * T * (T + 1) / 2
    print(json.dumps(dict(impl="sdpa-flash", shape=[B, T, H, Hkv, Dh], fwd_ms=fwd, bwd_ms=bwd,
                          fwd_tflops=fl / fwd / 1e9, bwd_tflops=2.5 * fl / bwd / 1e9)), flush=True)
