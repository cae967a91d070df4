# core/include/pymf/nmf_model.h (the Tweedie NMF model every NMF chain takes) and FactorChain,
# the base of the NMF chain bindings.
from libc.stdint cimport int64_t

from pymf._core cimport pymf_error, pymf_status
from pymf.nmf._blocks cimport BlockedData
from pymf.nmf._tweedie cimport pymf_tweedie


cdef extern from "pymf/nmf_model.h" nogil:
    ctypedef enum pymf_prior:
        PYMF_PRIOR_EXPONENTIAL
        PYMF_PRIOR_GAUSSIAN

    ctypedef struct pymf_nmf_model:
        pymf_tweedie likelihood
        pymf_prior prior
        double lam_w
        double lam_h


cdef class FactorChain:
    cdef readonly BlockedData data
    cdef readonly int rank
    cdef pymf_status c_set_state(self, const double *W, const double *Ht, int64_t t,
                                 pymf_error *err) noexcept nogil
    cdef void c_get_state(self, double *W, double *Ht, int64_t *t) noexcept nogil
    cdef pymf_status c_run(self, int64_t n, const double *step_sizes, pymf_error *err) noexcept nogil
    cdef pymf_status c_loglik(self, double *out, pymf_error *err) noexcept nogil


cdef pymf_nmf_model nmf_model(int rank, double beta, double phi, str prior, double lam_w,
                              double lam_h) except *
