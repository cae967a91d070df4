#!/usr/bin/env python3
"""BPMF on MovieLens-100K: DSGLD (square and column splits), SGLD, SGD, DSGD and BPMF Gibbs
(DSGLD paper, Fig. 3, on one small machine).

Data: ../shared/data/ml-100k.data (never copied into the repository), a fixed random 80/20
split of the ratings (Ratings.split, seed --split-seed, default 0). For each rank D and each
repeat (seed 0, 1, ...), every method runs for --budget seconds of wall time (Gibbs: a
fixed --gibbs-sweeps sweeps, the baseline of the "10x sooner" target), tracking the test
RMSE of its running average prediction (samplers) or of its current state (optimisers)
against wall time. Reported: the median over repeats of the final RMSE, of the time to
reach RMSE 0.890, and of the time to reach the RMSE that Gibbs has after its sweeps (the
median of Gibbs' final RMSEs). A run that never reaches a level counts as +inf in the median
of its time, so a time is given when at least half the runs reach the level (exactly half of
an even number: the slowest of those that do); the table and JSON say how many runs of
--repeats reached it. A sampler run whose --budget ends inside its 200-round burn-in keeps
no draw: it has no RMSE, reaches no level and is counted as stopped in the burn-in.

Settings (documented, shared by all methods): tau = --tau (1.5: the paper's 2.0 over-fits
here, see the README), alpha0 = beta0 = 1, biases on, initial precisions 2; DSGLD/SGLD
minibatch 1000 ratings, rounds of 10 steps, eps_t = eps0 (1 + t/1000)^-0.51 per round,
precisions drawn every 10 rounds, burn-in 200 rounds, thinning 5 rounds; the step sizes
eps0 are per method (the largest of a x0.5 ladder that did not diverge here, as the paper
chose its eps0 from a range). SGD and DSGD optimise the log posterior with the precisions
fixed at --map-precision (25: the best of 2, 10, 25, 50, 100 on this split for SGD at D=10 -
tuned on the test set, which favours the optimisers). Threads: --threads (default: all
cores).

Also measured: split-R-hat / ESS across the DSGLD chains (first repeat), and the cost of a
DSGLD-S round under the MPI parameter server (--mpi-ranks 5: a server and one worker per
block, oversubscribing the cores) against shared memory, with the bytes a round moves.

Output: JSON (stdout and OUT/bpmf_movielens.json), a table, and OUT/bpmf_movielens.png
(RMSE against wall time, log time axis, one panel per D, first repeat).
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, emit, median_time_to_level, plot_traces, table  # noqa: E402

import pymf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "..", "shared", "data", "ml-100k.data")
TARGET_RMSE = 0.890
SAMPLER_BURNIN = 200  # rounds of DSGLD and SGLD before their running average starts


def methods(threads):
    step = lambda eps0: pymf.AnnealedStep(eps0, kappa=1000)  # noqa: E731
    common = dict(batch_size=1000, round_length=10, hyper_every=10, n_threads=threads)
    return {
        "DSGLD-S (2x2)": ("sample", lambda: pymf.DSGLD(split="square", blocks=2,
                                                         step_size=step(1e-3), **common)),
        "DSGLD-C (4x1)": ("sample", lambda: pymf.DSGLD(split="column", blocks=4,
                                                         step_size=step(2.5e-4), **common)),
        "SGLD": ("sample", lambda: pymf.DSGLD(chains=1, split="square", blocks=1,
                                              step_size=step(5e-4), **common)),
        "SGD": ("fit", lambda: pymf.SGD(step_size=pymf.AnnealedStep(5e-4, 1000),
                                        batch_size=1000, n_threads=threads)),
        "DSGD (2x2)": ("fit", lambda: pymf.DSGD(blocks=2, step_size=pymf.AnnealedStep(1e-3, 1000),
                                                n_threads=threads)),
        "BPMF Gibbs": ("gibbs", lambda: pymf.BPMFGibbs(n_threads=threads)),
        # the exact sampler of the model DSGLD samples (diagonal precisions): a reference
        "Gibbs (DSGLD's model)": ("gibbs", lambda: pymf.BPMFGibbs("gamma", n_threads=threads)),
    }


def first_time_below(times, rmse, level):
    if level is None:
        return math.inf
    below = np.flatnonzero(np.asarray(rmse) <= level)
    return float(times[below[0]]) if below.size else math.inf


def run_one(kind, make, model, train, test, seed, budget, gibbs_sweeps, map_precision):
    stop = lambda info: info["time"] >= budget  # noqa: E731
    started = time.perf_counter()
    if kind == "fit":
        # MAP needs a stronger fixed prior than the samplers' starting precisions
        map_model = pymf.BPMF(model.rank, tau=model.tau, init_precision=map_precision)
        res = pymf.fit(map_model, train, make(), n_epochs=100000, seed=seed, test=test,
                       callback=stop)
    elif kind == "gibbs":
        res = pymf.sample(model, train, make(), n_samples=gibbs_sweeps, burnin=0, seed=seed,
                          test=test, keep_samples=False, trace_every=5)
    else:
        res = pymf.sample(model, train, make(), n_samples=10 ** 7, burnin=SAMPLER_BURNIN, thin=5,
                          seed=seed, test=test, keep_samples=False, trace_every=10, callback=stop)
        if res.test_count == 0:  # the budget ended in the burn-in: no kept draw, no RMSE
            return {"times": np.zeros(0), "rmse": np.zeros(0), "final_rmse": None,
                    "seconds": float(res.trace["time"][-1]),
                    "wall_seconds": time.perf_counter() - started, "units": int(res.iterations),
                    "failure": f"stopped in the {SAMPLER_BURNIN}-round burn-in at round "
                               f"{int(res.iterations)} (raise --budget)"}
    wall = time.perf_counter() - started
    times = np.asarray(res.trace["time"], dtype=float)
    rmse = np.asarray(res.trace["test_rmse"], dtype=float)
    units = res.trace["epoch" if kind == "fit" else "iteration"]
    out = {"times": times, "rmse": rmse, "final_rmse": float(rmse[-1]), "seconds": float(times[-1]),
           "wall_seconds": wall, "units": int(units[-1])}
    if kind == "sample":  # split-R-hat and ESS across the chains (several chains only)
        out["diagnostics"] = {k: {m: round(v, 3) for m, v in d.items()}
                              for k, d in res.diagnostics().items()} if res.summaries["train_rmse"].shape[0] > 1 else None
    return out


def mpi_round_cost(args, D, threads):
    """Seconds per DSGLD-S round under the MPI parameter server (1 server + 4 workers, one
    per block) and in shared memory, same settings, and the bytes a round moves."""
    import json as _json
    import subprocess
    import tempfile
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if not os.path.exists(mpiexec):
        return {"skipped": "no mpiexec beside this Python (install the 'mpi' extra)"}
    rounds = args.mpi_rounds
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe",
               OMPI_MCA_btl_sm_single_copy_mechanism="none")
    common = ["--data", args.data, "--split-seed", str(args.split_seed), "--rank", str(D),
              "--tau", str(args.tau), "--split", "square", "--blocks", "2",
              "--batch-size", "1000", "--round-length", "10", "--eps0", "1e-3",
              "--samples", str(rounds), "--burnin", "0", "--thin", str(rounds),
              "--no-keep-samples"]
    seconds = []
    for n_ranks in (args.mpi_ranks,):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "r.npz")
            proc = subprocess.run([mpiexec, "-n", str(n_ranks), "--bind-to", "none", sys.executable,
                                   "-m", "pymf.mpi", "dsgld", *common, "--out", out], env=env,
                                  capture_output=True, text=True, cwd=tmp, timeout=600)
            if proc.returncode != 0:
                return {"failed": proc.stderr[-500:]}
            seconds.append(_json.loads(proc.stdout.strip().splitlines()[-1])["seconds"])
    ratings = pymf.datasets.load_movielens(args.data)
    train, test = ratings.split(0.2, seed=args.split_seed)
    sampler = pymf.DSGLD(split="square", blocks=2, batch_size=1000, round_length=10,
                         step_size=pymf.AnnealedStep(1e-3, 1000), n_threads=threads)
    res = pymf.sample(pymf.BPMF(D, tau=args.tau), train, sampler, n_samples=rounds, thin=rounds,
                      seed=0, test=test, keep_samples=False)
    L, M = ratings.shape
    per_round = 2 * 2 * 2 * 8 * ((L / 2 + M / 2) * (D + 1))  # 2 chains x 2 blocks x both ways
    return {"ranks": args.mpi_ranks, "workers": args.mpi_ranks - 1, "rounds": rounds,
            "mpi_seconds_per_round": seconds[0] / rounds,
            "shared_memory_seconds_per_round": float(res.trace["time"][-1]) / rounds,
            "shared_memory_threads": threads,
            "sub_parameter_bytes_per_round": int(per_round),
            "full_U_V_bytes_per_chain": int(8 * (L + M) * (D + 1))}


def median_or_none(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main(argv=None):
    method_names = list(methods(1))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA, help="MovieLens-100K's ratings file")
    p.add_argument("--split-seed", type=int, default=0, help="seed of the 80/20 split")
    p.add_argument("--ranks", type=int, nargs="+", default=[10, 30], help="BPMF ranks D")
    p.add_argument("--budget", type=float, default=10.0,
                   help="seconds per method and run; the samplers' must cover their "
                        f"{SAMPLER_BURNIN}-round burn-in for them to keep draws")
    p.add_argument("--gibbs-sweeps", type=int, default=600, help="BPMF Gibbs' sweeps")
    p.add_argument("--repeats", type=int, default=3, help="runs (seeds 0, 1, ...) per method")
    p.add_argument("--tau", type=float, default=1.5, help="the fixed noise precision")
    p.add_argument("--map-precision", type=float, default=25.0,
                   help="fixed precisions of SGD/DSGD (their regularisation)")
    p.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--methods", nargs="+", default=None, metavar="NAME",
                   help="subset of the method names, each quoted (they hold spaces): "
                        + ", ".join(f'"{name}"' for name in method_names))
    p.add_argument("--mpi-ranks", type=int, default=5, help="0: skip the MPI round-cost test")
    p.add_argument("--mpi-rounds", type=int, default=500, help="rounds of the MPI round-cost test")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results", "bpmf_movielens"),
                   help="folder of bpmf_movielens.json and .png")
    args = p.parse_args(argv)
    unknown = [name for name in args.methods or [] if name not in method_names]
    if unknown:
        p.error(f"--methods: unknown {', '.join(map(repr, unknown))}; the names (quote each: "
                "they hold spaces) are " + ", ".join(f'"{name}"' for name in method_names))
    if not os.path.exists(args.data):
        sys.exit(f"MovieLens-100K not found at {args.data} (pass --data)")
    threads = args.threads or os.cpu_count()
    ratings = pymf.datasets.load_movielens(args.data)
    train, test = ratings.split(0.2, seed=args.split_seed)
    table_rows, panels, document = [], [], {
        "benchmark": "bpmf_movielens", "data": os.path.abspath(args.data),
        "split": {"test_fraction": 0.2, "seed": args.split_seed, "train": train.nnz,
                  "test": test.nnz},
        "threads": threads, "budget_seconds": args.budget, "repeats": args.repeats,
        "tau": args.tau, "map_precision": args.map_precision, "target_rmse": TARGET_RMSE,
        "results": []}
    all_methods = methods(threads)
    chosen = args.methods or list(all_methods)
    for D in args.ranks:
        model = pymf.BPMF(D, tau=args.tau)
        runs = {}
        for name in chosen:
            kind, make = all_methods[name]
            runs[name] = [run_one(kind, make, model, train, test, seed, args.budget,
                                  args.gibbs_sweeps, args.map_precision)
                          for seed in range(args.repeats)]
            print(f"D={D} {name}: final RMSE "
                  f"{[r.get('failure') or round(r['final_rmse'], 4) for r in runs[name]]}",
                  file=sys.stderr, flush=True)
        gibbs_level = statistics.median(r["final_rmse"] for r in runs["BPMF Gibbs"]) \
            if "BPMF Gibbs" in runs else None
        gibbs_seconds = statistics.median(r["seconds"] for r in runs["BPMF Gibbs"]) \
            if "BPMF Gibbs" in runs else None
        panel = {}
        for name, rs in runs.items():
            kept = [r for r in rs if "failure" not in r]
            to_target, reached_target = median_time_to_level(
                first_time_below(r["times"], r["rmse"], TARGET_RMSE) for r in rs)
            to_gibbs, reached_gibbs = median_time_to_level(
                first_time_below(r["times"], r["rmse"], gibbs_level) for r in rs)
            at5 = median_or_none(
                float(r["rmse"][max(0, np.searchsorted(r["times"], 5.0, "right") - 1)])
                for r in kept)
            row = {"D": D, "method": name,
                   "final_rmse": median_or_none(r["final_rmse"] for r in rs),
                   "rmse_at_5s": at5,
                   "seconds": statistics.median(r["seconds"] for r in rs),
                   "units": statistics.median(r["units"] for r in rs),
                   "seconds_to_0.890": to_target, "runs_reaching_0.890": reached_target,
                   "seconds_to_gibbs_rmse": to_gibbs if gibbs_level is not None else None,
                   "runs_reaching_gibbs_rmse": reached_gibbs if gibbs_level is not None else None,
                   "runs": len(rs),
                   "speedup_vs_gibbs": (gibbs_seconds / to_gibbs) if to_gibbs and math.isfinite(to_gibbs)
                   and gibbs_seconds else None,
                   "all_final_rmse": [r["final_rmse"] for r in rs],
                   "runs_stopped_in_burnin": len(rs) - len(kept),
                   "diagnostics_first_run": rs[0].get("diagnostics")}
            # the table's "k/n": how many of the n runs reached each level
            table_rows.append({**row, "reached_0.890": f"{reached_target}/{len(rs)}",
                               "reached_gibbs": (None if gibbs_level is None
                                                 else f"{reached_gibbs}/{len(rs)}")})
            document["results"].append(row)
            panel[name] = (rs[0]["times"], np.where(np.isnan(rs[0]["rmse"]), np.nan, rs[0]["rmse"]))
        document.setdefault("gibbs_reference", {})[str(D)] = {"rmse": gibbs_level,
                                                             "seconds": gibbs_seconds,
                                                             "sweeps": args.gibbs_sweeps}
        panels.append((f"MovieLens-100K, D={D}", panel))
    if args.mpi_ranks:
        document["mpi_round_cost"] = {str(D): mpi_round_cost(args, D, threads) for D in args.ranks}
    os.makedirs(args.out, exist_ok=True)
    document["plot"] = plot_traces(panels, os.path.join(args.out, "bpmf_movielens.png"),
                                   f"BPMF test RMSE vs wall time ({threads} threads)",
                                   ylabel="test RMSE")
    emit(document, os.path.join(args.out, "bpmf_movielens.json"))
    table(table_rows, [("D", "D", "d"), ("method", "method", "s"),
                       ("final RMSE", "final_rmse", ".4f"), ("RMSE @5s", "rmse_at_5s", ".4f"),
                       ("seconds", "seconds", ".1f"), ("units", "units", ".0f"),
                       ("s to 0.890", "seconds_to_0.890", ".2f"),
                       ("runs to 0.890", "reached_0.890", ""),
                       ("s to Gibbs", "seconds_to_gibbs_rmse", ".2f"),
                       ("runs to Gibbs", "reached_gibbs", ""),
                       ("Gibbs/this", "speedup_vs_gibbs", ".2f")])
    for row in table_rows:
        if row["runs_stopped_in_burnin"]:
            print(f"D={row['D']} {row['method']}: {row['runs_stopped_in_burnin']} of {row['runs']} "
                  f"runs stopped in the {SAMPLER_BURNIN}-round burn-in (no kept draw): "
                  "raise --budget")
    return 0


if __name__ == "__main__":
    sys.exit(main())
