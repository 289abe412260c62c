#!/usr/bin/env bash
# A real op-level trace, read by real readers: 2 ranks, ZeRO-2, gradient accumulation 2;
# h5py checks every rank's events of every step (ops inside the step span, op time + exposed
# communication + idle = step time within 2%, required ops present), then `dissect report`
# and its Chrome-trace export.
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null
OMP_NUM_THREADS=1 mpirun -np 2 "$DISSECT" train --model tiny --train-data "$tmp/train.bin" \
  --seq-length 32 --micro-batch 2 --grad-accum 2 --train-iters 12 --eval-interval 0 --sample-tokens 0 \
  --zero-stage 2 --trace "$tmp/run.h5" --trace-level op > "$tmp/train.log" 2>&1 || { cat "$tmp/train.log"; exit 1; }
req=()
for op in gemm attention rmsnorm rope swiglu cross_entropy embedding adamw reduce_scatter all_gather \
          all_reduce memcpy grad_norm; do req+=(--require-op "$op"); done
"$PYTHON3" "$SRCDIR/tests/check_events.py" "$tmp/run.h5" "${req[@]}"
"$DISSECT" report "$tmp/run.h5" --chrome "$tmp/run.json" > "$tmp/report.txt"
cat "$tmp/report.txt"
fail=0
for want in "Step breakdown" "Top operators" "Per-layer modules" "Ranks" "Idle" "reduce_scatter"; do
  grep -q "$want" "$tmp/report.txt" || { echo "FAIL report lacks '$want'"; fail=1; }
done
# the devices and their peaks in /metadata (CPU ranks: no known peak), and the log's model
# TFLOP/s per rank = tokens/s x 176064 FLOPs per token (tiny, seq 32: test_config.c) / 2 ranks
"$PYTHON3" - "$tmp/run.h5" "$tmp/train.log" <<'EOF' || fail=1
import re, sys, h5py
f = h5py.File(sys.argv[1], "r")
names = list(f["metadata/device_names"].asstr()[()])
peaks = list(f["metadata/device_peak_tflops"][()])
bad = []
if len(names) != 2 or names[0] != names[1] or not names[0]:
    bad.append("device_names %r" % names)
if peaks != [0.0, 0.0]:
    bad.append("device_peak_tflops %r (CPU ranks: 0 = unknown)" % peaks)
lines = [l for l in open(sys.argv[2]) if l.startswith("step ")]
for l in lines:
    m = re.search(r"\| (\d+) tokens/s \|.*\| ([0-9.e+-]+) TFLOP/s per rank$", l.strip())
    if not m or abs(float(m[2]) / (int(m[1]) * 176064 / 2 / 1e12) - 1) > 0.01:
        bad.append("log line without the matching TFLOP/s per rank: %r" % l)
if not lines:
    bad.append("no step lines in the log")
for b in bad:
    print("FAIL", b)
print("ok   /metadata devices %r, peaks %r; %d log lines' TFLOP/s per rank match tokens/s" % (names, peaks, len(lines)) if not bad else "")
sys.exit(1 if bad else 0)
EOF
"$PYTHON3" -c "import json,sys; d=json.load(open(sys.argv[1])); pids={e['pid'] for e in d['traceEvents']}; sys.exit(0 if {0,1} <= pids else 1)" "$tmp/run.json" \
  || { echo "FAIL chrome trace lacks a rank"; fail=1; }
# the step breakdown's columns at the coarser levels (2 ranks, ZeRO-0: the gradient all-reduce
# starts in the last backward): at level step, /steps' forward_s + backward_s + optimizer_s +
# comm_s of rank 0 add up to at most its step time (the collectives called in a host-timed phase
# are counted in comm_s only); at level module, the report's optimizer column (the optimizer's
# module span) is at least half of /steps' optimizer_s
for lvl in step module; do
  OMP_NUM_THREADS=1 mpirun -np 2 "$DISSECT" train --model tiny --train-data "$tmp/train.bin" --seq-length 32 \
    --micro-batch 2 --grad-accum 2 --train-iters 8 --eval-interval 0 --sample-tokens 0 --zero-stage 0 \
    --trace "$tmp/$lvl.h5" --trace-level $lvl > "$tmp/$lvl.log" 2>&1 || { cat "$tmp/$lvl.log"; exit 1; }
  "$DISSECT" report "$tmp/$lvl.h5" > "$tmp/$lvl.txt" || { echo "FAIL report on the $lvl-level trace"; fail=1; }
done
"$PYTHON3" "$SRCDIR/tests/check_breakdown.py" "$tmp/step.h5" "$tmp/module.h5" "$tmp/module.txt" || fail=1
# a one-rank trace (per-rank fields are arrays of length 1) reports too
OMP_NUM_THREADS=1 mpirun -np 1 "$DISSECT" train --model tiny --train-data "$tmp/train.bin" --seq-length 32 \
  --micro-batch 2 --train-iters 3 --eval-interval 0 --sample-tokens 0 --trace "$tmp/one.h5" --trace-level op \
  > "$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; exit 1; }
"$DISSECT" report "$tmp/one.h5" > "$tmp/one.txt" || { echo "FAIL report on a one-rank trace"; fail=1; }
grep -q "Top operators" "$tmp/one.txt" || { echo "FAIL one-rank report lacks 'Top operators'"; fail=1; }
exit $fail
