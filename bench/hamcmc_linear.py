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
curvature, and the standard scaling scaled_gamma=True: H^0 = (s^T y / y^T y) I from the newest
pair, with gamma = 1 / largest curvature for the 2M warm-up steps) and lam (0, or 1e-3 times
the largest curvature). Besides the plain mean of the
kept samples, every run reports the paper's eps_t-weighted average (Eq. 12: sum eps_t
theta_t / sum eps_t over the kept samples) and its error. For each D the posterior
precision's spectrum is reported: its condition number, quantiles, and the number of
"stiff" directions (eigenvalues above a tenth of the largest). D = 2 (--dims 2 ...) also
writes a scatter of HAMCMC's and SGLD's samples over the exact posterior's contours
(beside --plot with _d2 added: results/hamcmc_linear_d2.png by default, the paper's Fig. 1).

Prints JSON and a table (final error, seconds, microseconds per iteration, time per
iteration relative to SGLD measured in the same run); writes a PNG of error against time.

--sweep: where HAMCMC helps, at equal time. Every run gets the same --budget of CPU
seconds of chain (the error is that of the mean of every 5th kept sample): its
iterations are the budget over its method's CPU time per iteration, measured first by
pilots in the same process (median of 3; HAMCMC per memory M), half of them
burn-in. (CPU time of the one-threaded process: on the shared machine wall times vary
several-fold with the load; the table also gives each run's CPU seconds.) Two
sweeps at D = 100:
  stiff:  error against the number of stiff directions k in {1, 5, 10, 25, 49, 75}: the
          rows a_n ~ N(0, Q diag(c) Q^T) with k scales c = 1 and D - k log-spaced over
          [1/200, 1/20], so that exactly k eigenvalues of the posterior precision exceed a
          tenth of the largest (condition number ~170);
  memory: error against M in {2, 3, 5, 10, 20} on make_linear_gaussian's D = 100 problem
          (49 stiff directions; the problem of the D = 100 runs above).
Each method's setting is tuned on the same grid (as above; HAMCMC with fixed and with
scaled gamma reported apart, M in {2, 5} in the stiff sweep) by the median final error over
the --tune-seeds seeds, then the chosen setting is rerun on --report-seeds other seeds and
their median reported (tuning and reporting on the same seeds would favour the larger
grid). Writes results/hamcmc_linear_sweep.png (error against k and against M).
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
import pymf.cli  # noqa: E402

FIRST_STEPS = (0.03, 0.1, 0.3, 1.0)  # eps_1 in each preconditioner's units
GAMMAS = (0.3, 1.0, 3.0)  # HAMCMC's fixed gamma, in units of 1 / largest curvature


def polynomial(first_step):
    """PolynomialDecay(a, 0.51) whose first step is first_step."""
    return pymf.PolynomialDecay(first_step ** (1 / 0.51), 0.51)


def baseline_candidates(curvature):
    out = []
    for e in FIRST_STEPS:
        out.append(("SGLD", f"eps1={e:g}/L", lambda b, e=e: pymf.SGLD(
            step_size=polynomial(e / curvature), batch_size=b)))
        out.append(("pSGLD", f"eps1={e / 10:g}", lambda b, e=e: pymf.PreconditionedSGLD(
            step_size=polynomial(e / 10), batch_size=b)))
        out.append(("SGRLD", f"eps1={e:g}", lambda b, e=e: pymf.SGRLD(
            step_size=polynomial(e), batch_size=b)))
    return out


def candidates(curvature):
    """(method, label, make_sampler(batch)) for every setting of the grid."""
    out = baseline_candidates(curvature)
    for e in FIRST_STEPS:
        for memory in (2, 5):
            out += hamcmc_candidates(e, memory, curvature, "HAMCMC")
    return out


def hamcmc_candidates(e, memory, curvature, fixed_name, scaled_name=None):
    """HAMCMC's grid at first step e and memory M: gamma in {0.3, 1, 3} / L and the scaled
    gamma (warm-up gamma 1 / L), each with lam in {0, 1e-3 L}."""
    out = []
    for g in (*GAMMAS, "scaled"):
        scaled = g == "scaled"
        name = (scaled_name or fixed_name) if scaled else fixed_name
        for lam in (0.0, 1e-3 * curvature):
            gamma_label = "scaled" if scaled else f"{g:g}/L"
            out.append((name, f"M={memory} eps1={e:g} gamma={gamma_label} lam={lam:.3g}",
                        lambda b, e=e, m=memory, g=g, lam=lam, scaled=scaled: pymf.HAMCMC(
                            memory=m, gamma=(1.0 if scaled else g) / curvature,
                            scaled_gamma=scaled, lam=lam, step_size=polynomial(e),
                            batch_size=b)))
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
    started = time.process_time()
    try:
        res = pymf.sample(model, data, make_sampler(batch), n_samples=iterations // 2,
                          burnin=iterations - iterations // 2, seed=seed,
                          trace_every=max(1, iterations // 100))
    except pymf.DivergenceError as exc:
        return {"diverged_at": exc.iteration}
    return {"error": float(res.trace["mean_error"][-1]), "seconds": float(res.trace["time"][-1]),
            "cpu_seconds": time.process_time() - started,
            "weighted_error": weighted_error(res, make_sampler, batch, exact_mean),
            "trace_iteration": res.trace["iteration"].tolist(),
            "trace_time": res.trace["time"].tolist(),
            "trace_error": res.trace["mean_error"].tolist()}


# ----------------------------------------------------------------------- the sweeps

STIFF_COUNTS = (1, 5, 10, 25, 49, 75)
MEMORIES = (2, 3, 5, 10, 20)


def stiff_problem(n_data, dim, n_stiff, seed=0, noise_var=10.0):
    """(A, x): make_linear_gaussian's model with k = n_stiff row scales of 1 and the others
    log-spaced over [1/200, 1/20] (so k eigenvalues of the posterior precision, about
    N c / noise_var + 1, lie above a tenth of the largest)."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    scales = np.concatenate([np.ones(n_stiff), np.logspace(np.log10(1 / 20), np.log10(1 / 200),
                                                           dim - n_stiff)])
    A = rng.normal(size=(n_data, dim)) * np.sqrt(scales) @ Q.T
    theta = rng.normal(size=dim)
    return A, A @ theta + rng.normal(0.0, np.sqrt(noise_var), n_data)


def seconds_per_iteration(model, data, make_sampler, batch, iterations=5000, repeats=3):
    """The median CPU time per iteration of a sampler's chain in a run that keeps one sample:
    the C loop's cost, without the engine's per-kept-sample moments (about 30 us a sample at
    D = 100, the same for every method, which would hide the methods' differences). CPU
    time of this (one-threaded) process, not wall time: the machine is shared, and under a
    load of 5-10 on 2 cores wall times of the same run vary several-fold."""
    times = []
    for seed in range(repeats):
        started = time.process_time()
        pymf.sample(model, data, make_sampler(batch), n_samples=iterations, seed=seed,
                    thin=iterations, keep_samples=False, trace_every=iterations)
        times.append((time.process_time() - started) / iterations)
    return statistics.median(times)


def with_cached_posterior(model):
    """The model with its exact posterior (O(N D^2 + D^3), 0.3 s at D = 100, N = 10^4, which
    every pymf.sample call computes for the trace's error) remembered per data set: the
    sweeps call pymf.sample thousands of times on a few data sets."""
    cache = {}
    compute = model.posterior

    def posterior(data):
        key = (id(data[0]), id(data[1]))
        if key not in cache:
            cache[key] = (compute(data), data)  # the data kept alive: its id stays unique
        return cache[key][0]

    model.posterior = posterior
    return model


def cost_key(method, label):
    """What decides the time per iteration: the method, and HAMCMC's memory."""
    return f"{method} {label.split()[0]}" if method.startswith("HAMCMC") else method


SWEEP_THIN = 5  # the sweeps' error is of every 5th sample's mean: the engine's moments
               # (~30 us a kept sample at D = 100) would otherwise cost as much as the chain


def sweep_run(model, data, make_sampler, batch, iterations, seed, exact_mean):
    """run() for the sweeps: half burn-in, every SWEEP_THIN-th sample kept, the final error
    and CPU seconds only."""
    started = time.process_time()
    kept = max(1, iterations // 2 // SWEEP_THIN)
    try:
        res = pymf.sample(model, data, make_sampler(batch), n_samples=kept * SWEEP_THIN,
                          burnin=iterations - kept * SWEEP_THIN, thin=SWEEP_THIN, seed=seed,
                          keep_samples=False, trace_every=kept * SWEEP_THIN)
    except pymf.DivergenceError as exc:
        return {"diverged_at": exc.iteration}
    return {"error": float(res.trace["mean_error"][-1]), "seconds": float(res.trace["time"][-1]),
            "cpu_seconds": time.process_time() - started}


def sweep_point(model, data, candidates, budget, tune_seeds, report_seeds):
    """Every candidate for `budget` seconds of its own iterations; the best of each method
    (median over tune_seeds) rerun on report_seeds. Returns {method: summary}."""
    A, x = data
    exact_mean, cov = model.posterior(data)
    batch = max(1, len(x) // 100)
    costs = {}
    for method, label, make in candidates:
        key = cost_key(method, label)
        if key not in costs:
            costs[key] = seconds_per_iteration(model, data, make, batch)

    def iterations_of(method, label):
        return max(100, int(budget / costs[cost_key(method, label)]))

    tuned = {}
    for method, label, make in candidates:
        n = iterations_of(method, label)
        errors = [sweep_run(model, data, make, batch, n, seed, exact_mean).get("error",
                                                                              float("inf"))
                  for seed in tune_seeds]
        score = statistics.median(errors)
        if method not in tuned or score < tuned[method][0]:
            tuned[method] = (score, label, make, n)
    out = {}
    for method, (score, label, make, n) in tuned.items():
        runs = [sweep_run(model, data, make, batch, n, seed, exact_mean) for seed in report_seeds]
        errors = [r.get("error", float("inf")) for r in runs]
        out[method] = {"setting": label, "iterations": n,
                       "us_per_iteration": 1e6 * costs[cost_key(method, label)],
                       "tuning_error": score, "error": statistics.median(errors),
                       "errors": errors,
                       "seconds": statistics.median(r.get("seconds", float("nan")) for r in runs),
                       "cpu_seconds": statistics.median(r.get("cpu_seconds", float("nan"))
                                                        for r in runs)}
    return out


def ratios(point):
    """The issue's targets at one sweep point: SGLD's error over HAMCMC's (target >= 5) and
    HAMCMC's over SGRLD's (target <= 1.5), for the better HAMCMC variant."""
    hamcmc = min((m for m in point if m.startswith("HAMCMC")), key=lambda m: point[m]["error"])
    return {"best_hamcmc": hamcmc,
            "sgld_over_hamcmc": point["SGLD"]["error"] / point[hamcmc]["error"],
            "hamcmc_over_sgrld": point[hamcmc]["error"] / point["SGRLD"]["error"],
            "hamcmc_over_psgld": point[hamcmc]["error"] / point["pSGLD"]["error"]}


def save_partial(document, path):
    """The sweeps' JSON so far (a long run on a shared machine may be cut short)."""
    if path:
        _common.write_json(path + ".partial", document, indent=1)


def run_sweeps(args):
    import subprocess
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    info = pymf.cli.info()
    document = {"benchmark": "hamcmc_linear_sweep", "dim": 100, "n_data": args.n_data,
                "budget_seconds_per_run": args.budget, "tune_seeds": args.tune_seeds,
                "report_seeds": args.report_seeds, "threads": 1,
                "openmp_threads_available": info["openmp_threads"], "load_before": load,
                "stiff": {}, "memory": {}}
    model = with_cached_posterior(pymf.LinearGaussian(noise_var=10.0))
    rows = []
    tune = list(range(args.tune_seeds))
    report = list(range(100, 100 + args.report_seeds))
    if "stiff" in args.sweep:
        for k in args.stiff_counts:
            data = stiff_problem(args.n_data, 100, k)
            eigen = 1.0 / np.linalg.eigvalsh(model.posterior(data)[1])
            L = float(eigen.max())
            candidates = baseline_candidates(L)
            for e in FIRST_STEPS:
                for memory in (2, 5):
                    candidates += hamcmc_candidates(e, memory, L, "HAMCMC fixed gamma",
                                                    "HAMCMC scaled gamma")
            point = sweep_point(model, data, candidates, args.budget, tune, report)
            document["stiff"][str(k)] = {"spectrum": spectrum(eigen), "methods": point,
                                         "targets": ratios(point)}
            rows += [{"sweep": "stiff", "x": k, "method": m, **v} for m, v in point.items()]
            save_partial(document, args.json)
            print(f"stiff {k}: " + ", ".join(f"{m} {v['error']:.3f}" for m, v in point.items()),
                  file=sys.stderr, flush=True)
    if "memory" in args.sweep:
        A, x, _ = pymf.datasets.make_linear_gaussian(args.n_data, 100, noise_var=10.0, seed=0)
        data = (A, x)
        eigen = 1.0 / np.linalg.eigvalsh(model.posterior(data)[1])
        L = float(eigen.max())
        baselines = sweep_point(model, data, baseline_candidates(L), args.budget, tune, report)
        document["memory"]["spectrum"] = spectrum(eigen)
        document["memory"]["baselines"] = baselines
        for memory in args.memories:
            candidates = []
            for e in FIRST_STEPS:
                candidates += hamcmc_candidates(e, memory, L, "HAMCMC fixed gamma",
                                                "HAMCMC scaled gamma")
            point = sweep_point(model, data, candidates, args.budget, tune, report)
            document["memory"][str(memory)] = {"methods": point,
                                               "targets": ratios({**baselines, **point})}
            rows += [{"sweep": "memory", "x": memory, "method": m, **v} for m, v in point.items()]
            save_partial(document, args.json)
            print(f"M {memory}: " + ", ".join(f"{m} {v['error']:.3f}" for m, v in point.items()),
                  file=sys.stderr, flush=True)
        rows += [{"sweep": "memory", "x": "-", "method": m, **v} for m, v in baselines.items()]
    document["load_after"] = subprocess.run(["uptime"], capture_output=True,
                                            text=True).stdout.strip()
    document["plot"] = plot_sweeps(document, args.plot)
    _common.emit(document, args.json)
    print()
    _common.table(rows, [("sweep", "sweep", "s"), ("k or M", "x", ""), ("method", "method", "s"),
                         ("setting", "setting", "s"), ("iterations", "iterations", "d"),
                         ("us/iteration", "us_per_iteration", ".1f"),
                         ("cpu s", "cpu_seconds", ".2f"), ("median error", "error", ".4f")])
    print()
    for sweep in ("stiff", "memory"):
        for x, entry in document[sweep].items():
            if "targets" in entry:
                t = entry["targets"]
                print(f"{sweep} {x}: best {t['best_hamcmc']}: SGLD/HAMCMC error "
                      f"{t['sgld_over_hamcmc']:.2f} (target >= 5), HAMCMC/SGRLD "
                      f"{t['hamcmc_over_sgrld']:.2f} (target <= 1.5), HAMCMC/pSGLD "
                      f"{t['hamcmc_over_psgld']:.2f}")


def plot_sweeps(document, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot"
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    if document["stiff"]:
        ks = sorted(int(k) for k in document["stiff"])
        methods = document["stiff"][str(ks[0])]["methods"]
        for m in methods:
            axes[0].plot(ks, [document["stiff"][str(k)]["methods"][m]["error"] for k in ks],
                         "o-", label=m)
        axes[0].set_xlabel("stiff directions (of D = 100)")
    if len(document["memory"]) > 2:
        Ms = sorted(int(m) for m in document["memory"] if m.isdigit())
        for m, colour in (("HAMCMC fixed gamma", "C3"), ("HAMCMC scaled gamma", "C4")):
            axes[1].plot(Ms, [document["memory"][str(M)]["methods"][m]["error"] for M in Ms],
                         "o-", label=m, color=colour)
        for m, v in document["memory"]["baselines"].items():
            axes[1].axhline(v["error"], ls="--", lw=1, label=m,
                            color={"SGLD": "C0", "pSGLD": "C1", "SGRLD": "C2"}.get(m))
        axes[1].set_xscale("log")
        axes[1].set_xticks(Ms, [str(M) for M in Ms])
        axes[1].minorticks_off()
        axes[1].set_xlabel("memory M (D = 100, 49 stiff directions)")
    for ax in axes:
        ax.set_yscale("log")
        ax.set_ylabel("|mean of samples - exact mean| (median)")
        ax.legend(fontsize=8)
    fig.suptitle("linear-Gaussian, equal CPU time "
                 f"({document['budget_seconds_per_run']} s of chain a run, one thread)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=_common.HelpFormatter)
    parser.add_argument("--sweep", nargs="*", choices=["stiff", "memory"], default=None,
                        help="run these sweeps (equal wall time) instead of --dims")
    parser.add_argument("--budget", type=float, default=0.2,
                        help="sweeps: CPU seconds of chain per run")
    parser.add_argument("--stiff-counts", type=int, nargs="+", default=list(STIFF_COUNTS))
    parser.add_argument("--memories", type=int, nargs="+", default=list(MEMORIES))
    parser.add_argument("--wide-grid", action="store_true",
                        help="also eps_1 = 3 (every method) and gamma = 10 / L (HAMCMC): the "
                             "default grid's best settings sit at its largest steps")
    parser.add_argument("--tune-seeds", type=int, default=2)
    parser.add_argument("--report-seeds", type=int, default=3)
    parser.add_argument("--dims", type=int, nargs="+", default=[2, 10, 100])
    parser.add_argument("--n-data", type=int, default=10_000)
    parser.add_argument("--iterations", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", default=None, help="also write the JSON here")
    parser.add_argument("--plot", default=None,
                        help="default results/hamcmc_linear.png (sweeps: _sweep.png); D = 2 "
                             "also writes its scatter beside it, the name ending in _d2.png")
    args = parser.parse_args()
    if args.wide_grid:
        global FIRST_STEPS, GAMMAS
        FIRST_STEPS, GAMMAS = FIRST_STEPS + (3.0,), GAMMAS + (10.0,)
    if args.sweep is not None:
        args.plot = args.plot or "results/hamcmc_linear_sweep.png"
        run_sweeps(args)
        return
    args.plot = args.plot or "results/hamcmc_linear.png"
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
            stem, extension = os.path.splitext(args.plot)
            document["d2_scatter"] = scatter_d2(model, (A, x), curvature,
                                                f"{stem}_d2{extension or '.png'}", args.iterations)
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
