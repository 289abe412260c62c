#!/usr/bin/env bash
# Optimizer offload (zero_optimization.offload_optimizer.device "cpu") is the same training: the
# CPU backend runs the same code path as a GPU run (gradients copied to host fp32 buffers, AdamW
# on a host backend, parameters uploaded back), so the per-step losses and final weights equal
# the run without offload bitwise (rtol 0) for ZeRO 1, 2 and 3 at DP 1 and 2, with TP 2 + SP, with
# PP 2, with full recomputation, and with parameters cut into many staging chunks (the knob
# DX_OFFLOAD_CHUNK_ELEMS=1000: several chunks per parameter, ring slots reused within a
# parameter and across steps); the device holds no optimizer states (/steps optim_bytes
# 0, as the plan says); offload with ZeRO stage 0 is refused naming the key.
# Parameter offload (zero_optimization.offload_param.device "cpu", ZeRO-3, ZeRO-Infinity) on top:
# the same equality at DP 1 and 2 (and in many chunks), the device holding only the two gather
# slots of parameters (/steps params_bytes equal to the plan's, below the run without it);
# offload_param at ZeRO stage 2 or without offload_optimizer is refused naming the key.
# Without gradient clipping (--clip-grad 0) the host AdamW runs inside the last backward (early
# update, zero.h): the same equality, and the trace holds host AdamW events of phase backward.
# With clipping the early update is speculative (clip factor 1; DX_OFFLOAD_SPECULATE=1 every
# step, auto after a step that did not clip): where the norm stays under the clip (these runs'
# norms are 0.84-0.95: the default clip 1.0 in the layouts above; --clip-grad 1000 for any
# model) bitwise the same again; where the norm clips (every
# step at --clip-grad 0.05; with 0.92, steps 2-3 of the tiny model, of which auto speculates on
# step 2) the early chunks are undone and redone (op adamw_redo in the trace) and the result
# equals the run without offload within 1e-5 relative (a few fp32 ulps per repaired step).
# On a GPU host: OFF_DEVICE=cuda OFF_RTOL=2e-2 OFF_MAXNP=<GPUs> (bf16 runs; the on-device AdamW
# computes in fp64, the host one in fp32, so equal within the bf16 bounds, not bitwise).
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
dev=${OFF_DEVICE:-cpu} rtol=${OFF_RTOL:-0} maxnp=${OFF_MAXNP:-8}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null
common=(train --model "${OFF_MODEL:-tiny}" --num-layers 8 --train-data "$tmp/train.bin" --seq-length 32
        --train-iters 5 --warmup-iters 2 --lr 1e-3 --eval-interval 0 --sample-tokens 0
        --log-interval 100 --device "$dev" --grad-accum 2)
layouts=("dp1z1:1:--micro-batch 4 --zero-stage 1" "dp2z1:2:--micro-batch 2 --zero-stage 1"
         "dp2z2:2:--micro-batch 2 --zero-stage 2" "dp2z3:2:--micro-batch 2 --zero-stage 3"
         "tp2sp:2:--micro-batch 4 --tp 2 --sequence-parallel --zero-stage 1" "pp2:2:--micro-batch 4 --pp 2 --zero-stage 2"
         "dp2z3full:2:--micro-batch 2 --zero-stage 3 --recompute-granularity full --recompute-method uniform"
         "dp2z2chunks:2:--micro-batch 2 --zero-stage 2:1000" "dp1z3chunks:1:--micro-batch 4 --zero-stage 3:1000"
         "dp2z3param:2:--micro-batch 2 --zero-stage 3::--offload-param cpu"
         "dp1z3paramchunks:1:--micro-batch 4 --zero-stage 3:1000:--offload-param cpu"
         "dp1z1early:1:--micro-batch 4 --zero-stage 1 --clip-grad 0 --trace-level op:1000"
         "dp2z2early:2:--micro-batch 2 --zero-stage 2 --clip-grad 0 --trace-level op:1000"
         "dp1z3paramearly:1:--micro-batch 4 --zero-stage 3 --clip-grad 0 --trace-level op:1000:--offload-param cpu"
         "dp2z3paramearly:2:--micro-batch 2 --zero-stage 3 --clip-grad 0 --trace-level op:1000:--offload-param cpu"
         "dp2z2specok:2:--micro-batch 2 --zero-stage 2 --clip-grad 1000 --trace-level op:1000::DX_OFFLOAD_SPECULATE=1"
         "dp1z1specredo:1:--micro-batch 4 --zero-stage 1 --clip-grad 0.05 --trace-level op:1000::DX_OFFLOAD_SPECULATE=1:1e-5"
         "dp2z3paramspecauto:2:--micro-batch 2 --zero-stage 3 --clip-grad 0.92 --trace-level op:1000:--offload-param cpu:DX_OFFLOAD_SPECULATE=auto:1e-5")
fail=0
for lay in "${layouts[@]}"; do
  IFS=: read -r name np flags chunk offflags spec lrtol <<<"$lay"
  lrtol=${lrtol:-0}; [ "$rtol" = 0 ] || lrtol=$rtol
  [ "$np" -le "$maxnp" ] || { echo "skip $name: $np ranks > OFF_MAXNP $maxnp"; continue; }
  for off in none cpu; do
    extra=""; [ "$off" = cpu ] && extra=${offflags:-}
    # shellcheck disable=SC2086
    env ${spec:-DX_OFFLOAD_SPECULATE=auto} DX_OFFLOAD_CHUNK_ELEMS=${chunk:-0} OMP_NUM_THREADS=1 mpirun -np "$np" "$DISSECT" "${common[@]}" $flags --offload-optimizer "$off" $extra \
      --trace "$tmp/${name}_$off.h5" --save "$tmp/${name}_$off.ck.h5" > "$tmp/${name}_$off.log" 2>&1 \
      || { echo "FAIL ${name}_$off:"; cat "$tmp/${name}_$off.log"; exit 1; }
  done
  if r=$(cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol "$lrtol" "${name}_none.h5" "${name}_cpu.h5"); then
    echo "ok   $name: losses with offload equal (rtol $lrtol)"
  else echo "FAIL $name: losses differ with offload: $r"; fail=1; fi
  if r=$(cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_checkpoints.py" --rtol "$lrtol" "${name}_none.ck.h5" "${name}_cpu.ck.h5"); then
    echo "ok   $name: final weights with offload equal (rtol $lrtol)"
  else echo "FAIL $name: weights differ with offload: $r"; fail=1; fi
  "$PYTHON3" - "$tmp/${name}_cpu.h5" "$tmp/${name}_none.h5" "$name" "${offflags:-}" "$flags" "${spec:-}" "${OFF_MODEL:-tiny}" <<'PY' || fail=1
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    optim = np.asarray(f["steps"]["optim_bytes"])
    params = np.asarray(f["steps"]["params_bytes"])
    plan = np.asarray(f["metadata/plan_bytes"])
with h5py.File(sys.argv[2]) as f:
    params0 = np.asarray(f["steps"]["params_bytes"])
ok = (optim == 0).all() and (plan[:, 2] == 0).all() and (plan[:, 6] > 0).all()
print(f"{'ok  ' if ok else 'FAIL'} {sys.argv[3]}: device optimizer bytes {optim.max()} (plan {plan[:, 2].max()}), "
      f"planned host bytes per rank {plan[:, 6].tolist()}")
if "offload-param" in sys.argv[4]:
    # on the CPU backend the allocator's bytes are exact; on CUDA they round up to 512 bytes
    pok = params.max() < params0.max() and abs(params.max() - plan[:, 0].max()) <= 0.05 * plan[:, 0].max()
    print(f"{'ok  ' if pok else 'FAIL'} {sys.argv[3]}: device parameter bytes {params.max()} with offload_param "
          f"(plan {plan[:, 0].max()}), {params0.max()} without")
    ok = ok and pok
spec = sys.argv[6]
if "--clip-grad 0 " in sys.argv[5] + " " or spec:
    with h5py.File(sys.argv[1]) as f:
        ev = f["events"][:]
        ph = h5py.check_enum_dtype(f["events"].dtype["phase"])
        op = h5py.check_enum_dtype(f["events"].dtype["op"])
        st = h5py.check_enum_dtype(f["events"].dtype["stream"])
    ad = ev[(ev["op"] == op["adamw"]) & (ev["stream"] == st["host"])]
    redo = ev[ev["op"] == op["adamw_redo"]]
    inb = int((ad["phase"] == ph["backward"]).sum())
    eok = inb > 0 and inb < len(ad)
    # a clip under the runs' norms: some speculative steps are repaired; the default clip: none is
    # (0.92 sits between the tiny model's norms; other models' (GPU runs) are not known here)
    want_redo = "--clip-grad 0.05" in sys.argv[5] or ("--clip-grad 0.92" in sys.argv[5] and sys.argv[7] == "tiny")
    if "--clip-grad 0.92" in sys.argv[5] and sys.argv[7] != "tiny": want_redo = len(redo) > 0
    rok = (len(redo) > 0) == want_redo
    print(f"{'ok  ' if eok and rok else 'FAIL'} {sys.argv[3]}: early update: {inb} of {len(ad)} host AdamW chunks ran "
          f"inside the backward; {len(redo)} chunks redone in steps {sorted(set(redo['step'].tolist()))} "
          f"({'some' if want_redo else 'none'} expected)")
    ok = ok and eok and rok
sys.exit(0 if ok else 1)
PY
done
out=$(OMP_NUM_THREADS=1 mpirun -np 1 "$DISSECT" "${common[@]}" --device cpu --micro-batch 4 --offload-optimizer cpu 2>&1) && rc=0 || rc=$?
if [[ $rc -ne 0 && $out == *"zero_optimization.offload_optimizer.device"*"needs ZeRO stage 1, 2 or 3"* ]]; then
  echo "ok   offload with ZeRO stage 0 refused: $(grep 'dissect: error' <<<"$out")"
else
  echo "FAIL offload with ZeRO stage 0 not refused (exit $rc)"; echo "$out" | head -3; fail=1
fi
for bad in "--zero-stage 2 --offload-optimizer cpu --offload-param cpu:needs ZeRO stage 3" \
           "--zero-stage 3 --offload-param cpu:needs zero_optimization.offload_optimizer.device"; do
  IFS=: read -r flags want <<<"$bad"
  # shellcheck disable=SC2086
  out=$(OMP_NUM_THREADS=1 mpirun -np 1 "$DISSECT" "${common[@]}" --device cpu --micro-batch 4 $flags 2>&1) && rc=0 || rc=$?
  if [[ $rc -ne 0 && $out == *"zero_optimization.offload_param.device"*"$want"* ]]; then
    echo "ok   offload_param with $flags refused: $(grep 'dissect: error' <<<"$out" | cut -c1-150)"
  else
    echo "FAIL offload_param with $flags not refused (exit $rc)"; echo "$out" | head -3; fail=1
  fi
done
exit $fail
