#!/usr/bin/env bash
# Cost of op-level tracing: step time with trace.level op against step, on the CPU backend.
#   benchmarks/trace_overhead.sh [RUNS] [STEPS]        (defaults 5 and 40)
# Runs the Brown model (examples/configs/brown-small.json; data from examples/prepare_brown.sh)
# with 2 ranks, alternating step / op runs so drift hits both alike, and prints the median step
# time of each run (steps after the 5th) and the median over runs, then the overhead.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-5} steps=${2:-40}
py=${PYTHON3:-/usr/bin/python3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
root=(); [ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
for i in $(seq 1 "$runs"); do
  for level in step op; do
    mpirun "${root[@]}" -np 2 build/dissect train --config examples/configs/brown-small.json \
      --train-iters "$steps" --warmup-iters 5 --eval-interval 0 --sample-tokens 0 --log-interval 1000 \
      --trace "$out/$level.$i.h5" --trace-level "$level" > "$out/$level.$i.log" 2>&1
  done
done
"$py" - "$out" "$runs" <<'PY'
import sys, h5py, numpy as np
out, runs = sys.argv[1], int(sys.argv[2])
med = {}
print(f"{'level':<6} " + " ".join(f"run{i+1:>2} ms" for i in range(runs)) + "   median ms  events/step")
for level in ("step", "op"):
    per_run, ev = [], 0
    for i in range(1, runs + 1):
        with h5py.File(f"{out}/{level}.{i}.h5", "r") as f:
            t = np.asarray(f["steps"]["step_time_s"])[5:]
            per_run.append(float(np.median(t)) * 1e3)
            if "events" in f:
                ev = len(f["events"]) / len(f["steps"])
    med[level] = float(np.median(per_run))
    print(f"{level:<6} " + " ".join(f"{x:9.1f}" for x in per_run) + f"   {med[level]:9.1f}  {ev:10.0f}")
print(f"op-level tracing overhead: {100 * (med['op'] / med['step'] - 1):+.2f}% of step time (median of {runs} runs each)")
PY
