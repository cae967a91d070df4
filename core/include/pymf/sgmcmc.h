/*
 * pymf/sgmcmc.h: HAMCMC, stochastic quasi-Newton Langevin Monte Carlo (Simsekli, Badeau,
 * Cemgil & Richard, ICML 2016), and the samplers the paper compares it with, on the
 * paper's linear-Gaussian model (section 4.1, pymf/linear_gaussian.h: the potential U and
 * its minibatch estimate U_Omega), whose posterior is known exactly. The L-BFGS products
 * are in pymf/lbfgs.h.
 *
 * Samplers (convention theta += -eps * precond * grad U_Omega + N(0, 2 eps precond)):
 *   SGLD    precond = I.
 *   PSGLD   preconditioned SGLD (Li et al., AAAI 2016; not the parallel SGLD of langevin.h):
 *           V = alpha V + (1 - alpha) g*g with g the mean per-datum likelihood gradient of
 *           the minibatch (V starts at g*g of the first one), precond = diag(1 / (lambda +
 *           sqrt V)); the correction term Gamma is dropped, as in the paper's experiments.
 *   SGRLD   precond = the inverse expected Fisher information of the whole problem,
 *           (A^T A / noise_var + I / prior_var)^-1, constant for this model (so Gamma = 0);
 *           the caller passes its lower Cholesky factor L (precond = L L^T).
 *   HAMCMC  theta_t = theta_{t-M} - eps H_t grad U_Omega_t(theta_{t-M}) + sqrt(2 eps) S_t z,
 *           H_t the L-BFGS inverse Hessian from H^0 = gamma I and the M - 1 pairs
 *           tau = t-M+1 .. t-1 (oldest first), s_tau = theta_tau - theta_{tau-M},
 *           y_tau = grad U_Omega_tau(theta_tau) - grad U_Omega_tau(theta_{tau-M}) + lambda s_tau
 *           (both gradients on the minibatch of iteration tau): none of them involves
 *           theta_{t-M}, so H_t does not depend on the state being moved and no correction
 *           term is needed. S_t S_t^T = H_t by the product form of Brodlie, Gourlay and
 *           Greenstadt (1973), O(M^2 D). A pair with s^T y <= 0 (H would not be positive
 *           definite) is left out of both H_t and S_t, and counted. Iterations 1 .. 2M are
 *           Langevin steps from theta_0 preconditioned by H^0 = gamma I (so eps has the same
 *           units throughout), which provide the first samples and pairs the recursion needs
 *           (the paper assumes theta_0 .. theta_2M given). In the directions the M - 1 pairs
 *           do not reach, H_t stays close to gamma I: gamma must suit the stiffest direction
 *           as an SGLD step would (eps gamma * largest curvature < 2). With scaled_gamma the
 *           quasi-Newton iterations use H^0 = gamma_t I, gamma_t = s^T y / y^T y of the newest
 *           pair in H_t (Nocedal & Wright eq. 7.20; gamma when none is usable): a function of
 *           the same pairs, so H_t still does not depend on theta_{t-M}.
 *
 * Randomness: the Gaussians z of iteration t and the minibatch of iteration t come from
 * Philox (philox.h) indexed by (seed, stream, t): the chain is a pure function of (seed, t).
 * A non-finite new state stops the run with PYMF_EDIVERGED naming the iteration; the last
 * finite state (and everything the sampler carries) is kept.
 */
#ifndef PYMF_SGMCMC_H
#define PYMF_SGMCMC_H

#include "pymf/common.h"
#include "pymf/linear_gaussian.h"

#define PYMF_STREAM_SGMCMC_NOISE 8u
#define PYMF_STREAM_SGMCMC_BATCH 9u

typedef enum {
    PYMF_SGMCMC_SGLD = 0,
    PYMF_SGMCMC_PSGLD = 1,
    PYMF_SGMCMC_SGRLD = 2,
    PYMF_SGMCMC_HAMCMC = 3
} pymf_sgmcmc_kind;

typedef struct {
    pymf_sgmcmc_kind kind;
    int64_t batch_size;        /* |Omega|; 0 (or >= N): the full data, no sampling */
    uint64_t seed;             /* Philox key of the noise and the minibatches */
    int memory;                /* HAMCMC: M >= 2 */
    double gamma;              /* HAMCMC: H^0 = gamma I (> 0) */
    int scaled_gamma;          /* HAMCMC: nonzero: in the quasi-Newton iterations H^0 =
                                  (s^T y / y^T y) I of the newest pair in H
                                  (pymf_lbfgs_scaled_gamma); gamma only in the first 2M
                                  iterations and while no pair is usable */
    double lambda;             /* HAMCMC: y += lambda s (>= 0); PSGLD: lambda in 1/(lambda + sqrt V) (> 0) */
    double alpha;              /* PSGLD: V's forgetting factor, in [0, 1) */
    const double *metric_chol; /* SGRLD: L (D x D, row-major, lower), copied at create */
} pymf_sgmcmc_config;

typedef struct pymf_sgmcmc pymf_sgmcmc;

/* Checks the model (finite A and x, positive variances) and the configuration. The model's
 * arrays must outlive the sampler. */
pymf_sgmcmc *pymf_sgmcmc_create(const pymf_linear_gaussian *model, const pymf_sgmcmc_config *config,
                                pymf_error *err);
void pymf_sgmcmc_destroy(pymf_sgmcmc *s);

/* Restarts the chain at theta (finite, D values) as iteration 0: HAMCMC's history and
 * PSGLD's V are forgotten. */
pymf_status pymf_sgmcmc_start(pymf_sgmcmc *s, const double *theta, pymf_error *err);

/* n_iter iterations with step sizes eps[0 .. n_iter - 1] (positive, finite); samples, if
 * not NULL, receives the state after each iteration (n_iter x D). */
pymf_status pymf_sgmcmc_run(pymf_sgmcmc *s, int64_t n_iter, const double *eps, double *samples,
                            pymf_error *err);

/* The current state theta_t (D values) and t. */
void pymf_sgmcmc_state(const pymf_sgmcmc *s, double *theta, int64_t *t);
/* HAMCMC: memory pairs left out so far because s^T y <= 0. */
int64_t pymf_sgmcmc_skipped_pairs(const pymf_sgmcmc *s);

/* Everything a chain carries from one iteration to the next (the rest of the sampler is
 * scratch rebuilt every iteration), for checkpoints: a sampler created with the same model
 * and configuration and given this by pymf_sgmcmc_import continues the exporting chain bit
 * for bit. The arrays belong to the caller; pymf_sgmcmc_saved_shape says their sizes.
 * PSGLD needs no "V not set yet" flag: iteration 1 sets V = g * g whatever V holds, and t
 * says whether iteration 1 has run. */
typedef struct {
    int dim;                  /* D */
    int window_rows;          /* HAMCMC: memory M; the others: 1 */
    int pair_rows;            /* HAMCMC: M - 1; the others: 0 */
    int64_t t;                /* iterations run since pymf_sgmcmc_start */
    int64_t n_pairs;          /* HAMCMC: min(M - 1, max(0, t - M)), one pair per iteration
                                 after the M-th; the others: 0 */
    int64_t skipped_pairs;    /* HAMCMC: at most max(0, t - M); the others: 0 */
    double *theta;            /* window_rows x D: theta_u in row u mod window_rows (rows not
                                 reached yet hold whatever the sampler held: never read) */
    double *V;                /* D: PSGLD's second-moment estimate (>= 0); zeros otherwise */
    double *pair_s, *pair_y;  /* pair_rows x D, oldest first; rows past n_pairs never read */
} pymf_sgmcmc_saved;

/* Sets saved->dim, window_rows and pair_rows for this sampler (the pointers are untouched). */
void pymf_sgmcmc_saved_shape(const pymf_sgmcmc *s, pymf_sgmcmc_saved *saved);
/* Copies the chain into saved, whose shape must be pymf_sgmcmc_saved_shape's (PYMF_EINVAL
 * otherwise, nothing written). */
pymf_status pymf_sgmcmc_export(const pymf_sgmcmc *s, pymf_sgmcmc_saved *saved, pymf_error *err);
/* Replaces the chain by saved. Refused with PYMF_EINVAL, the chain left as it was, unless
 * the shape is this sampler's, the counters are ones this sampler can reach (see above) and
 * every value is finite (and V >= 0): a damaged or foreign state must not run. */
pymf_status pymf_sgmcmc_import(pymf_sgmcmc *s, const pymf_sgmcmc_saved *saved, pymf_error *err);

#endif
