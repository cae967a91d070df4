#!/usr/bin/env python3
"""DSGLD against BPMF Gibbs where the DSGLD paper's claim lives: a ratings matrix of
MovieLens-10M's shape (bench/ratings_10m.py: 71,567 x 10,681, 10M ratings from a documented
low-rank model, 10 % held out).

For each rank D (--ranks, default 10 and 30): BPMF Gibbs runs --gibbs-sweeps sweeps (100);
its test RMSE of the running average after them is the level to reach. Each DSGLD
configuration (square 2x2 and hybrid 4x2 splits, --chains chains; rounds of 10 steps of
--batch-size ratings, AnnealedStep(eps0, kappa=1000), precisions every 10 rounds, burn-in
--burnin rounds) runs until it reaches that level or for as long as Gibbs took. Reported:
Gibbs' seconds per sweep, DSGLD's seconds per round, the time each method needs to reach
Gibbs' 100-sweep RMSE, the ratio (target: DSGLD >= 10x sooner), and the RMSE-against-time
curves (PNG). tau = 1/0.8^2 (the generator's noise) is fixed for every method, so that
the comparison is of the samplers, not of a noise model. Threads: --threads (default: all
cores); the machine's dgemm rate is measured in the same run. --auto-cost PAIRS also
measures what step_size="auto" costs a run, against Gibbs' seconds in the same process
(issue "works without tuning": <= 5 % of a typical run).
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, emit, plot_traces, table  # noqa: E402
import ratings_10m  # noqa: E402

import pymf  # noqa: E402

TAU = 1 / 0.8 ** 2


def first_time_below(times, rmse, level):
    below = np.flatnonzero(np.asarray(rmse) <= level)
    return float(times[below[0]]) if below.size else math.inf


def trace_of(res):
    return (np.asarray(res.trace["time"], float), np.asarray(res.trace["test_rmse"], float))


def dgemm_gflops():
    a = np.random.default_rng(0).random((1024, 1024))
    best = math.inf
    for _ in range(3):
        started = time.perf_counter()
        a @ a
        best = min(best, time.perf_counter() - started)
    return 2 * 1024 ** 3 / best / 1e9


def auto_cost(model, train, test, args, threads, gibbs_seconds):
    """What step_size="auto" costs a DSGLD run here: the median over alternated pairs of the
    wall time of a short run (2 x --burnin rounds, traced at the burn-in's end, so that the
    pilot's 20 rounds are the run's own when the burn-in is 20 or more) with "auto" minus the
    same run with the step it chose given by hand. The difference holds the curvature's
    Lanczos steps, the per-row measurement at the burn-in's end and the bounded rounds'
    extra work; each pair also carries the runs' spread on a shared machine."""
    blocks = 2 if args.splits[-1] == "square" else (4, 2)

    def one(step):
        sampler = pymf.DSGLD(chains=args.chains, split=args.splits[-1], blocks=blocks,
                             batch_size=args.batch_size, round_length=10, step_size=step,
                             hyper_every=10, n_threads=threads)
        started = time.perf_counter()
        res = pymf.sample(model, train, sampler, n_samples=args.burnin, burnin=args.burnin,
                          thin=10, seed=0, test=test, keep_samples=False,
                          trace_every=args.burnin, progress=False)
        return time.perf_counter() - started, res

    _, first = one("auto")  # the step "auto" chooses, and a warm-up
    chosen = first.params["sampler"]["step_size"]
    given = pymf.AnnealedStep(chosen["eps0"], chosen["kappa"], chosen["gamma"])
    differences = []
    for _ in range(args.auto_cost):
        auto_seconds, _ = one("auto")
        given_seconds, _ = one(given)
        differences.append(auto_seconds - given_seconds)
    median = statistics.median(differences)
    return {"pairs": args.auto_cost, "rounds": 2 * args.burnin, "differences": differences,
            "median_seconds": median, "share_of_gibbs": median / gibbs_seconds,
            "auto_step": first.params["auto_step"]}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--ranks", type=int, nargs="+", default=[10, 30])
    p.add_argument("--ratings", type=int, default=ratings_10m.N_RATINGS)
    p.add_argument("--matrix", default="results/ratings_10m.npz")
    p.add_argument("--gibbs-sweeps", type=int, default=100)
    p.add_argument("--chains", type=int, default=None,
                   help="DSGLD chains (default: the sampler's, one per orthogonal group)")
    p.add_argument("--batch-size", type=int, default=10_000)
    p.add_argument("--burnin", type=int, default=20, help="DSGLD rounds before averaging")
    p.add_argument("--eps0", nargs="+", default=["auto", "3e-6", "1e-6"],
                   help="DSGLD steps: 'auto' (pymf's step rule) or eps0 of AnnealedStep(eps0, "
                        "kappa=1000); each is one run per split")
    p.add_argument("--gibbs-from", default=None,
                   help="a JSON of an earlier run of this benchmark on the same matrix: reuse "
                        "its Gibbs level, time and curve instead of running Gibbs again")
    p.add_argument("--splits", nargs="+", default=["square", "hybrid"])
    p.add_argument("--auto-cost", type=int, default=0, metavar="PAIRS",
                   help="also measure what step_size='auto' costs: PAIRS alternated pairs of "
                        "short runs (the last split, 2 x the burn-in rounds, traced at the "
                        "burn-in's end) with 'auto' and with the step it chose given by hand; "
                        "the median difference, against Gibbs' seconds (target: <= 5 %%)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", default="results/dsgld_large")
    args = p.parse_args(argv)
    threads = args.threads or os.cpu_count()
    started = time.perf_counter()
    ratings = ratings_10m.load(args.matrix, args.ratings)
    train, test = ratings.split(0.1, seed=0)
    setup_seconds = time.perf_counter() - started
    document = {"benchmark": "dsgld_large", "shape": list(ratings.shape),
                "ratings": len(ratings.values), "train": len(train.values), "tau": TAU,
                "cores": os.cpu_count(), "threads": threads, "dgemm_gflops": dgemm_gflops(),
                "setup_seconds": setup_seconds, "ranks": {}}
    panels, rows = [], []
    for D in args.ranks:
        model = pymf.BPMF(D, tau=TAU)
        earlier = None
        if args.gibbs_from:
            with open(args.gibbs_from) as fh:
                earlier = json.load(fh)["ranks"].get(str(D))
        if earlier is not None:
            g_times = np.asarray(earlier.get("gibbs_times", [earlier["gibbs_seconds"]]))
            g_rmse = np.asarray(earlier.get("gibbs_rmses", [earlier["gibbs_rmse"]]))
        else:
            gibbs = pymf.sample(model, train, pymf.BPMFGibbs(n_threads=threads),
                                n_samples=args.gibbs_sweeps, burnin=0, seed=0, test=test,
                                keep_samples=False, trace_every=1)
            g_times, g_rmse = trace_of(gibbs)
        level = float(g_rmse[-1])
        gibbs_seconds = float(g_times[-1])
        curves = {f"Gibbs ({args.gibbs_sweeps} sweeps)": (g_times, g_rmse)}
        entry = {"gibbs_rmse": level, "gibbs_seconds": gibbs_seconds,
                 "gibbs_seconds_per_sweep": gibbs_seconds / args.gibbs_sweeps,
                 "gibbs_reused_from": args.gibbs_from if earlier is not None else None,
                 "gibbs_times": g_times.tolist(), "gibbs_rmses": g_rmse.tolist(), "dsgld": []}
        rows.append({"D": D, "method": "BPMF Gibbs", "seconds_per_unit": gibbs_seconds / args.gibbs_sweeps,
                     "final_rmse": level, "time_to_level": gibbs_seconds, "times_sooner": 1.0})
        for split in args.splits:
            for eps0 in args.eps0:
                step = "auto" if eps0 == "auto" else pymf.AnnealedStep(float(eps0), kappa=1000)
                blocks = 2 if split == "square" else (4, 2)
                sampler = pymf.DSGLD(chains=args.chains, split=split, blocks=blocks,
                                     batch_size=args.batch_size, round_length=10,
                                     step_size=step,
                                     hyper_every=10, n_threads=threads)
                stop = lambda info: (info["time"] >= gibbs_seconds or  # noqa: E731
                                     info.get("test_rmse", math.inf) <= level)
                try:
                    res = pymf.sample(model, train, sampler, n_samples=10 ** 8,
                                      burnin=args.burnin, thin=10, seed=0, test=test,
                                      keep_samples=False, trace_every=20, callback=stop)
                except pymf.errors.DivergenceError as exc:
                    entry["dsgld"].append({"split": split, "eps0": eps0, "diverged": str(exc)})
                    continue
                times, rmse = trace_of(res)
                rounds = int(res.trace["iteration"][-1])
                reach = first_time_below(times, rmse, level)
                auto = res.params.get("auto_step")
                name = f"DSGLD {split} eps0={eps0}"
                curves[name] = (times, rmse)
                entry["dsgld"].append({"split": split, "eps0": eps0, "auto_step": auto,
                                       "rounds": rounds,
                                       "seconds_per_round": float(times[-1]) / max(rounds, 1),
                                       "final_rmse": float(rmse[-1]),
                                       "time_to_gibbs_rmse": reach,
                                       "times_sooner": gibbs_seconds / reach if reach else math.inf})
                rows.append({"D": D, "method": name,
                             "seconds_per_unit": float(times[-1]) / max(rounds, 1),
                             "final_rmse": float(rmse[-1]), "time_to_level": reach,
                             "times_sooner": gibbs_seconds / reach})
        if args.auto_cost:
            entry["auto_cost"] = auto_cost(model, train, test, args, threads, gibbs_seconds)
            cost = entry["auto_cost"]
            print(f"D = {D}: 'auto' costs {cost['median_seconds']:.2f} s (pairs: "
                  f"{', '.join(f'{x:.2f}' for x in cost['differences'])}), "
                  f"{100 * cost['share_of_gibbs']:.1f} % of Gibbs' {gibbs_seconds:.1f} s "
                  f"(target 5 %: {'met' if cost['share_of_gibbs'] <= 0.05 else 'MISSED'})",
                  flush=True)
        document["ranks"][str(D)] = entry
        panels.append((f"D = {D}", curves))
    document["plot"] = plot_traces(panels, args.out + ".png",
                                   "DSGLD vs BPMF Gibbs, 10M synthetic ratings", "test RMSE")
    emit(document, args.out + ".json")
    table(rows, [("D", "D", "d"), ("method", "method", "s"),
                 ("s per sweep/round", "seconds_per_unit", ".4f"),
                 ("final RMSE", "final_rmse", ".4f"),
                 ("s to Gibbs' RMSE", "time_to_level", ".1f"),
                 ("x sooner", "times_sooner", ".2f")])


if __name__ == "__main__":
    main()
