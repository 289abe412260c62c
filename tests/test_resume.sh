#!/usr/bin/env bash
# Resumable runs (checkpoints/checkpoint.h), on the CPU backend:
#  1. a run stopped at step 3 and resumed (--resume PATH, and --resume auto from the run
#     directory) gives bit-identical losses for steps 4-6 and final weights and AdamW moments to
#     the uninterrupted run (DP 2, ZeRO 2, gradient accumulation 2);
#     Under optimizer offload with clipping, the speculative early update resumes as it ran (the
#     checkpoint keeps the last gradient norm): bit-identical too, a redone step included;
#  2. a checkpoint written under DP 4 + ZeRO 3 resumes under DP 2 + ZeRO 1, under TP 2 x PP 2,
#     and under DP 2 + ZeRO 3 with optimizer and parameter offload, matching the uninterrupted
#     DP 4 run within 1e-5 relative (losses; final weights and AdamW moments per tensor as
#     ||other - ref|| / ||ref||, as tests/compare_checkpoints.py);
#  3. keep_last 2 keeps the two newest periodic checkpoints;
#  4. preemption: SIGUSR1 (sbatch --signal) sent to one rank, and SIGTERM (scancel) to another
#     run's rank 0, stop every rank at the next step boundary with a checkpoint and exit 0; the
#     trace written so far is readable; `--resume auto` then finishes the run with final weights
#     bitwise those of an uninterrupted run;
#  5. asynchronous saves write the same tensors as synchronous ones (DP 4 ZeRO 3, TP 2 x PP 2), and
#     a run resumed from one ends bitwise as the uninterrupted run;
#     Their /checksums equal numpy's recomputation from the tensors (checkpoint.h's definition);
#  6. bad input: a resume path that does not exist, a format-1 (weights only) file, a checkpoint
#     of another model shape, a checkpoint with one bit of a weight flipped or two moment values
#     swapped, save_interval without save_dir and a save_dir that cannot be created are
#     refused naming the file, tensor or key, before any training step.
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null
common=(train --model tiny --num-layers 4 --train-data "$tmp/train.bin" --seq-length 32 --warmup-iters 2
        --lr 1e-3 --eval-interval 0 --sample-tokens 0 --log-interval 1 --device cpu --grad-accum 2)
run() { # name np flags...: runs dissect, log in $tmp/name.log
  local name=$1 np=$2; shift 2
  OMP_NUM_THREADS=1 mpirun -np "$np" "$DISSECT" "${common[@]}" "$@" > "$tmp/$name.log" 2>&1 \
    || { echo "FAIL $name (exit $?):"; tail -20 "$tmp/$name.log"; exit 1; }
}
fail=0
# compare.py REF OTHER RTOL [FIRST_STEP]: losses of REF's steps >= FIRST_STEP against OTHER's (traces),
# and every tensor of two checkpoints (params and optimizer moments)
cat > "$tmp/compare.py" <<'PY'
import sys, h5py, numpy as np
kind, a, b, rtol = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def rel(x, y):
    x = np.asarray(x, np.float64); y = np.asarray(y, np.float64)
    return float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-30))) if x.size else 0.0
if kind == "trace":
    with h5py.File(a) as f, h5py.File(b) as g:
        sa = dict(zip(f["steps"]["step"][()].tolist(), f["steps"]["loss"][()]))
        sb = dict(zip(g["steps"]["step"][()].tolist(), g["steps"]["loss"][()]))
    common = sorted(set(sa) & set(sb))
    worst = max(rel(sa[s], sb[s]) for s in common) if common else float("inf")
    ok = bool(common) and worst <= rtol
    print(f"losses of steps {common[0] if common else '-'}-{common[-1] if common else '-'}: worst relative difference {worst:.2e} (bound {rtol:g})")
else:
    worst, where, n = 0.0, "", 0
    with h5py.File(a) as f, h5py.File(b) as g:
        names = []  # the tensors (/checksums: equal when bitwise, checked below)
        f.visititems(lambda k, v: names.append(k) if isinstance(v, h5py.Dataset) and k != "checksums" else None)
        for k in names:
            x, y = np.asarray(f[k][()], np.float64), np.asarray(g[k][()], np.float64)
            # bitwise: max |difference|; else per tensor ||other - ref|| / ||ref|| (compare_checkpoints.py)
            r = float(np.max(np.abs(x - y))) if rtol == 0 else float(np.linalg.norm(x - y) / max(np.linalg.norm(x), 1e-300))
            n += 1
            if r > worst: worst, where = r, k
        ok = n > 0 and worst <= rtol and g.attrs["step"] == f.attrs["step"]
        if rtol == 0:  # bitwise: the same checksums too
            ok = ok and np.array_equal(f["checksums"][()], g["checksums"][()])
    print(f"{n} tensors (params, exp_avg, exp_avg_sq): worst {'absolute' if rtol == 0 else 'relative'} "
          f"difference {worst:.2e} {where} (bound {rtol:g})")
sys.exit(0 if ok else 1)
PY
check() { # label kind a b rtol
  local label=$1; shift
  if r=$("$PYTHON3" "$tmp/compare.py" "$@" 2>&1); then echo "ok   $label: $r"; else echo "FAIL $label: $r"; fail=1; fi
}

# 1. bitwise resume
run full 2 --micro-batch 2 --zero-stage 2 --train-iters 6 --save-dir "$tmp/run" --save-interval 3 \
  --trace "$tmp/full.h5" --save "$tmp/full.ck.h5"
[ -s "$tmp/run/iter_0000003.h5" ] && [ -s "$tmp/run/iter_0000006.h5" ] \
  && echo "ok   periodic checkpoints: $(ls "$tmp/run" | tr '\n' ' ')" || { echo "FAIL periodic checkpoints: $(ls "$tmp/run")"; fail=1; }
run resumed 2 --micro-batch 2 --zero-stage 2 --train-iters 6 --resume "$tmp/run/iter_0000003.h5" \
  --trace "$tmp/resumed.h5" --save "$tmp/resumed.ck.h5"
check "resume at step 3 (DP 2, ZeRO 2): losses" trace "$tmp/full.h5" "$tmp/resumed.h5" 0
check "resume at step 3 (DP 2, ZeRO 2): final checkpoint" ckpt "$tmp/full.ck.h5" "$tmp/resumed.ck.h5" 0
mkdir -p "$tmp/auto" && cp "$tmp/run/iter_0000003.h5" "$tmp/auto/"
run auto 2 --micro-batch 2 --zero-stage 2 --train-iters 6 --save-dir "$tmp/auto" --resume auto --save "$tmp/auto.ck.h5"
grep -q "resumed from $tmp/auto/iter_0000003.h5" "$tmp/auto.log" || { echo "FAIL resume auto did not pick iter_0000003"; fail=1; }
check "resume auto from the run directory: final checkpoint" ckpt "$tmp/full.ck.h5" "$tmp/auto.ck.h5" 0

# 1b. the speculative update of optimizer offload (zero.h: with clipping it runs inside the
# backward when the previous step's norm was under the clip, and is redone when the norm clips)
# resumes as it ran: the checkpoint keeps the last norm. Norms here: 0.78 at step 1, 0.88 at
# step 2, so with clip 0.8 the resumed run's step 2 speculates and is redone, as the
# uninterrupted run's; a resumed run that forgot the norm would not speculate and differ in ulps
spec=(--micro-batch 4 --zero-stage 1 --offload-optimizer cpu --clip-grad 0.8 --train-iters 3 --trace-level op)
run specfull 1 "${spec[@]}" --save-dir "$tmp/spec" --save-interval 1 --trace "$tmp/specfull.h5" --save "$tmp/specfull.ck.h5"
run specres 1 "${spec[@]}" --resume "$tmp/spec/iter_0000001.h5" --trace "$tmp/specres.h5" --save "$tmp/specres.ck.h5"
check "resume at step 1 (offload, speculative update redone at step 2): losses" trace "$tmp/specfull.h5" "$tmp/specres.h5" 0
check "resume at step 1 (offload, speculative update redone at step 2): final checkpoint" ckpt "$tmp/specfull.ck.h5" "$tmp/specres.ck.h5" 0
if r=$("$PYTHON3" - "$tmp/specres.h5" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1]) as f:
    ev = f["events"][:]
    op = h5py.check_enum_dtype(f["events"].dtype["op"])
steps = sorted(set(ev[ev["op"] == op["adamw_redo"]]["step"].tolist()))
print(f"steps with a redone speculative update in the resumed run: {steps}")
sys.exit(0 if steps == [2] else 1)
PY
); then echo "ok   $r"; else echo "FAIL $r (want [2])"; fail=1; fi

# 2. another layout
run dp4 4 --micro-batch 1 --zero-stage 3 --train-iters 6 --save-dir "$tmp/dp4" --save-interval 3 \
  --trace "$tmp/dp4.h5" --save "$tmp/dp4.ck.h5"
for lay in "dp2z1:2:--micro-batch 2 --zero-stage 1" "tp2pp2:4:--micro-batch 4 --tp 2 --pp 2 --zero-stage 1" \
           "dp2z3offload:2:--micro-batch 2 --zero-stage 3 --offload-optimizer cpu --offload-param cpu"; do
  IFS=: read -r name np flags <<<"$lay"
  # shellcheck disable=SC2086
  run "from_dp4_$name" "$np" $flags --train-iters 6 --resume "$tmp/dp4/iter_0000003.h5" \
    --trace "$tmp/from_dp4_$name.h5" --save "$tmp/from_dp4_$name.ck.h5"
  check "DP 4 ZeRO 3 checkpoint resumed under $name: losses" trace "$tmp/dp4.h5" "$tmp/from_dp4_$name.h5" 1e-5
  check "DP 4 ZeRO 3 checkpoint resumed under $name: final checkpoint" ckpt "$tmp/dp4.ck.h5" "$tmp/from_dp4_$name.ck.h5" 1e-5
done

# 3. keep_last
run keep 1 --micro-batch 4 --zero-stage 1 --train-iters 8 --save-dir "$tmp/keep" --save-interval 2 --keep-last 2
got=$(ls "$tmp/keep" | tr '\n' ' ')
[ "$got" = "iter_0000006.h5 iter_0000008.h5 " ] && echo "ok   keep_last 2: $got" || { echo "FAIL keep_last 2 left: $got"; fail=1; }

# 4. preemption
long=(--micro-batch 2 --zero-stage 2 --train-iters 3000 --log-interval 50)
run uninterrupted 2 "${long[@]}" --save "$tmp/long.ck.h5"
for sig in USR1:1 TERM:0; do
  IFS=: read -r name target <<<"$sig"
  dir="$tmp/pre_$name"
  OMP_NUM_THREADS=1 mpirun -np 2 "$DISSECT" "${common[@]}" "${long[@]}" --save-dir "$dir" \
    --trace "$tmp/pre_$name.h5" > "$tmp/pre_$name.log" 2>&1 &
  mpipid=$!
  for _ in $(seq 200); do grep -q "step    50/" "$tmp/pre_$name.log" 2>/dev/null && break; sleep 0.1; done
  pids=()
  for p in /proc/[0-9]*; do # the rank processes (no procps needed)
    [ "$(cat "$p/comm" 2>/dev/null)" = dissect ] && tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -- "--save-dir $dir " > /dev/null \
      && pids+=("${p#/proc/}")
  done
  # the rank with the given index in start order (rank order is not guaranteed; any rank will do)
  victim=${pids[$target]:-${pids[0]:-}}
  t0=$(date +%s.%N)
  [ -n "$victim" ] && kill -"$name" "$victim"
  wait "$mpipid" && rc=0 || rc=$?
  secs=$("$PYTHON3" -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.2f}")' "$t0" "$(date +%s.%N)")
  ck=$(ls "$dir" 2>/dev/null | grep '^iter_' | tail -1 || true)
  if [ -n "$victim" ] && [ "$rc" -eq 0 ] && [ -n "$ck" ] && grep -q "signal received" "$tmp/pre_$name.log" \
     && "$PYTHON3" -c "import h5py,sys; f=h5py.File(sys.argv[1]); assert len(f['steps']['loss']) > 0" "$tmp/pre_$name.h5"; then
    echo "ok   SIG$name to one rank: every rank stopped, exit 0 after ${secs}s, checkpoint $ck, trace readable"
  else
    echo "FAIL SIG$name: exit $rc, checkpoint '${ck}', victim '${victim}'"; tail -5 "$tmp/pre_$name.log"; fail=1
  fi
  run "pre_${name}_resume" 2 "${long[@]}" --save-dir "$dir" --resume auto --save "$tmp/pre_$name.ck.h5"
  check "SIG$name, then --resume auto to the end: final checkpoint" ckpt "$tmp/long.ck.h5" "$tmp/pre_$name.ck.h5" 0
done

# 5. asynchronous saves (async_save): the same bytes as synchronous saves, under DP 4 ZeRO 3 and
#    TP 2 x PP 2, and a run resumed from one ends bitwise as the uninterrupted run
for lay in "dp4z3:--micro-batch 1 --zero-stage 3" "tp2pp2:--micro-batch 1 --tp 2 --pp 2"; do
  name=${lay%%:*} flags=${lay#*:}
  # shellcheck disable=SC2086
  run "sync_$name" 4 $flags --train-iters 8 --save-dir "$tmp/sync_$name" --save-interval 4
  # shellcheck disable=SC2086
  run "async_$name" 4 $flags --train-iters 8 --save-dir "$tmp/async_$name" --save-interval 4 --async-save \
    --save "$tmp/async_$name.final.h5"
  grep "checkpoint of step 4 written to .* in the background" "$tmp/async_$name.log" > /dev/null \
    || { echo "FAIL async $name: no background save in the log"; fail=1; }
  check "async save ($name), step 4: same tensors as a synchronous save" ckpt "$tmp/sync_$name/iter_0000004.h5" "$tmp/async_$name/iter_0000004.h5" 0
done
# shellcheck disable=SC2086
run async_resumed 4 --micro-batch 1 --zero-stage 3 --train-iters 8 --resume "$tmp/async_dp4z3/iter_0000004.h5" \
  --save "$tmp/async_resumed.final.h5"
check "resumed from an asynchronous checkpoint (DP 4, ZeRO 3): final checkpoint" ckpt "$tmp/async_dp4z3.final.h5" "$tmp/async_resumed.final.h5" 0

# 5b. checksums: /checksums as checkpoint.h defines them, recomputed with numpy from the tensors of
#     the synchronous and asynchronous saves of two layouts
if r=$("$PYTHON3" - "$tmp"/sync_dp4z3/iter_0000004.h5 "$tmp"/async_dp4z3/iter_0000004.h5 \
       "$tmp"/sync_tp2pp2/iter_0000004.h5 "$tmp"/async_tp2pp2/iter_0000004.h5 <<'PY'
import sys, h5py, numpy as np
def fmix(x):  # MurmurHash3's fmix64
    x ^= x >> np.uint64(33); x *= np.uint64(0xff51afd7ed558ccd); x ^= x >> np.uint64(33)
    x *= np.uint64(0xc4ceb9fe1a85ec53); return x ^ (x >> np.uint64(33))
def checksum(v):  # XOR over elements of fmix64(rot32(row-major index) ^ float32 bits)
    bits = np.ascontiguousarray(v, np.float32).ravel().view(np.uint32).astype(np.uint64)
    e = np.arange(bits.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        return int(np.bitwise_xor.reduce(fmix(((e << np.uint64(32)) | (e >> np.uint64(32))) ^ bits)))
n = bad = 0
for path in sys.argv[1:]:
    with h5py.File(path) as f:
        cs = f["checksums"][()]
        for s, g in enumerate(["params", "optimizer/exp_avg", "optimizer/exp_avg_sq"]):
            for name, d in f[g].items():
                n += 1
                bad += checksum(d[()]) != int(cs[s, d.attrs["checksum_column"]])
print(f"{n} tensors of {len(sys.argv) - 1} checkpoints, {bad} checksums differ from numpy's")
sys.exit(1 if bad or not n else 0)
PY
); then echo "ok   checksums recomputed: $r"; else echo "FAIL checksums recomputed: $r"; fail=1; fi

# 6. bad input
"$PYTHON3" - "$tmp/v1.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1], "w") as f:
    f.attrs["format"] = "dissect-checkpoint"; f.attrs["format_version"] = 1; f.attrs["step"] = 3
    f.create_dataset("params/lm_head.weight", data=np.zeros((64, 32), np.float32))
PY
echo "a file, not a directory" > "$tmp/afile"
"$PYTHON3" - "$tmp" <<'PY'
import shutil, sys, h5py, numpy as np
t = sys.argv[1]  # a damaged disk or a hand edit: one bit of a weight, two moment values swapped
for name, ds, edit in [("flipped", "params/model.layers.1.mlp.down_proj.weight", "flip"),
                       ("swapped", "optimizer/exp_avg_sq/model.layers.2.self_attn.q_proj.weight", "swap")]:
    shutil.copy(t + "/run/iter_0000003.h5", f"{t}/{name}.h5")
    with h5py.File(f"{t}/{name}.h5", "r+") as f:
        v = f[ds][()]
        if edit == "flip": v.view(np.uint32)[3, 5] ^= 1
        else: v[[0, 1]] = v[[1, 0]]
        f[ds][...] = v
PY
for bad in "--resume $tmp/nope.h5:checkpoint '$tmp/nope.h5': cannot open" \
           "--resume $tmp/v1.h5:format_version 1 holds the weights only" \
           "--resume $tmp/flipped.h5:params/model.layers.1.mlp.down_proj.weight does not match the checksum" \
           "--resume $tmp/swapped.h5:optimizer/exp_avg_sq/model.layers.2.self_attn.q_proj.weight does not match the checksum" \
           "--resume $tmp/run/iter_0000003.h5 --num-layers 2:holds 0.05M parameters, this model has 0.03M" \
           "--save-interval 2:key 'save_interval' = 2: needs 'save_dir'" \
           "--async-save:key 'async_save' = true: needs 'save_dir' and 'save_interval'" \
           "--save-dir $tmp/afile/sub --save-interval 2:key 'save_dir': cannot create directory"; do
  flags=${bad%%:*} want=${bad#*:}
  # shellcheck disable=SC2086
  out=$(OMP_NUM_THREADS=1 mpirun -np 1 "$DISSECT" "${common[@]}" --micro-batch 4 --train-iters 4 $flags 2>&1) && rc=0 || rc=$?
  if [[ $rc -ne 0 && $out == *"$want"* && $out != *"step     1/"* ]]; then
    echo "ok   refused ($flags): $(grep 'dissect: error' <<<"$out" | head -1 | cut -c1-160)"
  else
    echo "FAIL not refused or wrong message ($flags), exit $rc:"; echo "$out" | grep -v "^--\|^ *$" | head -4; fail=1
  fi
done
exit $fail
