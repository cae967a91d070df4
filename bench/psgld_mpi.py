#!/usr/bin/env python3
"""Distributed PSGLD over MPI (PSGLD paper, section 4.3): scaling, communication, RMSE.

1. Strong scaling: a fixed problem (MovieLens-100K, K = 50, beta = phi = 1) with 1, 2 and 4
   ranks (B = ranks). An iteration processes one part (N / B ratings), so the speedup is the
   ratio of ratings processed per second. Rows and columns are permuted at random
   (--permute) so that the blocks of a part hold about N / B^2 ratings each: MovieLens in
   its own order is far from that (its 2 x 2 grid puts 46,454 and 5,979 ratings in the two
   blocks of one part), and a ring waits at each iteration for its largest block.
2. Weak scaling, as in the paper: the data tiled t x t times with t = ranks, so that each
   rank's block keeps the size of the 1-rank problem; efficiency = time per iteration with
   1 rank / time per iteration with p ranks.
3. Bytes sent per rank per iteration (measured: the ring buffer of one H block) against the
   model (J / B) K sizeof(double) and against a DSGLD-style synchronisation of all of W and H
   ((I + J) K sizeof(double)).
4. Test RMSE against time on MovieLens-100K with B = 2, PSGLD over MPI versus shared-memory
   DSGD (pymf.fit), both on the permuted grid, as in the paper's Fig. 5; a PNG.
5. Two controls that say what the machine itself allows. (a) Two independent 1-rank jobs
   at once (in every weak-scaling repeat): what two busy cores cost each other (caches,
   memory, clock), with no synchronisation. (b) The lock-step control
   (bench/_lockstep_control.py): every rank runs the 1-rank problem with the same kernels
   and waits for the others after each iteration at a zero-byte barrier -- the compute and
   the synchronisation of the ring with no data moved. Its 1 -> p efficiency bounds (up to
   noise) what any ring of p ranks can reach here; "eff. / lock-step" is the ring's share.
Each configuration is run --repeats times (median); the weak-scaling runs and the lock-step
control run --weak-repeats times, interleaved across rank counts, with the median of the
per-repeat ratios ("paired eff.") beside the ratio of medians: on this shared 2-core VM
single runs vary by +-20 %, and the speed of each core drifts by up to 40 % for seconds at a
time (measured with one chain alone on an idle machine). Open MPI runs with its defaults
(its single-copy transfers measured 0.074 ms per 672,800-byte exchange here, against 0.103
ms with them off). Ranks run with OMP_NUM_THREADS=1; on this 2-core machine 4 ranks
oversubscribe the cores, so the 4-rank figures measure contention, not scaling. Prints JSON,
then tables.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

import numpy as np

import pymf
from _common import HelpFormatter, emit, plot_traces, table

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "..", "shared", "data", "ml-100k.data")


def mpi_env(n_ranks):
    env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
               OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    if n_ranks > (os.cpu_count() or 1):
        # more ranks than cores: allowed only with this policy (ranks then yield when idle)
        env["PRTE_MCA_rmaps_default_mapping_policy"] = ":oversubscribe"
    return env


def mpiexec():
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return beside if os.path.exists(beside) else "mpiexec"


def run_json(command, env):
    """Runs a command; returns the JSON of its last line of output."""
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def mpi_run(n_ranks, args, out):
    # a run left in `out` by an earlier benchmark would be resumed from its last checkpoint
    # and report that run's timings: start afresh
    shutil.rmtree(out, ignore_errors=True)
    return run_json([mpiexec(), "-n", str(n_ranks), sys.executable, "-m", "pymf.mpi", "psgld",
                     *args, "--out", out], mpi_env(n_ranks))


def concurrent_single_ranks(args, out, copies=2):
    """Control for weak scaling: `copies` independent 1-rank jobs at the same time. Their
    slowdown against one job alone is what the machine (shared caches, memory bandwidth,
    cores) costs two processes, with no communication at all."""
    for c in range(copies):
        shutil.rmtree(f"{out}-{c}", ignore_errors=True)  # else resumed, not timed
    # two separate jobs know nothing of each other and would both bind to core 0: each is
    # pinned to its own core with taskset instead (unpinned, they migrated between the cores
    # and measured 20 % or more slower than pinned)
    taskset = shutil.which("taskset")
    cores = os.cpu_count() or 1
    jobs = [subprocess.Popen(([taskset, "-c", str(c % cores)] if taskset else []) +
                             [mpiexec(), "--bind-to", "none", "-n", "1", sys.executable, "-m",
                              "pymf.mpi", "psgld", *args, "--out", f"{out}-{c}"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=mpi_env(1)) for c in range(copies)]
    results = []
    for job in jobs:
        stdout, stderr = job.communicate()
        if job.returncode != 0:
            raise RuntimeError(stderr)
        results.append(json.loads(stdout.strip().splitlines()[-1]))
    return max(r["compute_seconds_per_iteration"] for r in results)


def lockstep_run(n_ranks, data, rank, iterations, step_size):
    """bench/_lockstep_control.py under mpiexec: seconds per iteration of the ring's compute
    with a barrier instead of the exchange."""
    return run_json([mpiexec(), "-n", str(n_ranks), sys.executable,
                     os.path.join(HERE, "_lockstep_control.py"), "--data", data, "--rank", str(rank),
                     "--iterations", str(iterations), "--step-size", str(step_size)],
                    mpi_env(n_ranks))


def median_run(n_ranks, args, out, repeats):
    runs = []
    for r in range(repeats):
        runs.append(mpi_run(n_ranks, args, f"{out}-{r}"))
    pick = sorted(runs, key=lambda s: s["seconds_per_iteration"])[len(runs) // 2]
    pick["seconds_per_iteration_all"] = [round(s["seconds_per_iteration"], 7) for s in runs]
    return pick


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    parser.add_argument("--data", default=DEFAULT_DATA, help="MovieLens-100K's ratings file")
    parser.add_argument("--rank", type=int, default=50, help="K, the factorisation's rank")
    parser.add_argument("--iterations", type=int, default=1000,
                        help="iterations of each scaling run and lock-step control")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4],
                        help="MPI rank counts (B = ranks); the first is the baseline")
    parser.add_argument("--repeats", type=int, default=3,
                        help="strong-scaling runs per rank count (median)")
    parser.add_argument("--weak-repeats", type=int, default=9,
                        help="interleaved repeats of the weak-scaling runs (noisy machines)")
    parser.add_argument("--step-size", type=float, default=2e-5, help="PSGLD's constant step")
    parser.add_argument("--out", default="results/psgld_mpi",
                        help="folder of psgld_mpi.json, the PNG and the runs' outputs")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    common = ["--data", args.data, "--rank", str(args.rank), "--beta", "1", "--phi", "1",
              "--step-size", str(args.step_size), "--samples", str(args.iterations),
              "--thin", str(args.iterations), "--trace-every", str(args.iterations),
              "--checkpoint-every", str(10 * args.iterations)]
    ratings = pymf.datasets.load_movielens(args.data)
    rows = []
    # weak scaling: repeats interleaved (1 rank, 2 ranks, 1 rank, ...) so that the slow drifts
    # of this shared machine hit every rank count alike; paired ratios per repeat as well
    weak_runs = {p: [] for p in args.ranks}
    lock_runs = {p: [] for p in args.ranks}
    concurrent = []
    for r in range(args.weak_repeats):
        for p in args.ranks:
            weak_runs[p].append(mpi_run(p, common + ["--tile", str(p)],
                                        os.path.join(args.out, f"weak-{p}-{r}")))
            lock_runs[p].append(lockstep_run(p, args.data, args.rank, args.iterations, args.step_size))
        concurrent.append(concurrent_single_ranks(common, os.path.join(args.out, "control")))

    def paired_ratio(runs, p):
        return statistics.median(a["seconds_per_iteration"] / b["seconds_per_iteration"]
                                 for a, b in zip(runs[args.ranks[0]], runs[p]))

    def median_time(runs, p):
        return statistics.median(x["seconds_per_iteration"] for x in runs[p])

    paired = {p: paired_ratio(weak_runs, p) for p in args.ranks}
    lockstep = {p: {"s_per_iter": median_time(lock_runs, p),
                    "s_per_iter_all": [round(x["seconds_per_iteration"], 7) for x in lock_runs[p]],
                    "efficiency": median_time(lock_runs, args.ranks[0]) / median_time(lock_runs, p),
                    "efficiency_paired": paired_ratio(lock_runs, p)} for p in args.ranks}
    for p in args.ranks:
        strong = median_run(p, common + ["--permute"], os.path.join(args.out, f"strong-{p}"),
                            args.repeats)
        runs = sorted(weak_runs[p], key=lambda s: s["seconds_per_iteration"])
        weak = dict(runs[len(runs) // 2])
        weak["seconds_per_iteration_all"] = [round(s["seconds_per_iteration"], 7) for s in weak_runs[p]]
        for kind, s, tile in (("strong", strong, 1), ("weak", weak, p)):
            I, J = ratings.shape[0] * tile, ratings.shape[1] * tile
            rows.append({"kind": kind, "ranks": p, "tile": tile, "ratings": ratings.nnz * tile * tile,
                         "s_per_iter": s["seconds_per_iteration"],
                         "s_per_iter_all": s["seconds_per_iteration_all"],
                         "compute_s_per_iter": s["compute_seconds_per_iteration"],
                         "comm_s_per_iter": s["communicate_seconds_per_iteration"],
                         "bytes_per_iter": s["bytes_sent_per_rank_per_iteration"],
                         "model_bytes": s["model_bytes_per_iteration"],
                         "dsgld_bytes": s["dsgld_full_sync_bytes_per_iteration"],
                         "I": I, "J": J})
    base = {kind: next(r for r in rows if r["kind"] == kind and r["ranks"] == args.ranks[0])
            for kind in ("strong", "weak")}
    for r in rows:
        # an iteration processes one part, N / B entries: compare throughputs, not iterations
        r["entries_per_s"] = r["ratings"] / r["ranks"] / r["s_per_iter"]
    for r in rows:
        r["speedup"] = r["entries_per_s"] / base["strong"]["entries_per_s"] if r["kind"] == "strong" else None
        r["efficiency"] = base["weak"]["s_per_iter"] / r["s_per_iter"] if r["kind"] == "weak" else None
        r["efficiency_paired"] = paired[r["ranks"]] if r["kind"] == "weak" else None
        r["lockstep_efficiency"] = lockstep[r["ranks"]]["efficiency"] if r["kind"] == "weak" else None
        r["share_of_lockstep"] = (r["efficiency"] / r["lockstep_efficiency"]
                                  if r["kind"] == "weak" else None)

    control = statistics.median(concurrent)
    alone = statistics.median(x["compute_seconds_per_iteration"] for x in weak_runs[args.ranks[0]])
    machine_bound = alone / control

    # RMSE against time, B = 2: PSGLD over MPI and shared-memory DSGD
    rmse_iters = 3000
    psgld = mpi_run(2, ["--data", args.data, "--rank", str(args.rank), "--step-size", str(args.step_size),
                        "--samples", str(rmse_iters), "--burnin", "0", "--thin", "100",
                        "--trace-every", "100", "--test-fraction", "0.2", "--seed", "0",
                        "--permute"],
                    os.path.join(args.out, "rmse-psgld"))
    res = pymf.load(os.path.join(args.out, "rmse-psgld"))
    train, test = ratings.split(0.2, seed=0)
    dsgd = pymf.fit(pymf.TweedieNMF(args.rank), train,
                    pymf.DSGD(blocks=2, step_size=1e-3, permute=True),
                    n_epochs=rmse_iters // 2 // 10, test=test, seed=0, trace_every=10, progress=False)
    plot = plot_traces([("MovieLens-100K, B = 2, K = %d" % args.rank,
                         {"PSGLD (MPI, posterior mean)": (res.trace["time"], res.trace["test_rmse"]),
                          "DSGD (shared memory)": (dsgd.trace["time"], dsgd.trace["test_rmse"])})],
                       os.path.join(args.out, "rmse_vs_time.png"), "test RMSE against wall time")
    document = {"benchmark": "psgld_mpi", "cpu_count": os.cpu_count(), "omp_threads_per_rank": 1,
                "scaling": rows,
                "control_lockstep_barrier_no_data": lockstep,
                "control_two_independent_1rank_jobs": {
                    "compute_s_per_iter_alone": alone, "compute_s_per_iter_concurrent": control,
                    "compute_s_per_iter_concurrent_all": concurrent,
                    "weak_efficiency_bound_of_this_machine": machine_bound},
                "rmse": {"psgld_mpi": {"time": res.trace["time"].tolist(), "test_rmse": res.trace["test_rmse"].tolist()},
                         "dsgd": {"time": dsgd.trace["time"].tolist(), "test_rmse": dsgd.trace["test_rmse"].tolist()},
                         "psgld_final_rmse": float(res.trace["test_rmse"][-1]),
                         "dsgd_final_rmse": float(dsgd.trace["test_rmse"][-1])},
                "plot": plot}
    emit(document, os.path.join(args.out, "psgld_mpi.json"))
    print()
    table(rows, [("kind", "kind", "s"), ("ranks", "ranks", "d"), ("ratings", "ratings", "d"),
                 ("s/iter", "s_per_iter", ".5f"), ("compute", "compute_s_per_iter", ".6f"),
                 ("comm", "comm_s_per_iter", ".6f"), ("ratings/s", "entries_per_s", ".3e"),
                 ("bytes/iter", "bytes_per_iter", "d"),
                 ("model bytes", "model_bytes", "d"), ("DSGLD bytes", "dsgld_bytes", "d"),
                 ("speedup", "speedup", ".2f"), ("weak eff.", "efficiency", ".2f"),
                 ("paired eff.", "efficiency_paired", ".2f"),
                 ("lock-step eff.", "lockstep_efficiency", ".2f"),
                 ("eff. / lock-step", "share_of_lockstep", ".2f")])
    print(f"\ncontrol: two independent 1-rank jobs at once compute {control * 1e3:.3f} ms/iter "
          f"(slower of the two, median of {len(concurrent)}), one alone {alone * 1e3:.3f}: two "
          f"busy cores cost each other {100 * (1 - machine_bound):.0f} % (efficiency "
          f"{machine_bound:.2f} with no synchronisation at all)")
    for p in args.ranks[1:]:
        print(f"lock-step control, {args.ranks[0]} -> {p} ranks (same compute, a barrier per "
              f"iteration, no data): {lockstep[args.ranks[0]]['s_per_iter'] * 1e3:.3f} -> "
              f"{lockstep[p]['s_per_iter'] * 1e3:.3f} ms/iter, efficiency "
              f"{lockstep[p]['efficiency']:.2f} (paired {lockstep[p]['efficiency_paired']:.2f})")
    print(f"\nfinal test RMSE: PSGLD (MPI, B=2) {document['rmse']['psgld_final_rmse']:.4f}, "
          f"DSGD {document['rmse']['dsgd_final_rmse']:.4f}")


if __name__ == "__main__":
    main()
