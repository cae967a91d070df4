#!/usr/bin/env python3
"""The PSGLD paper's shared-memory Poisson-NMF experiment (section 4.2.1, Fig. 2).

Poisson-NMF data from the generative model (W, H ~ E(1)), I = J in {256, 512, 1024},
K = 32, B = I / 32, T = 10,000 samples for LD, SGLD and PSGLD, fewer sweeps for Gibbs.
Step sizes: the paper's first (LD eps = 0.2, SGLD a = 1 in (a/t)^0.51 with |Omega| = IJ/32,
PSGLD a = 0.01, cyclic parts); where a chain diverges on this data (the curvature of the
Poisson log-likelihood grows with I and the data scale), the divergence is reported and the
next value ten times smaller is tried (the paper: "we tried several values and report the
best performing ones"). Prints JSON and a table (seconds per sample and per 10K
samples, log-likelihood reached, the Gibbs / PSGLD time-per-sample ratio, the relative gap
of the PSGLD plateau to the Gibbs one) and writes a PNG of log-likelihood against time.
"""
import argparse
import os

import pymf
from _common import HelpFormatter, emit, paper_methods, plot_traces, table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--gibbs-sweeps", type=int, nargs="+", default=[1000, 500, 400],
                        help="Gibbs sweeps per size (one value per size)")
    parser.add_argument("--out", default="results/paper_poisson")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rows, panels = [], []
    for index, size in enumerate(args.sizes):
        B = max(1, size // 32)
        V, _, _ = pymf.datasets.make_tweedie_nmf(size, size, args.rank, beta=1.0, seed=0)
        model = pymf.TweedieNMF(args.rank, beta=1.0)
        sweeps = args.gibbs_sweeps[min(index, len(args.gibbs_sweeps) - 1)]
        runs = paper_methods(model, V, B, args.samples, gibbs_sweeps=sweeps)
        psgld, gibbs = runs["PSGLD"], runs["Gibbs"]
        ratio = gibbs["seconds_per_sample"] / psgld["seconds_per_sample"]
        gap = abs(psgld["final_loglik"] - gibbs["final_loglik"]) / abs(gibbs["final_loglik"])
        for name, run in runs.items():
            rows.append({"I": size, "B": B, "method": name, "step": run["step"],
                         "diverged_with": run["diverged_steps"], "samples": run["samples"],
                         "s_per_sample": run.get("seconds_per_sample"),
                         "s_per_10K": None if "seconds_per_sample" not in run else run["seconds_per_sample"] * 1e4,
                         "final_loglik": run.get("final_loglik"),
                         "trace_time": run.get("trace_time"), "trace_loglik": run.get("trace_loglik")})
        rows.append({"I": size, "B": B, "method": "Gibbs/PSGLD", "time_ratio": ratio,
                     "plateau_gap": gap})
        panels.append((f"I = J = {size}, K = {args.rank}",
                       {name: (run["trace_time"], run["trace_loglik"]) for name, run in runs.items()
                        if run.get("trace_time")}))
    plot = plot_traces(panels, os.path.join(args.out, "poisson_loglik_vs_time.png"),
                       "Poisson NMF: log-likelihood vs wall time")
    document = {"benchmark": "paper_poisson", "cpu_count": os.cpu_count(),
                "threads": pymf.cli.info()["openmp_threads"], "results": rows, "plot": plot}
    emit(document, os.path.join(args.out, "paper_poisson.json"))
    print()
    table([r for r in rows if r["method"] != "Gibbs/PSGLD"],
          [("I=J", "I", "d"), ("method", "method", "s"), ("samples", "samples", "d"),
           ("s/sample", "s_per_sample", ".3e"), ("s/10K", "s_per_10K", ".1f"),
           ("loglik", "final_loglik", ".6g")])
    print()
    table([r for r in rows if r["method"] == "Gibbs/PSGLD"],
          [("I=J", "I", "d"), ("Gibbs/PSGLD", "time_ratio", ".0f"), ("plateau gap", "plateau_gap", ".4f")])


if __name__ == "__main__":
    import pymf.cli  # noqa: F401  (info())
    main()
