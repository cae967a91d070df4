#!/usr/bin/env python3
"""SIBM on MovieLens-100K binarised (rated = 1), against batch VB and a widely used peer,
implicit's LogisticMatrixFactorization (Johnson 2014), in the same run.

Held out: 10 % of the ones (they become zeros of the training matrix, the usual
implicit-feedback protocol) and as many zeros (pymf.sibm.holdout, seed 0). Reported: test
AUC and test log-likelihood against fitting time (median over --repeats seeds of the final
values), 2 threads unless --threads says otherwise.

The peer is not a dependency of pymf: install it in the benchmark's own place, e.g.
    pip install --no-deps --target /tmp/implicit-site implicit threadpoolctl
    PYTHONPATH=/tmp/implicit-site python bench/sibm_movielens.py
Without it the peer's row says how to install it. Its settings: rank --rank and its own
defaults otherwise (learning rate 1.0, regularisation 0.6, 30 negatives per positive),
trained for 5, 10, 20, 40 and 80 epochs, each timed as its own fit; its probability is
sigmoid(u . v) (its factors carry the biases).

Prints JSON and a table; writes a PNG of AUC and log-likelihood against time.
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
from pymf.sibm.kernel import test_scores  # noqa: E402

DEFAULT_DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                            "data", "ml-100k.data")


def run_pymf(method, train, test, rank, seconds, seed):
    res = pymf.fit(pymf.LogisticMF(rank), train, method, n_updates=10 ** 9, seed=seed, test=test,
                   trace_every=1 if isinstance(method, pymf.BatchVB) else 20,
                   callback=lambda info: info["time"] >= seconds, progress=False)
    return {"time": res.trace["time"].tolist(), "auc": res.trace["test_auc"].tolist(),
            "loglik": res.trace["test_loglik"].tolist()}


def run_peer(train, test, rank, seed, threads):
    try:
        from implicit.cpu.lmf import LogisticMatrixFactorization
    except ImportError as exc:
        return {"error": f"implicit is not importable ({exc}): pip install --no-deps --target "
                         "DIR implicit threadpoolctl, then PYTHONPATH=DIR"}
    from scipy.special import expit
    rows, cols, labels = test
    out = {"time": [], "auc": [], "loglik": []}
    for epochs in (5, 10, 20, 40, 80):
        model = LogisticMatrixFactorization(factors=rank, iterations=epochs, random_state=seed,
                                            num_threads=threads or 0)
        started = time.perf_counter()
        model.fit(train.tocsr().astype(np.float32), show_progress=False)
        spent = time.perf_counter() - started
        logits = np.einsum("ij,ij->i", model.user_factors[rows].astype(np.float64),
                           model.item_factors[cols].astype(np.float64))
        loglik, auc = test_scores(expit(logits), labels)
        out["time"].append(spent)
        out["auc"].append(auc)
        out["loglik"].append(loglik)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=_common.HelpFormatter)
    parser.add_argument("--data", default=DEFAULT_DATA, help="MovieLens-100K u.data")
    parser.add_argument("--rank", type=int, default=10, help="rank of every model")
    parser.add_argument("--seconds", type=float, default=20.0, help="fitting time per pymf run")
    parser.add_argument("--repeats", type=int, default=3, help="seeds per method (medians)")
    parser.add_argument("--threads", type=int, default=None, help="threads (None: all cores)")
    parser.add_argument("--out", default="results/sibm_movielens", help="output prefix")
    args = parser.parse_args(argv)
    if not os.path.exists(args.data):
        sys.exit(f"no MovieLens file at {args.data!r} (--data)")
    X = pymf.sibm.binarize(pymf.datasets.load_movielens(args.data))
    train, test = pymf.sibm.holdout(X, 0.1, seed=0)
    methods = {
        "SIBM biased auto": lambda: pymf.SIBM(n_threads=args.threads),
        "SIBM biased 2500": lambda: pymf.SIBM(batch_size=2500, n_threads=args.threads),
        "batch VB": lambda: pymf.BatchVB(n_threads=args.threads),
    }
    traces = {name: [run_pymf(make(), train, test, args.rank, args.seconds, seed)
                     for seed in range(args.repeats)] for name, make in methods.items()}
    traces["implicit LMF"] = [run_peer(train, test, args.rank, seed, args.threads)
                              for seed in range(args.repeats)]
    rows, document = [], {"data": "MovieLens-100K binarised", "shape": list(train.shape),
                          "train_ones": int(train.nnz), "test": len(test[2]), "rank": args.rank,
                          "threads": args.threads or os.cpu_count(), "methods": {}}
    for name, runs in traces.items():
        if "error" in runs[0]:
            rows.append({"method": name, "note": runs[0]["error"]})
            document["methods"][name] = runs[0]
            continue
        best = "auc"
        row = {"method": name,
               "final_auc": statistics.median(r["auc"][-1] for r in runs),
               "best_auc": statistics.median(max(r[best]) for r in runs),
               "final_loglik": statistics.median(r["loglik"][-1] for r in runs),
               "seconds": statistics.median(r["time"][-1] for r in runs)}
        rows.append(row)
        document["methods"][name] = {**row, "runs": runs}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    _common.emit(document, args.out + ".json")
    _common.table(rows, [("method", "method", "s"), ("final AUC", "final_auc", ".4f"),
                         ("best AUC", "best_auc", ".4f"), ("test loglik", "final_loglik", ".4f"),
                         ("seconds", "seconds", ".1f")])
    panels = [(metric, {n: (runs[0]["time"], runs[0][key]) for n, runs in traces.items()
                        if "error" not in runs[0]})
              for metric, key in (("test AUC", "auc"), ("test log-likelihood", "loglik"))]
    print(_common.plot_traces(panels, args.out + ".png", "MovieLens-100K binarised",
                              ylabel="held-out score"))


if __name__ == "__main__":
    main()
