# core/include/pymf/alphamf.h: alpha-stable matrix factorisation on the HAMCMC / PSGLD chain.
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_status
from pymf.hamcmc._hamcmc_mf cimport pymf_hamcmc_mf, pymf_hamcmc_mf_config
from pymf.nmf._blocks cimport pymf_blocked_data


cdef extern from "pymf/alphamf.h" nogil:
    ctypedef struct pymf_alphamf_model:
        int rank
        double alpha
        double a_w
        double b_w
        double a_h
        double b_h
        int tamed

    ctypedef struct pymf_alphamf:
        pass

    pymf_alphamf *pymf_alphamf_create(const pymf_alphamf_model *model,
                                      const pymf_blocked_data *data,
                                      const pymf_hamcmc_mf_config *config, int update_phi,
                                      pymf_error *err)
    void pymf_alphamf_destroy(pymf_alphamf *s)
    pymf_hamcmc_mf *pymf_alphamf_chain(pymf_alphamf *s)
    pymf_status pymf_alphamf_start(pymf_alphamf *s, const double *W, const double *Ht,
                                   pymf_error *err)
    pymf_status pymf_alphamf_run(pymf_alphamf *s, int64_t n_iter, const double *eps,
                                 pymf_error *err)
    pymf_status pymf_alphamf_phi_step(pymf_alphamf *s, int64_t t, int part, pymf_error *err)
    int64_t pymf_alphamf_n_phi(const pymf_alphamf *s)
    int pymf_alphamf_phi_copies(const pymf_alphamf *s)
    void pymf_alphamf_get_phi(const pymf_alphamf *s, double *out)
    pymf_status pymf_alphamf_set_phi(pymf_alphamf *s, const double *inp, pymf_error *err)
    void pymf_alphamf_counts(const pymf_alphamf *s, int64_t *accepted, int64_t *proposed)
    pymf_status pymf_alphamf_set_counts(pymf_alphamf *s, int64_t accepted, int64_t proposed,
                                        pymf_error *err)
    pymf_status pymf_alphamf_loglik(const pymf_alphamf *s, double *out, pymf_error *err)
    pymf_status pymf_alphamf_draw_phi(double alpha, uint64_t seed, uint64_t t, int64_t n,
                                      double *out, pymf_error *err)
