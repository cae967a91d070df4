/*
 * pymf/sibm.h: stochastic variational inference for big binary matrices (SIBM; Hernández-
 * Lobato, Houlsby & Ghahramani, "Stochastic inference for scalable probabilistic modeling
 * of binary matrices"), and the batch VB it is compared with.
 *
 * Model: x_ij ~ Bernoulli(sigmoid(s_ij)), s_ij = u_i . v_j + z, over a fully observed
 * L x M binary matrix given by its ones (CSR, columns sorted within a row); Gaussian priors
 * u_id ~ N(mu_u, var_u), v_jd ~ N(mu_v, var_v), z ~ N(mu_z, var_z).
 *
 * Posterior approximation: mean-field Gaussian q, each factor held in the natural
 * parameters eta = (mean / var, 1 / var) (an affine image of the canonical ones, so that
 * eta <- (1 - rho) eta + rho eta* is the natural-gradient step).
 *
 * Jaakkola-Jordan bound: log sigmoid(t s) >= log sigmoid(xi) + (t s - xi)/2
 *   - lambda(xi) (s^2 - xi^2), t = 2x - 1, lambda(xi) = tanh(xi/2) / (4 xi), tight at
 * xi = |s|. Under q the bound's expectation is largest at xi^2 = E_q[s^2] (closed form),
 * where it equals  log sigmoid(xi) - xi/2 + (x - 1/2) E[s].  Every ELBO here is this
 * bound's, at the optimal xi of every entry.
 *
 * One coordinate (u_id, say) given the rest: its target natural parameters are the prior's
 * plus, for every entry (i, j) of its row, a = 2 lambda E[v_jd^2] (precision) and
 * b = m_vjd ((x - 1/2) - 2 lambda (E[s] - m_uid m_vjd)) (precision x mean). z likewise with
 * a = 2 lambda, b = (x - 1/2) - 2 lambda (E[s] - m_z). lambda is recomputed from the current
 * q before z's update and before each dimension's u and v updates (the full paper's
 * Algorithm 1): one *update* is the stages z, u_1, v_1, ..., u_D, v_D.
 *
 * Stochastic update (pymf_sibm_run): S entries drawn with replacement from p(i, j); the
 * target of row i is the prior's plus the average, over the n(i) drawn entries of row i, of
 * w_row (a, b) with w_row = 1 / p(j | i) = p_row(i) / p(i, j), so that its expectation given
 * the row is the batch target; columns likewise with w_col = p_col(j) / p(i, j), and z with
 * w_z = 1 / p(i, j) (z sees every draw). The poster's weight c_ij = 1 / (L M p(i, j)) makes
 * the ELBO estimate  mean_s[w_z f_s] - KL  unbiased, but applied to a row's target it is
 * biased for the non-uniform strategies (tests/test_sibm.py shows it); the two agree for
 * S-Uniform. Rows and columns not drawn do not move; row i steps with
 * rho(i) = (tau0 + n_i)^-kappa, n_i the updates it has taken part in (this one included);
 * z with rho = (tau0 + t)^-kappa, t the update's number.
 *
 * Sampling strategies (class probabilities 1/2 each when the matrix has ones and zeros):
 *   UNIFORM   p = 1 / (L M).
 *   BALANCED  a one uniformly among the ones, a zero uniformly among the zeros.
 *   BIASED    a one (i, j) with probability proportional to (r0_i + 1)(c0_j + 1), a zero
 *             proportional to (r1_i + 1)(c1_j + 1), where r0/r1 (c0/c1) count the zeros /
 *             ones of the row (column): the poster's S-Biased with one added to each count,
 *             so that no entry has probability 0 (the poster's formula gives the entries of
 *             a row or column without ones none, and the ELBO estimate would be biased).
 *   Zeros are drawn by rejection: a cell from the product distribution (uniform, or
 *   proportional to (r1_i + 1)(c1_j + 1)), drawn again while it is a one (binary search in
 *   the row's sorted ones); the matrix is refused at create when the acceptance rate would
 *   be below 1%.
 *
 * Automatic minibatch size (poster section 8): after each update, for every row and column
 * with n >= 2 draws in it, the sample mean E and variance Var of the per-draw targets
 * (2 D numbers) give the draws the row needs, n(i) = ||Var||_1 / (theta_delta rho ||E||^2)
 * (the poster's rule); a minibatch of S puts S p_row(i) draws in row i on average, so the
 * row asks for S = n(i) / p_row(i) (the poster's S = n(i) leaves this factor out, and
 * with it S fell to its floor on every matrix we tried). The next S is the mean of these
 * over the rows and columns (twice S when none has two draws), moved by at most a factor
 * of two per update (one update's estimate is noisy), and kept in [batch_min, batch_max].
 * As rho decays S grows, as SVI's noise has to shrink.
 *
 * Batch VB (pymf_sibm_batch_sweep): the same stages with every one of the L M entries,
 * weight 1 and rho = 1 (coordinate ascent; the ELBO never decreases). It keeps E[s] and
 * Var[s] of every entry (16 L M bytes): the lambda-weighted sums of every stage involve
 * every entry and cost O(L M) (xi is per entry, so no sufficient statistic replaces
 * them); only the (x - 1/2) m terms could be summed over the ones alone.
 *
 * Determinism: draws come from Philox keyed by the seed and indexed by (update, draw,
 * attempt); per-entry work runs in parallel, and every sum (over a row's draws, a
 * column's entries, z's draws) runs in a fixed order, so results do not depend on the
 * number of threads. The update counter is the generator's whole state.
 */
#ifndef PYMF_SIBM_H
#define PYMF_SIBM_H

#include "pymf/common.h"

#define PYMF_STREAM_SIBM_DRAW 12u
#define PYMF_STREAM_SIBM_ELBO 13u

typedef enum {
    PYMF_SIBM_UNIFORM = 0,
    PYMF_SIBM_BALANCED = 1,
    PYMF_SIBM_BIASED = 2
} pymf_sibm_sampling;

typedef struct {
    int64_t n_rows, n_cols, n_ones;
    const int64_t *row_ptr; /* n_rows + 1 offsets into col_idx */
    const int64_t *col_idx; /* the ones' columns, strictly increasing within each row */
} pymf_sibm_matrix;

typedef struct {
    int rank;
    double mean_u, var_u, mean_v, var_v, mean_z, var_z;
} pymf_sibm_prior;

typedef struct {
    pymf_sibm_sampling sampling;
    int64_t batch_size;  /* S > 0: fixed; 0: automatic, starting at batch_start */
    int64_t batch_start, batch_min, batch_max;
    double theta_delta;  /* the automatic size's one parameter (> 0) */
    double tau0, kappa;  /* rho = (tau0 + n)^-kappa: tau0 >= 0, kappa in (0.5, 1] */
    uint64_t seed;       /* Philox key of the draws */
    int n_threads;       /* <= 0: OpenMP's default */
} pymf_sibm_config;

/* q's factors, in the caller's arrays: u1, u2 (L x D) and v1, v2 (M x D), the natural
 * parameters mean/var and 1/var, row-major. The object works in them directly (no copy of
 * q in the core, so that a fit holds q once); they must outlive the object. */
typedef struct {
    double *u1, *u2, *v1, *v2;
} pymf_sibm_factors;

typedef struct pymf_sibm pymf_sibm;

/* Checks the matrix (offsets, sorted unique in-range columns), the prior and the
 * configuration. The matrix's arrays and the factors' must outlive the object. q starts at
 * the prior (the factors' arrays are overwritten). */
pymf_sibm *pymf_sibm_create(const pymf_sibm_matrix *matrix, const pymf_sibm_prior *prior,
                            const pymf_sibm_config *config, const pymf_sibm_factors *factors,
                            pymf_error *err);
void pymf_sibm_destroy(pymf_sibm *s);
/* Frees one update's scratch (S draws' arrays, 184-216 bytes a draw); the next update
 * allocates it again. Between updates it holds nothing needed later, and a trace point or
 * the end of a fit allocates its own arrays: freed first, those do not add to the peak. */
void pymf_sibm_release_scratch(pymf_sibm *s);

/* q's natural parameters: u1, u2 (L x D: mean/var, 1/var), v1, v2 (M x D), z (2); the
 * counters: rows' and columns' update counts, the update number t, the current S. set_state
 * checks finiteness, 1/var > 0 and counters >= 0 before it changes anything. Given the
 * object's own factor arrays (written in place by the caller), it checks them and copies
 * nothing; get_state likewise copies only into other arrays. */
pymf_status pymf_sibm_set_state(pymf_sibm *s, const double *u1, const double *u2,
                                const double *v1, const double *v2, const double *z,
                                const int64_t *row_updates, const int64_t *col_updates,
                                int64_t t, int64_t batch, pymf_error *err);
void pymf_sibm_get_state(const pymf_sibm *s, double *u1, double *u2, double *v1, double *v2,
                         double *z, int64_t *row_updates, int64_t *col_updates, int64_t *t,
                         int64_t *batch);

/* n_updates stochastic updates (t + 1 .. t + n_updates), each with the current S.
 * batch_sizes (n_updates values, may be NULL) receives the S each used. A non-finite target
 * stops with PYMF_EDIVERGED naming the update, before it is applied. */
pymf_status pymf_sibm_run(pymf_sibm *s, int64_t n_updates, int64_t *batch_sizes, pymf_error *err);

/* The draws of update t (1-based): n entries (rows, cols, x) with their weights w_row,
 * w_col, w_z (see above); any output may be NULL. */
pymf_status pymf_sibm_draw(const pymf_sibm *s, uint32_t stream, int64_t t, int64_t n,
                           int64_t *rows, int64_t *cols, double *x, double *w_row,
                           double *w_col, double *w_z, pymf_error *err);

/* One natural-gradient update from given entries and weights: rho > 0 is used for every
 * row, column and z; rho <= 0 takes the schedules (and counts the update). */
pymf_status pymf_sibm_update_entries(pymf_sibm *s, int64_t n, const int64_t *rows,
                                     const int64_t *cols, const double *x, const double *w_row,
                                     const double *w_col, const double *w_z, double rho,
                                     pymf_error *err);

/* n_sweeps batch VB sweeps (allocates 16 L M bytes once: PYMF_ENOMEM if it cannot). */
pymf_status pymf_sibm_batch_sweep(pymf_sibm *s, int64_t n_sweeps, pymf_error *err);

/* The ELBO, exactly: every entry, O(L M D). */
pymf_status pymf_sibm_elbo(const pymf_sibm *s, double *elbo, pymf_error *err);
/* An unbiased estimate from n draws of the sampling strategy (stream ELBO, index t):
 * mean_s[w_z f_s] - KL. */
pymf_status pymf_sibm_elbo_estimate(const pymf_sibm *s, int64_t t, int64_t n, double *elbo,
                                    pymf_error *err);
/* For given entries: E_q[s] and Var_q[s] (either may be NULL), and f = the bound's
 * expectation at the optimal xi (may be NULL). */
void pymf_sibm_entry_moments(const pymf_sibm *s, int64_t n, const int64_t *rows,
                             const int64_t *cols, const double *x, double *mean, double *var,
                             double *f);
/* KL(q || prior) of U, V and z together. */
double pymf_sibm_kl(const pymf_sibm *s);

#endif
