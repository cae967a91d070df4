"""Bindings of core/src/sibm.c: SIBM's stochastic natural-gradient updates, batch VB, the
sampling strategies' draws and the ELBO (exact, and its unbiased estimate).

The Python layer (pymf.sibm) validates the matrix and the settings; this class holds the
arrays the C object points into and calls the core, whose checks raise through
pymf._status.check.
"""
import numpy as np

from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_error_clear
from pymf._status cimport check

SAMPLING = {"uniform": PYMF_SIBM_UNIFORM, "balanced": PYMF_SIBM_BALANCED,
            "biased": PYMF_SIBM_BIASED}
STREAM_DRAW = PYMF_STREAM_SIBM_DRAW
STREAM_ELBO = PYMF_STREAM_SIBM_ELBO


def _int64(a):
    return np.ascontiguousarray(a, dtype=np.int64)


def _float64(a):
    return np.ascontiguousarray(a, dtype=np.float64)


cdef class Chain:
    """q over (U, V, z) for a binary matrix given by its ones in CSR form (row_ptr,
    col_idx: columns sorted and unique within a row)."""
    cdef pymf_sibm *s
    cdef readonly object row_ptr, col_idx
    # q's factors (natural parameters): the C object works in these arrays, so q exists once
    cdef object u1, u2, v1, v2
    cdef readonly int64_t n_rows, n_cols
    cdef readonly int rank

    def __cinit__(self, row_ptr, col_idx, int64_t n_cols, int rank, prior, str sampling,
                  int64_t batch_size, int64_t batch_start, int64_t batch_min,
                  int64_t batch_max, double theta_delta, double tau0, double kappa,
                  uint64_t seed, int n_threads):
        self.s = NULL
        self.row_ptr = _int64(row_ptr)
        self.col_idx = _int64(col_idx)
        if self.row_ptr.ndim != 1 or self.row_ptr.shape[0] < 2 or self.col_idx.ndim != 1:
            raise ValueError("row_ptr needs n_rows + 1 offsets and col_idx one column per one")
        if sampling not in SAMPLING:
            raise ValueError(f"sampling must be one of {sorted(SAMPLING)}, got {sampling!r}")
        cdef const int64_t[::1] rp = self.row_ptr
        cdef const int64_t[::1] ci = self.col_idx
        cdef int64_t dummy = 0
        cdef pymf_sibm_matrix X
        X.n_rows = rp.shape[0] - 1
        X.n_cols = n_cols
        X.n_ones = ci.shape[0]
        X.row_ptr = &rp[0]
        X.col_idx = &ci[0] if ci.shape[0] else &dummy
        cdef pymf_sibm_prior p
        p.rank = rank
        p.mean_u, p.var_u, p.mean_v, p.var_v, p.mean_z, p.var_z = prior
        cdef pymf_sibm_config c
        c.sampling = SAMPLING[sampling]
        c.batch_size, c.batch_start, c.batch_min, c.batch_max = (
            batch_size, batch_start, batch_min, batch_max)
        c.theta_delta, c.tau0, c.kappa = theta_delta, tau0, kappa
        c.seed = seed
        c.n_threads = n_threads
        if rank <= 0:
            raise ValueError(f"rank must be positive, got {rank}")
        L = X.n_rows
        self.u1, self.u2 = np.empty((L, rank)), np.empty((L, rank))
        self.v1, self.v2 = np.empty((n_cols, rank)), np.empty((n_cols, rank))
        cdef double[:, ::1] a1 = self.u1, a2 = self.u2, b1 = self.v1, b2 = self.v2
        cdef pymf_sibm_factors q
        q.u1, q.u2 = &a1[0, 0] if L else NULL, &a2[0, 0] if L else NULL
        q.v1, q.v2 = &b1[0, 0] if n_cols else NULL, &b2[0, 0] if n_cols else NULL
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            self.s = pymf_sibm_create(&X, &p, &c, &q, &err)
        if self.s == NULL:
            check(&err)
        self.n_rows, self.n_cols, self.rank = X.n_rows, n_cols, rank

    def __dealloc__(self):
        pymf_sibm_destroy(self.s)

    def state(self, copy=True):
        """{u1, u2, v1, v2, z, row_updates, col_updates, t, batch}: q's natural parameters
        (mean/var, 1/var) and the counters. copy=False gives the chain's own factor arrays
        (no copy of q): they change with every update, and set_state given them back checks
        them and copies nothing."""
        L, M = self.n_rows, self.n_cols
        factors = ([a.copy() for a in (self.u1, self.u2, self.v1, self.v2)] if copy
                   else [self.u1, self.u2, self.v1, self.v2])
        z = np.empty(2)
        ru, cu = np.empty(L, dtype=np.int64), np.empty(M, dtype=np.int64)
        cdef double[::1] zz = z
        cdef int64_t[::1] r = ru, c = cu
        cdef int64_t t = 0, batch = 0
        pymf_sibm_get_state(self.s, NULL, NULL, NULL, NULL, &zz[0], &r[0], &c[0], &t, &batch)
        return dict(zip(("u1", "u2", "v1", "v2"), factors), z=z, row_updates=ru,
                    col_updates=cu, t=np.int64(t), batch=np.int64(batch))

    def release_scratch(self):
        """Free one update's scratch (the next update allocates it again): nothing in it
        outlives an update."""
        pymf_sibm_release_scratch(self.s)

    def counters(self):
        """(t, batch): the update counter and the current batch size, without copying q."""
        cdef int64_t t = 0, batch = 0
        pymf_sibm_get_state(self.s, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &t, &batch)
        return t, batch

    def set_state(self, u1, u2, v1, v2, z, row_updates, col_updates, int64_t t, int64_t batch):
        L, M, D = self.n_rows, self.n_cols, self.rank
        arrays = [_float64(u1), _float64(u2), _float64(v1), _float64(v2), _float64(z)]
        for name, a, shape in zip(("u1", "u2", "v1", "v2", "z"), arrays,
                                  ((L, D), (L, D), (M, D), (M, D), (2,))):
            if a.shape != shape:
                raise ValueError(f"{name} must have shape {shape}, got {a.shape}")
        ru, cu = _int64(row_updates), _int64(col_updates)
        if ru.shape != (L,) or cu.shape != (M,):
            raise ValueError("row_updates / col_updates must have one count per row / column")
        cdef const double[:, ::1] a1 = arrays[0], a2 = arrays[1], b1 = arrays[2], b2 = arrays[3]
        cdef const double[::1] zz = arrays[4]
        cdef const int64_t[::1] r = ru, c = cu
        cdef pymf_error err
        pymf_sibm_set_state(self.s, &a1[0, 0], &a2[0, 0], &b1[0, 0], &b2[0, 0], &zz[0],
                            &r[0], &c[0], t, batch, &err)
        check(&err)

    def run(self, int64_t n_updates):
        """n_updates stochastic updates; returns the batch size each used."""
        sizes = np.zeros(max(n_updates, 0), dtype=np.int64)
        cdef int64_t[::1] sz = sizes
        cdef int64_t *p = &sz[0] if n_updates > 0 else NULL
        cdef pymf_error err
        with nogil:
            pymf_sibm_run(self.s, n_updates, p, &err)
        check(&err)
        return sizes

    def batch_sweep(self, int64_t n_sweeps):
        cdef pymf_error err
        with nogil:
            pymf_sibm_batch_sweep(self.s, n_sweeps, &err)
        check(&err)

    def draw(self, int64_t t, int64_t n, stream=None):
        """The strategy's n draws of update t: (rows, cols, x, w_row, w_col, w_z)."""
        rows, cols = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
        x, wr, wc, wz = np.empty(n), np.empty(n), np.empty(n), np.empty(n)
        if n == 0:
            return rows, cols, x, wr, wc, wz
        cdef int64_t[::1] r = rows, c = cols
        cdef double[::1] xx = x, a = wr, b = wc, d = wz
        cdef unsigned int st = PYMF_STREAM_SIBM_DRAW if stream is None else stream
        cdef pymf_error err
        with nogil:
            pymf_sibm_draw(self.s, st, t, n, &r[0], &c[0], &xx[0], &a[0], &b[0], &d[0], &err)
        check(&err)
        return rows, cols, x, wr, wc, wz

    def update_entries(self, rows, cols, x, w_row, w_col, w_z, double rho):
        r, c = _int64(rows), _int64(cols)
        xs, a, b, d = _float64(x), _float64(w_row), _float64(w_col), _float64(w_z)
        cdef int64_t n = r.shape[0]
        if n == 0 or any(v.shape != (n,) for v in (c, xs, a, b, d)):
            raise ValueError("rows, cols, x and the weights must be non-empty and of one length")
        cdef const int64_t[::1] rv = r, cv = c
        cdef const double[::1] xv = xs, av = a, bv = b, dv = d
        cdef pymf_error err
        with nogil:
            pymf_sibm_update_entries(self.s, n, &rv[0], &cv[0], &xv[0], &av[0], &bv[0], &dv[0],
                                     rho, &err)
        check(&err)

    def elbo(self):
        cdef double value = 0.0
        cdef pymf_error err
        with nogil:
            pymf_sibm_elbo(self.s, &value, &err)
        check(&err)
        return value

    def elbo_estimate(self, int64_t t, int64_t n):
        cdef double value = 0.0
        cdef pymf_error err
        with nogil:
            pymf_sibm_elbo_estimate(self.s, t, n, &value, &err)
        check(&err)
        return value

    def entry_moments(self, rows, cols, x=None):
        """(E[s], Var[s], f at the optimal xi) of the entries."""
        r, c = _int64(rows), _int64(cols)
        n = r.shape[0]
        xs = np.zeros(n) if x is None else _float64(x)
        if c.shape != (n,) or xs.shape != (n,):
            raise ValueError("rows, cols and x must have one length")
        if n and (r.min() < 0 or r.max() >= self.n_rows or c.min() < 0 or c.max() >= self.n_cols):
            raise ValueError("an entry is outside the matrix")
        mean, var, f = np.empty(n), np.empty(n), np.empty(n)
        if n == 0:
            return mean, var, f
        cdef const int64_t[::1] rv = r, cv = c
        cdef const double[::1] xv = xs
        cdef double[::1] m = mean, v = var, ff = f
        pymf_sibm_entry_moments(self.s, n, &rv[0], &cv[0], &xv[0], &m[0], &v[0], &ff[0])
        return mean, var, f

    def kl(self):
        return pymf_sibm_kl(self.s)
