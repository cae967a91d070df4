"""Bindings of core/src/sgd.c: SGD and DSGD (MAP optimisation baselines)."""
import numpy as np

cimport cython

from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_error_clear, pymf_status
from pymf._status cimport check
from pymf.nmf._blocks cimport PYMF_PARTS_CYCLIC, PYMF_PARTS_RANDOM, BlockedData
from pymf.nmf._chain cimport (PYMF_PRIOR_EXPONENTIAL, PYMF_PRIOR_GAUSSIAN, FactorChain, nmf_model,
                              pymf_nmf_model)

_KINDS = {"sgd": PYMF_OPT_SGD, "dsgd": PYMF_OPT_DSGD}
_ORDERS = {"cyclic": PYMF_PARTS_CYCLIC, "random": PYMF_PARTS_RANDOM}


# The C object points into `data`: the cycle collector must not clear that reference
# before __dealloc__ has destroyed the C object.
@cython.no_gc_clear
cdef class Optimiser(FactorChain):
    """One SGD / DSGD run over a BlockedData (grid order throughout)."""
    cdef pymf_sgd *opt

    def __cinit__(self, BlockedData data, str kind, int rank, double beta, double phi,
                  str prior, double lam_w, double lam_h, uint64_t schedule_seed,
                  int64_t batch_size=0, str part_order="cyclic", int n_threads=0):
        cdef pymf_nmf_model model
        cdef pymf_sgd_config config
        cdef pymf_error err
        self.opt = NULL
        self.data = data
        self.rank = rank
        model = nmf_model(rank, beta, phi, prior, lam_w, lam_h)
        config.kind = _KINDS[kind]
        config.batch_size = batch_size
        config.part_order = _ORDERS[part_order]
        config.schedule_seed = schedule_seed
        config.n_threads = n_threads
        pymf_error_clear(&err)
        self.opt = pymf_sgd_create(&model, &data.data, &config, &err)
        if self.opt == NULL:
            check(&err)
            raise MemoryError("could not create the optimiser")

    def __dealloc__(self):
        pymf_sgd_destroy(self.opt)

    cdef pymf_status c_set_state(self, const double *W, const double *Ht, int64_t t,
                                 pymf_error *err) noexcept nogil:
        return pymf_sgd_set_state(self.opt, W, Ht, t, err)

    cdef void c_get_state(self, double *W, double *Ht, int64_t *t) noexcept nogil:
        pymf_sgd_get_state(self.opt, W, Ht, t)

    cdef pymf_status c_run(self, int64_t n, const double *step_sizes, pymf_error *err) noexcept nogil:
        return pymf_sgd_run(self.opt, n, step_sizes, err)

    cdef pymf_status c_loglik(self, double *out, pymf_error *err) noexcept nogil:
        return pymf_sgd_loglik(self.opt, out, err)





