/*
 * pymf/lbfgs.h: L-BFGS inverse-Hessian products, as HAMCMC (pymf/sgmcmc.h, pymf/hamcmc_mf.h)
 * uses them: the two-loop recursion for H g and the product form of Brodlie, Gourlay and
 * Greenstadt (1973) for a square root S of H (S S^T = H).
 *
 * The recursions only add, scale and take inner products of vectors, so they are written
 * once over an inner product given by the caller (pymf_lbfgs_inner):
 *   - NULL: the vectors are the D coordinates themselves and <a, b> is pymf_dot_sequential
 *     (the linear-Gaussian chains, whose bits tests/test_golden.py pins);
 *   - pymf_lbfgs_gram_products: the vectors are coefficients over the basis
 *     (s_1 .. s_m, y_1 .. y_m, g, z) and <a, b> = a^T G b with G the basis' Gram matrix
 *     ("vector-free" L-BFGS). Every inner product of the recursions is then one of G's
 *     O(M^2) entries, which a distributed state computes as per-block partial sums reduced
 *     in a fixed order (HAMCMC for matrix factorisation: one reduction per iteration).
 */
#ifndef PYMF_LBFGS_H
#define PYMF_LBFGS_H

#include "pymf/common.h"

#include <math.h>
#include <stddef.h>

#include "pymf/linalg.h"

/* The inner product of the recursions: dot(a, b, dim, context) for two vectors of dim
 * values. A NULL pymf_lbfgs_inner means pymf_dot_sequential. */
typedef struct {
    double (*dot)(const double *a, const double *b, int dim, const void *context);
    const void *context;
} pymf_lbfgs_inner;

static inline double pymf_lbfgs_dot(const pymf_lbfgs_inner *inner, const double *a,
                                    const double *b, int dim)
{
    return inner == NULL ? pymf_dot_sequential(a, b, dim) : inner->dot(a, b, dim, inner->context);
}

/* s^T y > 0 (and finite): the pair (s, y) keeps H positive definite; *sy receives s^T y. */
static inline int pymf_lbfgs_pair_usable(int D, const double *s, const double *y,
                                         const pymf_lbfgs_inner *inner, double *sy)
{
    *sy = pymf_lbfgs_dot(inner, s, y, D);
    return isfinite(*sy) && *sy > 0.0;
}

/* L-BFGS products from H^0 = gamma I and n_pairs pairs (s_i, y_i), oldest first (rows of
 * S and Y, n_pairs x D); pairs with s^T y <= 0 are left out (as in the sampler):
 *   pymf_lbfgs_apply:      out = H g (two-loop recursion, O(n_pairs D))
 *   pymf_lbfgs_sqrt_apply: out = S z with S S^T = H (product form, O(n_pairs^2 D)).
 * inner: the inner product (NULL: pymf_dot_sequential). work: 4 n_pairs D + 2 D doubles.
 * Returns the number of pairs used. */
int pymf_lbfgs_apply(int dim, int n_pairs, const double *S, const double *Y, double gamma,
                     const double *g, double *out, double *work, const pymf_lbfgs_inner *inner);
int pymf_lbfgs_sqrt_apply(int dim, int n_pairs, const double *S, const double *Y, double gamma,
                          const double *z, double *out, double *work,
                          const pymf_lbfgs_inner *inner);

/* The standard scaling of H^0 (Nocedal & Wright, Numerical Optimization, eq. 7.20):
 * gamma = s^T y / y^T y of the newest pair that enters H (s^T y > 0), i.e. the inverse of a
 * Rayleigh quotient of the average Hessian along s, so that H^0 = gamma I has the size of
 * the inverse Hessian in the direction of the latest step. Returns `fallback` when no pair
 * is usable. Same inner-product convention as the products above. */
double pymf_lbfgs_scaled_gamma(int dim, int n_pairs, const double *S, const double *Y,
                               double fallback, const pymf_lbfgs_inner *inner);

/* Both products in the coefficients of the basis (s_0 .. s_{m-1}, y_0 .. y_{m-1}, g, z),
 * n = 2 m + 2 vectors, from their Gram matrix gram (n x n, symmetric, row-major):
 * H g = sum_i step[i] basis_i and S z = sum_i noise[i] basis_i, from H^0 = gamma I, or
 * (scaled_gamma != 0) from pymf_lbfgs_scaled_gamma's H^0 with gamma as its fallback (its
 * s^T y and y^T y are entries of gram). work: pymf_lbfgs_gram_work(m) doubles. *usable (m
 * flags, may be NULL): whether pair i entered H. *gamma_used (may be NULL): the H^0 scale.
 * Returns the number of pairs used. */
int pymf_lbfgs_gram_products(int m, const double *gram, double gamma, int scaled_gamma,
                             double *step, double *noise, int *usable, double *gamma_used,
                             double *work);
static inline int pymf_lbfgs_gram_work(int m)
{
    const int n = 2 * m + 2;
    return (2 * m + 3) * n + 4 * m * n + 2 * n;
}

#endif
