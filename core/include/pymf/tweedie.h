/*
 * pymf/tweedie.h: the Tweedie / beta-divergence likelihood (PSGLD paper, section 4).
 *
 *   d_beta(v || mu) = v^b / (b (b-1)) - v mu^(b-1) / (b-1) + mu^b / b
 *   with the limits b = 1 (KL: v log(v/mu) - v + mu) and b = 0 (IS: v/mu - log(v/mu) - 1),
 *   log p(v | mu, phi, beta) = -d_beta(v || mu) / phi + c(v, phi, beta),
 *   d/dmu log p = mu^(beta-2) (v - mu) / phi.
 *
 * The per-entry functions are PYMF_HD so the CUDA kernels compile the very same formulas;
 * mu_ij = <w_i, h_j> is pymf_dot_fused (pymf/linalg.h) in the block gradient (PSGLD, LD,
 * HAMCMC-MF, the CUDA kernels) and the Fisher curvature, pymf_dot in the log-likelihood,
 * the predictions and the per-entry moves of SGLD and SGD (the same order, each term rounded
 * twice instead of once: they differ in the last bits, which nothing compares).
 *
 * The mu floor: for beta < 2 both mu^(beta-2) and log(mu) blow up as mu -> 0, and a
 * non-negative factorisation can put mu exactly at 0 (a mirrored factor at zero). Every
 * function here replaces mu by max(mu, PYMF_MU_FLOOR) when beta < 2. For beta >= 2 mu is
 * used as is (beta = 2 allows real-valued mu). The log-likelihoods are reported without
 * the normaliser c(v, phi, beta), which does not depend on W and H.
 */
#ifndef PYMF_TWEEDIE_H
#define PYMF_TWEEDIE_H

#include "pymf/common.h"
#include "pymf/linalg.h"

#ifndef __CUDACC__
#include <math.h>
#endif

#define PYMF_MU_FLOOR 1e-10

PYMF_HD double pymf_tweedie_floor_mu(double mu, double beta)
{
    return (beta < 2.0 && !(mu >= PYMF_MU_FLOOR)) ? PYMF_MU_FLOOR : mu;
}

/* d_beta(v || mu) for any real beta, mu already floored. */
PYMF_HD double pymf_beta_divergence_floored(double v, double mu, double beta)
{
    if (beta == 2.0) {
        const double diff = v - mu;
        return 0.5 * diff * diff;
    }
    if (beta == 1.0)
        return (v > 0.0 ? v * log(v / mu) : 0.0) - v + mu;
    if (beta == 0.0) {
        const double ratio = v / mu;
        return ratio - log(ratio) - 1.0;
    }
    /* v^b is 0 for v = 0 and b > 0; for b <= 0 data must be positive (checked upstream). */
    const double v_pow = pow(v, beta);
    const double mu_pow_m1 = pow(mu, beta - 1.0);
    return v_pow / (beta * (beta - 1.0)) - v * mu_pow_m1 / (beta - 1.0) + mu_pow_m1 * mu / beta;
}

PYMF_HD double pymf_beta_divergence(double v, double mu, double beta)
{
    return pymf_beta_divergence_floored(v, pymf_tweedie_floor_mu(mu, beta), beta);
}

/* d/dmu log p(v | mu) = mu^(beta-2) (v - mu) / phi, mu already floored. */
PYMF_HD double pymf_tweedie_dlogp_dmu_floored(double v, double mu, double beta, double inv_phi)
{
    if (beta == 2.0)
        return (v - mu) * inv_phi;
    if (beta == 1.0)
        return (v / mu - 1.0) * inv_phi;
    if (beta == 0.0)
        return (v - mu) / (mu * mu) * inv_phi;
    return pow(mu, beta - 2.0) * (v - mu) * inv_phi;
}

PYMF_HD double pymf_tweedie_dlogp_dmu(double v, double mu, double beta, double inv_phi)
{
    return pymf_tweedie_dlogp_dmu_floored(v, pymf_tweedie_floor_mu(mu, beta), beta, inv_phi);
}

/* ---- Whole-matrix and per-block operations (C only; the GPU has its own kernels). ---- */
#ifndef __CUDACC__
#include "pymf/blocks.h"

typedef struct {
    int rank;
    double beta;
    double phi;
} pymf_tweedie;

pymf_status pymf_tweedie_check(const pymf_tweedie *lik, pymf_error *err);

/* Adds `scale` times the likelihood gradient of block (b, c) into the rows of gW that
 * belong to row piece b and the rows of gHt that belong to column piece c (W is I x K,
 * Ht is J x K, both grid order). Touches nothing outside the block's pieces, so the blocks
 * of one part can run in parallel. */
void pymf_tweedie_block_grad(const pymf_tweedie *lik, const pymf_blocked_data *data, int b,
                             int c, double scale, const double *W, const double *Ht, double *gW,
                             double *gHt);
/* The same gradient written rather than added: the block's rows of gW and gHt end up
 * holding exactly what zeroing them and calling pymf_tweedie_block_grad gives, without a
 * separate pass over them. */
void pymf_tweedie_block_grad_set(const pymf_tweedie *lik, const pymf_blocked_data *data, int b,
                                 int c, double scale, const double *W, const double *Ht,
                                 double *gW, double *gHt);

/* -sum d_beta / phi over block (b, c). */
double pymf_tweedie_block_loglik(const pymf_tweedie *lik, const pymf_blocked_data *data, int b,
                                 int c, const double *W, const double *Ht);

/* -sum d_beta / phi over all observed entries: row pieces in parallel, their partial
 * sums added in piece order, so the value does not depend on the thread count. */
pymf_status pymf_tweedie_loglik(const pymf_tweedie *lik, const pymf_blocked_data *data,
                                const double *W, const double *Ht, int n_threads, double *out,
                                pymf_error *err);

/* The full likelihood gradient (gW, gHt overwritten): part after part, the blocks of a part
 * in parallel, so each entry of gW and gHt is accumulated in the same order for any thread
 * count. */
pymf_status pymf_tweedie_grad(const pymf_tweedie *lik, const pymf_blocked_data *data,
                              const double *W, const double *Ht, int n_threads, double *gW,
                              double *gHt, pymf_error *err);

/* out[e] = <W[rows[e]], Ht[cols[e]]> for n entries (any order, indices already checked). */
void pymf_predict_entries(const double *W, const double *Ht, int rank, int64_t n,
                          const int64_t *rows, const int64_t *cols, double *out);
#endif

#endif
