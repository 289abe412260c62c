#!/usr/bin/env bash
# Tests examples/make_shards.py and that its shards load in the C reader.
# Usage: tests/test_make_shards.sh PATH/TO/test_data
# Prints one line per check and ends with "N passed, M failed"; exits non-zero on any failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
test_data="${1:?usage: $0 PATH/TO/test_data}"
[[ -x "$test_data" ]] || { echo "$0: $test_data is not an executable" >&2; exit 2; }
# Debian's interpreter by default: the script must run there, standard library only.
PYTHON="${PYTHON:-$( [[ -x /usr/bin/python3 ]] && echo /usr/bin/python3 || echo python3 )}"
mk=("$PYTHON" "$root/examples/make_shards.py")

tmp="$(mktemp -d "${TMPDIR:-/tmp}/dx_test_make_shards.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

passed=0 failed=0
check() { # check DESCRIPTION COMMAND...
    local what="$1"; shift
    if "$@"; then echo "PASS: $what"; passed=$((passed + 1))
    else echo "FAIL: $what"; failed=$((failed + 1)); fi
}
contains() { grep -qF -- "$2" "$1"; }
py() { "$PYTHON" -c "$@"; }

# --- a good input: 3 lines (one blank, skipped), vocab 10, bos 1 -> 1 5 5 | 1 6 6 | 1 2 ---
printf '5 5\n\n6  6\n2\n' > "$tmp/train.txt"
printf '5\n' > "$tmp/valid.txt"
check "good ids text -> shard (exit 0)" \
    "${mk[@]}" "$tmp/train.txt" "$tmp/train.bin" --vocab-size 10 --stats "$tmp/stats.json" --split train
check "shard is 32 + 8 x 2 bytes" test "$(stat -c %s "$tmp/train.bin")" -eq 48
check "header is DXTOKENS, v1, dtype 2, count 8, reserved 0" py "
import struct, sys
h = open('$tmp/train.bin', 'rb').read()
sys.exit(struct.unpack_from('<8sIIQQ', h) != (b'DXTOKENS', 1, 2, 8, 0)
         or list(struct.unpack_from('<8H', h, 32)) != [1, 5, 5, 1, 6, 6, 1, 2])"
check "valid shard with --train-shard from stats" \
    "${mk[@]}" "$tmp/valid.txt" "$tmp/valid.bin" --vocab-size 10 --stats "$tmp/stats.json" --split valid
# train ids 1 5 5 1 6 6 1 2: H = -(3/8 ln 3/8 + 2 * 2/8 ln 2/8 + 1/8 ln 1/8)
# valid ids 1 5 under add-one train unigram (N=8, V=10): p(1) = 4/18, p(5) = 3/18
check "stats.json: counts, unigram entropy and valid cross-entropy" py "
import json, math, sys
s = json.load(open('$tmp/stats.json'))
h = -(3/8*math.log(3/8) + 2*(2/8)*math.log(2/8) + 1/8*math.log(1/8))
x = -(math.log(4/18) + math.log(3/18)) / 2
ok = (s['vocab_size'] == 10 and s['train_tokens'] == 8 and s['train_lines'] == 3
      and s['valid_tokens'] == 2 and abs(s['unigram_entropy_nats'] - h) < 1e-5
      and abs(s['valid_unigram_xent_nats'] - x) < 1e-5)
print('  stats:', s) if not ok else None
sys.exit(not ok)"

printf '69999 0 65536\n7\n' > "$tmp/big.txt"
check "vocab 70000 -> uint32 shard of 32 + 6 x 4 bytes" bash -c \
    '"$@" >/dev/null && test "$(stat -c %s "'"$tmp"'/big.bin")" -eq 56' _ \
    "${mk[@]}" "$tmp/big.txt" "$tmp/big.bin" --vocab-size 70000
check "--bos-id -1 inserts nothing" bash -c \
    '"$@" >/dev/null && test "$(stat -c %s "'"$tmp"'/nobos.bin")" -eq 42' _ \
    "${mk[@]}" "$tmp/train.txt" "$tmp/nobos.bin" --vocab-size 10 --bos-id -1

# --- bad inputs must exit 1 with a message naming the file and the line ---
expect_fail() { # expect_fail DESCRIPTION INPUT_TEXT VOCAB SUBSTRING...
    local what="$1" text="$2" vocab="$3"; shift 3
    printf '%b' "$text" > "$tmp/bad.txt"
    local rc=0
    "${mk[@]}" "$tmp/bad.txt" "$tmp/bad.bin" --vocab-size "$vocab" > "$tmp/out" 2> "$tmp/err" || rc=$?
    local ok=1
    [[ $rc -eq 1 ]] || ok=0
    contains "$tmp/err" "$tmp/bad.txt" || ok=0
    for sub in "$@"; do contains "$tmp/err" "$sub" || ok=0; done
    [[ ! -e "$tmp/bad.bin" ]] || ok=0
    if [[ $ok -eq 1 ]]; then echo "PASS: $what: exit 1, $(head -c 200 "$tmp/err")"; passed=$((passed + 1))
    else echo "FAIL: $what: exit $rc, stderr: $(cat "$tmp/err")"; failed=$((failed + 1)); fi
    rm -f "$tmp/bad.bin"
}
expect_fail "id >= vocab" '5 5\n6 6\n3 10 4\n' 10 "line 3" "10"
expect_fail "id == 65536 with vocab 65536" '1 2\n65536\n' 65536 "line 2" "65536"
expect_fail "malformed id" '5 5\n6 x6\n' 10 "line 2" "x6"
expect_fail "negative id" '-3\n' 10 "line 1" "-3"
rm -f "$tmp/bad.txt"
rc=0; "${mk[@]}" "$tmp/bad.txt" "$tmp/bad.bin" --vocab-size 10 2> "$tmp/err" >/dev/null || rc=$?
check "missing input file: exit 1 naming it" bash -c "[[ $rc -eq 1 ]] && grep -qF '$tmp/bad.txt' '$tmp/err'"

# --- the C reader loads what the writer wrote, with exact ids ---
run_c() { # run_c DESCRIPTION ARGS...
    local what="$1"; shift
    if "$test_data" "$@" > "$tmp/c.out" 2>&1 && grep -q "^[0-9]* passed, 0 failed$" "$tmp/c.out"; then
        echo "PASS: $what ($(grep external "$tmp/c.out" | tr '\n' ';'))"; passed=$((passed + 1))
    else
        echo "FAIL: $what"; grep -v '^PASS' "$tmp/c.out" | sed 's/^/  /'; failed=$((failed + 1))
    fi
}
run_c "test_data loads the uint16 shard" "$tmp/train.bin" 8 10 1 5 5 1 6 6 1 2
run_c "test_data loads the uint32 shard" "$tmp/big.bin" 6 70000 1 69999 0 65536 1 7

echo "$passed passed, $failed failed"
[[ $failed -eq 0 ]]
