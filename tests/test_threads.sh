#!/usr/bin/env bash
# A rank's default thread count (dx_default_threads): online cores / ranks on the node, capped at
# the CPUs of its affinity mask; OMP_NUM_THREADS overrides. Reads rank 0's run line ("N threads
# per rank") of a 1-step run of the tiny model on the CPU. Also OpenBLAS's kernels (main.c's
# blas_kernels_upgrade), from the trace's /metadata blas: on a CPU with AVX2 and FMA, with
# OPENBLAS_CORETYPE unset, not its SSE3 fallback "Prescott"; with OPENBLAS_CORETYPE=Prescott
# given, Prescott (the user's choice stands).
set -uo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
unset OMP_NUM_THREADS
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 4000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/tok.bin" --vocab-size 64 >/dev/null
args=(train --model tiny --train-data "$tmp/tok.bin" --seq-length 16 --train-iters 1 --micro-batch 2
      --eval-interval 0 --sample-tokens 0 --device cpu)
passed=0 failed=0
# check NAME WANT-THREADS command...
check() {
  local name=$1 want=$2; shift 2
  local out got
  out=$(timeout 60 "$@" 2>&1)
  got=$(sed -n 's/.*, \([0-9]*\) threads\{0,1\} per rank$/\1/p' <<<"$out" | head -1)
  if [[ $got == "$want" ]]; then
    echo "ok   $name: $got thread(s) per rank"; passed=$((passed+1))
  else
    echo "FAIL $name: wanted $want threads per rank, got '$got' in:"; sed 's/^/     /' <<<"$out"; failed=$((failed+1))
  fi
}
mine=$(nproc) online=$(getconf _NPROCESSORS_ONLN)
all=$(( mine < online ? mine : online ))
check "1 rank, the runner's CPUs" "$all" mpirun --bind-to none -np 1 "$DISSECT" "${args[@]}"
check "1 rank bound to CPU 0 by taskset" 1 taskset -c 0 mpirun --bind-to none -np 1 "$DISSECT" "${args[@]}"
check "OMP_NUM_THREADS=3 overrides" 3 env OMP_NUM_THREADS=3 mpirun --bind-to none -np 1 -x OMP_NUM_THREADS "$DISSECT" "${args[@]}"
half=$(( online / 2 < 1 ? 1 : online / 2 )); half=$(( half < mine ? half : mine ))
check "2 ranks: cores / ranks" "$half" mpirun --bind-to none -np 2 "$DISSECT" "${args[@]}"
# blas NAME WANT(yes: Prescott named / no: not named) command...
blas() {
  local name=$1 want=$2; shift 2
  rm -f "$tmp/b.h5"
  timeout 60 "$@" --trace "$tmp/b.h5" > "$tmp/b.log" 2>&1
  local got
  if ! got=$("$PYTHON3" -c 'import sys, h5py; print(h5py.File(sys.argv[1], "r")["metadata"].attrs["blas"])' "$tmp/b.h5" 2>&1); then
    echo "FAIL $name: no trace's blas attribute: $got"; sed 's/^/     /' "$tmp/b.log"; failed=$((failed+1)); return
  fi
  if [[ $got != *DYNAMIC_ARCH* ]]; then
    echo "skip $name: not a DYNAMIC_ARCH OpenBLAS ($got)"; return
  fi
  local has=no; [[ " $got " == *" Prescott "* ]] && has=yes
  if [[ $has == "$want" ]]; then
    echo "ok   $name: $got"; passed=$((passed+1))
  else
    echo "FAIL $name: Prescott named: wanted $want, got: $got"; sed 's/^/     /' "$tmp/b.log"; failed=$((failed+1))
  fi
}
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  blas "OpenBLAS past its SSE3 fallback on an AVX2 + FMA CPU" no \
    env -u OPENBLAS_CORETYPE mpirun --bind-to none -np 1 "$DISSECT" "${args[@]}"
else
  echo "skip OpenBLAS kernels: this CPU lacks AVX2 or FMA"
fi
blas "OPENBLAS_CORETYPE=Prescott given stands" yes \
  env OPENBLAS_CORETYPE=Prescott mpirun --bind-to none -np 1 -x OPENBLAS_CORETYPE "$DISSECT" "${args[@]}"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
