#!/usr/bin/env bash
# LoRA fine-tuning end to end on the CPU backend (fp32):
#   1. adapters on all seven linear layers, rank 4: DP = 2 at ZeRO stages 0, 1 and 2 (micro-batch
#      3 x accumulation 2) give the per-step losses of one process (micro-batch 12), within 1e-5
#      relative, and the loss falls;
#   2. the base is frozen: the trace's per-rank gradient and optimizer-state bytes are those of
#      the adapters alone (r x (in + out) per target and layer, fp32; AdamW: master, m, v), far
#      below full training's;
#   3. the adapter GEMMs are their own op (lora_gemm) in an op-level trace, forward and backward,
#      7 targets x 2 layers x (2 forward + 4 backward) per micro-batch;
#   4. bad LoRA settings are refused naming the key: dropout, ZeRO-3, an unknown target.
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null
targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
common=(train --model tiny --train-data "$tmp/train.bin" --seq-length 32 --train-iters 10 --warmup-iters 3
        --lr 3e-2 --eval-interval 0 --sample-tokens 0 --log-interval 100 --device cpu)
lora=(--lora-rank 4 --lora-alpha 8 --lora-targets "$targets")
run() { # name np args...
  local name=$1 np=$2; shift 2
  OMP_NUM_THREADS=1 mpirun -np "$np" "$DISSECT" "${common[@]}" "$@" --trace "$tmp/$name.h5" > "$tmp/$name.log" 2>&1 \
    || { cat "$tmp/$name.log"; exit 1; }
}
run ref 1 "${lora[@]}" --micro-batch 12
run full 1 --micro-batch 12
for st in 0 1 2; do run "dp2_s$st" 2 "${lora[@]}" --micro-batch 3 --grad-accum 2 --zero-stage $st; done
run op 1 "${lora[@]}" --micro-batch 12 --train-iters 2 --trace-level op
fail=0
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 1e-5 ref.h5 dp2_s0.h5 dp2_s1.h5 dp2_s2.h5 ) || fail=1

"$PYTHON3" - "$tmp" <<'PY' || fail=1
import sys, h5py, numpy as np
tmp = sys.argv[1]
bad = 0
def ok(c, msg):
    global bad
    print(("ok   " if c else "FAIL ") + msg)
    bad += not c

with h5py.File(f"{tmp}/ref.h5") as f:
    loss = np.asarray(f["steps"]["loss"])
    g = int(f["steps"]["grads_bytes"][-1][0]); o = int(f["steps"]["optim_bytes"][-1][0])
ok(loss[-1] < loss[0], f"LoRA loss falls: {loss[0]:.4f} -> {loss[-1]:.4f}")
# model tiny (config.c presets): hidden 32, 4 heads of 8, 2 KV heads, FFN 88, 2 layers; r = 4
D, HD, KD, I, L, r = 32, 32, 16, 88, 2, 4
shapes = [(D, HD), (D, KD), (D, KD), (HD, D), (D, I), (D, I), (I, D)]  # (in, out) per target
n = L * sum(r * (i + o) for i, o in shapes)
ok(g == 4 * n, f"gradient bytes {g} = the adapters' {n} parameters x 4 (fp32): the base has none")
ok(o == 12 * n, f"optimizer-state bytes {o} = 12 x {n} (master, m, v): none for the base")
with h5py.File(f"{tmp}/full.h5") as f:
    gf = int(f["steps"]["grads_bytes"][-1][0])
ok(g < 0.5 * gf, f"gradient bytes {g} vs full training's {gf}")
with h5py.File(f"{tmp}/op.h5") as f:
    ev = f["events"][()]
    opn = {v: k for k, v in h5py.check_enum_dtype(f["events"].dtype["op"]).items()}
    phn = {v: k for k, v in h5py.check_enum_dtype(f["events"].dtype["phase"]).items()}
    cnt = {}
    for e in ev:
        if opn[e["op"]] == "lora_gemm":
            cnt[phn[e["phase"]]] = cnt.get(phn[e["phase"]], 0) + 1
ok(cnt.get("forward", 0) == 2 * 7 * L and cnt.get("backward", 0) == 2 * 7 * L,
   f"op trace: lora_gemm events per phase {cnt} (2 steps x 7 targets x {L} layers each)")
sys.exit(1 if bad else 0)
PY

# bad settings, each refused with its key named
expect_error() { # pattern args...
  local pat=$1; shift
  if OMP_NUM_THREADS=1 mpirun -np 1 "$DISSECT" "${common[@]}" --micro-batch 12 "$@" > "$tmp/bad.log" 2>&1; then
    echo "FAIL accepted: $*"; fail=1
  elif grep -q -- "$pat" "$tmp/bad.log"; then
    echo "ok   refused: $* ('$(grep -m1 -- "$pat" "$tmp/bad.log" | cut -c1-110)')"
  else
    echo "FAIL wrong message for $*:"; tail -3 "$tmp/bad.log"; fail=1
  fi
}
expect_error "key 'lora.lora_dropout'" --lora-rank 4 --lora-dropout 0.1
expect_error "key 'lora.r'" --lora-rank 4 --zero-stage 3
expect_error "key 'lora.target_modules'" --lora-rank 4 --lora-targets q_proj,w_proj
exit $fail
