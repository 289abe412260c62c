#!/usr/bin/env bash
# Data parallelism is the same training as one process: with the same global batch, the loss of
# each of 20 steps with DP = 2 (with and without gradient accumulation) matches DP = 1 within
# 1e-5 relative (fp32; only the order of the gradient sums differs).
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 30000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null

common=(train --model tiny --train-data "$tmp/train.bin" --seq-length 32 --train-iters 20
        --warmup-iters 5 --lr 3e-3 --eval-interval 0 --sample-tokens 0 --log-interval 100)
run() { # name np micro accum
  OMP_NUM_THREADS=1 mpirun -np "$2" "$DISSECT" "${common[@]}" --micro-batch "$3" --grad-accum "$4" \
    --trace "$tmp/$1.h5" > "$tmp/$1.log" 2>&1 || { cat "$tmp/$1.log"; exit 1; }
}
run dp1 1 8 1
run dp2 2 4 1
run dp2_accum 2 2 2
run dp1_accum 1 2 4
"$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 1e-5 "$tmp/dp1.h5" "$tmp/dp2.h5" "$tmp/dp2_accum.h5" "$tmp/dp1_accum.h5"
