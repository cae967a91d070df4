"""Bindings of core/src/ibp.c: the IBP chain (collapsed Gibbs or the hybrid parallel
sampler), the steps of one hybrid iteration for MPI jobs, and the rank-one and collapsed
likelihood helpers the tests check against NumPy.

The Python layer (pymf.ibp) validates data and settings; the C core's own checks raise
through pymf._status.check.
"""
import numpy as np

from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_error_clear
from pymf._status cimport check


# The most features a chain may hold (why: pymf.ibp.chain, where MAX_FEATURES is this value).
MAX_FEATURES = 1 << 14


def _float64(a):
    return np.ascontiguousarray(a, dtype=np.float64)


cdef class Chain:
    """One IBP chain over rows [row_offset, row_offset + n_rows) of an n_total x D matrix
    (X: those rows; observed: 1 where a cell is training data, 0 where held out).

    max_features: the most features the chain may hold (MAX_FEATURES; make_chain passes
    pymf.ibp.chain.MAX_FEATURES); a step that would take it above stops with a
    DivergenceError naming the iteration, the count, the cap and alpha, the state left as
    the last completed iteration made it."""
    cdef pymf_ibp *s
    cdef readonly object X, observed
    cdef readonly int64_t n_rows, n_total, row_offset
    cdef readonly int D, n_processes, n_local, first_process

    def __cinit__(self, X, observed, int64_t n_total, int64_t row_offset, prior, sample_flags,
                  bint collapsed, int n_processes, int sub_iterations, int64_t warm_start,
                  uint64_t seed, int n_threads, int first_process=0, n_local=None,
                  int split_merge=0, int split_merge_flaw=0, int max_features=MAX_FEATURES):
        self.s = NULL
        self.X = _float64(X)
        self.observed = np.ascontiguousarray(observed, dtype=np.uint8)
        if self.X.ndim != 2 or self.observed.shape != self.X.shape:
            raise ValueError("X must be 2-D and observed of its shape")
        cdef const double[:, ::1] x = self.X
        cdef const unsigned char[:, ::1] o = self.observed
        cdef double dummy = 0.0
        cdef unsigned char odummy = 1
        cdef pymf_ibp_data d
        d.n_total = n_total
        d.row_offset = row_offset
        d.n_rows = self.X.shape[0]
        d.n_cols = self.X.shape[1]
        d.X = &x[0, 0] if self.X.size else &dummy
        d.observed = &o[0, 0] if self.X.size else &odummy
        cdef pymf_ibp_prior p
        p.alpha_shape, p.alpha_rate, p.sx_shape, p.sx_scale, p.sa_shape, p.sa_scale = prior
        p.sample_alpha, p.sample_sigma_x, p.sample_sigma_a = sample_flags
        cdef pymf_ibp_config c
        c.collapsed = collapsed
        c.n_processes = n_processes
        c.sub_iterations = sub_iterations
        c.warm_start = warm_start
        c.seed = seed
        c.n_threads = n_threads
        c.first_process = first_process
        c.n_local = n_processes if n_local is None else n_local
        c.split_merge = split_merge
        c.split_merge_flaw = split_merge_flaw  # the tests' power checks only
        c.max_features = max_features
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            self.s = pymf_ibp_create(&d, &p, &c, &err)
        if self.s == NULL:
            check(&err)
        self.n_rows, self.n_total, self.row_offset = d.n_rows, n_total, row_offset
        self.D, self.n_processes, self.n_local = d.n_cols, n_processes, c.n_local
        self.first_process = first_process

    def __dealloc__(self):
        pymf_ibp_destroy(self.s)

    def set_threads(self, int n_threads):
        pymf_ibp_set_threads(self.s, n_threads)

    @property
    def n_features(self):
        return pymf_ibp_n_features(self.s)

    @property
    def iteration(self):
        return pymf_ibp_iteration(self.s)

    @property
    def active_process(self):
        return pymf_ibp_active_process(self.s)

    def state(self):
        """{Z (rows x K), A (K x D), pi (K; NaN for collapsed Gibbs), hyper (sigma_x,
        sigma_a, alpha), Y_missing (held-out cells' current values), t}."""
        cdef int K = pymf_ibp_n_features(self.s)
        cdef int64_t n_missing = pymf_ibp_n_missing(self.s)
        Z = np.zeros((self.n_rows, K))
        A = np.zeros((K, self.D))
        pi = np.zeros(K)
        hyper = np.zeros(3)
        Ym = np.zeros(n_missing)
        cdef double[::1] zf = Z.reshape(-1), af = A.reshape(-1), pf = pi, hf = hyper, yf = Ym
        cdef double dummy[1]
        pymf_ibp_get_state(self.s, &zf[0] if Z.size else dummy, &af[0] if A.size else dummy,
                           &pf[0] if K else dummy, &hf[0], &yf[0] if n_missing else dummy)
        return {"Z": Z, "A": A, "pi": pi, "hyper": hyper, "Y_missing": Ym,
                "t": np.int64(pymf_ibp_iteration(self.s))}

    def set_state(self, Z, A, pi, hyper, Y_missing=None, int64_t t=0):
        """Z: every row of the matrix (n_total x K); the other arguments as state() gives
        them (Y_missing: this object's held-out cells; None starts them at z_n A_d)."""
        Zc, Ac, pc, hc = _float64(Z), _float64(A), _float64(pi), _float64(hyper)
        if Zc.ndim != 2 or Zc.shape[0] != self.n_total:
            raise ValueError(f"Z must have {self.n_total} rows, got shape {Zc.shape}")
        cdef int K = Zc.shape[1]
        if Ac.shape != (K, self.D) or pc.shape != (K,) or hc.shape != (3,):
            raise ValueError(f"A must be {K} x {self.D}, pi of length {K}, hyper of length 3")
        cdef int64_t n_missing = pymf_ibp_n_missing(self.s)
        Yc = None if Y_missing is None else _float64(Y_missing)
        if Yc is not None and Yc.shape != (n_missing,):
            raise ValueError(f"Y_missing must hold the {n_missing} held-out cells")
        cdef const double[::1] zf = Zc.reshape(-1), af = Ac.reshape(-1), pf = pc, hf = hc
        cdef const double[::1] yf
        cdef double dummy[1]
        cdef const double *yp = NULL
        if Yc is not None and n_missing:
            yf = Yc
            yp = &yf[0]
        cdef pymf_error err
        pymf_error_clear(&err)
        pymf_ibp_set_state(self.s, K, &zf[0] if Zc.size else dummy, &af[0] if Ac.size else dummy,
                           &pf[0] if K else dummy, &hf[0], yp, t, &err)
        check(&err)

    def run(self, int64_t n_iterations):
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_ibp_run(self.s, n_iterations, &err)
        check(&err)

    def abort(self):
        """Abandons the iteration begun (Z, K and the split-merge counts back to the last
        completed iteration's); nothing when none is begun."""
        pymf_ibp_abort(self.s)

    # ---- the steps of one iteration, for MPI jobs (pymf.ibp.mpi) ----
    def begin(self):
        """Starts the next iteration; returns its p'."""
        cdef pymf_error err
        pymf_error_clear(&err)
        pymf_ibp_begin(self.s, &err)
        check(&err)
        return pymf_ibp_active_process(self.s)

    def local_sweeps(self):
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_ibp_local_sweeps(self.s, &err)
        check(&err)

    def local_counts(self):
        """(n_local, K+): every local process's feature counts after local_sweeps."""
        K = pymf_ibp_n_features(self.s)
        out = np.zeros((self.n_local, K))
        cdef double[::1] o = out.reshape(-1)
        cdef double dummy[1]
        pymf_ibp_local_counts(self.s, &o[0] if out.size else dummy)
        return out

    def tail_sweeps(self, counts_all):
        """The tail stage given every process's counts (P, K+), in process order."""
        c = _float64(counts_all)
        K = pymf_ibp_n_features(self.s)
        if c.shape != (self.n_processes, K):
            raise ValueError(f"counts_all must be {self.n_processes} x {K}")
        cdef const double[::1] v = c.reshape(-1)
        cdef double dummy[1]
        cdef const double *p = &v[0] if c.size else dummy
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_ibp_tail_sweeps(self.s, p, &err)
        check(&err)

    def new_features(self):
        counts = np.zeros(self.n_local, dtype=np.intc)
        cdef int[::1] c = counts
        pymf_ibp_new_features(self.s, &c[0])
        return counts

    def local_stats(self, new_features_all, int K_total):
        """The statistics of every local process, (n_local, stats_size(K_total))."""
        counts = np.ascontiguousarray(new_features_all, dtype=np.intc)
        if counts.shape != (self.n_processes,):
            raise ValueError("one new-feature count per process")
        cdef const int[::1] c = counts
        cdef pymf_error err
        pymf_error_clear(&err)
        pymf_ibp_check_new_features(self.s, &c[0], &err)  # the cap, before the buffer
        check(&err)
        size = pymf_ibp_stats_size(K_total, self.D)
        out = np.zeros((self.n_local, size))
        cdef double[:, ::1] o = out
        pymf_error_clear(&err)
        with nogil:
            pymf_ibp_local_stats(self.s, &c[0], &o[0, 0], &err)
        check(&err)
        return out

    def master(self, summed):
        s = _float64(summed)
        cdef const double[::1] v = s
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_ibp_master(self.s, &v[0], &err)
        check(&err)

    def split_merge(self, Z_all=None, Y_all=None):
        """One round of split-merge proposals between iterations (see pymf_ibp_split_merge):
        an MPI rank passes every row's Z (n_total x K) and Y (n_total x D)."""
        cdef int K = pymf_ibp_n_features(self.s)
        cdef const double[::1] zf, yf
        cdef const double *zp = NULL
        cdef const double *yp = NULL
        cdef double dummy[1]
        if Z_all is not None:
            Zc, Yc = _float64(Z_all), _float64(Y_all)
            if Zc.shape != (self.n_total, K) or Yc.shape != (self.n_total, self.D):
                raise ValueError(f"Z_all must be {self.n_total} x {K} and Y_all "
                                 f"{self.n_total} x {self.D}")
            zf, yf = Zc.reshape(-1), Yc.reshape(-1)
            zp = &zf[0] if Zc.size else dummy
            yp = &yf[0]
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_ibp_split_merge(self.s, zp, yp, &err)
        check(&err)

    @property
    def split_merge_counts(self):
        """(splits proposed, splits accepted, merges proposed, merges accepted)."""
        out = np.zeros(4, dtype=np.int64)
        cdef int64_t[::1] o = out
        pymf_ibp_split_merge_counts(self.s, &o[0])
        return out

    @split_merge_counts.setter
    def split_merge_counts(self, counts):
        c = np.ascontiguousarray(counts, dtype=np.int64)
        if c.shape != (4,):
            raise ValueError("four split-merge counts")
        cdef const int64_t[::1] v = c
        pymf_ibp_set_split_merge_counts(self.s, &v[0])

    def collapsed_block(self):
        """(M, log|Z'Z + rI|) of the collapsed sampler as its rank-one updates left them."""
        cdef int K = pymf_ibp_n_features(self.s)
        M = np.zeros((max(K, 1), max(K, 1)))
        cdef double[:, ::1] m = M
        cdef double logdet = 0.0
        K = pymf_ibp_collapsed_block(self.s, &m[0, 0], &logdet)
        return M[:K, :K].copy(), logdet


def stats_size(int K, int D):
    return pymf_ibp_stats_size(K, D)


def rank_one(M, z, int sign, double logdet_inv):
    """(M', logdet'): M' = (M^-1 + sign z z')^-1 by Sherman-Morrison, logdet' = logdet_inv +
    log(1 + sign z'Mz) (the determinant lemma)."""
    Mc = np.array(M, dtype=np.float64, order="C", copy=True)
    zc = _float64(z)
    cdef int K = Mc.shape[0]
    if Mc.shape != (K, K) or zc.shape != (K,) or K == 0:
        raise ValueError("M must be K x K and z of length K > 0")
    cdef double[:, ::1] m = Mc
    cdef const double[::1] zz = zc
    cdef double ld = logdet_inv
    cdef pymf_error err
    pymf_error_clear(&err)
    pymf_ibp_rank_one(&m[0, 0], K, &zz[0], sign, &ld, &err)
    check(&err)
    return Mc, ld


def collapsed_loglik(Z, Y, double sigma_x, double sigma_a):
    """log p(Y | Z, sigma_x, sigma_a) with A integrated out."""
    Zc, Yc = _float64(Z), _float64(Y)
    if Zc.ndim != 2 or Yc.ndim != 2 or Zc.shape[0] != Yc.shape[0]:
        raise ValueError("Z and Y must be 2-D with one row each per data row")
    cdef int64_t N = Yc.shape[0]
    cdef int K = Zc.shape[1], D = Yc.shape[1]
    cdef double dummy[1]
    cdef const double[::1] zf = Zc.reshape(-1), yf = Yc.reshape(-1)
    cdef double out = 0.0
    cdef pymf_error err
    pymf_error_clear(&err)
    pymf_ibp_collapsed_loglik(&zf[0] if Zc.size else dummy, &yf[0], N, K, D, sigma_x, sigma_a,
                              &out, &err)
    check(&err)
    return out
