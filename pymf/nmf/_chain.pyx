"""What every C chain binding shares (Langevin samplers, Gibbs, SGD/DSGD): the state in
grid order, running iterations and the log-likelihood. A family's binding subclasses
FactorChain and implements the four c_* methods with its C functions."""
import numpy as np

cimport cython

from libc.stdint cimport int64_t

from pymf._core cimport PYMF_EINVAL, pymf_error, pymf_error_clear, pymf_status
from pymf._status cimport check


_PRIORS = {"exponential": PYMF_PRIOR_EXPONENTIAL, "gaussian": PYMF_PRIOR_GAUSSIAN}


cdef pymf_nmf_model nmf_model(int rank, double beta, double phi, str prior, double lam_w,
                              double lam_h) except *:
    """The C description of a Tweedie NMF model (validated again by the C core)."""
    cdef pymf_nmf_model model
    if prior not in _PRIORS:
        raise ValueError(f"prior must be one of {sorted(_PRIORS)}, got {prior!r}")
    model.likelihood.rank = rank
    model.likelihood.beta = beta
    model.likelihood.phi = phi
    model.prior = _PRIORS[prior]
    model.lam_w = lam_w
    model.lam_h = lam_h
    return model


# The C object points into `data`: the cycle collector must not clear that reference
# before __dealloc__ has destroyed the C object.
@cython.no_gc_clear
cdef class FactorChain:
    cdef pymf_status c_set_state(self, const double *W, const double *Ht, int64_t t,
                                 pymf_error *err) noexcept nogil:
        return PYMF_EINVAL

    cdef void c_get_state(self, double *W, double *Ht, int64_t *t) noexcept nogil:
        pass

    cdef pymf_status c_run(self, int64_t n, const double *step_sizes, pymf_error *err) noexcept nogil:
        return PYMF_EINVAL

    cdef pymf_status c_loglik(self, double *out, pymf_error *err) noexcept nogil:
        return PYMF_EINVAL

    def set_state(self, const double[:, ::1] W, const double[:, ::1] Ht, int64_t t=0):
        """W (I x K) and Ht (J x K) in grid order; t = iterations already done."""
        cdef pymf_error err
        if W.shape[0] != self.data.grid.n_rows or W.shape[1] != self.rank:
            raise ValueError(f"W must be {self.data.grid.n_rows} x {self.rank}")
        if Ht.shape[0] != self.data.grid.n_cols or Ht.shape[1] != self.rank:
            raise ValueError(f"Ht must be {self.data.grid.n_cols} x {self.rank}")
        pymf_error_clear(&err)
        self.c_set_state(&W[0, 0], &Ht[0, 0], t, &err)
        check(&err)

    def get_state(self):
        """(W, Ht, t): copies of the current state in grid order."""
        W = np.empty((self.data.grid.n_rows, self.rank))
        Ht = np.empty((self.data.grid.n_cols, self.rank))
        cdef double[:, ::1] w = W
        cdef double[:, ::1] h = Ht
        cdef int64_t t = 0
        self.c_get_state(&w[0, 0], &h[0, 0], &t)
        return W, Ht, int(t)

    @property
    def iteration(self):
        cdef int64_t t = 0
        self.c_get_state(NULL, NULL, &t)
        return int(t)

    def run(self, const double[::1] step_sizes):
        """Runs len(step_sizes) iterations; a non-finite update raises DivergenceError and
        keeps the last finite state."""
        cdef pymf_error err
        cdef int64_t n = step_sizes.shape[0]
        if n == 0:
            return
        pymf_error_clear(&err)
        with nogil:
            self.c_run(n, &step_sizes[0], &err)
        check(&err)

    def loglik(self):
        """-sum d_beta / phi over the observed entries at the current state."""
        cdef pymf_error err
        cdef double out = 0.0
        pymf_error_clear(&err)
        with nogil:
            self.c_loglik(&out, &err)
        check(&err)
        return out
