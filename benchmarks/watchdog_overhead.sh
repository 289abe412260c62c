#!/usr/bin/env bash
# The collective watchdog's cost (src/comm/watchdog.h): TinyLlama-1.1B shapes, ZeRO-3 on one GPU
# (per-layer all-gathers and reduce-scatters on NCCL, each noted for the watchdog), with the
# watchdog (distributed_timeout_minutes 10, the default) and without (0), alternated, RUNS runs
# each; median step time of the steps after the 3rd of each run, then the median over runs.
#   . .gpu/env.sh && benchmarks/watchdog_overhead.sh [SEQ] [MICRO_BATCH] [STEPS] [RUNS]   (1024 8 12 3)
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-1024} mb=${2:-8} steps=${3:-12} runs=${4:-3}
OUT=${OUT:-/tmp/dissect-watchdog}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab 32000 --tokens $(( (steps + 2) * mb * (seq + 1) * 2 ))
"$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size 32000 > /dev/null
common=(train --device cuda --model tinyllama-1.1b --train-data "$OUT/tok.bin" --seq-length "$seq" --micro-batch "$mb"
        --zero-stage 3 --eval-interval 0 --sample-tokens 0 --log-interval 100 --train-iters "$steps" --trace-level step)
for i in $(seq "$runs"); do
  for t in 10 0; do
    mpirun -np 1 --bind-to none build-gpu/dissect "${common[@]}" --distributed-timeout-minutes "$t" --trace "$OUT/t${t}_$i.h5" \
      > "$OUT/t${t}_$i.log" 2>&1 || { tail -20 "$OUT/t${t}_$i.log"; exit 1; }
  done
done
"$py" - "$OUT" "$runs" "$seq" "$mb" <<'PY'
import sys, h5py, numpy as np
out, runs, seq, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
med = {}
for t in (10, 0):
    per = [float(np.median(np.asarray(h5py.File(f"{out}/t{t}_{i}.h5")["steps"]["step_time_s"])[3:])) for i in range(1, runs + 1)]
    med[t] = (float(np.median(per)), per)
print(f"\nwatchdog cost, TinyLlama-1.1B shapes, seq {seq} x {mb}, ZeRO-3, 1 GPU, {runs} alternated runs each")
print(f"{'watchdog':<26} {'step ms (median)':>17} {'tokens/s':>9}  runs (ms)")
for t, name in ((10, "on (10 min timeout)"), (0, "off (0)")):
    m, per = med[t]
    print(f"{name:<26} {m*1e3:>17.1f} {mb*seq/m:>9.0f}  " + " ".join(f"{p*1e3:.1f}" for p in per))
print(f"ratio on/off: {med[10][0]/med[0][0]:.4f}")
PY
