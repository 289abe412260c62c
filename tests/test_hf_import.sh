#!/usr/bin/env bash
# Hugging Face import (hf_model / --hf-model, checkpoints/safetensors.h) and `dissect dump`, on CPU:
#  (a) tiny HF directories written by tests/make_hf_dir.py (F32, BF16 with a transformers-5.x
#      config, F16, sharded) load exactly: after one step at lr 1e-30 the checkpoint's /params equal
#      the written values (F32 within 1e-6 relative, BF16 / F16 exactly the rounded values), under
#      DP 1 and DP 2 with ZeRO 0-3 and under TP 2 and TP 2 x PP 2, and the model shape comes from
#      config.json;
#  (b) bad directories fail with one "dissect: error:" line naming the file and tensor or key;
#  (c) `dissect dump` writes inputs, targets, logits, loss and every gradient; tests/check_dump.py
#      recomputes the loss from the logits, and checks the logits against a NumPy reference of HF's
#      Llama forward and each gradient against finite differences of it.
set -uo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
export PYTHONDONTWRITEBYTECODE=1 # the helpers import tests/make_hf_dir.py: no __pycache__ in the source tree
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 4000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/good.bin" --vocab-size 64 >/dev/null
for v in f32 bf16 f16 sharded wrong_shape missing extra truncated tied hdr_len bad_json offsets \
         model_type rope_scaling bad_dtype shard_missing; do
  "$PYTHON3" "$SRCDIR/tests/make_hf_dir.py" "$v" "$tmp/hf_$v" || { echo "make_hf_dir.py $v failed"; exit 1; }
done
passed=0 failed=0
ok() { echo "ok   $1"; passed=$((passed+1)); }
bad() { echo "FAIL $1"; failed=$((failed+1)); }
common=(--train-data "$tmp/good.bin" --seq-length 16 --micro-batch 2 --eval-interval 0
        --sample-tokens 0 --device cpu)

# --- (a) import --------------------------------------------------------------------------------
# load NAME NP VARIANT [flags]: one step at lr 1e-30, then compare the checkpoint with the files
load() {
  local name=$1 np=$2 v=$3; shift 3
  local ck=$tmp/ck_$name.h5 out
  if ! out=$(timeout 120 mpirun -np "$np" "$DISSECT" train --hf-model "$tmp/hf_$v" "${common[@]}" \
             --train-iters 1 --lr 1e-30 --min-lr 0 --warmup-iters 0 --save "$ck" "$@" 2>&1); then
    bad "$name: train exit $?:"; sed 's/^/     /' <<<"$out"; return
  fi
  if out=$("$PYTHON3" - "$SRCDIR/tests" "$ck" "$tmp/hf_$v" "$v" <<'EOF' 2>&1
import json, sys
sys.path.insert(0, sys.argv[1])
import h5py, numpy as np
import make_hf_dir as M
ck, hf, v = sys.argv[2:5]
rnd = {"bf16": M.round_bf16, "f16": M.round_f16}.get(v)
with open(hf + "/config.json") as f:
    cfg = json.load(f)
with h5py.File(ck, "r") as f:
    params = {k: np.asarray(x) for k, x in f["params"].items()}
    js = f.attrs["config_json"]
    model = json.loads(js if isinstance(js, str) else js.decode())["model"]
want = {n: (s, vals) for n, s, vals in M.tensors(M.CONFIG, 1)}
assert set(params) == set(want), f"checkpoint tensors differ: {sorted(set(params) ^ set(want))}"
worst = 0.0
for n, (s, vals) in want.items():
    b = np.array([rnd(x) for x in vals] if rnd else vals, dtype=np.float32).reshape(s)
    a = params[n]
    assert a.shape == b.shape, f"{n}: shape {a.shape}, want {b.shape}"
    if rnd:
        assert np.array_equal(a, b), f"{n}: not the {v}-rounded values (max diff {np.abs(a - b).max():.3g})"
    else:
        rel = float(np.max(np.abs(a - b) / np.abs(b)))
        worst = max(worst, rel)
        assert rel <= 1e-6, f"{n}: max relative difference {rel:.3g} > 1e-6"
theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta"))
for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
          "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rms_norm_eps"):
    assert model[k] == cfg[k], f"model.{k} = {model[k]}, config.json has {cfg[k]}"
assert model["rope_theta"] == theta, f"model.rope_theta = {model['rope_theta']}, config.json has {theta}"
print(f"{len(params)} tensors {'equal the ' + v + '-rounded values' if rnd else f'within {worst:.1e} relative'}, "
      f"shape from config.json (rope_theta {theta:g})")
EOF
  ); then ok "$name: $out"; else bad "$name:"; sed 's/^/     /' <<<"$out"; fi
}
load "import F32" 1 f32
load "import BF16, transformers-5.x config" 1 bf16
load "import F16" 1 f16
load "import sharded index" 1 sharded
for st in 0 1 2 3; do load "import F32, DP 2, ZeRO $st" 2 f32 --zero-stage "$st"; done
load "import sharded, DP 2, ZeRO 1, --model tiny overridden by config.json" 2 sharded --model tiny --zero-stage 1
# tensor and pipeline parallelism: each rank keeps its slice of each logical tensor
load "import F32, TP 2 (slices of each tensor)" 2 f32 --tp 2
load "import BF16, TP 2 x PP 2, sequence parallel, ZeRO 2" 4 bf16 --tp 2 --pp 2 --sequence-parallel --zero-stage 2

# --- (b) bad input -----------------------------------------------------------------------------
# expect NAME NP EXPECTED-SUBSTRING -- dissect args...
expect() {
  local name=$1 np=$2 want=$3; shift 4
  local out rc
  out=$(timeout 60 mpirun -np "$np" "$DISSECT" "$@" 2>&1); rc=$?
  local n_err; n_err=$(grep -c "dissect: error" <<<"$out")
  if [[ $rc -ne 0 && $rc -ne 124 && $out == *"$want"* && $n_err -eq 1 && $out != *"core dumped"* && $out != *"Segmentation"* ]]; then
    ok "$name: exit $rc: $(grep "dissect: error" <<<"$out")"
  else
    bad "$name: exit $rc, $n_err error lines, wanted '$want' in:"; sed 's/^/     /' <<<"$out"
  fi
}
t=(train "${common[@]}" --train-iters 1)
st=model.safetensors
expect "wrong shape" 1 "hf_wrong_shape/$st: tensor 'model.layers.1.self_attn.k_proj.weight': shape expected [24, 48], got [48, 24]" -- "${t[@]}" --hf-model "$tmp/hf_wrong_shape"
expect "wrong shape, DP 2, ZeRO 1" 2 "hf_wrong_shape/$st: tensor 'model.layers.1.self_attn.k_proj.weight'" -- "${t[@]}" --hf-model "$tmp/hf_wrong_shape" --zero-stage 1
expect "missing tensor" 1 "hf_missing/$st: missing tensor 'model.layers.1.mlp.up_proj.weight'" -- "${t[@]}" --hf-model "$tmp/hf_missing"
expect "extra tensor" 1 "hf_extra/$st: unexpected tensor 'model.layers.0.self_attn.q_proj.bias'" -- "${t[@]}" --hf-model "$tmp/hf_extra"
expect "truncated file" 2 "hf_truncated/$st: tensor 'model.layers.1.self_attn.o_proj.weight': data_offsets" -- "${t[@]}" --hf-model "$tmp/hf_truncated"
expect "header length beyond the file" 1 "hf_hdr_len/$st: header length" -- "${t[@]}" --hf-model "$tmp/hf_hdr_len"
expect "bad header JSON" 1 "hf_bad_json/$st: malformed JSON header" -- "${t[@]}" --hf-model "$tmp/hf_bad_json"
expect "data_offsets out of range" 1 "hf_offsets/$st: tensor 'lm_head.weight': data_offsets" -- "${t[@]}" --hf-model "$tmp/hf_offsets"
expect "unsupported dtype" 1 "hf_bad_dtype/$st: tensor 'model.norm.weight': dtype I32" -- "${t[@]}" --hf-model "$tmp/hf_bad_dtype"
expect "missing shard" 1 "hf_shard_missing/model-00002-of-00002.safetensors: cannot open" -- "${t[@]}" --hf-model "$tmp/hf_shard_missing"
expect "tied embeddings" 2 "hf_tied/config.json: key 'tie_word_embeddings'" -- "${t[@]}" --hf-model "$tmp/hf_tied"
expect "model_type" 1 "hf_model_type/config.json: key 'model_type'" -- "${t[@]}" --hf-model "$tmp/hf_model_type"
expect "rope_scaling" 1 "hf_rope_scaling/config.json: key 'rope_scaling.rope_type'" -- "${t[@]}" --hf-model "$tmp/hf_rope_scaling"
expect "no such directory" 1 "$tmp/nope/config.json" -- "${t[@]}" --hf-model "$tmp/nope"
mkdir -p "$tmp/noweights" && cp "$tmp/hf_f32/config.json" "$tmp/noweights/"
expect "no safetensors" 1 "noweights: no model.safetensors or model.safetensors.index.json" -- "${t[@]}" --hf-model "$tmp/noweights"
echo "{\"hf_model\": \"$tmp/hf_tied\", \"seq_length\": 16}" > "$tmp/hf.json"
expect "hf_model key in a config file" 1 "hf_tied/config.json: key 'tie_word_embeddings'" -- train --config "$tmp/hf.json" --train-data "$tmp/good.bin"
expect "dump without --out" 1 "--out OUT.h5 is required" -- dump "${common[@]}" --hf-model "$tmp/hf_f32"
expect "dump under ZeRO 1" 1 "zero_optimization.stage" -- dump "${common[@]}" --hf-model "$tmp/hf_f32" --zero-stage 1 --out "$tmp/x.h5"
expect "dump on 2 ranks" 2 "dump: runs on one rank" -- dump "${common[@]}" --hf-model "$tmp/hf_f32" --out "$tmp/x.h5"
expect "--out is not a train flag" 1 "unknown flag '--out'" -- "${t[@]}" --out "$tmp/x.h5"

# --- (c) dump ----------------------------------------------------------------------------------
for v in f32 bf16; do
  if out=$(timeout 120 mpirun -np 1 "$DISSECT" dump --hf-model "$tmp/hf_$v" "${common[@]}" --out "$tmp/dump_$v.h5" 2>&1); then
    ok "dump $v: $(tail -1 <<<"$out")"
    if out=$("$PYTHON3" "$SRCDIR/tests/check_dump.py" "$tmp/dump_$v.h5" --hf-dir "$tmp/hf_$v" 2>&1); then
      ok "check_dump.py $v: $(tail -1 <<<"$out")"
    else
      bad "check_dump.py $v:"; sed 's/^/     /' <<<"$out"
    fi
  else
    bad "dump $v exit $?:"; sed 's/^/     /' <<<"$out"
  fi
done
# the default (random) initialisation dumps too, and the loss check needs no HF directory
if out=$(timeout 120 mpirun -np 1 "$DISSECT" dump --model tiny "${common[@]}" --out "$tmp/dump_tiny.h5" 2>&1) &&
   out=$("$PYTHON3" "$SRCDIR/tests/check_dump.py" "$tmp/dump_tiny.h5" 2>&1); then
  ok "dump --model tiny + check_dump.py: $(tail -1 <<<"$out")"
else
  bad "dump --model tiny:"; sed 's/^/     /' <<<"$out"
fi

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
