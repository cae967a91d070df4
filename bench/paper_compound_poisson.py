#!/usr/bin/env python3
"""The PSGLD paper's compound Poisson experiment (section 4.2.1, Fig. 2b): Tweedie NMF with
beta = 0.5 (power p = 1.5, compound Poisson-gamma with a point mass at 0), phi = 1,
I = J = 1024, K = 32, B = 32, T = 10,000 samples of LD, SGLD and PSGLD (no Gibbs sampler
exists for this model). Step sizes as in paper_poisson.py (the paper's, then ten times
smaller ones where a chain diverges). Prints JSON and a table, writes a PNG.
"""
import argparse
import os

import pymf
import pymf.cli
from _common import HelpFormatter, emit, paper_methods, plot_traces, table


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--size", type=int, default=1024, help="I = J (B = size / 32 parts)")
    parser.add_argument("--rank", type=int, default=32, help="K, of the data and of the model")
    parser.add_argument("--samples", type=int, default=10_000, help="T, iterations per sampler")
    parser.add_argument("--out", default="results/paper_compound_poisson",
                        help="folder of paper_compound_poisson.json and the PNG")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    V, _, _ = pymf.datasets.make_tweedie_nmf(args.size, args.size, args.rank, beta=0.5, phi=1.0, seed=0)
    model = pymf.TweedieNMF(args.rank, beta=0.5, phi=1.0)
    B = max(1, args.size // 32)
    runs = paper_methods(model, V, B, args.samples)
    rows = [{"method": name, "step": run["step"], "diverged_with": run["diverged_steps"],
             "samples": run["samples"], "s_per_sample": run.get("seconds_per_sample"),
             "s_per_10K": run["seconds_per_sample"] * 1e4 if "seconds_per_sample" in run else None,
             "final_loglik": run.get("final_loglik"), "trace_time": run.get("trace_time"),
             "trace_loglik": run.get("trace_loglik")} for name, run in runs.items()]
    plot = plot_traces([(f"beta = 0.5, I = J = {args.size}, K = {args.rank}",
                         {r["method"]: (r["trace_time"], r["trace_loglik"]) for r in rows if r["trace_time"]})],
                       os.path.join(args.out, "compound_poisson_loglik_vs_time.png"),
                       "Compound Poisson NMF: log-likelihood vs wall time")
    emit({"benchmark": "paper_compound_poisson", "cpu_count": os.cpu_count(),
          "threads": pymf.cli.info()["openmp_threads"], "zero_fraction": float((V == 0).mean()),
          "results": rows, "plot": plot}, os.path.join(args.out, "paper_compound_poisson.json"))
    print()
    table(rows, [("method", "method", "s"), ("step", "step", "s"), ("samples", "samples", "d"),
                 ("s/sample", "s_per_sample", ".3e"), ("s/10K", "s_per_10K", ".1f"),
                 ("loglik", "final_loglik", ".6g")])


if __name__ == "__main__":
    main()
