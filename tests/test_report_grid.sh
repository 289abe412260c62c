#!/usr/bin/env bash
# `dissect report`, its Chrome export and examples/plot_trace.py on a real pipeline +
# tensor-parallel trace: 4 ranks on the CPU, PP 2 x TP 2 (1F1B, 4 micro-batches per step, ZeRO-2:
# the parameter groups' reduce-scatters run on the DP group of one), the tiny model with 4
# layers, 4 steps at trace level op. tests/check_report_grid.py checks the
# events' grid coordinates, where pipeline sends and receives happen, the pipeline and
# tensor-parallel tables against the trace, the Chrome tracks, the pipeline PNG, and traces
# without a grid (DP only) or with one that does not fit the world size.
#   env: DISSECT, SRCDIR, PYTHON3 (and the OMPI_* variables meson sets)
set -uo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000 \
  && "$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null \
  || { echo "FAIL making the token shards"; echo "0 passed, 1 failed"; exit 1; }
if ! OMP_NUM_THREADS=1 mpirun -np 4 "$DISSECT" train --model tiny --num-layers 4 --train-data "$tmp/train.bin" \
     --seq-length 32 --train-iters 4 --micro-batch 1 --grad-accum 4 --pp 2 --tp 2 --zero-stage 2 --trace-level op \
     --trace "$tmp/grid.h5" --eval-interval 0 --sample-tokens 0 --device cpu >"$tmp/train.log" 2>&1; then
  echo "FAIL the PP 2 x TP 2 training run:"; sed 's/^/     /' "$tmp/train.log"; echo "0 passed, 1 failed"; exit 1
fi
"$PYTHON3" "$SRCDIR/tests/check_report_grid.py" --dissect "$DISSECT" --srcdir "$SRCDIR" --python "$PYTHON3" \
  --trace "$tmp/grid.h5" --tmp "$tmp" --pp 2 --tp 2 --dp 1 --micro 4 --layers 4
rc=$?
# the tables, for the log
sed -n '/^Pipeline (per stage/,/^$/p;/^Tensor-parallel collectives/,/^$/p' "$tmp/report.txt" 2>/dev/null
exit $rc
