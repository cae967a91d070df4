# core/include/pymf/bpmf.h (BPMF by DSGLD) and bpmf_gibbs.h (its Gibbs baseline).
from libc.stdint cimport int32_t, int64_t, uint64_t

from pymf._core cimport pymf_error, pymf_status


cdef extern from "pymf/bpmf.h" nogil:
    ctypedef struct pymf_bpmf_model:
        int rank
        double tau
        double mean_rating
        int use_bias
        double alpha0
        double beta0
        int sample_tau

    ctypedef struct pymf_bpmf_data:
        int64_t n_users
        int64_t n_items
        int64_t nnz
        int n_row_blocks
        int n_col_blocks
        const int64_t *row_start
        const int64_t *col_start
        const int64_t *block_ptr
        const int32_t *users
        const int32_t *items
        const double *ratings

    ctypedef struct pymf_bpmf_params:
        double *U
        double *V
        double *a
        double *b
        double *lambdas

    ctypedef struct pymf_dsgld_scratch:
        pass

    ctypedef struct pymf_dsgld_block:
        int block_id
        int64_t n_entries
        const int32_t *users
        const int32_t *items
        const double *ratings
        int64_t user_offset
        int64_t n_stripe_users
        int64_t item_offset
        int64_t n_stripe_items
        const double *h_user
        const double *h_item
        double visit_rate
        const double *step_user
        const double *step_item

    ctypedef struct pymf_dsgld_stepper:
        uint64_t noise_seed
        int64_t batch_size
        int add_noise
        int noise_correction
        double tau_reference

    ctypedef struct pymf_dsgld_config:
        int n_chains
        int64_t batch_size
        int round_length
        int hyper_every
        int add_noise
        int noise_correction
        int n_threads

    ctypedef struct pymf_dsgld:
        pass

    pymf_status pymf_bpmf_check(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                                pymf_error *err)
    int pymf_bpmf_n_groups(const pymf_bpmf_data *d)
    int pymf_bpmf_group_size(const pymf_bpmf_data *d)
    int pymf_bpmf_group_block(const pymf_bpmf_data *d, int group, int slot)
    int pymf_bpmf_chain_group(const pymf_bpmf_data *d, int chain, int64_t round)
    pymf_status pymf_bpmf_bias_correctors(const pymf_bpmf_data *d, int64_t m, double *h_user,
                                          double *h_item, pymf_error *err)
    void pymf_bpmf_predict(const pymf_bpmf_model *model, const pymf_bpmf_params *p, int64_t n,
                           const int32_t *users, const int32_t *items, double *out,
                           int n_threads)
    int pymf_bpmf_row_gram(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                           const pymf_bpmf_params *p, double *H_user, double *H_item,
                           int n_threads)
    int pymf_bpmf_row_correlations(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                   const pymf_bpmf_params *p, double *diag_user,
                                   double *R_user, double *diag_item, double *R_item,
                                   int n_threads)
    int pymf_bpmf_row_curvatures(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                 const pymf_bpmf_params *p, int n_sets, double *diag_user,
                                 double *rho_user, double *diag_item, double *rho_item,
                                 int n_threads)
    double pymf_bpmf_sq_error(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                              const pymf_bpmf_params *p, int n_threads)
    double pymf_bpmf_log_posterior(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                   const pymf_bpmf_params *p, double *gU, double *gV, double *ga,
                                   double *gb)
    void pymf_bpmf_log_posterior_gradient(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                          const pymf_bpmf_params *p, double *gU, double *gV,
                                          double *ga, double *gb, int n_threads) nogil
    pymf_dsgld_scratch *pymf_dsgld_scratch_create(int rank, int64_t max_stripe_users,
                                                  int64_t max_stripe_items, int64_t batch_size)
    void pymf_dsgld_scratch_destroy(pymf_dsgld_scratch *s)
    pymf_status pymf_dsgld_block_steps(const pymf_bpmf_model *model, const pymf_dsgld_block *blk,
                                       const pymf_dsgld_stepper *st, double *U, double *V,
                                       double *a, double *b, const double *lambdas,
                                       int64_t first_step, int n_steps, double eps,
                                       pymf_dsgld_scratch *scratch, pymf_error *err)
    pymf_status pymf_dsgld_block_gradient(const pymf_bpmf_model *model,
                                          const pymf_dsgld_block *blk,
                                          const pymf_dsgld_stepper *st, const double *U,
                                          const double *V, const double *a, const double *b,
                                          const double *lambdas, int64_t step,
                                          pymf_dsgld_scratch *scratch, double *gU, double *gV,
                                          double *ga, double *gb, pymf_error *err)
    pymf_dsgld *pymf_dsgld_create(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                                  const pymf_dsgld_config *config, const uint64_t *noise_seeds,
                                  const uint64_t *hyper_seeds, pymf_error *err)
    void pymf_dsgld_destroy(pymf_dsgld *d)
    void pymf_dsgld_set_threads(pymf_dsgld *d, int n_threads)
    pymf_status pymf_dsgld_sq_errors(pymf_dsgld *d, int first, int n_chains, double *out,
                                     pymf_error *err) nogil
    pymf_status pymf_dsgld_set_state(pymf_dsgld *d, int chain, const double *U, const double *V,
                                     const double *a, const double *b, const double *lambdas,
                                     int64_t round, pymf_error *err)
    void pymf_dsgld_get_state(const pymf_dsgld *d, int chain, double *U, double *V, double *a,
                              double *b, double *lambdas, int64_t *round)
    pymf_status pymf_dsgld_set_row_steps(pymf_dsgld *d, const double *step_user,
                                         const double *step_item, const double *noise_user,
                                         const double *noise_item, int64_t from_round,
                                         pymf_error *err)
    pymf_status pymf_dsgld_set_tau_reference(pymf_dsgld *d, const double *tau_reference,
                                             pymf_error *err)
    pymf_status pymf_dsgld_run(pymf_dsgld *d, int64_t n_rounds, const double *eps,
                               pymf_error *err)
    pymf_status pymf_dsgld_hyper_step(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                                      pymf_bpmf_params *p, const double *h_user,
                                      const double *h_item, uint64_t hyper_seed, int64_t round,
                                      int n_threads, pymf_error *err)
    const pymf_bpmf_params *pymf_dsgld_params(const pymf_dsgld *d, int chain)


cdef extern from "pymf/bpmf_gibbs.h" nogil:
    int PYMF_BPMF_HYPER_GAMMA
    int PYMF_BPMF_HYPER_WISHART

    ctypedef struct pymf_bpmf_gibbs_config:
        int hyperprior
        double nw_beta0
        double nw_nu0
        double nw_w0
        uint64_t noise_seed
        uint64_t hyper_seed
        int n_threads

    ctypedef struct pymf_bpmf_rows:
        int64_t n_users
        int64_t n_items
        int64_t nnz
        const int64_t *user_ptr
        const int32_t *user_items
        const double *user_ratings
        const int64_t *item_ptr
        const int32_t *item_users
        const double *item_ratings

    ctypedef struct pymf_bpmf_gibbs:
        pass

    int64_t pymf_bpmf_gibbs_hyper_size(int rank, int hyperprior)
    pymf_bpmf_gibbs *pymf_bpmf_gibbs_create(const pymf_bpmf_model *model,
                                            const pymf_bpmf_rows *rows,
                                            const pymf_bpmf_gibbs_config *config,
                                            pymf_error *err)
    void pymf_bpmf_gibbs_destroy(pymf_bpmf_gibbs *g)
    void pymf_bpmf_gibbs_set_threads(pymf_bpmf_gibbs *g, int n_threads)
    pymf_status pymf_bpmf_gibbs_set_state(pymf_bpmf_gibbs *g, const double *U, const double *V,
                                          const double *a, const double *b, const double *hyper,
                                          int64_t sweep, pymf_error *err)
    void pymf_bpmf_gibbs_get_state(const pymf_bpmf_gibbs *g, double *U, double *V, double *a,
                                   double *b, double *hyper, int64_t *sweep)
    pymf_status pymf_bpmf_gibbs_run(pymf_bpmf_gibbs *g, int64_t n_sweeps, pymf_error *err)
    const pymf_bpmf_params *pymf_bpmf_gibbs_params(const pymf_bpmf_gibbs *g)
