#!/usr/bin/env python3
"""Checks a `dissect dump` file (layout: src/coordinator/dump.h).

Usage: check_dump.py DUMP.h5 [--hf-dir DIR] [--loss-rtol 1e-5] [--logits-rtol 1e-5]
                             [--grad-tol 1e-5]

Always:
  - inputs / targets int32 [B, T], logits float32 [B, T, V], targets are the inputs shifted by one
    (each sequence is a contiguous window of the shard);
  - the loss attribute equals the mean cross-entropy recomputed from the dumped logits and targets
    (float64 log-softmax) within --loss-rtol;
  - /grads has one finite dataset per parameter of the model in the dump's config_json, named and
    shaped as Hugging Face's Llama (the names and shapes of tests/make_hf_dir.py shapes()).
With --hf-dir DIR (the Hugging Face directory the dump imported; weights read here from its
safetensors):
  - the logits equal a float64 NumPy reference forward of Hugging Face's LlamaForCausalLM
    (modeling_llama: RMSNorm, rotate_half RoPE, repeat_kv GQA, causal softmax, SwiGLU, untied
    head) on the dumped inputs: ||a - b|| / ||b|| <= --logits-rtol;
  - for every parameter, the dumped gradient agrees with a central finite difference of the
    reference loss along a random unit direction d of that parameter:
    |(L(p + e d) - L(p - e d)) / 2e - <g, d>| / ||g|| <= --grad-tol.
Prints one line per check and 'N passed, M failed'; exit 1 on failure.
"""
import argparse
import json
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_hf_dir  # noqa: E402  (shapes(): the parameter table)

passed = failed = 0


def check(ok, what):
    global passed, failed
    print(("ok   " if ok else "FAIL ") + what)
    if ok:
        passed += 1
    else:
        failed += 1
    return ok


def log_softmax_ce(logits, targets):
    """Mean cross-entropy of float64 logits [N, V] against targets [N]."""
    m = logits.max(axis=-1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=-1))
    return float(np.mean(lse - logits[np.arange(len(targets)), targets]))


def read_safetensors_np(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b = data[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]
        if e["dtype"] == "F32":
            a = np.frombuffer(b, dtype="<f4")
        elif e["dtype"] == "F16":
            a = np.frombuffer(b, dtype="<f2")
        elif e["dtype"] == "BF16":
            a = (np.frombuffer(b, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{path}: {name}: dtype {e['dtype']}")
        out[name] = a.astype(np.float64).reshape(e["shape"])
    return out


def read_hf_weights(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(os.path.join(d, "model.safetensors")):
        return read_safetensors_np(os.path.join(d, "model.safetensors"))
    with open(idx) as f:
        files = sorted(set(json.load(f)["weight_map"].values()))
    w = {}
    for fn in files:
        w.update(read_safetensors_np(os.path.join(d, fn)))
    return w


def rope_tables(T, Dh, theta):
    inv = 1.0 / theta ** (np.arange(0, Dh, 2, dtype=np.float64) / Dh)
    freqs = np.outer(np.arange(T, dtype=np.float64), inv)
    emb = np.concatenate([freqs, freqs], axis=-1)  # [T, Dh]
    return np.cos(emb), np.sin(emb)


def rotate_half(x):
    h = x.shape[-1] // 2
    return np.concatenate([-x[..., h:], x[..., :h]], axis=-1)


def rmsnorm(x, w, eps):
    return w * (x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps))


def forward(W, cfg, ids):
    """Logits [B, T, V] of HF's LlamaForCausalLM (eval mode, no cache) in float64."""
    B, T = ids.shape
    D, H, Hkv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    Dh, eps = D // H, cfg["rms_norm_eps"]
    cos, sin = rope_tables(T, Dh, cfg["rope_theta"])
    mask = np.triu(np.full((T, T), -np.inf), k=1)
    x = W["model.embed_tokens.weight"][ids]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        h = rmsnorm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(B, T, H, Dh).transpose(0, 2, 1, 3)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(B, T, Hkv, Dh).transpose(0, 2, 1, 3)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(B, T, Hkv, Dh).transpose(0, 2, 1, 3)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        k = np.repeat(k, H // Hkv, axis=1)  # repeat_kv
        v = np.repeat(v, H // Hkv, axis=1)
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(Dh) + mask
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        s /= s.sum(axis=-1, keepdims=True)
        o = (s @ v).transpose(0, 2, 1, 3).reshape(B, T, H * Dh)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = rmsnorm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1.0 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rmsnorm(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("dump")
    ap.add_argument("--hf-dir")
    ap.add_argument("--loss-rtol", type=float, default=1e-5)
    ap.add_argument("--logits-rtol", type=float, default=1e-5)
    ap.add_argument("--grad-tol", type=float, default=1e-5)
    a = ap.parse_args()

    with h5py.File(a.dump, "r") as f:
        check(f.attrs.get("format") in ("dissect-dump", b"dissect-dump"), "format attribute is dissect-dump")
        cfg_json = f.attrs["config_json"]
        cfg = json.loads(cfg_json if isinstance(cfg_json, str) else cfg_json.decode())["model"]
        loss = float(f.attrs["loss"])
        inputs, targets, logits = (np.asarray(f[k]) for k in ("inputs", "targets", "logits"))
        grads = {k: np.asarray(v, dtype=np.float64) for k, v in f["grads"].items()}
    B, T = inputs.shape
    V = cfg["vocab_size"]
    check(inputs.dtype == np.int32 and targets.dtype == np.int32 and targets.shape == (B, T),
          f"inputs, targets int32 [{B}, {T}]")
    check(logits.dtype == np.float32 and logits.shape == (B, T, V), f"logits float32 [{B}, {T}, {V}]")
    check(np.array_equal(inputs[:, 1:], targets[:, :-1]), "targets are the inputs shifted by one")
    ce = log_softmax_ce(logits.reshape(-1, V).astype(np.float64), targets.reshape(-1))
    check(abs(ce - loss) <= a.loss_rtol * abs(ce),
          f"loss {loss:.7f} = mean cross-entropy of the logits {ce:.7f} (rel err {abs(ce - loss) / abs(ce):.2e})")

    want = make_hf_dir.shapes(cfg)
    names = {n for n, _ in want}
    check(set(grads) == names, f"/grads holds exactly the {len(names)} parameters"
          + ("" if set(grads) == names else f": missing {sorted(names - set(grads))}, extra {sorted(set(grads) - names)}"))
    for n, s in want:
        if n in grads:
            g = grads[n]
            check(list(g.shape) == s and np.all(np.isfinite(g)) and np.any(g != 0),
                  f"grad {n} shape {list(g.shape)} (want {s}), finite, nonzero")

    if not a.hf_dir:
        print(f"{passed} passed, {failed} failed")
        return 1 if failed else 0

    # the reference takes the shape from the HF directory itself, not from what dissect imported
    with open(os.path.join(a.hf_dir, "config.json")) as f:
        hf = json.load(f)
    rope = hf.get("rope_parameters") or hf.get("rope_scaling") or {}
    hf_cfg = {k: hf[k] for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")}
    hf_cfg["num_key_value_heads"] = hf.get("num_key_value_heads") or hf["num_attention_heads"]
    hf_cfg["rms_norm_eps"] = hf.get("rms_norm_eps", 1e-6)
    hf_cfg["rope_theta"] = rope.get("rope_theta", hf.get("rope_theta", 10000.0))
    diff = {k: (cfg[k], v) for k, v in hf_cfg.items() if cfg[k] != v}
    check(not diff, "dump's model config matches config.json" + (f": {diff}" if diff else ""))
    cfg = dict(cfg, **hf_cfg)
    W = read_hf_weights(a.hf_dir)
    ref = forward(W, cfg, inputs)
    err = np.linalg.norm(logits - ref) / np.linalg.norm(ref)
    check(err <= a.logits_rtol, f"logits vs NumPy reference of HF Llama: rel err {err:.2e} <= {a.logits_rtol:g}")
    ref_loss = log_softmax_ce(ref.reshape(-1, V), targets.reshape(-1))
    check(abs(ref_loss - loss) <= 10 * a.loss_rtol * abs(ref_loss),
          f"loss vs reference {ref_loss:.7f}: rel err {abs(ref_loss - loss) / abs(ref_loss):.2e}")

    def L(Wx):
        return log_softmax_ce(forward(Wx, cfg, inputs).reshape(-1, V), targets.reshape(-1))

    rng = np.random.default_rng(0)
    eps = 1e-4
    for n, _ in want:
        if n not in grads:
            continue
        d = rng.standard_normal(W[n].shape)
        d /= np.linalg.norm(d)
        Wp, Wm = dict(W), dict(W)
        Wp[n] = W[n] + eps * d
        Wm[n] = W[n] - eps * d
        fd = (L(Wp) - L(Wm)) / (2 * eps)
        gd = float(np.sum(grads[n] * d))
        rel = abs(fd - gd) / max(np.linalg.norm(grads[n]), 1e-30)
        check(rel <= a.grad_tol, f"grad {n}: <g, d> {gd:+.6e} vs finite difference {fd:+.6e}: "
                                 f"|diff| / ||g|| {rel:.2e} <= {a.grad_tol:g}")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
