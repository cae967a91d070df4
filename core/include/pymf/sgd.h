/*
 * pymf/sgd.h: MAP optimisation baselines on the same model, grid and parts as the samplers:
 * SGD and DSGD (Gemulla, Nijkamp, Haas & Sismanis, KDD 2011).
 *
 * The objective is the negative log posterior, written as a sum over observed entries:
 *   L(W, H) = sum_ij [ d_beta(v_ij || mu_ij) / phi - log p(w_i) / N_i - log p(h_j) / N_j ]
 * (N_i, N_j: observed entries of row i, column j), so that the per-entry move
 *   w_i += eps * (g_ij h_j + grad log p(w_i) / N_i),  h_j += eps * (g_ij w_i + grad log p(h_j) / N_j)
 * with g_ij = d/dmu log p(v_ij | mu_ij) is an unbiased estimate of the gradient / N.
 * Non-negative models are projected onto W, H >= 0 after each move (no mirroring: this is
 * optimisation, not sampling).
 *   SGD:  iteration t = batch_size entries drawn with replacement (GSL), applied in order.
 *   DSGD: iteration t = one part (a "sub-epoch"); its B blocks in parallel, each visiting
 *         its entries once in a random order (GSL shuffle, one stream per row piece).
 * Every draw is reseeded from (schedule_seed, t): the same result for any thread count.
 */
#ifndef PYMF_SGD_H
#define PYMF_SGD_H

#include "pymf/blocks.h"
#include "pymf/nmf_model.h"

typedef enum { PYMF_OPT_SGD = 0, PYMF_OPT_DSGD = 1 } pymf_sgd_kind;

typedef struct {
    pymf_sgd_kind kind;
    int64_t batch_size;         /* SGD: entries per iteration */
    pymf_part_order part_order; /* DSGD */
    uint64_t schedule_seed;
    int n_threads;
} pymf_sgd_config;

typedef struct pymf_sgd pymf_sgd;

pymf_sgd *pymf_sgd_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                          const pymf_sgd_config *config, pymf_error *err);
void pymf_sgd_destroy(pymf_sgd *opt);
pymf_status pymf_sgd_set_state(pymf_sgd *opt, const double *W, const double *Ht, int64_t t,
                               pymf_error *err);
void pymf_sgd_get_state(const pymf_sgd *opt, double *W, double *Ht, int64_t *t);
/* n_iter iterations with step sizes step_sizes[0..n_iter-1]; a non-finite value restores
 * the state before the failing iteration and returns PYMF_EDIVERGED. */
pymf_status pymf_sgd_run(pymf_sgd *opt, int64_t n_iter, const double *step_sizes,
                         pymf_error *err);
pymf_status pymf_sgd_loglik(const pymf_sgd *opt, double *out, pymf_error *err);

#endif
