#!/usr/bin/env python3
"""SIBM against batch VB on a binary matrix drawn from the model (the SIBM poster's
synthetic experiment): test log-likelihood and AUC of held-out ones and as many held-out
zeros against wall time, for S-Uniform, S-Balanced and S-Biased, each with a fixed and with
the automatic minibatch size, and batch VB; optionally implicit's
LogisticMatrixFactorization as a peer (installed only in the benchmark's environment:
pip install implicit).

Target (issue "SIBM"): SIBM-auto (S-Biased) reaches batch VB's final test log-likelihood at
least 10x sooner than batch VB does, on a 10^4 x 10^4 matrix at 1 % density (--size 10000).
Each method runs for --seconds of fitting time (traces are fitting time only: the loop
excludes the ELBO and test evaluation), --repeats seeds; the table reports medians.

Yardstick measured in the same run: numpy's dgemm rate (GFLOP/s, same threads), to which
the entries each method processes per second are compared (one entry's update costs about
4 D flops per stage, 2 D + 1 stages).

Prints JSON and a table; writes a PNG of test log-likelihood and AUC against time.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

import pymf  # noqa: E402


def dgemm_gflops(n=1024, repeats=3):
    a = np.random.default_rng(0).random((n, n))
    best = min(_timed(lambda: a @ a) for _ in range(repeats))
    return 2 * n ** 3 / best / 1e9


def _timed(fn):
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def run(method, X, test, rank, seconds, seed, trace_every, target=None):
    def stop(info):
        reached = target is not None and info.get("test_loglik", -np.inf) >= target
        return info["time"] >= seconds or reached
    res = pymf.fit(pymf.LogisticMF(rank), X, method, n_updates=10 ** 9, seed=seed, test=test,
                   trace_every=trace_every, callback=stop, progress=False)
    return res


def first_time_at(res, level):
    """Fitting time at which the test log-likelihood first reaches `level` (None: never)."""
    hit = np.flatnonzero(res.trace["test_loglik"] >= level)
    return None if len(hit) == 0 else float(res.trace["time"][hit[0]])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=_common.HelpFormatter)
    parser.add_argument("--size", type=int, default=10000, help="rows = columns of the matrix")
    parser.add_argument("--density", type=float, default=0.01, help="expected fraction of ones")
    parser.add_argument("--rank", type=int, default=10, help="rank of the data and the model")
    parser.add_argument("--scale", type=float, default=2.0,
                        help="signal strength: u.v has sd scale^2 in the data")
    parser.add_argument("--data-seed", type=int, default=1,
                        help="seed of the matrix (1: not the seed-0 matrix the defaults of "
                             "pymf.SIBM were chosen on)")
    parser.add_argument("--seconds", type=float, default=60.0,
                        help="fitting time of each method and seed")
    parser.add_argument("--repeats", type=int, default=1, help="seeds per method (medians)")
    parser.add_argument("--fixed-batch", type=int, default=20000,
                        help="the fixed minibatch size compared with 'auto'")
    parser.add_argument("--threads", type=int, default=None, help="OpenMP threads")
    parser.add_argument("--out", default="results/sibm_synthetic", help="output prefix")
    parser.add_argument("--samplings", nargs="+", default=["uniform", "balanced", "biased"],
                        choices=["uniform", "balanced", "biased"],
                        help="SIBM's strategies to run (batch VB always runs: it sets the "
                             "target)")
    parser.add_argument("--theta-delta", type=float, nargs="+", default=None,
                        help="the automatic size's theta_delta values to run (default: "
                             "SIBM's own); a search for its default belongs on a developers' "
                             "matrix (--data-seed 0), not the reported one")
    parser.add_argument("--stop-at-target", action="store_true",
                        help="stop each SIBM run once it reaches batch VB's final test "
                             "log-likelihood (batch VB runs first): a search, not a curve")
    args = parser.parse_args(argv)
    X, _, _, _ = pymf.sibm.make_binary_mf(args.size, args.size, args.rank, density=args.density,
                                          scale=args.scale, seed=args.data_seed)
    train, test = pymf.sibm.holdout(X, 0.1, seed=args.data_seed)
    methods = {"batch VB": lambda: pymf.BatchVB(n_threads=args.threads)}
    for sampling in args.samplings:
        for theta in args.theta_delta or [None]:
            extra = {} if theta is None else {"theta_delta": theta}
            label = f"{sampling} auto" + ("" if theta is None else f" td={theta:g}")
            methods[label] = lambda s=sampling, e=extra: pymf.SIBM(
                sampling=s, batch_size="auto", n_threads=args.threads, **e)
        methods[f"{sampling} {args.fixed_batch}"] = lambda s=sampling: pymf.SIBM(
            sampling=s, batch_size=args.fixed_batch, n_threads=args.threads)
    gflops = dgemm_gflops()
    results = {}
    target = None
    for name, make in methods.items():
        runs = []
        for seed in range(args.repeats):
            trace_every = 1 if name == "batch VB" else 50
            runs.append(run(make(), train, test, args.rank, args.seconds, seed, trace_every,
                            target if args.stop_at_target else None))
        results[name] = runs
        if name == "batch VB":
            target = statistics.median(float(r.trace["test_loglik"][-1]) for r in runs)
    batch_time = statistics.median(first_time_at(r, target) or np.inf for r in results["batch VB"])
    rows, document = [], {"size": args.size, "data_seed": args.data_seed, "ones": int(train.nnz), "rank": args.rank,
                          "threads": args.threads or os.cpu_count(), "seconds": args.seconds,
                          "dgemm_gflops": gflops, "batch_vb_final_test_loglik": target,
                          "methods": {}}
    for name, runs in results.items():
        times = [first_time_at(r, target) for r in runs]
        reach = statistics.median(t if t is not None else np.inf for t in times)
        entries = sum(_entries(r, name, train.shape)
                      for r in runs) / sum(float(r.trace["time"][-1]) for r in runs)
        row = {"method": name, "final_test_loglik": statistics.median(
                   float(r.trace["test_loglik"][-1]) for r in runs),
               "final_auc": statistics.median(float(r.trace["test_auc"][-1]) for r in runs),
               "time_to_batch_level": None if not np.isfinite(reach) else reach,
               "speedup_vs_batch": None if not np.isfinite(reach) else batch_time / reach,
               "entries_per_s": entries,
               "flop_fraction_of_dgemm": entries * 4 * args.rank * (2 * args.rank + 1) /
               (gflops * 1e9),
               "final_batch_size": float(runs[0].trace["batch_size"][-1])}
        rows.append(row)
        document["methods"][name] = {**row, "trace_time": runs[0].trace["time"].tolist(),
                                     "trace_test_loglik": runs[0].trace["test_loglik"].tolist(),
                                     "trace_test_auc": runs[0].trace["test_auc"].tolist(),
                                     "trace_batch_size": runs[0].trace["batch_size"].tolist()}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    _common.emit(document, args.out + ".json")
    _common.table(rows, [("method", "method", "s"), ("test loglik", "final_test_loglik", ".4f"),
                         ("AUC", "final_auc", ".4f"), ("t to batch", "time_to_batch_level", ".2f"),
                         ("speedup", "speedup_vs_batch", ".1f"),
                         ("entries/s", "entries_per_s", ".3g"),
                         ("of dgemm", "flop_fraction_of_dgemm", ".3f"),
                         ("S (last)", "final_batch_size", ".0f")])
    panels = [("test log-likelihood", {n: (m["trace_time"], m["trace_test_loglik"])
                                       for n, m in document["methods"].items()}),
              ("test AUC", {n: (m["trace_time"], m["trace_test_auc"])
                            for n, m in document["methods"].items()})]
    print(_common.plot_traces(panels, args.out + ".png",
                              f"SIBM vs batch VB, {args.size}^2, {train.nnz} ones, D={args.rank}",
                              ylabel="held-out score"))


def _entries(res, name, shape):
    """Entries processed: every entry per sweep for batch VB; the minibatches' for SIBM
    (the sum of S over updates, from the traced sizes times the updates between traces)."""
    units = np.diff(np.concatenate([[0], res.trace["iteration"]]))
    if name == "batch VB":
        return float(shape[0] * shape[1] * res.iterations)
    return float(np.sum(units * res.trace["batch_size"]))


if __name__ == "__main__":
    main()
