#!/usr/bin/env bash
# Checkpoint cost on one GPU, synchronous against asynchronous (async_save), TinyLlama-1.1B shapes
# (1.1B parameters: 13.2 GB per checkpoint of fp32 master weights and two AdamW moments):
#   . .gpu/env.sh && benchmarks/checkpoint_bench.sh [SEQ] [MICRO_BATCH] [STEPS] [INTERVAL]   (2048 8 12 4)
# Each mode trains STEPS steps with a checkpoint every INTERVAL steps into its own run directory
# ($OUT), then prints: the time a save holds up training (synchronous: the whole save; async: the
# snapshot), the background write time (with fdatasync), the median step time of steps without a save and of
# steps during which a background write ran, and the file size. Needs build-gpu.
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-2048} mb=${2:-8} steps=${3:-12} every=${4:-4}
OUT=${OUT:-/tmp/dissect-ckpt}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
"$py" tests/make_synthetic.py "$OUT/ids.txt" --vocab 32000 --tokens $(( (steps + 2) * mb * (seq + 1) * 2 ))
"$py" examples/make_shards.py "$OUT/ids.txt" "$OUT/tok.bin" --vocab-size 32000 > /dev/null
common=(train --device cuda --model tinyllama-1.1b --train-data "$OUT/tok.bin" --seq-length "$seq" --micro-batch "$mb"
        --eval-interval 0 --sample-tokens 0 --log-interval 1 --train-iters "$steps" --save-interval "$every" --keep-last 1
        --trace-level step)
for mode in sync async; do
  rm -rf "$OUT/run_$mode"
  extra=(); [ "$mode" = async ] && extra=(--async-save)
  mpirun -np 1 --bind-to none build-gpu/dissect "${common[@]}" "${extra[@]}" --save-dir "$OUT/run_$mode" --trace "$OUT/$mode.h5" \
    > "$OUT/$mode.log" 2>&1 || { tail -20 "$OUT/$mode.log"; exit 1; }
done
"$py" - "$OUT" "$every" <<'PY'
import os, re, sys, h5py, numpy as np
out, every = sys.argv[1], int(sys.argv[2])
print(f"\ncheckpoint cost, TinyLlama-1.1B shapes, 1 GPU, a checkpoint every {every} steps")
print(f"{'mode':<7} {'holds up training s':>20} {'background s':>13} {'step ms plain':>14} {'step ms while writing':>22} {'file GB':>8}")
for mode in ("sync", "async"):
    log = open(f"{out}/{mode}.log").read()
    t = np.asarray(h5py.File(f"{out}/{mode}.h5")["steps"]["step_time_s"]) * 1e3
    files = [f for f in os.listdir(f"{out}/run_{mode}") if f.endswith(".h5")]
    gb = os.path.getsize(f"{out}/run_{mode}/{files[0]}") / 1e9 if files else float("nan")
    if mode == "sync":
        hold = [float(x) for x in re.findall(r"written to \S+ \(([0-9.]+) s\)", log)]
        bg, during = [], []
    else:
        hold = [float(x) for x in re.findall(r"snapshot taken \(([0-9.]+) s\)", log)]
        bg = [float(x) for x in re.findall(r"\(([0-9.]+) s in the background\)", log)]
        # a write started at step s's boundary was in flight during steps s+1 .. k, k the step
        # whose boundary reported it done (printed before that step's own line)
        during, writing, last = set(), None, 0
        for line in log.splitlines():
            m = re.match(r"step +(\d+)/", line)
            if m:
                last = int(m.group(1))
                if writing is not None and last > writing: during.add(last)
            m = re.match(r"checkpoint of step (\d+): snapshot", line)
            if m: writing = int(m.group(1))
            if "in the background)" in line:
                during.add(last + 1)
                writing = None
        during = sorted(during)
    plain = [t[i] for i in range(2, len(t)) if (i + 1) not in during and (i + 1) % every != 1]
    dur = [t[s - 1] for s in during if s - 1 < len(t)]
    fmt = lambda v: "/".join(f"{x:.2f}" for x in v) if v else "-"
    print(f"{mode:<7} {fmt(hold):>20} {fmt(bg):>13} "
          f"{np.median(plain):>14.1f} {np.median(dur) if dur else float('nan'):>22.1f} {gb:>8.2f}")
print("(one figure per save, in order; async: the first snapshot also page-locks its buffer)")
PY
