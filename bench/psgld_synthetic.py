#!/usr/bin/env python3
"""PSGLD on the PSGLD paper's synthetic Poisson-NMF (Fig. 2 set-up).

I = J in {256, 512, 1024}, K = 32, B = I / 32, T = 10,000 samples, cyclic parts. For each
size and thread count: the median of --repeats runs of T iterations of the C sampler (no
thinning or tracing inside the timed region), seconds per 1,000 samples, entries x K per
second (the gradient work), the final log-likelihood, and a breakdown of where one
iteration's time goes, measured single-threaded: the Langevin noise (Philox + Box-Muller
for every entry of W and H) and the likelihood gradient of one part.

Prints a JSON document, then a table.
"""
import argparse
import json
import os
import statistics
import time

import numpy as np

import pymf
from pymf import _rng
from pymf.nmf import _blocks, _sgld, _tweedie


def time_run(data, V_shape, K, W0, Ht0, step, iterations, threads):
    chain = _sgld.LangevinChain(data, "psgld", K, 1.0, 1.0, "exponential", 1.0, 1.0, 12345, 678,
                                n_threads=threads)
    chain.set_state(W0, Ht0, 0)
    steps = step(np.arange(1, iterations + 1))
    started = time.perf_counter()
    chain.run(steps)
    return time.perf_counter() - started, chain.loglik()


def breakdown(data, K, W0, Ht0, n_rows, n_cols, B):
    """Single-thread seconds per iteration: noise of all of W and H, and one part's gradient."""
    reps = 20
    started = time.perf_counter()
    for t in range(reps):
        _rng.noise(1, _rng.STREAM_W, t + 1, 0, n_rows, K)
        _rng.noise(1, _rng.STREAM_H, t + 1, 0, n_cols, K)
    noise = (time.perf_counter() - started) / reps
    started = time.perf_counter()
    for _ in range(3):
        _tweedie.gradient(data, W0, Ht0, 1.0, 1.0, n_threads=1)  # all B parts
    gradient = (time.perf_counter() - started) / 3 / B
    return noise, gradient


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, nargs="+", default=sorted({1, os.cpu_count() or 1}))
    parser.add_argument("--json", default=None, help="also write the JSON here")
    args = parser.parse_args()

    rows = []
    for size in args.sizes:
        B = max(1, size // 32)
        V, _, _ = pymf.datasets.make_tweedie_nmf(size, size, args.rank, beta=1.0, seed=0)
        data = _blocks.BlockedData.from_dense(V, B)
        rng = np.random.default_rng(1)
        scale = np.sqrt(V.mean() / args.rank)
        W0 = rng.uniform(0.5, 1.5, (size, args.rank)) * scale
        Ht0 = rng.uniform(0.5, 1.5, (size, args.rank)) * scale
        # stable for this data scale: the curvature grows with I, so a shrinks with it
        step = pymf.PolynomialDecay(1e-4 * (256 / size) ** 2, 0.51)
        noise_s, gradient_s = breakdown(data, args.rank, W0, Ht0, size, size, B)
        for threads in args.threads:
            runs = [time_run(data, V.shape, args.rank, W0, Ht0, step, args.samples, threads)
                    for _ in range(args.repeats)]
            seconds = statistics.median(r[0] for r in runs)
            entries = size * size / B  # one part
            rows.append({
                "I": size, "J": size, "K": args.rank, "B": B, "T": args.samples,
                "threads": threads, "repeats": args.repeats,
                "seconds_median": round(seconds, 4),
                "seconds_all": [round(r[0], 4) for r in runs],
                "seconds_per_1000_samples": round(seconds / args.samples * 1000, 4),
                "entries_K_per_second": round(entries * args.rank * args.samples / seconds, 1),
                "final_loglik": runs[0][1],
                "one_thread_noise_s_per_iter": round(noise_s, 7),
                "one_thread_gradient_s_per_iter": round(gradient_s, 7),
            })
    document = {"benchmark": "psgld_synthetic", "cpu_count": os.cpu_count(),
                "pymf": pymf.__version__, "results": rows}
    text = json.dumps(document, indent=2)
    print(text)
    if args.json:
        with open(args.json, "w") as fh:
            fh.write(text)
    print()
    header = f"{'I=J':>5} {'B':>3} {'thr':>3} {'s/10K':>8} {'s/1K':>7} {'entries*K/s':>12} " \
             f"{'noise ms/it':>11} {'grad ms/it':>10} {'loglik':>12}"
    print(header)
    print("-" * len(header))
    for r in rows:
        print(f"{r['I']:>5} {r['B']:>3} {r['threads']:>3} {r['seconds_median'] * 10000 / r['T']:>8.2f} "
              f"{r['seconds_per_1000_samples']:>7.3f} {r['entries_K_per_second']:>12.3e} "
              f"{r['one_thread_noise_s_per_iter'] * 1e3:>11.3f} "
              f"{r['one_thread_gradient_s_per_iter'] * 1e3:>10.3f} {r['final_loglik']:>12.5g}")


if __name__ == "__main__":
    main()
