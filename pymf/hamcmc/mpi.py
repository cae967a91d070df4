"""HAMCMC for matrix factorisation over MPI: pymf.mpi.sample(pymf.TweedieNMF(...), data,
pymf.HAMCMC(blocks=B, ...), n_samples, out_dir=DIR, ...) on each of B ranks.

The set-up, the files, checkpoints, Ctrl-C and divergence are the PSGLD ring's
(pymf.nmf.mpi.sample_ring); what differs is each iteration (HamcmcRingKernel._ring):

  1. rank r runs phase one of its block (row piece r, column piece (r + p_t) mod B): the
     gradient, the noise and its partial Gram matrix of the L-BFGS basis (O(M^2) numbers);
  2. one Allreduce(SUM) of a B x (2M)^2 buffer in which each rank fills only its own slot,
     so every sum is one number plus zeros (exact in any order); the C core then adds the
     slots in rank order from 0.0, as shared memory adds its blocks' matrices;
  3. phase two: the new state of its block and its memory pair;
  4. its H piece, with that piece's window and pairs (3M - 2 planes), goes to the rank that
     works on it in part p_{t+1} (a Sendrecv shifted by p_{t+1} - p_t; none when the part
     does not change).
With the same seed, data and grid the chain equals pymf.sample's with blocks=B bit for bit
(random or cyclic parts), and the checkpoints of either resume the other.
"""
import numpy as np

from pymf.errors import DivergenceError
from pymf.hamcmc.mf import GridSettings, check_schedule, make_chain
from pymf.nmf.mpi import _TAGS, RingKernel, _gather_pieces, sample_ring


class HamcmcRingKernel(RingKernel):
    """One rank's share of a HAMCMC chain (see the module docstring)."""

    any_part_order = True

    def __init__(self, comm, chain, grid, model, test, row_start, col_start):
        super().__init__(comm, chain, grid, model, test, row_start, col_start)
        self.held = self._piece_for(self.rank, self.counter + 1)
        self._partials = np.zeros(self.B * chain.gram_len)

    def _piece_for(self, rank, t):
        """The column piece `rank` works on at iteration t."""
        return (rank + self.chain.part(t)) % self.B

    def _held_pieces(self):
        t = self.counter + 1  # after t - 1 iterations each rank holds its piece of the next
        return [self._piece_for(r, t) for r in range(self.B)]

    def _save(self):
        return self.chain.snapshot()

    def _rewind(self, saved, start):
        self.chain.restore(saved)
        self.held = self._piece_for(self.rank, start + 1)

    def _ring(self, steps):
        import time

        from mpi4py import MPI
        comm, B, chain = self.comm, self.B, self.chain
        length = chain.gram_len
        partials = self._partials
        mine = partials[self.rank * length:(self.rank + 1) * length]
        t = self.counter
        diverged = 0
        for i in range(len(steps)):
            t += 1
            started = time.perf_counter()
            partials[:] = 0.0
            if not diverged:
                try:
                    chain.begin(mine)
                except DivergenceError:
                    diverged = t
            reducing = time.perf_counter()
            comm.Allreduce(MPI.IN_PLACE, partials, op=MPI.SUM)
            reduction = time.perf_counter() - reducing
            if not diverged:
                try:
                    chain.finish(float(steps[i]), partials)
                except DivergenceError:
                    diverged = t
            computed = time.perf_counter()
            following = self._piece_for(self.rank, t + 1)
            shift = (following - self.held) % B
            if shift:
                # the piece just updated goes to the rank that works on it next, and the next
                # piece comes from the rank that holds it (a diverged rank keeps passing)
                out = np.empty(chain.piece_len(self.held))
                chain.get_piece(self.held, out)
                into = np.empty(chain.piece_len(following))
                comm.Sendrecv(out, dest=(self.rank - shift) % B, sendtag=t % _TAGS,
                              recvbuf=into, source=(self.rank + shift) % B, recvtag=t % _TAGS)
                chain.set_piece(following, into)
                self.bytes_sent += out.nbytes
            self.bytes_sent += mine.nbytes
            self.held = following
            self.compute += computed - started - reduction
            self.communicate += time.perf_counter() - computed + reduction
            self.units_run += 1
        return diverged

    def trace_point(self, run):
        return {**super().trace_point(run), "skipped_pairs": float(self.chain.skipped_pairs)}

    def snapshot(self):
        """Every plane of the whole chain, gathered (the format of shared memory's)."""
        local = self.chain.snapshot()
        B, K = self.B, self.model.rank
        r0, r1 = int(self.row_start[self.rank]), int(self.row_start[self.rank + 1])
        c0, c1 = self._cols(self.held)
        held = self._held_pieces()
        W = np.stack([_gather_pieces(self.comm, plane[r0:r1], self.row_start, list(range(B)), K)
                      for plane in local["W_planes"]])
        H = np.stack([_gather_pieces(self.comm, plane[c0:c1], self.col_start, held, K)
                      for plane in local["Ht_planes"]])
        return {"W_planes": W, "Ht_planes": H, "counters": local["counters"]}

    def restore(self, arrays):
        self.chain.restore(arrays)  # the whole chain; this rank uses its pieces
        self.held = self._piece_for(self.rank, self.counter + 1)
        self._loglik = self._gathered = None


def sample_mpi(model, data, sampler, n_samples, **options):
    """pymf.mpi.sample for HAMCMC on a TweedieNMF model (call on every rank)."""
    settings = GridSettings(sampler)
    if settings.blocks is not None:
        check_schedule(sampler.memory, settings.blocks, settings.part_order)
    return sample_ring(model, data, settings, n_samples, chain_factory=make_chain,
                       kernel_class=HamcmcRingKernel, **options)
