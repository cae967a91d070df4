# core/include/pymf/tweedie.h: the Tweedie / beta-divergence likelihood.
from libc.stdint cimport int64_t

from pymf._core cimport pymf_error, pymf_status
from pymf.nmf._blocks cimport pymf_blocked_data


cdef extern from "pymf/tweedie.h" nogil:
    double PYMF_MU_FLOOR
    double pymf_beta_divergence(double v, double mu, double beta)
    double pymf_tweedie_dlogp_dmu(double v, double mu, double beta, double inv_phi)

    ctypedef struct pymf_tweedie:
        int rank
        double beta
        double phi

    pymf_status pymf_tweedie_check(const pymf_tweedie *lik, pymf_error *err)
    pymf_status pymf_tweedie_loglik(const pymf_tweedie *lik, const pymf_blocked_data *data,
                                    const double *W, const double *Ht, int n_threads,
                                    double *out, pymf_error *err)
    pymf_status pymf_tweedie_grad(const pymf_tweedie *lik, const pymf_blocked_data *data,
                                  const double *W, const double *Ht, int n_threads, double *gW,
                                  double *gHt, pymf_error *err)
    void pymf_predict_entries(const double *W, const double *Ht, int rank, int64_t n,
                              const int64_t *rows, const int64_t *cols, double *out)
