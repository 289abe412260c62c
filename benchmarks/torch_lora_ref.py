#!/usr/bin/env python3
"""Hugging Face + PEFT reference for dissect's LoRA: what a user would run instead.

A Hugging Face LlamaForCausalLM (Llama-2-7B shapes by default) built from LlamaConfig directly on
the GPU in bf16 (weights normal(0, 0.02), RMSNorm weights ones: random, as dissect's preset run),
SDPA attention, wrapped by peft.get_peft_model with LoraConfig(r, lora_alpha, target_modules,
lora_dropout 0, bias "none", task_type CAUSAL_LM). PEFT keeps the adapters in fp32 (its default
autocast_adapter_dtype=True). Each step runs under torch.autocast(bf16), as the Hugging Face
Trainer does with bf16=True: forward, fp32 cross-entropy over all seq positions (computed here,
not by the model's shifted labels=), backward, clip_grad_norm_ over the adapters (--clip, 0 = off),
torch.optim.AdamW over the adapters (lr 1e-4, betas 0.9/0.95, weight decay 0, torch's default
implementation on CUDA). --recompute turns on Hugging Face gradient checkpointing (non-reentrant;
with enable_input_require_grads, as PEFT needs). QLoRA in PEFT needs bitsandbytes, which the GPU
host lacks, so the reference is LoRA only.

    python3 benchmarks/torch_lora_ref.py [--seq 350 --micro-batch 8 --rank 16 --alpha 32 ...]

Data: --ids, a text file of whitespace-separated token ids cut into consecutive windows of seq+1
(wrapping around); without it random ids. Timed with torch.cuda.synchronize() +
time.perf_counter(): the median step over --steps steps after --warmup.

Prints one JSON line on stdout: impl "hf-peft-lora", seq, micro_batch, tokens_per_step, step_ms,
tokens_per_s, mfu, peak_gpu_gib (torch.cuda.max_memory_allocated over the timed loop),
trainable_params, losses, settings, torch / transformers / peft versions. On an exception: one JSON
line {"impl", "error"}, exit 1. MFU counts LoRA's work: 4 x non-embedding params (forward, and the
frozen weights' input gradients; no weight gradients) + 12 x layers x hidden x seq per token, at
--peak-tflops; the adapters' own FLOPs and recomputation are not counted.
"""
import argparse
import json
import statistics
import sys
import time
import traceback

import torch
import torch.nn.functional as F

IMPL = "hf-peft-lora"
TARGETS = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("--hidden", type=int, default=4096)
ap.add_argument("--layers", type=int, default=32)
ap.add_argument("--heads", type=int, default=32)
ap.add_argument("--kv-heads", type=int, default=32)
ap.add_argument("--intermediate", type=int, default=11008)
ap.add_argument("--vocab", type=int, default=32000)
ap.add_argument("--seq", type=int, default=350)
ap.add_argument("--micro-batch", type=int, default=8)
ap.add_argument("--rank", type=int, default=16)
ap.add_argument("--alpha", type=float, default=32)
ap.add_argument("--targets", default=TARGETS)
ap.add_argument("--warmup", type=int, default=3)
ap.add_argument("--steps", type=int, default=10, help="timed steps after --warmup")
ap.add_argument("--ids", default=None, help="text file of whitespace-separated token ids (default: random)")
ap.add_argument("--clip", type=float, default=1.0)
ap.add_argument("--recompute", action="store_true", help="gradient checkpointing per decoder layer")
ap.add_argument("--peak-tflops", type=float, default=989.0)
a = ap.parse_args()


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def load_windows(n, seq, vocab):
    w = seq + 1
    if a.ids is None:
        g = torch.Generator().manual_seed(0)
        return torch.randint(0, vocab, (n, w), generator=g), "random (seed 0)"
    with open(a.ids) as f:
        ids = torch.tensor([int(t) for t in f.read().split()], dtype=torch.int64)
    avail = ids.numel() // w
    if avail == 0 or int(ids.max()) >= vocab or int(ids.min()) < 0:
        raise ValueError(f"{a.ids}: {ids.numel()} ids in [{int(ids.min())}, {int(ids.max())}]: not one window of "
                         f"{w} within the vocabulary {vocab}")
    return ids[: avail * w].view(avail, w)[torch.arange(n) % avail], f"{a.ids} ({avail} windows)"


def main():
    import peft
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM

    dev = torch.device("cuda", 0)
    torch.backends.cuda.matmul.allow_tf32 = True
    L, D, H, Hkv, I, V, S, B = a.layers, a.hidden, a.heads, a.kv_heads, a.intermediate, a.vocab, a.seq, a.micro_batch
    Dh = D // H
    nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
    flops_per_token = 4 * nonembed + 12 * L * D * S
    cfg = LlamaConfig(hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=Hkv,
                      intermediate_size=I, vocab_size=V, max_position_embeddings=max(S, 4096), rms_norm_eps=1e-5,
                      tie_word_embeddings=False, use_cache=False, attn_implementation="sdpa")
    t0 = time.perf_counter()
    torch.manual_seed(0)
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(dev):
        model = LlamaForCausalLM(cfg)
    torch.set_default_dtype(torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02)
    if a.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.enable_input_require_grads()
    lcfg = peft.LoraConfig(r=a.rank, lora_alpha=a.alpha, target_modules=a.targets.split(","), lora_dropout=0.0,
                           bias="none", task_type="CAUSAL_LM")
    model = peft.get_peft_model(model, lcfg)
    model.train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    n_train = sum(p.numel() for p in trainable)
    torch.cuda.synchronize()
    log(f"model built in {time.perf_counter() - t0:.1f} s; trainable {n_train / 1e6:.1f} M "
        f"({trainable[0].dtype}), base {next(model.parameters()).dtype}")
    opt = torch.optim.AdamW(trainable, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.0)

    n_steps = a.warmup + a.steps
    windows, source = load_windows(n_steps * B, S, V)
    windows = windows.view(n_steps, B, S + 1).to(dev)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for i in range(n_steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        w = windows[i]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=w[:, :-1]).logits
        loss = F.cross_entropy(logits.float().flatten(0, 1), w[:, 1:].flatten())
        loss.backward()
        del logits
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(trainable, a.clip)
        opt.step()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        losses.append(loss.item())
        if i >= a.warmup:
            times.append(t1 - t0)
        log(f"step {i + 1}/{n_steps}{' (warm-up)' if i < a.warmup else ''}: loss {losses[-1]:.4f}, "
            f"{(t1 - t0) * 1e3:.0f} ms")
    t = statistics.median(times)
    tok = B * S / t
    print(json.dumps(dict(impl=IMPL, seq=S, micro_batch=B, tokens_per_step=B * S, step_ms=t * 1e3, tokens_per_s=tok,
                          mfu=tok * flops_per_token / (a.peak_tflops * 1e12),
                          peak_gpu_gib=torch.cuda.max_memory_allocated(dev) / 2**30, trainable_params=n_train,
                          rank=a.rank, alpha=a.alpha, targets=a.targets, recompute=a.recompute, clip=a.clip,
                          losses=losses, steps=len(times), step_ms_min=min(times) * 1e3,
                          step_ms_max=max(times) * 1e3, data=source, torch=torch.__version__,
                          transformers=transformers.__version__, peft=peft.__version__)), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        traceback.print_exc(file=sys.stderr)
        print(json.dumps({"impl": IMPL, "error": f"{type(e).__name__}: {e}"[:1500]}), flush=True)
        sys.exit(1)
