/*
 * pymf/gibbs_nmf.h: the Gibbs sampler for Poisson NMF (Cemgil 2009), the PSGLD paper's
 * baseline: beta = 1, phi = 1, w_ik ~ E(lam_w), h_kj ~ E(lam_h), v_ij = sum_k s_ijk,
 * s_ijk ~ Poisson(w_ik h_kj).
 *
 * One sweep t:
 *   1. for every observed v_ij > 0: s_ij. ~ Multinomial(v_ij; w_ik h_kj / mu_ij), giving
 *      S_W[i,k] = sum_j s_ijk and S_H[j,k] = sum_i s_ijk (entries with v_ij = 0 have s = 0);
 *   2. w_ik ~ Gamma(1 + S_W[i,k], rate lam_w + sum_{j observed in row i} h_kj);
 *   3. h_kj ~ Gamma(1 + S_H[j,k], rate lam_h + sum_{i observed in column j} w_ik), new W.
 * Randomness: GSL mt19937, one generator per row piece (steps 1, 2) or column piece (step 3),
 * reseeded at every sweep from (seed, stream, piece, t), so the chain is the same for any
 * thread count. Column statistics are summed over row pieces in piece order.
 * Data must be non-negative integers below 2^32 (checked at creation).
 */
#ifndef PYMF_GIBBS_NMF_H
#define PYMF_GIBBS_NMF_H

#include "pymf/sgld.h"

typedef struct {
    uint64_t seed;
    int n_threads;
} pymf_gibbs_config;

typedef struct pymf_gibbs_nmf pymf_gibbs_nmf;

pymf_gibbs_nmf *pymf_gibbs_nmf_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                                      const pymf_gibbs_config *config, pymf_error *err);
void pymf_gibbs_nmf_destroy(pymf_gibbs_nmf *g);
pymf_status pymf_gibbs_nmf_set_state(pymf_gibbs_nmf *g, const double *W, const double *Ht,
                                     int64_t t, pymf_error *err);
void pymf_gibbs_nmf_get_state(const pymf_gibbs_nmf *g, double *W, double *Ht, int64_t *t);
pymf_status pymf_gibbs_nmf_run(pymf_gibbs_nmf *g, int64_t n_sweeps, pymf_error *err);
pymf_status pymf_gibbs_nmf_loglik(const pymf_gibbs_nmf *g, double *out, pymf_error *err);

#endif
