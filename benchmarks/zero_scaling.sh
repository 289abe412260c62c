#!/usr/bin/env bash
# ZeRO-2 / ZeRO-3 scaling on the GPUs of one host against one GPU, TinyLlama-1.1B shapes:
#   . .gpu/env.sh && benchmarks/zero_scaling.sh [NGPU] [SEQ] [MICRO_BATCH] [STEPS]   (2 2048 8 10)
# MODEL=llama2-7b LAYERS=N: Llama-2-7B layer shapes with N layers instead (as gpu_bench.sh).
# Needs build-gpu. For 1 GPU (ZeRO-0) and NGPU GPUs (ZeRO-2, ZeRO-3): a step-level run (median
# step time after the 3rd step -> tokens/s) and an op-level run of 5 steps whose `dissect report`
# gives the exposed communication per step (mean over steps of the max over ranks). Prints a
# table: tokens/s (all GPUs), per GPU, scaling = per-GPU tokens/s / one GPU's, exposed comm.
# NCCL_* and DX_* variables of the environment are passed to the ranks; RUNS="zero2 zero3" skips
# the one-GPU runs (then the last one-GPU result in $OUT is the baseline); OP_TRACE=0 skips the
# op-level runs. While each step-level run goes, nvidia-smi samples the GPUs' SM clock and power
# every 200 ms (the table's last columns: means over the GPUs used and the samples after the
# first 40%, which cover model set-up).
set -euo pipefail
cd "$(dirname "$0")/.."
ngpu=${1:-2} seq=${2:-2048} mb=${3:-8} steps=${4:-10}
OUT=${OUT:-/tmp/dissect-zero}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab 32000 --tokens $(( (steps + 2) * mb * ngpu * (seq + 1) * 2 ))
"$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size 32000 > /dev/null
. benchmarks/model_shape.sh  # $model, shape=(hidden layers heads kv-heads ffn)
layers=${shape[1]}
common=(train --device cuda --model "$model" --num-layers "$layers" --train-data "$OUT/tok.bin"
        --seq-length "$seq" --micro-batch "$mb" --eval-interval 0 --sample-tokens 0 --log-interval 1)
mpi=(mpirun -x LD_LIBRARY_PATH -x PATH)
for v in $(env | grep -o '^\(NCCL\|DX\)_[A-Z_]*'); do mpi+=(-x "$v"); done
run() { # name np stage
  local n=$1 np=$2 zs=$3 smi=
  if command -v nvidia-smi > /dev/null; then
    nvidia-smi --query-gpu=index,clocks.sm,power.draw --format=csv,noheader,nounits -lms 200 \
      > "$OUT/$n.smi.csv" 2>/dev/null & smi=$!
  fi
  "${mpi[@]}" -np "$np" build-gpu/dissect "${common[@]}" --zero-stage "$zs" --train-iters "$steps" \
    --trace "$OUT/$n.h5" --trace-level step > "$OUT/$n.log" 2>&1 || { tail -20 "$OUT/$n.log"; exit 1; }
  [ -n "$smi" ] && kill "$smi" 2>/dev/null
  rm -f "$OUT/${n}_report.txt"
  [ "${OP_TRACE:-1}" = 0 ] && return
  "${mpi[@]}" -np "$np" build-gpu/dissect "${common[@]}" --zero-stage "$zs" --train-iters 5 \
    --trace "$OUT/${n}_op.h5" --trace-level op > "$OUT/${n}_op.log" 2>&1 || { tail -20 "$OUT/${n}_op.log"; exit 1; }
  build-gpu/dissect report "$OUT/${n}_op.h5" > "$OUT/${n}_report.txt"
}
runs=${RUNS:-gpu1 zero2 zero3}
for r in $runs; do
  case $r in gpu1) run gpu1 1 0 ;; zero2) run zero2 "$ngpu" 2 ;; zero3) run zero3 "$ngpu" 3 ;; esac
done
"$py" - "$OUT" "$seq" "$mb" "$ngpu" "$model" "$layers" <<'PY'
import os, sys, h5py, numpy as np
out, seq, mb, ngpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
model, layers = sys.argv[5], int(sys.argv[6])
def step_s(name):
    with h5py.File(f"{out}/{name}.h5") as f:
        return float(np.median(np.asarray(f["steps"]["step_time_s"])[3:]))
def exposed_ms(name):
    if not os.path.exists(f"{out}/{name}_report.txt"):
        return float("nan"), float("nan")
    for line in open(f"{out}/{name}_report.txt"):
        w = line.split()
        if len(w) == 8 and w[0] == "mean" and w[1] == "max":  # step breakdown: mean of the max over ranks
            return float(w[5]), float(w[7])
    return float("nan"), float("nan")
def smi(name, n):
    try:
        rows = [[float(x) for x in l.split(",")] for l in open(f"{out}/{name}.smi.csv") if l.count(",") == 2]
    except (OSError, ValueError):
        return float("nan"), float("nan")
    rows = [r for r in rows if r[0] < n]
    rows = rows[int(len(rows) * 0.4):]
    if not rows:
        return float("nan"), float("nan")
    return float(np.mean([r[1] for r in rows])), float(np.mean([r[2] for r in rows]))
base = mb * seq / step_s("gpu1")
print(f"\n{model} shapes ({layers} layers), seq {seq}, micro-batch {mb} per GPU")
print(f"{'run':<22} {'tokens/s':>10} {'per GPU':>9} {'scaling':>8} {'exposed comm ms':>16} {'step ms':>8}"
      f" {'SM MHz':>7} {'W':>5}")
for name, label, n in (("gpu1", "1 GPU", 1), ("zero2", f"{ngpu} GPUs ZeRO-2", ngpu), ("zero3", f"{ngpu} GPUs ZeRO-3", ngpu)):
    if not os.path.exists(f"{out}/{name}.h5"):
        continue
    tok = n * mb * seq / step_s(name)
    comm, st = exposed_ms(name)
    mhz, watt = smi(name, n)
    print(f"{label:<22} {tok:>10.0f} {tok/n:>9.0f} {tok/n/base:>8.3f} {comm:>16.2f} {st:>8.1f} {mhz:>7.0f} {watt:>5.0f}")
PY
