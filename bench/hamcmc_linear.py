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

HAMCMC's grid also varies gamma separately from eps (gamma in {0.3, 1, 3} / largest
curvature) and lam (0, or 1e-3 times the largest curvature). Besides the plain mean of the
kept samples, every run reports the paper's eps_t-weighted average (Eq. 12: sum eps_t
theta_t / sum eps_t over the kept samples) and its error. For each D the posterior
precision's spectrum is reported: its condition number, quantiles, and the number of
"stiff" directions (eigenvalues above a tenth of the largest). D = 2 (--dims 2 ...) also
writes a scatter of HAMCMC's and SGLD's samples over the exact posterior's contours
(results/hamcmc_linear_d2.png, the paper's Fig. 1).

Prints JSON and a table (final error, seconds, microseconds per iteration, time per
iteration relative to SGLD measured in the same run); writes a PNG of error against time.
Not done: the standard scaling gamma = s^T y / y^T y from the newest pair (the C core's
H^0 is a fixed gamma I).
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
            for g in (0.3, 1.0, 3.0):
                for lam in (0.0, 1e-3 * curvature):
                    out.append(("HAMCMC", f"M={memory} eps1={e:g} gamma={g:g}/L lam={lam:.3g}",
                                lambda b, e=e, m=memory, g=g, lam=lam: pymf.HAMCMC(
                                    memory=m, gamma=g / curvature, lam=lam,
                                    step_size=polynomial(e), batch_size=b)))
    return out


def weighted_error(res, make_sampler, batch, exact_mean):
    """|sum eps_t theta_t / sum eps_t - exact mean| over the kept samples (the paper's Eq. 12)."""
    eps = make_sampler(batch).step_size(res.draw_units)
    weighted = (eps[:, None] * res.samples).sum(axis=0) / eps.sum()
    return float(np.linalg.norm(weighted - exact_mean))


def spectrum(precision_eigen):
    largest = float(precision_eigen.max())
    return {"largest": largest, "smallest": float(precision_eigen.min()),
            "condition_number": largest / float(precision_eigen.min()),
            "quantiles_10_50_90": [float(q) for q in np.quantile(precision_eigen, [0.1, 0.5, 0.9])],
            "stiff_directions": int(np.sum(precision_eigen > largest / 10))}


def scatter_d2(model, data, curvature, path, iterations):
    """The samples of HAMCMC and SGLD (their grid's middle settings) over the exact
    posterior's 1, 2, 3 sd contours."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    mean, cov = model.posterior(data)
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.5))
    samplers = {"SGLD": pymf.SGLD(step_size=polynomial(0.3 / curvature), batch_size=0.01),
                "HAMCMC M=2": pymf.HAMCMC(memory=2, gamma=1.0 / curvature,
                                          step_size=polynomial(0.3), batch_size=0.01)}
    angles = np.linspace(0, 2 * np.pi, 200)
    root = np.linalg.cholesky(cov)
    for ax, (name, sampler) in zip(axes, samplers.items()):
        res = pymf.sample(model, data, sampler, n_samples=iterations // 2,
                          burnin=iterations - iterations // 2, seed=0)
        ax.plot(res.samples[:, 0], res.samples[:, 1], ".", ms=1, alpha=0.3)
        for k in (1, 2, 3):
            ring = mean[:, None] + k * root @ np.vstack([np.cos(angles), np.sin(angles)])
            ax.plot(ring[0], ring[1], "k-", lw=0.8)
        ax.set_title(f"{name}: samples over the exact posterior (1-3 sd)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def run(model, data, make_sampler, batch, iterations, seed, exact_mean):
    try:
        res = pymf.sample(model, data, make_sampler(batch), n_samples=iterations // 2,
                          burnin=iterations - iterations // 2, seed=seed,
                          trace_every=max(1, iterations // 100))
    except pymf.DivergenceError as exc:
        return {"diverged_at": exc.iteration}
    return {"error": float(res.trace["mean_error"][-1]), "seconds": float(res.trace["time"][-1]),
            "weighted_error": weighted_error(res, make_sampler, batch, exact_mean),
            "trace_iteration": res.trace["iteration"].tolist(),
            "trace_time": res.trace["time"].tolist(),
            "trace_error": res.trace["mean_error"].tolist()}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dims", type=int, nargs="+", default=[2, 10, 100])
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
        exact_mean, cov = model.posterior((A, x))
        precision_eigen = 1.0 / np.linalg.eigvalsh(cov)
        curvature = float(precision_eigen.max())
        batch = max(1, args.n_data // 100)
        if D == 2:
            document["d2_scatter"] = scatter_d2(model, (A, x), curvature,
                                                "results/hamcmc_linear_d2.png", args.iterations)
        settings = {}
        for method, label, make in candidates(curvature):
            runs = [run(model, (A, x), make, batch, args.iterations, seed, exact_mean)
                    for seed in range(args.repeats)]
            errors = [r.get("error", float("inf")) for r in runs]
            settings.setdefault(method, []).append({
                "setting": label, "median_error": statistics.median(errors),
                "median_weighted_error": statistics.median(
                    r.get("weighted_error", float("inf")) for r in runs),
                "median_seconds": statistics.median(r.get("seconds", float("nan")) for r in runs),
                "runs": runs})
        best = {method: min(options, key=lambda o: o["median_error"])
                for method, options in settings.items()}
        sgld_seconds = best["SGLD"]["median_seconds"]
        for method, choice in best.items():
            rows.append({"D": D, "method": method, "setting": choice["setting"],
                         "error": choice["median_error"],
                         "weighted": choice["median_weighted_error"],
                         "seconds": choice["median_seconds"],
                         "us_per_it": 1e6 * choice["median_seconds"] / args.iterations,
                         "vs_sgld": choice["median_seconds"] / sgld_seconds})
        document["dims"][str(D)] = {
            "curvature_max": curvature, "condition_number": curvature / precision_eigen.min(),
            "spectrum": spectrum(precision_eigen),
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
                         ("final error", "error", ".4f"), ("eps-weighted", "weighted", ".4f"),
                         ("seconds", "seconds", ".3f"),
                         ("us/iteration", "us_per_it", ".2f"), ("time vs SGLD", "vs_sgld", ".2f")])


if __name__ == "__main__":
    main()
