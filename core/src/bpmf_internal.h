/*
 * core/src/bpmf_internal.h: what the BPMF files of the C core share beyond pymf/bpmf.h
 * (private: not installed with the public headers, not declared to Cython).
 *
 *   bpmf_model.c   the model: checks, predictions, residuals, the log posterior and its
 *                  gradient, the conjugate Gibbs draw of the precisions
 *   bpmf_block.c   the DSGLD kernel: one block's minibatch gradient estimator and steps
 *                  (what a thread or an MPI worker runs)
 *   bpmf_dsgld.c   the DSGLD driver: the schedule of orthogonal block groups, the bias
 *                  correctors, the hyper-parameter step between rounds, the chains in
 *                  shared memory
 *   bpmf_gibbs.c   the Gibbs baseline (pymf/bpmf_gibbs.h)
 */
#ifndef PYMF_BPMF_INTERNAL_H
#define PYMF_BPMF_INTERNAL_H

#include <gsl/gsl_rng.h>

#include "pymf/bpmf.h"

/* The Gibbs draw of the precisions given (U, V, a, b) from `rng` (bpmf_model.c):
 * lam ~ Gamma(alpha0 + n/2, rate beta0 + sum x^2 / 2), lam_u[k] and lam_v[k] for k = 0 ..
 * D - 1, then lam_a and lam_b when the model has biases. */
void pymf_bpmf_draw_precisions(const pymf_bpmf_model *model, int64_t n_users, int64_t n_items,
                               pymf_bpmf_params *p, gsl_rng *rng);
/* The Gibbs draw of the noise precision given the sum of squared residuals of n_ratings
 * ratings (bpmf_model.c): tau ~ Gamma(alpha0 + n/2, rate beta0 + S/2), stored in
 * p->lambdas[PYMF_BPMF_TAU(D)]; nothing (and no draw from rng) with a fixed tau. */
void pymf_bpmf_draw_tau(const pymf_bpmf_model *model, int64_t n_ratings, double sq_error,
                        pymf_bpmf_params *p, gsl_rng *rng);

#endif
