#!/usr/bin/env bash
# Activation recomputation on one GPU, TinyLlama-1.1B shapes (the paper's comparison of activation
# memory against throughput):
#   . .gpu/env.sh && benchmarks/recompute_bench.sh [SEQ] [MICRO_BATCH] [STEPS]   (defaults 2048 8 12)
# For recompute_granularity none / selective / full (method uniform): dissect train on synthetic
# tokens, step-level trace; prints tokens/s (median step after the 3rd), MFU (gpu_bench.sh's formula,
# recomputation not counted), the allocator's peak activation bytes and whole peak, and the memory
# plan's prediction of both (/metadata/plan_bytes), so the plan is checked against a GPU too.
# Needs build-gpu (tests/gpu_suite.sh build).
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-2048} mb=${2:-8} steps=${3:-12}
OUT=${OUT:-/tmp/dissect-recompute}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab 32000 --tokens $(( (steps + 2) * mb * (seq + 1) * 2 ))
"$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size 32000 > /dev/null
for r in none selective full; do
  extra=(); [ "$r" = full ] && extra=(--recompute-method uniform)
  mpirun -np 1 --bind-to none -x CUDA_VISIBLE_DEVICES build-gpu/dissect train --device cuda --model tinyllama-1.1b \
    --train-data "$OUT/tok.bin" --seq-length "$seq" --micro-batch "$mb" --eval-interval 0 --sample-tokens 0 \
    --log-interval 1 --train-iters "$steps" --recompute-granularity "$r" "${extra[@]}" \
    --trace "$OUT/$r.h5" --trace-level step > "$OUT/$r.log" 2>&1 || { tail -20 "$OUT/$r.log"; exit 1; }
done
"$py" - "$OUT" "$seq" "$mb" <<'PY'
import sys, h5py, numpy as np
out, seq, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
L, D, H, Hkv, I, V = 22, 2048, 32, 4, 5632, 32000
Dh = D // H
fpt = 6 * (L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D) + 12 * L * D * seq
G = 2**30
print(f"\nActivation recomputation, TinyLlama-1.1B shapes, seq {seq}, micro-batch {mb}, 1 GPU (median step after warm-up)")
print(f"{'recompute':<10} {'tokens/s':>9} {'vs none':>8} {'MFU':>6} {'act GiB':>8} {'plan act':>9} {'peak GiB':>9} {'plan peak':>10}")
base = None
for r in ("none", "selective", "full"):
    with h5py.File(f"{out}/{r}.h5") as f:
        s = f["steps"]
        t = float(np.median(np.asarray(s["step_time_s"])[3:]))
        act = float(np.max(s["activations_bytes"][()])) / G
        peak = float(np.max(s["peak_mem_bytes"][()])) / G
        plan = np.asarray(f["metadata/plan_bytes"])
    tok = mb * seq / t
    base = base or tok
    print(f"{r:<10} {tok:>9.0f} {tok / base:>8.3f} {tok * fpt / 989e12:>6.3f} {act:>8.2f} {plan[0, 3] / G:>9.2f} {peak:>9.2f} {plan[0, 5] / G:>10.2f}")
PY
