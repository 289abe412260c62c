#!/usr/bin/env python3
"""Writes a tiny Hugging Face-style Llama directory (config.json + safetensors) for the import tests.

Usage: make_hf_dir.py VARIANT OUT_DIR [--seed N]

The model shape is CONFIG below (deliberately not one of dissect's presets, so a test sees that
the shape comes from config.json). Tensor values come from a seeded generator, a function of
(seed, tensor name) only: matrices N(0, 0.05), norm weights 1 + N(0, 0.1); `tensors()` gives
them back, so a test can compare what dissect loaded with what was written.

Good variants (dissect must load them):
  f32       model.safetensors, F32, transformers-4.x config (rope_theta, rope_scaling null), an
            extra rotary_emb.inv_freq buffer (allowed) and __metadata__
  bf16      BF16 tensors, transformers-5.x config (rope_parameters {rope_type default,
            rope_theta 500000})
  f16       F16 tensors
  sharded   model.safetensors.index.json + 2 shards (F32)
Bad variants (dissect must fail naming the file and key or tensor):
  wrong_shape, missing, extra, truncated, tied, hdr_len, bad_json, offsets, model_type,
  rope_scaling, bad_dtype, shard_missing

safetensors format: https://github.com/huggingface/safetensors (README "Format"): an 8-byte
little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, then the
little-endian data. The header is padded with spaces to a multiple of 8 bytes, as the reference
writer does. Standard library only.
"""
import argparse
import json
import math
import os
import random
import struct
import sys
import zlib

CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "vocab_size": 80,
    "hidden_size": 48,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 64,
    "rms_norm_eps": 1e-05,
    "rope_theta": 10000.0,
    "rope_scaling": None,
    "initializer_range": 0.02,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "mlp_bias": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

GOOD = ["f32", "bf16", "f16", "sharded"]
BAD = ["wrong_shape", "missing", "extra", "truncated", "tied", "hdr_len", "bad_json", "offsets",
       "model_type", "rope_scaling", "bad_dtype", "shard_missing"]


def shapes(cfg):
    """(name, shape) of every parameter, in dissect's (and HF's) order."""
    V, D, I = cfg["vocab_size"], cfg["hidden_size"], cfg["intermediate_size"]
    H, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    Dh = D // H
    out = [("model.embed_tokens.weight", [V, D])]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", [D]),
                (p + "self_attn.q_proj.weight", [H * Dh, D]),
                (p + "self_attn.k_proj.weight", [Hkv * Dh, D]),
                (p + "self_attn.v_proj.weight", [Hkv * Dh, D]),
                (p + "self_attn.o_proj.weight", [D, H * Dh]),
                (p + "post_attention_layernorm.weight", [D]),
                (p + "mlp.gate_proj.weight", [I, D]),
                (p + "mlp.up_proj.weight", [I, D]),
                (p + "mlp.down_proj.weight", [D, I])]
    out += [("model.norm.weight", [D]), ("lm_head.weight", [V, D])]
    return out


def f32(x):
    """x rounded to float32."""
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16_bits(x):
    """bfloat16 bits of float32(x), rounded to nearest even (as torch does)."""
    u = struct.unpack("<I", struct.pack("<f", x))[0]
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF


def round_bf16(x):
    return struct.unpack("<f", struct.pack("<I", bf16_bits(x) << 16))[0]


def round_f16(x):
    return struct.unpack("<e", struct.pack("<e", x))[0]


def values(name, n, seed):
    rng = random.Random(seed * 1000003 + zlib.crc32(name.encode()))
    if name.endswith("layernorm.weight") or name == "model.norm.weight":
        return [f32(1.0 + rng.gauss(0.0, 0.1)) for _ in range(n)]
    return [f32(rng.gauss(0.0, 0.05)) for _ in range(n)]


def tensors(cfg=CONFIG, seed=1):
    """[(name, shape, values as float32-exact Python floats)] of every parameter."""
    return [(n, s, values(n, math.prod(s), seed)) for n, s in shapes(cfg)]


def encode(vals, dtype):
    if dtype == "F32":
        return struct.pack(f"<{len(vals)}f", *vals)
    if dtype == "F16":
        return struct.pack(f"<{len(vals)}e", *vals)
    if dtype == "BF16":
        return struct.pack(f"<{len(vals)}H", *[bf16_bits(v) for v in vals])
    if dtype == "I32":
        return struct.pack(f"<{len(vals)}i", *[int(v * 1000) for v in vals])
    raise ValueError(dtype)


def write_safetensors(path, items, metadata=None):
    """items: [(name, shape, values, dtype)] -> one safetensors file."""
    header, blobs, off = {}, [], 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, shape, vals, dtype in items:
        b = encode(vals, dtype)
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """{name: (dtype, shape, [floats])} of a safetensors file (F32, BF16, F16)."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b = data[base + e["data_offsets"][0]:base + e["data_offsets"][1]]
        k = len(b) // {"F32": 4, "BF16": 2, "F16": 2}[e["dtype"]]
        if e["dtype"] == "F32":
            vals = list(struct.unpack(f"<{k}f", b))
        elif e["dtype"] == "F16":
            vals = list(struct.unpack(f"<{k}e", b))
        else:
            vals = [struct.unpack("<f", struct.pack("<I", u << 16))[0]
                    for u in struct.unpack(f"<{k}H", b)]
        out[name] = (e["dtype"], e["shape"], vals)
    return out


def make(variant, out, seed=1):
    os.makedirs(out, exist_ok=True)
    cfg = dict(CONFIG)
    dtype = {"bf16": "BF16", "f16": "F16"}.get(variant, "F32")
    items = [(n, s, v, dtype) for n, s, v in tensors(cfg, seed)]
    meta = {"format": "pt"}
    if variant == "f32":
        hd = cfg["hidden_size"] // cfg["num_attention_heads"]
        inv = [f32(1.0 / cfg["rope_theta"] ** (2 * i / hd)) for i in range(hd // 2)]
        items.append(("model.layers.0.self_attn.rotary_emb.inv_freq", [hd // 2], inv, "F32"))
    if variant == "bf16":  # transformers 5.x config layout
        del cfg["rope_theta"], cfg["rope_scaling"]
        cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": 500000.0}
        cfg["dtype"] = "bfloat16"
        del cfg["torch_dtype"]
    if variant == "wrong_shape":
        i = [n for n, *_ in items].index("model.layers.1.self_attn.k_proj.weight")
        n, s, v, d = items[i]
        items[i] = (n, [s[1], s[0]], v, d)
    if variant == "missing":
        items = [it for it in items if it[0] != "model.layers.1.mlp.up_proj.weight"]
    if variant == "extra":
        items.append(("model.layers.0.self_attn.q_proj.bias", [cfg["hidden_size"]],
                      [0.0] * cfg["hidden_size"], "F32"))
    if variant == "bad_dtype":
        i = [n for n, *_ in items].index("model.norm.weight")
        n, s, v, _ = items[i]
        items[i] = (n, s, v, "I32")
    if variant == "tied":
        cfg["tie_word_embeddings"] = True
    if variant == "model_type":
        cfg["model_type"] = "mistral"
    if variant == "rope_scaling":
        cfg["rope_scaling"] = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                               "high_freq_factor": 4.0, "original_max_position_embeddings": 32}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)

    if variant in ("sharded", "shard_missing"):
        names = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
        first = [it for it in items if it[0].startswith(("model.embed_tokens.", "model.layers.0."))]
        second = [it for it in items if it not in first]
        wm = {it[0]: names[0] for it in first}
        wm.update({it[0]: names[1] for it in second})
        write_safetensors(os.path.join(out, names[0]), first, meta)
        if variant == "sharded":
            write_safetensors(os.path.join(out, names[1]), second, meta)
        size = sum(len(encode(v, d)) for _, _, v, d in items)
        with open(os.path.join(out, "model.safetensors.index.json"), "w") as f:
            json.dump({"metadata": {"total_size": size}, "weight_map": wm}, f, indent=2)
        return
    path = os.path.join(out, "model.safetensors")
    write_safetensors(path, items, meta)
    with open(path, "rb") as f:
        data = bytearray(f.read())
    (n,) = struct.unpack("<Q", data[:8])
    if variant == "truncated":
        data = data[:8 + n + (len(data) - 8 - n) * 3 // 5]
    if variant == "hdr_len":
        data[:8] = struct.pack("<Q", len(data))
    if variant == "bad_json":
        hdr = data[8:8 + n].decode()
        data[8:8 + n] = hdr.replace('"dtype":', '"dtype"=', 1).encode()
    if variant == "offsets":
        header = json.loads(data[8:8 + n])
        last = max((e for k, e in header.items() if k != "__metadata__"),
                   key=lambda e: e["data_offsets"][1])
        last["data_offsets"][1] += 64
        h = json.dumps(header, separators=(",", ":")).encode()
        h += b" " * (-len(h) % 8)
        data = bytearray(struct.pack("<Q", len(h)) + h) + data[8 + n:]
    with open(path, "wb") as f:
        f.write(data)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("variant", choices=GOOD + BAD)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    make(a.variant, a.out, a.seed)


if __name__ == "__main__":
    sys.exit(main())
