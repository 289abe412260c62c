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
"$PYTHON3" -c "import json,sys; d=json.load(open(sys.argv[1])); pids={e['pid'] for e in d['traceEvents']}; sys.exit(0 if {0,1} <= pids else 1)" "$tmp/run.json" \
  || { echo "FAIL chrome trace lacks a rank"; fail=1; }
# a one-rank trace (per-rank fields are arrays of length 1) reports too
OMP_NUM_THREADS=1 mpirun -np 1 "$DISSECT" train --model tiny --train-data "$tmp/train.bin" --seq-length 32 \
  --micro-batch 2 --train-iters 3 --eval-interval 0 --sample-tokens 0 --trace "$tmp/one.h5" --trace-level op \
  > "$tmp/one.log" 2>&1 || { cat "$tmp/one.log"; exit 1; }
"$DISSECT" report "$tmp/one.h5" > "$tmp/one.txt" || { echo "FAIL report on a one-rank trace"; fail=1; }
grep -q "Top operators" "$tmp/one.txt" || { echo "FAIL one-rank report lacks 'Top operators'"; fail=1; }
exit $fail
