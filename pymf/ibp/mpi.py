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
import sys
import time

import numpy as np

from pymf.errors import DivergenceError
from pymf.ibp.kernel import IBPKernel
from pymf.ibp.samplers import HybridIBP


def _row_start(N, P, p):
    return N * p // P


class RankKernel(IBPKernel):
    """The engine's kernel on one rank: its process's rows; collective calls at every
    step of the run loop (each rank runs the same loop)."""

    def __init__(self, comm, model, X, train, settings, chain_seed, X_eval, test_mask):
        from pymf.ibp.sampling import make_chain
        self.comm = comm
        P, rank = comm.Get_size(), comm.Get_rank()
        if settings["collapsed"] or settings["processes"] != P:
            raise ValueError(f"pymf.mpi.sample runs HybridIBP with processes equal to the "
                             f"number of ranks ({P}), got processes={settings['processes']}")
        N = X.shape[0]
        self.bounds = [_row_start(N, P, p) for p in range(P + 1)]
        self.row0, self.row1 = self.bounds[rank], self.bounds[rank + 1]
        settings = dict(settings, threads=1)
        chain = make_chain(model, X, train, settings, chain_seed, first_process=rank, n_local=1,
                           rows=(self.row0, self.row1 - self.row0))
        super().__init__(chain, X_eval, test_mask)
        missing = ~train
        self.missing_counts = [int(missing[self.bounds[p]:self.bounds[p + 1]].sum())
                               for p in range(P)]

    def _allgather_rows(self, local, width):
        """The rows of every rank (rows x width), in rank order."""
        from mpi4py import MPI
        counts = [(self.bounds[p + 1] - self.bounds[p]) * width for p in range(len(self.bounds) - 1)]
        out = np.empty((self.bounds[-1], width))
        self.comm.Allgatherv(np.ascontiguousarray(local, dtype=np.float64),
                             [out, counts, np.cumsum([0] + counts[:-1]), MPI.DOUBLE])
        return out

    def _check_everywhere(self, step):
        """Runs step(); if it raised on any rank, every rank raises."""
        failure = None
        try:
            step()
        except (DivergenceError, RuntimeError, ValueError, MemoryError) as exc:
            failure = exc
        failed = self.comm.allgather(None if failure is None else
                                     (type(failure).__name__, str(failure),
                                      getattr(failure, "iteration", None)))
        for entry in failed:
            if entry is not None:
                if failure is not None:
                    raise failure
                name, message, iteration = entry
                if name == "DivergenceError":
                    raise DivergenceError(message, iteration=iteration)
                raise RuntimeError(f"another rank failed: {name}: {message}")

    def run(self, steps):
        comm, chain = self.comm, self.chain
        P = comm.Get_size()
        for _ in range(len(steps)):
            chain.begin()
            self._check_everywhere(chain.local_sweeps)
            local = chain.local_counts()
            counts = np.empty((P, local.shape[1]))
            comm.Allgather(local, counts)
            self._check_everywhere(lambda: chain.tail_sweeps(counts))
            new_local = chain.new_features().astype(np.intc)
            new_all = np.empty(P, dtype=np.intc)
            comm.Allgather(new_local, new_all)
            K_total = chain.n_features + int(new_all.sum())
            stats = chain.local_stats(new_all, K_total)
            gathered = np.empty((P, stats.shape[1]))
            comm.Allgather(stats, gathered)
            summed = np.zeros(stats.shape[1])
            for p in range(P):  # in rank order, as the threads sampler sums its processes
                summed += gathered[p]
            self._check_everywhere(lambda: chain.master(summed))

    def state(self):
        if self._state is None or int(self._state["t"]) != self.counter:
            st = self.chain.state()
            K = st["Z"].shape[1]
            st["Z"] = self._allgather_rows(st["Z"], K) if K else np.zeros((self.bounds[-1], 0))
            self._state = st
        return self._state

    def y_missing(self):
        from mpi4py import MPI
        local = self.chain.state()["Y_missing"]
        out = np.empty(sum(self.missing_counts))
        self.comm.Allgatherv(local, [out, self.missing_counts,
                                     np.cumsum([0] + self.missing_counts[:-1]), MPI.DOUBLE])
        return out

    def set_state(self, Z, A, pi, hyper, Y_missing, t):
        rank = self.comm.Get_rank()
        first = sum(self.missing_counts[:rank])
        local = None if Y_missing is None else Y_missing[first:first + self.missing_counts[rank]]
        self.chain.set_state(Z, A, pi, hyper, local, t)
        self._state = None

    def agree(self, requested, n):
        from mpi4py import MPI
        return (bool(self.comm.allreduce(bool(requested), op=MPI.LOR)),
                int(self.comm.allreduce(int(n), op=MPI.MIN)))

    def agree_stop(self, stop):
        return bool(self.comm.bcast(bool(stop), root=0))


def sample(model, data, sampler, n_samples, **options):
    """pymf.sample of the hybrid over MPI: call on every rank (sampler.processes must be the
    number of ranks); every rank returns the result, rank 0 writes the files."""
    from mpi4py import MPI

    from pymf.ibp.sampling import run_ibp
    names = ("burnin", "thin", "seed", "test_mask", "trace_every", "keep_samples",
             "checkpoint", "checkpoint_every", "progress", "callback")
    unknown = set(options) - set(names)
    if unknown:
        raise TypeError(f"unexpected options {sorted(unknown)}")
    defaults = {"burnin": 0, "thin": 1, "seed": None, "test_mask": None, "trace_every": 1,
                "keep_samples": True, "checkpoint": None, "checkpoint_every": None,
                "progress": None, "callback": None}
    defaults.update(options)
    if defaults["seed"] is None:
        raise ValueError("pymf.mpi.sample needs an explicit seed (every rank must agree)")
    return run_ibp(model, data, sampler, n_samples, *(defaults[k] for k in names),
                   comm=MPI.COMM_WORLD)


def load_data(spec, n, sigma_x, seed):
    """--data cambridge (make_cambridge(n, sigma_x, seed)) or a .npy / .npz file of X."""
    from pymf.ibp.data import make_cambridge
    if spec == "cambridge":
        return make_cambridge(n=n, sigma_x=sigma_x, seed=seed)[0]
    if spec.endswith(".npz"):
        with np.load(spec, allow_pickle=False) as archive:
            return archive["X"]
    return np.load(spec, allow_pickle=False)


def add_arguments(p):
    p.add_argument("--data", default="cambridge",
                   help="'cambridge' (the 6 x 6 four-bar images) or a .npy file of X (or a "
                        ".npz holding X)")
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
    p.add_argument("--seed", type=int, default=0, help="random seed")
    p.add_argument("--checkpoint", default=None, help="a .npz checkpoint (resumed if present)")


def run_from_args(args, sampler, sample_fn, out):
    from pymf.ibp.data import checkerboard_mask
    from pymf.ibp.models import IBPLinearGaussian
    X = load_data(args.data, args.n, args.sigma_x, args.seed)
    mask = checkerboard_mask(*X.shape, args.test_fraction) if args.test_fraction > 0 else None
    started = time.perf_counter()
    result = sample_fn(IBPLinearGaussian(), X, sampler, args.samples, burnin=args.burnin,
                       thin=args.thin, seed=args.seed, test_mask=mask,
                       checkpoint=args.checkpoint, progress=False)
    summary = {"sampler": sampler.params(), "shape": list(X.shape),
               "seconds": time.perf_counter() - started, "iterations": result.iterations,
               "final_K": float(result.trace["K"][-1]),
               "final_sigma_x": float(result.trace["sigma_x"][-1]),
               "predictive_loglik": result.predictive_loglik}
    if "heldout_loglik" in result.trace:
        summary["final_heldout_loglik"] = float(result.trace["heldout_loglik"][-1])
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
                        warm_start=args.warm_start, n_threads=1)
    result, summary = run_from_args(args, sampler, sample, args.out)
    if comm.Get_rank() == 0:
        summary["result"] = result.save(args.out)
        summary["ranks"] = comm.Get_size()
        print(json.dumps(summary))
        sys.stdout.flush()
    return 0
