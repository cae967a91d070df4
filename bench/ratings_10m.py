#!/usr/bin/env python3
"""A synthetic ratings matrix of MovieLens-10M's shape, drawn from a documented low-rank model
(nothing is downloaded): 71,567 users x 10,681 items, 10,000,000 distinct (user, item) pairs.

Model (seed --seed, default 0):
  * who rates what: users' activity and items' popularity are skewed as in MovieLens:
    user weights ~ LogNormal(0, 1), item weights ~ (rank)^-0.8 (a Zipf-like popularity);
    pairs are drawn with probability proportional to the product, duplicates dropped,
    until --ratings distinct pairs (in random order);
  * the value: 3.5 + a_i + b_j + u_i . v_j + N(0, 0.8^2), rounded to the nearest of 1..5,
    with a_i ~ N(0, 0.4^2), b_j ~ N(0, 0.4^2), u_i, v_j ~ N(0, (0.9/sqrt(rank))^2 I),
    rank --rank (default 10): u_i . v_j has sd about 0.8.
  * a held-out 10 % (Ratings.split(0.1, seed)).

    python bench/ratings_10m.py --out results/ratings_10m.npz     # writes the cache

Other benchmarks import load(path) and get the same matrix from the cache (or generate it).
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, emit  # noqa: E402

import pymf  # noqa: E402

SHAPE = (71_567, 10_681)
N_RATINGS = 10_000_000


def generate(n_ratings=N_RATINGS, shape=SHAPE, rank=10, seed=0):
    """(rows, cols, values, shape): int64, int64 and float64 arrays and the matrix's shape."""
    rng = np.random.default_rng(seed)
    L, M = shape
    user_w = rng.lognormal(0.0, 1.0, L)
    item_w = np.arange(1, M + 1, dtype=np.float64) ** -0.8
    item_w = item_w[rng.permutation(M)]
    user_p, item_p = user_w / user_w.sum(), item_w / item_w.sum()
    keys = np.empty(0, dtype=np.int64)
    while len(keys) < n_ratings:
        extra = int((n_ratings - len(keys)) * 1.3) + 1000
        r = rng.choice(L, extra, p=user_p)
        c = rng.choice(M, extra, p=item_p)
        keys = np.concatenate([keys, r.astype(np.int64) * M + c])
        _, first = np.unique(keys, return_index=True)
        keys = keys[np.sort(first)]  # distinct pairs, in the order drawn
    keys = keys[:n_ratings]
    rows, cols = keys // M, keys % M
    del keys
    a, b = rng.normal(0, 0.4, L), rng.normal(0, 0.4, M)
    U = rng.normal(0, 0.9 / np.sqrt(rank), (L, rank))
    V = rng.normal(0, 0.9 / np.sqrt(rank), (M, rank))
    mean = 3.5 + a[rows] + b[cols]
    for start in range(0, len(rows), 1_000_000):  # u.v in chunks: bounded memory
        stop = start + 1_000_000
        mean[start:stop] += np.einsum("nk,nk->n", U[rows[start:stop]], V[cols[start:stop]])
    values = np.clip(np.rint(mean + rng.normal(0, 0.8, len(rows))), 1, 5)
    return rows, cols, values, (L, M)


def load(path, n_ratings=N_RATINGS, seed=0):
    """pymf.Ratings of the synthetic matrix, from the cache at path (written if absent)."""
    if not os.path.exists(path):
        rows, cols, values, shape = generate(n_ratings, seed=seed)
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
        np.savez(path, rows=rows, cols=cols, values=values, shape=np.asarray(shape), seed=seed)
    with np.load(path) as f:
        if int(f["seed"]) != seed or len(f["rows"]) != n_ratings:
            # a valid cache of another size or seed: say how to use it, or where to put this one
            raise ValueError(f"{path} holds {len(f['rows'])} ratings drawn with seed "
                             f"{int(f['seed'])}, not {n_ratings} with seed {seed}: to use it, "
                             f"pass --ratings {len(f['rows'])}; for this matrix, give another "
                             "path (--matrix, or ratings_10m.py's --out)")
        return pymf.Ratings(f["rows"], f["cols"], f["values"], tuple(int(s) for s in f["shape"]))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--ratings", type=int, default=N_RATINGS,
                   help="distinct (user, item) pairs to draw")
    p.add_argument("--seed", type=int, default=0, help="seed of the generator")
    p.add_argument("--out", default="results/ratings_10m.npz",
                   help="the cache (.npz): written if absent, else read and checked")
    args = p.parse_args()
    started = time.perf_counter()
    ratings = load(args.out, args.ratings, args.seed)
    values = ratings.values
    emit({"shape": list(ratings.shape), "ratings": len(values), "mean": float(values.mean()),
          "histogram_1_to_5": np.bincount(values.astype(int), minlength=6)[1:].tolist(),
          "seconds": time.perf_counter() - started}, indent=None)


if __name__ == "__main__":
    main()
