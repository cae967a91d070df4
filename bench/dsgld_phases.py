#!/usr/bin/env python3
"""Where DSGLD's time goes on the 10M ratings (issue 20, part 2): the cost of a round and of
a BPMF Gibbs sweep, and a per-phase breakdown of the round at bench/dsgld_large.py's
settings (square 2 x 2 split, its chains, minibatches of --batch-size ratings, rounds of 10
steps, precisions every 10 rounds, test RMSE every 20 rounds, a draw kept every 10).

Timers in Python around the C calls of the bindings (pymf.bpmf._bpmf), each the median of
--repeats:
  round            DSGLDChains.run of 10 rounds / 10: the whole round, every chain, threaded
                   (the one hyper step of every 10 rounds included);
  block steps      BlockWorker.steps of one block, 10 steps, one thread: minibatch draw,
                   gradient, Gaussian noise and row moves; again without noise (the
                   difference: the Philox noise);
  state backup     a copy of every chain's whole state, as each round makes before its
                   steps (to restore it on divergence), timed as a NumPy copy of that size;
  hyper step       pymf_dsgld_hyper_step of one chain (precisions, rows without ratings);
  train RMSE       DSGLDChains.sq_error of one chain (a pass over all training ratings);
  test prediction  DSGLDChains.predict of one chain on the test set;
  draw             the chains' state to the original order (a kept draw);
  round, 1 thread  the round with one thread: the threads' efficiency.
The minibatch draw is not timed apart from the gradient in C; the noiseless steps' cost at
two ranks D splits into a part that does not grow with D (drawing the minibatch, indexing,
per-row bookkeeping) and a per-factor part (a line through the two points: an estimate).
Per round at those settings: round + (train RMSE + test prediction) x chains / 20 + draw /
10 (the engine's bookkeeping besides). Gibbs: BPMFGibbs sweeps timed the same way; both
are also given per rating processed.
Threads: --threads (default all cores). Prints JSON and a table; writes OUT.json and
OUT.png. --ratings N runs on a smaller matrix of the same model (ratings_10m.py --ratings N,
as bench/dsgld_large.py --ratings).
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ratings_10m  # noqa: E402
from _common import HelpFormatter, emit, ensure_parent, median_time, table  # noqa: E402

import pymf  # noqa: E402
from pymf.bpmf import _bpmf  # noqa: E402
from pymf.bpmf.kernel import BPMFKernel  # noqa: E402

TAU = 1 / 0.8 ** 2


def timed(fn, repeats):
    return median_time(fn, repeats)[0]


def dsgld_phases(train, test, D, args, threads):
    model = pymf.BPMF(D, tau=TAU)
    sampler = pymf.DSGLD(split="square", blocks=2, batch_size=args.batch_size, round_length=10,
                         step_size=pymf.AnnealedStep(args.eps0, kappa=1000), hyper_every=10,
                         n_threads=threads)
    mean_rating = float(train.values.mean())
    began = time.perf_counter()
    kernel = BPMFKernel(model, train, sampler, 0, mean_rating, threads)
    kernel.attach_test(test)
    setup = time.perf_counter() - began
    chains, layout, c_model = kernel.n_chains, kernel.layout, kernel.c_model
    eps = np.full(10, args.eps0)
    kernel.c.run(eps)  # warm: the first rounds touch every page
    out = {"D": D, "chains": chains, "tasks_per_round": chains * layout.c.group_size,
           "setup_seconds": setup}
    out["round"] = timed(lambda: kernel.c.run(eps), args.repeats) / 10
    h_user, h_item = layout.c.bias_correctors(args.batch_size)
    params = kernel.c.get_state(0)
    P, Q = layout.c.grid
    block = layout.c.group_block(layout.c.chain_group(0, 1), 0)
    worker = _bpmf.BlockWorker(layout.c, block, c_model, args.batch_size, h_user, h_item)
    p, q = divmod(block, Q)
    u0, u1 = worker.user_offset, worker.user_offset + worker.n_stripe_users
    i0, i1 = worker.item_offset, worker.item_offset + worker.n_stripe_items
    U, V = params.U[u0:u1].copy(), params.V[i0:i1].copy()
    a, b = params.a[u0:u1].copy(), params.b[i0:i1].copy()
    lambdas = params.lambdas.copy()
    out["block_steps"] = timed(lambda: worker.steps(1, True, U, V, a, b, lambdas, 1, 10, args.eps0),
                               args.repeats)
    out["block_steps_no_noise"] = timed(
        lambda: worker.steps(1, False, U, V, a, b, lambdas, 1, 10, args.eps0), args.repeats)
    out["noise"] = out["block_steps"] - out["block_steps_no_noise"]
    # the round's divergence backup: a memcpy of every chain's whole state (U, V, a, b)
    state = np.empty(chains * (sum(layout.shape) * (D + 1)))
    backup = np.empty_like(state)
    out["backup_copy"] = timed(lambda: np.copyto(backup, state), args.repeats)
    hyper_params = kernel.c.get_state(0)
    out["hyper_step"] = timed(lambda: _bpmf.hyper_step(layout.c, c_model, hyper_params, h_user,
                                                       h_item, 7, 10, threads), args.repeats)
    out["train_rmse"] = timed(lambda: kernel.c.sq_error(0), args.repeats)
    users, items = kernel.test_users, kernel.test_items
    out["test_prediction"] = timed(lambda: kernel.c.predict(0, users, items), args.repeats)
    out["draw"] = timed(kernel.draw, args.repeats)
    kernel.c.set_threads(1)
    out["round_one_thread"] = timed(lambda: kernel.c.run(eps), args.repeats) / 10
    kernel.c.set_threads(threads)
    # the round's parts: its tasks (chain x block, each `block steps`) spread over the
    # threads, the backup, a hyper step of every chain once in 10 rounds; the rest is what the
    # threads lose (waiting for the slower one, the machine's other jobs)
    tasks = out["tasks_per_round"]
    out["steps_per_round"] = tasks * out["block_steps"] / threads
    out["minibatch_gradient_moves_per_round"] = tasks * out["block_steps_no_noise"] / threads
    out["noise_per_round"] = tasks * out["noise"] / threads
    out["hyper_per_round"] = chains * out["hyper_step"] / 10
    out["backup_per_round"] = out["backup_copy"]
    out["unaccounted_per_round"] = (out["round"] - out["steps_per_round"] - out["hyper_per_round"]
                                    - out["backup_per_round"])
    out["thread_efficiency"] = out["round_one_thread"] / (threads * out["round"])
    out["trace_per_round"] = chains * (out["train_rmse"] + out["test_prediction"]) / 20
    out["draw_per_round"] = out["draw"] / 10
    out["total_per_round"] = out["round"] + out["trace_per_round"] + out["draw_per_round"]
    out["ratings_per_round"] = tasks * 10 * args.batch_size
    out["ratings_per_second_in_steps"] = (10 * args.batch_size) / out["block_steps"]
    out["seconds_per_rating_in_round"] = out["round"] / out["ratings_per_round"]
    return out


def gibbs_sweep(train, D, args, threads):
    model = pymf.BPMF(D, tau=TAU)
    sampler = pymf.BPMFGibbs(n_threads=threads)
    began = time.perf_counter()
    kernel = BPMFKernel(model, train, sampler, 0, float(train.values.mean()), threads)
    setup = time.perf_counter() - began
    kernel.run(np.zeros(1))  # warm
    sweep = timed(lambda: kernel.run(np.zeros(1)), args.gibbs_repeats)
    return {"setup_seconds": setup, "sweep": sweep}


def plot(rows, path):
    """ms per round on one thread: the tasks' steps split into the part that does not grow with
    D (the minibatch draw, indexing; estimated from the two ranks), the part that does and the
    noise, then the backup, hyper step, trace and draws; the measured rounds as markers."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(8, 4.5))
    labels = [f"D = {r['D']}" for r in rows]
    bottom = np.zeros(len(rows))
    for name, part in (
            ("minibatch draw, indexing (est.: not growing with D)",
             lambda r: r["tasks_per_round"] * r["block_steps_no_noise"]
             * r.get("steps_not_growing_with_D_share", 0.0)),
            ("gradient and moves (growing with D)",
             lambda r: r["tasks_per_round"] * r["block_steps_no_noise"]
             * (1 - r.get("steps_not_growing_with_D_share", 0.0))),
            ("Gaussian noise", lambda r: r["tasks_per_round"] * r["noise"]),
            ("state backup", lambda r: r["backup_per_round"]),
            ("hyper step", lambda r: r["hyper_per_round"]),
            ("train RMSE + test prediction (every 20)", lambda r: r["trace_per_round"]),
            ("draws (every 10)", lambda r: r["draw_per_round"])):
        values = np.array([part(r) for r in rows]) * 1e3
        ax.bar(labels, values, bottom=bottom, label=name, width=0.5)
        bottom += values
    x = np.arange(len(rows))
    ax.plot(x, [r["round_one_thread"] * 1e3 for r in rows], "k_", markersize=40, mew=2,
            label="measured round, 1 thread")
    ax.plot(x, [r["round"] * 1e3 for r in rows], "r_", markersize=40, mew=2,
            label="measured round, 2 threads (machine loaded)")
    ax.set_ylabel("ms per round (one thread's work)")
    ax.set_title("DSGLD round (2 chains x 2 blocks x 10 steps of 10,000 ratings), 10M ratings")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpFormatter)
    p.add_argument("--ratings", type=int, default=ratings_10m.N_RATINGS,
                   help="ratings of the synthetic matrix (bench/ratings_10m.py --ratings)")
    p.add_argument("--matrix", default="results/ratings_10m.npz",
                   help="the matrix's cache (bench/ratings_10m.py; generated if absent)")
    p.add_argument("--ranks", type=int, nargs="+", default=[10, 30],
                   help="BPMF ranks D (two or more: the split of the steps' cost by D)")
    p.add_argument("--batch-size", type=int, default=10_000, help="DSGLD's minibatch, in ratings")
    p.add_argument("--eps0", type=float, default=3e-6,
                   help="DSGLD's step: AnnealedStep(eps0, kappa=1000)")
    p.add_argument("--repeats", type=int, default=5, help="timings per phase (median)")
    p.add_argument("--gibbs-repeats", type=int, default=2, help="timed Gibbs sweeps (median)")
    p.add_argument("--threads", type=int, default=None, help="threads (default: all cores)")
    p.add_argument("--out", default="results/dsgld_phases",
                   help="path stem of the output: OUT.json and OUT.png")
    p.add_argument("--replot", default=None, help="only redraw the PNG of a saved JSON")
    args = p.parse_args(argv)
    if args.replot:
        with open(args.replot) as fh:
            return print(plot(json.load(fh)["rows"], ensure_parent(args.out + ".png")))
    threads = args.threads or os.cpu_count()
    ratings = ratings_10m.load(args.matrix, args.ratings)
    train, test = ratings.split(0.1, seed=0)
    del ratings
    rows = []
    for D in args.ranks:
        row = dsgld_phases(train, test, D, args, threads)
        row.update({f"gibbs_{k}": v for k, v in gibbs_sweep(train, D, args, threads).items()})
        row["rounds_per_gibbs_sweep"] = row["gibbs_sweep"] / row["total_per_round"]
        row["gibbs_seconds_per_rating"] = row["gibbs_sweep"] / train.nnz
        row["uptime"] = os.getloadavg()
        rows.append(row)
    if len(rows) >= 2:
        # gradient time = fixed + per_factor * D through the two ranks: the part that does not
        # grow with D holds the minibatch draw
        (d0, g0), (d1, g1) = [(r["D"], r["block_steps_no_noise"]) for r in rows[:2]]
        slope = (g1 - g0) / (d1 - d0)
        fixed = g0 - slope * d0
        for r in rows:
            r["steps_not_growing_with_D_share"] = fixed / r["block_steps_no_noise"]
    document = {"benchmark": "dsgld_phases", "threads": threads, "cores": os.cpu_count(),
                "batch_size": args.batch_size, "train": train.nnz, "test": test.nnz, "rows": rows}
    document["plot"] = plot(rows, ensure_parent(args.out + ".png"))
    emit(document, args.out + ".json")
    table(rows, [("D", "D", "d"), ("round s", "round", ".4f"),
                 ("per round s", "total_per_round", ".4f"),
                 ("batch+grad+move", "minibatch_gradient_moves_per_round", ".4f"),
                 ("noise", "noise_per_round", ".4f"), ("backup", "backup_per_round", ".4f"),
                 ("hyper/round", "hyper_per_round", ".4f"),
                 ("idle/other", "unaccounted_per_round", ".4f"),
                 ("trace/round", "trace_per_round", ".4f"), ("draw/round", "draw_per_round", ".4f"),
                 ("Gibbs sweep s", "gibbs_sweep", ".2f"),
                 ("rounds/sweep", "rounds_per_gibbs_sweep", ".1f"),
                 ("thread eff.", "thread_efficiency", ".2f")])
    for r in rows:
        print(f"D = {r['D']}: DSGLD {r['seconds_per_rating_in_round'] * 1e6:.2f} us per rating in a "
              f"round, Gibbs {r['gibbs_seconds_per_rating'] * 1e6:.2f} us per rating in a sweep; "
              f"{100 * r.get('steps_not_growing_with_D_share', float('nan')):.0f} % of the noiseless "
              "steps do not grow with D")


if __name__ == "__main__":
    main()
