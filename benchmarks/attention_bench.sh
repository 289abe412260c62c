#!/usr/bin/env bash
# dissect's fused causal GQA attention against PyTorch SDPA (flash backend), kernels alone, one
# GPU, one call (issue 14, item 2):
#   . .gpu/env.sh && benchmarks/attention_bench.sh [REPS]          (default 20)
# Needs build-gpu (attention_bench is built with -Dcuda=enabled). Shapes: TinyLlama-1.1B
# (H 32, Hkv 4, Dh 64) and Llama-2-7B (H 32, Hkv 32, Dh 128) at seq 350, 2048, 4096 and 8192,
# batch so that B x T is about 16k tokens (B 32 at seq 350). SHAPES="B,T,H,Hkv,Dh ..." overrides.
# Prints a table: median fwd and bwd ms of each, TFLOP/s (causal FLOPs), and dissect / SDPA time
# ratios (< 1: dissect faster). REF_BACKENDS=flash,cudnn also times SDPA's cuDNN backend (cuDNN's
# fused attention, with Hopper kernels; rows "sdpa-cudnn", and columns "cudnn x": time / cuDNN's). DETERMINISTIC=1 also times the two-kernel backward.
# VARIANTS="F,B ...": also times tile-shape variant F of the forward and B of the backward
# (DX_CUDA_ATT_FWD / DX_CUDA_ATT_BWD, listed in kernels/cuda/attention_mma.cu) on every shape,
# each first checked against the CPU twin (test_cuda_kernels' attention checks; a variant that
# fails any is reported and not timed); rows "dissect-vF.B".
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-20}
OUT=${OUT:-/tmp/dissect-bench}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
shapes=${SHAPES:-"32,350,32,4,64 8,2048,32,4,64 4,4096,32,4,64 2,8192,32,4,64 32,350,32,32,128 8,2048,32,32,128 4,4096,32,32,128 2,8192,32,32,128"}
: > "$OUT/att.jsonl"
for vb in ${VARIANTS:-}; do # each variant checked against the CPU twin first
  rm -f "$OUT/variant_${vb/,/_}.bad"
  r=$(DX_CUDA_TEST_ONLY=attention DX_CUDA_TEST_NO_PERF=1 DX_CUDA_ATT_FWD=${vb%,*} DX_CUDA_ATT_BWD=${vb#*,} \
      build-gpu/tests/test_cuda_kernels 2>&1 | tail -1)
  echo "variant $vb: $r"
  [[ $r == *" 0 failed"* ]] || touch "$OUT/variant_${vb/,/_}.bad"
done
for s in $shapes; do
  build-gpu/attention_bench ${s//,/ } "$reps" >> "$OUT/att.jsonl"
  for vb in ${VARIANTS:-}; do
    [ -f "$OUT/variant_${vb/,/_}.bad" ] && continue
    DX_CUDA_ATT_FWD=${vb%,*} DX_CUDA_ATT_BWD=${vb#*,} build-gpu/attention_bench ${s//,/ } "$reps" \
      | sed "s/\"dissect\"/\"dissect-v${vb/,/.}\"/" >> "$OUT/att.jsonl"
  done
  if [ "${DETERMINISTIC:-0}" = 1 ]; then
    DX_CUDA_DETERMINISTIC=1 build-gpu/attention_bench ${s//,/ } "$reps" | sed 's/"dissect"/"dissect-det"/' >> "$OUT/att.jsonl"
  fi
done
"$py" benchmarks/torch_attention_ref.py $shapes --reps "$reps" --backends "${REF_BACKENDS:-flash}" >> "$OUT/att.jsonl" 2> "$OUT/att_torch.err" \
  || tail -5 "$OUT/att_torch.err"
"$py" - "$OUT/att.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ref = {tuple(r["shape"]): r for r in rows if r["impl"] == "sdpa-flash"}
cud = {tuple(r["shape"]): r for r in rows if r["impl"] == "sdpa-cudnn"}
def ratio(r, f, key):
    return f"{r[key] / f[key]:6.2f}" if f and r is not f else ""
print("\ncausal attention, kernels alone (median of the timed calls); x = time / SDPA flash's"
      + (" (cudnn x: / SDPA cuDNN's)" if cud else ""))
print(f"{'shape B,T,H,Hkv,Dh':<20} {'impl':<22} {'fwd ms':>8} {'TFLOP/s':>8} {'bwd ms':>8} {'TFLOP/s':>8} {'fwd x':>6} {'bwd x':>6}"
      + (f" {'cudnn fwd x':>11} {'bwd x':>6}" if cud else ""))
for r in rows:
    s = tuple(r["shape"]); f = ref.get(s); c = cud.get(s)
    name = r["impl"] + (" (" + r["gqa"] + ")" if "gqa" in r and r["gqa"] != "native" else "")
    line = (f"{','.join(map(str, s)):<20} {name:<22} {r['fwd_ms']:8.3f} {r['fwd_tflops']:8.1f} {r['bwd_ms']:8.3f}"
            f" {r['bwd_tflops']:8.1f} {ratio(r, f, 'fwd_ms'):>6} {ratio(r, f, 'bwd_ms'):>6}")
    if cud:
        line += f" {ratio(r, c, 'fwd_ms'):>11} {ratio(r, c, 'bwd_ms'):>6}"
    print(line)
PY
