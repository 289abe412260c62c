#!/usr/bin/env bash
# `dissect export` (checkpoints/hf_export.h), on CPU:
#  (a) a checkpoint written under TP 2 (and one under PP 2 x DP 2, ZeRO 1) exports to a Hugging Face
#      directory whose model.safetensors holds every tensor of LlamaForCausalLM's state dict, in its
#      order, equal bit for bit to the checkpoint's /params (F32), or the round-to-nearest-even
#      bfloat16 of each value (BF16, compared with an independent NumPy rounding); config.json
#      holds the checkpoint's model shape under transformers' names;
#  (b) --hf-model on the export starts from the checkpoint's weights: the validation loss before
#      the first step (--eval-on-start) equals the resumed checkpoint's (F32: the same printed
#      value; BF16: within 2e-3 relative), and differs from a fresh model's;
#  (c) bad input fails with one message naming the file or the flag, exit 1 (2 for usage), and
#      leaves no model.safetensors behind: a missing file, a file that is not a checkpoint, a LoRA
#      checkpoint (adapters only), a checkpoint missing a tensor, an unknown --dtype, an
#      unwritable output directory.
set -uo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 6000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/d.bin" --vocab-size 64 >/dev/null
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed+1)); }
bad() { echo "FAIL $1"; failed=$((failed+1)); }
common=(--model tiny --train-data "$tmp/d.bin" --valid-data "$tmp/d.bin" --seq-length 16 --micro-batch 2
        --eval-interval 0 --eval-iters 4 --sample-tokens 0 --device cpu --log-interval 1000)

# --- (a) export, tensors and config ---------------------------------------------------------------
check_export() { # NAME CKPT DIR DTYPE
  local out
  if out=$("$PYTHON3" - "$2" "$3" "$4" <<'EOF' 2>&1
import json, sys
import h5py, numpy as np
ck, d, dtype = sys.argv[1:4]
with open(d + "/model.safetensors", "rb") as f:
    data = f.read()
n = int.from_bytes(data[:8], "little")
assert n % 8 == 0, f"header length {n} not a multiple of 8"
header = json.loads(data[8:8 + n])
assert header.pop("__metadata__") == {"format": "pt"}, "metadata"
with h5py.File(ck, "r") as f:
    params = {k: np.asarray(x) for k, x in f["params"].items()}
    js = f.attrs["config_json"]
    model = json.loads(js if isinstance(js, str) else js.decode())["model"]
L = model["num_hidden_layers"]
order = ["model.embed_tokens.weight"]
for l in range(L):
    order += [f"model.layers.{l}.{s}.weight" for s in
              ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj",
               "mlp.up_proj", "mlp.down_proj", "input_layernorm", "post_attention_layernorm")]
order += ["model.norm.weight", "lm_head.weight"]
assert list(header) == order, f"tensor order {list(header)[:4]}..., want LlamaForCausalLM's"
assert set(params) == set(order), f"checkpoint tensors {sorted(set(params) ^ set(order))}"
end = 0
for name in order:
    e, want = header[name], params[name]
    assert e["dtype"] == ("BF16" if dtype == "bf16" else "F32"), f"{name}: dtype {e['dtype']}"
    assert e["shape"] == list(want.shape), f"{name}: shape {e['shape']}, checkpoint {list(want.shape)}"
    b0, b1 = e["data_offsets"]
    assert b0 == end, f"{name}: offsets not contiguous"
    end = b1
    raw = data[8 + n + b0:8 + n + b1]
    if dtype == "bf16":
        u = want.astype("<f4").view("<u4").astype(np.uint64)
        rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype("<u2")  # nearest even, as torch
        got = np.frombuffer(raw, dtype="<u2").reshape(want.shape)
        assert np.array_equal(got, rounded), f"{name}: not the bf16 rounding of the checkpoint"
    else:
        got = np.frombuffer(raw, dtype="<f4").reshape(want.shape)
        assert np.array_equal(got.view("<u4"), want.astype("<f4").view("<u4")), f"{name}: not bit for bit"
assert 8 + n + end == len(data), "trailing bytes"
cfg = json.load(open(d + "/config.json"))
for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
          "num_key_value_heads", "max_position_embeddings", "rms_norm_eps", "rope_theta", "initializer_range"):
    assert cfg[k] == model[k], f"config.json {k} = {cfg[k]}, checkpoint {model[k]}"
assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
assert cfg["head_dim"] == model["hidden_size"] // model["num_attention_heads"]
assert cfg["torch_dtype"] == ("bfloat16" if dtype == "bf16" else "float32")
assert not cfg["tie_word_embeddings"] and cfg["hidden_act"] == "silu"
print(f"{len(order)} tensors in LlamaForCausalLM's order, {'bf16-rounded' if dtype == 'bf16' else 'bit for bit'}; "
      f"config.json as the checkpoint's model")
EOF
  ); then ok "$1: $out"; else bad "$1:"; sed 's/^/     /' <<<"$out"; fi
}
out=$(timeout 120 mpirun -np 2 "$DISSECT" train "${common[@]}" --tp 2 --train-iters 5 --save "$tmp/tp.h5" 2>&1) ||
  { bad "train TP 2: exit $?"; sed 's/^/     /' <<<"$out"; }
out=$(timeout 120 mpirun -np 4 "$DISSECT" train "${common[@]}" --pp 2 --zero-stage 1 --train-iters 5 \
        --save "$tmp/pp.h5" 2>&1) || { bad "train PP 2 x DP 2, ZeRO 1: exit $?"; sed 's/^/     /' <<<"$out"; }
for src in tp pp; do
  for dt in f32 bf16; do
    flag=(); [[ $dt == bf16 ]] && flag=(--dtype bfloat16)
    if out=$("$DISSECT" export "$tmp/$src.h5" "$tmp/hf_${src}_$dt" "${flag[@]}" 2>&1); then
      check_export "export of the $src checkpoint, $dt" "$tmp/$src.h5" "$tmp/hf_${src}_$dt" "$dt"
    else
      bad "export $src $dt: exit $?"; sed 's/^/     /' <<<"$out"
    fi
  done
done

# --- (b) the export as --hf-model: the checkpoint's validation loss -------------------------------
val0() { # flags...: the validation loss printed before step 1
  timeout 120 mpirun -np 1 "$DISSECT" train "${common[@]}" --eval-on-start "$@" 2>&1 |
    sed -n 's/.*validation loss \([0-9.]*\) .*(before training).*/\1/p' | head -1
}
v_ck=$(val0 --resume "$tmp/tp.h5" --train-iters 6)
v_f32=$(val0 --hf-model "$tmp/hf_tp_f32" --train-iters 1)
v_bf16=$(val0 --hf-model "$tmp/hf_tp_bf16" --train-iters 1)
v_new=$(val0 --train-iters 1)
if [[ -n $v_ck && $v_ck == "$v_f32" && -n $v_new && $v_new != "$v_ck" ]]; then
  ok "--hf-model on the F32 export: validation loss $v_f32 = the resumed checkpoint's (a fresh model: $v_new)"
else
  bad "--hf-model on the F32 export: validation loss '$v_f32', checkpoint '$v_ck', fresh '$v_new'"
fi
if [[ -n $v_bf16 ]] && "$PYTHON3" -c "import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 2e-3 * b)" \
     "$v_bf16" "$v_ck"; then
  ok "--hf-model on the BF16 export: validation loss $v_bf16 (checkpoint $v_ck, within 2e-3 relative)"
else
  bad "--hf-model on the BF16 export: validation loss '$v_bf16', checkpoint '$v_ck'"
fi

# --- (c) bad input ----------------------------------------------------------------------------------
refuse() { # NAME WANT_RC PATTERN OUT_DIR args...
  local name=$1 want=$2 pat=$3 dir=$4 out rc
  shift 4
  out=$("$DISSECT" export "$@" 2>&1); rc=$?
  if [[ $rc -eq $want ]] && grep -q -- "$pat" <<<"$out" && [[ ! -e $dir/model.safetensors ]] &&
     [[ -z $(ls "$dir"/*.tmp 2>/dev/null) ]]; then
    ok "$name: exit $rc, $(head -1 <<<"$out")"
  else
    bad "$name: exit $rc (want $want, a message matching '$pat', nothing written):"; sed 's/^/     /' <<<"$out"
  fi
}
refuse "missing checkpoint" 1 "$tmp/none.h5" "$tmp/o1" "$tmp/none.h5" "$tmp/o1"
cp "$tmp/d.bin" "$tmp/not.h5"
refuse "not HDF5" 1 "$tmp/not.h5" "$tmp/o2" "$tmp/not.h5" "$tmp/o2"
timeout 60 mpirun -np 1 "$DISSECT" train "${common[@]}" --train-iters 2 --trace "$tmp/trace.h5" >/dev/null 2>&1
refuse "a trace, not a checkpoint" 1 "not a dissect checkpoint" "$tmp/o3" "$tmp/trace.h5" "$tmp/o3"
"$PYTHON3" - "$tmp" <<'EOF'
import shutil, sys, h5py
t = sys.argv[1]
shutil.copy(t + "/tp.h5", t + "/holed.h5")
with h5py.File(t + "/holed.h5", "r+") as f:
    del f["params/model.layers.1.mlp.up_proj.weight"]
EOF
refuse "a tensor missing" 1 "model.layers.1.mlp.up_proj.weight missing" "$tmp/o4" "$tmp/holed.h5" "$tmp/o4"
"$PYTHON3" - "$tmp" <<'EOF'
import shutil, sys, h5py, numpy as np
t = sys.argv[1]
shutil.copy(t + "/tp.h5", t + "/flipped.h5")
with h5py.File(t + "/flipped.h5", "r+") as f:  # one bit of one weight, as a bad disk would
    d = f["params/model.layers.0.self_attn.o_proj.weight"]; v = d[()]; v.view(np.uint32)[2, 3] ^= 1 << 7; d[...] = v
EOF
refuse "a bit flipped in a weight" 1 "params/model.layers.0.self_attn.o_proj.weight does not match the checksum" \
  "$tmp/o9" "$tmp/flipped.h5" "$tmp/o9"
if timeout 120 mpirun -np 1 "$DISSECT" train --hf-model "$tmp/hf_tp_f32" "${common[@]}" --lora-rank 2 \
     --train-iters 2 --save "$tmp/lora.h5" >/dev/null 2>&1; then
  refuse "a LoRA checkpoint" 1 "lora.save" "$tmp/o5" "$tmp/lora.h5" "$tmp/o5"
else
  bad "LoRA training for the refusal case failed"
fi
refuse "unknown --dtype" 2 "--dtype" "$tmp/o6" "$tmp/tp.h5" "$tmp/o6" --dtype float8
refuse "missing argument" 2 "usage" "$tmp/o7" "$tmp/tp.h5"
mkdir -p "$tmp/ro" && chmod 555 "$tmp/ro"
if [[ $(id -u) -ne 0 ]]; then
  refuse "unwritable output directory" 1 "$tmp/ro" "$tmp/ro" "$tmp/tp.h5" "$tmp/ro"
else # root writes anywhere: a path under a regular file instead
  refuse "output directory under a file" 1 "$tmp/not.h5/x" "$tmp/o8" "$tmp/tp.h5" "$tmp/not.h5/x"
fi

echo "export: $passed passed, $failed failed"
[[ $failed -eq 0 ]]
