# core/include/pymf/sibm.h: stochastic variational inference for binary matrices (SIBM)
# and batch VB.
from libc.stdint cimport int64_t, uint32_t, uint64_t

from pymf._core cimport pymf_error, pymf_status


cdef extern from "pymf/sibm.h" nogil:
    uint32_t PYMF_STREAM_SIBM_DRAW
    uint32_t PYMF_STREAM_SIBM_ELBO

    ctypedef enum pymf_sibm_sampling:
        PYMF_SIBM_UNIFORM
        PYMF_SIBM_BALANCED
        PYMF_SIBM_BIASED

    ctypedef struct pymf_sibm_matrix:
        int64_t n_rows, n_cols, n_ones
        const int64_t *row_ptr
        const int64_t *col_idx

    ctypedef struct pymf_sibm_prior:
        int rank
        double mean_u, var_u, mean_v, var_v, mean_z, var_z

    ctypedef struct pymf_sibm_config:
        pymf_sibm_sampling sampling
        int64_t batch_size, batch_start, batch_min, batch_max
        double theta_delta, tau0, kappa
        uint64_t seed
        int n_threads

    ctypedef struct pymf_sibm_factors:
        double *u1
        double *u2
        double *v1
        double *v2

    ctypedef struct pymf_sibm:
        pass

    pymf_sibm *pymf_sibm_create(const pymf_sibm_matrix *matrix, const pymf_sibm_prior *prior,
                                const pymf_sibm_config *config,
                                const pymf_sibm_factors *factors, pymf_error *err)
    void pymf_sibm_destroy(pymf_sibm *s)
    void pymf_sibm_release_scratch(pymf_sibm *s)
    pymf_status pymf_sibm_set_state(pymf_sibm *s, const double *u1, const double *u2,
                                    const double *v1, const double *v2, const double *z,
                                    const int64_t *row_updates, const int64_t *col_updates,
                                    int64_t t, int64_t batch, pymf_error *err)
    void pymf_sibm_get_state(const pymf_sibm *s, double *u1, double *u2, double *v1,
                             double *v2, double *z, int64_t *row_updates,
                             int64_t *col_updates, int64_t *t, int64_t *batch)
    pymf_status pymf_sibm_run(pymf_sibm *s, int64_t n_updates, int64_t *batch_sizes,
                              pymf_error *err)
    pymf_status pymf_sibm_draw(const pymf_sibm *s, uint32_t stream, int64_t t, int64_t n,
                               int64_t *rows, int64_t *cols, double *x, double *w_row,
                               double *w_col, double *w_z, pymf_error *err)
    pymf_status pymf_sibm_update_entries(pymf_sibm *s, int64_t n, const int64_t *rows,
                                         const int64_t *cols, const double *x,
                                         const double *w_row, const double *w_col,
                                         const double *w_z, double rho, pymf_error *err)
    pymf_status pymf_sibm_batch_sweep(pymf_sibm *s, int64_t n_sweeps, pymf_error *err)
    pymf_status pymf_sibm_elbo(const pymf_sibm *s, double *elbo, pymf_error *err)
    pymf_status pymf_sibm_elbo_estimate(const pymf_sibm *s, int64_t t, int64_t n,
                                        double *elbo, pymf_error *err)
    void pymf_sibm_entry_moments(const pymf_sibm *s, int64_t n, const int64_t *rows,
                                 const int64_t *cols, const double *x, double *mean,
                                 double *var, double *f)
    double pymf_sibm_kl(const pymf_sibm *s)
