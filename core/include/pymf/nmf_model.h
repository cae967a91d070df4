/*
 * pymf/nmf_model.h: the Tweedie NMF model that every NMF sampler and optimiser takes
 * (langevin.h: LD, SGLD, PSGLD; sgd.h: SGD, DSGD; gibbs_nmf.h: the Poisson Gibbs sampler):
 *   v_ij ~ Tweedie(mu_ij = <w_i, h_j>, phi, beta)                         (tweedie.h)
 *   w_ik, h_kj ~ Exponential(lam_w), Exponential(lam_h)   (non-negative), or
 *   w_ik, h_kj ~ N(0, 1 / lam_w), N(0, 1 / lam_h)         (real-valued).
 */
#ifndef PYMF_NMF_MODEL_H
#define PYMF_NMF_MODEL_H

#include "pymf/tweedie.h"

typedef enum { PYMF_PRIOR_EXPONENTIAL = 0, PYMF_PRIOR_GAUSSIAN = 1 } pymf_prior;

typedef struct {
    pymf_tweedie likelihood;
    pymf_prior prior;
    double lam_w, lam_h; /* exponential rates, or Gaussian precisions */
} pymf_nmf_model;

/* the likelihood's settings (pymf_tweedie_check) and positive, finite prior parameters */
pymf_status pymf_nmf_model_check(const pymf_nmf_model *model, pymf_error *err);

#endif
