#!/usr/bin/env bash
# Tensor, sequence and pipeline parallelism are the same training as one process. The `tiny`
# model with 8 layers, 6 steps of a global batch of 8 sequences (gradient accumulation over 4
# micro-batches): every layout of TP in {1, 2}, PP in {1, 2, 4}, DP in {1, 2} up to 8 ranks, each
# pipeline schedule (1F1B, GPipe, interleaved 1F1B), with and without sequence parallelism, ZeRO
# stages 0-2 in turn, gives the same per-step losses and final fp32 master weights (the
# checkpoint's logical tensors) as one process, within 1e-5 relative (fp32; only the order of
# sums differs). Also: an uneven stage split, and TP 4 over the model's 2 KV heads (replicated
# k/v_proj), ZeRO-3 with TP 2 x DP 2, and ZeRO-1 over PP 2 x DP 2 (1F1B and interleaved), whose
# op-level traces must show where the layers' gradients were reduced (tests/check_reductions.py).
# The peak learning rate is 5e-4: AdamW moves a weight by about lr whatever the size
# of its gradient, so it turns rounding differences in near-zero gradients into weight
# differences in proportion to lr (at 3e-3 the worst tensor differed by 1.6e-5, at 1e-3 by
# 5.3e-6, on a 2-core CPU, 2026-11-23; on a 2-core VM whose CPU model OpenBLAS does not know,
# so that it fell back to its SSE3 kernels, which sum in another order, 1e-3 gave 1.16e-5:
# tp4_kvrepl's embedding, one of its 2,048 weights 1.03e-5 away, ~1% of lr, the rest within
# 1.2e-6; 5e-4 gave 5.8e-6 there and 1.4e-6 elsewhere, 2026-11-28; on that VM with the AVX-512
# kernels dissect now picks, src/coordinator/main.c, 3.2e-6).
#
# GT_QUICK=1 runs a handful of layouts only. On GPUs (bf16 compute, NCCL), e.g. on 2 GPUs:
#   GT_DEVICE=cuda GT_MAXNP=2 GT_RTOL=2e-2 GT_MODEL=brown-small tests/test_grid_equivalence.sh
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
rtol=${GT_RTOL:-1e-5} device=${GT_DEVICE:-cpu} maxnp=${GT_MAXNP:-8} model=${GT_MODEL:-tiny}
vocab=64; [ "$model" = tiny ] || vocab=4096
mpi=(mpirun); [ "$device" = cpu ] || mpi+=(-x LD_LIBRARY_PATH -x PATH -x NCCL_NVLS_ENABLE)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab "$vocab" --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size "$vocab" >/dev/null

common=(train --model "$model" --num-layers 8 --train-data "$tmp/train.bin" --seq-length 32
        --train-iters 6 --warmup-iters 2 --lr 5e-4 --eval-interval 0 --sample-tokens 0
        --log-interval 100 --device "$device" --grad-accum 4)
runs=()
n=0
run() { # name np tp pp dp [extra flags...]
  local name=$1 np=$2 tp=$3 pp=$4 dp=$5; shift 5
  local mb=$((2 / dp)) stage=$((n % 3))
  n=$((n + 1))
  [ "$np" -le "$maxnp" ] || return 0
  OMP_NUM_THREADS=1 "${mpi[@]}" -np "$np" "$DISSECT" "${common[@]}" --micro-batch "$mb" --tp "$tp" --pp "$pp" \
    --zero-stage "$stage" --trace "$tmp/$name.h5" --save "$tmp/$name.ck.h5" "$@" > "$tmp/$name.log" 2>&1 \
    || { echo "FAIL $name: dissect exited with an error:"; cat "$tmp/$name.log"; exit 1; }
  [ "$name" = ref ] || runs+=("$name")
  echo "ran $name (np $np, TP $tp, PP $pp, DP $dp, ZeRO $stage${*:+, $*})"
}
run ref 1 1 1 1
for tp in 1 2; do
  for pp in 1 2 4; do
    for dp in 1 2; do
      np=$((tp * pp * dp))
      { [ "$np" -gt 8 ] || [ "$np" -eq 1 ]; } && continue
      if [ -n "${GT_QUICK:-}" ] && [ "$np" -ne 4 ]; then continue; fi
      sps=(""); [ "$tp" -gt 1 ] && sps=("" "--sequence-parallel")
      scheds=(1f1b); [ "$pp" -gt 1 ] && scheds=(1f1b gpipe interleaved-1f1b)
      for sp in "${sps[@]}"; do
        for sch in "${scheds[@]}"; do
          extra=()
          [ -n "$sp" ] && extra+=("$sp")
          if [ "$pp" -gt 1 ]; then
            extra+=(--pipeline-schedule "$sch")
            [ "$sch" = interleaved-1f1b ] && extra+=(--num-layers-per-virtual-pipeline-stage $((8 / (pp * 2))))
          fi
          run "tp${tp}_pp${pp}_dp${dp}${sp:+_sp}_${sch}" "$np" "$tp" "$pp" "$dp" "${extra[@]}"
          [ "$pp" -eq 1 ] && break
        done
      done
    done
  done
done
# an uneven split: 3 + 5 layers over 2 stages
run uneven_pp2 2 1 2 1 --decoder-first-pipeline-num-layers 3
# more TP ranks than KV heads (2): k_proj / v_proj replicated, gradients summed over TP
run tp4_kvrepl 4 4 1 1
run tp4_kvrepl_sp_pp2 8 4 2 1 --sequence-parallel
# ZeRO-3 over the DP axis of a TP grid (it does not compose with PP)
run tp2_dp2_zero3 4 2 1 2 --zero-stage 3
run tp2_dp2_sp_zero3 4 2 1 2 --zero-stage 3 --sequence-parallel
# ZeRO-1 over the DP axis of a pipeline: a one-chunk schedule reduce-scatters each layer's
# gradient in the last backward (dx_pipeline_set_last_backward_hook), the interleaved one
# all-reduces after it; both must still train as one process
run pp2_dp2_zero1_1f1b 4 1 2 2 --zero-stage 1 --trace-level op
run pp2_dp2_zero1_interleaved 4 1 2 2 --zero-stage 1 --trace-level op --pipeline-schedule interleaved-1f1b \
  --num-layers-per-virtual-pipeline-stage 2
fail=0
for want in "pp2_dp2_zero1_1f1b:reduce_scatter in_backward" "pp2_dp2_zero1_interleaved:all_reduce after_backward"; do
  [ -f "$tmp/${want%%:*}.h5" ] || continue
  "$PYTHON3" "$SRCDIR/tests/check_reductions.py" "$tmp/${want%%:*}.h5" "${want#*:}" || fail=1
done
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol "$rtol" ref.h5 "${runs[@]/%/.h5}" ) || fail=1
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_checkpoints.py" --rtol "$rtol" ref.ck.h5 "${runs[@]/%/.ck.h5}" ) || fail=1
exit $fail
