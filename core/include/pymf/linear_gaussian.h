/*
 * pymf/linear_gaussian.h: the linear-Gaussian model of the HAMCMC paper (Simsekli, Badeau,
 * Cemgil & Richard, ICML 2016, section 4.1), whose posterior is known exactly; the samplers
 * of pymf/sgmcmc.h run on it. (pymf_lg_ abbreviates pymf_linear_gaussian_.)
 *
 * Model: theta ~ N(0, prior_var I) in R^D, x_n | theta ~ N(a_n . theta, noise_var), n < N.
 * Potential U(theta) = -log p(theta) - sum_n log p(x_n | theta); its minibatch estimate
 * U_Omega scales the likelihood part by N / |Omega| (Omega drawn with replacement).
 */
#ifndef PYMF_LINEAR_GAUSSIAN_H
#define PYMF_LINEAR_GAUSSIAN_H

#include "pymf/common.h"

typedef struct {
    int64_t n_data;   /* N */
    int dim;          /* D */
    const double *A;  /* N x D, row-major: a_n is row n */
    const double *x;  /* N */
    double noise_var, prior_var;
} pymf_linear_gaussian;

/* grad U_Omega(theta) over the entries idx[0 .. n_idx - 1] (idx NULL: all N entries, scale 1).
 * With mean_lik not NULL, also the mean per-datum likelihood gradient over them. */
void pymf_lg_grad_potential(const pymf_linear_gaussian *m, const double *theta, const int64_t *idx,
                            int64_t n_idx, double *grad, double *mean_lik);

#endif
