#!/usr/bin/env bash
# LoRA fine-tuning end to end on the CPU backend (fp32):
#   1. adapters on all seven linear layers, rank 4: DP = 2 at ZeRO stages 0, 1, 2 and 3 (micro-batch
#      3 x accumulation 2), PP 2 (1F1B), PP 2 x DP 2 (GPipe, ZeRO-1), TP 2, TP 2 with sequence
#      parallelism x DP 2 (ZeRO-3) and TP 2 x PP 2 give the per-step losses
#      and (PEFT files, every stage's layers) adapters of one process (micro-batch 12), within 1e-5
#      relative, and the loss falls; selective and full recomputation give them bitwise;
#   2. the base is frozen: the trace's per-rank gradient and optimizer-state bytes are those of
#      the adapters alone (r x (in + out) per target and layer, fp32; AdamW: master, m, v), far
#      below full training's; at ZeRO-3 the base's parameters are sharded (each rank: its
#      shards, the two gather slots, the replicated adapters);
#   3. the adapter GEMMs are their own op (lora_gemm) in an op-level trace, forward and backward,
#      7 targets x 2 layers x (2 forward + 4 backward) per micro-batch;
#   4. bad LoRA settings are refused naming the key: dropout 1, offload, an unknown target, k_proj
#      with KV heads replicated over TP, QLoRA under TP;
#   5. the trained adapters are a PEFT directory (--lora-save): adapter_config.json with PEFT's
#      keys and adapter_model.safetensors with PEFT's tensor names, shapes [r, in] / [out, r],
#      F32, the data in place; the DP 2 runs' adapters equal one process's within 1e-5 (per
#      tensor, norm-wise, as compare_checkpoints.py), and
#      training moved B away from PEFT's zeros;
#   6. checkpoints hold the adapters and their optimizer states only (no base tensor in the
#      file), and a run resumed from step 5's ends with bitwise the uninterrupted run's adapters;
#      a TP 2 run's checkpoint resumed by one process ends with them within 1e-5;
#   8. lora_dropout 0.2 changes the losses, which still fall; DP 2 ZeRO-2 and TP 2 (sequence
#      parallel) x PP 2 give one process's losses and adapters with it (the masks are keyed by
#      global token and column), and full recomputation gives them bitwise;
#   7. QLoRA (--quantize nf4) on a Hugging Face model trains bitwise as LoRA on the same model
#      whose decoder matrices went through NF4 in tests/nf4_round_hf.py (numpy, written apart
#      from the C codec): same losses, same adapters; its parameter bytes are the NF4 ones; on
#      DP 2 with ZeRO-3 it gives one process's losses within 1e-5.
# The learning rate is 1e-2: at 3e-2 AdamW's near-sign updates of adapter entries whose gradients
# are at rounding level amplified the layouts' different summation orders, and the TP 2 (SP) x
# PP 2 dropout run's adapters differed from one process's by 1.97e-5 on one CPU (Intel Xeon, 2
# cores) while passing on another; at 1e-2 the worst is 2.1e-6 there.
set -euo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 20000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/train.bin" --vocab-size 64 >/dev/null
targets=q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj
common=(train --model tiny --train-data "$tmp/train.bin" --seq-length 32 --train-iters 10 --warmup-iters 3
        --lr 1e-2 --eval-interval 0 --sample-tokens 0 --log-interval 100 --device cpu)
lora=(--lora-rank 4 --lora-alpha 8 --lora-targets "$targets")
run() { # name np args...
  local name=$1 np=$2; shift 2
  OMP_NUM_THREADS=1 mpirun -np "$np" "$DISSECT" "${common[@]}" "$@" --trace "$tmp/$name.h5" > "$tmp/$name.log" 2>&1 \
    || { cat "$tmp/$name.log"; exit 1; }
}
run ref 1 "${lora[@]}" --micro-batch 12 --lora-save "$tmp/ref.peft"
run full 1 --micro-batch 12
for st in 0 1 2 3; do
  run "dp2_s$st" 2 "${lora[@]}" --micro-batch 3 --grad-accum 2 --zero-stage $st --lora-save "$tmp/dp2_s$st.peft"
done
run pp2 2 "${lora[@]}" --micro-batch 3 --grad-accum 4 --pp 2 --lora-save "$tmp/pp2.peft"
run pp2_dp2 4 "${lora[@]}" --micro-batch 3 --grad-accum 2 --pp 2 --pipeline-schedule gpipe --zero-stage 1 \
  --lora-save "$tmp/pp2_dp2.peft"
run tp2 2 "${lora[@]}" --micro-batch 12 --tp 2 --lora-save "$tmp/tp2.peft"
run tp2_sp_dp2_s3 4 "${lora[@]}" --micro-batch 6 --tp 2 --sequence-parallel --zero-stage 3 --lora-save "$tmp/tp2_sp_dp2_s3.peft"
run tp2_pp2 4 "${lora[@]}" --micro-batch 3 --grad-accum 4 --tp 2 --pp 2 --lora-save "$tmp/tp2_pp2.peft"
run drop 1 "${lora[@]}" --lora-dropout 0.2 --micro-batch 12 --lora-save "$tmp/drop.peft"
run drop_dp2_s2 2 "${lora[@]}" --lora-dropout 0.2 --micro-batch 3 --grad-accum 2 --zero-stage 2
run drop_tp2_sp_pp2 4 "${lora[@]}" --lora-dropout 0.2 --micro-batch 3 --grad-accum 4 --tp 2 --sequence-parallel --pp 2 \
  --lora-save "$tmp/drop_tp2_sp_pp2.peft"
run drop_rc_full 1 "${lora[@]}" --lora-dropout 0.2 --micro-batch 12 --recompute-granularity full --recompute-method uniform
run op 1 "${lora[@]}" --micro-batch 12 --train-iters 2 --trace-level op
run ck 1 "${lora[@]}" --micro-batch 12 --save-dir "$tmp/run" --save-interval 5 --lora-save "$tmp/ck.peft"
run res 1 "${lora[@]}" --micro-batch 12 --resume "$tmp/run/iter_0000005.h5" --lora-save "$tmp/res.peft"
run ck_tp2 2 "${lora[@]}" --micro-batch 12 --tp 2 --save-dir "$tmp/run_tp" --save-interval 5
run res_tp 1 "${lora[@]}" --micro-batch 12 --resume "$tmp/run_tp/iter_0000005.h5" --lora-save "$tmp/res_tp.peft"
"$PYTHON3" "$SRCDIR/tests/make_hf_dir.py" f32 "$tmp/hf" > /dev/null
"$PYTHON3" "$SRCDIR/tests/nf4_round_hf.py" "$tmp/hf" "$tmp/hf_nf4"
run qlora 1 "${lora[@]}" --micro-batch 12 --hf-model "$tmp/hf" --quantize nf4 --lora-save "$tmp/qlora.peft"
run qlora_dp2_s3 2 "${lora[@]}" --micro-batch 6 --zero-stage 3 --hf-model "$tmp/hf" --quantize nf4
run lora_nf4 1 "${lora[@]}" --micro-batch 12 --hf-model "$tmp/hf_nf4" --lora-save "$tmp/lora_nf4.peft"
run rc_sel 1 "${lora[@]}" --micro-batch 12 --recompute-granularity selective
run rc_full 1 "${lora[@]}" --micro-batch 12 --recompute-granularity full --recompute-method uniform
fail=0
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 1e-5 ref.h5 dp2_s0.h5 dp2_s1.h5 dp2_s2.h5 dp2_s3.h5 pp2.h5 pp2_dp2.h5 \
                    tp2.h5 tp2_sp_dp2_s3.h5 tp2_pp2.h5 ) || fail=1
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 0 ref.h5 rc_sel.h5 rc_full.h5 ) || fail=1
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 1e-5 drop.h5 drop_dp2_s2.h5 drop_tp2_sp_pp2.h5 ) || fail=1
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 0 drop.h5 drop_rc_full.h5 ) || fail=1
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 0 lora_nf4.h5 qlora.h5 ) || fail=1
( cd "$tmp" && "$PYTHON3" "$SRCDIR/tests/compare_traces.py" --rtol 1e-5 qlora.h5 qlora_dp2_s3.h5 ) || fail=1

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
with h5py.File(f"{tmp}/drop.h5") as f:
    dloss = np.asarray(f["steps"]["loss"])
dd = float(np.max(np.abs(dloss - loss)))
ok(dd > 1e-5 and dloss[-1] < dloss[0], f"lora_dropout 0.2 changes the losses (max difference {dd:.2e} from p = 0) and they fall: {dloss[0]:.4f} -> {dloss[-1]:.4f}")
# model tiny (config.c presets): hidden 32, 4 heads of 8, 2 KV heads, FFN 88, 2 layers; r = 4
D, HD, KD, I, L, r = 32, 32, 16, 88, 2, 4
shapes = [(D, HD), (D, KD), (D, KD), (HD, D), (D, I), (D, I), (I, D)]  # (in, out) per target
n = L * sum(r * (i + o) for i, o in shapes)
ok(g == 4 * n, f"gradient bytes {g} = the adapters' {n} parameters x 4 (fp32): the base has none")
ok(o == 12 * n, f"optimizer-state bytes {o} = 12 x {n} (master, m, v): none for the base")
with h5py.File(f"{tmp}/full.h5") as f:
    gf = int(f["steps"]["grads_bytes"][-1][0])
ok(g < 0.5 * gf, f"gradient bytes {g} vs full training's {gf}")
# ZeRO-3, DP 2: base groups (embedding V x D; per layer 2 D + HD D + 2 KD D + D HD + 3 I D; head
# D + V x D) sharded in halves, two gather slots of the largest, the adapter groups replicated
V = 64
gn = [V * D] + [2 * D + HD * D + 2 * KD * D + D * HD + 3 * I * D] * L + [D + V * D]
half = lambda x: (x + 1) // 2
want3 = 4 * sum(half(x) for x in gn) + 2 * 4 * 2 * half(max(gn)) + 4 * L * 2 * half(n // L)
with h5py.File(f"{tmp}/dp2_s3.h5") as f:
    p3 = [int(x) for x in f["steps"]["params_bytes"][-1]]
    g3 = [int(x) for x in f["steps"]["grads_bytes"][-1]]
ok(p3 == [want3, want3], f"ZeRO-3 parameter bytes per rank {p3} = base shards + 2 gather slots + adapters ({want3})")
want_g3 = 4 * L * half(n // L) + 2 * 4 * 2 * half(n // L)
ok(g3 == [want_g3, want_g3], f"ZeRO-3 gradient bytes per rank {g3} = the adapters' shards + 2 buckets ({want_g3}): none for the base")
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

# the PEFT directories
import json, struct
def read_st(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    meta = hdr.pop("__metadata__", {})
    data = raw[8 + n:]
    out = {}
    for name, t in hdr.items():
        b, e = t["data_offsets"]
        out[name] = (t["dtype"], t["shape"], np.frombuffer(data[b:e], dtype="<f4").reshape(t["shape"]))
    return meta, out, len(data), n % 8
cfg = json.load(open(f"{tmp}/ref.peft/adapter_config.json"))
ok(cfg["peft_type"] == "LORA" and cfg["task_type"] == "CAUSAL_LM" and cfg["r"] == 4 and cfg["lora_alpha"] == 8
   and cfg["lora_dropout"] == 0 and sorted(cfg["target_modules"]) == sorted(
       ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
   and cfg["bias"] == "none" and cfg["fan_in_fan_out"] is False,
   f"adapter_config.json: PEFT's LoraConfig keys ({', '.join(sorted(cfg))})")
meta, ref, nbytes, pad = read_st(f"{tmp}/ref.peft/adapter_model.safetensors")
names = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn",
         "gate_proj": "mlp", "up_proj": "mlp", "down_proj": "mlp"}
want = {}
for l in range(L):
    for (tname, mod), (i, o) in zip(names.items(), shapes):
        base = f"base_model.model.model.layers.{l}.{mod}.{tname}"
        want[base + ".lora_A.weight"] = [r, i]
        want[base + ".lora_B.weight"] = [o, r]
got = {k: v[1] for k, v in ref.items()}
ok(got == want and all(v[0] == "F32" for v in ref.values()) and meta.get("format") == "pt" and pad == 0
   and nbytes == 4 * n,
   f"adapter_model.safetensors: {len(ref)} tensors with PEFT's names and shapes, F32, {nbytes} data bytes, header padded to 8")
bmax = max(float(np.abs(v[2]).max()) for k, v in ref.items() if "lora_B" in k)
ok(bmax > 0, f"training moved lora_B from zeros (max |B| {bmax:.3g})")
refs = {"ref": ref, "drop": read_st(f"{tmp}/drop.peft/adapter_model.safetensors")[1]}
for run, what, base in [(f"dp2_s{st}", f"DP 2 ZeRO-{st}", "ref") for st in range(4)] + [
        ("pp2", "PP 2 (1F1B)", "ref"), ("pp2_dp2", "PP 2 x DP 2 (GPipe, ZeRO-1)", "ref"), ("tp2", "TP 2", "ref"),
        ("tp2_sp_dp2_s3", "TP 2 (sequence parallel) x DP 2 (ZeRO-3)", "ref"), ("tp2_pp2", "TP 2 x PP 2", "ref"),
        ("res_tp", "a TP 2 checkpoint of step 5 resumed by one process", "ref"),
        ("drop_tp2_sp_pp2", "lora_dropout 0.2 under TP 2 (sequence parallel) x PP 2: one process's with it", "drop")]:
    _, other, _, _ = read_st(f"{tmp}/{run}.peft/adapter_model.safetensors")
    r_ = refs[base]
    # per tensor ||other - ref|| / ||ref||, as tests/compare_checkpoints.py
    err = max(float(np.linalg.norm(other[k][2] - r_[k][2]) / (np.linalg.norm(r_[k][2]) + 1e-30)) for k in r_)
    ok(list(other) == list(r_) and err < 1e-5, f"{what} adapters = one process's, every layer's in order: worst per-tensor relative difference {err:.2e} (bound 1e-5)")
_, ck, _, _ = read_st(f"{tmp}/ck.peft/adapter_model.safetensors")
_, res, _, _ = read_st(f"{tmp}/res.peft/adapter_model.safetensors")
same = set(ck) == set(res) == set(ref) and all(np.array_equal(ck[k][2], res[k][2]) and np.array_equal(ck[k][2], ref[k][2]) for k in ck)
ok(same, "resumed from step 5's checkpoint: adapters bitwise those of the uninterrupted run (and of the run without checkpoints)")
with h5py.File(f"{tmp}/run/iter_0000005.h5") as f:
    names = []
    f.visititems(lambda k, v: names.append(k) if isinstance(v, h5py.Dataset) else None)
base = [k for k in names if "lora_" not in k and ("weight" in k)]
ada = [k for k in names if "lora_" in k]
ok(not base and len(ada) == 3 * 2 * 7 * L, f"checkpoint: {len(ada)} adapter datasets (params, exp_avg, exp_avg_sq), no base tensor")
_, qa, _, _ = read_st(f"{tmp}/qlora.peft/adapter_model.safetensors")
_, la, _, _ = read_st(f"{tmp}/lora_nf4.peft/adapter_model.safetensors")
ok(set(qa) == set(la) and all(np.array_equal(qa[k][2], la[k][2]) for k in qa),
   "QLoRA adapters bitwise those of LoRA on the NF4-rounded model")
with h5py.File(f"{tmp}/qlora.h5") as f, h5py.File(f"{tmp}/lora_nf4.h5") as g:
    pq, pl = int(f["steps"]["params_bytes"][-1][0]), int(g["steps"]["params_bytes"][-1][0])
# make_hf_dir's model: hidden 48, 4 heads of 12, 2 KV heads, FFN 96, 2 layers, vocab 80
Dh, Ih, KDh, Vh = 48, 96, 24, 80
mats = [Dh * Dh, KDh * Dh, KDh * Dh, Dh * Dh, Ih * Dh, Ih * Dh, Dh * Ih]
nf4 = sum(m // 2 + m // 64 + 4 * ((m // 64 + 255) // 256) for m in mats) + 4 * 2 * Dh
layer = sum(mats) + 2 * Dh
adap = 4 * sum(4 * (i + o) for i, o in [(Dh, Dh), (Dh, KDh), (Dh, KDh), (Dh, Dh), (Dh, Ih), (Dh, Ih), (Ih, Dh)])
want_q = 2 * nf4 + 4 * layer + 4 * (Vh * Dh + Dh + Vh * Dh) + 2 * adap  # layers NF4 + one dequantized layer + embedding, head + adapters
ok(pq == want_q and pq < pl, f"QLoRA parameter bytes {pq} = NF4 layers + one dequantized layer + embedding and head + adapters ({want_q}); LoRA {pl}")
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
expect_error "key 'lora.lora_dropout'" --lora-rank 4 --lora-dropout 1
expect_error "key 'lora.r'" --lora-rank 4 --zero-stage 2 --offload-optimizer cpu
expect_error "key 'lora.target_modules'" --lora-rank 4 --lora-targets q_proj,w_proj
if OMP_NUM_THREADS=1 mpirun -np 2 "$DISSECT" "${common[@]}" --micro-batch 12 --tp 2 --lora-rank 4 --quantize nf4 \
     > "$tmp/bad.log" 2>&1 || ! grep -q "key 'quantize'.*tensor_model_parallel_size 2" "$tmp/bad.log"; then
  echo "FAIL QLoRA under TP 2 accepted or the message does not name the key:"; tail -3 "$tmp/bad.log"; fail=1
else
  echo "ok   refused: QLoRA under TP 2 ('$(grep -m1 "key 'quantize'" "$tmp/bad.log" | cut -c1-110)')"
fi
if OMP_NUM_THREADS=1 mpirun -np 4 "$DISSECT" "${common[@]}" --micro-batch 12 --tp 4 --lora-rank 4 --lora-targets q_proj,k_proj \
     > "$tmp/bad.log" 2>&1 || ! grep -q "key 'lora.target_modules'.*num_key_value_heads" "$tmp/bad.log"; then
  echo "FAIL TP 4 over 2 KV heads with a k_proj adapter:"; tail -3 "$tmp/bad.log"; fail=1
else
  echo "ok   refused: TP 4 over 2 KV heads with a k_proj adapter ('$(grep -m1 "lora.target_modules" "$tmp/bad.log" | cut -c1-110)')"
fi
exit $fail
