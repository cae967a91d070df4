"""HAMCMC for matrix factorisation (Simsekli et al., ICML 2016, section 4.3 / Fig. 5): test
RMSE of the running posterior mean against wall time for HAMCMC (M = 2 and 5), PSGLD, SGLD
and DSGLD, on MovieLens-100K (10 % held out) and on a synthetic ratings matrix of
MovieLens-1M's shape (6,040 x 3,706, 1M ratings; the paper's data is not available offline).

Model (the paper's): Gaussian MF, K = 10, sigma_w^2 = sigma_h^2 = sigma_x^2 = 1
(pymf.TweedieNMF(10, beta=2, phi=1, prior="gaussian")), on ratings centred by the training
mean; constant steps; 50 burn-in iterations. DSGLD is pymf.DSGLD (Ahn et al. 2015) on
pymf.BPMF(10), its own model (the paper's DSGLD is on BPMF too), square 2 x 2 split.

Fair tuning: every method gets the same short budget on each point of its own grid (steps
for PSGLD, SGLD and DSGLD; (gamma, eps) for HAMCMC, lam = 1), and the setting with the
lowest final test RMSE then runs for the full budget. The level to reach is PSGLD's final
RMSE (the median over its --repeats runs); each method's time to it is the median over its
--repeats runs with a run that never reaches it counted as +inf, so a time is given when at
least half the runs reach it (exactly half of an even number: the slowest of those that do),
and the table says how many of the runs did. A run whose budget ends inside the 50 burn-in
iterations has no running mean: a failed setting (tuning) or run (reaching nothing).
Target (the paper's): HAMCMC reaches PSGLD's final RMSE in at most half PSGLD's wall time.
Writes JSON (stdout and OUT/hamcmc_mf.json, OUT: --out), a table, and OUT/hamcmc_mf.png.

    python bench/hamcmc_mf.py [--data PATH] [--threads 2] [--budget 12] [--skip-1m]
                              [--mpi-ranks 2] [--mpi-only --mpi-setting "gamma=0.01, eps=0.3"]

--mpi-ranks R: HAMCMC M = 2 with the MovieLens-100K tuned setting and blocks = R, in shared
memory and under mpiexec -n R (one thread per rank), for the same budget.

--profile: where an iteration's time goes, one thread, MovieLens-100K (centred), B = 4:
CPU milliseconds per iteration of PSGLD and of HAMCMC (M = 2, 5, 10; fixed and scaled
gamma) chains in the quasi-Newton phase (--profile-iterations each, 5 interleaved rounds,
medians), of one minibatch gradient (every block of a part, HamcmcChain.grad_potential) and
of one iteration's noise. HAMCMC's quasi-Newton iteration evaluates two gradients (at
theta_{t-M}, reused as the old end of the new pair, and at the new state for y_t), PSGLD's
one; the rest is the Gram matrix of the 2M basis vectors and the combinations,
O(M^2 (I + J) K).
"""
import argparse
import math
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import HelpFormatter, json_text, median_time_to_level, write_json  # noqa: E402

import pymf  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "..", "shared", "data", "ml-100k.data")
BLOCKS = 4
BURNIN = 50  # iterations before the running mean starts (the paper's)


def centred(train, test):
    mean = float(train.values.mean())
    shift = lambda r: pymf.Ratings(r.rows, r.cols, r.values - mean, shape=r.shape)  # noqa: E731
    return shift(train), shift(test)


def synthetic_ml1m(seed=0):
    """6,040 x 3,706 ratings, 1,000,209 of them at random cells (MovieLens-1M's counts),
    values 3 + u.v (rank 10, u, v ~ N(0, 0.35^2)) + N(0, 0.9^2) rounded into 1..5."""
    rng = np.random.default_rng(seed)
    I, J, N, K = 6040, 3706, 1_000_209, 10
    cells = rng.choice(I * J, size=N, replace=False)
    rows, cols = cells // J, cells % J
    U, V = rng.normal(0, 0.35, (I, K)), rng.normal(0, 0.35, (J, K))
    values = np.clip(np.rint(3 + np.einsum("nk,nk->n", U[rows], V[cols])
                             + rng.normal(0, 0.9, N)), 1, 5)
    return pymf.Ratings(rows, cols, values, shape=(I, J))


def grids(threads):
    """name -> [(label, model kind, sampler factory)]"""
    hamcmc = lambda M, scaled=False: [  # noqa: E731
        (f"gamma={g:g}, eps={e:g}", "mf", lambda g=g, e=e: pymf.HAMCMC(
            memory=M, gamma=g, scaled_gamma=scaled, lam=1.0, step_size=e, blocks=BLOCKS,
            n_threads=threads))
        for g, e in ((1e-2, 0.1), (1e-2, 0.3), (3e-3, 1.0))]
    steps = (1e-3, 3e-3, 6e-3)
    return {
        "HAMCMC M=2": hamcmc(2),
        "HAMCMC M=5": hamcmc(5),
        "HAMCMC M=2 scaled gamma": hamcmc(2, True),
        "HAMCMC M=5 scaled gamma": hamcmc(5, True),
        "PSGLD": [(f"eps={s:g}", "mf", lambda s=s: pymf.PSGLD(blocks=BLOCKS, step_size=s,
                                                              n_threads=threads)) for s in steps],
        "SGLD": [(f"eps={s:g}", "mf", lambda s=s: pymf.SGLD(step_size=s, batch_size=1 / BLOCKS,
                                                            n_threads=threads)) for s in steps],
        "DSGLD (BPMF, 2x2)": [(f"eps={s:g}", "bpmf", lambda s=s: pymf.DSGLD(
            split="square", blocks=2, batch_size=1000, round_length=10, step_size=s,
            n_threads=threads)) for s in (3e-4, 1e-3, 3e-3)],
    }


CPU_TIME = False  # --cpu-time: budgets and trace times in CPU seconds of this process


def run(kind, make, data, budget, seed):
    """(times, rmse of the running mean, iterations) within `budget` seconds of sampling
    (wall seconds, or with --cpu-time CPU seconds of this one-threaded process, recorded at
    every trace point)."""
    if kind == "mf":
        model, train, test = pymf.TweedieNMF(10, beta=2, phi=1, prior="gaussian"), *data["centred"]
    else:
        model, train, test = pymf.BPMF(10), *data["raw"]
    cpu_at = {}  # iteration -> CPU seconds at its trace point
    started = time.process_time()

    def stop(info):
        if not CPU_TIME:
            return info["time"] > budget
        cpu_at[info["iteration"]] = time.process_time() - started
        return cpu_at[info["iteration"]] > budget

    try:
        res = pymf.sample(model, train, make(), n_samples=10 ** 8, burnin=BURNIN, seed=seed,
                          test=test, keep_samples=False, trace_every=10, progress=False,
                          callback=stop)
    except pymf.DivergenceError as exc:
        return None, f"diverged at iteration {exc.iteration}"
    keep = np.isfinite(res.trace["test_rmse"])
    times = (np.array([cpu_at.get(int(t), np.nan) for t in res.trace["iteration"]])
             if CPU_TIME else res.trace["time"])
    keep &= np.isfinite(times)
    if not keep.any():  # the budget ended before the running mean had a traced value
        return None, (f"stopped in the {BURNIN}-iteration burn-in at iteration "
                      f"{int(res.iterations)} (raise the budget)")
    return {"time": times[keep].tolist(), "rmse": res.trace["test_rmse"][keep].tolist(),
            "iterations": int(res.iterations)}, None


def first_time_below(trace, level):
    for t, r in zip(trace["time"], trace["rmse"]):
        if r <= level:
            return t
    return None


def bench(name, data, args):
    out = {"methods": {}}
    for method, grid in grids(args.threads).items():
        tuning = []
        for label, kind, make in grid:
            trace, failure = run(kind, make, data, args.tune_budget, seed=0)
            tuning.append({"setting": label, "final_rmse": None if trace is None else trace["rmse"][-1],
                           "failure": failure})
            print(f"[{name}] tune {method} {label}: {tuning[-1]}", file=sys.stderr, flush=True)
        usable = [(t["final_rmse"], i) for i, t in enumerate(tuning) if t["final_rmse"] is not None]
        if not usable:
            out["methods"][method] = {"tuning": tuning, "best": None}
            continue
        best = grid[min(usable)[1]]
        runs, failures = [], []
        for repeat in range(args.repeats):
            trace, failure = run(best[1], best[2], data, args.budget, seed=repeat)
            if trace is not None:
                runs.append(trace)
            else:
                failures.append(failure)
        out["methods"][method] = {"tuning": tuning, "best": best[0], "runs": runs,
                                  "failed_runs": failures}
        print(f"[{name}] {method} {best[0]}: final {[r['rmse'][-1] for r in runs]}",
              file=sys.stderr, flush=True)
    psgld = out["methods"]["PSGLD"]
    if psgld.get("runs"):
        level = statistics.median(r["rmse"][-1] for r in psgld["runs"])
        psgld_time = statistics.median(r["time"][-1] for r in psgld["runs"])
        out["psgld_final_rmse"], out["psgld_wall_seconds"] = level, psgld_time
        for method, entry in out["methods"].items():
            # a failed run (diverged, stopped in the burn-in) reaches nothing
            times = ([first_time_below(r, level) for r in entry.get("runs", [])]
                     + [None] * len(entry.get("failed_runs", [])))
            seconds, reached = median_time_to_level(times)
            entry["seconds_to_psgld_final_rmse"] = seconds if math.isfinite(seconds) else None
            entry["runs_reaching_psgld_final_rmse"] = reached
            entry["runs_measured"] = len(times)
            entry["final_rmse_median"] = (statistics.median(r["rmse"][-1] for r in entry["runs"])
                                          if entry.get("runs") else None)
            entry["iterations_median"] = (statistics.median(r["iterations"] for r in entry["runs"])
                                          if entry.get("runs") else None)
        for M in (2, 5):
            t = out["methods"][f"HAMCMC M={M}"].get("seconds_to_psgld_final_rmse")
            out[f"target_hamcmc_m{M}_half_psgld_time"] = {
                "seconds": t, "limit": psgld_time / 2,
                "met": t is not None and t <= psgld_time / 2}
    return out


MPI_SCRIPT = """
import sys, pymf, pymf.mpi
sys.path.insert(0, sys.argv[1])
from hamcmc_mf import centred
ratings = pymf.datasets.load_movielens(sys.argv[2])
train, test = centred(*ratings.split(0.1, seed=0))
gamma, eps, budget, threads = (float(x) for x in sys.argv[3:7])
from mpi4py import MPI
sampler = pymf.HAMCMC(memory=2, gamma=gamma, lam=1.0, step_size=eps, n_threads=int(threads),
                      blocks=MPI.COMM_WORLD.size)
pymf.mpi.sample(pymf.TweedieNMF(10, beta=2, phi=1, prior="gaussian"), train, sampler, 10 ** 8,
                burnin=50, seed=0, test=test, keep_samples=False, trace_every=10,
                progress=False, out_dir=sys.argv[7], callback=lambda info: info["time"] > budget)
"""


def mpi_comparison(args, setting, ranks):
    """HAMCMC M = 2 (the MovieLens-100K tuned setting) with blocks = ranks: shared memory
    (args.threads threads) against mpiexec -n ranks (one thread each), same budget."""
    import subprocess
    import tempfile
    gamma, eps = (float(part.split("=")[1]) for part in setting.split(", "))
    ratings = pymf.datasets.load_movielens(args.data)
    train, test = centred(*ratings.split(0.1, seed=0))
    model = pymf.TweedieNMF(10, beta=2, phi=1, prior="gaussian")
    shared = pymf.sample(model, train, pymf.HAMCMC(memory=2, gamma=gamma, lam=1.0, step_size=eps,
                                                   blocks=ranks, n_threads=args.threads),
                         n_samples=10 ** 8, burnin=50, seed=0, test=test, keep_samples=False,
                         trace_every=10, progress=False,
                         callback=lambda info: info["time"] > args.budget)
    out = {"ranks": ranks, "setting": setting, "shared_memory": {
        "threads": args.threads, "iterations": int(shared.iterations),
        "seconds": float(shared.trace["time"][-1]), "final_rmse": float(shared.trace["test_rmse"][-1])}}
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    with tempfile.TemporaryDirectory() as folder:
        script = os.path.join(folder, "run.py")
        with open(script, "w") as fh:
            fh.write(MPI_SCRIPT)
        env = dict(os.environ, OMP_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", CI="1",
                   PRTE_MCA_rmaps_default_mapping_policy=":oversubscribe")
        done = subprocess.run([mpiexec, "-n", str(ranks), sys.executable, script, HERE,
                               os.path.abspath(args.data), str(gamma), str(eps), str(args.budget),
                               "1", os.path.join(folder, "out")], env=env, capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            out["mpi"] = {"failed": done.stderr[-2000:]}
            return out
        res = pymf.load(os.path.join(folder, "out"))
    out["mpi"] = {"threads_per_rank": 1, "iterations": int(res.iterations),
                  "seconds": float(res.trace["time"][-1]),
                  "final_rmse": float(res.trace["test_rmse"][-1]),
                  "compute_seconds": res.params["mpi"]["compute_seconds"],
                  "communicate_seconds": res.params["mpi"]["communicate_seconds"]}
    for side in ("shared_memory", "mpi"):
        out[side]["seconds_per_iteration"] = out[side]["seconds"] / max(1, out[side]["iterations"])
    return out


def table(name, result):
    lines = [f"\n{name}: PSGLD's final RMSE {result.get('psgld_final_rmse', float('nan')):.4f} "
             f"after {result.get('psgld_wall_seconds', float('nan')):.1f} s",
             f"{'method':22s} {'setting':22s} {'iters':>8s} {'final RMSE':>10s} "
             f"{'s to PSGLD final':>17s} {'runs reaching':>13s}"]
    for method, entry in result["methods"].items():
        t = entry.get("seconds_to_psgld_final_rmse")
        final = entry.get("final_rmse_median")
        reached = (f"{entry['runs_reaching_psgld_final_rmse']}/{entry['runs_measured']}"
                   if entry.get("runs_measured") else "-")
        lines.append(f"{method:22s} {str(entry.get('best')):22s} "
                     f"{str(entry.get('iterations_median')):>8s} "
                     f"{'-' if final is None else f'{final:.4f}':>10s} "
                     f"{'not reached' if t is None else f'{t:.1f}':>17s} {reached:>13s}")
    return "\n".join(lines)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 4.5), squeeze=False)
    for ax, (name, result) in zip(axes[0], results.items()):
        for method, entry in result["methods"].items():
            if entry.get("runs"):
                r = entry["runs"][0]
                ax.plot(r["time"], r["rmse"], label=f"{method} ({entry['best']})")
        ax.set_xlabel("wall-clock time (s)")
        ax.set_ylabel("test RMSE of the running mean")
        ax.set_title(name)
        ax.set_ylim(top=min(1.6, ax.get_ylim()[1]))
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def profile(train, iterations, rounds=5):
    """CPU milliseconds per iteration of PSGLD and HAMCMC chains (the C loop, one thread,
    started from the same state, HAMCMC timed after its 2M Langevin steps), of one minibatch
    gradient (every block of a part) and of one iteration's noise, measured in interleaved
    rounds (medians over the rounds). CPU time of this process, not wall time: on the shared
    machine wall times of the same call vary several-fold with the load."""
    from pymf import _rng
    from pymf.hamcmc._hamcmc_mf import HamcmcChain
    from pymf.nmf import _blocks
    from pymf.nmf._sgld import LangevinChain
    K = 10
    I, J = train.shape
    data = _blocks.BlockedData.from_sparse(train.rows.astype(np.int64), train.cols.astype(np.int64),
                                           train.values.astype(np.float64), train.shape, BLOCKS)
    model = (K, 2.0, 1.0, "gaussian", 1.0, 1.0)
    rng = np.random.default_rng(0)
    W0, Ht0 = 0.3 * rng.normal(size=(I, K)), 0.3 * rng.normal(size=(J, K))

    def psgld():
        chain = LangevinChain(data, "psgld", *model, 1, 2, part_order="cyclic", n_threads=1)
        chain.set_state(W0, Ht0)
        return chain, 1e-4

    def hamcmc(M, scaled):
        def make():
            # small steps: the cost per iteration does not depend on them, and the chain
            # must not diverge from this arbitrary start
            chain = HamcmcChain(data, *model, 1, 2, memory=M, gamma=1e-3, scaled_gamma=scaled,
                                lam=1.0, part_order="random", n_threads=1)
            chain.set_state(W0, Ht0)
            chain.run(np.full(2 * M, 1e-2))  # the Langevin steps that fill the memory
            return chain, 1e-2
        return make

    makers = {"PSGLD": psgld}
    for M in (2, 5, 10):
        for scaled in (False, True):
            makers[f"HAMCMC M={M}" + (" scaled" if scaled else "")] = hamcmc(M, scaled)

    def per_iteration(make):
        chain, eps = make()
        started = time.process_time()
        chain.run(np.full(iterations, eps))
        return 1e3 * (time.process_time() - started) / iterations

    probe = HamcmcChain(data, *model, 1, 2, memory=2, n_threads=1)

    def median_call(fn, calls=50):
        started = time.process_time()
        for _ in range(calls):
            fn()
        return 1e3 * (time.process_time() - started) / calls

    measured = {name: [] for name in [*makers, "gradient", "noise"]}
    for _ in range(rounds):
        for name, make in makers.items():
            measured[name].append(per_iteration(make))
        measured["gradient"].append(median_call(lambda: probe.grad_potential(W0, Ht0, 0)))
        measured["noise"].append(median_call(lambda: (_rng.noise(1, 1, 5, 0, I, K),
                                                      _rng.noise(1, 2, 5, 0, J, K))))
    ms = {name: statistics.median(values) for name, values in measured.items()}
    out = {"threads": 1, "blocks": BLOCKS, "iterations": iterations, "rounds": rounds,
           "load_average": os.getloadavg(), "cpu_ms_per_iteration": ms,
           "split_ms": {"PSGLD: gradient": ms["gradient"], "PSGLD: noise": ms["noise"],
                        "PSGLD: rest (the update)": ms["PSGLD"] - ms["gradient"] - ms["noise"]},
           "over_PSGLD": {}}
    for name in makers:
        if name.startswith("HAMCMC"):
            out["split_ms"][f"{name}: 2 gradients + noise"] = 2 * ms["gradient"] + ms["noise"]
            out["split_ms"][f"{name}: rest (Gram, combinations, pair)"] = \
                ms[name] - 2 * ms["gradient"] - ms["noise"]
            out["over_PSGLD"][name] = ms[name] / ms["PSGLD"]
    return out


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--data", default=DEFAULT_DATA, help="MovieLens-100K's ratings file")
    p.add_argument("--threads", type=int, default=2, help="threads of every sampler")
    p.add_argument("--tune-budget", type=float, default=6.0,
                   help=f"seconds per grid point; a point whose budget ends in the {BURNIN} "
                        "burn-in iterations counts as failed")
    p.add_argument("--budget", type=float, default=12.0,
                   help="seconds per run of each method's best setting")
    p.add_argument("--repeats", type=int, default=2, help="runs (seeds 0, 1, ...) per method")
    p.add_argument("--budget-1m", type=float, default=25.0,
                   help="seconds per run on the ML-1M-shaped data (its tuning: half of it)")
    p.add_argument("--skip-1m", action="store_true", help="MovieLens-100K only")
    p.add_argument("--mpi-ranks", type=int, default=2,
                   help="also HAMCMC M=2 with blocks = ranks under mpiexec (0: not)")
    p.add_argument("--mpi-only", action="store_true",
                   help="only the MPI comparison, with --mpi-setting")
    p.add_argument("--mpi-setting", default="gamma=0.01, eps=0.3",
                   help="HAMCMC's setting for --mpi-only")
    p.add_argument("--out", default=os.path.join(HERE, "..", "results"),
                   help="folder of hamcmc_mf.json and hamcmc_mf.png")
    p.add_argument("--cpu-time", action="store_true",
                   help="one thread, budgets and times in CPU seconds (robust to a shared "
                        "machine's load)")
    p.add_argument("--profile", action="store_true",
                   help="only the time split of an iteration (see the docstring)")
    p.add_argument("--profile-iterations", type=int, default=400,
                   help="--profile: iterations per timed chain")
    args = p.parse_args(argv)
    if args.cpu_time:
        global CPU_TIME
        CPU_TIME, args.threads = True, 1
    if args.profile:
        ratings = pymf.datasets.load_movielens(args.data)
        train, _ = centred(*ratings.split(0.1, seed=0))
        document = profile(train, args.profile_iterations)
        print(json_text(document, indent=1))
        for group in ("cpu_ms_per_iteration", "split_ms", "over_PSGLD"):
            for key, value in document[group].items():
                print(f"{group:>16}  {key:>48}  {value:8.3f}")
        return 0
    os.makedirs(args.out, exist_ok=True)
    document = {"threads": args.threads, "blocks": BLOCKS, "cores": os.cpu_count(),
                "model": "TweedieNMF(10, beta=2, phi=1, prior='gaussian'); DSGLD: BPMF(10)",
                "budget_seconds": args.budget, "tune_budget_seconds": args.tune_budget,
                "repeats": args.repeats, "datasets": {}}
    results = {}
    if args.mpi_only:
        document["mpi"] = mpi_comparison(args, args.mpi_setting, args.mpi_ranks)
        print(json_text(document, indent=1))
        return 0
    if os.path.exists(args.data):
        ratings = pymf.datasets.load_movielens(args.data)
        train, test = ratings.split(0.1, seed=0)
        data = {"raw": (train, test), "centred": centred(train, test)}
        results["MovieLens-100K"] = bench("MovieLens-100K", data, args)
        best = results["MovieLens-100K"]["methods"]["HAMCMC M=2"].get("best")
        if args.mpi_ranks and best is not None:
            document["mpi"] = mpi_comparison(args, best, args.mpi_ranks)
            print(f"[mpi] {document['mpi']}", file=sys.stderr, flush=True)
    else:
        document["datasets"]["MovieLens-100K"] = f"skipped: no file {args.data}"
    if not args.skip_1m:
        ratings = synthetic_ml1m()
        train, test = ratings.split(0.1, seed=0)
        data = {"raw": (train, test), "centred": centred(train, test)}
        one_m = argparse.Namespace(**{**vars(args), "budget": args.budget_1m,
                                      "tune_budget": args.budget_1m / 2, "repeats": 1})
        results["synthetic ML-1M shape"] = bench("synthetic ML-1M shape", data, one_m)
    document["datasets"].update(results)
    print(write_json(os.path.join(args.out, "hamcmc_mf.json"), document, indent=1))
    for name, result in results.items():
        print(table(name, result))
    if results:
        plot(results, os.path.join(args.out, "hamcmc_mf.png"))
    return 0


if __name__ == "__main__":
    started = time.time()
    status = main()
    print(f"\n(total {time.time() - started:.0f} s)", file=sys.stderr)
    sys.exit(status)
