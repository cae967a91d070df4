"""Bindings of core/src/gibbs_nmf.c: the Gamma-Poisson Gibbs sampler for Poisson NMF."""
import numpy as np

from libc.stdint cimport int64_t, uint64_t

from pymf._blocks cimport BlockedData
from pymf._core cimport (PYMF_PRIOR_EXPONENTIAL, pymf_error, pymf_error_clear, pymf_gibbs_config,
                         pymf_gibbs_nmf, pymf_gibbs_nmf_create, pymf_gibbs_nmf_destroy,
                         pymf_gibbs_nmf_get_state, pymf_gibbs_nmf_loglik, pymf_gibbs_nmf_run,
                         pymf_gibbs_nmf_set_state, pymf_nmf_model)
from pymf._status cimport check


cdef class GibbsChain:
    """A Poisson-NMF Gibbs chain over a BlockedData (grid order). run(steps) runs len(steps)
    sweeps: the step sizes the driver passes are not used (Gibbs has none)."""
    cdef pymf_gibbs_nmf *chain
    cdef readonly BlockedData data
    cdef readonly int rank

    def __cinit__(self, BlockedData data, int rank, double lam_w, double lam_h, uint64_t seed,
                  int n_threads=0, double beta=1.0, double phi=1.0, str prior="exponential"):
        cdef pymf_nmf_model model
        cdef pymf_gibbs_config config
        cdef pymf_error err
        self.chain = NULL
        self.data = data
        self.rank = rank
        if prior != "exponential":
            raise ValueError("the Gibbs sampler is for Poisson NMF: beta=1, phi=1 and "
                             "exponential priors")
        model.likelihood.rank = rank
        model.likelihood.beta = beta
        model.likelihood.phi = phi
        model.prior = PYMF_PRIOR_EXPONENTIAL
        model.lam_w = lam_w
        model.lam_h = lam_h
        config.seed = seed
        config.n_threads = n_threads
        pymf_error_clear(&err)
        self.chain = pymf_gibbs_nmf_create(&model, &data.data, &config, &err)
        if self.chain == NULL:
            check(&err)
            raise MemoryError("could not create the Gibbs sampler")

    def __dealloc__(self):
        pymf_gibbs_nmf_destroy(self.chain)

    def set_state(self, const double[:, ::1] W, const double[:, ::1] Ht, int64_t t=0):
        cdef pymf_error err
        if W.shape[0] != self.data.grid.n_rows or W.shape[1] != self.rank:
            raise ValueError(f"W must be {self.data.grid.n_rows} x {self.rank}")
        if Ht.shape[0] != self.data.grid.n_cols or Ht.shape[1] != self.rank:
            raise ValueError(f"Ht must be {self.data.grid.n_cols} x {self.rank}")
        pymf_error_clear(&err)
        pymf_gibbs_nmf_set_state(self.chain, &W[0, 0], &Ht[0, 0], t, &err)
        check(&err)

    def get_state(self):
        W = np.empty((self.data.grid.n_rows, self.rank))
        Ht = np.empty((self.data.grid.n_cols, self.rank))
        cdef double[:, ::1] w = W
        cdef double[:, ::1] h = Ht
        cdef int64_t t = 0
        pymf_gibbs_nmf_get_state(self.chain, &w[0, 0], &h[0, 0], &t)
        return W, Ht, int(t)

    @property
    def iteration(self):
        cdef int64_t t = 0
        pymf_gibbs_nmf_get_state(self.chain, NULL, NULL, &t)
        return int(t)

    def run(self, step_sizes):
        cdef pymf_error err
        cdef int64_t n = len(step_sizes)
        if n == 0:
            return
        pymf_error_clear(&err)
        with nogil:
            pymf_gibbs_nmf_run(self.chain, n, &err)
        check(&err)

    def loglik(self):
        cdef pymf_error err
        cdef double out = 0.0
        pymf_error_clear(&err)
        with nogil:
            pymf_gibbs_nmf_loglik(self.chain, &out, &err)
        check(&err)
        return out
