"""The hybrid IBP sampler over MPI: one process of the chain per rank.

    mpiexec -n P python -m pymf.mpi ibp --data cambridge --n 1000 --samples 200 --out r.npz
    pymf.mpi.sample(model, X, pymf.HybridIBP(processes=P), n_samples=..., seed=...)

Rank r holds rows [N r / P, N (r + 1) / P) of X and Z (every rank reads the data; only its
rows are sampled there). One iteration: every rank runs the uncollapsed stage on its rows;
the ranks Allgather their feature counts (P x K+); p' (the same on every rank: drawn from
the master's stream) runs the collapsed tail; they Allgather their new-feature counts and
then their sufficient statistics (m, Z'Z, Z'X, sum x^2 over K+ plus the new features),
which every rank sums in rank order and hands to the same master step, so every rank
draws the same A, pi, sigma_x, sigma_a and alpha from the same stream and nothing has to be
broadcast. Summing gathered buffers in rank order, rather than MPI_SUM whose order of
addition is the library's, is what makes the chain equal, bit for bit, to the threads
sampler with P processes (tests/test_mpi_ibp.py). Kept draws, traces and checkpoints
gather Z; rank 0 writes the files, and every rank returns the result.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

from pymf.cliutil import last_traced
from pymf.data import Ratings
from pymf.engine.seeds import resolve_seed
from pymf.ibp.samplers import SPLIT_MERGE, HybridIBP
from pymf.ibp.sampling import run_ibp


def sample(model, data, sampler, n_samples, **options):
    """pymf.sample of the hybrid over MPI: call on every rank (sampler.processes must be the
    number of ranks); every rank returns the result, rank 0 writes the files."""
    from mpi4py import MPI
    names = ("burnin", "thin", "seed", "test_mask", "trace_every", "keep_samples",
             "checkpoint", "checkpoint_every", "progress", "callback")
    unknown = set(options) - set(names)
    if unknown:
        raise TypeError(f"unexpected options {sorted(unknown)}")
    defaults = {"burnin": 0, "thin": 1, "seed": None, "test_mask": None, "trace_every": 1,
                "keep_samples": True, "checkpoint": None, "checkpoint_every": None,
                "progress": None, "callback": None}
    defaults.update(options)
    comm = MPI.COMM_WORLD
    # seed=None draws fresh entropy once, on rank 0: every rank must use the same seed (it
    # used to be refused here, unlike pymf.sample and the other families' MPI runners)
    defaults["seed"] = comm.bcast(resolve_seed(defaults["seed"]) if comm.Get_rank() == 0
                                  else None, root=0)
    return run_ibp(model, data, sampler, n_samples, *(defaults[k] for k in names), comm=comm)


DATA_HELP = "'cambridge' (the 6 x 6 four-bar images), a .npy file of X or a .npz holding X"


def load_data(spec, n, sigma_x, seed):
    """--data cambridge (make_cambridge(n, sigma_x, seed)) or a .npy / .npz file of X."""
    from pymf.ibp.data import make_cambridge
    if spec == "cambridge":
        return make_cambridge(n=n, sigma_x=sigma_x, seed=seed)[0]
    from pymf.cliutil import read_npy, read_npz
    if not os.path.exists(spec):
        raise FileNotFoundError(f"--data {spec!r}: no such file (or use --data cambridge)")
    if spec.endswith(".npz"):
        arrays, held = read_npz(spec, ("X",), DATA_HELP)
        if "X" not in arrays:
            raise ValueError(f"--data {spec!r} holds no array X (it holds "
                             f"{', '.join(held) or 'nothing'}); --data takes {DATA_HELP}")
        return arrays["X"]
    return read_npy(spec, DATA_HELP)


def add_arguments(p):
    p.add_argument("--data", default="cambridge", help=DATA_HELP)
    p.add_argument("--n", type=int, default=1000, help="rows of --data cambridge")
    p.add_argument("--sigma-x", type=float, default=0.5, help="noise sd of --data cambridge")
    p.add_argument("--test-fraction", type=float, default=0.1,
                   help="checkerboard held-out cells over this fraction of the first rows; 0: none")
    p.add_argument("--samples", type=int, default=200, help="iterations after burn-in")
    p.add_argument("--burnin", type=int, default=100, help="iterations first, not kept")
    p.add_argument("--thin", type=int, default=1, help="keep every thin-th iteration")
    p.add_argument("--sub-iterations", type=int, default=5, help="L of the hybrid")
    p.add_argument("--warm-start", type=int, default=0,
                   help="iterations in which every process proposes features")
    p.add_argument("--split-merge", type=int, default=SPLIT_MERGE,
                   help="split-merge proposals per iteration (0: none)")
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--checkpoint", default=None, help="a .npz checkpoint (resumed if present)")


def run_from_args(args, sampler, sample_fn, out):
    from pymf.ibp.data import checkerboard_mask
    from pymf.ibp.models import IBPLinearGaussian
    X = load_data(args.data, args.n, args.sigma_x, args.seed)
    if X.ndim != 2:
        raise ValueError(f"--data: the IBP needs a 2-D array (rows x columns), got shape "
                         f"{X.shape}")
    if args.test_fraction > 0 and X.shape[1] < 2:
        raise ValueError("--test-fraction: the checkerboard of held-out cells would hold out "
                         "whole rows of a one-column matrix; give --test-fraction 0")
    mask = checkerboard_mask(*X.shape, args.test_fraction) if args.test_fraction > 0 else None
    started = time.perf_counter()
    result = sample_fn(IBPLinearGaussian(), X, sampler, args.samples, burnin=args.burnin,
                       thin=args.thin, seed=args.seed, test_mask=mask,
                       checkpoint=args.checkpoint, progress=False)
    summary = {"sampler": sampler.params(), "shape": list(X.shape),
               "seconds": time.perf_counter() - started, "iterations": result.iterations,
               "final_K": last_traced(result.trace, "K"),
               "final_sigma_x": last_traced(result.trace, "sigma_x"),
               "predictive_loglik": result.predictive_loglik}
    if "heldout_loglik" in result.trace:
        summary["final_heldout_loglik"] = last_traced(result.trace, "heldout_loglik")
    if mask is not None and result.n_kept and result.posterior:  # (MPI: rank 0 keeps the draws)
        rows, cols = np.nonzero(mask)
        test = Ratings(rows, cols, X[rows, cols], shape=X.shape)
        # the central posterior predictive intervals' coverage of the held-out cells
        summary["coverage"] = {str(level): value for level, value in result.coverage(test).items()}
    return result, summary


def main(argv=None):
    from mpi4py import MPI
    p = argparse.ArgumentParser(prog="python -m pymf.mpi ibp",
                                description="the hybrid IBP sampler, one process per rank")
    add_arguments(p)
    p.add_argument("--out", required=True, help="result .npz (written by rank 0)")
    args = p.parse_args(argv)
    comm = MPI.COMM_WORLD
    sampler = HybridIBP(processes=comm.Get_size(), sub_iterations=args.sub_iterations,
                        warm_start=args.warm_start, n_threads=1,
                        split_merge=args.split_merge)
    result, summary = run_from_args(args, sampler, sample, args.out)
    if comm.Get_rank() == 0:
        summary["result"] = result.save(args.out)
        summary["ranks"] = comm.Get_size()
        print(json.dumps(summary))
        sys.stdout.flush()
    return 0
