#!/usr/bin/env bash
# Llama-2-7B full-parameter training on one GPU with the optimizer on the host: dissect
# (zero_optimization.offload_optimizer "cpu") against PyTorch FSDP2 with CPUOffloadPolicy
# (benchmarks/torch_offload_ref.py), side by side in one call, on the Brown corpus's tokens:
#   . .gpu/env.sh && benchmarks/offload_bench.sh SEQ MICRO_BATCH RECOMPUTE [STEPS] [TORCH_STEPS]
# (defaults 350 32 selective 30 4). Needs build-gpu (tests/gpu_suite.sh build) and
# data/brown/train.bin + train.ids (examples/prepare_brown.sh; carried to the GPU host).
# RECOMPUTE: none | selective | full (dissect's recompute_granularity; full uses method uniform).
# FSDP2 recomputes every decoder layer (Hugging Face gradient checkpointing) to fit.
# Runs, in order:
#   1. dissect, STEPS steps, step-level trace: tokens/s (median step after the 3rd), loss curve,
#      GPU peak (allocator), host bytes (states + staging);
#   2. dissect, 4 steps, op-level trace: the step's breakdown (GPU compute busy, host AdamW, copies
#      device->host / host->device on the copy streams, host waiting for copies) and `dissect report`;
#   3. dissect without offload on 8 of the 32 layers (same shapes, optimizer on the GPU), op-level:
#      the GPU AdamW time per parameter, for the GPU-only floor of the 32-layer step;
#   4. FSDP2 + CPUOffloadPolicy, TORCH_STEPS timed steps after 2 warm-up steps.
# Prints a table last. MFU: (6 x non-embedding params + 12 x layers x hidden x seq) FLOPs per token
# at 989 TFLOP/s (recomputation not counted), as benchmarks/gpu_bench.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-350} mb=${2:-32} rc=${3:-selective} steps=${4:-30} tsteps=${5:-4}
OUT=${OUT:-/tmp/dissect-offload}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
data=data/brown/train.bin
[ -s "$data" ] && [ -s data/brown/train.ids ] || { echo "offload_bench: $data or data/brown/train.ids missing (examples/prepare_brown.sh)" >&2; exit 1; }
recf=(--recompute-granularity "$rc"); [ "$rc" = full ] && recf+=(--recompute-method uniform)
common=(train --device cuda --model llama2-7b --train-data "$data" --seq-length "$seq" --micro-batch "$mb"
        --zero-stage 1 "${recf[@]}" --eval-interval 0 --sample-tokens 0 --log-interval 1
        --lr 3e-4 --min-lr 3e-5 --warmup-iters 5)
# the host AdamW's OpenMP threads need the host's cores: no binding of the rank to one core
mpi=(mpirun -np 1 --bind-to none -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH)
t0=$SECONDS
"${mpi[@]}" build-gpu/dissect "${common[@]}" --offload-optimizer cpu --train-iters "$steps" \
  --trace "$OUT/off_step.h5" --trace-level step > "$OUT/off_step.log" 2>&1 || { tail -20 "$OUT/off_step.log"; exit 1; }
echo "dissect offload, $steps steps: $((SECONDS - t0)) s" >&2
"${mpi[@]}" build-gpu/dissect "${common[@]}" --offload-optimizer cpu --train-iters 4 \
  --trace "$OUT/off_op.h5" --trace-level op > "$OUT/off_op.log" 2>&1 || { tail -20 "$OUT/off_op.log"; exit 1; }
build-gpu/dissect report "$OUT/off_op.h5" --steps 1:4 > "$OUT/report.txt" 2>&1 || true
"${mpi[@]}" build-gpu/dissect "${common[@]}" --num-layers 8 --train-iters 4 \
  --trace "$OUT/gpu8_op.h5" --trace-level op > "$OUT/gpu8.log" 2>&1 || { tail -20 "$OUT/gpu8.log"; }
echo "dissect runs done: $((SECONDS - t0)) s" >&2
if [ "${SKIP_TORCH:-0}" = 1 ]; then : > "$OUT/torch.jsonl"
else
  tr=(--seq "$seq" --micro-batch "$mb" --steps "$tsteps" --warmup 2 --ids data/brown/train.ids)
  "$py" benchmarks/torch_offload_ref.py "${tr[@]}" > "$OUT/torch.jsonl" 2> "$OUT/torch.err" || tail -5 "$OUT/torch.err"
fi
echo "all runs done: $((SECONDS - t0)) s" >&2
grep -E "memory held|host" "$OUT/off_step.log" | tail -2 || true
sed -n '/Step breakdown/,/^$/p;/recomputation\|optimizer offload/p' "$OUT/report.txt" | head -30
"$py" - "$OUT" "$seq" "$mb" "$rc" <<'PY'
import json, sys, h5py, numpy as np
out, seq, mb, rc = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
L, D, H, Hkv, I, V = 32, 4096, 32, 32, 11008, 32000
Dh = D // H
nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
params = nonembed + V * D
fpt = 6 * nonembed + 12 * L * D * seq
tok_step = mb * seq

def events(path):
    with h5py.File(path) as f:
        ev = f["events"][()]
        names = {k: {v: n for n, v in h5py.check_enum_dtype(f["events"].dtype[k]).items()} for k in ("op", "phase", "stream")}
    return ev, names

with h5py.File(f"{out}/off_step.h5") as f:
    s = f["steps"]
    st = np.asarray(s["step_time_s"]); loss = np.asarray(s["loss"])
    t = float(np.median(st[3:])); peak = float(np.max(s["peak_mem_bytes"][-1])) / 2**30
    plan = np.asarray(f["metadata/plan_bytes"])
    host = float(plan[0, 6]) / 2**30
ev, nm = events(f"{out}/off_op.h5")
br = {}
for stp in sorted(set(ev["step"].tolist())):
    if stp < 2: continue
    e = ev[ev["step"] == stp]
    d = (e["end_ns"] - e["start_ns"]).astype(np.float64) / 1e6
    op = np.array([nm["op"][x] for x in e["op"]]); strm = np.array([nm["stream"][x] for x in e["stream"]])
    ph = np.array([nm["phase"][x] for x in e["phase"]])
    span = d[op == "step"].sum()
    comp = d[(strm == "compute") & (op != "module") & (op != "step") & np.isin(ph, ["forward", "backward", "recompute"])].sum()
    row = {"step": span, "gpu fwd+bwd (compute stream)": comp,
           "gpu optimizer-phase kernels (norm)": d[(strm == "compute") & (ph == "optimizer") & (op != "module")].sum(),
           "host AdamW": d[(strm == "host") & (op == "adamw")].sum(),
           "copy device->host": d[op == "memcpy_d2h"].sum(), "copy host->device": d[op == "memcpy_h2d"].sum(),
           "host waiting for copies": d[(strm == "host") & (op == "memcpy") & (ph == "optimizer")].sum()}
    for k, v in row.items(): br.setdefault(k, []).append(v)
br = {k: float(np.median(v)) for k, v in br.items()}
# GPU AdamW per parameter, from the 8-layer run without offload
gpu_adamw_ms = float("nan")
try:
    e8, n8 = events(f"{out}/gpu8_op.h5")
    p8 = 8 * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + 2 * V * D
    sel = [(x["end_ns"] - x["start_ns"]) / 1e6 for x in e8 if n8["op"][x["op"]] == "adamw" and x["step"] >= 2]
    gpu_adamw_ms = sum(sel) / max(1, len(set(int(x["step"]) for x in e8 if x["step"] >= 2))) * params / p8
except Exception as ex:
    print("8-layer run unreadable:", ex)
rows = [("dissect (offload)", tok_step / t, t * 1e3, tok_step / t * fpt / 989e12, peak, host)]
for l in open(f"{out}/torch.jsonl"):
    if not l.strip(): continue
    r = json.loads(l)
    if "error" in r: print("torch:", r["error"][:300]); continue
    rows.append((r["impl"], r["tokens_per_s"], r["step_ms"], r["mfu"], r["peak_gpu_gib"], r["peak_host_gib"]))
print(f"\nLlama-2-7B ({params/1e9:.2f}B params), seq {seq}, micro-batch {mb} ({tok_step} tokens/step), "
      f"1 GPU, optimizer on the host; dissect recompute '{rc}', FSDP2 full per-layer checkpointing")
print(f"{'implementation':<20} {'tokens/s':>9} {'step ms':>9} {'MFU':>6} {'GPU GiB':>8} {'host GiB':>9}")
for n, tok, ms, mfu, g, h in rows:
    print(f"{n:<20} {tok:>9.0f} {ms:>9.0f} {mfu:>6.3f} {g:>8.1f} {h:>9.1f}")
if len(rows) > 1: print(f"dissect / FSDP2 tokens/s: {rows[0][1] / rows[1][1]:.2f}x")
print(f"dissect losses: first {loss[0]:.3f}, step 10 {loss[min(9, len(loss)-1)]:.3f}, last {loss[-1]:.3f} ({len(loss)} steps)")
print("\ndissect offloaded step, op trace (median of steps 2-4, ms):")
for k, v in br.items(): print(f"  {k:<36} {v:9.1f}")
floor = br.get("gpu fwd+bwd (compute stream)", float("nan")) + gpu_adamw_ms
print(f"  GPU-only floor: fwd+bwd {br.get('gpu fwd+bwd (compute stream)', float('nan')):.1f} + GPU AdamW "
      f"{gpu_adamw_ms:.1f} (8-layer run without offload, scaled to {params/1e9:.2f}B) = {floor:.1f} ms "
      f"-> offloaded step is {br.get('step', float('nan')) / floor:.2f}x the floor")
PY
