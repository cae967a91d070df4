"""Bindings of core/src/hamcmc_mf.c: HAMCMC for Tweedie matrix factorisation on the PSGLD
block grid (grid order throughout). The Python layer (pymf.hamcmc.mf) validates the
settings and the data first; this class only checks what the C core checks."""
import numpy as np

cimport cython
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_error_clear, pymf_status
from pymf._status cimport check
from pymf.nmf._blocks cimport PYMF_PARTS_CYCLIC, PYMF_PARTS_RANDOM, BlockedData
from pymf.nmf._chain cimport FactorChain, nmf_model, pymf_nmf_model

_ORDERS = {"cyclic": PYMF_PARTS_CYCLIC, "random": PYMF_PARTS_RANDOM}


cdef pymf_hamcmc_mf_config chain_config(int memory, double gamma, bint scaled_gamma, double lam,
                                        str part_order, uint64_t noise_seed,
                                        uint64_t schedule_seed, int n_threads,
                                        int only_row_block, bint langevin_only) except *:
    """The C chain's settings (the C core checks their values)."""
    cdef pymf_hamcmc_mf_config config
    if part_order not in _ORDERS:
        raise ValueError(f"part_order must be one of {sorted(_ORDERS)}, got {part_order!r}")
    config.memory = memory
    config.gamma = gamma
    config.scaled_gamma = scaled_gamma
    config.lambda_ = lam
    config.part_order = _ORDERS[part_order]
    config.noise_seed = noise_seed
    config.schedule_seed = schedule_seed
    config.n_threads = n_threads
    config.only_row_block = only_row_block
    config.langevin_only = langevin_only
    return config


# The chain's checkpoint and gradient, shared by every family whose (W, H) step is this chain
# (pymf.alphamf's chain holds one too).
cdef tuple chain_planes(pymf_hamcmc_mf *chain, BlockedData data, int rank):
    n = pymf_hamcmc_mf_planes(chain)
    return ((n, data.grid.n_rows, rank), (n, data.grid.n_cols, rank))


cdef dict chain_snapshot(pymf_hamcmc_mf *chain, BlockedData data, int rank):
    w_shape, h_shape = chain_planes(chain, data, rank)
    W = np.empty(w_shape)
    H = np.empty(h_shape)
    cdef double[:, :, ::1] w = W, h = H
    cdef int64_t t = 0, skipped = 0
    pymf_hamcmc_mf_export(chain, &w[0, 0, 0], &h[0, 0, 0], &t, &skipped)
    return {"W_planes": W, "Ht_planes": H, "counters": np.array([t, skipped], dtype=np.int64)}


cdef chain_restore(pymf_hamcmc_mf *chain, BlockedData data, int rank, arrays):
    w_shape, h_shape = chain_planes(chain, data, rank)
    missing = [k for k in ("W_planes", "Ht_planes", "counters") if k not in arrays]
    if missing:
        raise ValueError(f"the saved chain state lacks {', '.join(missing)}")
    for name, shape in (("W_planes", w_shape), ("Ht_planes", h_shape), ("counters", (2,))):
        if np.shape(arrays[name]) != shape:
            raise ValueError(f"the saved chain state's {name} has shape "
                             f"{np.shape(arrays[name])}; this sampler's is {shape}")
    counters = np.asarray(arrays["counters"])
    if counters.dtype.kind not in "iu":
        raise ValueError("the saved chain state's counters are not integers")
    cdef double[:, :, ::1] w = np.array(arrays["W_planes"], dtype=np.float64, order="C")
    cdef double[:, :, ::1] h = np.array(arrays["Ht_planes"], dtype=np.float64, order="C")
    cdef pymf_error err
    pymf_error_clear(&err)
    pymf_hamcmc_mf_import(chain, &w[0, 0, 0], &h[0, 0, 0], int(counters[0]),
                          int(counters[1]), &err)
    check(&err)


cdef tuple chain_grad_potential(pymf_hamcmc_mf *chain, BlockedData data, int rank, W, Ht,
                                int part):
    cdef const double[:, ::1] w = np.ascontiguousarray(W, dtype=np.float64)
    cdef const double[:, ::1] h = np.ascontiguousarray(Ht, dtype=np.float64)
    if w.shape[0] != data.grid.n_rows or h.shape[0] != data.grid.n_cols \
            or w.shape[1] != rank or h.shape[1] != rank:
        raise ValueError("W and Ht must be I x K and J x K")
    gW = np.empty((w.shape[0], rank))
    gH = np.empty((h.shape[0], rank))
    cdef double[:, ::1] gw = gW, gh = gH
    cdef pymf_error err
    pymf_error_clear(&err)
    pymf_hamcmc_mf_grad_potential(chain, &w[0, 0], &h[0, 0], part, &gw[0, 0], &gh[0, 0], &err)
    check(&err)
    return gW, gH


# The C object points into `data`: the cycle collector must not clear that reference
# before __dealloc__ has destroyed the C object.
@cython.no_gc_clear
cdef class HamcmcChain(FactorChain):
    """One HAMCMC chain over a BlockedData. only_row_block = b: one rank of the MPI ring,
    run by begin() / finish() instead of run()."""
    cdef pymf_hamcmc_mf *chain
    cdef readonly int memory

    def __cinit__(self, BlockedData data, int rank, double beta, double phi, str prior,
                  double lam_w, double lam_h, uint64_t noise_seed, uint64_t schedule_seed,
                  int memory=2, double gamma=1.0, bint scaled_gamma=False, double lam=0.0,
                  str part_order="cyclic",
                  int n_threads=0, int only_row_block=-1):
        cdef pymf_nmf_model model
        cdef pymf_hamcmc_mf_config config
        cdef pymf_error err
        self.chain = NULL
        self.data = data
        self.rank = rank
        self.memory = memory
        model = nmf_model(rank, beta, phi, prior, lam_w, lam_h)
        config = chain_config(memory, gamma, scaled_gamma, lam, part_order, noise_seed,
                              schedule_seed, n_threads, only_row_block, False)
        pymf_error_clear(&err)
        self.chain = pymf_hamcmc_mf_create(&model, &data.data, &config, &err)
        if self.chain == NULL:
            check(&err)
            raise MemoryError("could not create the sampler")

    def __dealloc__(self):
        pymf_hamcmc_mf_destroy(self.chain)

    cdef pymf_status c_set_state(self, const double *W, const double *Ht, int64_t t,
                                 pymf_error *err) noexcept nogil:
        return pymf_hamcmc_mf_start(self.chain, W, Ht, err)

    cdef void c_get_state(self, double *W, double *Ht, int64_t *t) noexcept nogil:
        pymf_hamcmc_mf_get_state(self.chain, W, Ht, t)

    cdef pymf_status c_run(self, int64_t n, const double *step_sizes, pymf_error *err) noexcept nogil:
        return pymf_hamcmc_mf_run(self.chain, n, step_sizes, err)

    cdef pymf_status c_loglik(self, double *out, pymf_error *err) noexcept nogil:
        return pymf_hamcmc_mf_loglik(self.chain, out, err)

    def set_state(self, W, Ht, int64_t t=0):
        """Start the chain at (W, H^T) (grid order) as iteration 0, its memory empty; a
        chain at t > 0 is continued by restore(), which brings back its memory too."""
        if t != 0:
            raise ValueError("a HAMCMC chain starts at iteration 0; restore() resumes one")
        FactorChain.set_state(self, W, Ht, 0)

    def set_threads(self, int n_threads):
        pymf_hamcmc_mf_set_threads(self.chain, n_threads)

    @property
    def skipped_pairs(self):
        return int(pymf_hamcmc_mf_skipped_pairs(self.chain))

    def part(self, int64_t t):
        return pymf_hamcmc_mf_part(self.chain, t)

    def _planes(self):
        return chain_planes(self.chain, self.data, self.rank)

    def snapshot(self):
        """Everything the chain carries: W_planes and Ht_planes (3M - 2 planes each: the
        window of M states, the s and y of the M - 1 pairs; core/include/pymf/hamcmc_mf.h)
        and counters (t, skipped pairs)."""
        return chain_snapshot(self.chain, self.data, self.rank)

    def restore(self, arrays):
        """The inverse of snapshot(); a state of another shape, with unreachable counters or
        non-finite values is refused (ValueError) and the chain left as it was."""
        chain_restore(self.chain, self.data, self.rank, arrays)

    def grad_potential(self, W, Ht, int part):
        """grad U of `part` (scaled N / |Pi_part|, prior included) at (W, H^T), grid order."""
        return chain_grad_potential(self.chain, self.data, self.rank, W, Ht, part)

    def products(self, gW, gHt, zW, zHt):
        """(H g, S z, pairs used) with the memory the next iteration uses, computed by
        per-block Gram matrices; each vector given as its (W, H^T) parts, grid order."""
        arrays = [np.ascontiguousarray(a, dtype=np.float64) for a in (gW, gHt, zW, zHt)]
        for a, rows in zip(arrays, (self.data.grid.n_rows, self.data.grid.n_cols) * 2):
            if a.shape != (rows, self.rank):
                raise ValueError("each part must be I x K (W) or J x K (H^T)")
        cdef const double[:, ::1] g_w = arrays[0], g_h = arrays[1], z_w = arrays[2], z_h = arrays[3]
        outs = [np.empty_like(a) for a in arrays]
        cdef double[:, ::1] a_w = outs[0], a_h = outs[1], b_w = outs[2], b_h = outs[3]
        cdef int used = 0
        cdef pymf_error err
        pymf_error_clear(&err)
        pymf_hamcmc_mf_products(self.chain, &g_w[0, 0], &g_h[0, 0], &z_w[0, 0], &z_h[0, 0],
                                &a_w[0, 0], &a_h[0, 0], &b_w[0, 0], &b_h[0, 0], &used, &err)
        check(&err)
        return (outs[0], outs[1]), (outs[2], outs[3]), used

    # ---- the MPI ring ----
    @property
    def gram_len(self):
        return pymf_hamcmc_mf_gram_len(self.chain)

    def set_totals(self, int64_t n_observed, part_sizes):
        cdef int64_t[::1] sizes = np.ascontiguousarray(part_sizes, dtype=np.int64)
        cdef pymf_error err
        if sizes.shape[0] != self.data.grid.n_blocks:
            raise ValueError(f"part_sizes must have {self.data.grid.n_blocks} entries")
        pymf_error_clear(&err)
        pymf_hamcmc_mf_set_totals(self.chain, n_observed, &sizes[0], &err)
        check(&err)

    def begin(self, double[::1] partial):
        """Phase one of the next iteration on this rank's block: its Gram matrix into
        partial (gram_len values)."""
        cdef pymf_error err
        if partial.shape[0] != pymf_hamcmc_mf_gram_len(self.chain):
            raise ValueError("partial must hold gram_len values")
        pymf_error_clear(&err)
        with nogil:
            pymf_hamcmc_mf_begin(self.chain, &partial[0], &err)
        check(&err)

    def finish(self, double eps, const double[::1] partials):
        """Phase two: every block's Gram matrix (B x gram_len, block order) in, the new
        state of this rank's block out."""
        cdef pymf_error err
        if partials.shape[0] != self.data.grid.n_blocks * pymf_hamcmc_mf_gram_len(self.chain):
            raise ValueError("partials must hold B x gram_len values")
        pymf_error_clear(&err)
        with nogil:
            pymf_hamcmc_mf_finish(self.chain, eps, &partials[0], &err)
        check(&err)

    def piece_len(self, int c):
        return int(pymf_hamcmc_mf_piece_len(self.chain, c))

    def get_piece(self, int c, double[::1] out):
        if out.shape[0] != pymf_hamcmc_mf_piece_len(self.chain, c):
            raise ValueError("out must hold piece_len(c) values")
        pymf_hamcmc_mf_get_piece(self.chain, c, &out[0])

    def set_piece(self, int c, const double[::1] values):
        if values.shape[0] != pymf_hamcmc_mf_piece_len(self.chain, c):
            raise ValueError("values must hold piece_len(c) values")
        pymf_hamcmc_mf_set_piece(self.chain, c, &values[0])

    def get_cols(self, int64_t c0, int64_t c1, double[:, ::1] out):
        """Copy rows c0..c1-1 of the current state's H^T into out ((c1 - c0) x K)."""
        if not (0 <= c0 <= c1 <= self.data.grid.n_cols) or out.shape[0] < c1 - c0 \
                or out.shape[1] != self.rank:
            raise ValueError("bad column range or buffer")
        np.asarray(out)[:c1 - c0] = self.get_state()[1][c0:c1]

    def set_cols(self, int64_t c0, int64_t c1, const double[:, ::1] values):
        """Rows c0..c1-1 of the current state's H^T."""
        if not (0 <= c0 <= c1 <= self.data.grid.n_cols) or values.shape[0] < c1 - c0 \
                or values.shape[1] != self.rank:
            raise ValueError("bad column range or buffer")
        if c1 > c0:
            pymf_hamcmc_mf_set_cols(self.chain, c0, c1, &values[0, 0])
