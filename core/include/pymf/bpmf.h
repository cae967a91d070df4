/*
 * pymf/bpmf.h: Bayesian probabilistic matrix factorisation sampled by distributed SGLD
 * (Ahn, Korattikara, Liu, Rajan & Welling, KDD 2015; DESIGN.md section 3.3).
 *
 * Model:  r_ij ~ N(rbar + u_i . v_j + a_i + b_j, 1/tau),
 *         u_i ~ N(0, diag(lam_u)^-1), v_j ~ N(0, diag(lam_v)^-1),
 *         a_i ~ N(0, 1/lam_a), b_j ~ N(0, 1/lam_b), every precision ~ Gamma(alpha0, rate beta0).
 * The noise precision tau is either fixed (sample_tau = 0: tau = model->tau) or sampled
 * (sample_tau = 1) with the same Gamma(alpha0, rate beta0) prior: its conditional given the
 * factors is Gamma(alpha0 + N/2, rate beta0 + S/2), S the sum of squared training residuals,
 * drawn where S is computed (pymf_dsgld_hyper_step, the Gibbs sweep). The current tau is
 * part of a chain's state: the last of its precisions (PYMF_BPMF_TAU).
 *
 * Layout: users and items are in "grid order" (the Python layer permutes them), cut into
 * P row stripes and Q column stripes; block s = p * Q + q holds the ratings of stripe p x
 * stripe q, contiguous in the entry arrays. An orthogonal group is min(P, Q) blocks that
 * share no stripe; there are n_groups = max(P, Q) groups and every block is in exactly one.
 * Chain c works on group (c + r - 1) mod n_groups in round r (1-based): the scheduler
 * rotates the chains over the groups, each block visited with frequency v(s) = 1/n_groups.
 *
 * One DSGLD step on block s (library convention theta += eps grad + N(0, 2 eps); the paper
 * writes eps/2 and N(0, eps), so its eps0 is twice ours): m ratings drawn with replacement
 * from the block; for every user i in the minibatch
 *   u_i += eps (N_s / (v(s) m) sum_n tau e_n v_j  -  lam_u u_i / hbar_i) + sqrt(2 eps) z,
 *   hbar_i = sum_s v(s) (1 - (1 - N_i^(s) / N_s)^m)          (bias corrector),
 * and likewise for items and the biases. Unlike the paper, the noise of a touched row has
 * variance 2 eps / hbar_i (noise_correction = 1, the default): with 2 eps the chain samples
 * a tempered posterior (see bpmf_block.c and tests/test_bpmf.py, which shows both). The estimator is unbiased for the gradient of the
 * log posterior given the precisions, averaged over the schedule and the minibatch.
 *
 * Randomness: minibatch indices and Langevin noise come from Philox keyed by the chain's
 * noise seed and indexed by (step, block, draw) and (step, row, k): any thread or MPI rank
 * that runs a block computes the same bits. The Gibbs draws of the precisions use a GSL
 * mt19937 reseeded per round from the chain's hyper seed (pymf/rng.h).
 */
#ifndef PYMF_BPMF_H
#define PYMF_BPMF_H

#include "pymf/common.h"

/* Philox stream tags of the BPMF samplers (the Tweedie samplers use 1 and 2). */
#define PYMF_STREAM_BPMF_U 3u
#define PYMF_STREAM_BPMF_V 4u
#define PYMF_STREAM_BPMF_BATCH 5u
#define PYMF_STREAM_BPMF_GIBBS_U 6u
#define PYMF_STREAM_BPMF_GIBBS_V 7u

typedef struct {
    int rank;            /* D >= 1 */
    double tau;          /* noise precision, > 0 */
    double mean_rating;  /* rbar, finite */
    int use_bias;        /* 1: a_i and b_j are in the model; 0: they stay 0 */
    double alpha0;       /* Gamma hyperprior shape of every precision, > 0 */
    double beta0;        /* Gamma hyperprior rate, > 0 */
    int sample_tau;      /* 1: tau is drawn from its conditional (tau above is its start) */
} pymf_bpmf_model;

/* A chain's precisions: lam_u[D], lam_v[D], lam_a, lam_b, tau. */
#define PYMF_BPMF_N_PRECISIONS(D) (2 * (D) + 3)
#define PYMF_BPMF_TAU(D) (2 * (D) + 2)
/* The noise precision a chain's steps use: its own (sampled) or the model's fixed one. */
static inline double pymf_bpmf_current_tau(const pymf_bpmf_model *m, const double *lambdas)
{
    return m->sample_tau ? lambdas[PYMF_BPMF_TAU(m->rank)] : m->tau;
}

/* The ratings, block by block (arrays owned by the caller). */
typedef struct {
    int64_t n_users, n_items, nnz;
    int n_row_blocks, n_col_blocks;  /* P, Q */
    const int64_t *row_start;        /* P + 1 stripe boundaries, in grid order */
    const int64_t *col_start;        /* Q + 1 */
    const int64_t *block_ptr;        /* P * Q + 1: block s is [block_ptr[s], block_ptr[s+1]) */
    const int32_t *users;            /* grid-order user of each entry */
    const int32_t *items;
    const double *ratings;
} pymf_bpmf_data;

/* The parameters of one chain in grid order. lambdas = lam_u[D], lam_v[D], lam_a, lam_b, tau
 * (PYMF_BPMF_N_PRECISIONS(D) values; with a fixed tau the last is model->tau). */
typedef struct {
    double *U;  /* n_users x D */
    double *V;  /* n_items x D */
    double *a;  /* n_users */
    double *b;  /* n_items */
    double *lambdas;
} pymf_bpmf_params;

pymf_status pymf_bpmf_check(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                            pymf_error *err);
static inline int pymf_bpmf_n_groups(const pymf_bpmf_data *d)
{
    return d->n_row_blocks > d->n_col_blocks ? d->n_row_blocks : d->n_col_blocks;
}
static inline int pymf_bpmf_group_size(const pymf_bpmf_data *d)
{
    return d->n_row_blocks < d->n_col_blocks ? d->n_row_blocks : d->n_col_blocks;
}
/* PYMF_EINVAL naming the first non-finite value of a state (U, V, a, b, n_hyper values). */
pymf_status pymf_bpmf_check_finite(const double *U, const double *V, const double *a,
                                   const double *b, const double *hyper, int64_t n_users,
                                   int64_t n_items, int rank, int64_t n_hyper, pymf_error *err);
/* Block of slot k (0 <= k < group size) of group g. */
int pymf_bpmf_group_block(const pymf_bpmf_data *d, int group, int slot);
/* The group chain c (0-based) works on in round r (1-based). */
static inline int pymf_bpmf_chain_group(const pymf_bpmf_data *d, int chain, int64_t round)
{
    return (int)(((int64_t)chain + round - 1) % pymf_bpmf_n_groups(d));
}

/* Bias correctors hbar (n_users and n_items) for minibatches of m ratings. Rows without
 * ratings get 0 (they are never in a minibatch). PYMF_ENOMEM if its scratch space cannot be
 * allocated (h_user and h_item are then left as they were). */
pymf_status pymf_bpmf_bias_correctors(const pymf_bpmf_data *d, int64_t m, double *h_user,
                                      double *h_item, pymf_error *err);

/* Predictions rbar + u.v + a + b for n (user, item) pairs in grid order, on n_threads
 * OpenMP threads (<= 0: the default) where n is large; each value is the same for any. */
void pymf_bpmf_predict(const pymf_bpmf_model *model, const pymf_bpmf_params *p, int64_t n,
                       const int32_t *users, const int32_t *items, double *out, int n_threads);
/* Sum of squared training residuals (fixed summation order, OpenMP over blocks). NAN if
 * out of memory. */
double pymf_bpmf_sq_error(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                          const pymf_bpmf_params *p, int n_threads);
/* The same for n_sets parameter sets p[0..n_sets-1] in one parallel pass over
 * (set, block) tasks: out[c] has the bits of pymf_bpmf_sq_error(..., &p[c], ...). Returns 0
 * (out all NAN) if out of memory, else 1. */
int pymf_bpmf_sq_errors(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                        const pymf_bpmf_params *p, int n_sets, double *out, int n_threads);
/* The Gram matrix of every row's likelihood terms: H_user[i] = sum over user i's ratings
 * of x_j x_j^T with x_j = (v_j, 1) (the item's factors and, with biases, a 1; without, a 0),
 * and H_item[j] likewise over item j's ratings with x_i = (u_i, 1). (D + 1)^2 doubles a row,
 * both triangles filled; rows without ratings get 0. tau's factor is the caller's. Each row's
 * terms are added one by one in the layout's order (a product, then a sum: the order and
 * roundings of np.bincount over the layout's ratings), one row or column stripe per thread:
 * the same bits for any thread count. Returns 0 if out of memory (the lists of a stripe's
 * ratings by row: 4 bytes a rating, 8 a row), else 1. */
int pymf_bpmf_row_gram(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                       const pymf_bpmf_params *p, double *H_user, double *H_item,
                       int n_threads);
/* The same sums as each row's diagonal diag (D + 1 doubles a row) and correlation matrix
 * R[a][b] = (H[a][b] r_a) r_b, r = 1 / sqrt(diag) where diag > 0, else 0 (both triangles,
 * rounded as NumPy rounds H * r[:, None] * r[None, :]): what the per-row step bound needs,
 * without the Gram matrices. Returns 0 if out of memory, else 1. */
int pymf_bpmf_row_correlations(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                               const pymf_bpmf_params *p, double *diag_user, double *R_user,
                               double *diag_item, double *R_item, int n_threads);
/* What the per-row step bound needs of n_sets states p[0 .. n_sets - 1] (DSGLD's chains)
 * without keeping any matrix: each row's diagonal diag (D + 1 doubles) and rho, the
 * largest eigenvalue of its correlation matrix (pymf_largest_eigenvalue of
 * pymf_bpmf_row_correlations' R, the same bits), set after set: diag_user (n_sets x
 * n_users x (D + 1)), rho_user (n_sets x n_users), and the items' likewise. Each stripe's
 * ratings are listed by row once for all the sets; then a task per set and stripe. The
 * same bits for any thread count. Returns 0 if out of memory, else 1. */
int pymf_bpmf_row_curvatures(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                             const pymf_bpmf_params *p, int n_sets, double *diag_user,
                             double *rho_user, double *diag_item, double *rho_item,
                             int n_threads);
/* Log posterior of (U, V, a, b) given the precisions, up to a constant, and its gradient
 * (each out array may be NULL). */
double pymf_bpmf_log_posterior(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                               const pymf_bpmf_params *p, double *gU, double *gV, double *ga,
                               double *gb);
/* The gradient of pymf_bpmf_log_posterior alone (no NULL arrays), bit for bit its
 * gradient, on n_threads OpenMP threads (one row or column stripe a task). */
void pymf_bpmf_log_posterior_gradient(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                      const pymf_bpmf_params *p, double *gU, double *gV,
                                      double *ga, double *gb, int n_threads);
/* One Gibbs draw of the precisions given (U, V, a, b): lam ~ Gamma(alpha0 + n/2, rate
 * beta0 + sum x^2 / 2), from a GSL mt19937 seeded with `seed` (tau is left as it is). */
pymf_status pymf_bpmf_sample_precisions(const pymf_bpmf_model *model, int64_t n_users,
                                        int64_t n_items, pymf_bpmf_params *p,
                                        unsigned long seed, pymf_error *err);

/* ---- DSGLD: the work of one block in one round (shared by threads and MPI workers) ---- */

typedef struct pymf_dsgld_scratch pymf_dsgld_scratch;
pymf_dsgld_scratch *pymf_dsgld_scratch_create(int rank, int64_t max_stripe_users,
                                              int64_t max_stripe_items, int64_t batch_size);
void pymf_dsgld_scratch_destroy(pymf_dsgld_scratch *s);

/* One block's ratings and correctors; users/items are grid ids, the parameter slices
 * passed with it start at user_offset / item_offset. */
typedef struct {
    int block_id;
    int64_t n_entries;
    const int32_t *users, *items;
    const double *ratings;
    int64_t user_offset, n_stripe_users, item_offset, n_stripe_items;
    const double *h_user, *h_item;  /* correctors of the stripe's rows */
    double visit_rate;              /* v(s) = 1 / n_groups */
    /* Per-coordinate step factors of the stripe's rows: coordinate k of a row moves by
     * eps c_k g_k + N(0, 2 eps n_k / hbar), c_k in (0, 1] (a constant diagonal
     * preconditioner when n_k = c_k; n_k < c_k leaves room for the minibatch's own noise).
     * 2 (D + 1) doubles a row: c (bias last), then sqrt(n). NULL: every c = n = 1, the
     * plain chain, bit for bit. */
    const double *step_user, *step_item;
} pymf_dsgld_block;

typedef struct {
    uint64_t noise_seed;  /* the chain's Philox key */
    int64_t batch_size;   /* m */
    int add_noise;        /* 1: DSGLD; 0: stochastic gradient ascent on the log posterior */
    int noise_correction; /* 1: noise N(0, 2 eps / hbar) for a touched row (see bpmf_block.c);
                             0: N(0, 2 eps) as written in the paper */
    double tau_reference; /* > 0: where the chain's tau exceeds it, the steps are eps
                             tau_reference / tau (pymf_dsgld_tau_scaled_step); 0: eps */
} pymf_dsgld_stepper;

/* The step a chain takes at its current precisions: eps, times tau_reference / tau where
 * its noise precision tau exceeds a positive tau_reference. step_size="auto" chooses eps
 * from the curvature at tau_reference, and the likelihood's curvature is proportional to
 * tau, so eps tau stays at most its chosen value as tau grows (a step that depends on the
 * precisions alone is a constant preconditioner of the factors' update given them, which
 * leaves their conditional posterior stationary). */
static inline double pymf_dsgld_tau_scaled_step(const pymf_bpmf_model *model,
                                                const pymf_dsgld_stepper *st,
                                                const double *lambdas, double eps)
{
    if (st->tau_reference > 0.0) {
        const double tau = pymf_bpmf_current_tau(model, lambdas);
        if (tau > st->tau_reference)
            return eps * (st->tau_reference / tau);
    }
    return eps;
}

/* n_steps steps on one block with step size eps; steps first_step, first_step + 1, ... (the
 * global step ids the randomness is indexed by). The slices are updated in place. Returns
 * PYMF_EDIVERGED with err->iteration = the step if a value becomes non-finite. */
pymf_status pymf_dsgld_block_steps(const pymf_bpmf_model *model, const pymf_dsgld_block *blk,
                                   const pymf_dsgld_stepper *st, double *U, double *V,
                                   double *a, double *b, const double *lambdas,
                                   int64_t first_step, int n_steps, double eps,
                                   pymf_dsgld_scratch *scratch, pymf_error *err);
/* The estimator of one step (no update): gradients of the stripe's rows, zero for rows not
 * in the minibatch. gU: n_stripe_users x D, ga: n_stripe_users, etc. */
pymf_status pymf_dsgld_block_gradient(const pymf_bpmf_model *model, const pymf_dsgld_block *blk,
                                      const pymf_dsgld_stepper *st, const double *U,
                                      const double *V, const double *a, const double *b,
                                      const double *lambdas, int64_t step,
                                      pymf_dsgld_scratch *scratch, double *gU, double *gV,
                                      double *ga, double *gb, pymf_error *err);

/* ---- DSGLD over several chains in shared memory ---- */

typedef struct {
    int n_chains;
    int64_t batch_size;  /* m */
    int round_length;    /* gamma: steps per round */
    int hyper_every;     /* Gibbs draw of the precisions after every this many rounds; 0: never */
    int add_noise;
    int noise_correction;
    int n_threads;       /* <= 0: OpenMP default */
} pymf_dsgld_config;

typedef struct pymf_dsgld pymf_dsgld;

/* noise_seeds and hyper_seeds: one per chain. The object keeps pointers to data. */
pymf_dsgld *pymf_dsgld_create(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                              const pymf_dsgld_config *config, const uint64_t *noise_seeds,
                              const uint64_t *hyper_seeds, pymf_error *err);
void pymf_dsgld_destroy(pymf_dsgld *d);
void pymf_dsgld_set_threads(pymf_dsgld *d, int n_threads);
pymf_status pymf_dsgld_set_state(pymf_dsgld *d, int chain, const double *U, const double *V,
                                 const double *a, const double *b, const double *lambdas,
                                 int64_t round, pymf_error *err);
void pymf_dsgld_get_state(const pymf_dsgld *d, int chain, double *U, double *V, double *a,
                          double *b, double *lambdas, int64_t *round);
/* Per-coordinate step factors c (n_users x (D + 1) and n_items x (D + 1) doubles in (0, 1],
 * grid order, the bias last) and noise factors n (the same shapes, in [0, c]), copied, used
 * by the rounds from `from_round` on (1-based; earlier rounds run every row at eps); NULL
 * arrays remove them. PYMF_EINVAL for a factor outside its range, PYMF_ENOMEM. */
pymf_status pymf_dsgld_set_row_steps(pymf_dsgld *d, const double *step_user,
                                     const double *step_item, const double *noise_user,
                                     const double *noise_item, int64_t from_round,
                                     pymf_error *err);
/* Per-chain tau references (n_chains positive doubles, copied; NULL: none, the default):
 * chain c's steps are pymf_dsgld_tau_scaled_step's with tau_reference[c]. PYMF_EINVAL for a
 * reference that is not positive and finite, PYMF_ENOMEM. */
pymf_status pymf_dsgld_set_tau_reference(pymf_dsgld *d, const double *tau_reference,
                                         pymf_error *err);
/* Runs n_rounds rounds of every chain; eps[r] is the step size of the r-th of them. On
 * divergence every chain is put back to its state before the failing round. */
pymf_status pymf_dsgld_run(pymf_dsgld *d, int64_t n_rounds, const double *eps, pymf_error *err);
/* Gibbs draw of the precisions (and of rows without ratings, from their prior) of one chain,
 * as done after round `round`, then, if model->sample_tau, of tau given the squared
 * residual sum (computed here, with n_threads OpenMP threads; the same bits for any count);
 * exposed for the MPI parameter server. */
pymf_status pymf_dsgld_hyper_step(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                                  pymf_bpmf_params *p, const double *h_user, const double *h_item,
                                  uint64_t hyper_seed, int64_t round, int n_threads,
                                  pymf_error *err);
const pymf_bpmf_params *pymf_dsgld_params(const pymf_dsgld *d, int chain);
/* The sums of squared training residuals of chains first .. first + n_chains - 1 at the
 * current round into out (the bits of pymf_bpmf_sq_error), on the chains' threads in one
 * pass for those not known yet; a sum computed for tau's draw at this round is reused.
 * PYMF_EINVAL for chains out of range, PYMF_ENOMEM. */
pymf_status pymf_dsgld_sq_errors(pymf_dsgld *d, int first, int n_chains, double *out,
                                 pymf_error *err);

#endif
