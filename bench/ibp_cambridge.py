"""Collapsed Gibbs against the hybrid parallel sampler on the "Cambridge" data (the parallel
IBP paper's experiment): 1000 x 36 images of four bars, a checkerboard of held-out cells over
the first 10 % of rows.

Reports, per sampler (median over --repeats runs of the same seed, threads and MPI ranks
as listed): seconds per iteration (a collapsed sweep; a hybrid outer iteration of L = 5
sub-iterations), the time to come within 1 % of the final held-out log-likelihood (the
paper's joint one) and of the final predictive log density, the hybrid's time to reach the
collapsed sampler's final held-out value as a ratio of the collapsed sampler's own time
(target <= 0.3), and the final K+ and sigma_x (means over the last 20 % of iterations),
with K_major: the features owned by at least 1 % of the rows. The same ratio for the
predictive density is also given as iterations times CPU seconds per iteration
(ratio_to_collapsed_predictive_cpu: the process's CPU seconds, every thread's, over the
run), which a machine shared with other jobs disturbs less than the wall time.
"Final": the mean over the last 20 % of iterations (held-out) or the last value
(predictive: at time t over the draws of iterations (t/2, t], the first half discarded as
burn-in); "time to within 1 %": the first trace point within 1 % of it.
Writes JSON (stdout and OUT/ibp_cambridge.json), a table, held-out metrics against wall time
(OUT/ibp_cambridge_heldout.png) and the features of each run with the true ones
(OUT/ibp_features_*.png, like the paper's Fig. 2). --large N adds a generated N-row run of a
few iterations per sampler: how the cost per iteration grows with N and P.

    python bench/ibp_cambridge.py --iterations 1000 --repeats 3 --mpi

--sub-iterations 1 2 5 runs the hybrid once per number L of sub-iterations (the methods
are named "... L=1"; 5, the paper's, is unnamed).
--split-merge 0 5 runs every sampler once per number of split-merge proposals per
iteration (the methods are named "... SM=5"); --seeds 0 1 2 runs every method once per
seed (named "... seed=1"; --repeats then repeats each seed) and adds a summary per method
over the seeds (OUT/ibp_cambridge.json "by_method"): the split-merge comparison.

    python bench/ibp_cambridge.py --iterations 1000 --repeats 1 --processes 2 \
        --split-merge 0 5 --seeds 0 1 2
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, json_text, write_json  # noqa: E402

import pymf  # noqa: E402
from pymf.engine import calibration  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def first_reach(times, values, target, rel=0.01):
    """The first time values come within rel |target| of target (None: never)."""
    values = np.asarray(values, dtype=float)
    hit = np.nonzero(np.abs(values - target) <= rel * abs(target))[0]
    return None if len(hit) == 0 else float(times[hit[0]])


def draw_means(res, rows, cols):
    """(Z A) at the cells, for every kept draw in turn (IBPResult.draw_mean)."""
    for s in range(len(res.A_samples)):
        yield res.draw_mean(s, rows, cols)


def second_half_coverage(res, X, mask, level=0.9, seed=0):
    """The fraction of the held-out cells inside their central posterior predictive
    interval of `level`, from the second half of the draws (final_predictive_loglik's
    window; Result.coverage would take every draw from the start): each draw's mean plus
    N(0, sigma_x^2) noise with its sigma_x, the interval's bounds quantiles over them."""
    rows, cols = np.nonzero(mask)
    x = X[rows, cols]
    sigma = res.posterior["sigma_x"][0]
    rng = np.random.default_rng(seed)
    first = len(sigma) // 2
    draws = np.array([mean + rng.normal(0.0, sigma[i], len(x))
                      for i, mean in enumerate(draw_means(res, rows, cols)) if i >= first])
    lower, upper = calibration.intervals(None, None, draws, level)
    return float(np.mean((x >= lower) & (x <= upper)))


def half_window_predictive(res, X, mask):
    """For every iteration t, the log posterior predictive density of the held-out cells
    over the draws of iterations (t/2, t] (the first half discarded as burn-in, as a user
    would at time t); the result's own predictive_loglik averages from iteration 1 on, so
    its start weighs on it for long."""
    rows, cols = np.nonzero(mask)
    x = X[rows, cols]
    sigma = res.posterior["sigma_x"][0]
    dens = np.empty((len(sigma), len(x)))
    for i, mean in enumerate(draw_means(res, rows, cols)):
        dens[i] = np.exp(-0.5 * ((x - mean) / sigma[i]) ** 2) / (sigma[i] * np.sqrt(2 * np.pi))
    cumulative = np.vstack([np.zeros(len(x)), np.cumsum(dens, axis=0)])
    out = np.empty(len(sigma))
    for t in range(1, len(sigma) + 1):
        lo = t // 2
        with np.errstate(divide="ignore"):
            out[t - 1] = np.sum(np.log((cumulative[t] - cumulative[lo]) / (t - lo)))
    return out


def summarise(res, iterations, X, mask):
    t = np.asarray(res.trace["time"])
    it = np.asarray(res.trace["iteration"])
    tail = slice(int(0.8 * len(t)), None)
    held = np.asarray(res.trace["heldout_loglik"])
    # trace point 0 is the start; draw i is kept at trace point i + 1
    pred = np.concatenate([[np.nan], half_window_predictive(res, X, mask)])
    res.trace["predictive_half_window"] = pred
    final_held, final_pred = float(np.mean(held[tail])), float(pred[-1])
    draws = res.Z_samples[int(0.8 * len(res.Z_samples)):]
    major = [int(np.sum(Z.sum(axis=0) >= 0.01 * Z.shape[0])) for Z in draws]
    return {"seconds_per_iteration": float(t[-1]) / iterations,
            "final_K": float(np.mean(res.trace["K"][tail])),
            "final_K_major": float(np.mean(major)) if major else None,
            "final_sigma_x": float(np.mean(res.trace["sigma_x"][tail])),
            "final_heldout_loglik": final_held, "final_predictive_loglik": final_pred,
            "coverage_90": second_half_coverage(res, X, mask),
            "time_to_1pct_heldout": first_reach(t, held, final_held),
            "time_to_1pct_predictive": first_reach(t[1:], pred[1:], final_pred),
            "iterations_to_1pct_predictive": first_reach(it[1:], pred[1:], final_pred),
            "cpu_seconds_per_iteration": (None if getattr(res, "cpu_seconds", None) is None
                                          else res.cpu_seconds / iterations),  # MPI: None
            "total_seconds": float(t[-1])}


def run_threads(sampler, X, mask, iterations, seed):
    """The run, with the process's CPU seconds (every thread's) as res.cpu_seconds: on a
    machine shared with other jobs they depend less on the load than the wall time. Like
    the trace's wall time they leave out the trace points' own work (the held-out measures,
    computed here at every iteration; the trace's time stops before them too)."""
    from pymf.ibp.kernel import IBPKernel
    trace_point = IBPKernel.trace_point
    in_trace = [0.0]

    def timed_trace_point(kernel, run):
        started = time.process_time()
        try:
            return trace_point(kernel, run)
        finally:
            in_trace[0] += time.process_time() - started

    started = time.process_time()
    IBPKernel.trace_point = timed_trace_point
    try:
        res = pymf.sample(pymf.IBPLinearGaussian(), X, sampler, n_samples=iterations,
                          seed=seed, test_mask=mask, progress=False, trace_every=1)
    finally:
        IBPKernel.trace_point = trace_point
    res.cpu_seconds = time.process_time() - started - in_trace[0]
    return res


def run_mpi(ranks, args, out_dir, split_merge=0, seed=None):
    seed = args.seed if seed is None else seed
    out = os.path.join(out_dir, f"mpi{ranks}.npz")
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe", CI="1")
    command = [mpiexec, "-n", str(ranks), sys.executable, "-m", "pymf.mpi", "ibp",
               "--data", "cambridge", "--n", str(args.n), "--sigma-x", "0.5",
               "--samples", str(args.iterations), "--burnin", "0", "--seed", str(seed),
               "--split-merge", str(split_merge), "--out", out]
    subprocess.run(command, env=env, check=True, capture_output=True, text=True)
    return pymf.load(out)


def table(rows, columns):
    lines = [" | ".join(f"{c:>22s}" for c in columns)]
    for row in rows:
        cells = []
        for c in columns:
            v = row.get(c)
            cells.append(f"{v:>22.4g}" if isinstance(v, float) else f"{str(v):>22s}")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--n", type=int, default=1000)
    p.add_argument("--iterations", type=int, default=1000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--threads", type=int, default=None, help="OpenMP threads of the hybrid")
    p.add_argument("--mpi", action="store_true", help="also run the hybrid under mpiexec")
    p.add_argument("--large", type=int, default=0, help="rows of the scaling run (0: none)")
    p.add_argument("--large-iterations", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--seeds", type=int, nargs="+", default=None,
                   help="run every method once per seed (the data stay those of --seed)")
    p.add_argument("--split-merge", type=int, nargs="+", default=[0],
                   help="split-merge proposals per iteration; one set of methods per value")
    p.add_argument("--sub-iterations", type=int, nargs="+", default=[5],
                   help="the hybrid's sub-iterations L per outer iteration (the paper's 5); "
                        "one hybrid per value, named '... L=1' unless the value is 5")
    p.add_argument("--warm-start", type=int, nargs="+", default=[0],
                   help="the hybrid's warm start W (the first W iterations, every process "
                        "proposes features; 0: none, the default); one hybrid per value, "
                        "named '... W=...' unless the value is 0")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results", "ibp"))
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)
    X, _, A_true = pymf.datasets.make_cambridge(n=args.n, sigma_x=0.5, seed=args.seed)
    mask = pymf.ibp.checkerboard_mask(*X.shape, 0.1)
    methods = []
    for sm in args.split_merge:
        tag = f" SM={sm}" if sm else ""
        methods.append(("collapsed" + tag, lambda sm=sm: pymf.CollapsedIBP(split_merge=sm),
                        "threads", 1, sm))
        for P in args.processes:
            for L in args.sub_iterations:
                for W in args.warm_start:
                    sub = ("" if L == 5 else f" L={L}") + ("" if W == 0 else f" W={W}")
                    methods.append((f"hybrid P={P}{sub}{tag}",
                                    lambda P=P, sm=sm, L=L, W=W: pymf.HybridIBP(
                                        processes=P, sub_iterations=L, warm_start=W,
                                        n_threads=args.threads, split_merge=sm),
                                    "threads", args.threads or os.cpu_count(), sm))
        if args.mpi:
            for P in args.processes:
                methods.append((f"hybrid P={P} MPI{tag}", P, "mpi", P, sm))
    seeds = [args.seed] if args.seeds is None else args.seeds
    rows, runs = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for (base, make, backend, workers, sm), seed in [(m, s) for m in methods for s in seeds]:
            name = base if args.seeds is None else f"{base} seed={seed}"
            results = []
            for _ in range(args.repeats):
                res = (run_threads(make(), X, mask, args.iterations, seed)
                       if backend == "threads" else run_mpi(make, args, tmp, sm, seed))
                results.append(res)
            summaries = [summarise(r, args.iterations, X, mask) for r in results]
            median = min(range(len(results)),
                         key=lambda i: abs(summaries[i]["total_seconds"] - statistics.median(
                             s["total_seconds"] for s in summaries)))
            row = {"method": name, "base_method": base, "seed": seed, "split_merge": sm,
                   "backend": backend, "workers": workers, **summaries[median],
                   "seconds_per_iteration_all": [s["seconds_per_iteration"] for s in summaries]}
            if sm:
                trace = results[median].trace
                row["split_accepted"] = float(trace["split_accept"][-1])
                row["merge_accepted"] = float(trace["merge_accept"][-1])
                row["split_merge_proposed"] = float(trace["split_merge_proposed"][-1])
            runs[name] = results[median]
            rows.append(row)
            results[median].features_png(os.path.join(
                args.out, "ibp_features_" + name.replace(" ", "_").replace("=", "") + ".png"))
    t_c = rows[0]  # the first collapsed run (of the first seed and split-merge setting)
    target = t_c["final_heldout_loglik"]
    for row in rows:
        res = runs[row["method"]]
        times = np.asarray(res.trace["time"])
        reach = first_reach(times, res.trace["heldout_loglik"], target)
        row["time_to_collapsed_plateau"] = reach
        base = t_c["time_to_1pct_heldout"]
        row["ratio_to_collapsed_time"] = None if reach is None or not base else reach / base
        # the same with the proper measure (the predictive density of the held-out cells)
        reach = first_reach(times[1:], res.trace["predictive_half_window"][1:],
                            t_c["final_predictive_loglik"])
        row["time_to_collapsed_predictive"] = reach
        base = t_c["time_to_1pct_predictive"]
        row["ratio_to_collapsed_predictive_time"] = (None if reach is None or not base
                                                     else reach / base)
        # the same ratio in iterations times CPU seconds per iteration: how many iterations
        # each needs, priced at its mean CPU cost (a whole run's CPU seconds / iterations)
        reach_it = first_reach(np.asarray(res.trace["iteration"])[1:],
                               res.trace["predictive_half_window"][1:],
                               t_c["final_predictive_loglik"])
        row["iterations_to_collapsed_predictive"] = reach_it
        base_it = t_c["iterations_to_1pct_predictive"]
        row["ratio_to_collapsed_predictive_cpu"] = (
            None if reach_it is None or not base_it or row["cpu_seconds_per_iteration"] is None
            else
            reach_it * row["cpu_seconds_per_iteration"] /
            (base_it * t_c["cpu_seconds_per_iteration"]))
    document = {"data": {"n": args.n, "d": 36, "sigma_x_true": 0.5, "held_out_cells": int(mask.sum())},
                "iterations": args.iterations, "repeats": args.repeats, "cpu_count": os.cpu_count(),
                # the hybrid's OpenMP threads (--threads; none given: every core)
                "threads": args.threads or os.cpu_count(),
                "targets": {"collapsed_seconds_per_sweep": 0.01,
                            "hybrid_P2_plateau_seconds": 1.0,
                            "hybrid_P2_ratio_to_collapsed": 0.3},
                "rows": rows, "by_method": by_method(rows)}
    # the truth's features, for the figure
    pymf.ibp.IBPResult.features_png(_Truth(A_true, X.shape), os.path.join(args.out, "ibp_features_truth.png"))
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for name, res in runs.items():
        t = np.maximum(np.asarray(res.trace["time"]), 1e-4)
        axes[0].plot(t, res.trace["heldout_loglik"], label=name)
        axes[1].plot(t[1:], res.trace["predictive_half_window"][1:], label=name)
    for ax, title in zip(axes, ("held-out log p(X_test, Z) (the paper's)",
                                "log predictive density of held-out cells (draws (t/2, t])")):
        ax.set_xscale("log")
        ax.set_xlabel("wall time (s)")
        ax.set_title(title, fontsize=10)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.path.join(args.out, "ibp_cambridge_heldout.png"), dpi=100)
    if args.large:
        document["large"] = large_run(args)
    write_json(os.path.join(args.out, "ibp_cambridge.json"), document, indent=2)
    print(json_text(document, indent=None))
    print(table(rows, ["method", "seconds_per_iteration", "cpu_seconds_per_iteration",
                       "iterations_to_1pct_predictive", "iterations_to_collapsed_predictive",
                       "ratio_to_collapsed_predictive_cpu", "time_to_1pct_heldout",
                       "time_to_1pct_predictive", "time_to_collapsed_plateau",
                       "ratio_to_collapsed_time", "ratio_to_collapsed_predictive_time",
                       "final_K", "final_K_major",
                       "final_sigma_x", "final_predictive_loglik", "coverage_90"]),
          file=sys.stderr)
    if args.seeds is not None:
        print(table(document["by_method"], ["method", "seeds", "seconds_per_iteration",
                                            "final_K", "final_K_major", "final_K_major_all",
                                            "final_sigma_x", "final_predictive_loglik",
                                            "coverage_90", "moves_accepted"]), file=sys.stderr)
    if args.large:
        print(table(document["large"], ["method", "n", "seconds_per_iteration", "final_K"]),
              file=sys.stderr)


def by_method(rows):
    """Per method (over its seeds): the means of the final K+, K+ of >= 1 % of the rows,
    sigma_x and predictive log density, the median seconds per iteration, and every seed's
    K_major."""
    out = []
    for base in dict.fromkeys(r["base_method"] for r in rows):
        group = [r for r in rows if r["base_method"] == base]
        mean = lambda key: float(np.mean([r[key] for r in group]))  # noqa: E731
        out.append({"method": base, "seeds": str([r["seed"] for r in group]),
                    "seconds_per_iteration": float(np.median(
                        [r["seconds_per_iteration"] for r in group])),
                    "final_K": mean("final_K"), "final_K_major": mean("final_K_major"),
                    "final_K_major_all": str([round(r["final_K_major"], 2) for r in group]),
                    "final_sigma_x": mean("final_sigma_x"),
                    "final_predictive_loglik": mean("final_predictive_loglik"),
                    "coverage_90": mean("coverage_90"),
                    "moves_accepted": str([r.get("split_accepted", 0) + r.get("merge_accepted", 0)
                                           for r in group])})
    return out


class _Truth:
    """The true Z and A in the shape features_png reads."""

    def __init__(self, A, shape):
        self._kept_A, self.shape = [], shape
        self.last_state = {"Z": np.ones((1, A.shape[0])), "A": A}


def large_run(args):
    X, _, _ = pymf.datasets.make_cambridge(n=args.large, sigma_x=0.5, seed=args.seed)
    out = []
    samplers = [("collapsed", pymf.CollapsedIBP())] + [
        (f"hybrid P={P}", pymf.HybridIBP(processes=P, n_threads=args.threads))
        for P in args.processes]
    for name, sampler in samplers:
        started = time.perf_counter()
        res = pymf.sample(pymf.IBPLinearGaussian(), X, sampler, n_samples=args.large_iterations,
                          seed=args.seed, progress=False, trace_every=args.large_iterations,
                          keep_samples=False)
        out.append({"method": name, "n": args.large,
                    "seconds_per_iteration": float(res.trace["time"][-1]) / args.large_iterations,
                    "wall_seconds": time.perf_counter() - started,
                    "final_K": float(res.trace["K"][-1])})
    return out


if __name__ == "__main__":
    main()
