"""Bindings of core/src/bpmf_model.c, bpmf_block.c and bpmf_dsgld.c (BPMF by DSGLD) and
core/src/bpmf_gibbs.c (its Gibbs baseline).

The Python layer (pymf.bpmf) validates the ratings, permutes users and items into grid
order and cuts them into blocks; these classes only hold the arrays and call the C core.
A model is passed as the tuple (rank, tau, mean_rating, use_bias, alpha0, beta0,
sample_tau): with sample_tau, tau is the start of the sampled noise precision. A chain's
precisions ("lambdas") are lam_u[D], lam_v[D], lam_a, lam_b, tau.
"""
import numpy as np

cimport cython
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc

from pymf._core cimport pymf_error, pymf_error_clear, pymf_status
from pymf._status cimport check


cdef int fill_model(pymf_bpmf_model *m, model) except -1:
    rank, tau, mean_rating, use_bias, alpha0, beta0, sample_tau = model
    m.rank = rank
    m.tau = tau
    m.mean_rating = mean_rating
    m.use_bias = 1 if use_bias else 0
    m.alpha0 = alpha0
    m.beta0 = beta0
    m.sample_tau = 1 if sample_tau else 0
    cdef pymf_error err
    pymf_error_clear(&err)
    pymf_bpmf_check(m, NULL, &err)
    return check(&err)


def n_precisions(int rank):
    """The length of a chain's precisions: lam_u[D], lam_v[D], lam_a, lam_b, tau."""
    return 2 * rank + 3


cdef inline double *dptr(double[::1] x):
    return &x[0] if x.shape[0] > 0 else NULL


cdef inline const double *cdptr(const double[::1] x):
    return &x[0] if x.shape[0] > 0 else NULL


def _f64(x, n, name):
    x = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    if x.shape[0] != n:
        raise ValueError(f"{name} has {x.shape[0]} values, expected {n}")
    return x


cdef object _predict(const pymf_bpmf_model *m, const pymf_bpmf_params *p, users, items,
                     int n_threads=0):
    """rbar + u.v + a + b for (user, item) pairs, computed by the C core without the GIL
    (on n_threads threads, <= 0: OpenMP's default; the same values for any)."""
    users = np.ascontiguousarray(users, dtype=np.int32)
    items = np.ascontiguousarray(items, dtype=np.int32)
    if users.shape != items.shape or users.ndim != 1:
        raise ValueError("users and items must be 1-D arrays of the same length")
    out = np.empty(len(users))
    cdef const int32_t[::1] us = users, its = items
    cdef double[::1] o = out
    if us.shape[0] > 0:
        with nogil:
            pymf_bpmf_predict(m, p, us.shape[0], &us[0], &its[0], &o[0], n_threads)
    return out


cdef class BlockLayout:
    """Ratings in grid order cut into P x Q blocks (see core/include/pymf/bpmf.h)."""
    cdef pymf_bpmf_data data
    cdef readonly object row_start, col_start, block_ptr, users, items, ratings

    def __cinit__(self, int64_t n_users, int64_t n_items, row_start, col_start, block_ptr,
                  users, items, ratings):
        self.row_start = np.ascontiguousarray(row_start, dtype=np.int64)
        self.col_start = np.ascontiguousarray(col_start, dtype=np.int64)
        self.block_ptr = np.ascontiguousarray(block_ptr, dtype=np.int64)
        self.users = np.ascontiguousarray(users, dtype=np.int32)
        self.items = np.ascontiguousarray(items, dtype=np.int32)
        self.ratings = np.ascontiguousarray(ratings, dtype=np.float64)
        P, Q = len(self.row_start) - 1, len(self.col_start) - 1
        if P < 1 or Q < 1 or len(self.block_ptr) != P * Q + 1:
            raise ValueError("inconsistent block layout")
        if not (len(self.users) == len(self.items) == len(self.ratings)):
            raise ValueError("users, items and ratings must have the same length")
        cdef const int64_t[::1] rs = self.row_start, cs = self.col_start, bp = self.block_ptr
        cdef const int32_t[::1] us = self.users, its = self.items
        cdef const double[::1] rv = self.ratings
        self.data.n_users = n_users
        self.data.n_items = n_items
        self.data.nnz = len(self.ratings)
        self.data.n_row_blocks = P
        self.data.n_col_blocks = Q
        self.data.row_start = &rs[0]
        self.data.col_start = &cs[0]
        self.data.block_ptr = &bp[0]
        self.data.users = &us[0] if us.shape[0] > 0 else NULL
        self.data.items = &its[0] if its.shape[0] > 0 else NULL
        self.data.ratings = &rv[0] if rv.shape[0] > 0 else NULL

    @property
    def n_users(self):
        return self.data.n_users

    @property
    def n_items(self):
        return self.data.n_items

    @property
    def nnz(self):
        return self.data.nnz

    @property
    def grid(self):
        return (self.data.n_row_blocks, self.data.n_col_blocks)

    @property
    def n_groups(self):
        return pymf_bpmf_n_groups(&self.data)

    @property
    def group_size(self):
        return pymf_bpmf_group_size(&self.data)

    def group_block(self, int group, int slot):
        return pymf_bpmf_group_block(&self.data, group, slot)

    def chain_group(self, int chain, int64_t round):
        return pymf_bpmf_chain_group(&self.data, chain, round)

    def check(self, model):
        cdef pymf_bpmf_model m
        cdef pymf_error err
        fill_model(&m, model)
        pymf_error_clear(&err)
        pymf_bpmf_check(&m, &self.data, &err)
        check(&err)

    def bias_correctors(self, int64_t batch_size):
        """(h_user, h_item): hbar of every user and item for minibatches of batch_size."""
        h_user = np.zeros(self.data.n_users)
        h_item = np.zeros(self.data.n_items)
        cdef double[::1] hu = h_user, hi = h_item
        cdef pymf_error err
        pymf_error_clear(&err)
        pymf_bpmf_bias_correctors(&self.data, batch_size, &hu[0], &hi[0], &err)
        check(&err)
        return h_user, h_item


cdef class Params:
    """Numpy views of one chain's parameters (grid order) for the module functions."""
    cdef pymf_bpmf_params p
    cdef readonly object U, V, a, b, lambdas

    def __cinit__(self, int rank, U, V, a, b, lambdas):
        self.U = np.ascontiguousarray(U, dtype=np.float64)
        self.V = np.ascontiguousarray(V, dtype=np.float64)
        self.a = _f64(a, self.U.shape[0], "a")
        self.b = _f64(b, self.V.shape[0], "b")
        self.lambdas = _f64(lambdas, n_precisions(rank), "lambdas")
        if self.U.ndim != 2 or self.V.ndim != 2 or self.U.shape[1] != rank or self.V.shape[1] != rank:
            raise ValueError(f"U and V must have {rank} columns")
        cdef double[:, ::1] u = self.U, v = self.V
        self.p.U = &u[0, 0]
        self.p.V = &v[0, 0]
        self.p.a = dptr(self.a)
        self.p.b = dptr(self.b)
        self.p.lambdas = dptr(self.lambdas)


def log_posterior(BlockLayout layout, model, Params params):
    """(log p(U, V, a, b | R, precisions) + const, gU, gV, ga, gb)."""
    cdef pymf_bpmf_model m
    fill_model(&m, model)
    gU = np.empty_like(params.U)
    gV = np.empty_like(params.V)
    ga = np.empty_like(params.a)
    gb = np.empty_like(params.b)
    cdef double[:, ::1] gu = gU, gv = gV
    cdef double lp = pymf_bpmf_log_posterior(&m, &layout.data, &params.p, &gu[0, 0], &gv[0, 0],
                                             dptr(ga), dptr(gb))
    return lp, gU, gV, ga, gb


cdef _check_shapes(BlockLayout layout, int rank, Params params):
    if params.U.shape != (layout.n_users, rank) or params.V.shape != (layout.n_items, rank):
        raise ValueError("the parameters do not match the layout and the rank")


cdef _check_row_lists(int ok, name):
    """row_gram's and row_correlations' status: 0 when a stripe's lists of its ratings by
    row could not be allocated."""
    if not ok:
        raise MemoryError(f"{name}: out of memory listing a stripe's ratings by row "
                          "(4 bytes a rating, 8 a row)")


def log_posterior_gradient(BlockLayout layout, model, Params params, int n_threads=0):
    """(gU, gV, ga, gb): log_posterior's gradient, bit for bit, on n_threads threads."""
    cdef pymf_bpmf_model m
    fill_model(&m, model)
    _check_shapes(layout, m.rank, params)
    gU = np.empty_like(params.U)
    gV = np.empty_like(params.V)
    ga = np.empty_like(params.a)
    gb = np.empty_like(params.b)
    cdef double[:, ::1] gu = gU, gv = gV
    cdef double *pa = dptr(ga)
    cdef double *pb = dptr(gb)
    with nogil:
        pymf_bpmf_log_posterior_gradient(&m, &layout.data, &params.p, &gu[0, 0], &gv[0, 0],
                                         pa, pb, n_threads)
    return gU, gV, ga, gb


def hyper_step(BlockLayout layout, model, Params params, h_user, h_item, uint64_t hyper_seed,
               int64_t round, int n_threads=0):
    """The Gibbs step of the precisions (and of rows without ratings; then of tau if the
    model samples it) after `round`, in place."""
    cdef pymf_bpmf_model m
    cdef pymf_error err
    fill_model(&m, model)
    cdef const double[::1] hu = _f64(h_user, layout.n_users, "h_user")
    cdef const double[::1] hi = _f64(h_item, layout.n_items, "h_item")
    pymf_error_clear(&err)
    pymf_dsgld_hyper_step(&m, &layout.data, &params.p, &hu[0], &hi[0], hyper_seed, round,
                          n_threads, &err)
    check(&err)


def sq_error(BlockLayout layout, model, Params params, int n_threads=0):
    """Sum of squared training residuals (the same bits as DSGLDChains.sq_error)."""
    cdef pymf_bpmf_model m
    fill_model(&m, model)
    return pymf_bpmf_sq_error(&m, &layout.data, &params.p, n_threads)


def row_gram(BlockLayout layout, model, Params params, int n_threads=0):
    """(H_user, H_item): each row's sum of x x^T over its ratings, x = (the other side's
    factor row, 1; 0 without biases), shapes (rows, D + 1, D + 1), grid order; the same bits
    as np.bincount over the layout's ratings, for any thread count (pymf_bpmf_row_gram)."""
    cdef pymf_bpmf_model m
    fill_model(&m, model)
    cdef int E = m.rank + 1
    _check_shapes(layout, m.rank, params)
    H_user = np.empty((layout.n_users, E, E))
    H_item = np.empty((layout.n_items, E, E))
    cdef double[:, :, ::1] hu = H_user, hi = H_item
    cdef double *pu = &hu[0, 0, 0] if hu.shape[0] > 0 else NULL
    cdef double *pi = &hi[0, 0, 0] if hi.shape[0] > 0 else NULL
    cdef int ok
    with nogil:
        ok = pymf_bpmf_row_gram(&m, &layout.data, &params.p, pu, pi, n_threads)
    _check_row_lists(ok, "row_gram")
    return H_user, H_item


def row_correlations(BlockLayout layout, model, Params params, int n_threads=0):
    """((diag_user, R_user), (diag_item, R_item)): row_gram's sums as each row's diagonal
    (rows, D + 1) and correlation matrix (rows, D + 1, D + 1), R = H * r[:, None] *
    r[None, :] with r = 1 / sqrt(diag) where diag > 0, else 0, the bits NumPy gives from
    row_gram's H (pymf_bpmf_row_correlations)."""
    cdef pymf_bpmf_model m
    fill_model(&m, model)
    cdef int E = m.rank + 1
    _check_shapes(layout, m.rank, params)
    diag_user = np.empty((layout.n_users, E))
    diag_item = np.empty((layout.n_items, E))
    R_user = np.empty((layout.n_users, E, E))
    R_item = np.empty((layout.n_items, E, E))
    cdef double[:, ::1] du = diag_user, di = diag_item
    cdef double[:, :, ::1] ru = R_user, ri = R_item
    cdef double *pdu = &du[0, 0] if du.shape[0] > 0 else NULL
    cdef double *pdi = &di[0, 0] if di.shape[0] > 0 else NULL
    cdef double *pru = &ru[0, 0, 0] if ru.shape[0] > 0 else NULL
    cdef double *pri = &ri[0, 0, 0] if ri.shape[0] > 0 else NULL
    cdef int ok
    with nogil:
        ok = pymf_bpmf_row_correlations(&m, &layout.data, &params.p, pdu, pru, pdi, pri,
                                        n_threads)
    _check_row_lists(ok, "row_correlations")
    return (diag_user, R_user), (diag_item, R_item)


def row_curvatures(BlockLayout layout, model, params, int n_threads=0):
    """((diag_user, rho_user), (diag_item, rho_item)) of each state in the list `params`:
    diag (states, rows, D + 1), row_correlations' diagonals, and rho (states, rows), the
    largest eigenvalue of each row's correlation matrix (pymf._linalg's, the same bits),
    computed row by row in C on n_threads threads without keeping the matrices (at 10^7
    ratings and D = 10 they were 80 MB a state; pymf_bpmf_row_curvatures)."""
    cdef pymf_bpmf_model m
    fill_model(&m, model)
    cdef int E = m.rank + 1
    cdef Params one
    cdef int n_sets = len(params), k
    if n_sets < 1:
        raise ValueError("row_curvatures: at least one state is needed")
    for one in params:
        _check_shapes(layout, m.rank, one)
    diag_user = np.empty((n_sets, layout.n_users, E))
    diag_item = np.empty((n_sets, layout.n_items, E))
    rho_user = np.empty((n_sets, layout.n_users))
    rho_item = np.empty((n_sets, layout.n_items))
    cdef double[:, :, ::1] du = diag_user, di = diag_item
    cdef double[:, ::1] ru = rho_user, ri = rho_item
    cdef double *pdu = &du[0, 0, 0] if du.shape[1] > 0 else NULL
    cdef double *pdi = &di[0, 0, 0] if di.shape[1] > 0 else NULL
    cdef double *pru = &ru[0, 0] if ru.shape[1] > 0 else NULL
    cdef double *pri = &ri[0, 0] if ri.shape[1] > 0 else NULL
    cdef pymf_bpmf_params *states = <pymf_bpmf_params *>malloc(n_sets * sizeof(pymf_bpmf_params))
    if states == NULL:
        raise MemoryError("row_curvatures: no memory for the states' list")
    cdef int ok
    try:
        for k in range(n_sets):
            one = params[k]
            states[k] = one.p
        with nogil:
            ok = pymf_bpmf_row_curvatures(&m, &layout.data, states, n_sets, pdu, pru, pdi,
                                          pri, n_threads)
    finally:
        free(states)
    _check_row_lists(ok, "row_curvatures")
    return (diag_user, rho_user), (diag_item, rho_item)


def predict(model, Params params, users, items, int n_threads=0):
    cdef pymf_bpmf_model m
    fill_model(&m, model)
    return _predict(&m, &params.p, users, items, n_threads)


cdef class BlockWorker:
    """The steps of one block of one round: what a thread or an MPI worker runs. The
    parameter arrays passed in are the block's stripe slices (rows user_offset ...)."""
    cdef pymf_dsgld_scratch *scratch
    cdef pymf_dsgld_block blk
    cdef pymf_bpmf_model model
    cdef int64_t batch_size
    cdef object keep, row_steps
    cdef int64_t n_users, n_items
    cdef readonly int64_t user_offset, n_stripe_users, item_offset, n_stripe_items

    def __cinit__(self, BlockLayout layout, int block, model, int64_t batch_size, h_user, h_item):
        self.scratch = NULL
        fill_model(&self.model, model)
        P, Q = layout.grid
        if not 0 <= block < P * Q:
            raise ValueError(f"block {block} out of range")
        if batch_size < 1:
            raise ValueError("batch_size must be >= 1")
        p, q = divmod(block, Q)
        h_user = _f64(h_user, layout.n_users, "h_user")
        h_item = _f64(h_item, layout.n_items, "h_item")
        self.keep = (layout, h_user, h_item)
        cdef const double[::1] hu = h_user, hi = h_item
        cdef int64_t lo = layout.block_ptr[block], hi_ = layout.block_ptr[block + 1]
        self.blk.block_id = block
        self.blk.n_entries = hi_ - lo
        self.blk.users = layout.data.users + lo if self.blk.n_entries > 0 else NULL
        self.blk.items = layout.data.items + lo if self.blk.n_entries > 0 else NULL
        self.blk.ratings = layout.data.ratings + lo if self.blk.n_entries > 0 else NULL
        self.user_offset = layout.row_start[p]
        self.n_stripe_users = layout.row_start[p + 1] - layout.row_start[p]
        self.item_offset = layout.col_start[q]
        self.n_stripe_items = layout.col_start[q + 1] - layout.col_start[q]
        self.blk.user_offset = self.user_offset
        self.blk.n_stripe_users = self.n_stripe_users
        self.blk.item_offset = self.item_offset
        self.blk.n_stripe_items = self.n_stripe_items
        self.blk.h_user = &hu[0] + self.user_offset
        self.blk.h_item = &hi[0] + self.item_offset
        self.blk.visit_rate = 1.0 / layout.n_groups
        self.blk.step_user = NULL
        self.blk.step_item = NULL
        self.n_users, self.n_items = layout.n_users, layout.n_items
        self.row_steps = None
        self.batch_size = batch_size
        self.scratch = pymf_dsgld_scratch_create(self.model.rank, self.n_stripe_users,
                                                 self.n_stripe_items, batch_size)
        if self.scratch == NULL:
            raise MemoryError("could not allocate DSGLD scratch space")

    def __dealloc__(self):
        pymf_dsgld_scratch_destroy(self.scratch)

    cdef int _shapes(self, double[:, ::1] U, double[:, ::1] V, double[::1] a, double[::1] b,
                     const double[::1] lambdas) except -1:
        D = self.model.rank
        if (U.shape[0] != self.n_stripe_users or U.shape[1] != D or V.shape[0] != self.n_stripe_items
                or V.shape[1] != D or a.shape[0] != self.n_stripe_users
                or b.shape[0] != self.n_stripe_items or lambdas.shape[0] != n_precisions(D)):
            raise ValueError("the parameter slices do not match the block's stripes")
        return 0

    def set_row_steps(self, step_user, step_item, noise_user, noise_item):
        """Per-coordinate step and noise factors (every user and item, grid order;
        DSGLDChains.set_row_steps) for the steps(..., row_steps=True) calls; None removes
        them."""
        if step_user is None or step_item is None:
            self.row_steps = None
            return
        w = self.model.rank + 1
        out = []
        for x, nz, n, name in ((step_user, noise_user, self.n_users, "step_user"),
                               (step_item, noise_item, self.n_items, "step_item")):
            x = _f64(x, n * w, name).reshape(n, w)
            nz = _f64(nz, n * w, "noise factors").reshape(n, w)
            if not np.all((x > 0) & (x <= 1) & (nz >= 0) & (nz <= x)):
                raise ValueError("row step factors must be in (0, 1], noise factors in "
                                 "[0, step factor]")
            # as pymf_dsgld_set_row_steps stores them: the step factors, then the square
            # roots of the noise factors
            out.append(np.ascontiguousarray(np.hstack([x, np.sqrt(nz)])).reshape(-1))
        self.row_steps = tuple(out)

    def steps(self, uint64_t noise_seed, bint add_noise, double[:, ::1] U, double[:, ::1] V,
              double[::1] a, double[::1] b, const double[::1] lambdas, int64_t first_step,
              int n_steps, double eps, bint noise_correction=True, bint row_steps=False,
              double tau_reference=0.0):
        """n_steps DSGLD steps in place on the slices (pymf.DivergenceError if they diverge);
        row_steps: with the factors of set_row_steps; tau_reference > 0: the steps are eps
        tau_reference / tau where the chain's tau exceeds it (DSGLDChains.set_tau_reference)."""
        cdef pymf_error err
        cdef pymf_dsgld_stepper st
        cdef const double[::1] su
        cdef const double[::1] si
        self._shapes(U, V, a, b, lambdas)
        self.blk.step_user = NULL
        self.blk.step_item = NULL
        if row_steps:
            if self.row_steps is None:
                raise ValueError("row_steps=True needs set_row_steps first")
            su, si = self.row_steps
            self.blk.step_user = &su[0] + 2 * (self.model.rank + 1) * self.user_offset
            self.blk.step_item = &si[0] + 2 * (self.model.rank + 1) * self.item_offset
        st.noise_seed = noise_seed
        st.batch_size = self.batch_size
        st.add_noise = add_noise
        st.noise_correction = noise_correction
        st.tau_reference = tau_reference
        pymf_error_clear(&err)
        with nogil:
            pymf_dsgld_block_steps(&self.model, &self.blk, &st, &U[0, 0], &V[0, 0], &a[0], &b[0],
                                   &lambdas[0], first_step, n_steps, eps, self.scratch, &err)
        check(&err)

    def gradient(self, uint64_t noise_seed, double[:, ::1] U, double[:, ::1] V, double[::1] a,
                 double[::1] b, const double[::1] lambdas, int64_t step):
        """The estimator of step `step` on this block: (gU, gV, ga, gb) of the stripes."""
        cdef pymf_error err
        cdef pymf_dsgld_stepper st
        self._shapes(U, V, a, b, lambdas)
        st.noise_seed = noise_seed
        st.batch_size = self.batch_size
        st.add_noise = 0
        st.noise_correction = 0
        st.tau_reference = 0.0
        gU = np.empty((U.shape[0], U.shape[1]))
        gV = np.empty((V.shape[0], V.shape[1]))
        ga = np.empty(a.shape[0])
        gb = np.empty(b.shape[0])
        cdef double[:, ::1] gu = gU, gv = gV
        cdef double[::1] gav = ga, gbv = gb
        pymf_error_clear(&err)
        pymf_dsgld_block_gradient(&self.model, &self.blk, &st, &U[0, 0], &V[0, 0], &a[0], &b[0],
                                  &lambdas[0], step, self.scratch, &gu[0, 0], &gv[0, 0], &gav[0],
                                  &gbv[0], &err)
        check(&err)
        return gU, gV, ga, gb


@cython.no_gc_clear
cdef class DSGLDChains:
    """C chains of DSGLD (or, add_noise=False, of stochastic gradient ascent) in shared memory."""
    cdef pymf_dsgld *d
    cdef pymf_bpmf_model model
    cdef BlockLayout layout
    cdef readonly int n_chains, rank
    cdef readonly int n_threads  # the run's (<= 0: OpenMP's default), for sq_error and predict

    def __cinit__(self, BlockLayout layout, model, int n_chains, int64_t batch_size,
                  int round_length, int hyper_every, bint add_noise, noise_seeds, hyper_seeds,
                  int n_threads=0, bint noise_correction=True):
        cdef pymf_dsgld_config config
        cdef pymf_error err
        self.d = NULL
        self.layout = layout
        fill_model(&self.model, model)
        self.rank = self.model.rank
        self.n_chains = n_chains
        self.n_threads = n_threads
        cdef const uint64_t[::1] ns = np.ascontiguousarray(noise_seeds, dtype=np.uint64)
        cdef const uint64_t[::1] hs = np.ascontiguousarray(hyper_seeds, dtype=np.uint64)
        if ns.shape[0] != n_chains or hs.shape[0] != n_chains:
            raise ValueError("one noise seed and one hyper seed per chain")
        config.n_chains = n_chains
        config.batch_size = batch_size
        config.round_length = round_length
        config.hyper_every = hyper_every
        config.add_noise = add_noise
        config.noise_correction = noise_correction
        config.n_threads = n_threads
        pymf_error_clear(&err)
        self.d = pymf_dsgld_create(&self.model, &layout.data, &config, &ns[0], &hs[0], &err)
        if self.d == NULL:
            check(&err)
            raise MemoryError("could not create the DSGLD chains")

    def __dealloc__(self):
        pymf_dsgld_destroy(self.d)

    def set_threads(self, int n_threads):
        pymf_dsgld_set_threads(self.d, n_threads)
        self.n_threads = n_threads

    cdef int _chain(self, int chain) except -1:
        if not 0 <= chain < self.n_chains:
            raise IndexError(f"chain {chain} out of range")
        return 0

    def set_state(self, int chain, U, V, a, b, lambdas, int64_t round):
        cdef pymf_error err
        self._chain(chain)
        cdef Params p = Params(self.rank, U, V, a, b, lambdas)
        if p.U.shape[0] != self.layout.n_users or p.V.shape[0] != self.layout.n_items:
            raise ValueError("U and V do not match the data's users and items")
        pymf_error_clear(&err)
        pymf_dsgld_set_state(self.d, chain, p.p.U, p.p.V, p.p.a, p.p.b, p.p.lambdas, round, &err)
        check(&err)

    def get_state(self, int chain):
        """A Params copy of the chain's state (grid order)."""
        self._chain(chain)
        cdef int64_t L = self.layout.n_users, M = self.layout.n_items, r
        U = np.empty((L, self.rank))
        V = np.empty((M, self.rank))
        a = np.empty(L)
        b = np.empty(M)
        lam = np.empty(n_precisions(self.rank))
        cdef double[:, ::1] u = U, v = V
        pymf_dsgld_get_state(self.d, chain, &u[0, 0], &v[0, 0], dptr(a), dptr(b), dptr(lam), &r)
        return Params(self.rank, U, V, a, b, lam)

    def precisions(self, int chain):
        """A copy of one chain's precisions (the last, tau) alone."""
        self._chain(chain)
        lam = np.empty(n_precisions(self.rank))
        pymf_dsgld_get_state(self.d, chain, NULL, NULL, NULL, NULL, dptr(lam), NULL)
        return lam

    @property
    def round(self):
        cdef int64_t r
        pymf_dsgld_get_state(self.d, 0, NULL, NULL, NULL, NULL, NULL, &r)
        return r

    def set_row_steps(self, step_user, step_item, noise_user, noise_item, int64_t from_round):
        """Per-coordinate step factors in (0, 1] and noise factors in [0, step factor]
        (users x (rank + 1) and items x (rank + 1), grid order, the bias last) for the rounds
        from from_round on (pymf_dsgld_set_row_steps); None removes them."""
        cdef pymf_error err
        cdef const double[::1] su
        cdef const double[::1] si
        cdef const double[::1] nu
        cdef const double[::1] ni
        pymf_error_clear(&err)
        if step_user is None or step_item is None:
            pymf_dsgld_set_row_steps(self.d, NULL, NULL, NULL, NULL, 0, &err)
        else:
            w = self.rank + 1
            su = _f64(step_user, self.layout.n_users * w, "step_user")
            si = _f64(step_item, self.layout.n_items * w, "step_item")
            nu = _f64(noise_user, self.layout.n_users * w, "noise_user")
            ni = _f64(noise_item, self.layout.n_items * w, "noise_item")
            pymf_dsgld_set_row_steps(self.d, &su[0], &si[0], &nu[0], &ni[0], from_round, &err)
        check(&err)

    def set_tau_reference(self, tau_reference):
        """Chain c's steps become eps tau_reference[c] / tau where its tau exceeds
        tau_reference[c] (pymf_dsgld_set_tau_reference; one positive value per chain); None
        removes them."""
        cdef pymf_error err
        cdef const double[::1] r
        pymf_error_clear(&err)
        if tau_reference is None:
            pymf_dsgld_set_tau_reference(self.d, NULL, &err)
        else:
            r = _f64(tau_reference, self.n_chains, "tau_reference")
            pymf_dsgld_set_tau_reference(self.d, &r[0], &err)
        check(&err)

    def run(self, eps):
        """One round per step size in eps (all chains)."""
        cdef const double[::1] e = np.ascontiguousarray(eps, dtype=np.float64)
        cdef pymf_error err
        cdef int64_t n = e.shape[0]
        if n == 0:
            return
        pymf_error_clear(&err)
        with nogil:
            pymf_dsgld_run(self.d, n, &e[0], &err)
        check(&err)

    def sq_error(self, int chain):
        """Sum of squared training residuals of one chain (on the chains' threads; the sum
        tau's draw computed at this round where there is one)."""
        self._chain(chain)
        cdef double out
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_dsgld_sq_errors(self.d, chain, 1, &out, &err)
        check(&err)
        return out

    def sq_errors(self):
        """Every chain's sum of squared training residuals (one pass for those not known
        at this round), each with the bits of sq_error(chain)."""
        out = np.empty(self.n_chains)
        cdef double[::1] o = out
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_dsgld_sq_errors(self.d, 0, self.n_chains, &o[0], &err)
        check(&err)
        return out

    def predict(self, int chain, users, items):
        """Predictions of one chain for (user, item) pairs in grid order."""
        self._chain(chain)
        return _predict(&self.model, pymf_dsgld_params(self.d, chain), users, items,
                        self.n_threads)


@cython.no_gc_clear
cdef class BPMFGibbsChain:
    """The BPMF Gibbs sampler over ratings by user (CSR) and by item (CSC)."""
    cdef pymf_bpmf_gibbs *g
    cdef pymf_bpmf_model model
    cdef pymf_bpmf_rows rows
    cdef object keep
    cdef readonly int rank
    cdef readonly int64_t hyper_size, n_users, n_items
    cdef readonly int n_threads  # the run's (<= 0: OpenMP's default), for predict

    def __cinit__(self, model, int64_t n_users, int64_t n_items, user_ptr, user_items,
                  user_ratings, item_ptr, item_users, item_ratings, str hyperprior="wishart",
                  double nw_beta0=2.0, nw_nu0=None, double nw_w0=1.0, uint64_t noise_seed=0,
                  uint64_t hyper_seed=0, int n_threads=0):
        cdef pymf_bpmf_gibbs_config config
        cdef pymf_error err
        self.g = NULL
        fill_model(&self.model, model)
        self.rank = self.model.rank
        self.n_threads = n_threads
        arrays = (np.ascontiguousarray(user_ptr, dtype=np.int64),
                  np.ascontiguousarray(user_items, dtype=np.int32),
                  np.array(user_ratings, dtype=np.float64, order="C", copy=True),
                  np.ascontiguousarray(item_ptr, dtype=np.int64),
                  np.ascontiguousarray(item_users, dtype=np.int32),
                  np.array(item_ratings, dtype=np.float64, order="C", copy=True))
        self.keep = arrays
        if len(arrays[0]) != n_users + 1 or len(arrays[3]) != n_items + 1:
            raise ValueError("user_ptr / item_ptr do not match the numbers of users / items")
        nnz = len(arrays[2])
        if not (len(arrays[1]) == nnz == len(arrays[4]) == len(arrays[5])):
            raise ValueError("the CSR and CSC arrays must hold the same number of ratings")
        cdef const int64_t[::1] up = arrays[0], ip = arrays[3]
        cdef const int32_t[::1] ui = arrays[1], iu = arrays[4]
        cdef const double[::1] ur = arrays[2], ir = arrays[5]
        self.n_users, self.n_items = n_users, n_items
        self.rows.n_users = n_users
        self.rows.n_items = n_items
        self.rows.nnz = nnz
        self.rows.user_ptr = &up[0]
        self.rows.item_ptr = &ip[0]
        self.rows.user_items = &ui[0] if nnz > 0 else NULL
        self.rows.item_users = &iu[0] if nnz > 0 else NULL
        self.rows.user_ratings = &ur[0] if nnz > 0 else NULL
        self.rows.item_ratings = &ir[0] if nnz > 0 else NULL
        if hyperprior == "wishart":
            config.hyperprior = PYMF_BPMF_HYPER_WISHART
        elif hyperprior == "gamma":
            config.hyperprior = PYMF_BPMF_HYPER_GAMMA
        else:
            raise ValueError(f"hyperprior must be 'wishart' or 'gamma', got {hyperprior!r}")
        config.nw_beta0 = nw_beta0
        config.nw_nu0 = float(self.rank if nw_nu0 is None else nw_nu0)
        config.nw_w0 = nw_w0
        config.noise_seed = noise_seed
        config.hyper_seed = hyper_seed
        config.n_threads = n_threads
        self.hyper_size = pymf_bpmf_gibbs_hyper_size(self.rank, config.hyperprior)
        pymf_error_clear(&err)
        self.g = pymf_bpmf_gibbs_create(&self.model, &self.rows, &config, &err)
        if self.g == NULL:
            check(&err)
            raise MemoryError("could not create the BPMF Gibbs sampler")

    def __dealloc__(self):
        pymf_bpmf_gibbs_destroy(self.g)

    def set_threads(self, int n_threads):
        pymf_bpmf_gibbs_set_threads(self.g, n_threads)
        self.n_threads = n_threads

    def set_state(self, U, V, a, b, hyper, int64_t sweep):
        cdef pymf_error err
        cdef const double[:, ::1] u = np.ascontiguousarray(U, dtype=np.float64)
        cdef const double[:, ::1] v = np.ascontiguousarray(V, dtype=np.float64)
        if u.shape[0] != self.n_users or v.shape[0] != self.n_items or u.shape[1] != self.rank \
                or v.shape[1] != self.rank:
            raise ValueError("U and V do not match the data and the rank")
        cdef const double[::1] av = _f64(a, self.n_users, "a")
        cdef const double[::1] bv = _f64(b, self.n_items, "b")
        cdef const double[::1] hv = _f64(hyper, self.hyper_size, "hyper")
        pymf_error_clear(&err)
        pymf_bpmf_gibbs_set_state(self.g, &u[0, 0], &v[0, 0], &av[0], &bv[0], &hv[0], sweep, &err)
        check(&err)

    def get_state(self):
        """(U, V, a, b, hyper, sweep)."""
        U = np.empty((self.n_users, self.rank))
        V = np.empty((self.n_items, self.rank))
        a = np.empty(self.n_users)
        b = np.empty(self.n_items)
        hyper = np.empty(self.hyper_size)
        cdef double[:, ::1] u = U, v = V
        cdef int64_t sweep
        pymf_bpmf_gibbs_get_state(self.g, &u[0, 0], &v[0, 0], dptr(a), dptr(b), dptr(hyper), &sweep)
        return U, V, a, b, hyper, sweep

    def set_ratings(self, by_user, by_item):
        """Replaces the rating values (same pattern), in CSR and in CSC order: for tests
        that redraw the data between sweeps (Geweke's successive-conditional test)."""
        by_user = _f64(by_user, self.keep[2].shape[0], "by_user")
        by_item = _f64(by_item, self.keep[5].shape[0], "by_item")
        if not (np.all(np.isfinite(by_user)) and np.all(np.isfinite(by_item))):
            raise ValueError("ratings must be finite")
        self.keep[2][:] = by_user
        self.keep[5][:] = by_item

    def run(self, int64_t n_sweeps):
        cdef pymf_error err
        pymf_error_clear(&err)
        with nogil:
            pymf_bpmf_gibbs_run(self.g, n_sweeps, &err)
        check(&err)

    def predict(self, users, items):
        return _predict(&self.model, pymf_bpmf_gibbs_params(self.g), users, items,
                        self.n_threads)
