#!/usr/bin/env bash
# The GEMMs' rate at the GPU's power limit: the ceiling of a training step's MFU on one GPU.
#   . .gpu/env.sh && benchmarks/gemm_power_limit.sh [REPS] ["M,F,K" ...]
# Needs build-gpu (tests/gpu_suite.sh build). For each shape (default: TinyLlama-1.1B's MLP at
# 16,384 and 11,200 tokens, i.e. seq 2048 x 8 and 350 x 32, and Llama-2-7B's at 16,384), runs
# build-gpu/swiglu_gemm_bench M F K REPS (default 1000: each case back to back for ~1 s, long
# enough for the clock to settle at the power limit) while nvidia-smi samples the SM clock and
# the power draw every 100 ms, and prints one row per case: median ms, TFLOP/s, the fraction of
# the dense bf16 peak (989 TFLOP/s on H100 / H200 SXM; PEAK_TFLOPS overrides), and the shape's SM
# clock (median), power (mean) and the share of samples the power limit capped ("capped": nvidia-smi's
# SW power cap reason, benchmarks/gpu_samples.py) over the samples at half the power limit or more. Cases:
# gemm = cuBLAS gu = x W^T (gate|up), fused = gemm_wg.cu's GEMM with SwiGLU in its epilogue,
# bwd_gemm = cuBLAS dh = dy W_down, bwd_fused = gemm_wg.cu's with SwiGLU's backward in its
# epilogue (swiglu_gemm_bench.c says more). cuBLAS's large-GEMM rate here is what a step would
# reach if every FLOP ran at it and nothing else took time (benchmarks/NOTES.md item 19).
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-1000}
shift || true
shapes=${*:-"16384,5632,2048 11200,5632,2048 16384,11008,4096"}
peak=${PEAK_TFLOPS:-989}
OUT=${OUT:-/tmp/dissect-bench}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
gpu=${CUDA_VISIBLE_DEVICES:-0}; gpu=${gpu%%,*}
. benchmarks/gpu_sampler.sh  # sample_start FILE / sample_stop
[ -x build-gpu/swiglu_gemm_bench ] || { echo "gemm_power_limit.sh: build-gpu/swiglu_gemm_bench missing (tests/gpu_suite.sh build)" >&2; exit 1; }
limit=$(nvidia-smi -i "$gpu" --query-gpu=power.limit --format=csv,noheader,nounits 2> /dev/null || echo 0)
name=$(nvidia-smi -i "$gpu" --query-gpu=name --format=csv,noheader 2> /dev/null || echo "GPU $gpu")
: > "$OUT/gpl.jsonl"
for s in $shapes; do
  f="$OUT/gpl_${s//,/_}"
  : > "$f.smi"
  sample_start "$f.smi"
  rc=0
  build-gpu/swiglu_gemm_bench ${s//,/ } "$reps" > "$f.txt" 2>&1 || rc=$?
  sample_stop
  [ "$rc" = 0 ] || { echo "gemm_power_limit.sh: swiglu_gemm_bench $s failed (rc $rc):" >&2; tail -5 "$f.txt" >&2; exit 1; }
  echo "{\"shape\": \"$s\", \"out\": \"$f.txt\", \"smi\": \"$f.smi\"}" >> "$OUT/gpl.jsonl"
done
"$py" - "$OUT/gpl.jsonl" "$peak" "${limit:-0}" "$name" <<'PY'
import json, sys, statistics
sys.path.insert(0, "benchmarks")
import gpu_samples
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peak, limit, name = float(sys.argv[2]), float(sys.argv[3] or 0), sys.argv[4]
print(f"\nGEMMs back to back at the power limit ({name}, limit {limit:.0f} W, peak {peak:.0f} TFLOP/s)")
print(f"{'M,F,K':<18} {'case':<10} {'ms':>8} {'TFLOP/s':>8} {'of peak':>8} {'SM MHz':>7} {'W':>5} {'capped':>7}")
for r in rows:
    hot = gpu_samples.busy(gpu_samples.read(r["smi"]), limit)
    cs = gpu_samples.summary(hot)
    mhz = f"{statistics.median(x[0] for x in hot):7.0f}" if hot else f"{'-':>7}"
    w = f"{cs['watts']:5.0f}" if cs else f"{'-':>5}"
    capped = f"{gpu_samples.share(cs['power_capped'] if cs else None):>7}"
    for l in open(r["out"]):
        if not l.startswith("{"):
            continue
        c = json.loads(l)
        if c.get("case") not in ("gemm", "fused", "bwd_gemm", "bwd_fused"):
            continue
        print(f"{r['shape']:<18} {c['case']:<10} {c['ms']:8.3f} {c['tflops']:8.1f} {c['tflops'] / peak:8.3f} {mhz} {w} {capped}")
PY
