#!/usr/bin/env python3
"""Defaults only: BPMF on MovieLens-100K with nothing but the rank given (issue "works
without tuning").

Data: ../shared/data/ml-100k.data (never copied into the repository), a random 80/20 split
(Ratings.split, seed --split-seed 0). Model pymf.BPMF(10) (tau="sample"); samplers
pymf.DSGLD(n_threads=T) and pymf.BPMFGibbs(n_threads=T), every other setting their default.

  DSGLD  pymf.sample(..., n_samples=4000, burnin=200, thin=5) (bench/bpmf_movielens.py's
         burn-in and thinning), stopped by a callback after --budget seconds of sampling
         (10): the test RMSE of the running mean prediction when it stops. Target: <= 0.900
         within 10 s.
  Gibbs  --gibbs-sweeps sweeps (600, bench/bpmf_movielens.py's baseline length) with
         burn-in --gibbs-burnin (100). Target: <= 0.895.
  both   90 % posterior predictive interval coverage of the held-out ratings
         (Result.coverage, noise included). Target: 0.88 - 0.92.

--dsgld-step-factor F (with --skip-gibbs, DSGLD alone) measures the default with its
"auto" eps0 times F, the setting bench/coverage_search.py found on the developers' split;
--dsgld-stability-only measures "auto" without its per-row bound (AutoStep(per_row=False),
the default before it), for a comparison at the same machine load.
Median over --repeats seeds (0, 1, 2); threads --threads (2). Output: JSON (stdout and
OUT/defaults.json), a table, OUT/defaults.png (test RMSE against time, first seed, and the
calibration curves). Missed targets are reported as missed. A DSGLD run whose --budget ends
inside its 200-round burn-in keeps no draw: it is reported as stopped in the burn-in, its
RMSE counted as +inf in the median (a missed target), its coverage and tau left out.
"""
import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import (HelpFormatter, add_movielens_options, emit, movielens_split,  # noqa: E402
                     table)

import pymf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
TARGETS = {"DSGLD": {"rmse": 0.900, "seconds": 10.0}, "BPMF Gibbs": {"rmse": 0.895},
           "coverage_90": (0.88, 0.92)}
DSGLD_BURNIN = 200  # rounds: bench/bpmf_movielens.py's burn-in


def run_dsgld(train, test, rank, seed, threads, budget, step_factor=1.0, stability_only=False):
    """step_factor != 1: the default's annealed step with eps0 times this factor (the
    "auto" eps0 found by a one-round run first, outside the timing; bench/coverage_search.py
    chose the factor on the developers' split). stability_only: step_size=
    pymf.AutoStep(per_row=False), the default "auto" without its per-row bound."""
    def stop(info):
        return info["time"] >= budget

    sampler = pymf.DSGLD(n_threads=threads,
                         step_size=pymf.AutoStep(per_row=False) if stability_only else "auto")
    if step_factor != 1.0:
        probe = pymf.sample(pymf.BPMF(rank), train, sampler, n_samples=1, seed=seed,
                            progress=False)
        step = probe.params["sampler"]["step_size"]
        sampler = pymf.DSGLD(n_threads=threads, step_size=pymf.AnnealedStep(
            step["eps0"] * step_factor, step["kappa"], step["gamma"]))
    started = time.perf_counter()
    res = pymf.sample(pymf.BPMF(rank), train, sampler, n_samples=4000, burnin=DSGLD_BURNIN,
                      thin=5, seed=seed, test=test, callback=stop, progress=False)
    return res, time.perf_counter() - started


def run_gibbs(train, test, rank, seed, threads, sweeps, burnin):
    started = time.perf_counter()
    res = pymf.sample(pymf.BPMF(rank), train, pymf.BPMFGibbs(n_threads=threads),
                      n_samples=sweeps - burnin, burnin=burnin, seed=seed, test=test,
                      progress=False)
    return res, time.perf_counter() - started


def summarise(res, wall, test):
    """The run's figures; a run that kept no draw (a DSGLD budget that ended in the burn-in)
    has no RMSE, coverage or tau: only its time, units and the failure."""
    if res.test_count == 0:
        return {"failure": f"stopped in the {DSGLD_BURNIN}-round burn-in at round "
                           f"{int(res.iterations)}: no kept draw (raise --budget)",
                "sampling_seconds": float(res.trace["time"][-1]), "wall_seconds": wall,
                "units": int(res.iterations)}
    cal = res.calibration(test)
    return {"final_rmse": float(res.trace["test_rmse"][-1]),
            "sampling_seconds": float(res.trace["time"][-1]), "wall_seconds": wall,
            "units": int(res.iterations), "kept": int(res.test_count),
            "tau_mean": float(sum(map(float, res.sample_stats["tau"].ravel()))
                              / res.sample_stats["tau"].size),
            "coverage": dict(zip(map(str, cal["levels"]), cal["coverage"])),
            "calibration": cal,
            "trace": {"time": [float(x) for x in res.trace["time"]],
                      "test_rmse": [float(x) for x in res.trace["test_rmse"]]}}


def plot(path, first_runs):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, run in first_runs.items():
        left.plot(run["trace"]["time"], run["trace"]["test_rmse"], label=name)
        cal = run["calibration"]
        right.plot(cal["levels"], cal["coverage"], "o-", label=name)
    left.axhline(TARGETS["DSGLD"]["rmse"], color="0.6", ls="--", lw=1)
    left.axhline(TARGETS["BPMF Gibbs"]["rmse"], color="0.6", ls=":", lw=1)
    left.set_xscale("log")
    left.set_ylim(0.88, 0.95)
    left.set_xlabel("sampling time (s)")
    left.set_ylabel("test RMSE (running mean)")
    left.legend()
    right.plot([0, 1], [0, 1], color="0.6", lw=1)
    right.set_xlabel("nominal coverage")
    right.set_ylabel("observed coverage (held-out ratings)")
    right.legend()
    fig.suptitle("MovieLens-100K, defaults only, rank 10 (first seed)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def seed_summary(run):
    if "failure" in run:
        return f"{run['failure']} ({run['sampling_seconds']:.1f} s)"
    return (f"{run['final_rmse']:.4f} ({run['sampling_seconds']:.1f} s, coverage90 "
            f"{run['coverage']['0.9']:.3f})")


def median_of_kept(runs, value):
    """Median of value(run) over the runs that kept draws; None where none did."""
    values = [value(r) for r in runs if "failure" not in r]
    return statistics.median(values) if values else None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    add_movielens_options(p)
    p.add_argument("--rank", type=int, default=10, help="BPMF's rank")
    p.add_argument("--repeats", type=int, default=3, help="seeds 0, 1, ...: medians over them")
    p.add_argument("--threads", type=int, default=2, help="threads of both samplers")
    p.add_argument("--budget", type=float, default=10.0,
                   help=f"DSGLD's seconds of sampling; they must cover its {DSGLD_BURNIN}-round "
                        "burn-in (a few seconds here) for it to keep draws")
    p.add_argument("--dsgld-step-factor", type=float, default=1.0,
                   help="DSGLD's auto eps0 times this (1: the default)")
    p.add_argument("--dsgld-stability-only", action="store_true",
                   help="DSGLD with AutoStep(per_row=False): the stability rule without the "
                        "default's per-row bound (the default before it)")
    p.add_argument("--skip-gibbs", action="store_true", help="DSGLD only")
    p.add_argument("--gibbs-sweeps", type=int, default=600, help="Gibbs' sweeps, burn-in included")
    p.add_argument("--gibbs-burnin", type=int, default=100, help="Gibbs' burn-in sweeps")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results", "defaults"),
                   help="folder of defaults.json and defaults.png")
    args = p.parse_args(argv)
    train, test = movielens_split(args)
    runs = {"DSGLD": [], "BPMF Gibbs": []}
    for seed in range(args.repeats):
        res, wall = run_dsgld(train, test, args.rank, seed, args.threads, args.budget,
                              args.dsgld_step_factor, args.dsgld_stability_only)
        runs["DSGLD"].append(summarise(res, wall, test))
        if not args.skip_gibbs:
            res, wall = run_gibbs(train, test, args.rank, seed, args.threads, args.gibbs_sweeps,
                                  args.gibbs_burnin)
            runs["BPMF Gibbs"].append(summarise(res, wall, test))
        print(f"seed {seed}: " + ", ".join(f"{k} {seed_summary(v[-1])}"
                                           for k, v in runs.items() if v), file=sys.stderr,
              flush=True)
    rows, results = [], []
    lo, hi = TARGETS["coverage_90"]
    runs = {name: rs for name, rs in runs.items() if rs}
    for name, rs in runs.items():
        median = {key: statistics.median(r[key] for r in rs)
                  for key in ("sampling_seconds", "wall_seconds", "units")}
        # a run stopped in the burn-in reached no RMSE: +inf, a missed target
        median["final_rmse"] = statistics.median(r.get("final_rmse", math.inf) for r in rs)
        median["tau_mean"] = median_of_kept(rs, lambda r: r["tau_mean"])
        median["coverage_90"] = median_of_kept(rs, lambda r: r["coverage"]["0.9"])
        stopped = sum("failure" in r for r in rs)
        target = TARGETS[name]
        met_rmse = median["final_rmse"] <= target["rmse"]
        met_time = median["sampling_seconds"] <= target.get("seconds", float("inf")) + 0.5
        met_cov = median["coverage_90"] is not None and lo <= median["coverage_90"] <= hi
        results.append({"method": name, **median, "targets": target, "coverage_target": [lo, hi],
                        "rmse_target_met": met_rmse, "time_target_met": met_time,
                        "coverage_target_met": met_cov, "runs_stopped_in_burnin": stopped,
                        "runs": [{k: v for k, v in r.items() if k not in ("trace", "calibration")}
                                 for r in rs]})
        rows.append({"method": name, "rmse": median["final_rmse"], "target": target["rmse"],
                     "rmse_met": "met" if met_rmse and met_time else "MISSED",
                     "seconds": median["sampling_seconds"], "units": median["units"],
                     "tau": median["tau_mean"], "cov90": median["coverage_90"],
                     "cov_met": "met" if met_cov else "MISSED"})
    # each method's first run that kept draws (one stopped in the burn-in has no curve)
    first_kept = {}
    for name, rs in runs.items():
        kept = [r for r in rs if "failure" not in r]
        if kept:
            first_kept[name] = kept[0]
    os.makedirs(args.out, exist_ok=True)
    document = {"benchmark": "defaults", "data": os.path.abspath(args.data),
                "split": {"test_fraction": 0.2, "seed": args.split_seed, "train": train.nnz,
                          "test": test.nnz},
                "rank": args.rank, "threads": args.threads, "repeats": args.repeats,
                "dsgld_step_factor": args.dsgld_step_factor,
                "dsgld_stability_only": args.dsgld_stability_only, "load_average": os.getloadavg(),
                "dsgld_budget_seconds": args.budget, "gibbs_sweeps": args.gibbs_sweeps,
                "defaults": {"model": pymf.BPMF(args.rank).params(),
                             "dsgld": pymf.DSGLD().params(), "gibbs": pymf.BPMFGibbs().params()},
                "results": results,
                "plot": plot(os.path.join(args.out, "defaults.png"), first_kept)}
    emit(document, os.path.join(args.out, "defaults.json"))
    table(rows, [("method", "method", ""), ("test RMSE", "rmse", ".4f"), ("target", "target", ".3f"),
                 ("RMSE/time", "rmse_met", ""), ("seconds", "seconds", ".1f"),
                 ("units", "units", ".0f"), ("tau", "tau", ".3f"), ("coverage 90%", "cov90", ".3f"),
                 ("0.88-0.92", "cov_met", "")])
    for result in results:
        if result["runs_stopped_in_burnin"]:
            print(f"{result['method']}: {result['runs_stopped_in_burnin']} of {args.repeats} runs "
                  f"stopped in the {DSGLD_BURNIN}-round burn-in (no kept draw): raise --budget")


if __name__ == "__main__":
    main()
