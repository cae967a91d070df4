/*
 * pymf/lbfgs.h: L-BFGS inverse-Hessian products, as HAMCMC (pymf/sgmcmc.h) uses them: the
 * two-loop recursion for H g and the product form of Brodlie, Gourlay and Greenstadt (1973)
 * for a square root S of H (S S^T = H).
 */
#ifndef PYMF_LBFGS_H
#define PYMF_LBFGS_H

#include "pymf/common.h"

#include <math.h>

#include "pymf/linalg.h"

/* s^T y > 0 (and finite): the pair (s, y) keeps H positive definite; *sy receives s^T y. */
static inline int pymf_lbfgs_pair_usable(int D, const double *s, const double *y, double *sy)
{
    *sy = pymf_dot_sequential(s, y, D);
    return isfinite(*sy) && *sy > 0.0;
}

/* L-BFGS products from H^0 = gamma I and n_pairs pairs (s_i, y_i), oldest first (rows of
 * S and Y, n_pairs x D); pairs with s^T y <= 0 are left out (as in the sampler):
 *   pymf_lbfgs_apply:      out = H g (two-loop recursion, O(n_pairs D))
 *   pymf_lbfgs_sqrt_apply: out = S z with S S^T = H (product form, O(n_pairs^2 D)).
 * work: 4 n_pairs D + 2 D doubles. Returns the number of pairs used. */
int pymf_lbfgs_apply(int dim, int n_pairs, const double *S, const double *Y, double gamma,
                     const double *g, double *out, double *work);
int pymf_lbfgs_sqrt_apply(int dim, int n_pairs, const double *S, const double *Y, double gamma,
                          const double *z, double *out, double *work);

#endif
