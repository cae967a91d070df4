# Declarations of the C core's shared headers (core/include/pymf/common.h, philox.h, rng.h)
# for the Cython bindings: status codes and errors, Philox noise, GSL stream seeds. Each
# family's bindings declare their own headers in their own .pxd (pymf/nmf/_*.pxd,
# pymf/bpmf/_bpmf.pxd, pymf/hamcmc/_hamcmc.pxd).
from libc.stdint cimport int64_t, uint32_t, uint64_t


cdef extern from "pymf/common.h" nogil:
    ctypedef enum pymf_status:
        PYMF_OK
        PYMF_EINVAL
        PYMF_ENOMEM
        PYMF_EDIVERGED
        PYMF_ENUMERIC

    ctypedef struct pymf_error:
        pymf_status status
        int64_t iteration
        char message[256]

    void pymf_error_clear(pymf_error *err)
    int pymf_default_threads()
    void pymf_set_default_threads(int n_threads)
    int pymf_openmp_enabled()
    const char *pymf_gsl_version()


cdef extern from "pymf/philox.h" nogil:
    void pymf_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2], uint32_t out[4])
    void pymf_noise_row(uint64_t seed, uint32_t stream, uint64_t t, uint32_t row, int rank,
                        double *out)
    void pymf_noise_rows(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row,
                         uint32_t n_rows, int rank, double *out)
    uint32_t PYMF_STREAM_W
    uint32_t PYMF_STREAM_H


cdef extern from "pymf/rng.h" nogil:
    unsigned long pymf_stream_seed(uint64_t stream_seed, uint64_t t)
