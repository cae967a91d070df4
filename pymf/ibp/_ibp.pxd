# core/include/pymf/ibp.h: IBP linear-Gaussian latent features, collapsed Gibbs and the
# hybrid parallel sampler.
from libc.stdint cimport int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_status


cdef extern from "pymf/ibp.h" nogil:
    ctypedef struct pymf_ibp_prior:
        double alpha_shape, alpha_rate, sx_shape, sx_scale, sa_shape, sa_scale
        int sample_alpha, sample_sigma_x, sample_sigma_a

    ctypedef struct pymf_ibp_config:
        int collapsed, n_processes, sub_iterations
        int64_t warm_start
        uint64_t seed
        int n_threads, first_process, n_local
        int split_merge, split_merge_flaw
        int max_features

    ctypedef struct pymf_ibp_data:
        int64_t n_total, row_offset, n_rows
        int n_cols
        const double *X
        const unsigned char *observed

    ctypedef struct pymf_ibp:
        pass

    pymf_ibp *pymf_ibp_create(const pymf_ibp_data *data, const pymf_ibp_prior *prior,
                              const pymf_ibp_config *config, pymf_error *err)
    void pymf_ibp_destroy(pymf_ibp *s)
    void pymf_ibp_set_threads(pymf_ibp *s, int n_threads)
    pymf_status pymf_ibp_set_state(pymf_ibp *s, int K, const double *Z, const double *A,
                                   const double *pi, const double *hyper,
                                   const double *Y_missing, int64_t iteration, pymf_error *err)
    int pymf_ibp_n_features(const pymf_ibp *s)
    int64_t pymf_ibp_n_missing(const pymf_ibp *s)
    int64_t pymf_ibp_iteration(const pymf_ibp *s)
    void pymf_ibp_get_state(const pymf_ibp *s, double *Z, double *A, double *pi, double *hyper,
                            double *Y_missing)
    pymf_status pymf_ibp_run(pymf_ibp *s, int64_t n_iterations, pymf_error *err)
    void pymf_ibp_abort(pymf_ibp *s)
    int pymf_ibp_active_process(const pymf_ibp *s)
    pymf_status pymf_ibp_begin(pymf_ibp *s, pymf_error *err)
    pymf_status pymf_ibp_local_sweeps(pymf_ibp *s, pymf_error *err)
    void pymf_ibp_local_counts(const pymf_ibp *s, double *counts_local)
    pymf_status pymf_ibp_tail_sweeps(pymf_ibp *s, const double *counts_all, pymf_error *err)
    void pymf_ibp_new_features(const pymf_ibp *s, int *counts_local)
    int64_t pymf_ibp_stats_size(int K, int D)
    pymf_status pymf_ibp_check_new_features(pymf_ibp *s, const int *new_features_all,
                                            pymf_error *err)
    pymf_status pymf_ibp_local_stats(pymf_ibp *s, const int *new_features_all,
                                     double *stats_local, pymf_error *err)
    pymf_status pymf_ibp_master(pymf_ibp *s, const double *stats_summed, pymf_error *err)
    pymf_status pymf_ibp_split_merge(pymf_ibp *s, const double *Z_all, const double *Y_all,
                                     pymf_error *err)
    void pymf_ibp_split_merge_counts(const pymf_ibp *s, int64_t *counts)
    void pymf_ibp_set_split_merge_counts(pymf_ibp *s, const int64_t *counts)
    int pymf_ibp_collapsed_block(const pymf_ibp *s, double *M, double *logdet)
    pymf_status pymf_ibp_rank_one(double *M, int K, const double *z, int sign,
                                  double *logdet_inv, pymf_error *err)
    pymf_status pymf_ibp_collapsed_loglik(const double *Z, const double *Y, int64_t N, int K,
                                          int D, double sigma_x, double sigma_a, double *out,
                                          pymf_error *err)
