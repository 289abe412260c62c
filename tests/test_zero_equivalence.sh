#!/usr/bin/env bash
# ZeRO stages are the same training as one process: for DP = 2, 3, 4 and ZeRO stages 0-3, 10
# steps on the same global batch (12 sequences) give the same per-step losses and the same final
# fp32 master weights as stage 0 with DP = 1, within 1e-5 relative (fp32; only the order of the
# gradient sums differs). Gradient accumulation is exercised at DP = 2. Stages 0-1 reduce the
# gradients in the last backward (DX_ZERO_OVERLAP_REDUCE, default on); DP 2 stage 1 runs once more
# with it off, and the op-level traces at DP 2 must show which reduction ran: all-reduces in the
# backward (stage 0), reduce-scatters in the backward (stage 1), all-reduces after it (off). DP 2
# stage 2 and DP 4 stage 3 run once more with DX_ZERO_REDUCE_ACT=1 (reduce-scatters in the compute
# dtype, X == A on the CPU: the bookkeeping of the rounded buckets and the shard accumulation; in
# bf16 on GPUs), whose traces must show the rounding copy and the add of every reduce-scatter. Then
# the per-rank bytes of params, grads and optimizer states at DP = 4 are checked against ZeRO's
# prediction.
#
# The same script checks GPUs (bf16 compute, NCCL) when run with, e.g.
#   ZE_DEVICE=cuda ZE_DPS=2 ZE_RTOL=2e-2 ZE_STEPS=20 ZE_MODEL=brown-small tests/test_zero_equivalence.sh
# (the memory check is for the fp32 CPU backend and is skipped then).
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
device=${ZE_DEVICE:-cpu} rtol=${ZE_RTOL:-1e-5} steps=${ZE_STEPS:-10} model=${ZE_MODEL:-tiny}
read -r -a dps <<< "${ZE_DPS:-2 3 4}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null

common=(train --model "$model" --train-data "$tmp/train.bin" --seq-length 32 --train-iters "$steps"
        --warmup-iters 3 --lr 3e-3 --eval-interval 0 --sample-tokens 0 --log-interval 100 --device "$device")
run() { # name np stage micro accum [more flags]
  local name=$1 np=$2 stage=$3 mb=$4 acc=$5; shift 5
  OMP_NUM_THREADS=1 mpirun -np "$np" -x DX_ZERO_OVERLAP_REDUCE -x DX_ZERO_REDUCE_ACT "$DISSECT" "${common[@]}" --zero-stage "$stage" \
    --micro-batch "$mb" --grad-accum "$acc" --trace "$tmp/$name.h5" --save "$tmp/$name.ck.h5" "$@" \
    > "$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log"; exit 1; }
}
export DX_ZERO_OVERLAP_REDUCE=1 DX_ZERO_REDUCE_ACT=0
run ref 1 0 12 1
runs=()
for stage in 0 1 2 3; do
  for dp in "${dps[@]}"; do
    case $dp in 2) mb=3 acc=2 ;; 3) mb=4 acc=1 ;; 4) mb=3 acc=1 ;; *) echo "DP $dp: no batch split of 12"; exit 2 ;; esac
    run "dp${dp}_s$stage" "$dp" $stage $mb $acc --trace-level op; runs+=("dp${dp}_s$stage")
  done
done
# stages 0-1 reduce each layer's gradient in the last backward (stage 0 all-reduce, stage 1
# reduce-scatter); with DX_ZERO_OVERLAP_REDUCE=0 all-reduces after the backward: both paths
# are checked for equivalence above and below, and the op-level trace says which one ran
DX_ZERO_OVERLAP_REDUCE=0 run dp2_s1_after 2 1 3 2 --trace-level op; runs+=(dp2_s1_after)
acts=()
for dp in "${dps[@]}"; do
  case $dp in 2) DX_ZERO_REDUCE_ACT=1 run dp2_s2_act 2 2 3 2 --trace-level op; acts+=(dp2_s2_act) ;;
              4) DX_ZERO_REDUCE_ACT=1 run dp4_s3_act 4 3 3 1 --trace-level op; acts+=(dp4_s3_act) ;; esac
done
runs+=("${acts[@]}")
fail=0
if [[ " ${dps[*]} " == *" 2 "* ]]; then
  for want in "dp2_s0:all_reduce in_backward" "dp2_s1:reduce_scatter in_backward" "dp2_s1_after:all_reduce after_backward"; do
    "$PYTHON3" "$SRCDIR/tests/check_reductions.py" "$tmp/${want%%:*}.h5" "${want#*:}" || fail=1
  done
fi
for a in "${acts[@]}"; do
  "$PYTHON3" "$SRCDIR/tests/check_reductions.py" "$tmp/$a.h5" "reduce_scatter in_backward" rounded || fail=1
done
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol "$rtol" ref.h5 "${runs[@]/%/.h5}" ) || fail=1
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_checkpoints.py" --rtol "$rtol" ref.ck.h5 "${runs[@]/%/.ck.h5}" ) || fail=1
# memory per rank at DP = 4 falls as ZeRO predicts (fp32 CPU backend)
if [[ $device == cpu && " ${dps[*]} " == *" 4 "* ]]; then
  ( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/check_zero_memory.py" --dp 4 ref.ck.h5 dp4_s0.h5 dp4_s1.h5 dp4_s2.h5 dp4_s3.h5 ) || fail=1
fi
exit $fail
