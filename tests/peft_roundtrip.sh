#!/usr/bin/env bash
# LoRA adapters from dissect loaded by PEFT (issue 16, item 3), on a host with torch,
# transformers and peft (the GPU host; see ../shared/gpu/README.md):
#   1. examples/compare_hf.py --prepare-only: a small random Llama (vocab 1000, hidden 256, 4 layers,
#      8 heads / 4 KV heads) saved with save_pretrained, and a token shard;
#   2. dissect train --hf-model on it: LoRA r 8, alpha 16 on all seven linear layers, 30 steps,
#      --save CKPT (the adapters and their AdamW moments) and --lora-save PEFT_DIR;
#   3. dissect dump --resume CKPT: one forward + backward of the trained adapters on the shard's
#      first micro-batch (logits, loss, adapter gradients);
#   4. compare_hf.py --dump --peft PEFT_DIR: peft.PeftModel.from_pretrained loads PEFT_DIR onto the
#      Hugging Face model, which must reproduce dissect's logits, loss and adapter gradients within
#      the dtype's bound (bf16 on cuda: 2e-2 or twice HF's own bf16 error; fp32 on cpu: 1e-4), and
#      the adapters must move the logits by more than 10 x that bound (so the check can fail).
# Usage: DISSECT=build-gpu/dissect PR_DEVICE=cuda|cpu [PR_ATTN=eager|sdpa] [PR_LR=1e-2] [PYTHON3=python3]
#        [MPIRUN="mpirun ..."] tests/peft_roundtrip.sh
# PR_ATTN is the HF attention implementation of the reference and of its bf16 floor (default sdpa,
# transformers' default: flash-style in bf16, whose error on the q/k adapter gradients is the floor);
# PR_LR the training's peak learning rate.
# Exit status: compare_hf.py's (0 all passed, 1 a comparison failed, 2 a step failed).
set -euo pipefail
: "${DISSECT:?path to the dissect binary}"
cd "$(dirname "$0")/.."
dev=${PR_DEVICE:-cuda}
py=${PYTHON3:-python3}
mpi=${MPIRUN:-mpirun -np 1 -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE}
case $dev in cuda) dtype=bf16 ;; cpu) dtype=fp32 ;; *) echo "peft_roundtrip: PR_DEVICE must be cuda or cpu" >&2; exit 2 ;; esac
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
"$py" examples/compare_hf.py --workdir "$w" --prepare-only > "$w/prepare.log" || { cat "$w/prepare.log"; exit 2; }
lora=(--lora-rank 8 --lora-alpha 16 --lora-targets q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj)
shape=(--hf-model "$w/hf_model" --train-data "$w/tokens.bin" --seq-length 64 --device "$dev" --seed 1234)
# shellcheck disable=SC2086
$mpi "$DISSECT" train "${shape[@]}" "${lora[@]}" --micro-batch 2 --train-iters 30 --lr "${PR_LR:-1e-2}" --warmup-iters 3 \
  --eval-interval 0 --sample-tokens 0 --log-interval 10 --save "$w/lora.h5" --lora-save "$w/peft" || exit 2
# shellcheck disable=SC2086
$mpi "$DISSECT" dump "${shape[@]}" "${lora[@]}" --micro-batch 2 --zero-stage 0 --resume "$w/lora.h5" \
  --out "$w/dump.h5" || exit 2
ls -l "$w/peft"
"$py" examples/compare_hf.py --workdir "$w" --dump "$w/dump.h5" --dtype "$dtype" --attn "${PR_ATTN:-sdpa}" --peft "$w/peft"
