# core/include/pymf/gibbs_nmf.h: the Gamma-Poisson Gibbs sampler.
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_status
from pymf.nmf._blocks cimport pymf_blocked_data
from pymf.nmf._chain cimport pymf_nmf_model


cdef extern from "pymf/gibbs_nmf.h" nogil:
    ctypedef struct pymf_gibbs_config:
        uint64_t seed
        int n_threads

    ctypedef struct pymf_gibbs_nmf:
        pass

    pymf_gibbs_nmf *pymf_gibbs_nmf_create(const pymf_nmf_model *model,
                                          const pymf_blocked_data *data,
                                          const pymf_gibbs_config *config, pymf_error *err)
    void pymf_gibbs_nmf_destroy(pymf_gibbs_nmf *g)
    pymf_status pymf_gibbs_nmf_set_state(pymf_gibbs_nmf *g, const double *W, const double *Ht,
                                         int64_t t, pymf_error *err)
    void pymf_gibbs_nmf_get_state(const pymf_gibbs_nmf *g, double *W, double *Ht, int64_t *t)
    void pymf_gibbs_nmf_set_threads(pymf_gibbs_nmf *g, int n_threads)
    pymf_status pymf_gibbs_nmf_run(pymf_gibbs_nmf *g, int64_t n_sweeps, pymf_error *err)
    pymf_status pymf_gibbs_nmf_loglik(const pymf_gibbs_nmf *g, double *out, pymf_error *err)
