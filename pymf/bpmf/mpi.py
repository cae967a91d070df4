"""DSGLD for BPMF over MPI: a parameter server and workers (DSGLD paper, Algorithms 2-3).

    mpiexec -n W+1 python -m pymf.mpi dsgld --data PATH --rank 10 --split square --blocks 2 \\
        --samples 500 --burnin 100 --thin 5 --out result.npz

Rank 0 is the parameter server: it holds U, V, a, b and the precisions of every chain,
evaluates (training RMSE, Welford predictions of the test ratings, traces) and draws the
precisions by Gibbs. Ranks 1..W are workers; block s belongs to worker 1 + (s mod W). In
round r, chain c works on orthogonal group (c + r - 1) mod n_groups; for each of its blocks
the server sends the sub-parameters U^(c,s), V^(c,s) (the block's user and item stripes,
their biases, and the chain's precisions) to the block's worker, which runs gamma DSGLD
steps on its local ratings with the same C kernel as the shared-memory sampler
(pymf.bpmf._bpmf.BlockWorker) and sends them back. Only these sub-parameters travel, never the
whole U or V. Workers know the schedule, so messages carry no headers: each worker handles
its tasks of a round in (chain, slot) order.

Same seed, data and settings as pymf.sample(model, data, pymf.DSGLD(...)) give the same
chains bit for bit (tests/test_mpi_bpmf.py), whatever W is. Every rank reads the data file
itself (the ratings are not sent); a worker keeps only its blocks' ratings in use.

A diverging block makes the server discard the whole round (every chain keeps its state
after the previous round, as in shared memory), stop the workers, and raise
pymf.DivergenceError naming the round.

Ctrl-C (SIGINT) at the server stops the run as pymf.sample does: at the next trace point,
with the checkpoint written and the draws kept so far returned. A worker that gets it alone
tells the server (a message of its own tag, read where the run loop asks whether to stop),
and the run stops the same way; a second Ctrl-C at that worker ends the whole job at once.
A worker used to die alone and leave the server waiting for ever.
"""
import warnings
import argparse
import json
import os
import sys

import numpy as np

from pymf.bpmf import _bpmf
from pymf.bpmf.kernel import (_CHAIN_ARRAYS, BPMFKernel, ChainsKernel, _rmse, precision_stats,
                              rmse_limit)
from pymf.bpmf.layout import Layout, _initial_params, bpmf_seeds
from pymf.bpmf.samplers import DSGLD
from pymf.bpmf.sampling import sample_bpmf
from pymf.engine.interrupt import DeferredInterrupt, ForcedInterrupt
from pymf.engine.seeds import resolve_seed
from pymf.errors import DivergenceError, abort_mpi_job, user_stacklevel

_TAG_TASK, _TAG_RESULT, _TAG_INTERRUPTED = 11, 12, 13


def _schedule(layout, n_chains, n_workers, round_):
    """[(chain, block, worker)] of a round in (chain, slot) order."""
    tasks = []
    for c in range(n_chains):
        g = layout.chain_group(c, round_)
        for slot in range(layout.group_size):
            s = layout.group_block(g, slot)
            tasks.append((c, s, 1 + s % n_workers))
    return tasks


class _Setup:
    """What every rank derives from (model, ratings, sampler, seed) in the same way."""

    def __init__(self, model, ratings, sampler, seed):
        self.model, self.sampler = model, sampler
        self.n_chains = sampler.n_chains
        permute_rng, self.init_rng, _, self.noise_seeds, self.hyper_seeds = \
            bpmf_seeds(seed, self.n_chains)
        self.layout = Layout(ratings, sampler.grid, sampler.permute, permute_rng)
        self.mean_rating = float(ratings.values.mean()) if model.mean_rating is None \
            else model.mean_rating
        self.c_model = model.c_model(self.mean_rating)
        self.h_user, self.h_item = self.layout.c.bias_correctors(sampler.batch_size)
        L, M = ratings.shape
        D = model.rank
        P, Q = sampler.grid
        rs, cs = self.layout.c.row_start, self.layout.c.col_start
        self.stripes = [(rs[s // Q], rs[s // Q + 1], cs[s % Q], cs[s % Q + 1]) for s in range(P * Q)]
        self.D = D

    def buffer_size(self, block):
        u0, u1, i0, i1 = self.stripes[block]
        return (u1 - u0) * (self.D + 1) + (i1 - i0) * (self.D + 1) + _bpmf.n_precisions(self.D) + 1


class _ServerChains(ChainsKernel):
    """The parameter server's chains: the engine's kernel, with the face of the
    shared-memory chains (pymf.bpmf.kernel)."""

    unit = "round"

    def __init__(self, comm, setup, ratings):
        self.comm, self.setup = comm, setup
        self.ratings, self.init = ratings, None
        self.model, self.sampler = setup.model, setup.sampler
        self.c_model = setup.c_model
        self.n_threads = setup.sampler.n_threads or 0  # the server's own passes over the data
        self.n_chains = setup.n_chains
        self.layout = setup.layout
        self.n_workers = comm.Get_size() - 1
        self.params = [_bpmf.Params(setup.D, *_initial_params(setup.model, ratings.shape,
                                                              setup.init_rng))
                       for _ in range(self.n_chains)]
        self.nnz = ratings.nnz
        self.rmse_limit = rmse_limit(ratings.values, setup.mean_rating)
        self.t = 0
        self.is_gibbs = False

    def _pack(self, p, block, out):
        u0, u1, i0, i1 = self.setup.stripes[block]
        parts = (p.U[u0:u1].ravel(), p.V[i0:i1].ravel(), p.a[u0:u1], p.b[i0:i1], p.lambdas)
        k = 0
        for part in parts:
            out[k:k + part.size] = part
            k += part.size
        out[k] = 0.0

    def _unpack(self, buf, p, block):
        u0, u1, i0, i1 = self.setup.stripes[block]
        D = self.setup.D
        k = 0
        for target, n in ((p.U[u0:u1], (u1 - u0) * D), (p.V[i0:i1], (i1 - i0) * D),
                          (p.a[u0:u1], u1 - u0), (p.b[i0:i1], i1 - i0)):
            target.reshape(-1)[:] = buf[k:k + n]
            k += n

    def _run_units(self, steps):
        # the rounds alone: the per-row plan's split is RowStepKernel.run's, as in shared
        # memory (the factors reach the workers before the first bounded round)
        from mpi4py import MPI
        sampler = self.sampler
        for eps in steps:
            round_ = self.t + 1
            self.comm.bcast(("round", float(eps), round_), root=0)
            tasks = _schedule(self.layout.c, self.n_chains, self.n_workers, round_)
            sends, recvs, requests = [], [], []
            for c, s, w in tasks:
                buf = np.empty(self.setup.buffer_size(s))
                self._pack(self.params[c], s, buf)
                sends.append(buf)
                requests.append(self.comm.Isend(buf, dest=w, tag=_TAG_TASK))
            for c, s, w in tasks:
                buf = np.empty(self.setup.buffer_size(s))
                recvs.append(buf)
                requests.append(self.comm.Irecv(buf, source=w, tag=_TAG_RESULT))
            MPI.Request.Waitall(requests)
            failed = [(c, s, buf[-1]) for (c, s, _), buf in zip(tasks, recvs) if buf[-1] != 0.0]
            if failed:
                c, s, step = failed[0]
                exc = DivergenceError(
                    f"round {round_} of chain {c}: DSGLD diverged at step {int(step)} on block "
                    f"{s} (step size {eps:g}); the chains keep their state after round "
                    f"{round_ - 1}", iteration=round_)
                raise exc
            for (c, s, _), buf in zip(tasks, recvs):
                self._unpack(buf, self.params[c], s)
            if sampler.hyper_every > 0 and round_ % sampler.hyper_every == 0:
                for c in range(self.n_chains):
                    _bpmf.hyper_step(self.layout.c, self.setup.c_model, self.params[c],
                                     self.setup.h_user, self.setup.h_item,
                                     int(self.setup.hyper_seeds[c]), round_)
            self.t = round_

    def auto_step(self, seed, schedule=None, burnin=0):
        """step_size="auto": what shared memory chooses for the same data, settings and
        seed. The server holds every chain and the whole ratings, so it builds the
        shared-memory chains at the same start (init included) and runs their rule and
        pilot (pymf.bpmf.kernel.BPMFKernel.auto_step); the workers get the step with each
        round, as any other. Returns (eps0, info)."""
        kernel = BPMFKernel(self.model, self.ratings, self.sampler, seed, self.setup.mean_rating,
                            self.sampler.n_threads or 0)
        if self.init is not None:
            kernel.set_initial(self.init)
        if self.tau_reference is not None:
            kernel.use_tau_reference(self.tau_reference)
        # the same pilot steps as shared memory's; its kept end state stays with this
        # throwaway kernel (the workers run the pilot's rounds again)
        return kernel.auto_step(seed, schedule, burnin)

    def chain_params(self, chain):
        return self.params[chain]

    def agree(self, requested, n):
        """Stop (as on Ctrl-C here) where a worker reports that it got Ctrl-C."""
        from mpi4py import MPI
        status = MPI.Status()
        if self.comm.Iprobe(source=MPI.ANY_SOURCE, tag=_TAG_INTERRUPTED, status=status):
            worker = self.comm.recv(source=status.Get_source(), tag=_TAG_INTERRUPTED)
            warnings.warn(f"worker rank {worker} got Ctrl-C (SIGINT): the run stops as on "
                          "Ctrl-C at the server", RuntimeWarning, stacklevel=user_stacklevel())
            requested = True
        return requested, n

    def apply_row_steps(self, step_user, step_item, noise_user, noise_item, from_round):
        """Every worker gets the per-row step and noise factors (grid order) once; they
        use them in the rounds from from_round on, as the shared-memory chains do."""
        self.comm.bcast(("row_steps", (step_user, step_item, noise_user, noise_item,
                                       int(from_round)), 0), root=0)

    def _apply_tau_reference(self, tau_reference):
        """Every worker gets the chains' tau references (the rounds from the next on use
        them, as the shared-memory chains' do)."""
        self.comm.bcast(("tau_reference", np.array(tau_reference), 0), root=0)

    def set_initial(self, init):
        """Every chain from init (pymf.bpmf.check_init's dict, original order)."""
        self.init = init
        for c, p in enumerate(self.params):
            for target, value in zip((p.U, p.V, p.a, p.b),
                                     self.layout.to_grid(*(init[key][c] for key in "UVab"))):
                target[...] = value

    def checkpoint_state(self):
        """As pymf.bpmf._Chains.checkpoint_state: a checkpoint of the server resumes in
        shared memory and the other way round."""
        state = {key: np.stack([getattr(p, key) for p in self.params]) for key in _CHAIN_ARRAYS}
        state["counter"] = np.array(self.t)
        return state

    def restore_state(self, state):
        self._drawn = None
        for c, p in enumerate(self.params):
            for key in _CHAIN_ARRAYS:
                value = np.asarray(state[key][c], dtype=np.float64)
                if value.shape != getattr(p, key).shape:
                    raise ValueError(f"the checkpoint's {key} has shape {value.shape}, this run's "
                                     f"{getattr(p, key).shape}")
                getattr(p, key)[...] = value
        self.t = int(state["counter"])

    def predict(self, chain, users_grid, items_grid):
        return _bpmf.predict(self.setup.c_model, self.params[chain], users_grid, items_grid,
                             self.n_threads)

    def train_rmse(self, chain):
        return _rmse(_bpmf.sq_error(self.layout.c, self.setup.c_model, self.params[chain],
                                    self.n_threads), self.nnz)

    def state(self, chain):
        p = self.params[chain]
        U, V, a, b = self.layout.to_original(p.U, p.V, p.a, p.b)
        return U, V, a, b, precision_stats(p.lambdas, self.model)

    def stop(self):
        self.comm.bcast(("stop", 0.0, 0), root=0)


def _worker_loop(comm, setup):
    """Serve the server's rounds until it says stop. Ctrl-C here is reported to the server
    once (after the next command arrives: a blocking MPI call does not return to Python
    before), which stops the run at its next trace point; a second one ends the job."""
    try:
        with DeferredInterrupt() as interrupt:
            _serve(comm, setup, interrupt)
    except ForcedInterrupt as exc:
        abort_mpi_job(exc)


def _serve(comm, setup, interrupt):
    rank, n_workers = comm.Get_rank(), comm.Get_size() - 1
    reported = False
    sampler = setup.sampler
    workers = {}
    D = setup.D
    row_steps, row_steps_from = None, None
    tau_reference = None
    while True:
        # the server names the round: a run resumed from a checkpoint starts past round 1
        command, eps, round_ = comm.bcast(None, root=0)
        if command == "row_steps":
            row_steps, row_steps_from = eps[:4], eps[4]
            for worker in workers.values():
                worker.set_row_steps(*row_steps)
            continue
        if command == "tau_reference":
            tau_reference = eps
            continue
        if command != "round":
            return
        if interrupt.requested and not reported:
            # the server reads it where its run loop asks whether to stop (a round later at
            # most): never after "stop", so that no message is left unread
            comm.send(rank, dest=0, tag=_TAG_INTERRUPTED)
            reported = True
        use_row_steps = row_steps is not None and round_ >= row_steps_from
        first_step = (round_ - 1) * sampler.round_length + 1
        for c, s, w in _schedule(setup.layout.c, setup.n_chains, n_workers, round_):
            if w != rank:
                continue
            if s not in workers:
                workers[s] = _bpmf.BlockWorker(setup.layout.c, s, setup.c_model,
                                               sampler.batch_size, setup.h_user, setup.h_item)
                if row_steps is not None:
                    workers[s].set_row_steps(*row_steps)
            worker = workers[s]
            buf = np.empty(setup.buffer_size(s))
            comm.Recv(buf, source=0, tag=_TAG_TASK)
            nu, ni = worker.n_stripe_users, worker.n_stripe_items
            k = 0
            U = buf[k:k + nu * D].reshape(nu, D)
            k += nu * D
            V = buf[k:k + ni * D].reshape(ni, D)
            k += ni * D
            a = buf[k:k + nu]
            k += nu
            b = buf[k:k + ni]
            k += ni
            lambdas = buf[k:k + _bpmf.n_precisions(D)].copy()
            try:
                worker.steps(int(setup.noise_seeds[c]), True, U, V, a, b, lambdas, first_step,
                             sampler.round_length, eps, sampler.noise_correction,
                             use_row_steps,
                             0.0 if tau_reference is None else float(tau_reference[c]))
                buf[-1] = 0.0
            except DivergenceError as exc:
                buf[-1] = float(exc.iteration or -1)
            comm.Send(buf, dest=0, tag=_TAG_RESULT)


def sample(model, data, sampler, n_samples, burnin=0, thin=1, seed=None, test=None,
           trace_every=None, keep_samples=True, burnin_rmse=None, init=None, checkpoint=None,
           checkpoint_every=None, comm=None):
    """Call on every rank of an MPI job with >= 2 ranks. Returns the BPMFResult on rank 0
    (the server) and None on the workers.

    init, checkpoint and checkpoint_every as in pymf.sample: the server holds every chain's
    state, so it alone reads and writes the checkpoint (one .npz), in the same format as
    the shared-memory sampler's: a run checkpointed in one resumes in the other."""
    if comm is None:
        from mpi4py import MPI
        comm = MPI.COMM_WORLD
    if comm.Get_size() < 2:
        raise ValueError("the DSGLD parameter server needs at least 2 MPI ranks (a server and "
                         "one worker); for one process use pymf.sample")
    if not isinstance(sampler, DSGLD):
        raise TypeError(f"pymf.bpmf.mpi runs pymf.DSGLD, got {sampler!r}")
    ratings = model.check_data(data)
    sampler = sampler.for_data(ratings.nnz)
    # seed=None draws fresh entropy once, on the server: every rank must use the same seed
    seed = comm.bcast(resolve_seed(seed) if comm.Get_rank() == 0 else None, root=0)
    setup = _Setup(model, ratings, sampler, seed)
    if comm.Get_rank() != 0:
        _worker_loop(comm, setup)
        return None
    chains = _ServerChains(comm, setup, ratings)
    try:
        return sample_bpmf(model, ratings, sampler, n_samples, burnin=burnin, thin=thin, seed=seed,
                           test=test, trace_every=trace_every, keep_samples=keep_samples,
                           burnin_rmse=burnin_rmse, init=init, checkpoint=checkpoint,
                           checkpoint_every=checkpoint_every, _kernel=chains)
    finally:
        chains.stop()


def load_ratings(path):
    """The ratings of --data (pymf.cliutil.read_data_file: MovieLens, .npy, .npz with V or with
    rows, cols, values and shape); a dense matrix means every entry is rated."""
    from pymf.cliutil import read_data_file
    from pymf.data import Ratings
    data = read_data_file(str(path))
    return data if isinstance(data, Ratings) else Ratings.from_dense(data)


def _parser():
    from pymf.bpmf.cli import bpmf_arguments
    p = argparse.ArgumentParser(prog="python -m pymf.mpi dsgld", description=__doc__.split("\n")[0])
    bpmf_arguments(p)
    p.add_argument("--out", required=True, help="result .npz (written by rank 0)")
    p.add_argument("--checkpoint", default=None,
                   help="checkpoint .npz (written by rank 0); if it exists the run resumes from "
                        "it: resubmitting the same job goes on where it stopped")
    return p


_SETUP_ERRORS = (ValueError, FileNotFoundError, FileExistsError, NotADirectoryError,
                 IsADirectoryError, PermissionError)


def main(argv=None):
    """Every rank reads the data and checks the settings itself; then the ranks compare
    what they found, so that a bad input, even on one rank alone (a data file missing on a
    node), stops every rank: rank 0 says why in one line and every rank exits with status
    2. Ranks that read different data (a stale copy on one node) are refused alike."""
    from mpi4py import MPI
    from pymf.bpmf.cli import bpmf_run_from_args
    from pymf.engine.driver import digest
    args = _parser().parse_args(argv)
    comm = MPI.COMM_WORLD
    try:
        setup = bpmf_run_from_args(args, load_ratings(args.data))
        found = (None, digest(setup[0]))
    except _SETUP_ERRORS as exc:
        setup, found = None, (str(exc), None)
    # a rank that failed alone left the server (or a worker) waiting for ever
    views = comm.allgather(found)
    problems = [(rank, problem) for rank, (problem, _) in enumerate(views) if problem]
    if problems:
        alike = len({problem for _, problem in problems}) == 1 and len(problems) == len(views)
        message = problems[0][1] if alike else "; ".join(f"rank {r}: {p}" for r, p in problems)
    elif len({data for _, data in views}) != 1:
        message = ("the ranks read different data (a stale copy on a node?): digests " +
                   ", ".join(f"rank {r}: {d[:12]}" for r, (_, d) in enumerate(views)))
    else:
        message = None
    if message is not None:
        if comm.Get_rank() == 0:
            print(f"pymf.bpmf.mpi: error: {message}", file=sys.stderr)
        return 2
    try:
        return _run(args, *setup)
    except _SETUP_ERRORS as exc:
        if comm.Get_rank() == 0:
            print(f"pymf.bpmf.mpi: error: {exc}", file=sys.stderr)
        return 2
    except DivergenceError as exc:
        # the server's (it stopped the workers): one line and the draws kept before it, as
        # the PSGLD launcher does (a traceback, and nothing saved, before)
        kept = ""
        if exc.result is not None:
            kept = f" (the draws kept before it are in {exc.result.save(args.out)})"
        print(f"pymf.bpmf.mpi: error: DivergenceError: {exc}{kept}", file=sys.stderr)
        return 2


def _run(args, train, test, model, sampler):
    res = sample(model, train, sampler, args.samples, burnin=args.burnin, thin=args.thin,
                 seed=args.seed, test=test, keep_samples=not args.no_keep_samples,
                 burnin_rmse=args.burnin_rmse, checkpoint=args.checkpoint,
                 checkpoint_every=args.checkpoint_every)
    if res is not None:
        path = res.save(args.out)
        from pymf.cliutil import last_traced
        print(json.dumps({"out": os.path.abspath(path),
                          "test_rmse": last_traced(res.trace, "test_rmse"),
                          "seconds": last_traced(res.trace, "time"),
                          "interrupted": res.interrupted}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
