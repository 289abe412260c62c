#!/usr/bin/env bash
# dissect settings side by side in one call (environment switches against the default, or
# another build), one GPU:
#   . .gpu/env.sh && benchmarks/env_ab.sh SEQ MICRO_BATCH ROUNDS NAME=VAR=VALUE[,VAR=VALUE...] ...
# e.g. benchmarks/env_ab.sh 350 32 3 base= serial=DX_OPT_OVERLAP=0
# BIN=path among a setting's pairs runs that dissect binary instead of build-gpu/dissect (e.g. a
# build of the previous commit: old=BIN=.base/build-gpu/dissect).
# MODEL=llama2-7b LAYERS=N as in benchmarks/gpu_bench.sh (default TinyLlama-1.1B shapes); STEPS
# (default 10); ACCUM=N: N micro-batches per step (gradient accumulation, as gpu_bench.sh). The settings alternate (a, b, ..., a, b, ...) for ROUNDS rounds, so drift of the
# GPU's clock hits each alike; each run's figure is its median step time after the 3rd step
# (step-level trace). Prints one row per run, then per setting the median over its runs of
# tokens/s and MFU (gpu_bench.sh's formula) and the ratio to the first setting.
set -euo pipefail
cd "$(dirname "$0")/.."
seq=$1 mb=$2 rounds=$3; shift 3
steps=${STEPS:-10} accum=${ACCUM:-1}
. benchmarks/model_shape.sh  # $model, shape=(hidden layers heads kv-heads ffn)
OUT=${OUT:-/tmp/dissect-envab}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab 32000 --tokens $(( (steps + 2) * mb * accum * (seq + 1) * 2 ))
"$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size 32000 > /dev/null
common=(train --device cuda --model "$model" --num-layers "${shape[1]}" --train-data "$OUT/tok.bin"
        --seq-length "$seq" --micro-batch "$mb" --grad-accum "$accum" --eval-interval 0 --sample-tokens 0 --log-interval 1
        --train-iters "$steps" --trace-level step)
names=()
for r in $(seq "$rounds"); do
  for cfg in "$@"; do
    name=${cfg%%=*} vars=${cfg#*=}
    [ "$r" = 1 ] && names+=("$name")
    envs=(); xs=(); bin=build-gpu/dissect
    IFS=, read -ra kv <<< "$vars"
    for a in "${kv[@]}"; do
      case "$a" in
        '') ;;
        BIN=*) bin=${a#BIN=} ;;
        *) envs+=("$a"); xs+=(-x "${a%%=*}") ;;
      esac
    done
    env "${envs[@]}" mpirun -np 1 --bind-to none -x CUDA_VISIBLE_DEVICES "${xs[@]}" "$bin" \
      "${common[@]}" --trace "$OUT/$name-$r.h5" > "$OUT/$name-$r.log" 2>&1 || { tail -20 "$OUT/$name-$r.log"; exit 1; }
  done
done
"$py" - "$OUT" "$seq" "$mb" "$rounds" "$model" "${shape[@]}" "$accum" "${names[@]}" <<'PY'
import sys, h5py, numpy as np
out, seq, mb, rounds, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
D, L, H, Hkv, I = (int(x) for x in sys.argv[6:11])
accum = int(sys.argv[11])
names = sys.argv[12:]
V, Dh = 32000, D // H
nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
fpt = 6 * nonembed + 12 * L * D * seq
tok = {n: [] for n in names}
print(f"\n{model} ({L} layers), seq {seq}, micro-batch {mb}" + (f" x {accum} per step" if accum > 1 else "")
      + ", 1 GPU: settings alternating")
for r in range(1, rounds + 1):
    row = []
    for n in names:
        with h5py.File(f"{out}/{n}-{r}.h5", "r") as f:
            st = f["steps"][:]
        ms = float(np.median(st["step_time_s"][3:])) * 1e3
        tok[n].append(seq * mb * accum / ms * 1e3)
        row.append(f"{n} {ms:7.1f} ms")
    print(f"round {r}: " + " | ".join(row))
b = float(np.median(tok[names[0]]))
print(f"\n{'setting':<12} {'tokens/s (median)':>18} {'MFU':>6} {'vs ' + names[0]:>10}   runs")
for n in names:
    m = float(np.median(tok[n]))
    runs = ", ".join(f"{t:,.0f}" for t in tok[n])
    print(f"{n:<12} {m:>18,.0f} {m * fpt / 989e12:6.3f} {m / b:10.4f}   {runs}")
PY
