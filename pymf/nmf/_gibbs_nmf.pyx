"""Bindings of core/src/gibbs_nmf.c: the Gamma-Poisson Gibbs sampler for Poisson NMF."""
import numpy as np

cimport cython

from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_error_clear, pymf_status
from pymf._status cimport check
from pymf.nmf._blocks cimport BlockedData
from pymf.nmf._chain cimport PYMF_PRIOR_EXPONENTIAL, FactorChain, pymf_nmf_model


# The C object points into `data`: the cycle collector must not clear that reference
# before __dealloc__ has destroyed the C object.
@cython.no_gc_clear
cdef class GibbsChain(FactorChain):
    """A Poisson-NMF Gibbs chain over a BlockedData (grid order). run(steps) runs len(steps)
    sweeps: the step sizes the driver passes are not used (Gibbs has none)."""
    cdef pymf_gibbs_nmf *chain

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

    cdef pymf_status c_set_state(self, const double *W, const double *Ht, int64_t t,
                                 pymf_error *err) noexcept nogil:
        return pymf_gibbs_nmf_set_state(self.chain, W, Ht, t, err)

    cdef void c_get_state(self, double *W, double *Ht, int64_t *t) noexcept nogil:
        pymf_gibbs_nmf_get_state(self.chain, W, Ht, t)

    cdef pymf_status c_run(self, int64_t n, const double *step_sizes, pymf_error *err) noexcept nogil:
        return pymf_gibbs_nmf_run(self.chain, n, err)

    cdef pymf_status c_loglik(self, double *out, pymf_error *err) noexcept nogil:
        return pymf_gibbs_nmf_loglik(self.chain, out, err)

    def set_threads(self, int n_threads):
        """OpenMP threads for later sweeps (<= 0: the default); the chain does not change."""
        pymf_gibbs_nmf_set_threads(self.chain, n_threads)
