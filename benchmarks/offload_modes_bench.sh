#!/usr/bin/env bash
# Llama-2-7B on one GPU under dissect's offload modes, side by side with PyTorch FSDP2 +
# CPUOffloadPolicy (benchmarks/torch_offload_ref.py), in one call, on the Brown corpus's tokens:
#   . .gpu/env.sh && benchmarks/offload_modes_bench.sh SEQ MICRO_BATCH RECOMPUTE [STEPS] [TORCH_STEPS]
# (defaults 350 32 selective 12 3; SKIP_TORCH=1 leaves FSDP2 out). Needs build-gpu and
# data/brown/train.bin + train.ids (examples/prepare_brown.sh; carried to the GPU host).
# Modes (each STEPS steps, step-level trace; tokens/s = median step after the 3rd; MODES="a b"
# runs a subset; CLIP=x sets the clipping of the modes that clip, default 1.0):
#   zero1-offload        ZeRO-1, offload_optimizer "cpu", gradient clipping CLIP, the default
#                        speculation (DX_OFFLOAD_SPECULATE=auto: the host AdamW runs inside the
#                        backward with clip factor 1 when the previous step's norm was under the
#                        clip, and is redone when the norm clips; src/zero/zero.h);
#   zero1-offload-wait   the same with DX_OFFLOAD_SPECULATE=0: the host AdamW waits for the global
#                        norm, after the backward (as DeepSpeed and FSDP2);
#   zero1-offload-spec1  the same with DX_OFFLOAD_SPECULATE=1: speculates every step;
#   zero1-offload-noclip without clipping: the host AdamW runs inside the backward (exact);
#   zero3-offload-param  ZeRO-3 with offload_optimizer and offload_param "cpu" (pinned): the
#                        parameter shards on the host too (ZeRO-Infinity), clipping 1.0;
# then (OPTRACE=1, the default) a 4-step op-level trace of zero1-offload for `dissect report`'s
# offload line. Prints a table last: tokens/s, step ms, MFU (as offload_bench.sh), GPU peak
# (allocator), host bytes (plan), first and last loss, and each step's gradient norm.
set -euo pipefail
cd "$(dirname "$0")/.."
seq=${1:-350} mb=${2:-32} rc=${3:-selective} steps=${4:-12} tsteps=${5:-3} clip=${CLIP:-1.0}
OUT=${OUT:-/tmp/dissect-offload-modes}; mkdir -p "$OUT"
py=${PYTHON3:-python3}
export CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0}
data=data/brown/train.bin
[ -s "$data" ] && [ -s data/brown/train.ids ] || { echo "offload_modes_bench: $data or data/brown/train.ids missing (examples/prepare_brown.sh)" >&2; exit 1; }
recf=(--recompute-granularity "$rc"); [ "$rc" = full ] && recf+=(--recompute-method uniform)
cat > "$OUT/zero3_param.json" <<'JSON'
{"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                       "offload_param": {"device": "cpu", "pin_memory": true}}}
JSON
common=(--device cuda --model llama2-7b --train-data "$data" --seq-length "$seq" --micro-batch "$mb"
        "${recf[@]}" --eval-interval 0 --sample-tokens 0 --log-interval 1 --lr 3e-4 --min-lr 3e-5 --warmup-iters 5)
mpi=(mpirun -np 1 --bind-to none -x CUDA_VISIBLE_DEVICES -x LD_LIBRARY_PATH)
all=("zero1-offload|auto|--zero-stage 1 --offload-optimizer cpu --clip-grad $clip"
     "zero1-offload-wait|0|--zero-stage 1 --offload-optimizer cpu --clip-grad $clip"
     "zero1-offload-spec1|1|--zero-stage 1 --offload-optimizer cpu --clip-grad $clip"
     "zero1-offload-noclip|auto|--zero-stage 1 --offload-optimizer cpu --clip-grad 0"
     "zero3-offload-param|auto|--config $OUT/zero3_param.json --clip-grad $clip")
want=${MODES:-zero1-offload zero1-offload-wait zero1-offload-noclip zero3-offload-param}
names=()
t0=$SECONDS
for m in "${all[@]}"; do
  IFS='|' read -r name spec flags <<<"$m"
  [[ " $want " == *" $name "* ]] || continue
  names+=("$name")
  # shellcheck disable=SC2086
  DX_OFFLOAD_SPECULATE=$spec "${mpi[@]}" -x DX_OFFLOAD_SPECULATE build-gpu/dissect train $flags "${common[@]}" \
    --train-iters "$steps" --trace "$OUT/$name.h5" --trace-level step > "$OUT/$name.log" 2>&1 \
    || { echo "$name failed:"; tail -20 "$OUT/$name.log"; }
  echo "$name: $((SECONDS - t0)) s" >&2
done
if [ "${OPTRACE:-1}" = 1 ]; then
  "${mpi[@]}" build-gpu/dissect train --zero-stage 1 --offload-optimizer cpu --clip-grad "$clip" "${common[@]}" --train-iters 4 \
    --trace "$OUT/offload_op.h5" --trace-level op > "$OUT/offload_op.log" 2>&1 || tail -20 "$OUT/offload_op.log"
  build-gpu/dissect report "$OUT/offload_op.h5" --steps 2:4 > "$OUT/report.txt" 2>&1 || true
else : > "$OUT/report.txt"
fi
if [ "${SKIP_TORCH:-0}" = 1 ]; then : > "$OUT/torch.jsonl"
else
  "$py" benchmarks/torch_offload_ref.py --seq "$seq" --micro-batch "$mb" --steps "$tsteps" --warmup 2 \
    --ids data/brown/train.ids > "$OUT/torch.jsonl" 2> "$OUT/torch.err" || tail -5 "$OUT/torch.err"
fi
echo "all runs done: $((SECONDS - t0)) s" >&2
grep -A2 "optimizer offload" "$OUT/report.txt" || true
"$py" - "$OUT" "$seq" "$mb" "$rc" "${names[@]}" <<'PY'
import json, os, sys, h5py, numpy as np
out, seq, mb, rc, names = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5:]
L, D, H, Hkv, I, V = 32, 4096, 32, 32, 11008, 32000
Dh = D // H
nonembed = L * (2 * D + D * D + 2 * D * Hkv * Dh + D * D + 3 * D * I) + D + V * D
fpt = 6 * nonembed + 12 * L * D * seq
tok = mb * seq
rows, norms = [], {}
for n in names:
    p = f"{out}/{n}.h5"
    if not os.path.exists(p): rows.append((n, None)); continue
    with h5py.File(p) as f:
        s = f["steps"]
        st = np.asarray(s["step_time_s"]); loss = np.asarray(s["loss"])
        t = float(np.median(st[3:])) if len(st) > 3 else float("nan")
        norms[n] = np.asarray(s["grad_norm"]).tolist()
        peak = float(np.max(s["peak_mem_bytes"][-1])) / 2**30
        host = float(np.asarray(f["metadata/plan_bytes"])[0, 6]) / 2**30
    rows.append((n, (tok / t, t * 1e3, tok / t * fpt / 989e12, peak, host, loss[0], loss[-1])))
for l in open(f"{out}/torch.jsonl"):
    if not l.strip(): continue
    r = json.loads(l)
    if "error" in r: print("torch:", r["error"][:300]); continue
    rows.append((r["impl"], (r["tokens_per_s"], r["step_ms"], r["mfu"], r["peak_gpu_gib"], r["peak_host_gib"],
                             float("nan"), float("nan"))))
print(f"\nLlama-2-7B, seq {seq} x micro-batch {mb} ({tok} tokens/step), 1 GPU, recompute '{rc}' (FSDP2: per-layer checkpointing)")
print(f"{'mode':<22} {'tokens/s':>9} {'step ms':>8} {'MFU':>6} {'GPU GiB':>8} {'host GiB':>9} {'loss first':>10} {'last':>7}")
for n, v in rows:
    if v is None: print(f"{n:<22} failed"); continue
    print(f"{n:<22} {v[0]:>9.0f} {v[1]:>8.0f} {v[2]:>6.3f} {v[3]:>8.1f} {v[4]:>9.1f} {v[5]:>10.3f} {v[6]:>7.3f}")
base = dict(rows).get("zero1-offload-wait") or dict(rows).get("zero1-offload")
bname = "zero1-offload-wait" if dict(rows).get("zero1-offload-wait") else "zero1-offload"
for n, v in rows:
    if base and v and n != bname: print(f"{n} / {bname} tokens/s: {v[0] / base[0]:.2f}x")
for n, g in norms.items():
    print(f"{n} gradient norms by step: {' '.join(f'{x:.2f}' for x in g)}")
PY
