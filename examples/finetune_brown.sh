#!/usr/bin/env bash
# LoRA fine-tuning, end to end on the CPU: the main job's model (brown-small, pretrained on all of
# the Brown corpus by ./examples/train_brown.sh) adapted to Brown's fiction.
#
#   1. the pretrained checkpoint runs/brown-small-final.h5 (examples/configs/brown-small.json's
#      "save"); if missing, the main job runs first (~10 min on 2 cores)
#   2. `dissect export` -> runs/brown-small-hf (a Hugging Face Llama directory, F32)
#   3. the fiction subset of the prepared corpus -> data/brown-fiction/{train,valid}.bin: Brown's
#      six fiction genres (k general fiction, l mystery, m science fiction, n adventure, p romance,
#      r humor: 126 of the 500 documents) with the same document split as data/brown (every 20th
#      document in sorted order is validation: those were never trained on) and the same
#      SentencePiece model
#   4. `mpirun -np $NP dissect train --config examples/configs/brown-fiction-lora.json`: LoRA
#      (r 8, alpha 16, all seven linear layers) on the frozen base, the validation loss on the
#      held-out fiction documents before the first step (--eval-on-start) and every 50 steps; the
#      adapters saved in PEFT's format to runs/brown-fiction-lora/
# Extra arguments go to the fine-tuning's `dissect train`. Run ./examples/train_brown.sh once
# before (it installs the packages and builds); SKIP_APT=1 is passed on if the main job must run.
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
PYTHON="${PYTHON:-$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3 )}"
die() { echo "finetune_brown.sh: error: $*" >&2; exit 1; }
root=(); [ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)

# 1. the pretrained base
if [[ ! -s runs/brown-small-final.h5 ]]; then
    echo "== runs/brown-small-final.h5 missing: running the main job first"
    ./examples/train_brown.sh
fi
[[ -s runs/brown-small-final.h5 ]] || die "the main job wrote no runs/brown-small-final.h5"
[[ -x build/dissect ]] || die "build/dissect missing (run ./examples/train_brown.sh)"

# 2. as a Hugging Face directory
if [[ ! -s runs/brown-small-hf/model.safetensors || runs/brown-small-final.h5 -nt runs/brown-small-hf/model.safetensors ]]; then
    build/dissect export runs/brown-small-final.h5 runs/brown-small-hf
fi

# 3. the fiction documents, split as data/brown
src=data/brown out=data/brown-fiction
[[ -s $src/spm.model && -d $src/raw/package ]] || die "$src not prepared (examples/prepare_brown.sh)"
mkdir -p "$out"
if [[ ! -s $out/train.bin || ! -s $out/valid.bin || $src/spm.model -nt $out/train.bin ]]; then
    echo "== fiction subset of $src -> $out"
    docs=()
    for f in "$src"/raw/package/c[a-r][0-9][0-9]; do [[ -f "$f" ]] && docs+=("${f##*/}"); done
    [[ ${#docs[@]} -eq 500 ]] || die "$src/raw/package: expected 500 Brown documents, found ${#docs[@]}"
    : > "$out/train.txt"; : > "$out/valid.txt"; : > "$out/docs.txt"
    for i in "${!docs[@]}"; do
        d="${docs[$i]}"
        [[ $d == c[klmnpr]* ]] || continue
        if (( i % 20 == 19 )); then dst="$out/valid.txt"; else dst="$out/train.txt"; fi
        echo "$d $(basename "$dst" .txt)" >> "$out/docs.txt"
        awk '{ o = ""; for (i = 1; i <= NF; i++) { t = $i; sub(/\/[^\/]*$/, "", t); if (t != "") o = (o == "" ? t : o " " t) }
               if (o != "") print o }' "$src/raw/package/$d" >> "$dst"
    done
    for split in train valid; do
        spm_encode --model="$src/spm.model" --output_format=id < "$out/$split.txt" > "$out/$split.ids"
    done
    "$PYTHON" examples/make_shards.py "$out/train.ids" "$out/train.bin" --vocab-size 4096 --bos-id 1 \
        --stats "$out/stats.json" --split train
    "$PYTHON" examples/make_shards.py "$out/valid.ids" "$out/valid.bin" --vocab-size 4096 --bos-id 1 \
        --stats "$out/stats.json" --split valid --train-shard "$out/train.bin"
    echo "   $(grep -c ' train$' "$out/docs.txt") train and $(grep -c ' valid$' "$out/docs.txt") validation documents;" \
         "$(wc -w < "$out/train.txt") / $(wc -w < "$out/valid.txt") words"
fi

# 4. LoRA on the frozen base
exec mpirun "${root[@]}" -np "${NP:-2}" build/dissect train --config examples/configs/brown-fiction-lora.json "$@"
