#!/usr/bin/env bash
# Nsight Compute's view of dissect's attention kernels alone (one GPU; needs build-gpu and ncu):
#   . .gpu/env.sh && benchmarks/attention_profile.sh ["B,T,H,Hkv,Dh" ...]
# (default: TinyLlama's and Llama-2-7B's head shapes at seq 350, TinyLlama's at seq 2048).
# For each shape, profiles the attention kernels (names att_*) of one attention_bench call with 2
# timed repetitions at the GPU's own clock (--clock-control none), sections SpeedOfLight,
# Occupancy, LaunchStats and WarpStateStats plus the tensor pipe's activity, and writes the raw
# page (every metric) to $OUT/ncu_<B_T_H_Hkv_Dh>.txt; prints each kernel's name, duration and
# tensor-pipe activity.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/dissect-bench}; mkdir -p "$OUT"
shapes=${*:-"32,350,32,4,64 32,350,32,32,128 8,2048,32,4,64"}
for s in $shapes; do
  f="$OUT/ncu_${s//,/_}.txt"
  ncu --clock-control none -k regex:'att_' --launch-count 8 --page raw \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --metrics sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active \
      build-gpu/attention_bench ${s//,/ } 2 > "$f" 2>&1 || { tail -20 "$f"; continue; }
  echo "== $s"
  grep -E "^  [a-z_]+.*\(|gpu__time_duration.sum|sm__pipe_tensor_op_gmma_cycles_active.avg.pct" "$f" \
    | sed -E 's/\(([0-9]+, [0-9]+, [0-9]+)\)x\(([0-9]+, [0-9]+, [0-9]+)\).*/grid (\1) block (\2)/' \
    | sed -E 's/^ +//; s/<[^(]*>//' | cut -c1-110 || true
done
