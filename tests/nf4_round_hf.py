#!/usr/bin/env python3
"""Writes a copy of a Hugging Face Llama directory whose decoder-layer matrices are replaced by
their NF4 round trip (quantize, then dequantize), computed here independently of dissect's C
code (kernels/cpu/nf4.c), in numpy float32 with the same rules (kernels/nf4.h):
  blocks of 64, absmax per block, index of the nearest NF4 code to w / absmax (ties to the lower
  index, midpoints compared in double), double quantization of the absmaxes (offset = their mean
  summed in double in order, groups of 256 blocks scaled by max |absmax - offset| / 448 into FP8
  E4M3, nearest, ties to even), dequantized as code x (fp8 x scale + offset) in float32.
A LoRA run on the copy must train bitwise as a QLoRA run (quantize "nf4") on the original.

Usage: nf4_round_hf.py SRC_DIR OUT_DIR     (SRC_DIR: config.json + model.safetensors, F32)
"""
import json
import os
import re
import shutil
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_hf_dir import read_safetensors, write_safetensors  # noqa: E402

CODE = np.array([-1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
                 -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
                 0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
                 0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0], dtype=np.float32)
MID = (CODE[:-1].astype(np.float64) + CODE[1:].astype(np.float64)) * 0.5


def fp8_values():
    """float32 value of each non-negative E4M3 code 0 .. 0x7E"""
    v = []
    for c in range(0x7F):
        e, m = (c >> 3) & 15, c & 7
        v.append(np.ldexp(np.float32(m) / np.float32(8), -6) if e == 0 else np.ldexp(np.float32(1) + np.float32(m) / np.float32(8), e - 7))
    return np.array(v, dtype=np.float32)


FP8 = fp8_values()


def fp8_round(x):
    """x (float32 array) rounded to E4M3 values (nearest, ties to the even code, saturated)"""
    a = np.abs(x)
    out = np.empty_like(a)
    for i, v in enumerate(a):
        if v >= np.float32(448):
            out[i] = np.float32(448)
            continue
        hi = int(np.searchsorted(FP8, v, side="right"))  # FP8[hi-1] <= v < FP8[hi]
        lo = hi - 1
        dl, dh = v - FP8[lo], FP8[hi] - v
        out[i] = FP8[lo] if dl < dh else FP8[hi] if dh < dl else FP8[lo if lo % 2 == 0 else hi]
    return np.where(np.signbit(x), -out, out).astype(np.float32)


def nf4_round_trip(w):
    w = np.asarray(w, dtype=np.float32).ravel()
    n = w.size
    nb = (n + 63) // 64
    absmax = np.array([np.max(np.abs(w[b * 64:(b + 1) * 64])) for b in range(nb)], dtype=np.float32)
    s = 0.0
    for a in absmax:  # in order, in double, as the C loop
        s += float(a)
    offset = np.float32(s / nb)
    a2 = np.empty(nb, dtype=np.float32)
    for g in range(0, nb, 256):
        d = (absmax[g:g + 256] - offset).astype(np.float32)
        mx = np.max(np.abs(d))
        sc = np.float32(mx / np.float32(448)) if mx > 0 else np.float32(1)
        q = fp8_round((d / sc).astype(np.float32))
        a2[g:g + 256] = (q * sc).astype(np.float32) + offset
    out = np.empty(n, dtype=np.float32)
    for b in range(nb):
        blk = w[b * 64:(b + 1) * 64]
        a = absmax[b]
        if a > 0:
            r = (blk / a).astype(np.float32).astype(np.float64)
            k = np.sum(r[:, None] > MID[None, :], axis=1)
        else:
            k = np.full(blk.size, 7)
        out[b * 64:b * 64 + blk.size] = (CODE[k] * a2[b]).astype(np.float32)
    return out


def main():
    src, dst = sys.argv[1], sys.argv[2]
    os.makedirs(dst, exist_ok=True)
    shutil.copy(os.path.join(src, "config.json"), os.path.join(dst, "config.json"))
    t = read_safetensors(os.path.join(src, "model.safetensors"))
    items, n_q = [], 0
    for name, (dtype, shape, vals) in t.items():
        if dtype != "F32":
            sys.exit(f"{name}: F32 expected, got {dtype}")
        if re.fullmatch(r"model\.layers\.\d+\.(self_attn\.[qkvo]_proj|mlp\.(gate|up|down)_proj)\.weight", name) \
                and len(vals) % 64 == 0:
            vals = [float(v) for v in nf4_round_trip(vals)]
            n_q += 1
        items.append((name, shape, vals, "F32"))
    write_safetensors(os.path.join(dst, "model.safetensors"), items, {"format": "pt"})
    print(f"{n_q} matrices rounded through NF4")


if __name__ == "__main__":
    main()
