#!/usr/bin/env python3
"""Coverage of DSGLD and PSGLD with automatic steps on data drawn from the model itself,
against the exact Gibbs samplers, and what moves it: run length (the annealing of DSGLD's
default schedule), the step's fraction, the minibatch, how often tau is drawn, the
minibatch-noise bound pymf.AutoStep(minibatch_noise=0.1), and DSGLD's and PSGLD's default
per-row bound against the stability rule alone (pymf.AutoStep(per_row=False)).

Data: tests/test_calibration.py's. BPMF: 150 x 120, D = 2, tau = 2, 40 % observed, a
quarter held out (1,809 values); DSGLD on its default 2 x 2 grid and minibatch (135
ratings), exact reference BPMFGibbs(hyperprior="gamma"). Gaussian MF: 100 x 80, K = 2,
phi = 0.25, 40 % held out (3,179 values); TweedieNMF(beta=2, prior="gaussian",
phi="sample") with PSGLD on B x B grids and LD, exact reference the NumPy Gibbs chain of
tests/gaussian_mf_reference.py. One thread, seed 3 (BPMF) / 4 (NMF), one run per setting
(the binomial error of a 90 % coverage is 0.007 and 0.005). --only nmf (or bpmf) runs one
of the two tables.

Reported: the observed coverage at 50/80/90/95 %, the posterior mean of tau (BPMF) or phi
(NMF), seconds. JSON on stdout and in OUT/coverage_exact.json, a table, and
OUT/coverage_exact.png (nominal against observed coverage).
"""
import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
from _common import HelpFormatter, emit, table  # noqa: E402
from gaussian_mf_reference import (gaussian_mf_from_the_model, gibbs_gaussian_mf,  # noqa: E402
                                   predictive_coverage)
from test_calibration import bpmf_from_the_model  # noqa: E402

import pymf  # noqa: E402

LEVELS = (0.5, 0.8, 0.9, 0.95)


def row_of(name, coverage, noise, seconds, **extra):
    row = {"setting": name, "seconds": round(seconds, 2), "noise": noise, **extra}
    row.update({f"cov_{int(level * 100)}": coverage[level] for level in LEVELS})
    print(f"{name}: {row}", file=sys.stderr, flush=True)
    return row


def bpmf_rows():
    train, test = bpmf_from_the_model()
    model = pymf.BPMF(2, alpha0=10.0, beta0=10.0, mean_rating=0.0)

    def dsgld(name, n_samples, burnin, **options):
        started = time.perf_counter()
        res = pymf.sample(model, train, pymf.DSGLD(n_threads=1, **options), n_samples=n_samples,
                          burnin=burnin, thin=max(1, n_samples // 500), seed=3, test=test,
                          progress=False)
        return res, row_of(name, res.coverage(test), float(res.sample_stats["tau"].mean()),
                           time.perf_counter() - started, rounds=burnin + n_samples,
                           step=res.params["sampler"]["step_size"])

    rows = []
    started = time.perf_counter()
    gibbs = pymf.sample(model, train, pymf.BPMFGibbs(hyperprior="gamma", n_threads=1),
                        n_samples=300, burnin=100, seed=3, test=test, progress=False)
    rows.append(row_of("BPMF Gibbs (exact)", gibbs.coverage(test),
                       float(gibbs.sample_stats["tau"].mean()), time.perf_counter() - started))
    rows.append(dsgld("DSGLD auto (per-row bound, the default), 1,000 rounds", 500, 500)[1])
    stability = pymf.AutoStep(per_row=False)
    res, row = dsgld("DSGLD auto, stability rule alone, 1,000 rounds", 500, 500,
                     step_size=stability)
    rows.append(row)
    eps0 = res.params["sampler"]["step_size"]["eps0"]
    for rounds in (2500, 8500):
        rows.append(dsgld(f"DSGLD auto, stability rule alone, {rounds:,} rounds", rounds - 500,
                          500, step_size=stability)[1])
    for factor in (0.5, 0.25, 0.1):
        rows.append(dsgld(f"DSGLD eps0 x {factor}, 2,500 rounds", 2000, 500,
                          step_size=pymf.AnnealedStep(factor * eps0, 1000))[1])
    rows.append(dsgld("DSGLD eps0, minibatch 1000, 2,500 rounds", 2000, 500, batch_size=1000,
                      step_size=pymf.AnnealedStep(eps0, 1000))[1])
    rows.append(dsgld("DSGLD eps0, hyper_every=1, 2,500 rounds", 2000, 500, hyper_every=1,
                      step_size=pymf.AnnealedStep(eps0, 1000))[1])
    rows.append(dsgld("DSGLD eps0, noise_correction=False, 2,500 rounds", 2000, 500,
                      noise_correction=False, step_size=pymf.AnnealedStep(eps0, 1000))[1])
    rows.append(dsgld("DSGLD AutoStep(minibatch_noise=0.1), 1,300 rounds", 1000, 300,
                      step_size=pymf.AutoStep(minibatch_noise=0.1))[1])
    return rows


def nmf_rows():
    train, test = gaussian_mf_from_the_model(100, 80, K=2, sd=0.5, seed=21, held_out=0.4)
    model = pymf.TweedieNMF(2, beta=2.0, phi="sample", prior="gaussian")
    rows = []
    started = time.perf_counter()
    draws = gibbs_gaussian_mf(train, 2, n_samples=400, burnin=100, seed=1)
    rows.append(row_of("Gaussian MF Gibbs (exact, NumPy)",
                       {level: predictive_coverage(draws, test, level) for level in LEVELS},
                       float(draws[2].mean()), time.perf_counter() - started))

    def run(name, sampler):
        started = time.perf_counter()
        res = pymf.sample(model, train, sampler, n_samples=600, burnin=300, thin=2, seed=4,
                          test=test, progress=False)
        return row_of(name, res.coverage(test), res.noise_variance(),
                      time.perf_counter() - started, iterations=900,
                      step=res.params["sampler"]["step_size"])

    rows.append(run("LD auto", pymf.LD(n_threads=1)))
    for blocks in (2, 4, 8):
        rows.append(run(f"PSGLD B={blocks} auto (per-row bound, the default)",
                        pymf.PSGLD(blocks=blocks, n_threads=1)))
        rows.append(run(f"PSGLD B={blocks} auto, stability rule alone",
                        pymf.PSGLD(blocks=blocks, n_threads=1,
                                   step_size=pymf.AutoStep(per_row=False))))
        rows.append(run(f"PSGLD B={blocks} AutoStep(minibatch_noise=0.1)",
                        pymf.PSGLD(blocks=blocks, n_threads=1,
                                   step_size=pymf.AutoStep(minibatch_noise=0.1))))
    return rows


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    ax.plot([0.45, 1], [0.45, 1], color="grey", lw=1, ls="--", label="calibrated")
    for row in rows:
        if any(key in row["setting"] for key in ("exact", "1,000 rounds", "B=8", "AutoStep")):
            ax.plot(LEVELS, [row[f"cov_{int(level * 100)}"] for level in LEVELS], marker="o",
                    label=row["setting"])
    ax.set_xlabel("nominal level")
    ax.set_ylabel("observed coverage (held-out values)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--out", default=os.path.join(HERE, "..", "results", "coverage_exact"))
    p.add_argument("--only", choices=["bpmf", "nmf"], default=None,
                   help="run only BPMF's (DSGLD) or Gaussian MF's (LD, PSGLD) table")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    rows = ((bpmf_rows() if args.only != "nmf" else [])
            + (nmf_rows() if args.only != "bpmf" else []))
    emit({"benchmark": "coverage_exact", "threads": 1, "load_average": os.getloadavg(),
          "rows": rows}, os.path.join(args.out, "coverage_exact.json"))
    table(rows, [("setting", "setting", "")]
          + [(f"{int(level * 100)} %", f"cov_{int(level * 100)}", ".3f") for level in LEVELS]
          + [("tau / phi", "noise", ".3f"), ("seconds", "seconds", ".1f")])
    plot(rows, os.path.join(args.out, "coverage_exact.png"))


if __name__ == "__main__":
    main()
