#!/usr/bin/env bash
# dissect against PyTorch (eager and torch.compile) on TinyLlama-1.1B shapes, one GPU, one call:
#   . .gpu/env.sh && benchmarks/gpu_bench.sh [SEQ] [MICRO_BATCH] [STEPS]     (defaults 2048 8 10)
# MODEL=llama2-7b LAYERS=N: Llama-2-7B layer shapes (hidden 4096, 32 heads, FFN 11008, head dim
# 128) with N layers (as many as fit the GPU without offload), same formula and reference.
# Needs build-gpu (tests/gpu_suite.sh build). dissect: `train --model tinyllama-1.1b` on synthetic
# tokens, step-level trace, median step time of the steps after the 3rd; then an op-level trace of a
# few steps for the attention kernel's forward/backward time. PyTorch: benchmarks/torch_ref.py
# (HF LlamaForCausalLM, bf16 autocast, fused AdamW, SDPA), plus SDPA flash attention alone.
# Prints a table: tokens/s, step ms, MFU (6 x non-embedding params + 12 x layers x hidden x seq
# FLOPs per token, 989 TFLOP/s), peak memory; and the GPU's SM clock and power draw while each side
# trained (nvidia-smi every 100 ms, the samples at half the power limit or more: at the limit the
# clock drops, and every kernel with it), with the share of those samples whose clock nvidia-smi
# says the power limit lowered (benchmarks/gpu_samples.py). SKIP_TORCH=1 runs dissect only (quick iterations);
# TORCH_MODES=compile runs torch.compile only. ACCUM=N: N micro-batches per step (gradient
# accumulation, one optimizer step per N micro-batches) on both sides; tokens/s counts all of them.
# The table's figures also go to $OUT/summary.json (benchmarks/readme_rows.sh reads them).
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-2048} mb=${2:-8} steps=${3:-10} accum=${ACCUM:-1}
. benchmarks/model_shape.sh  # $model, shape=(hidden layers heads kv-heads ffn)
OUT=${OUT:-/tmp/dissect-bench}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab 32000 --tokens $(( (steps + 2) * mb * accum * (seq + 1) * 2 ))
"$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size 32000 > /dev/null
common=(train --device cuda --model "$model" --num-layers "${shape[1]}" --train-data "$OUT/tok.bin" --seq-length "$seq"
        --micro-batch "$mb" --grad-accum "$accum" --eval-interval 0 --sample-tokens 0 --log-interval 1)
gpu=${CUDA_VISIBLE_DEVICES%%,*}
. benchmarks/gpu_sampler.sh  # sample_start FILE / sample_stop: SM clock and power every 100 ms
nvidia-smi -i "$gpu" --query-gpu=power.limit,clocks.max.sm --format=csv,noheader,nounits > "$OUT/gpu_limits.csv" 2> /dev/null || : > "$OUT/gpu_limits.csv"
: > "$OUT/clock_dissect.csv"; : > "$OUT/clock_torch.csv"
sample_start "$OUT/clock_dissect.csv"
mpirun -np 1 --bind-to none -x CUDA_VISIBLE_DEVICES build-gpu/dissect "${common[@]}" --train-iters "$steps" \
  --trace "$OUT/step.h5" --trace-level step > "$OUT/dissect.log" 2>&1 || { sample_stop; tail -20 "$OUT/dissect.log"; exit 1; }
sample_stop
mpirun -np 1 --bind-to none -x CUDA_VISIBLE_DEVICES build-gpu/dissect "${common[@]}" --train-iters 3 \
  --trace "$OUT/op.h5" --trace-level op > "$OUT/dissect_op.log" 2>&1 || { tail -20 "$OUT/dissect_op.log"; exit 1; }
build-gpu/dissect report "$OUT/op.h5" > "$OUT/report.txt" 2>&1 || true
if [ "${SKIP_TORCH:-0}" = 1 ]; then : > "$OUT/torch.jsonl"  # dissect only (quick iterations)
else sample_start "$OUT/clock_torch.csv"
  "$py" benchmarks/torch_ref.py --seq "$seq" --micro-batch "$mb" --grad-accum "$accum" --attention --modes "${TORCH_MODES:-eager,compile}" \
  --hidden "${shape[0]}" --layers "${shape[1]}" --heads "${shape[2]}" --kv-heads "${shape[3]}" --intermediate "${shape[4]}" > "$OUT/torch.jsonl" 2> "$OUT/torch.err" \
  || { tail -20 "$OUT/torch.err"; }
  sample_stop
fi
"$py" - "$OUT" "$seq" "$mb" "$model" "${shape[@]}" "$accum" <<'PY'
import json, sys, h5py, numpy as np
sys.path.insert(0, "benchmarks")
import gpu_samples
out, seq, mb, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
D, L, H, Hkv, I = (int(x) for x in sys.argv[5:10])
accum = int(sys.argv[10])
V = 32000
Dh = D // H
nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
fpt = 6 * nonembed + 12 * L * D * seq
rows = []
with h5py.File(f"{out}/step.h5") as f:
    s = f["steps"]
    t = float(np.median(np.asarray(s["step_time_s"])[3:]))
    tok = mb * seq * accum / t
    rows.append(("dissect", tok, t * 1e3, tok * fpt / 989e12, float(np.max(s["peak_mem_bytes"][-1])) / 2**30))
att = {}
with h5py.File(f"{out}/op.h5") as f:
    ev = f["events"][()]
    opn = {v: k for k, v in h5py.check_enum_dtype(f["events"].dtype["op"]).items()}
    phn = {v: k for k, v in h5py.check_enum_dtype(f["events"].dtype["phase"]).items()}
    for ph in ("forward", "backward"):
        sel = [(e["end_ns"] - e["start_ns"]) for e in ev if opn[e["op"]] == "attention" and phn[e["phase"]] == ph and e["step"] >= 2]
        att[ph] = float(np.median(sel)) / 1e6 if sel else float("nan")
ref = [json.loads(l) for l in open(f"{out}/torch.jsonl") if l.strip()]
for r in ref:
    if r["impl"].startswith("pytorch"):
        rows.append((r["impl"], r["tokens_per_s"], r["step_ms"], r["mfu"], r["peak_mem_gib"]))
print(f"\n{model} shapes, {L} layers, seq {seq}, micro-batch {mb}" + (f" x {accum} per step (accumulation)" if accum > 1 else "")
      + ", 1 GPU (median step after warm-up)")
print(f"{'implementation':<18} {'tokens/s':>10} {'step ms':>9} {'MFU':>6} {'peak GiB':>9}")
for n, tok, ms, mfu, mem in rows:
    print(f"{n:<18} {tok:>10.0f} {ms:>9.1f} {mfu:>6.3f} {mem:>9.1f}")
fl = 4 * mb * H * Dh * seq * (seq + 1) / 2
print(f"\nattention B={mb} T={seq} H={H} Hkv={Hkv} Dh={Dh} (causal)    fwd ms  TFLOP/s   bwd ms  TFLOP/s")
print(f"{'dissect (op trace)':<44} {att['forward']:7.3f} {fl/att['forward']/1e9:8.1f} {att['backward']:8.3f} {2.5*fl/att['backward']/1e9:8.1f}")
for r in ref:
    if r["impl"] == "sdpa-flash":
        print(f"{'PyTorch SDPA flash':<44} {r['fwd_ms']:7.3f} {r['fwd_tflops']:8.1f} {r['bwd_ms']:8.3f} {r['bwd_tflops']:8.1f}")



try:
    limit_w, max_mhz = (float(x) for x in open(f"{out}/gpu_limits.csv").read().split(","))
except ValueError:
    limit_w = max_mhz = None
clocks = {}
if limit_w:
    print(f"\nGPU while training (nvidia-smi every 100 ms; samples at >= half the {limit_w:.0f} W power limit; "
          f"max SM clock {max_mhz:.0f} MHz)")
    print(f"{'run':<32} {'samples':>8} {'SM MHz':>7} {'(range)':>12} {'W':>6} {'power-capped':>13} {'other slowdown':>15}")
    for name, key in (("dissect (step-level run)", "dissect"), ("PyTorch (all its runs)", "torch")):
        c = gpu_samples.summary(gpu_samples.busy(gpu_samples.read(f"{out}/clock_{key}.csv"), limit_w))
        if c:
            print(f"{name:<32} {c['samples']:>8} {c['sm_mhz']:>7.0f} {c['sm_mhz_min']:>5.0f}-{c['sm_mhz_max']:<6.0f} {c['watts']:>6.0f} "
                  f"{gpu_samples.share(c['power_capped']):>13} {gpu_samples.share(c['other_slowdown']):>15}")
            clocks[key] = {"sm_mhz": c["sm_mhz"], "watts": c["watts"], "power_capped": c["power_capped"],
                           "other_slowdown": c["other_slowdown"]}
    print("(power-capped: share of those samples whose clock nvidia-smi says the power limit lowered (SW power cap); "
          "other slowdown: HW slowdown, thermal or power brake)")
# the same figures for scripts (benchmarks/readme_rows.sh)
json.dump({"model": model, "layers": L, "seq": seq, "micro_batch": mb, "accum": accum,
           "rows": [dict(impl=n, tokens_per_s=tok, step_ms=ms, mfu=mfu, peak_gib=mem) for n, tok, ms, mfu, mem in rows],
           "attention_ms": att, "clocks": clocks}, open(f"{out}/summary.json", "w"))
PY
