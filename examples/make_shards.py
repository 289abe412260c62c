#!/usr/bin/env python3
"""Write a dissect token shard (see src/worker/data.h) from lines of space-separated token ids.

Input: one sequence per line, ids separated by whitespace (the output of
`spm_encode --output_format=id`). Blank lines are skipped. Each remaining line becomes
[bos] + ids (unless --bos-id -1), and all lines are concatenated into one shard:

    offset 0   char[8]  magic "DXTOKENS"
    offset 8   uint32   version (1)
    offset 12  uint32   dtype: 2 = uint16 ids, 4 = uint32 ids (bytes per id)
    offset 16  uint64   count: number of token ids
    offset 24  uint64   reserved (0)
    offset 32  ids[count]            (all little-endian)

dtype is 2 when vocab_size <= 65536, else 4 (override with --dtype).

With --stats PATH the script creates or updates a JSON file of corpus statistics. All token
statistics count every id written to the shard, bos included (the ids a model is trained on):
  --split train: vocab_size, train_tokens, train_lines, unigram_entropy_nats (entropy of the
                 train id distribution), train_shard (relative to the stats file).
  --split valid: valid_tokens, valid_lines and, given the train shard (--train-shard, or the
                 train_shard recorded in the stats file), valid_unigram_xent_nats: the
                 cross-entropy of the valid ids under the add-one-smoothed train unigram
                 distribution p(i) = (c(i) + 1) / (N + V).

Standard library only. Exit status 1 with a message naming the file (and line) on bad input.
"""

import argparse
import array
import json
import math
import os
import struct
import sys

MAGIC = b"DXTOKENS"
VERSION = 1
HEADER = struct.Struct("<8sIIQQ")  # 32 bytes


class InputError(Exception):
    pass


def read_ids(path, vocab_size, bos_id):
    """Returns (ids as a list of ints, number of non-blank lines)."""
    ids = []
    lines = 0
    try:
        f = open(path, "r", encoding="ascii", errors="strict")
    except OSError as e:
        raise InputError(f"{path}: cannot open: {e.strerror}")
    with f:
        lineno = 0
        try:
            for lineno, line in enumerate(f, 1):
                fields = line.split()
                if not fields:
                    continue
                lines += 1
                if bos_id >= 0:
                    ids.append(bos_id)
                for field in fields:
                    if not field.isdigit():
                        raise InputError(
                            f"{path}: line {lineno}: malformed id {field!r} "
                            "(expected a non-negative decimal integer)")
                    v = int(field)
                    if v >= vocab_size:
                        raise InputError(
                            f"{path}: line {lineno}: id {v} >= vocab_size {vocab_size}")
                    ids.append(v)
        except UnicodeDecodeError as e:
            raise InputError(f"{path}: line {lineno + 1}: non-ASCII byte ({e.reason})")
    return ids, lines


def write_shard(path, ids, dtype):
    arr = array.array("H" if dtype == 2 else "I")
    if arr.itemsize != dtype:  # 'I' is 4 bytes on every platform CPython supports, but check
        arr = array.array("L")
        if arr.itemsize != dtype:
            raise InputError(f"{path}: no {dtype}-byte array type on this platform")
    arr.extend(ids)
    if sys.byteorder != "little":
        arr.byteswap()
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(HEADER.pack(MAGIC, VERSION, dtype, len(ids), 0))
            arr.tofile(f)
        os.replace(tmp, path)
    except OSError as e:
        raise InputError(f"{path}: cannot write: {e.strerror}")


def read_shard_counts(path, vocab_size):
    """Unigram counts of an existing shard (used for the valid cross-entropy)."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise InputError(f"{path}: cannot open: {e.strerror}")
    if len(data) < HEADER.size:
        raise InputError(f"{path}: truncated: {len(data)} bytes, header needs {HEADER.size}")
    magic, version, dtype, count, _ = HEADER.unpack_from(data)
    if magic != MAGIC:
        raise InputError(f"{path}: bad magic {magic!r} (expected {MAGIC!r})")
    if version != VERSION:
        raise InputError(f"{path}: unsupported version {version} (expected {VERSION})")
    if dtype not in (2, 4):
        raise InputError(f"{path}: bad dtype {dtype} (expected 2 or 4)")
    expected = HEADER.size + count * dtype
    if len(data) != expected:
        raise InputError(f"{path}: size mismatch: expected {expected} bytes, got {len(data)}")
    arr = array.array("H" if dtype == 2 else "I")
    arr.frombytes(data[HEADER.size:])
    if sys.byteorder != "little":
        arr.byteswap()
    return counts_of(arr, vocab_size, path), count


def counts_of(ids, vocab_size, path):
    counts = [0] * vocab_size
    try:
        for v in ids:
            counts[v] += 1
    except IndexError:
        raise InputError(f"{path}: id >= vocab_size {vocab_size}")
    return counts


def entropy_nats(counts):
    n = sum(counts)
    if n == 0:
        return float("nan")
    h = 0.0
    for c in counts:
        if c:
            p = c / n
            h -= p * math.log(p)
    return h


def xent_nats(counts, ref_counts):
    """Cross-entropy of `counts` under the add-one-smoothed distribution of `ref_counts`."""
    n = sum(counts)
    if n == 0:
        return float("nan")
    denom = sum(ref_counts) + len(ref_counts)
    total = 0.0
    for c, r in zip(counts, ref_counts):
        if c:
            total -= c * math.log((r + 1) / denom)
    return total / n


def rel_to(path, stats_path):
    """path relative to the stats file's directory (how shards are recorded in stats)."""
    return os.path.relpath(os.path.abspath(path), os.path.dirname(os.path.abspath(stats_path)))


def load_stats(path):
    if not os.path.exists(path):
        return {}
    try:
        with open(path, "r", encoding="utf-8") as f:
            stats = json.load(f)
    except (OSError, ValueError) as e:
        raise InputError(f"{path}: cannot read stats: {e}")
    if not isinstance(stats, dict):
        raise InputError(f"{path}: stats file is not a JSON object")
    return stats


def save_stats(path, stats):
    tmp = path + ".tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(stats, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except OSError as e:
        raise InputError(f"{path}: cannot write: {e.strerror}")


def main(argv=None):
    ap = argparse.ArgumentParser(
        description="Write a dissect token shard (data.h format) from lines of token ids.")
    ap.add_argument("input", help="text file: one sequence of space-separated ids per line")
    ap.add_argument("output", help="shard to write (.bin)")
    ap.add_argument("--vocab-size", type=int, required=True,
                    help="every id must be < this; picks uint16 (<= 65536) or uint32 ids")
    ap.add_argument("--bos-id", type=int, default=1,
                    help="id inserted before each line's ids (default 1; -1: none)")
    ap.add_argument("--dtype", type=int, choices=(2, 4), default=None,
                    help="bytes per id (default: 2 if vocab_size <= 65536 else 4)")
    ap.add_argument("--stats", metavar="JSON", help="create or update this stats file")
    ap.add_argument("--split", choices=("train", "valid"), default="train",
                    help="which split the shard is, for --stats (default train)")
    ap.add_argument("--train-shard", metavar="BIN",
                    help="train shard for valid_unigram_xent_nats (--split valid; default: "
                         "train_shard from the stats file)")
    args = ap.parse_args(argv)

    try:
        if args.vocab_size < 1:
            raise InputError(f"--vocab-size must be >= 1 (got {args.vocab_size})")
        if args.vocab_size > 1 << 32:
            raise InputError(f"--vocab-size {args.vocab_size} does not fit uint32 ids")
        if args.bos_id >= args.vocab_size:
            raise InputError(f"--bos-id {args.bos_id} >= vocab_size {args.vocab_size}")
        dtype = args.dtype or (2 if args.vocab_size <= 65536 else 4)
        if dtype == 2 and args.vocab_size > 65536:
            raise InputError(f"--dtype 2 cannot hold vocab_size {args.vocab_size}")

        ids, lines = read_ids(args.input, args.vocab_size, args.bos_id)
        write_shard(args.output, ids, dtype)
        print(f"{args.output}: {len(ids)} ids ({lines} lines, uint{dtype * 8}, "
              f"vocab {args.vocab_size})")

        if args.stats:
            stats = load_stats(args.stats)
            counts = counts_of(ids, args.vocab_size, args.input)
            stats["vocab_size"] = args.vocab_size
            stats["bos_id"] = args.bos_id
            if args.split == "train":
                stats["train_tokens"] = len(ids)
                stats["train_lines"] = lines
                stats["train_shard"] = rel_to(args.output, args.stats)
                stats["unigram_entropy_nats"] = round(entropy_nats(counts), 6)
                stats["train_types_seen"] = sum(1 for c in counts if c)
            else:
                stats["valid_tokens"] = len(ids)
                stats["valid_lines"] = lines
                stats["valid_shard"] = rel_to(args.output, args.stats)
                train = args.train_shard
                if not train and stats.get("train_shard"):
                    train = os.path.join(os.path.dirname(os.path.abspath(args.stats)),
                                         stats["train_shard"])
                if train:
                    ref, _ = read_shard_counts(train, args.vocab_size)
                    stats["valid_unigram_xent_nats"] = round(xent_nats(counts, ref), 6)
                else:
                    print(f"{args.stats}: no train shard known; "
                          "valid_unigram_xent_nats not computed", file=sys.stderr)
            save_stats(args.stats, stats)
    except InputError as e:
        print(f"make_shards.py: error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
