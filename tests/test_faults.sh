#!/usr/bin/env bash
# Faults (src/comm/watchdog.h, checkpoints/checkpoint.h), on the CPU backend, 4 ranks:
#  1. a rank killed (SIGKILL) in the middle of a run: the job ends within 60 s with a non-zero
#     status; every other rank names the step, the operation and the group it was in; the trace
#     written so far is readable; the newest checkpoint resumes (under another layout, DP 2);
#  2. a rank that hangs (SIGSTOP) with distributed_timeout_minutes 0.1: the other ranks' watchdogs
#     end them after 6 s with a message naming the step, the operation and the group (exit 3);
#     the job ends within 60 s; the trace (flushed by the watchdog) holds every step before;
#     again with a checkpoint every step, so the hang mostly falls inside a parallel-HDF5 save;
#  3. a full disk (a 2 MiB tmpfs): a save_dir with less room than one checkpoint is refused before
#     training; a checkpoint that no longer fits stops the run with a clear error and exit 1, the
#     previous checkpoint stays complete (it resumes) and no .tmp is left. Needs mount(8) as root
#     (CI runs as root); skipped with a message where mounting is not permitted.
# Times are measured from the signal to the launcher's exit (python clock; no procps, no bc).
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
mnt="$tmp/small"
cleanup() { mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"; rm -rf "$tmp"; }
trap cleanup EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null
common=(train --model tiny --num-layers 4 --train-data "$tmp/train.bin" --seq-length 32 --micro-batch 1
        --grad-accum 2 --lr 1e-3 --warmup-iters 2 --eval-interval 0 --sample-tokens 0 --device cpu)
now() { "$PYTHON3" -c 'import time; print(time.time())'; }
fail=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }

# the pid of world rank $1 of the job whose command line holds $2 (Open MPI's environment)
rank_pid() {
  local p
  for p in /proc/[0-9]*; do
    [ "$(cat "$p/comm" 2>/dev/null)" = dissect ] || continue
    tr '\0' ' ' < "$p/cmdline" 2>/dev/null | grep -- "$2" > /dev/null || continue
    tr '\0' '\n' < "$p/environ" 2>/dev/null | grep -x "OMPI_COMM_WORLD_RANK=$1" > /dev/null && { echo "${p#/proc/}"; return; }
  done
}

# fault NAME SIGNAL RANK flags...: a 4-rank run, the signal sent to one rank once step 100 is
# logged; sets rc, secs (signal -> launcher exit) and dir (its save_dir)
fault() {
  local name=$1 sig=$2 target=$3; shift 3
  dir="$tmp/$name"
  OMP_NUM_THREADS=1 mpirun -np 4 "$DISSECT" "${common[@]}" --train-iters 1000000 --log-interval 50 \
    --save-dir "$dir" --save-interval 20 --trace "$tmp/$name.h5" "$@" > "$tmp/$name.log" 2>&1 &
  local mp=$! victim="" t0
  for _ in $(seq 600); do grep "step   100/" "$tmp/$name.log" > /dev/null 2>&1 && break; sleep 0.1; done
  victim=$(rank_pid "$target" "--save-dir $dir ")
  [ -n "$victim" ] || { bad "$name: rank $target not found"; kill "$mp"; wait "$mp" || true; rc=0; secs=0; return; }
  t0=$(now)
  kill -"$sig" "$victim"
  wait "$mp" && rc=0 || rc=$?
  secs=$("$PYTHON3" -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$t0" "$(now)")
}
trace_steps() { "$PYTHON3" -c 'import h5py, sys; print(len(h5py.File(sys.argv[1])["steps"]["loss"]))' "$1" 2>/dev/null || echo 0; }
# resumes DIR's newest checkpoint under DP 2 for 2 more steps; prints the step it resumed from
resume_check() {
  local dir=$1 ck step
  ck=$(ls "$dir" | grep '^iter_.*\.h5$' | tail -1)
  step=$((10#$(sed 's/iter_\([0-9]*\)\.h5/\1/' <<<"$ck")))
  OMP_NUM_THREADS=1 mpirun -np 2 "$DISSECT" "${common[@]}" --micro-batch 2 --train-iters $((step + 2)) \
    --resume "$dir/$ck" > "$tmp/resume.log" 2>&1 && grep "resumed from .* step $step done" "$tmp/resume.log" > /dev/null \
    && echo "$step"
}

# 1. a rank killed
fault kill KILL 2
survivors=$(grep -c "dissect: rank [013]: SIGTERM received at step [0-9]* while in [a-z(). -]* on the [a-z]* group" "$tmp/kill.log" || true)
steps=$(trace_steps "$tmp/kill.h5")
from=$(resume_check "$tmp/kill" || true)
if [ "$rc" -ne 0 ] && "$PYTHON3" -c "import sys; sys.exit(0 if float(sys.argv[1]) < 60 else 1)" "$secs" \
   && [ "$survivors" -eq 3 ] && [ "$steps" -ge 100 ] && [ -n "$from" ]; then
  ok "rank 2 killed: job ended after ${secs} s (bound 60), exit $rc; 3 ranks named step, op and group, e.g. '$(grep -m1 'SIGTERM received' "$tmp/kill.log" | cut -c1-120)'; trace readable ($steps steps); checkpoint of step $from resumed under DP 2"
else
  bad "rank killed: exit $rc after ${secs} s, $survivors of 3 ranks named where they were, trace $steps steps, resume '$from'"
  tail -8 "$tmp/kill.log"
fi

# 2. a rank that hangs
fault hang STOP 1 --distributed-timeout-minutes 0.1
named=$(grep -c "dissect: error: rank [0-3]: [a-z(). -]* on the [a-z]* group ([0-9] ranks) at step [0-9]* has not completed after [0-9]* s (distributed_timeout_minutes 0.1)" "$tmp/hang.log" || true)
steps=$(trace_steps "$tmp/hang.h5")
last=$(grep -o "at step [0-9]*" "$tmp/hang.log" | head -1 | grep -o "[0-9]*" || echo 0)
# rank 0 writes the trace: when its own watchdog fired, it flushed every step before the hang;
# when the launcher killed it first (its collective began later), or its watchdog fired inside a
# checkpoint write, the trace ends at the last periodic flush (every 10 steps)
# (a timeout inside a checkpoint write flushes nothing: HDF5 is busy on the main thread)
if grep "dissect: error: rank 0: .* has not completed" "$tmp/hang.log" | grep -v "checkpoint write" > /dev/null; then
  want=$((last - 1)) how="rank 0's watchdog flushed every step before the hang"
else
  want=$(( (last - 1) / 10 * 10 )) how="rank 0 killed by the launcher before its own timeout: steps up to the last periodic flush"
fi
if [ "$rc" -eq 3 ] && "$PYTHON3" -c "import sys; sys.exit(0 if 6 <= float(sys.argv[1]) < 60 else 1)" "$secs" \
   && [ "$named" -ge 1 ] && [ "$steps" -ge "$want" ] && [ "$steps" -ge 100 ]; then
  ok "rank 1 stopped (SIGSTOP): watchdogs ended the job after ${secs} s (timeout 6 s, bound 60), exit $rc; $named message(s) such as '$(grep -m1 'has not completed' "$tmp/hang.log" | cut -c16-150)'; trace holds $steps steps (hang at step $last; $how)"
else
  bad "hang: exit $rc after ${secs} s, $named naming messages, trace $steps steps, hang at step $last"
  tail -8 "$tmp/hang.log"
fi

# 2b. a rank that hangs while every rank saves (save_interval 1): the other ranks wait inside
# parallel HDF5's collective create/close, which the watchdog watches as 'checkpoint write'
fault hangsave STOP 1 --distributed-timeout-minutes 0.1 --save-interval 1 --keep-last 2
named=$(grep -c "dissect: error: rank [0-3]: [a-z(). -]* on the [a-z]* group ([0-9] ranks) at step [0-9]* has not completed" "$tmp/hangsave.log" || true)
insave=$(grep -c "checkpoint write (mpi-io) on the world group .* has not completed" "$tmp/hangsave.log" || true)
if [ "$rc" -eq 3 ] && "$PYTHON3" -c "import sys; sys.exit(0 if 6 <= float(sys.argv[1]) < 60 else 1)" "$secs" \
   && [ "$named" -ge 1 ]; then
  ok "rank 1 stopped while saving every step: job ended after ${secs} s, exit $rc; $named message(s), $insave inside the checkpoint write, e.g. '$(grep -m1 'has not completed' "$tmp/hangsave.log" | cut -c16-130)'"
else
  bad "hang while saving: exit $rc after ${secs} s, $named naming messages"
  tail -8 "$tmp/hangsave.log"
fi

# 3. a full disk
mkdir -p "$mnt"
if mount -t tmpfs -o size=2000k tmpfs "$mnt" 2>/dev/null; then
  # one checkpoint of this model: 12 bytes x 0.05M parameters + 1 MiB = 1.6 MiB of room needed
  out=$(OMP_NUM_THREADS=1 mpirun -np 2 "$DISSECT" "${common[@]}" --train-iters 8 --log-interval 1 \
        --save-dir "$mnt/run" --save-interval 2 --trace "$mnt/t.h5" 2>&1) && rc=0 || rc=$?
  left=$(ls "$mnt/run" | tr '\n' ' ')
  steps=$(trace_steps "$mnt/t.h5")
  from=$(resume_check "$mnt/run" || true)
  if [ "$rc" -ne 0 ] && [[ $out == *"checkpoint '$mnt/run/iter_0000004.h5' not written: no room for its 1.6 MiB: No space left on device"* ]] \
     && [ "$left" = "iter_0000002.h5 " ] && [ "$steps" -eq 4 ] && [ "$from" = 2 ]; then
    ok "disk full at the second checkpoint: exit $rc, '$(grep -m1 'not written' <<<"$out" | cut -c17-150)'; left: $left(resumes), trace readable ($steps steps)"
  else
    bad "disk full: exit $rc, left '$left', trace $steps steps, resume '$from'"; grep -v "^--\|^ *$" <<<"$out" | tail -5
  fi
  umount "$mnt"
  mount -t tmpfs -o size=1000k tmpfs "$mnt"
  out=$(OMP_NUM_THREADS=1 mpirun -np 2 "$DISSECT" "${common[@]}" --train-iters 8 --save-dir "$mnt/run" \
        --save-interval 2 2>&1) && rc=0 || rc=$?
  if [ "$rc" -ne 0 ] && [[ $out == *"key 'save_dir': directory '$mnt/run' has 1.0 MiB free, one checkpoint of this model takes 1.6 MiB"* ]] \
     && [[ $out != *"step     1/"* ]]; then
    ok "save_dir without room for one checkpoint refused before training: '$(grep -m1 'dissect: error' <<<"$out" | cut -c17-160)'"
  else
    bad "small save_dir not refused before training (exit $rc)"; grep -v "^--\|^ *$" <<<"$out" | tail -4
  fi
  umount "$mnt"
else
  echo "skip full-disk cases: mounting a tmpfs is not permitted here (needs root)"
fi
exit $fail
