#!/usr/bin/env python3
"""Checks dissect's forward and backward against Hugging Face's LlamaForCausalLM.

    python3 examples/compare_hf.py --dissect build/dissect --dtype fp32
    python3 examples/compare_hf.py --dissect build/dissect --dtype bf16
    python3 examples/compare_hf.py --dissect build/dissect --dtype fp32 -- --seed 7   # extra dissect flags

1. Builds a small random LlamaForCausalLM (vocab 1000, hidden 256, intermediate 688, 4 layers,
   8 heads / 4 KV heads, max_position_embeddings 512, rms_norm_eps 1e-5, rope_theta 10000, untied
   head; weights N(0, --init-std), RMSNorm weights 1 + N(0, 0.1) so that their mapping matters),
   seeded, and saves it with save_pretrained (config.json + model.safetensors).
2. Writes a token shard of random ids in dissect's format (src/worker/data.h, as
   examples/make_shards.py writes it).
3. Runs `mpirun -np 1 DISSECT dump --hf-model DIR --train-data SHARD --micro-batch B
   --seq-length T --device DEV --out OUT.h5 [extra args after --]`: dissect imports the model
   and dumps one forward + backward on its first training batch (src/coordinator/dump.h).
   --dtype fp32 runs dissect on --device cpu (fp32 engine); --dtype bf16 on --device cuda (bf16
   compute, fp32 accumulation); --dissect-device overrides.
4. Feeds exactly the dumped inputs to the HF model in fp32 (the reference; TF32 disabled), computes
   the loss itself (mean cross-entropy over all B x T dumped targets, no internal label shift),
   backpropagates, and compares logits, loss and the gradient of every parameter (HF parameter
   names are dissect's) by relative error ||dissect - hf|| / ||hf||, against the bound of the
   dtype: fp32 1e-4; bf16 2e-2, or twice HF's own bf16 error on that tensor (HF under bf16
   autocast vs HF fp32, shown in the table) where that is larger. --rtol sets one fixed bound.
Prints a table (tensor, rel err, bound, ok) and 'N passed, M failed'; exit status 1 on any failure
(and 2 if a step before the comparison fails).

LoRA (PEFT round trip): --peft DIR loads DIR (written by `dissect train --lora-save DIR`) onto the
HF model with peft.PeftModel.from_pretrained(model, DIR, is_trainable=True); the dump must then
come from `dissect dump ... --lora-rank r ... --resume CKPT` of the same training run (its adapters).
Logits and loss are compared as above, gradients for the adapters only (PEFT's names
base_model.model.X.lora_A.default.weight are dissect's X.lora_A.weight); one more row checks that
the adapters matter: the logits with PEFT's adapters disabled must differ from the adapted ones by
more than 10 x the bound. tests/peft_roundtrip.sh runs the whole round trip.

Where dissect and torch live on different hosts, split the run over a shared --workdir:
    python3 examples/compare_hf.py --workdir W --prepare-only      # torch host: steps 1-2
    mpirun -np 1 dissect dump ... --out W/dump.h5                    # dissect host: printed by it
    python3 examples/compare_hf.py --workdir W --dump W/dump.h5      # torch host: step 4
The reference is always the model read back from W/hf_model with from_pretrained, so what is
compared is what was saved.

Seen on an H100 (torch 2.11, transformers 5.17, CUDA build of dissect): fp32 all rel errs
<= 3e-6; bf16 logits 9e-3, gradients 0.8-1.8e-2 (1.1-1.4 x HF's own bf16 autocast error); a bf16
dump judged at the fp32 bound fails (40 of 43), so the check does discriminate.

Needs torch (2.x) and transformers (5.x tested; 4.x configs are read too) with safetensors, plus
h5py and numpy; dissect needs mpirun. Running as root under Open MPI: export OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, or pass --mpirun "mpirun --allow-run-as-root -np 1".
"""
import argparse
import json
import os
import shlex
import struct
import subprocess
import sys
import tempfile

import h5py
import numpy as np
import torch
import torch.nn.functional as F
import transformers
from transformers import LlamaConfig, LlamaForCausalLM

BOUNDS = {"fp32": 1e-4, "bf16": 2e-2}
# In bf16 mode a tensor may also pass within FLOOR_FACTOR x HF's own bf16 error on it (HF under
# bf16 autocast vs HF fp32): bf16 rounding (8-bit mantissa) sets that floor, which grows with the
# weights' scale. Measured on an H100 (transformers 5.17, this model, B 2 x T 64): dissect's bf16
# gradients are 1.1-1.4 x HF autocast's error and below HF pure-bf16's (about 0.8-1.8e-2 at
# initializer_range 0.02, 1.5-3e-2 at 0.05).
FLOOR_FACTOR = 2.0
DEVICE_OF = {"fp32": "cpu", "bf16": "cuda"}


def die(msg):
    print(f"compare_hf.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def build_model(a):
    """A seeded random model on the CPU (so the same seed gives the same weights anywhere)."""
    kw = dict(vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
              num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
              max_position_embeddings=a.max_pos, rms_norm_eps=1e-5, initializer_range=a.init_std,
              tie_word_embeddings=False, attention_bias=False, mlp_bias=False, hidden_act="silu")
    # rope_theta 10000 is LlamaConfig's default in transformers 4.x (rope_theta) and 5.x
    # (rope_parameters["rope_theta"]); save_model checks it whichever way config.json stores it.
    torch.manual_seed(a.seed)
    model = LlamaForCausalLM(LlamaConfig(**kw)).float()
    with torch.no_grad():  # norm weights away from 1, so that their mapping matters
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
    return model


def load_model(d, hf_device, attn):
    """The saved model, read back in fp32."""
    try:
        model = LlamaForCausalLM.from_pretrained(d, attn_implementation=attn)
    except (TypeError, ValueError, ImportError) as e:
        print(f"note: attention implementation {attn!r} not accepted ({e}); using the default")
        model = LlamaForCausalLM.from_pretrained(d)
    model = model.float().to(hf_device)
    model.eval()
    return model


def save_model(model, d):
    try:
        model.save_pretrained(d, safe_serialization=True)
    except TypeError:  # transformers versions without the argument always write safetensors
        model.save_pretrained(d)
    names = os.listdir(d)
    if "model.safetensors" not in names and "model.safetensors.index.json" not in names:
        die(f"save_pretrained wrote no safetensors in {d}: {sorted(names)}")
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = rope.get("rope_theta", cfg.get("rope_theta", 10000.0))
    if theta != 10000.0 or rope.get("rope_type", rope.get("type", "default")) != "default":
        die(f"{d}/config.json: unexpected RoPE settings {rope or theta}")
    return cfg


def write_shard(path, vocab, count, seed):
    g = torch.Generator().manual_seed(seed + 1)
    ids = torch.randint(0, vocab, (count,), generator=g).numpy().astype("<u2")
    with open(path, "wb") as f:
        f.write(struct.pack("<8sIIQQ", b"DXTOKENS", 1, 2, count, 0))
        f.write(ids.tobytes())


def dissect_cmd(a, hf_dir, shard, out):
    dev = a.dissect_device or DEVICE_OF[a.dtype]
    return shlex.split(a.mpirun) + [a.dissect or "dissect", "dump", "--hf-model", hf_dir,
                                    "--train-data", shard, "--micro-batch", str(a.micro_batch),
                                    "--seq-length", str(a.seq_length), "--device", dev,
                                    "--zero-stage", "0", "--seed", str(a.seed), "--out", out] + a.extra


def run_dissect(a, hf_dir, shard, out):
    cmd = dissect_cmd(a, hf_dir, shard, out)
    print("$ " + " ".join(shlex.quote(c) for c in cmd), flush=True)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print(r.stdout.rstrip())
    if r.returncode != 0:
        die(f"dissect dump exited with status {r.returncode}")
    return read_dump(out)


def read_dump(out):
    with h5py.File(out, "r") as f:
        d = {k: np.asarray(f[k]) for k in ("inputs", "targets", "logits")}
        d["loss"] = float(f.attrs["loss"])
        d["act_dtype"] = f.attrs.get("act_dtype", "?")
        d["grads"] = {k: np.asarray(v, dtype=np.float32) for k, v in f["grads"].items()}
    if isinstance(d["act_dtype"], bytes):
        d["act_dtype"] = d["act_dtype"].decode()
    return d


def dissect_name(hf_name):
    """dissect's parameter name of an HF / PEFT one (PEFT: base_model.model.X.lora_A.default.weight)."""
    if hf_name.startswith("base_model.model."):
        hf_name = hf_name[len("base_model.model."):].replace(".default.", ".")
    return hf_name


def rel_err(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    nb = np.linalg.norm(b)
    return float(np.linalg.norm(a - b) / nb) if nb > 0 else float("inf")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--dissect", help="path to the dissect binary (not needed with --dump or --prepare-only)")
    ap.add_argument("--dtype", choices=sorted(BOUNDS), default="fp32",
                    help="dissect's precision: fp32 (--device cpu) or bf16 (--device cuda)")
    ap.add_argument("--dissect-device", choices=["cpu", "cuda"], help="override dissect's --device")
    ap.add_argument("--hf-device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="device of the fp32 HF reference (default: cuda if available)")
    ap.add_argument("--mpirun", default="mpirun -np 1", help="launcher prefix (default: %(default)s)")
    ap.add_argument("--rtol", type=float, help="relative-error bound (default: fp32 1e-4, bf16 2e-2)")
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--seq-length", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=1000)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--intermediate", type=int, default=688)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--max-pos", type=int, default=512)
    ap.add_argument("--init-std", type=float, default=0.02, help="initializer_range (default 0.02, HF's)")
    ap.add_argument("--attn", default="eager", choices=["eager", "sdpa"], help="HF attention implementation")
    ap.add_argument("--workdir", help="keep the HF directory, shard and dump here (default: a temp dir)")
    ap.add_argument("--prepare-only", action="store_true",
                    help="write WORKDIR/hf_model and WORKDIR/tokens.bin, print the dissect command, stop")
    ap.add_argument("--dump", help="compare this existing dissect dump of WORKDIR/hf_model instead of running dissect")
    ap.add_argument("--peft", help="PEFT adapter directory to load onto the HF model (LoRA round trip; see above)")
    ap.add_argument("extra", nargs="*", help="after --: extra dissect arguments")
    a = ap.parse_args()
    bound = a.rtol if a.rtol is not None else BOUNDS[a.dtype]
    if (a.prepare_only or a.dump) and not a.workdir:
        die("--prepare-only and --dump need --workdir")
    if not (a.prepare_only or a.dump) and not (a.dissect and os.access(a.dissect, os.X_OK)):
        die(f"--dissect {a.dissect}: not an executable (give the dissect binary, or use --dump)")

    # fp32 reference: no TF32 anywhere
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, HF reference fp32 on "
          f"{a.hf_device}, dissect {a.dtype}, bound {bound:g}")

    tmp = None
    if a.workdir:
        work = a.workdir
        os.makedirs(work, exist_ok=True)
    else:
        tmp = tempfile.TemporaryDirectory(prefix="compare_hf_")
        work = tmp.name
    hf_dir, shard, out = (os.path.join(work, n) for n in ("hf_model", "tokens.bin", "dump.h5"))

    if not a.dump:
        save_model(build_model(a), hf_dir)
        write_shard(shard, a.vocab, a.micro_batch * a.seq_length * 4 + 1, a.seed)
        if a.prepare_only:
            print(f"wrote {hf_dir} and {shard}; now run:\n  "
                  + " ".join(shlex.quote(c) for c in dissect_cmd(a, hf_dir, shard, out)))
            return 0
    model = load_model(hf_dir, a.hf_device, a.attn)
    if a.peft:
        import peft
        model = peft.PeftModel.from_pretrained(model, a.peft, is_trainable=True).float().to(a.hf_device)
        model.eval()
        print(f"peft {peft.__version__}: loaded {a.peft}")
    print(f"HF attention implementation: {getattr(model.config, '_attn_implementation', '?')}")
    d = read_dump(a.dump) if a.dump else run_dissect(a, hf_dir, shard, out)

    B, T, V = a.micro_batch, a.seq_length, a.vocab
    rows, passed, failed = [], 0, 0

    def row(name, err, floor=None, ok=None):
        """One table row; floor = HF's own bf16 error on it (bf16 mode), which may widen the bound."""
        nonlocal passed, failed
        b = max(bound, FLOOR_FACTOR * floor) if floor is not None else bound
        ok = (err <= b) if ok is None else ok
        rows.append((name, err, floor, b, ok))
        passed, failed = passed + ok, failed + (not ok)

    # sanity of the dump itself
    shapes_ok = d["inputs"].shape == (B, T) and d["targets"].shape == (B, T) and d["logits"].shape == (B, T, V)
    row("dump shapes [B, T] / [B, T, V]", 0.0 if shapes_ok else float("inf"), ok=shapes_ok)
    if not shapes_ok:
        die(f"dump shapes {d['inputs'].shape} {d['targets'].shape} {d['logits'].shape}, want "
            f"[{B}, {T}] and [{B}, {T}, {V}]")
    shift_ok = bool(np.array_equal(d["inputs"][:, 1:], d["targets"][:, :-1]))
    row("targets = inputs shifted by one", 0.0 if shift_ok else float("inf"), ok=shift_ok)

    # the reference on exactly dissect's batch
    ids = torch.from_numpy(d["inputs"].astype(np.int64)).to(a.hf_device)
    tgt = torch.from_numpy(d["targets"].astype(np.int64)).to(a.hf_device)

    def hf_pass(bf16):
        """HF forward + backward: fp32, or under bf16 autocast (fp32 weights and gradients)."""
        model.zero_grad(set_to_none=True)
        with torch.autocast(device_type=ids.device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = model(input_ids=ids, use_cache=False).logits
        loss = F.cross_entropy(logits.float().reshape(-1, V), tgt.reshape(-1))  # mean over all B x T
        loss.backward()
        grads = {dissect_name(n): p.grad.detach().float().cpu().numpy() for n, p in model.named_parameters()
                 if p.grad is not None}
        return logits.detach().float().cpu().numpy(), loss.item(), grads

    ref_logits, ref_loss, ref_grads = hf_pass(False)
    # bf16: HF's own bf16 error (autocast vs fp32) is the noise floor; the bound is the larger of
    # --dtype's and FLOOR_FACTOR x that floor, tensor by tensor
    floor = None
    if a.dtype == "bf16" and a.rtol is None:
        lg16, loss16, g16 = hf_pass(True)
        floor = {"logits": rel_err(lg16, ref_logits), "loss": abs(loss16 - ref_loss) / abs(ref_loss)}
        floor.update({n: rel_err(g16[n], ref_grads[n]) for n in ref_grads if n in g16})
    fl = (lambda k: floor.get(k)) if floor else (lambda k: None)

    row("logits", rel_err(d["logits"], ref_logits), fl("logits"))
    if a.peft:  # the check discriminates only if the adapters move the logits well beyond the bound
        with model.disable_adapter(), torch.no_grad():
            base = model(input_ids=ids, use_cache=False).logits.float().cpu().numpy()
        moved = rel_err(base, ref_logits)
        row(f"adapters matter: HF base vs adapted logits > 10 x bound", moved, ok=moved > 10 * bound)
    row("loss", abs(d["loss"] - ref_loss) / abs(ref_loss), fl("loss"))
    hf_names = []
    for hf_name, p in model.named_parameters():
        if not p.requires_grad:
            continue  # PEFT: the frozen base
        name = dissect_name(hf_name)
        hf_names.append(name)
        g = d["grads"].get(name)
        if g is None:
            row(f"grad {name} (missing in dump)", float("inf"), ok=False)
        elif name not in ref_grads or tuple(g.shape) != tuple(p.shape):
            row(f"grad {name} (shape {tuple(g.shape)} vs {tuple(p.shape)})", float("inf"), ok=False)
        else:
            row(f"grad {name}", rel_err(g, ref_grads[name]), fl(name))
    for name in sorted(set(d["grads"]) - set(hf_names)):
        row(f"grad {name} (not an HF parameter)", float("inf"), ok=False)

    w = max(len(r[0]) for r in rows)
    print(f"\n{'tensor':<{w}}  {'rel err':>10}  {'HF bf16':>9}  {'bound':>8}  ok")
    for name, err, fl_, b, ok in rows:
        hf16 = f"{fl_:9.2e}" if fl_ is not None else f"{'-':>9}"
        print(f"{name:<{w}}  {err:>10.3e}  {hf16}  {b:>8.1e}  {'ok' if ok else 'FAIL'}")
    if floor:
        print(f"\n(HF bf16: HF's own error under bf16 autocast vs its fp32 result; bound = max({bound:g}, "
              f"{FLOOR_FACTOR:g} x HF bf16))")
    print(f"\ndissect loss {d['loss']:.6f} (act dtype {d['act_dtype']}), HF fp32 loss {ref_loss:.6f}")
    print(f"{passed} passed, {failed} failed")
    if tmp:
        tmp.cleanup()
    return 1 if failed else 0

if __name__ == "__main__":
    sys.exit(main())
