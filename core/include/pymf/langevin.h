/*
 * pymf/langevin.h: Langevin samplers for Tweedie matrix factorisation (PSGLD paper, sections
 * 2-3): LD (full gradient), SGLD (minibatch of entries with replacement) and PSGLD (one
 * part of the block grid per iteration, its blocks in parallel).
 *
 * One iteration t (1-based) maps theta = (W, H) to
 *   theta + eps_t * (scale * grad log p(V_sub | theta) + grad log p(theta)) + sqrt(2 eps_t) z
 * with z from the Philox stream (philox.h) and, for the exponential prior, the mirroring
 * theta <- |theta| (the prior's support is the non-negative orthant).
 *   LD:    V_sub = all entries, scale = 1
 *   SGLD:  V_sub = |Omega| entries drawn with replacement, scale = N / |Omega|
 *   PSGLD: V_sub = the part chosen for t, scale = N / |Pi_t|
 * The new state is built in a second buffer and only replaces the current one when every
 * entry is finite: a diverging chain stops with PYMF_EDIVERGED and keeps its last finite
 * state.
 */
#ifndef PYMF_LANGEVIN_H
#define PYMF_LANGEVIN_H

#include "pymf/blocks.h"
#include "pymf/nmf_model.h"

typedef enum { PYMF_LD = 0, PYMF_SGLD = 1, PYMF_PSGLD = 2 } pymf_langevin_kind;

typedef struct {
    pymf_langevin_kind kind;
    int64_t batch_size;          /* SGLD: |Omega| */
    pymf_part_order part_order;  /* PSGLD: cyclic (t-1) mod B, or random with prob |Pi|/N */
    uint64_t noise_seed;         /* Philox key */
    uint64_t schedule_seed;      /* GSL stream for minibatches and random parts */
    int n_threads;               /* <= 0: OpenMP's default */
    int only_row_block;          /* PSGLD, distributed: update only the block of this row piece
                                    (-1: every block of the part) */
    /* The sampled dispersion (beta = 2 only; phi_every = 0: phi stays the model's). After
     * every iteration t with t % phi_every == 0 the chain draws phi from its conditional,
     * pymf_langevin_draw_phi with the full data's half residual sum of squares; a chain with
     * only_row_block >= 0 leaves that to its caller, who sums the ranks' pieces. */
    int64_t phi_every;
    double phi_shape, phi_rate;  /* phi ~ InvGamma(phi_shape, phi_rate) a priori */
    uint64_t phi_seed;           /* the GSL stream of the phi draws */
    /* 1: iteration t's step is step_sizes[t] * phi / phi_ref, phi the current one (a step
     * chosen for the curvature at phi_ref keeps its eps * lambda as phi moves: the
     * likelihood's curvature is proportional to 1 / phi); 0: the steps as given. */
    int scale_step_by_phi;
    double phi_ref;
} pymf_langevin_config;

typedef struct pymf_langevin pymf_langevin;

/* `data` must outlive the sampler. */
pymf_langevin *pymf_langevin_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                                    const pymf_langevin_config *config, pymf_error *err);
void pymf_langevin_destroy(pymf_langevin *sampler);

/* W: I x K, Ht: J x K, grid order; t = iterations already done. */
pymf_status pymf_langevin_set_state(pymf_langevin *sampler, const double *W, const double *Ht,
                                    int64_t t, pymf_error *err);
void pymf_langevin_get_state(const pymf_langevin *sampler, double *W, double *Ht, int64_t *t);
void pymf_langevin_set_threads(pymf_langevin *sampler, int n_threads);

/* Runs n_iter iterations with step sizes step_sizes[0..n_iter-1]. */
pymf_status pymf_langevin_run(pymf_langevin *sampler, int64_t n_iter, const double *step_sizes,
                              pymf_error *err);

/* Distributed runs: N and |Pi_p| of the whole data set, when `data` holds one row piece.
 * part_sizes has B entries and is copied. */
pymf_status pymf_langevin_set_totals(pymf_langevin *sampler, int64_t n_observed,
                                     const int64_t *part_sizes, pymf_error *err);

/* Rows [c0, c1) of H^T (a column piece): read from, or written into, the current state.
 * The MPI ring passes H blocks with these. */
void pymf_langevin_get_cols(const pymf_langevin *sampler, int64_t c0, int64_t c1, double *out);
void pymf_langevin_set_cols(pymf_langevin *sampler, int64_t c0, int64_t c1, const double *in);

/* The current state's rows of H^T from row c0 on, in place: valid until the next run or
 * set_state (the state is double-buffered). The MPI ring sends from and receives into it
 * without a copy. */
double *pymf_langevin_cols(pymf_langevin *sampler, int64_t c0);

/* The part (0..B-1) that PSGLD uses at iteration t (1-based). */
int pymf_langevin_part(const pymf_langevin *sampler, int64_t t);

pymf_status pymf_langevin_loglik(const pymf_langevin *sampler, double *out, pymf_error *err);

/* The sampled dispersion of the Gaussian model (beta = 2). half_rss: sum over this chain's
 * entries of d_2(v || mu) = (v - mu)^2 / 2 at the current state, summed in the order of
 * pymf_langevin_loglik (row pieces in turn), so that the pieces of a distributed run add up
 * to the shared-memory value bit for bit. draw_phi: phi ~ InvGamma(phi_shape + N/2,
 * phi_rate + half_rss_total), the exact conditional given W and H, from the GSL stream
 * seeded by (phi_seed, t); it becomes the chain's phi. */
pymf_status pymf_langevin_half_rss(const pymf_langevin *sampler, double *out, pymf_error *err);
pymf_status pymf_langevin_draw_phi(pymf_langevin *sampler, double half_rss_total, int64_t t,
                                   pymf_error *err);
double pymf_langevin_phi(const pymf_langevin *sampler);
pymf_status pymf_langevin_set_phi(pymf_langevin *sampler, double phi, pymf_error *err);

/* Per-coordinate step factors (PSGLD's per-row bound, pymf.engine.autostep point 5): from
 * iteration from_t on, coordinate e of W (I x K) and of H^T (J x K) moves with the step
 * eps * c_e, drift eps c_e g_e and noise N(0, 2 eps c_e): a constant diagonal preconditioner,
 * which leaves the posterior stationary without a correction term. step_W, step_Ht (grid
 * order, every row, each c in (0, 1]) are copied; NULL for both removes them. Before from_t
 * and without factors the chain runs the unchanged code (the same bits as before). */
pymf_status pymf_langevin_set_row_steps(pymf_langevin *sampler, const double *step_W,
                                        const double *step_Ht, int64_t from_t, pymf_error *err);

/* The Fisher (Gauss-Newton) curvature of the likelihood, row by row, over the entries of
 * block (b, c) held by this chain, at the current state and phi = 1: for each entry (i, j),
 * weight mu_ij^(beta - 2) (mu floored as the gradient floors it),
 *   fisher_W[i - r0]  += weight h_j h_j^T   (rows r0..r1 of row piece b), unless NULL
 *   fisher_Ht[j - c0] += weight w_i w_i^T   (columns c0..c1 of column piece c), unless NULL
 * K x K row-major blocks; only the upper triangles are summed (pymf_langevin_fisher_mirror
 * fills the lower ones). Entries in the layout's order: blocks (b, 0..B-1) in turn give a
 * row piece's rows, blocks (0..B-1, c) a column piece's columns, the same bits whether one
 * process adds them or B ranks, each with its row piece, pass the column buffer along. */
pymf_status pymf_langevin_fisher_block(const pymf_langevin *sampler, int b, int c,
                                       double *fisher_W, double *fisher_Ht, pymf_error *err);
/* Copies the upper triangle of n K x K blocks into their lower triangle. */
void pymf_langevin_fisher_mirror(int rank, int64_t n, double *fisher);

/* SGLD's minibatch for iteration t: batch_size indices into the N observed entries (grid
 * order, dense entries numbered row-major). Exposed for the pygsl reference test. */
pymf_status pymf_sgld_minibatch(uint64_t schedule_seed, int64_t t, int64_t n_observed,
                                int64_t batch_size, int64_t *out, pymf_error *err);

#endif
