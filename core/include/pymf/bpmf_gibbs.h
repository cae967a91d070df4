/*
 * pymf/bpmf_gibbs.h: the Gibbs baseline of BPMF (Salakhutdinov & Mnih, ICML 2008).
 *
 * Same likelihood as pymf/bpmf.h. Hyperpriors, chosen by `hyperprior`:
 *   PYMF_BPMF_HYPER_WISHART  u_i ~ N(mu_U, Lambda_U^-1) with the Normal-Wishart hyperprior
 *                            mu_U ~ N(0, (beta0 Lambda_U)^-1), Lambda_U ~ W(W0 = w0 I, nu0)
 *                            (the original BPMF; items alike);
 *   PYMF_BPMF_HYPER_GAMMA    the diagonal-precision model that DSGLD samples (pymf/bpmf.h),
 *                            so the two samplers can be checked against each other.
 * Biases a_i, b_j (if the model has them) have Gamma(alpha0, beta0) precisions in both.
 *
 * One sweep: hyper-parameters of the users | U; every (u_i, a_i) | rest in parallel (one
 * (D+1)-dimensional Gaussian each: Cholesky of its precision with GSL); then the same for
 * the items. Gaussian draws for rows come from Philox keyed by (noise seed, sweep, row), the
 * hyper-parameter draws from a GSL mt19937 reseeded per sweep: any thread count gives the
 * same chain.
 *
 * Hyper-parameter vector ("hyper"): gamma: lam_u[D], lam_v[D], lam_a, lam_b, tau;
 * wishart: mu_u[D], Lambda_u[D*D], mu_v[D], Lambda_v[D*D], lam_a, lam_b, tau. With
 * model->sample_tau the sweep ends with tau | rest ~ Gamma(alpha0 + N/2, rate beta0 + S/2)
 * (S: the squared residual sum); a fixed tau stays model->tau.
 */
#ifndef PYMF_BPMF_GIBBS_H
#define PYMF_BPMF_GIBBS_H

#include "pymf/bpmf.h"

typedef enum { PYMF_BPMF_HYPER_GAMMA = 0, PYMF_BPMF_HYPER_WISHART = 1 } pymf_bpmf_hyperprior;

typedef struct {
    int hyperprior;
    double nw_beta0, nw_nu0, nw_w0;  /* Normal-Wishart settings (nu0 > D - 1) */
    uint64_t noise_seed, hyper_seed;
    int n_threads;
} pymf_bpmf_gibbs_config;

/* Ratings by user (CSR) and by item (CSC), 0-based; arrays owned by the caller. */
typedef struct {
    int64_t n_users, n_items, nnz;
    const int64_t *user_ptr;
    const int32_t *user_items;
    const double *user_ratings;
    const int64_t *item_ptr;
    const int32_t *item_users;
    const double *item_ratings;
} pymf_bpmf_rows;

typedef struct pymf_bpmf_gibbs pymf_bpmf_gibbs;

int64_t pymf_bpmf_gibbs_hyper_size(int rank, int hyperprior);
pymf_bpmf_gibbs *pymf_bpmf_gibbs_create(const pymf_bpmf_model *model, const pymf_bpmf_rows *rows,
                                        const pymf_bpmf_gibbs_config *config, pymf_error *err);
void pymf_bpmf_gibbs_destroy(pymf_bpmf_gibbs *g);
void pymf_bpmf_gibbs_set_threads(pymf_bpmf_gibbs *g, int n_threads);
pymf_status pymf_bpmf_gibbs_set_state(pymf_bpmf_gibbs *g, const double *U, const double *V,
                                      const double *a, const double *b, const double *hyper,
                                      int64_t sweep, pymf_error *err);
void pymf_bpmf_gibbs_get_state(const pymf_bpmf_gibbs *g, double *U, double *V, double *a,
                               double *b, double *hyper, int64_t *sweep);
pymf_status pymf_bpmf_gibbs_run(pymf_bpmf_gibbs *g, int64_t n_sweeps, pymf_error *err);
const pymf_bpmf_params *pymf_bpmf_gibbs_params(const pymf_bpmf_gibbs *g);

#endif
