"""Bindings of core/src/sgmcmc.c, linear_gaussian.c and lbfgs.c: HAMCMC and its baselines
(SGLD, preconditioned SGLD, SGRLD) on the linear-Gaussian model, and the L-BFGS products
they use.

The Python layer (pymf.hamcmc) validates the data and the settings; these functions only
hold the arrays and call the C core, whose checks raise through pymf._status.check.
"""
import numpy as np

cimport cython
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_error_clear
from pymf._status cimport check

_KINDS = {"sgld": PYMF_SGMCMC_SGLD, "precond_sgld": PYMF_SGMCMC_PSGLD, "sgrld": PYMF_SGMCMC_SGRLD,
          "hamcmc": PYMF_SGMCMC_HAMCMC}


cdef void _point_at(pymf_sgmcmc_saved *saved, theta_array, V_array, pair_s_array,
                    pair_y_array) except *:
    """saved's pointers into C-contiguous float64 arrays of its shape (pairs: none when
    saved.pair_rows is 0). The arrays must outlive the C call that reads or fills them."""
    cdef double[:, ::1] theta = theta_array
    cdef double[::1] V = V_array
    cdef double[:, ::1] pair_s = pair_s_array
    cdef double[:, ::1] pair_y = pair_y_array
    saved.theta = &theta[0, 0]
    saved.V = &V[0]
    saved.pair_s = &pair_s[0, 0] if saved.pair_rows else NULL
    saved.pair_y = &pair_y[0, 0] if saved.pair_rows else NULL


cdef class _Model:
    """The model's arrays (kept alive here) and the C struct pointing into them."""
    cdef pymf_linear_gaussian m
    cdef readonly object A, x

    def __cinit__(self, A, x, double noise_var, double prior_var):
        self.A = np.ascontiguousarray(A, dtype=np.float64)
        self.x = np.ascontiguousarray(x, dtype=np.float64)
        if self.A.ndim != 2 or self.x.ndim != 1 or self.x.shape[0] != self.A.shape[0] \
                or self.A.shape[0] == 0 or self.A.shape[1] == 0:
            raise ValueError("A must be N x D and x of length N, both non-empty")
        cdef const double[:, ::1] a = self.A
        cdef const double[::1] xv = self.x
        self.m.n_data = a.shape[0]
        self.m.dim = <int>a.shape[1]
        self.m.A = &a[0, 0]
        self.m.x = &xv[0]
        self.m.noise_var = noise_var
        self.m.prior_var = prior_var


def grad_potential(A, x, double noise_var, double prior_var, theta, idx=None):
    """(grad U_Omega(theta), mean per-datum likelihood gradient) over the entries idx (None:
    all of them)."""
    cdef _Model model = _Model(A, x, noise_var, prior_var)
    cdef int D = model.m.dim
    cdef const double[::1] th = np.ascontiguousarray(theta, dtype=np.float64)
    if th.shape[0] != D:
        raise ValueError(f"theta must have {D} values")
    grad = np.empty(D)
    mean = np.empty(D)
    cdef double[::1] g = grad, ml = mean
    cdef const int64_t[::1] ix
    if idx is None:
        pymf_lg_grad_potential(&model.m, &th[0], NULL, 0, &g[0], &ml[0])
    else:
        ix = np.ascontiguousarray(idx, dtype=np.int64)
        if ix.shape[0] == 0 or np.min(idx) < 0 or np.max(idx) >= model.m.n_data:
            raise ValueError("idx must be a non-empty list of entries in [0, N)")
        pymf_lg_grad_potential(&model.m, &th[0], &ix[0], ix.shape[0], &g[0], &ml[0])
    return grad, mean


def _lbfgs_product(S, Y, double gamma, v, bint root, bint scaled_gamma):
    """(H v or S v, pairs used) for the pairs (rows of S and Y, oldest first); scaled_gamma:
    H^0 = (s^T y / y^T y) I of the newest usable pair (gamma when none is)."""
    S = np.ascontiguousarray(S, dtype=np.float64)
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    v = np.ascontiguousarray(v, dtype=np.float64)
    if S.ndim != 2 or S.shape != Y.shape or v.shape != (S.shape[1],) or S.shape[1] == 0:
        raise ValueError("S and Y must be n_pairs x D and the vector of length D")
    cdef int n = S.shape[0], D = S.shape[1]
    out = np.empty(D)
    work = np.empty((4 * max(n, 1) + 2) * D)
    cdef const double[:, ::1] s = S, y = Y
    cdef const double[::1] vv = v
    cdef double[::1] o = out, w = work
    cdef const double *sp = &s[0, 0] if n else NULL
    cdef const double *yp = &y[0, 0] if n else NULL
    if scaled_gamma:
        gamma = pymf_lbfgs_scaled_gamma(D, n, sp, yp, gamma, NULL)
    if root:
        used = pymf_lbfgs_sqrt_apply(D, n, sp, yp, gamma, &vv[0], &o[0], &w[0], NULL)
    else:
        used = pymf_lbfgs_apply(D, n, sp, yp, gamma, &vv[0], &o[0], &w[0], NULL)
    return out, used


def lbfgs_apply(S, Y, double gamma, g, scaled_gamma=False):
    """(H g, pairs used): the L-BFGS inverse Hessian from gamma I (scaled_gamma: from
    (s^T y / y^T y) I of the newest usable pair, gamma if none) and the pairs (rows of S and
    Y, oldest first) applied to g."""
    return _lbfgs_product(S, Y, gamma, g, False, scaled_gamma)


def lbfgs_sqrt_apply(S, Y, double gamma, z, scaled_gamma=False):
    """(S z, pairs used) with S S^T = H (Brodlie-Gourlay-Greenstadt product form)."""
    return _lbfgs_product(S, Y, gamma, z, True, scaled_gamma)


def lbfgs_scaled_gamma(S, Y, double fallback):
    """s^T y / y^T y of the newest pair with s^T y > 0 (rows of S and Y, oldest first), or
    fallback when there is none."""
    S = np.ascontiguousarray(S, dtype=np.float64)
    Y = np.ascontiguousarray(Y, dtype=np.float64)
    if S.ndim != 2 or S.shape != Y.shape or S.shape[1] == 0:
        raise ValueError("S and Y must be n_pairs x D")
    cdef int n = S.shape[0], D = S.shape[1]
    cdef const double[:, ::1] s = S, y = Y
    return pymf_lbfgs_scaled_gamma(D, n, &s[0, 0] if n else NULL, &y[0, 0] if n else NULL,
                                   fallback, NULL)


# The C sampler points into the model's arrays: the cycle collector must not clear that
# reference before __dealloc__ has destroyed it.
@cython.no_gc_clear
cdef class Chain:
    """One SGLD / preconditioned SGLD / SGRLD / HAMCMC chain on a linear-Gaussian model."""
    cdef pymf_sgmcmc *s
    cdef _Model model
    cdef readonly int dim

    def __cinit__(self, A, x, double noise_var, double prior_var, str kind, int64_t batch_size,
                  uint64_t seed, int memory=2, double gamma=1.0, bint scaled_gamma=False,
                  double lam=0.0, double alpha=0.99, metric_chol=None):
        cdef pymf_sgmcmc_config config
        cdef pymf_error err
        self.s = NULL
        if kind not in _KINDS:
            raise ValueError(f"unknown sampler kind {kind!r}")
        self.model = _Model(A, x, noise_var, prior_var)
        self.dim = self.model.m.dim
        config.kind = _KINDS[kind]
        config.batch_size = batch_size
        config.seed = seed
        config.memory = memory
        config.gamma = gamma
        config.scaled_gamma = scaled_gamma
        config.lambda_ = lam
        config.alpha = alpha
        config.metric_chol = NULL
        cdef const double[:, ::1] L
        if metric_chol is not None:
            L = np.ascontiguousarray(metric_chol, dtype=np.float64)
            if L.shape[0] != self.dim or L.shape[1] != self.dim:
                raise ValueError(f"the metric's Cholesky factor must be {self.dim} x {self.dim}")
            config.metric_chol = &L[0, 0]
        pymf_error_clear(&err)
        self.s = pymf_sgmcmc_create(&self.model.m, &config, &err)
        if self.s == NULL:
            check(&err)
            raise MemoryError("could not create the sampler")

    def __dealloc__(self):
        pymf_sgmcmc_destroy(self.s)

    def start(self, theta):
        cdef pymf_error err
        cdef const double[::1] th = np.ascontiguousarray(theta, dtype=np.float64)
        if th.shape[0] != self.dim:
            raise ValueError(f"the starting state must have {self.dim} values")
        pymf_error_clear(&err)
        pymf_sgmcmc_start(self.s, &th[0], &err)
        check(&err)

    def run(self, eps, out=None):
        """One iteration per step size; out (n x D), if given, receives every new state."""
        cdef const double[::1] e = np.ascontiguousarray(eps, dtype=np.float64)
        cdef int64_t n = e.shape[0]
        cdef double[:, ::1] o
        cdef double *op = NULL
        cdef pymf_error err
        if n == 0:
            return
        if out is not None:
            o = out
            if o.shape[0] != n or o.shape[1] != self.dim:
                raise ValueError("out must be (len(eps), D)")
            op = &o[0, 0]
        pymf_error_clear(&err)
        with nogil:
            pymf_sgmcmc_run(self.s, n, &e[0], op, &err)
        check(&err)

    def state(self):
        """(theta_t, t)."""
        theta = np.empty(self.dim)
        cdef double[::1] th = theta
        cdef int64_t t
        pymf_sgmcmc_state(self.s, &th[0], &t)
        return theta, t

    @property
    def skipped_pairs(self):
        return pymf_sgmcmc_skipped_pairs(self.s)

    def snapshot(self):
        """Everything the chain carries (core/include/pymf/sgmcmc.h, pymf_sgmcmc_saved) as
        {name: ndarray}: the counters t, n_pairs and skipped_pairs, theta (the window, M x D
        for HAMCMC, 1 x D otherwise), V (D) and pair_s, pair_y ((M - 1) x D). restore() of it
        continues this chain bit for bit."""
        cdef pymf_sgmcmc_saved saved
        cdef pymf_error err
        pymf_sgmcmc_saved_shape(self.s, &saved)
        arrays = {"theta": np.empty((saved.window_rows, saved.dim)),
                  "V": np.empty(saved.dim),
                  "pair_s": np.empty((saved.pair_rows, saved.dim)),
                  "pair_y": np.empty((saved.pair_rows, saved.dim))}
        _point_at(&saved, arrays["theta"], arrays["V"], arrays["pair_s"], arrays["pair_y"])
        pymf_error_clear(&err)
        with nogil:
            pymf_sgmcmc_export(self.s, &saved, &err)
        check(&err)
        arrays["counters"] = np.array([saved.t, saved.n_pairs, saved.skipped_pairs], dtype=np.int64)
        return arrays

    def restore(self, arrays):
        """Replaces the chain by a snapshot(); the C core refuses (ValueError) a snapshot of
        another sampler, counters this sampler cannot reach or non-finite values, and then
        leaves the chain as it was."""
        cdef pymf_sgmcmc_saved saved
        cdef pymf_error err
        pymf_sgmcmc_saved_shape(self.s, &saved)
        names = ("counters", "theta", "V", "pair_s", "pair_y")
        missing = [name for name in names if name not in arrays]
        if missing:
            raise ValueError(f"the saved chain state lacks {', '.join(missing)}")
        shapes = {"counters": (3,), "theta": (saved.window_rows, saved.dim), "V": (saved.dim,),
                  "pair_s": (saved.pair_rows, saved.dim), "pair_y": (saved.pair_rows, saved.dim)}
        for name in names:
            if np.shape(arrays[name]) != shapes[name]:
                raise ValueError(f"the saved chain state's {name} has shape "
                                 f"{np.shape(arrays[name])}; this sampler's is {shapes[name]}")
        counters = np.asarray(arrays["counters"])
        if counters.dtype.kind not in "iu":
            raise ValueError("the saved chain state's counters are not integers")
        copies = [np.array(arrays[name], dtype=np.float64, order="C")
                  for name in ("theta", "V", "pair_s", "pair_y")]
        try:
            saved.t, saved.n_pairs, saved.skipped_pairs = (int(c) for c in counters)
        except OverflowError:
            raise ValueError("the saved chain state's counters are out of range") from None
        _point_at(&saved, copies[0], copies[1], copies[2], copies[3])
        pymf_error_clear(&err)
        with nogil:
            pymf_sgmcmc_import(self.s, &saved, &err)
        check(&err)
