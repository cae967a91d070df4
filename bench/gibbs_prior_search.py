#!/usr/bin/env python3
"""BPMF Gibbs's Normal-Wishart scale W0 = w0 I, chosen on the developers' own split of
MovieLens-100K (the default of pymf.BPMFGibbs; bench/defaults.py measures it on the test
split).

Why a search: Salakhutdinov & Mnih's hyperprior has nu0 = D (the least informative proper
Wishart) and W0 = I. The identity is a scale, not a neutral choice: the prior mean of the
factors' precision is nu0 W0 = D I, and with pymf.BPMF's sampled noise precision the chains
fit MovieLens-100K's training ratings with factors that shrink too little (test RMSE 0.8973
at D = 10, bench/defaults.py; tau's own prior moved it by at most 0.0009, docs/tuning.md).

Data: ../shared/data/ml-100k.data, split as bench/defaults.py splits it (80/20, seed
--split-seed 0); the 20 % test part is NEVER read here. The 80 % training part is split
again (90/10, seed --dev-seed 1, as bench/coverage_search.py) into a development training
set and a validation set. Every setting runs BPMFGibbs(nw_w0=w0, nw_nu0=f D) on pymf.BPMF(10)
(tau sampled) for --sweeps sweeps, the first --burnin discarded, once per seed (--seeds),
--threads threads.

Grid: w0 in --w0 (0.3 1 3 10) for nu0 = D, the selection's candidates; and the same w0 for
nu0 = 3 D (--nu0-factors 1 3), to show that a more concentrated prior is not what helps.
Rule, fixed before the run: the candidate (nu0 = D) with the lowest mean validation RMSE
whose mean 90 % coverage lies in 0.88-0.92.

Output: JSON (stdout and OUT/gibbs_prior_search.json), a table, and
OUT/gibbs_prior_search.png (validation RMSE against w0, one line per nu0).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (HelpFormatter, add_movielens_options, emit, movielens_split,  # noqa: E402
                     table)

import pymf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RANK = 10
COVERAGE_BAND = (0.88, 0.92)


def measure(w0, nu0_factor, seeds, sweeps, burnin, threads, train, val):
    rmses, coverages, taus = [], [], []
    started = time.perf_counter()
    for seed in seeds:
        sampler = pymf.BPMFGibbs(nw_w0=w0, nw_nu0=nu0_factor * RANK, n_threads=threads)
        res = pymf.sample(pymf.BPMF(RANK), train, sampler, n_samples=sweeps - burnin,
                          burnin=burnin, seed=seed, test=val, progress=False)
        rmses.append(float(res.trace["test_rmse"][-1]))
        coverages.append(res.coverage(val, levels=(0.9,))[0.9])
        taus.append(float(res.sample_stats["tau"].mean()))
    row = {"w0": w0, "nu0": f"{nu0_factor} D" if nu0_factor != 1 else "D",
           "nu0_factor": nu0_factor, "rmse": statistics.mean(rmses), "rmse_runs": rmses,
           "coverage_90": statistics.mean(coverages), "coverage_runs": coverages,
           "tau": statistics.mean(taus), "seconds": time.perf_counter() - started}
    print(f"w0 {w0}, nu0 {row['nu0']}: {row}", file=sys.stderr, flush=True)
    return row


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, ax = plt.subplots(figsize=(6, 4))
    for factor in sorted({r["nu0_factor"] for r in rows}):
        mine = sorted((r for r in rows if r["nu0_factor"] == factor), key=lambda r: r["w0"])
        ax.plot([r["w0"] for r in mine], [r["rmse"] for r in mine], marker="o",
                label=f"nu0 = {mine[0]['nu0']}")
    ax.set_xscale("log")
    ax.set_xlabel("w0 (W0 = w0 I)")
    ax.set_ylabel("validation RMSE (mean over seeds)")
    ax.set_title(f"BPMF Gibbs, rank {RANK}, MovieLens-100K development split")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    add_movielens_options(p, dev=True)
    p.add_argument("--w0", type=float, nargs="+", default=[0.3, 1.0, 3.0, 10.0],
                   help="the scales w0 of W0 = w0 I to try")
    p.add_argument("--nu0-factors", type=float, nargs="+", default=[1.0, 3.0],
                   help="nu0 = factor x rank; the selection is among factor 1 (nu0 = D)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1],
                   help="one run per seed and setting (means over them)")
    p.add_argument("--sweeps", type=int, default=600, help="Gibbs sweeps per run, burn-in included")
    p.add_argument("--burnin", type=int, default=100, help="sweeps discarded as burn-in")
    p.add_argument("--threads", type=int, default=2, help="threads of the sampler")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results", "gibbs_prior_search"),
                   help="folder of gibbs_prior_search.json and .png")
    args = p.parse_args(argv)
    dev_train, dev_val = movielens_split(args, dev=True)
    rows = [measure(w0, factor, args.seeds, args.sweeps, args.burnin, args.threads, dev_train,
                    dev_val)
            for factor in args.nu0_factors for w0 in args.w0]
    candidates = [r for r in rows if r["nu0_factor"] == 1.0
                  and COVERAGE_BAND[0] <= r["coverage_90"] <= COVERAGE_BAND[1]]
    chosen = min(candidates, key=lambda r: r["rmse"]) if candidates else None
    os.makedirs(args.out, exist_ok=True)
    emit({"benchmark": "gibbs_prior_search", "rank": RANK,
          "split": {"test_fraction": 0.2, "seed": args.split_seed, "dev_fraction": 0.1,
                    "dev_seed": args.dev_seed, "dev_train": dev_train.nnz,
                    "dev_val": dev_val.nnz},
          "sweeps": args.sweeps, "burnin": args.burnin, "seeds": args.seeds,
          "threads": args.threads, "load_average": os.getloadavg(),
          "rule": "nu0 = D; the lowest mean validation RMSE with mean 90 % coverage in "
                  f"{COVERAGE_BAND[0]}-{COVERAGE_BAND[1]}",
          "chosen_w0": None if chosen is None else chosen["w0"], "rows": rows,
          "plot": plot(rows, os.path.join(args.out, "gibbs_prior_search.png"))},
         os.path.join(args.out, "gibbs_prior_search.json"))
    table(rows, [("w0", "w0", "g"), ("nu0", "nu0", ""), ("val RMSE", "rmse", ".4f"),
                 ("coverage 90%", "coverage_90", ".3f"), ("tau", "tau", ".3f"),
                 ("seconds", "seconds", ".1f")])
    if chosen is None:
        print(f"chosen: none: no candidate (nu0 = D) has a mean 90 % coverage in "
              f"{COVERAGE_BAND[0]}-{COVERAGE_BAND[1]}")
    else:
        print(f"chosen: w0 = {chosen['w0']} (nu0 = D)")


if __name__ == "__main__":
    main()
