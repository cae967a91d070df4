#!/usr/bin/env python3
"""HAMCMC against SGLD, preconditioned SGLD (pSGLD) and SGRLD on the linear-Gaussian model
(the HAMCMC paper's section 4.1 and Fig. 2): the error between the exact posterior mean and
the average of the samples, against iterations and wall time, for D = 10 and D = 100.

Data: pymf.datasets.make_linear_gaussian(N, D, noise_var=10) (a correlated posterior with
scale differences). Every sampler gets N / 100 entries per minibatch, eps_t = (a / t)^0.51
(the paper's schedule), --iterations iterations of which the first half are burn-in (the
paper: T = 20,000, half discarded). As in the paper, each method's settings are picked from
the same size of grid, "with the same rigor": the first step eps_1 over four values in the
units of its preconditioner (1 / largest curvature for SGLD; H for HAMCMC, with
gamma = 1 / largest curvature and M in {2, 5}; the metric for SGRLD; 1 / (lam + sqrt V) for
pSGLD), and the setting with the lowest median final error over --repeats seeds is
reported. The largest curvature is the largest eigenvalue of the posterior precision,
computed once (a user would estimate it by a few power iterations).

Prints JSON and a table (final error, seconds, microseconds per iteration, time per
iteration relative to SGLD measured in the same run); writes a PNG of error against time.
"""
import argparse
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _common  # noqa: E402

import pymf  # noqa: E402
import pymf.cli  # noqa: E402

FIRST_STEPS = (0.03, 0.1, 0.3, 1.0)  # eps_1 in each preconditioner's units


def polynomial(first_step):
    """PolynomialDecay(a, 0.51) whose first step is first_step."""
    return pymf.PolynomialDecay(first_step ** (1 / 0.51), 0.51)


def candidates(curvature):
    """(method, label, make_sampler(batch)) for every setting of the grid."""
    out = []
    for e in FIRST_STEPS:
        out.append(("SGLD", f"eps1={e:g}/L", lambda b, e=e: pymf.SGLD(
            step_size=polynomial(e / curvature), batch_size=b)))
        out.append(("pSGLD", f"eps1={e / 10:g}", lambda b, e=e: pymf.PreconditionedSGLD(
            step_size=polynomial(e / 10), batch_size=b)))
        out.append(("SGRLD", f"eps1={e:g}", lambda b, e=e: pymf.SGRLD(
            step_size=polynomial(e), batch_size=b)))
        for memory in (2, 5):
            out.append(("HAMCMC", f"M={memory} eps1={e:g}", lambda b, e=e, m=memory: pymf.HAMCMC(
                memory=m, gamma=1.0 / curvature, step_size=polynomial(e), batch_size=b)))
    return out


def run(model, data, make_sampler, batch, iterations, seed):
    try:
        res = pymf.sample(model, data, make_sampler(batch), n_samples=iterations // 2,
                          burnin=iterations - iterations // 2, seed=seed,
                          trace_every=max(1, iterations // 100))
    except pymf.DivergenceError as exc:
        return {"diverged_at": exc.iteration}
    return {"error": float(res.trace["mean_error"][-1]), "seconds": float(res.trace["time"][-1]),
            "trace_iteration": res.trace["iteration"].tolist(),
            "trace_time": res.trace["time"].tolist(),
            "trace_error": res.trace["mean_error"].tolist()}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--n-data", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the JSON here")
    parser.add_argument("--plot", default="results/hamcmc_linear.png")
    args = parser.parse_args()
    info = pymf.cli.info()
    document = {"benchmark": "hamcmc_linear", "n_data": args.n_data,
                "iterations": args.iterations, "repeats": args.repeats,
                "threads": 1, "openmp_threads_available": info["openmp_threads"], "dims": {}}
    panels, rows = [], []
    for D in args.dims:
        A, x, _ = pymf.datasets.make_linear_gaussian(args.n_data, D, noise_var=10.0, seed=0)
        model = pymf.LinearGaussian(noise_var=10.0)
        _, cov = model.posterior((A, x))
        precision_eigen = 1.0 / np.linalg.eigvalsh(cov)
        curvature = float(precision_eigen.max())
        batch = max(1, args.n_data // 100)
        settings = {}
        for method, label, make in candidates(curvature):
            runs = [run(model, (A, x), make, batch, args.iterations, seed)
                    for seed in range(args.repeats)]
            errors = [r.get("error", float("inf")) for r in runs]
            settings.setdefault(method, []).append({
                "setting": label, "median_error": statistics.median(errors),
                "median_seconds": statistics.median(r.get("seconds", float("nan")) for r in runs),
                "runs": runs})
        best = {method: min(options, key=lambda o: o["median_error"])
                for method, options in settings.items()}
        sgld_seconds = best["SGLD"]["median_seconds"]
        for method, choice in best.items():
            rows.append({"D": D, "method": method, "setting": choice["setting"],
                         "error": choice["median_error"], "seconds": choice["median_seconds"],
                         "us_per_it": 1e6 * choice["median_seconds"] / args.iterations,
                         "vs_sgld": choice["median_seconds"] / sgld_seconds})
        document["dims"][str(D)] = {
            "curvature_max": curvature, "condition_number": curvature / precision_eigen.min(),
            "batch_size": batch, "best": {m: {k: v for k, v in c.items() if k != "runs"}
                                          for m, c in best.items()},
            "all_settings": {m: [{k: v for k, v in o.items() if k != "runs"} for o in options]
                             for m, options in settings.items()},
            "traces": {m: c["runs"][0] for m, c in best.items() if "trace_time" in c["runs"][0]}}
        panels.append((f"D = {D}", {m: (t["trace_time"], t["trace_error"])
                                    for m, t in document["dims"][str(D)]["traces"].items()}))
    document["plot"] = _common.plot_traces(panels, args.plot,
                                           "linear-Gaussian model: error of the posterior mean",
                                           ylabel="|mean of samples - exact mean|")
    _common.emit(document, args.json)
    print()
    _common.table(rows, [("D", "D", "d"), ("method", "method", "s"), ("setting", "setting", "s"),
                         ("final error", "error", ".4f"), ("seconds", "seconds", ".3f"),
                         ("us/iteration", "us_per_it", ".2f"), ("time vs SGLD", "vs_sgld", ".2f")])


if __name__ == "__main__":
    main()
