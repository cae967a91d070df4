/*
 * pymf/gibbs_nmf.h: the Gibbs sampler for Poisson NMF (Cemgil 2009), the PSGLD paper's
 * baseline: beta = 1, phi = 1, w_ik ~ E(lam_w), h_kj ~ E(lam_h), v_ij = sum_k s_ijk,
 * s_ijk ~ Poisson(w_ik h_kj).
 *
 * One sweep t (1-based) maps (W, H) to (W', H'), drawing S once per sweep:
 *   1. S | W, H: for every observed v_ij > 0, s_ij. ~ Multinomial(v_ij; w_ik h_kj / mu_ij),
 *      giving S_W[i,k] = sum_j s_ijk and S_H[j,k] = sum_i s_ijk (v_ij = 0 gives s_ij. = 0);
 *   2. W' | S, H:  w'_ik ~ Gamma(shape 1 + S_W[i,k], rate lam_w + sum_{j in obs(i)} h_kj);
 *   3. H' | S, W': h'_kj ~ Gamma(shape 1 + S_H[j,k], rate lam_h + sum_{i in obs(j)} w'_ik).
 * obs(i) is every column for dense data and the observed columns of row i for sparse data
 * (likewise obs(j)); unobserved entries do not enter the likelihood. GSL's gamma takes a
 * scale: the draws use 1 / rate.
 *
 * Determinism: the chain is a function of (seed, t) and the grid, never of the thread count.
 * Every row piece b of the grid owns a GSL mt19937 for steps 1 and 2, every column piece c
 * one for step 3; at sweep t generator (stream, piece) is set to
 *   pymf_stream_seed(pymf_mix64(seed ^ (stream << 48) ^ piece), t)      (rng.h)
 * with stream 1 (multinomials), 2 (W) and 3 (H). Threads take whole pieces (OpenMP static
 * schedule over row pieces, then row pieces, then column pieces). Each row piece keeps its
 * own copy of S_H; step 3 sums the copies in piece order. Dense rates are sums over rows /
 * columns in index order, the same order in which sparse data with every entry observed
 * sums them, so such data give the same chain as the dense matrix.
 *
 * Data must be non-negative integers below 2^32 (checked at creation, EINVAL naming the
 * entry). A sweep that meets v_ij > 0 with (W H)_ij = 0 or infinite (a bad starting state)
 * fails with EINVAL; a non-finite draw fails with EDIVERGED and err->iteration = t. Both keep
 * the state of sweep t - 1.
 */
#ifndef PYMF_GIBBS_NMF_H
#define PYMF_GIBBS_NMF_H

#include "pymf/blocks.h"
#include "pymf/nmf_model.h"

typedef struct {
    uint64_t seed;
    int n_threads; /* <= 0: OpenMP's default; more than B threads are not used */
} pymf_gibbs_config;

typedef struct pymf_gibbs_nmf pymf_gibbs_nmf;

/* model: beta = 1, phi = 1, exponential prior, lam_w, lam_h > 0 and finite (else EINVAL).
 * `data` must outlive the sampler. */
pymf_gibbs_nmf *pymf_gibbs_nmf_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                                      const pymf_gibbs_config *config, pymf_error *err);
void pymf_gibbs_nmf_destroy(pymf_gibbs_nmf *g);
/* W: I x K, Ht: J x K (H transposed), grid order, finite and >= 0; t = sweeps already done. */
pymf_status pymf_gibbs_nmf_set_state(pymf_gibbs_nmf *g, const double *W, const double *Ht,
                                     int64_t t, pymf_error *err);
void pymf_gibbs_nmf_get_state(const pymf_gibbs_nmf *g, double *W, double *Ht, int64_t *t);
void pymf_gibbs_nmf_set_threads(pymf_gibbs_nmf *g, int n_threads);
pymf_status pymf_gibbs_nmf_run(pymf_gibbs_nmf *g, int64_t n_sweeps, pymf_error *err);
/* Poisson log-likelihood of the current state (pymf_tweedie_loglik). */
pymf_status pymf_gibbs_nmf_loglik(const pymf_gibbs_nmf *g, double *out, pymf_error *err);

#endif
