#!/usr/bin/env bash
# LoRA and QLoRA fine-tuning speed on one GPU, Llama-2-7B shapes: dissect against Hugging Face +
# PEFT (benchmarks/torch_lora_ref.py), side by side in one call, on the Brown corpus's tokens:
#   . .gpu/env.sh && benchmarks/lora_bench.sh [SEQ] [MICRO_BATCH] [STEPS] [RECOMPUTE]
# (defaults 350 8 12 none). Needs build-gpu (tests/gpu_suite.sh build) and data/brown/train.bin +
# train.ids (examples/prepare_brown.sh; carried to the GPU host). RECOMPUTE: none | selective |
# full for dissect; PEFT gets gradient checkpointing when it is not none.
# The same settings on both sides: random base weights (the llama2-7b preset; the speed does not
# depend on their values), LoRA r 16, alpha 32 on all seven linear layers, no dropout, AdamW over
# the adapters, gradient clipping 1.0, no weight decay. Runs, in order:
#   1. dissect LoRA, STEPS steps, step-level trace;
#   2. dissect QLoRA (--quantize nf4), STEPS steps, step-level trace;
#   3. dissect QLoRA, 3 steps, op-level trace -> `dissect report` (where the step goes);
#   4. Hugging Face + PEFT LoRA (bf16 base, fp32 adapters under bf16 autocast), 3 + STEPS-3 steps.
# Prints a table last: tokens/s (median step after the 3rd), step ms, MFU (4 x non-embedding params +
# 12 x layers x hidden x seq FLOPs per token: forward and input gradients, no weight gradients, at
# 989 TFLOP/s), GPU peak (dissect: its allocator; PEFT: torch.cuda.max_memory_allocated).
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-350} mb=${2:-8} steps=${3:-12} rc=${4:-none}
OUT=${OUT:-/tmp/dissect-lora}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
data=data/brown/train.bin
[ -s "$data" ] && [ -s data/brown/train.ids ] || { echo "lora_bench: $data or data/brown/train.ids missing (examples/prepare_brown.sh)" >&2; exit 1; }
recf=(--recompute-granularity "$rc"); [ "$rc" = full ] && recf+=(--recompute-method uniform)
common=(train --device cuda --model llama2-7b --train-data "$data" --seq-length "$seq" --micro-batch "$mb"
        "${recf[@]}" --eval-interval 0 --sample-tokens 0 --log-interval 1 --lr 1e-4 --warmup-iters 2
        --weight-decay 0 --clip-grad 1.0 --lora-rank 16 --lora-alpha 32
        --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
mpi=(mpirun -np 1 --bind-to none -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH)
t0=$SECONDS
"${mpi[@]}" build-gpu/dissect "${common[@]}" --train-iters "$steps" --trace "$OUT/lora.h5" --trace-level step \
  > "$OUT/lora.log" 2>&1 || { tail -20 "$OUT/lora.log"; exit 1; }
echo "dissect LoRA: $((SECONDS - t0)) s" >&2
"${mpi[@]}" build-gpu/dissect "${common[@]}" --quantize nf4 --train-iters "$steps" --trace "$OUT/qlora.h5" \
  --trace-level step > "$OUT/qlora.log" 2>&1 || { tail -20 "$OUT/qlora.log"; exit 1; }
echo "dissect QLoRA: $((SECONDS - t0)) s" >&2
if [ "${SKIP_OP:-0}" != 1 ]; then
  "${mpi[@]}" build-gpu/dissect "${common[@]}" --quantize nf4 --train-iters 3 --trace "$OUT/qlora_op.h5" \
    --trace-level op > "$OUT/qlora_op.log" 2>&1 && build-gpu/dissect report "$OUT/qlora_op.h5" --steps 2:3 \
    > "$OUT/report.txt" 2>&1 || tail -5 "$OUT/qlora_op.log"
  echo "dissect QLoRA op trace: $((SECONDS - t0)) s" >&2
fi
if [ "${SKIP_TORCH:-0}" = 1 ]; then : > "$OUT/torch.jsonl"
else
  tr=(--seq "$seq" --micro-batch "$mb" --steps $((steps > 3 ? steps - 3 : 1)) --warmup 3 --ids data/brown/train.ids)
  [ "$rc" = none ] || tr+=(--recompute)
  "$py" benchmarks/torch_lora_ref.py "${tr[@]}" > "$OUT/torch.jsonl" 2> "$OUT/torch.err" || tail -5 "$OUT/torch.err"
fi
echo "all runs done: $((SECONDS - t0)) s" >&2
grep -E "memory held" "$OUT/lora.log" "$OUT/qlora.log" | tail -2 || true
[ -f "$OUT/report.txt" ] && sed -n '/Step breakdown/,/^$/p;/Top operators/,/^$/p' "$OUT/report.txt" | grep -Ev '^ *(min|max) ' | head -40
"$py" - "$OUT" "$seq" "$mb" "$rc" <<'PY'
import json, sys, h5py, numpy as np
out, seq, mb, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
L, D, H, Hkv, I, V = 32, 4096, 32, 32, 11008, 32000
Dh = D // H
nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
fpt = 4 * nonembed + 12 * L * D * seq
tok_step = mb * seq
rows = []
for name, f in (("dissect LoRA", "lora.h5"), ("dissect QLoRA (NF4)", "qlora.h5")):
    with h5py.File(f"{out}/{f}") as h:
        s = h["steps"]
        st = np.asarray(s["step_time_s"]); loss = np.asarray(s["loss"])
        t = float(np.median(st[3:]))
        peak = float(np.max(s["peak_mem_bytes"][-1])) / 2**30
        pb = float(np.max(s["params_bytes"][-1])) / 2**30
    rows.append((name, tok_step / t, t * 1e3, tok_step / t * fpt / 989e12, peak, pb, loss))
for l in open(f"{out}/torch.jsonl"):
    if not l.strip(): continue
    r = json.loads(l)
    if "error" in r: print("torch:", r["error"][:300]); continue
    rows.append((f"HF + PEFT {r['peft']} LoRA", r["tokens_per_s"], r["step_ms"], r["mfu"], r["peak_gpu_gib"], float("nan"),
                 np.asarray(r["losses"])))
print(f"\nLlama-2-7B shapes, seq {seq}, micro-batch {mb} ({tok_step} tokens/step), 1 GPU, LoRA r 16 on all 7 linear "
      f"layers; recompute '{rc}'")
print(f"{'implementation':<26} {'tokens/s':>9} {'step ms':>8} {'MFU':>6} {'GPU peak GiB':>13} {'param GiB':>10}  loss first -> last")
for n, tok, ms, mfu, g, pb, loss in rows:
    print(f"{n:<26} {tok:>9.0f} {ms:>8.1f} {mfu:>6.3f} {g:>13.1f} {pb:>10.2f}  {loss[0]:.3f} -> {loss[-1]:.3f}")
if len(rows) > 2:
    print(f"dissect LoRA / PEFT tokens/s: {rows[0][1] / rows[2][1]:.2f}x; dissect QLoRA / PEFT: {rows[1][1] / rows[2][1]:.2f}x")
PY
