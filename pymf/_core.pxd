# Declarations of the C core (core/include/pymf/*.h) for the Cython bindings.
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t


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


cdef extern from "pymf/blocks.h" nogil:
    ctypedef struct pymf_grid:
        int64_t n_rows
        int64_t n_cols
        int n_blocks
        int64_t *row_start
        int64_t *col_start
        int64_t *row_of
        int64_t *col_of
        int64_t *row_pos
        int64_t *col_pos

    ctypedef struct pymf_blocked_data:
        const pymf_grid *grid
        int is_dense
        double *V
        int64_t nnz
        int32_t *rows
        int32_t *cols
        double *vals
        int64_t *block_ptr
        int64_t n_observed

    pymf_status pymf_grid_init(pymf_grid *grid, int64_t n_rows, int64_t n_cols, int n_blocks,
                               int permute, unsigned long seed, pymf_error *err)
    void pymf_grid_free(pymf_grid *grid)
    pymf_status pymf_blocked_from_dense(pymf_blocked_data *data, const pymf_grid *grid,
                                        const double *V, pymf_error *err)
    pymf_status pymf_blocked_from_sparse(pymf_blocked_data *data, const pymf_grid *grid,
                                         int64_t nnz, const int64_t *rows, const int64_t *cols,
                                         const double *vals, pymf_error *err)
    void pymf_blocked_free(pymf_blocked_data *data)
    int64_t pymf_block_size(const pymf_blocked_data *data, int b, int c)
    int64_t pymf_part_size(const pymf_blocked_data *data, int part)


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


cdef extern from "pymf/sgld.h" nogil:
    ctypedef enum pymf_prior:
        PYMF_PRIOR_EXPONENTIAL
        PYMF_PRIOR_GAUSSIAN

    ctypedef enum pymf_langevin_kind:
        PYMF_LD
        PYMF_SGLD
        PYMF_PSGLD

    ctypedef enum pymf_part_order:
        PYMF_PARTS_CYCLIC
        PYMF_PARTS_RANDOM

    ctypedef struct pymf_nmf_model:
        pymf_tweedie likelihood
        pymf_prior prior
        double lam_w
        double lam_h

    ctypedef struct pymf_langevin_config:
        pymf_langevin_kind kind
        int64_t batch_size
        pymf_part_order part_order
        uint64_t noise_seed
        uint64_t schedule_seed
        int n_threads
        int only_row_block

    ctypedef struct pymf_langevin:
        pass

    pymf_langevin *pymf_langevin_create(const pymf_nmf_model *model,
                                        const pymf_blocked_data *data,
                                        const pymf_langevin_config *config, pymf_error *err)
    void pymf_langevin_destroy(pymf_langevin *sampler)
    pymf_status pymf_langevin_set_state(pymf_langevin *sampler, const double *W,
                                        const double *Ht, int64_t t, pymf_error *err)
    void pymf_langevin_get_state(const pymf_langevin *sampler, double *W, double *Ht, int64_t *t)
    void pymf_langevin_set_threads(pymf_langevin *sampler, int n_threads)
    pymf_status pymf_langevin_run(pymf_langevin *sampler, int64_t n_iter,
                                  const double *step_sizes, pymf_error *err)
    pymf_status pymf_langevin_set_totals(pymf_langevin *sampler, int64_t n_observed,
                                         const int64_t *part_sizes, pymf_error *err)
    void pymf_langevin_get_cols(const pymf_langevin *sampler, int64_t c0, int64_t c1, double *out)
    void pymf_langevin_set_cols(pymf_langevin *sampler, int64_t c0, int64_t c1, const double *inp)
    int pymf_langevin_part(const pymf_langevin *sampler, int64_t t)
    double *pymf_langevin_cols(pymf_langevin *sampler, int64_t c0)
    pymf_status pymf_langevin_loglik(const pymf_langevin *sampler, double *out, pymf_error *err)
    pymf_status pymf_sgld_minibatch(uint64_t schedule_seed, int64_t t, int64_t n_observed,
                                    int64_t batch_size, int64_t *out, pymf_error *err)


cdef extern from "pymf/sgd.h" nogil:
    ctypedef enum pymf_sgd_kind:
        PYMF_OPT_SGD
        PYMF_OPT_DSGD

    ctypedef struct pymf_sgd_config:
        pymf_sgd_kind kind
        int64_t batch_size
        pymf_part_order part_order
        uint64_t schedule_seed
        int n_threads

    ctypedef struct pymf_sgd:
        pass

    pymf_sgd *pymf_sgd_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                              const pymf_sgd_config *config, pymf_error *err)
    void pymf_sgd_destroy(pymf_sgd *opt)
    pymf_status pymf_sgd_set_state(pymf_sgd *opt, const double *W, const double *Ht, int64_t t,
                                   pymf_error *err)
    void pymf_sgd_get_state(const pymf_sgd *opt, double *W, double *Ht, int64_t *t)
    pymf_status pymf_sgd_run(pymf_sgd *opt, int64_t n_iter, const double *step_sizes,
                             pymf_error *err)
    pymf_status pymf_sgd_loglik(const pymf_sgd *opt, double *out, pymf_error *err)


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


cdef extern from "pymf/bpmf.h" nogil:
    ctypedef struct pymf_bpmf_model:
        int rank
        double tau
        double mean_rating
        int use_bias
        double alpha0
        double beta0

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

    ctypedef struct pymf_dsgld_stepper:
        uint64_t noise_seed
        int64_t batch_size
        int add_noise
        int noise_correction

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
    void pymf_bpmf_bias_correctors(const pymf_bpmf_data *d, int64_t m, double *h_user,
                                   double *h_item)
    void pymf_bpmf_predict(const pymf_bpmf_model *model, const pymf_bpmf_params *p, int64_t n,
                           const int32_t *users, const int32_t *items, double *out)
    double pymf_bpmf_sq_error(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                              const pymf_bpmf_params *p, int n_threads)
    double pymf_bpmf_log_posterior(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                   const pymf_bpmf_params *p, double *gU, double *gV, double *ga,
                                   double *gb)
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
    pymf_status pymf_dsgld_set_state(pymf_dsgld *d, int chain, const double *U, const double *V,
                                     const double *a, const double *b, const double *lambdas,
                                     int64_t round, pymf_error *err)
    void pymf_dsgld_get_state(const pymf_dsgld *d, int chain, double *U, double *V, double *a,
                              double *b, double *lambdas, int64_t *round)
    pymf_status pymf_dsgld_run(pymf_dsgld *d, int64_t n_rounds, const double *eps,
                               pymf_error *err)
    pymf_status pymf_dsgld_hyper_step(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                                      pymf_bpmf_params *p, const double *h_user,
                                      const double *h_item, uint64_t hyper_seed, int64_t round,
                                      pymf_error *err)
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


cdef extern from "pymf/hamcmc.h" nogil:
    ctypedef struct pymf_linear_gaussian:
        int64_t n_data
        int dim
        const double *A
        const double *x
        double noise_var
        double prior_var

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
    void pymf_lg_grad_potential(const pymf_linear_gaussian *m, const double *theta,
                                const int64_t *idx, int64_t n_idx, double *grad,
                                double *mean_lik)
    int pymf_lbfgs_apply(int dim, int n_pairs, const double *S, const double *Y, double gamma,
                         const double *g, double *out, double *work)
    int pymf_lbfgs_sqrt_apply(int dim, int n_pairs, const double *S, const double *Y,
                              double gamma, const double *z, double *out, double *work)
