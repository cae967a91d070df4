# core/include/pymf/linear_gaussian.h (the model), sgmcmc.h (HAMCMC and its baselines) and
# lbfgs.h (the L-BFGS products).
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_status


cdef extern from "pymf/linear_gaussian.h" nogil:
    ctypedef struct pymf_linear_gaussian:
        int64_t n_data
        int dim
        const double *A
        const double *x
        double noise_var
        double prior_var

    void pymf_lg_grad_potential(const pymf_linear_gaussian *m, const double *theta,
                                const int64_t *idx, int64_t n_idx, double *grad,
                                double *mean_lik)


cdef extern from "pymf/sgmcmc.h" nogil:
    ctypedef enum pymf_sgmcmc_kind:
        PYMF_SGMCMC_SGLD
        PYMF_SGMCMC_PSGLD
        PYMF_SGMCMC_SGRLD
        PYMF_SGMCMC_HAMCMC

    ctypedef struct pymf_sgmcmc_config:
        pymf_sgmcmc_kind kind
        int64_t batch_size
        uint64_t seed
        int memory
        double gamma
        int scaled_gamma
        double lambda_ "lambda"
        double alpha
        const double *metric_chol

    ctypedef struct pymf_sgmcmc:
        pass

    pymf_sgmcmc *pymf_sgmcmc_create(const pymf_linear_gaussian *model,
                                    const pymf_sgmcmc_config *config, pymf_error *err)
    void pymf_sgmcmc_destroy(pymf_sgmcmc *s)
    pymf_status pymf_sgmcmc_start(pymf_sgmcmc *s, const double *theta, pymf_error *err)
    pymf_status pymf_sgmcmc_run(pymf_sgmcmc *s, int64_t n_iter, const double *eps,
                                double *samples, pymf_error *err)
    void pymf_sgmcmc_state(const pymf_sgmcmc *s, double *theta, int64_t *t)
    int64_t pymf_sgmcmc_skipped_pairs(const pymf_sgmcmc *s)

    ctypedef struct pymf_sgmcmc_saved:
        int dim
        int window_rows
        int pair_rows
        int64_t t
        int64_t n_pairs
        int64_t skipped_pairs
        double *theta
        double *V
        double *pair_s
        double *pair_y

    void pymf_sgmcmc_saved_shape(const pymf_sgmcmc *s, pymf_sgmcmc_saved *saved)
    pymf_status pymf_sgmcmc_export(const pymf_sgmcmc *s, pymf_sgmcmc_saved *saved,
                                   pymf_error *err)
    pymf_status pymf_sgmcmc_import(pymf_sgmcmc *s, const pymf_sgmcmc_saved *saved,
                                   pymf_error *err)


cdef extern from "pymf/lbfgs.h" nogil:
    ctypedef struct pymf_lbfgs_inner:
        pass

    int pymf_lbfgs_apply(int dim, int n_pairs, const double *S, const double *Y, double gamma,
                         const double *g, double *out, double *work,
                         const pymf_lbfgs_inner *inner)
    int pymf_lbfgs_sqrt_apply(int dim, int n_pairs, const double *S, const double *Y,
                              double gamma, const double *z, double *out, double *work,
                              const pymf_lbfgs_inner *inner)
    double pymf_lbfgs_scaled_gamma(int dim, int n_pairs, const double *S, const double *Y,
                                   double fallback, const pymf_lbfgs_inner *inner)
    int pymf_lbfgs_gram_products(int m, const double *gram, double gamma, int scaled_gamma,
                                 double *step, double *noise, int *usable, double *gamma_used,
                                 double *work)
    int pymf_lbfgs_gram_work(int m)
