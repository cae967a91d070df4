from libc.stdint cimport int64_t

from pymf._blocks cimport BlockedData
from pymf._core cimport pymf_error, pymf_nmf_model, pymf_status


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
