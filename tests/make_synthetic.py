#!/usr/bin/env python3
"""Writes a learnable synthetic token stream (one line of ids per 'sentence') for tests.

Tokens follow a fixed random first-order Markov chain over ids 3..vocab-1 with a few likely
successors per token, so a model can learn it quickly. Deterministic for a given seed.
Usage: make_synthetic.py OUT.txt --vocab 64 --tokens 20000 --seed 1
"""
import argparse
import random

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--vocab", type=int, default=64)
ap.add_argument("--tokens", type=int, default=20000)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
rng = random.Random(a.seed)
ids = list(range(3, a.vocab))
succ = {t: rng.sample(ids, 3) for t in ids}
n, t = 0, rng.choice(ids)
with open(a.out, "w") as f:
    while n < a.tokens:
        line = []
        for _ in range(rng.randint(5, 30)):
            line.append(t)
            t = rng.choice(succ[t]) if rng.random() < 0.9 else rng.choice(ids)
        f.write(" ".join(map(str, line)) + "\n")
        n += len(line) + 1
