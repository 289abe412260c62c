#!/usr/bin/env bash
# Activation recomputation is the same training: with recompute_granularity selective, full
# (uniform) and full (block, 3 layers per chunk), the `tiny` model with 8 layers gives bitwise the
# same per-step losses and final fp32 master weights as without recomputation (rtol 0: the
# recomputed forward repeats the same operations), for DP 1, DP 2 with ZeRO 1, 2 and 3, TP 2 with
# sequence parallelism, and PP 2 (1F1B); it holds fewer activation bytes (selective < none,
# full < selective; /steps activations_bytes), and an op-level trace holds the recomputed ops
# in phase "recompute", which `dissect report` shows.
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null
common=(train --model tiny --num-layers 8 --train-data "$tmp/train.bin" --seq-length 32
        --train-iters 5 --warmup-iters 2 --lr 1e-3 --eval-interval 0 --sample-tokens 0
        --log-interval 100 --device cpu --grad-accum 2)
policies=("none:" "selective:--recompute-granularity selective"
          "full:--recompute-granularity full --recompute-method uniform"
          "block:--recompute-granularity full --recompute-method block --recompute-num-layers 3")
layouts=("dp1:1:--micro-batch 4" "dp2z1:2:--micro-batch 2 --zero-stage 1" "dp2z2:2:--micro-batch 2 --zero-stage 2"
         "dp2z3:2:--micro-batch 2 --zero-stage 3" "tp2sp:2:--micro-batch 4 --tp 2 --sequence-parallel"
         "pp2:2:--micro-batch 4 --pp 2")
fail=0
for lay in "${layouts[@]}"; do
  IFS=: read -r lname np lflags <<<"$lay"
  others=()
  for pol in "${policies[@]}"; do
    pname=${pol%%:*} pflags=${pol#*:}
    name=${lname}_$pname
    # shellcheck disable=SC2086
    OMP_NUM_THREADS=1 mpirun -np "$np" "$DISSECT" "${common[@]}" $lflags $pflags --trace "$tmp/$name.h5" \
      --save "$tmp/$name.ck.h5" > "$tmp/$name.log" 2>&1 || { echo "FAIL $name:"; cat "$tmp/$name.log"; exit 1; }
    [ "$pname" = none ] || others+=("$name")
  done
  ( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 0 "${lname}_none.h5" "${others[@]/%/.h5}" ) || fail=1
  ( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_checkpoints.py" --rtol 0 "${lname}_none.ck.h5" "${others[@]/%/.ck.h5}" ) || fail=1
done
# activation bytes held (rank 0, last step): none > selective > full
"$PYTHON3" - "$tmp" <<'PY' || fail=1
import sys, h5py
t = sys.argv[1]
def acts(n):
    with h5py.File(f"{t}/{n}.h5") as f:
        return int(f["steps"]["activations_bytes"][-1][0])
a = {p: acts("dp1_" + p) for p in ("none", "selective", "full", "block")}
ok = a["none"] > a["selective"] > a["full"] and a["full"] < a["block"] < a["none"]
print(f"{'ok  ' if ok else 'FAIL'} activation bytes (DP 1): none {a['none']}, selective {a['selective']}, "
      f"full {a['full']}, block(3 of 8) {a['block']}")
sys.exit(0 if ok else 1)
PY
# the recomputed ops in their own phase, in the trace and the report
OMP_NUM_THREADS=1 mpirun -np 2 "$DISSECT" "${common[@]}" --micro-batch 4 --tp 2 --recompute-granularity full \
  --recompute-method uniform --trace-level op --trace "$tmp/op.h5" > "$tmp/op.log" 2>&1 || { cat "$tmp/op.log"; exit 1; }
"$PYTHON3" - "$tmp/op.h5" <<'PY' || fail=1
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    ev = f["events"][()]
    names = {v: k for k, v in h5py.check_enum_dtype(f["events"].dtype["phase"]).items()}
    ops = {v: k for k, v in h5py.check_enum_dtype(f["events"].dtype["op"]).items()}
rec = ev[ev["phase"] == [k for k, n in names.items() if n == "recompute"][0]]
kinds = sorted({ops[o] for o in rec["op"]})
ok = len(rec) > 0 and {"gemm", "attention", "rmsnorm", "all_reduce"} <= set(kinds) and set(rec["layer"]) == set(range(8))
print(f"{'ok  ' if ok else 'FAIL'} op trace: {len(rec)} events in phase recompute (ops {kinds}, layers {sorted(set(rec['layer'].tolist()))})")
sys.exit(0 if ok else 1)
PY
report=$("$DISSECT" report "$tmp/op.h5")
if [[ $report == *"recomputation (phase 'recompute'"* ]]; then
  echo "ok   dissect report shows the recomputation time"
else
  echo "FAIL dissect report has no recomputation line"; fail=1
fi
exit $fail
