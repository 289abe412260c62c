#!/usr/bin/env bash
# Bad input gives one clear error naming the file/key/rank and a non-zero exit from every rank:
# no hang (60 s limit), no crash (nor sanitizer report), the message printed once.
set -uo pipefail
: "${DISSECT:?path to the dissect binary}" "${SRCDIR:=.}" "${PYTHON3:=/usr/bin/python3}"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$PYTHON3" "$SRCDIR/tests/make_synthetic.py" "$tmp/ids.txt" --vocab 64 --tokens 4000
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/ids.txt" "$tmp/good.bin" --vocab-size 64 >/dev/null
passed=0 failed=0

# expect NAME NP EXPECTED-SUBSTRING -- dissect args...
expect() {
  local name=$1 np=$2 want=$3; shift 4
  local out rc
  out=$(timeout 60 mpirun -np "$np" "$DISSECT" "$@" 2>&1); rc=$?
  judge "$name" "$want" "$rc" "$out"
}
# judge NAME EXPECTED-SUBSTRING EXIT OUTPUT: one error line holding the substring, a non-zero exit, no crash
judge() {
  local name=$1 want=$2 rc=$3 out=$4
  local n_err; n_err=$(grep -c "dissect: error" <<<"$out")
  # (a sanitizer build's report is a crash too, not the expected error)
  if [[ $rc -ne 0 && $rc -ne 124 && $out == *"$want"* && $n_err -eq 1 && $out != *"core dumped"* && $out != *"Segmentation"* &&
        $out != *"runtime error:"* && $out != *"Sanitizer"* ]]; then
    echo "ok   $name: exit $rc: $(grep "dissect: error" <<<"$out")"; passed=$((passed+1))
  else
    echo "FAIL $name: exit $rc, $n_err error lines, wanted '$want' in:"; sed 's/^/     /' <<<"$out"; failed=$((failed+1))
  fi
}
base=(train --model tiny --train-data "$tmp/good.bin" --seq-length 16 --train-iters 2 --micro-batch 2
      --eval-interval 0 --sample-tokens 0)

echo '{"seq_length": 16,, }' > "$tmp/malformed.json"
expect "malformed config" 2 "malformed.json" -- train --config "$tmp/malformed.json"
echo '{"model": {"preset": "tiny", "hiden_size": 32}}' > "$tmp/unknown.json"
expect "unknown nested key" 2 "model.hiden_size" -- train --config "$tmp/unknown.json"
echo '{"seq_lenght": 16}' > "$tmp/unknown_top.json"
expect "unknown top-level key" 2 "seq_lenght" -- train --config "$tmp/unknown_top.json"
echo '{"seq_length": "long"}' > "$tmp/type.json"
expect "wrong type" 2 "seq_length" -- train --config "$tmp/type.json"
expect "missing config file" 2 "$tmp/nope.json" -- train --config "$tmp/nope.json"
expect "unknown flag" 2 "--bogus" -- "${base[@]}" --bogus 1
expect "missing shard" 2 "$tmp/missing.bin" -- "${base[@]}" --train-data "$tmp/missing.bin"
head -c 100 "$tmp/good.bin" > "$tmp/truncated.bin"
expect "truncated shard" 2 "truncated.bin" -- "${base[@]}" --train-data "$tmp/truncated.bin"
{ printf 'NOTTOKEN'; tail -c +9 "$tmp/good.bin"; } > "$tmp/magic.bin"
expect "wrong magic" 2 "magic" -- "${base[@]}" --train-data "$tmp/magic.bin"
echo "5 6 100 7" > "$tmp/big.txt"
"$PYTHON3" "$SRCDIR/examples/make_shards.py" "$tmp/big.txt" "$tmp/big.bin" --vocab-size 128 >/dev/null
expect "token id >= vocab" 2 "is 100, not < vocab_size 64" -- "${base[@]}" --train-data "$tmp/big.bin"
expect "world size does not divide the batch" 3 "train_batch_size" -- "${base[@]}" --global-batch 8
expect "unwritable trace path" 2 "$tmp/no/such/dir/run.h5" -- "${base[@]}" --trace "$tmp/no/such/dir/run.h5"
expect "unknown ZeRO stage" 2 "zero_optimization.stage" -- "${base[@]}" --zero-stage 4
expect "grid does not divide the world" 3 "tensor_model_parallel_size' (2) x 'pipeline_model_parallel_size' (1) = 2 does not divide the world size 3" -- "${base[@]}" --tp 2
expect "TP does not divide the heads" 3 "tensor_model_parallel_size' = 3: must divide model.num_attention_heads (4)" -- "${base[@]}" --tp 3
expect "more stages than layers" 4 "pipeline_model_parallel_size' = 4: more stages than model.num_hidden_layers (2)" -- "${base[@]}" --pp 4
expect "ZeRO-3 with a pipeline" 2 "zero_optimization.stage' = 3 with pipeline_model_parallel_size = 2" -- "${base[@]}" --pp 2 --zero-stage 3
expect "sequence parallel tokens not divisible" 2 "key 'sequence_parallel'" -- "${base[@]}" --tp 2 --micro-batch 1 --seq-length 15 --sequence-parallel
echo '{"model": {"preset": "tiny", "num_attention_heads": 5}}' > "$tmp/heads.json"
expect "heads do not divide hidden size" 1 "num_attention_heads" -- train --config "$tmp/heads.json" --train-data "$tmp/good.bin"
# outputs that are inputs, a missing value, no data, divergence: the error comes before anything
# is written, and the files already there keep their bytes
# kept NAME FILE SHA256: FILE still has the bytes it had
kept() {
  if [[ $(sha256sum < "$2") == "$3" ]]; then echo "ok   $1: $2 unchanged"; passed=$((passed+1))
  else echo "FAIL $1: $2 changed"; failed=$((failed+1)); fi
}
cp "$tmp/good.bin" "$tmp/data.bin"; sum_data=$(sha256sum < "$tmp/data.bin")
expect "trace path is the training data" 2 "key 'trace.path': '$tmp/data.bin' is also key 'data.train'" -- \
  "${base[@]}" --train-data "$tmp/data.bin" --trace "$tmp/data.bin"
kept "trace path is the training data" "$tmp/data.bin" "$sum_data"
expect "save path is the training data" 2 "key 'save': '$tmp/data.bin' is also key 'data.train'" -- \
  "${base[@]}" --train-data "$tmp/data.bin" --save "$tmp/data.bin"
kept "save path is the training data" "$tmp/data.bin" "$sum_data"
echo '{"model": {"preset": "tiny"}, "seq_length": 16}' > "$tmp/self.json"; sum_cfg=$(sha256sum < "$tmp/self.json")
expect "trace path is the config file" 2 "is also the config file" -- train --config "$tmp/self.json" \
  --train-data "$tmp/good.bin" --train-iters 2 --micro-batch 2 --eval-interval 0 --sample-tokens 0 --trace "$tmp/self.json"
kept "trace path is the config file" "$tmp/self.json" "$sum_cfg"
expect "trace path is the save path" 2 "key 'trace.path': '$tmp/out.h5' is also key 'save'" -- \
  "${base[@]}" --trace "$tmp/out.h5" --save "$tmp/./out.h5"
timeout 60 mpirun -np 2 "$DISSECT" "${base[@]}" --trace "$tmp/old.h5" --save "$tmp/ck.h5" > /dev/null 2>&1 ||
  { echo "FAIL a good run for the next checks"; failed=$((failed+1)); }
sum_trace=$(sha256sum < "$tmp/old.h5"); sum_ck=$(sha256sum < "$tmp/ck.h5")
expect "trace path is the resumed checkpoint" 2 "is also key 'resume'" -- "${base[@]}" --train-iters 3 \
  --resume "$tmp/ck.h5" --trace "$tmp/ck.h5"
kept "trace path is the resumed checkpoint" "$tmp/ck.h5" "$sum_ck"
expect "no training data" 2 "key 'data.train': no training data" -- "${base[@]}" --train-data "" --trace "$tmp/old.h5"
kept "no training data" "$tmp/old.h5" "$sum_trace"
expect "flag without its value" 2 "flag '--trace' needs a value, got the flag '--eval-on-start'" -- \
  "${base[@]}" --trace --eval-on-start
expect "save directory missing" 2 "key 'save': directory '$tmp/no/such' of" -- "${base[@]}" --save "$tmp/no/such/ck.h5"
expect "unknown command" 1 "unknown command 'trian'" -- trian
# divergence (learning rate 1e10, no clipping): loss NaN at step 2, exit 1, no checkpoint written
# over the resumed one (save = resume is allowed: the new file replaces it by rename)
expect "loss not finite" 2 "not finite (training diverged" -- "${base[@]}" --train-iters 4 \
  --resume "$tmp/ck.h5" --save "$tmp/ck.h5" --lr 1e10 --clip-grad 0
kept "loss not finite" "$tmp/ck.h5" "$sum_ck"
# a checkpoint that only rank 1 cannot open (it runs in another directory): rank 1 reports it
mkdir -p "$tmp/other"; cp "$tmp/ck.h5" "$tmp/rel.h5"
out=$(timeout 60 mpirun -np 1 -wdir "$tmp" "$DISSECT" "${base[@]}" --train-iters 3 --resume rel.h5 : \
  -np 1 -wdir "$tmp/other" "$DISSECT" "${base[@]}" --train-iters 3 --resume rel.h5 2>&1); rc=$?
judge "checkpoint unreadable on rank 1 only" "rank 1: checkpoint 'rel.h5': cannot open" "$rc" "$out"
# a save directory that rank 1 cannot reach (it runs in another directory): an error naming
# rank 1 before step 1 (save), or at the first periodic save (save_dir, which rank 0 creates),
# not a hang in the collective file create
mkdir -p "$tmp/sub"
out=$(timeout 60 mpirun -np 1 -wdir "$tmp" "$DISSECT" "${base[@]}" --zero-stage 3 --save sub/ck.h5 : \
  -np 1 -wdir "$tmp/other" "$DISSECT" "${base[@]}" --zero-stage 3 --save sub/ck.h5 2>&1); rc=$?
judge "save directory missing on rank 1 only" "rank 1: key 'save': directory 'sub' of 'sub/ck.h5' does not exist" "$rc" "$out"
out=$(timeout 60 mpirun -np 1 -wdir "$tmp" "$DISSECT" "${base[@]}" --zero-stage 3 --save-dir sd --save-interval 1 : \
  -np 1 -wdir "$tmp/other" "$DISSECT" "${base[@]}" --zero-stage 3 --save-dir sd --save-interval 1 2>&1); rc=$?
judge "save_dir unreachable from rank 1" "rank 1: checkpoint 'sd/iter_0000001.h5': cannot write to directory 'sd'" "$rc" "$out"
echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
