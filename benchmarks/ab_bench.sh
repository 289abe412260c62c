#!/usr/bin/env bash
# Two builds of dissect side by side in one call (a change against its baseline), one GPU:
#   . .gpu/env.sh && benchmarks/ab_bench.sh BASE_DISSECT NEW_DISSECT [SEQ] [MICRO_BATCH] [STEPS] [ROUNDS]
# (defaults 2048 8 10 3). TinyLlama-1.1B shapes on synthetic tokens, as benchmarks/gpu_bench.sh.
# The two binaries alternate (base, new, base, new, ...) for ROUNDS rounds, so drift of the GPU's
# clocks hits both; each run's figure is the median step time after the 3rd step (step-level
# trace). Prints one row per run, then the median over runs of each build, tokens/s, MFU (the
# formula of gpu_bench.sh) and new / base. Budget ~1 minute per run on an H100 (most of it is
# initialising the 1.1B parameters), i.e. ~2 x ROUNDS minutes, plus the builds: BASE_DISSECT is
# typically a build of the previous commit (`git archive HEAD~1` into an ignored folder that the
# device call carries, built there beside build-gpu).
set -euo pipefail
cd "$(dirname "$0")/.."
base=$1 new=$2 seq=${3:-2048} mb=${4:-8} steps=${5:-10} rounds=${6:-3}
OUT=${OUT:-/tmp/dissect-ab}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab 32000 --tokens $(( (steps + 2) * mb * (seq + 1) * 2 ))
"$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size 32000 > /dev/null
common=(train --device cuda --model tinyllama-1.1b --train-data "$OUT/tok.bin" --seq-length "$seq"
        --micro-batch "$mb" --eval-interval 0 --sample-tokens 0 --log-interval 1 --train-iters "$steps"
        --trace-level step)
for r in $(seq "$rounds"); do
  for which in base new; do
    bin=$base; [ "$which" = new ] && bin=$new
    mpirun -np 1 --bind-to none -x CUDA_VISIBLE_DEVICES "$bin" "${common[@]}" --trace "$OUT/$which-$r.h5" \
      > "$OUT/$which-$r.log" 2>&1 || { tail -20 "$OUT/$which-$r.log"; exit 1; }
  done
done
"$py" - "$OUT" "$seq" "$mb" "$rounds" <<'PY'
import sys, h5py, numpy as np
out, seq, mb, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
L, D, H, Hkv, I, V = 22, 2048, 32, 4, 5632, 32000
Dh = D // H
nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
fpt = 6 * nonembed + 12 * L * D * seq
med = {"base": [], "new": []}
print(f"\nTinyLlama-1.1B shapes, seq {seq}, micro-batch {mb}, 1 GPU: base and new alternating")
print(f"{'run':<8} {'step ms (median after warm-up)':>32}")
for r in range(1, rounds + 1):
    for w in ("base", "new"):
        with h5py.File(f"{out}/{w}-{r}.h5") as f:
            t = float(np.median(np.asarray(f["steps"]["step_time_s"])[3:]))
        med[w].append(t)
        print(f"{w + '-' + str(r):<8} {t * 1e3:>32.1f}")
print(f"\n{'build':<6} {'step ms':>8} {'tokens/s':>10} {'MFU':>6}")
for w in ("base", "new"):
    t = float(np.median(med[w]))
    print(f"{w:<6} {t * 1e3:>8.1f} {mb * seq / t:>10.0f} {mb * seq / t * fpt / 989e12:>6.3f}")
print(f"new / base tokens/s: {np.median(med['base']) / np.median(med['new']):.3f}")
PY
