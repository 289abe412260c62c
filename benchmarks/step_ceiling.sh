#!/usr/bin/env bash
# How much of a training step the GPU's power limit leaves to everything but the GEMMs: the
# ceiling of MFU on one GPU, and what a target asks of the rest (benchmarks/NOTES.md item 42).
#   . .gpu/env.sh && ACCUM=4 benchmarks/step_ceiling.sh [SEQ] [MICRO_BATCH]     (defaults 350 32)
# Needs build-gpu (tests/gpu_suite.sh build); builds build-gpu/gemm_algo_probe if it is missing.
# 1. Every GEMM shape of one micro-batch of the model (MODEL / LAYERS as gpu_bench.sh: per layer
#    Q|K|V, O with the residual, gate|up, down with the residual, their input and weight
#    gradients; the LM head's three) runs back to back at the power limit on the cuBLASLt
#    algorithm the backend plans (`gemm_algo_probe -p`, 3 rounds of 0.4 s turns), nvidia-smi
#    sampling the SM clock and power. Summed with their counts (x layers, x ACCUM) they are the
#    GEMM-only step: what a step would take if every FLOP ran at cuBLASLt's rate at the limit
#    and nothing else took time. dissect's own GEMMs (gate|up with SwiGLU, Q|K|V with RoPE, the
#    fused SwiGLU backward) stand in as plain GEMMs of their shapes.
# 2. benchmarks/gpu_bench.sh with torch.compile beside dissect (TORCH_MODES=compile), same call:
#    the measured MFUs, and dissect's op trace split into GEMMs, attention and the rest.
# Prints, last, a table: the GEMM-only step and its MFU (the ceiling), and for MFU 0.60, for
# RATIO (default 1.45) x torch.compile's tokens/s and for dissect as measured: the step time it
# means and how much of it is left beside the GEMM-only step for attention, norms, the optimizer
# and everything else. MFU: gpu_bench.sh's formula (6 x non-embedding params + 12 x layers x
# hidden x seq FLOPs per token, 989 TFLOP/s; PEAK_TFLOPS overrides). Exits 1 if a part fails.
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-350} mb=${2:-32} accum=${ACCUM:-1} ratio=${RATIO:-1.45} peak=${PEAK_TFLOPS:-989}
. benchmarks/model_shape.sh  # $model, shape=(hidden layers heads kv-heads ffn)
OUT=${OUT:-/tmp/dissect-ceiling}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
D=${shape[0]} L=${shape[1]} H=${shape[2]} Hkv=${shape[3]} I=${shape[4]} V=32000
Dh=$((D / H)) T=$((seq * mb))
Nqkv=$((D + 2 * Hkv * Dh))
probe=build-gpu/gemm_algo_probe
if [ ! -x "$probe" ]; then
  nvcc -gencode=arch=compute_90a,code=sm_90a -O3 -std=c++17 benchmarks/gemm_algo_probe.cu -lcublasLt -lcublas \
    -o "$probe" > "$OUT/probe_build.log" 2>&1 || { echo "step_ceiling.sh: building $probe failed:" >&2; tail -5 "$OUT/probe_build.log" >&2; exit 1; }
fi
# name=case count (per micro-batch), in the probe's row-major terms (gemm_algo_probe.cu's header)
cases=("qkv=fwd:$T,$Nqkv,$D=$L" "o=res:$T,$D,$D=$L" "gate_up=fwd:$T,$((2 * I)),$D=$L" "down=res:$T,$D,$I=$L"
       "down_dx=dx:$T,$I,$D=$L" "down_dw=dw:$D,$I,$T=$L" "gate_up_dx=dx:$T,$D,$((2 * I))=$L"
       "gate_up_dw=dw:$((2 * I)),$D,$T=$L" "o_dx=dx:$T,$D,$D=$L" "o_dw=dw:$D,$D,$T=$L"
       "qkv_dx=dx:$T,$D,$Nqkv=$L" "qkv_dw=dw:$Nqkv,$D,$T=$L"
       "lm_head=fwd:$T,$V,$D=1" "lm_head_dx=dx:$T,$D,$V=1" "lm_head_dw=dw:$V,$D,$T=1")
args=()
for c in "${cases[@]}"; do a=${c#*=}; args+=("${a%=*}"); done
gpu=${CUDA_VISIBLE_DEVICES%%,*}
limit=$(nvidia-smi -i "$gpu" --query-gpu=power.limit --format=csv,noheader,nounits 2> /dev/null || echo 0)
. benchmarks/gpu_sampler.sh  # sample_start FILE / sample_stop
: > "$OUT/clock_gemm.csv"
sample_start "$OUT/clock_gemm.csv"
rc=0
"$probe" -p -t 400 -r 3 "${args[@]}" > "$OUT/probe.txt" 2> "$OUT/probe.err" || rc=$?
sample_stop
[ "$rc" = 0 ] || { echo "step_ceiling.sh: gemm_algo_probe failed (rc $rc):" >&2; tail -5 "$OUT/probe.err" >&2; exit 1; }
mkdir -p "$OUT/bench"
TORCH_MODES=compile OUT="$OUT/bench" benchmarks/gpu_bench.sh "$seq" "$mb" 8 > "$OUT/bench.txt" 2>&1 \
  || { echo "step_ceiling.sh: gpu_bench.sh failed:" >&2; tail -5 "$OUT/bench.txt" >&2; exit 1; }
"$py" - "$OUT" "$seq" "$mb" "$accum" "$ratio" "$peak" "$model" "${limit:-0}" "${cases[@]}" <<'PY'
import json, statistics, sys
import h5py, numpy as np
sys.path.insert(0, "benchmarks")
import gpu_samples
out, seq, mb, accum, ratio, peak, model = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), \
    float(sys.argv[5]), float(sys.argv[6]) * 1e12, sys.argv[7]
try:
    limit_w = float(sys.argv[8])
except ValueError:
    limit_w = 0.0
cases = sys.argv[9:]
summ = json.load(open(f"{out}/bench/summary.json"))
rows = {r["impl"]: r for r in summ["rows"]}
d, tc = rows["dissect"], rows.get("pytorch-compile")
fpt = d["mfu"] * 989e12 / d["tokens_per_s"]  # gpu_bench.sh's FLOPs per token (its MFU is at 989)
tokens = seq * mb * accum
ms = {}
for line in open(f"{out}/probe.txt"):
    if line.startswith("{"):
        r = json.loads(line)
        ms.setdefault(r["case"], []).append(r["ms"])
print(f"\nGEMMs alone at the power limit, {model} {seq} x {mb} x {accum} ({tokens:,} tokens per step),"
      " cuBLASLt's planned algorithm, median of 3 turns:")
print(f"{'GEMM':<12} {'case':<26} {'per mb':>6} {'ms':>8} {'TFLOP/s':>8} {'ms/step':>8}")
gemm_step, gemm_flop = 0.0, 0.0
for c in cases:
    name, rest = c.split("=", 1)
    case, count = rest.rsplit("=", 1)
    M, N, K = (int(x) for x in case.split(":")[1].split(","))
    t = statistics.median(ms[case])
    gemm_step += t * int(count) * accum
    gemm_flop += 2.0 * M * N * K * int(count) * accum
    print(f"{name:<12} {case:<26} {int(count):>6} {t:8.4f} {2.0 * M * N * K / t * 1e-9:8.1f} {t * int(count) * accum:8.1f}")
print(f"GEMM-only step {gemm_step:.1f} ms at {gemm_flop / gemm_step * 1e-9:.0f} TFLOP/s; GEMM FLOPs"
      f" {gemm_flop / tokens * 1e-9:.2f} of the formula's {fpt * 1e-9:.2f} GFLOP per token")
gs = gpu_samples.summary(gpu_samples.busy(gpu_samples.read(f"{out}/clock_gemm.csv"), limit_w)) if limit_w else None
if gs:
    print(f"GPU during the GEMMs (nvidia-smi, {gs['samples']} samples at >= half the {limit_w:.0f} W limit): SM"
          f" {gs['sm_mhz']:.0f} MHz at {gs['watts']:.0f} W, power-capped {gpu_samples.share(gs['power_capped'])}")
with h5py.File(f"{out}/bench/op.h5") as f:
    ev = f["events"][()]
    op_id, st_id = (h5py.check_enum_dtype(ev.dtype[k]) for k in ("op", "stream"))
    st = np.asarray(f["steps"]["step_time_s"])
sel = (ev["rank"] == 0) & (ev["step"] > 1) & (ev["stream"] == st_id["compute"])
nst = len(np.unique(ev["step"][sel]))
dur = (ev["end_ns"].astype(np.int64) - ev["start_ns"].astype(np.int64)) * 1e-6
g_in = dur[sel & (ev["op"] == op_id["gemm"])].sum() / nst
a_in = dur[sel & (ev["op"] == op_id["attention"])].sum() / nst
op_step = float(np.median(st[1:])) * 1e3 if len(st) > 1 else float("nan")
print(f"dissect's op trace ({nst} steps): step {op_step:.1f} ms, GEMMs {g_in:.1f}, attention {a_in:.1f},"
      f" the rest {op_step - g_in - a_in:.1f} (kernels, idle and the trace's own marks)")
ceil = tokens * fpt / (gemm_step * 1e-3) / peak
print(f"\n{'':<26} {'MFU':>6} {'tokens/s':>9} {'step ms':>8} {'left beside GEMMs':>18}")
print(f"{'GEMM-only step (ceiling)':<26} {ceil:6.3f} {tokens / gemm_step * 1e3:9.0f} {gemm_step:8.1f} {0:18.1f}")
targets = [("MFU 0.60", 0.60)]
if tc: targets.append((f"{ratio:g} x torch.compile", ratio * tc["tokens_per_s"] * fpt / peak))
targets.append(("dissect (measured)", d["mfu"]))
if tc: targets.append(("torch.compile (measured)", tc["mfu"]))
for name, mfu in targets:
    step = tokens * fpt / (mfu * peak) * 1e3
    print(f"{name:<26} {mfu:6.3f} {tokens / step * 1e3:9.0f} {step:8.1f} {step - gemm_step:18.1f}")
PY
