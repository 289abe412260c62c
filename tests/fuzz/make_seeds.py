#!/usr/bin/env python3
"""Writes the hand-made seeds of the fuzz corpus (tests/fuzz/corpus/<target>/seed-*), so that
they are reproducible and reviewable; the other corpus files are inputs the fuzzers found
(merged with run_fuzz.sh FUZZ_MERGE=1) and regression inputs of fixed bugs (regress-*).
  usage: tests/fuzz/make_seeds.py [CORPUS_DIR]   (default: tests/fuzz/corpus next to this file)
Input formats: see the comment at the top of each tests/fuzz/fuzz_<target>.c."""
import json
import os
import struct
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(root, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- config: run config JSON [\0 HF config.json [\0 key=value lines]] ----
full = {
    "comment": "a full example",
    "model": {"num_hidden_layers": 3, "preset": "tiny", "vocab_size": 128, "rms_norm_eps": 1e-6,
              "rope_theta": 500000, "initializer_range": 0.01},
    "data": {"train": "data/train.bin", "valid": "data/valid.bin", "tokenizer": "data/tok.model"},
    "save": "runs/final.h5", "save_dir": "runs/ckpt", "save_interval": 100, "keep_last": 2,
    "resume": "auto", "distributed_timeout_minutes": 5,
    "seq_length": 32, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
    "train_batch_size": 16, "train_iters": 500, "lr_warmup_iters": 50, "lr_decay_iters": 0,
    "min_lr": 3e-5, "gradient_clipping": 0, "seed": 42, "eval_interval": 25, "eval_iters": 5,
    "log_interval": 10,
    "optimizer": {"type": "adamw", "params": {"lr": 3e-4, "betas": [0.9, 0.999], "eps": 1e-6,
                                               "weight_decay": 0.01}},
    "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}},
    "trace": {"path": "runs/t.h5", "level": "module"}, "device": "cuda",
    "sample": {"tokens": 20, "temperature": 1.5},
}
put("config", "full", json.dumps(full, indent=1))
grid = {
    "model": {"preset": "tiny", "num_hidden_layers": 8}, "tensor_model_parallel_size": 2,
    "pipeline_model_parallel_size": 2, "sequence_parallel": True, "seq_length": 16,
    "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4,
    "pipeline_schedule": "interleaved-1f1b", "num_layers_per_virtual_pipeline_stage": 2,
    "recompute_granularity": "full", "recompute_method": "block", "recompute_num_layers": 1,
}
put("config", "grid", json.dumps(grid))
uneven = {"model": {"preset": "tiny", "num_hidden_layers": 7}, "pipeline_model_parallel_size": 3,
          "decoder_first_pipeline_num_layers": 1, "decoder_last_pipeline_num_layers": 2,
          "zero_optimization": {"stage": 1}, "recompute_granularity": "selective"}
put("config", "uneven", json.dumps(uneven))
offload = {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                 "offload_param": {"device": "cpu", "pin_memory": False}},
           "model": {"preset": "tiny"}, "seq_length": 64}
put("config", "offload", json.dumps(offload))
put("config", "empty", "{}")
put("config", "bad-syntax", '{"seq_length": 16,, }')
put("config", "bad-key", '{"model": {"preset": "tiny", "hiden_size": 32}}')
hf = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_act": "silu",
      "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
      "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
      "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.02,
      "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
      "rope_scaling": None, "torch_dtype": "float32"}
put("config", "hf", json.dumps({"seq_length": 64}) + "\0" + json.dumps(hf, indent=2))
hf5 = dict(hf)
del hf5["rope_theta"]
hf5["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
hf5["head_dim"] = 8
put("config", "hf-v5", "{}\0" + json.dumps(hf5))
put("config", "overrides", json.dumps({"model": {"preset": "tiny"}}) + "\0\0" +
    "zero_optimization.stage=2\noptimizer.params.betas=0.9,0.95\noptimizer.params.lr=1e-3\n"
    "model.preset=tiny\nmodel={\"num_hidden_layers\": 4}\nsequence_parallel=true\n"
    "tensor_model_parallel_size=2\nseed=9007199254740992\ntrace.level=op\n")

# ---- shard: vocab_size (int32) | T - 1 (u8) | the shard file ----
def shard(ids, dtype=2, count=None, magic=b"DXTOKENS", version=1):
    n = len(ids) if count is None else count
    body = b"".join(struct.pack("<H" if dtype == 2 else "<I", i) for i in ids)
    return magic + struct.pack("<IIQQ", version, dtype, n, 0) + body


ids = [(7 * i + 3) % 64 for i in range(40)]
put("shard", "u16", struct.pack("<iB", 64, 3) + shard(ids))
put("shard", "u32", struct.pack("<iB", 70000, 7) + shard([i * 1000 % 70000 for i in range(25)], dtype=4))
put("shard", "one-window", struct.pack("<iB", 64, 8) + shard(ids[:10]))
put("shard", "too-short", struct.pack("<iB", 64, 15) + shard(ids[:10]))
put("shard", "id-too-big", struct.pack("<iB", 8, 1) + shard(ids[:12]))
put("shard", "bad-count", struct.pack("<iB", 64, 1) + shard(ids, count=(1 << 63)))
put("shard", "truncated", struct.pack("<iB", 64, 1) + shard(ids)[:-3])
put("shard", "vocab-0", struct.pack("<iB", 0, 1) + shard(ids))

# ---- safetensors: the raw file ----
def safetensors(tensors, meta=True, pad=True):
    header, data = {}, b""
    if meta:
        header["__metadata__"] = {"format": "pt"}
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    h = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


f32 = struct.pack("<6f", 1.0, -2.5, 0.0, 3.25, float("inf"), 1e-40)
bf16 = struct.pack("<4H", 0x3f80, 0xc020, 0x7fc0, 0x0001)
f16 = struct.pack("<4H", 0x3c00, 0x8001, 0x7c00, 0x7e00)
put("safetensors", "three-dtypes", safetensors([("a.weight", "F32", [2, 3], f32), ("b", "BF16", [4], bf16),
                                               ("c", "F16", [2, 2], f16)]))
put("safetensors", "scalar-and-empty", safetensors([("s", "F32", [], f32[:4]), ("e", "F32", [0, 5], b""),
                                                   ("i", "I64", [1], struct.pack("<q", -1))], meta=False))
put("safetensors", "no-pad", safetensors([("x", "F16", [1], f16[:2])], pad=False))
put("safetensors", "bad-offsets", safetensors([("a", "F32", [2, 3], f32)])[:-4])
put("safetensors", "huge-header-len", struct.pack("<Q", 1 << 40) + b"{}")
put("safetensors", "not-object", struct.pack("<Q", 2) + b"[]")

# ---- structure-aware generators: the bytes are choices; 0 = the ordinary one ----
# fuzz_checkpoint, fuzz_hf_import, fuzz_trace: the empty input is a valid file; a few
# hand-picked byte strings steer into the other branches.
for t in ("checkpoint", "hf_import", "trace"):
    put(t, "empty", b"")
# fuzz_checkpoint: format, format_version, 3 x (value, kind) of step / consumed_samples / seed,
# groups, optimizer groups, salt, then one choice per tensor and state (21 tensors of the tiny
# model x 3), then the extra entry of /params.
put("checkpoint", "f64-int32", bytes([0, 15]) + bytes(9) + bytes([50, 51] * 32))
put("checkpoint", "v1", bytes([0, 11]))
put("checkpoint", "missing-tensor", bytes(11) + bytes([52]))
put("checkpoint", "huge-extent", bytes(11) + bytes([58, 5]) + bytes(62) + bytes([31]))
put("checkpoint", "wrong-shapes", bytes(11) + bytes([53, 0, 1, 54, 55, 56, 57] * 3))
# ... then the /checksums choice (8-11 right, 12 a wrong value: which and which bit, 13 one
# checksum_column missing or out of range, 14 another shape, 15 strings)
ck = bytes(11) + bytes(63) + bytes([0])
put("checkpoint", "checksums-right", ck + bytes([8]))
put("checkpoint", "checksums-f64-int32", bytes([0, 15]) + bytes(9) + bytes([50, 51] * 31 + [50]) + bytes([0, 9]))
put("checkpoint", "checksums-wrong-value", ck + bytes([12, 40, 17]))
put("checkpoint", "checksums-column-missing", ck + bytes([13, 0]))
put("checkpoint", "checksums-column-out-of-range", ck + bytes([13, 1, 5, 0, 0, 0]))
put("checkpoint", "checksums-shape", ck + bytes([14]))
put("checkpoint", "checksums-strings", ck + bytes([15]))
# fuzz_hf_import: sharded?, salt, then per tensor dtype, [shard,] perturbation; then the
# inv_freq buffer, the header length, __metadata__, the index.
put("hf_import", "sharded", bytes([3, 9]) + bytes([0, 1, 0] * 21))
put("hf_import", "bf16-f16", bytes([0, 5]) + bytes([13, 0, 14, 0] * 11))
put("hf_import", "bad-offsets", bytes([0, 5, 0, 61, 0, 62, 0, 63, 15, 0, 0, 57, 0, 58, 0, 59, 0, 60]))
put("hf_import", "index-wrong-shard", bytes([3, 1]) + bytes([0, 0, 0] * 10 + [0, 1, 0] * 11) + bytes([7, 0, 1, 29]))
put("trace", "op-events", bytes([0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]) + bytes(range(1, 200)))
put("trace", "grid-2x2", bytes([0, 3, 0, 1, 1]) + bytes(range(0, 255, 3)))
put("trace", "old-layout", bytes([0, 1, 13]) + bytes(60) + bytes([30, 13]) + bytes(range(100)))
