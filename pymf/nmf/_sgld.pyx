"""Bindings of core/src/langevin.c: the LD, SGLD and PSGLD samplers. Their Philox noise is
reproduced by pymf._rng.noise (streams STREAM_W for W, STREAM_H for H^T)."""
import numpy as np

cimport cython

from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_error_clear, pymf_status
from pymf._status cimport check
from pymf.nmf._blocks cimport PYMF_PARTS_CYCLIC, PYMF_PARTS_RANDOM, BlockedData
from pymf.nmf._chain cimport FactorChain, nmf_model, pymf_nmf_model

_KINDS = {"ld": PYMF_LD, "sgld": PYMF_SGLD, "psgld": PYMF_PSGLD}
_ORDERS = {"cyclic": PYMF_PARTS_CYCLIC, "random": PYMF_PARTS_RANDOM}


# The C object points into `data`: the cycle collector must not clear that reference
# before __dealloc__ has destroyed the C object.
@cython.no_gc_clear
cdef class LangevinChain(FactorChain):
    """One LD / SGLD / PSGLD chain over a BlockedData (grid order throughout).

    The Python layer (pymf.samplers, pymf.sampling) validates everything first; this class
    only checks what the C core checks.
    """
    cdef pymf_langevin *chain
    # the OpenMP threads the chain was given (0: the core's default); the per-row bound's
    # measurement (FactorKernel.measure_row_steps) runs on as many
    cdef readonly int n_threads

    def __cinit__(self, BlockedData data, str kind, int rank, double beta, double phi,
                  str prior, double lam_w, double lam_h, uint64_t noise_seed,
                  uint64_t schedule_seed, int64_t batch_size=0, str part_order="cyclic",
                  int n_threads=0, int only_row_block=-1, int64_t phi_every=0,
                  double phi_shape=1.0, double phi_rate=1.0, uint64_t phi_seed=0,
                  bint scale_step_by_phi=False):
        cdef pymf_nmf_model model
        cdef pymf_langevin_config config
        cdef pymf_error err
        self.chain = NULL
        self.data = data
        self.rank = rank
        self.n_threads = n_threads
        model = nmf_model(rank, beta, phi, prior, lam_w, lam_h)
        config.kind = _KINDS[kind]
        config.batch_size = batch_size
        config.part_order = _ORDERS[part_order]
        config.noise_seed = noise_seed
        config.schedule_seed = schedule_seed
        config.n_threads = n_threads
        config.only_row_block = only_row_block
        config.phi_every = phi_every
        config.phi_shape = phi_shape
        config.phi_rate = phi_rate
        config.phi_seed = phi_seed
        config.scale_step_by_phi = 1 if scale_step_by_phi else 0
        config.phi_ref = phi  # the phi the steps were chosen for: the chain's first
        pymf_error_clear(&err)
        self.chain = pymf_langevin_create(&model, &data.data, &config, &err)
        if self.chain == NULL:
            check(&err)
            raise MemoryError("could not create the sampler")

    def __dealloc__(self):
        pymf_langevin_destroy(self.chain)

    cdef pymf_status c_set_state(self, const double *W, const double *Ht, int64_t t,
                                 pymf_error *err) noexcept nogil:
        return pymf_langevin_set_state(self.chain, W, Ht, t, err)

    cdef void c_get_state(self, double *W, double *Ht, int64_t *t) noexcept nogil:
        pymf_langevin_get_state(self.chain, W, Ht, t)

    cdef pymf_status c_run(self, int64_t n, const double *step_sizes, pymf_error *err) noexcept nogil:
        return pymf_langevin_run(self.chain, n, step_sizes, err)

    cdef pymf_status c_loglik(self, double *out, pymf_error *err) noexcept nogil:
        return pymf_langevin_loglik(self.chain, out, err)

    def set_threads(self, int n_threads):
        pymf_langevin_set_threads(self.chain, n_threads)
        self.n_threads = n_threads

    def set_totals(self, int64_t n_observed, part_sizes):
        """N and |Pi_p| of the whole data set (a distributed run holds one row piece)."""
        cdef int64_t[::1] sizes = np.ascontiguousarray(part_sizes, dtype=np.int64)
        cdef pymf_error err
        if sizes.shape[0] != self.data.grid.n_blocks:
            raise ValueError(f"part_sizes must have {self.data.grid.n_blocks} entries")
        pymf_error_clear(&err)
        pymf_langevin_set_totals(self.chain, n_observed, &sizes[0], &err)
        check(&err)

    def get_cols(self, int64_t c0, int64_t c1, double[:, ::1] out):
        """Copy rows c0..c1-1 of H^T (grid order) into out ((c1 - c0) x K)."""
        if not (0 <= c0 <= c1 <= self.data.grid.n_cols) or out.shape[0] < c1 - c0 or out.shape[1] != self.rank:
            raise ValueError("bad column range or buffer")
        if c1 > c0:
            pymf_langevin_get_cols(self.chain, c0, c1, &out[0, 0])

    def set_cols(self, int64_t c0, int64_t c1, const double[:, ::1] values):
        if not (0 <= c0 <= c1 <= self.data.grid.n_cols) or values.shape[0] < c1 - c0 or values.shape[1] != self.rank:
            raise ValueError("bad column range or buffer")
        if c1 > c0:
            pymf_langevin_set_cols(self.chain, c0, c1, &values[0, 0])

    @property
    def phi(self):
        """The current dispersion (the model's, or the last draw of a sampled one)."""
        return pymf_langevin_phi(self.chain)

    def set_phi(self, double phi):
        cdef pymf_error err
        pymf_error_clear(&err)
        pymf_langevin_set_phi(self.chain, phi, &err)
        check(&err)

    def half_rss(self):
        """sum of (v - mu)^2 / 2 over this chain's entries at the current state (beta = 2)."""
        cdef pymf_error err
        cdef double out = 0.0
        pymf_error_clear(&err)
        with nogil:
            pymf_langevin_half_rss(self.chain, &out, &err)
        check(&err)
        return out

    def draw_phi(self, double half_rss_total, int64_t t):
        """Draw phi from its conditional InvGamma(shape + N/2, rate + half_rss_total) with
        the stream of iteration t; the draw becomes the chain's phi and is returned."""
        cdef pymf_error err
        pymf_error_clear(&err)
        pymf_langevin_draw_phi(self.chain, half_rss_total, t, &err)
        check(&err)
        return pymf_langevin_phi(self.chain)

    def set_row_steps(self, step_W, step_Ht, int64_t from_t=1):
        """Per-coordinate step factors c in (0, 1] (grid order: I x K for W, J x K for H^T)
        used from iteration from_t on (pymf_langevin_set_row_steps); None for both removes
        them."""
        cdef pymf_error err
        cdef double[:, ::1] sw
        cdef double[:, ::1] sh
        pymf_error_clear(&err)
        if step_W is None and step_Ht is None:
            pymf_langevin_set_row_steps(self.chain, NULL, NULL, 0, &err)
            check(&err)
            return
        sw = np.ascontiguousarray(step_W, dtype=np.float64)
        sh = np.ascontiguousarray(step_Ht, dtype=np.float64)
        if (sw.shape[0] != self.data.grid.n_rows or sh.shape[0] != self.data.grid.n_cols
                or sw.shape[1] != self.rank or sh.shape[1] != self.rank):
            raise ValueError(f"row step factors must be {self.data.grid.n_rows} x {self.rank} "
                             f"and {self.data.grid.n_cols} x {self.rank}")
        pymf_langevin_set_row_steps(self.chain, &sw[0, 0], &sh[0, 0], from_t, &err)
        check(&err)

    def fisher_block(self, int b, int c, fisher_W, fisher_Ht):
        """Add the likelihood's Fisher curvature at phi = 1 over this chain's entries of block
        (b, c) (pymf_langevin_fisher_block) to fisher_W (row piece b's rows) and fisher_Ht
        (column piece c's columns): C-contiguous float64 (n, K, K) arrays, or None; upper
        triangles only (fisher_mirror completes them)."""
        cdef pymf_error err
        cdef double *w = NULL
        cdef double *h = NULL
        cdef double[:, :, ::1] fw
        cdef double[:, :, ::1] fh
        cdef int B = self.data.grid.n_blocks
        if not (0 <= b < B and 0 <= c < B):
            raise ValueError("(b, c) must be a block of the grid")
        cdef int64_t rows = self.data.grid.row_start[b + 1] - self.data.grid.row_start[b]
        cdef int64_t cols = self.data.grid.col_start[c + 1] - self.data.grid.col_start[c]
        if fisher_W is not None:
            fw = fisher_W
            if fw.shape[0] != rows or fw.shape[1] != self.rank or fw.shape[2] != self.rank:
                raise ValueError("fisher_W must hold row piece b's rows, K x K each")
            w = &fw[0, 0, 0]
        if fisher_Ht is not None:
            fh = fisher_Ht
            if fh.shape[0] != cols or fh.shape[1] != self.rank or fh.shape[2] != self.rank:
                raise ValueError("fisher_Ht must hold column piece c's columns, K x K each")
            h = &fh[0, 0, 0]
        pymf_error_clear(&err)
        with nogil:
            pymf_langevin_fisher_block(self.chain, b, c, w, h, &err)
        check(&err)

    def part(self, int64_t t):
        """The part PSGLD uses at iteration t (1-based)."""
        return pymf_langevin_part(self.chain, t)

    def cols_view(self, int64_t c0, int64_t c1):
        """Rows c0..c1-1 of the current H^T as an array over the chain's own memory (no
        copy), for the MPI ring to send from and receive into. Valid only until the next
        run() or set_state(): the state is double-buffered."""
        if not (0 <= c0 < c1 <= self.data.grid.n_cols):
            raise ValueError("bad column range")
        cdef double[:, ::1] view = <double[:c1 - c0, :self.rank]> pymf_langevin_cols(self.chain, c0)
        return np.asarray(view)


def sgld_minibatch(uint64_t schedule_seed, int64_t t, int64_t n_observed, int64_t batch_size):
    """SGLD's minibatch at iteration t: indices into the observed entries (grid order)."""
    out = np.empty(batch_size, dtype=np.int64)
    cdef int64_t[::1] o = out
    cdef pymf_error err
    pymf_error_clear(&err)
    if batch_size > 0:
        pymf_sgld_minibatch(schedule_seed, t, n_observed, batch_size, &o[0], &err)
    check(&err)
    return out


def fisher_mirror(fisher):
    """Copy the upper triangles of a (n, K, K) C-contiguous float64 stack into the lower ones
    (after LangevinChain.fisher_block); returns it."""
    cdef double[:, :, ::1] f = fisher
    if f.shape[1] != f.shape[2]:
        raise ValueError("fisher must be a stack of square matrices")
    if f.shape[0] and f.shape[1]:
        with nogil:  # the measurement's threads mirror their pieces side by side
            pymf_langevin_fisher_mirror(<int>f.shape[1], f.shape[0], &f[0, 0, 0])
    return fisher
