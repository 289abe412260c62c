#!/usr/bin/env bash
# The memory plan (src/plan, `dissect plan`) against the allocator: for a grid of configs on the
# CPU (DP 1 and 2 with ZeRO 0-3, ZeRO-2 with DX_ZERO_REDUCE_ACT=1, TP 2 with and without sequence parallelism, TP 4 over 2 KV heads,
# PP 2 with each schedule, recomputation selective / full, ZeRO-2 with optimizer offload, LoRA with ZeRO 0, 2 and 3, QLoRA with ZeRO 1 and 3 and with PP 2, LoRA under TP 2 with SP, LoRA with dropout), every rank's planned bytes per
# category and peak (/metadata/plan_bytes) are within 5% of what its allocator held (/steps:
# params, grads, optimizer states and activations bytes at the end of each step, and the peak);
# the measured host high-water mark (/steps host_peak_bytes) holds at least the allocator's peak
# and the planned host bytes (the CPU backend's memory is the host's);
# `dissect plan` prints the same peak; and a run that cannot fit (llama2-70b on any host
# memory) stops before allocating, with one error line naming the shortfall.
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null
common=(--model tiny --num-layers 8 --seq-length 32 --grad-accum 4 --device cpu)
train=(train "${common[@]}" --train-data "$tmp/train.bin" --train-iters 2 --eval-interval 0 --sample-tokens 0 --log-interval 100)
configs=("dp1_z0:1:--micro-batch 4" "dp2_z1:2:--micro-batch 2 --zero-stage 1" "dp2_z2:2:--micro-batch 2 --zero-stage 2"
         "dp2_z3:2:--micro-batch 2 --zero-stage 3" "dp2_z2_act:2:--micro-batch 2 --zero-stage 2:DX_ZERO_REDUCE_ACT=1" "tp2:2:--micro-batch 4 --tp 2" "tp2_sp:2:--micro-batch 4 --tp 2 --sequence-parallel"
         "tp4_kv:4:--micro-batch 4 --tp 4" "pp2_1f1b:2:--micro-batch 4 --pp 2" "pp2_gpipe:2:--micro-batch 4 --pp 2 --pipeline-schedule gpipe"
         "pp2_int:2:--micro-batch 4 --pp 2 --pipeline-schedule interleaved-1f1b --num-layers-per-virtual-pipeline-stage 2"
         "sel:1:--micro-batch 4 --recompute-granularity selective"
         "off_z2:2:--micro-batch 2 --zero-stage 2 --offload-optimizer cpu"
         "full_tp2_pp2:4:--micro-batch 4 --tp 2 --pp 2 --zero-stage 1 --recompute-granularity full --recompute-method block --recompute-num-layers 2"
         "lora_z0:1:--micro-batch 4 --lora-rank 4 --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
         "lora_z2_sel:2:--micro-batch 2 --zero-stage 2 --lora-rank 8 --recompute-granularity selective"
         "qlora_z1:2:--micro-batch 2 --zero-stage 1 --lora-rank 4 --quantize nf4"
         "lora_z3:2:--micro-batch 2 --zero-stage 3 --lora-rank 4 --lora-targets q_proj,v_proj,down_proj"
         "qlora_z3:2:--micro-batch 2 --zero-stage 3 --lora-rank 4 --quantize nf4"
         "lora_pp2:2:--micro-batch 2 --grad-accum 2 --pp 2 --lora-rank 4 --quantize nf4"
         "lora_drop_z1:2:--micro-batch 2 --zero-stage 1 --lora-rank 4 --lora-dropout 0.1"
         "lora_tp2_sp:2:--micro-batch 2 --tp 2 --sequence-parallel --lora-rank 4 --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj")
fail=0
for cf in "${configs[@]}"; do
  IFS=: read -r name np flags envs <<<"$cf" # envs: VAR=value ... for both runs (optional)
  # shellcheck disable=SC2086
  env $envs OMP_NUM_THREADS=1 mpirun -np "$np" "$DISSECT" "${train[@]}" $flags --trace "$tmp/$name.h5" > "$tmp/$name.log" 2>&1 \
    || { echo "FAIL $name: dissect exited with an error"; cat "$tmp/$name.log"; exit 1; }
  # shellcheck disable=SC2086
  env $envs "$DISSECT" plan "${common[@]}" $flags --world "$np" --memory-gib 1 > "$tmp/$name.plan.txt" 2>&1 || { cat "$tmp/$name.plan.txt"; fail=1; }
done
"$PYTHON3" - "$tmp" "${configs[@]}" <<'PY' || fail=1
import sys, h5py, numpy as np
tmp, cfgs = sys.argv[1], sys.argv[2:]
passed = failed = 0
for cf in cfgs:
    name = cf.split(":")[0]
    with h5py.File(f"{tmp}/{name}.h5") as f:
        plan = np.asarray(f["metadata/plan_bytes"], dtype=np.float64)
        s = f["steps"]
        meas = np.stack([np.asarray(s[k], dtype=np.float64)[-1] for k in
                         ("params_bytes", "grads_bytes", "optim_bytes", "activations_bytes")], axis=1)
        peak = np.max(np.asarray(s["peak_mem_bytes"], dtype=np.float64), axis=0)
        host = np.max(np.asarray(s["host_peak_bytes"], dtype=np.float64), axis=0)
    # the measured host high-water mark (resident set): on the CPU backend the allocator's bytes
    # are host memory too, so it holds at least them and the planned host bytes, and at most
    # those plus the process's own (binary, libraries, MPI buffers: under 2 GiB)
    low = peak + plan[:, 6]
    host_ok = bool(np.all(host >= low) and np.all(host <= low + 2 * 2**30))
    rel_cat = np.abs(plan[:, :4] - meas) / np.maximum(meas, 1)
    rel_peak = np.abs(plan[:, 5] - peak) / peak
    # `dissect plan` prints each rank's peak (then its host bytes) in GiB with 3 decimals
    printed = [float(l.split()[-2].rstrip("G")) for l in open(f"{tmp}/{name}.plan.txt")
               if l.strip() and l.split()[0].isdigit()]
    same = len(printed) == len(plan) and all(abs(p - q / 2**30) < 6e-4 for p, q in zip(printed, plan[:, 5]))
    ok = rel_cat.max() <= 0.05 and rel_peak.max() <= 0.05 and same and host_ok
    print(f"{'ok  ' if ok else 'FAIL'} {name}: {len(plan)} ranks, plan vs allocator: worst category {rel_cat.max():.2e}, "
          f"worst peak {rel_peak.max():.2e} (peak {plan[0, 5] / 2**20:.3f} MiB planned, {peak[0] / 2**20:.3f} MiB measured "
          f"on rank 0); dissect plan prints the same peaks: {same}; host high-water {host[0] / 2**20:.1f} MiB on rank 0 "
          f"(>= allocator + planned host bytes, {low[0] / 2**20:.1f} MiB, and < 2 GiB above: {host_ok})")
    passed += ok
    failed += not ok
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY
# the host high-water mark follows the allocations: brown-small with 10 layers instead of 2 holds
# ~118 MiB more (allocator); the resident set grows by the same within 10% (1.002x here), and where
# dissect is built with AddressSanitizer by up to its shadow more (one byte per 8 of application
# memory: 1.145x on the 2-core VM, 2026-11-25; CI's machine passed the plain bound before)
shadow=0; ldd "$DISSECT" 2>/dev/null | grep -q libasan && shadow=1
for L in 2 10; do
  OMP_NUM_THREADS=1 mpirun -np 1 "$DISSECT" train --model brown-small --num-layers $L --train-data "$tmp/train.bin" \
    --seq-length 32 --micro-batch 2 --train-iters 2 --eval-interval 0 --sample-tokens 0 --device cpu \
    --trace "$tmp/host$L.h5" > "$tmp/host$L.log" 2>&1 || { echo "FAIL host-memory run ($L layers)"; cat "$tmp/host$L.log"; exit 1; }
done
"$PYTHON3" - "$tmp" "$shadow" <<'PY' || fail=1
import sys, h5py
tmp, shadow = sys.argv[1], sys.argv[2] == "1"
def last(L):
    with h5py.File(f"{tmp}/host{L}.h5") as f:
        s = f["steps"]
        return float(s["host_peak_bytes"][-1][0]), float(s["peak_mem_bytes"][-1][0])
(h2, a2), (h10, a10) = last(2), last(10)
dh, da = h10 - h2, a10 - a2
lo, hi = 0.9, 1.1 + (0.125 if shadow else 0.0)  # ASan's shadow: up to 1 byte per 8 more
ok = da > 64 * 2**20 and lo * da <= dh <= hi * da
print(f"{'ok  ' if ok else 'FAIL'} host high-water mark: brown-small 10 layers vs 2: +{dh / 2**20:.1f} MiB resident, "
      f"+{da / 2**20:.1f} MiB allocated: {dh / da:.3f}x (bounds {lo:.3f}x-{hi:.3f}x"
      f"{', ASan shadow allowed' if shadow else ''})")
sys.exit(0 if ok else 1)
PY
# a run that cannot fit stops before it allocates
out=$(OMP_NUM_THREADS=1 timeout 120 mpirun -np 2 "$DISSECT" train --model llama2-70b --seq-length 64 --micro-batch 1 \
      --train-data "$tmp/train.bin" --device cpu 2>&1) && rc=0 || rc=$?
if [[ $rc -ne 0 && $out == *"memory plan: rank 0 (pp 0, dp 0, tp 0) needs"* && $out == *"GiB are available"* &&
      $(grep -c "dissect: error" <<<"$out") -eq 1 ]]; then
  echo "ok   llama2-70b on this host's memory: exit $rc: $(grep "dissect: error" <<<"$out" | cut -c1-160)..."
else
  echo "FAIL llama2-70b run not refused by the plan (exit $rc):"; echo "$out" | head -5; fail=1
fi
# offload with too little host memory: the plan refuses it before anything is allocated or written
out=$(OMP_NUM_THREADS=1 timeout 120 mpirun -np 1 "$DISSECT" train --model llama2-13b --seq-length 64 --micro-batch 1 \
      --zero-stage 1 --offload-optimizer cpu --train-data "$tmp/train.bin" --device cpu \
      --trace "$tmp/off.h5" --save "$tmp/off.ck.h5" 2>&1) && rc=0 || rc=$?
if [[ $rc -ne 0 && $out == *"memory plan: rank 0 (pp 0, dp 0, tp 0) needs"* && $out == *"optimizer states"* &&
      ! -e "$tmp/off.h5" && ! -e "$tmp/off.ck.h5" ]]; then
  echo "ok   llama2-13b with optimizer offload on this host's memory: exit $rc, no trace or checkpoint written: $(grep "dissect: error" <<<"$out" | cut -c1-140)..."
else
  echo "FAIL offload beyond the host memory not refused, or files written (exit $rc):"; echo "$out" | head -5; ls "$tmp"; fail=1
fi
exit $fail
