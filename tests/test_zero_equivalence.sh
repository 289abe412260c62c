#!/usr/bin/env bash
# ZeRO stages are the same training as one process: for DP = 2, 3, 4 and ZeRO stages 0-3, 10
# steps on the same global batch (12 sequences) give the same per-step losses and the same final
# fp32 master weights as stage 0 with DP = 1, within 1e-5 relative (fp32; only the order of the
# gradient sums differs). Gradient accumulation is exercised at DP = 2. Then the per-rank bytes
# of params, grads and optimizer states at DP = 4 are checked against ZeRO's prediction.
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null

common=(train --model tiny --train-data "$tmp/train.bin" --seq-length 32 --train-iters 10
        --warmup-iters 3 --lr 3e-3 --eval-interval 0 --sample-tokens 0 --log-interval 100)
run() { # name np stage micro accum
  OMP_NUM_THREADS=1 mpirun -np "$2" "$DISSECT" "${common[@]}" --zero-stage "$3" --micro-batch "$4" \
    --grad-accum "$5" --trace "$tmp/$1.h5" --save "$tmp/$1.ck.h5" > "$tmp/$1.log" 2>&1 \
    || { cat "$tmp/$1.log"; exit 1; }
}
run ref 1 0 12 1
runs=()
for stage in 0 1 2 3; do
  run "dp2_s$stage" 2 $stage 3 2; runs+=("dp2_s$stage")
  run "dp3_s$stage" 3 $stage 4 1; runs+=("dp3_s$stage")
  run "dp4_s$stage" 4 $stage 3 1; runs+=("dp4_s$stage")
done
fail=0
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 1e-5 ref.h5 "${runs[@]/%/.h5}" ) || fail=1
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_checkpoints.py" --rtol 1e-5 ref.ck.h5 "${runs[@]/%/.ck.h5}" ) || fail=1
# memory per rank at DP = 4 falls as ZeRO predicts
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/check_zero_memory.py" --dp 4 ref.ck.h5 dp4_s0.h5 dp4_s1.h5 dp4_s2.h5 dp4_s3.h5 ) || fail=1
exit $fail
