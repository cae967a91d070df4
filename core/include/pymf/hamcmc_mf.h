/*
 * pymf/hamcmc_mf.h: HAMCMC (Simsekli, Badeau, Cemgil & Richard, ICML 2016; the maths in
 * pymf/sgmcmc.h) for Tweedie matrix factorisation (pymf/nmf_model.h), on the block grid of
 * parallel SGLD (pymf/blocks.h), as in the paper's section 4.3.
 *
 * The state is theta = (W, H^T) in grid order; the minibatch of iteration t is the part
 * Pi_t of the grid (cyclic or random, as PSGLD's), its gradient scaled N / |Pi_t|:
 *   grad U_t(theta) = grad(-log p(theta)) - (N / |Pi_t|) grad log p(V_Pi_t | theta).
 * Iteration t (1-based), memory M >= 2:
 *   t <= 2M: theta_t = theta_{t-1} - eps gamma grad U_t(theta_{t-1}) + sqrt(2 eps gamma) z
 *   t >  2M: theta_t = theta_{t-M} - eps H_t grad U_t(theta_{t-M}) + sqrt(2 eps) S_t z
 *   t >  M:  the pair s_t = theta_t - theta_{t-M},
 *            y_t = grad U_t(theta_t) - grad U_t(theta_{t-M}) + lambda s_t,
 * H_t, S_t the L-BFGS inverse Hessian and its square root from gamma I and the pairs
 * t-M+1 .. t-1 (pymf/lbfgs.h; pairs with s^T y <= 0 left out and counted); with scaled_gamma
 * H^0 = (s^T y / y^T y) I of the newest pair in H_t, whose s^T y and y^T y are entries of the
 * reduced Gram matrix (so the scale, too, is the same bits for any cut). The exponential
 * prior's support is the non-negative orthant: new states are mirrored (theta <- |theta|),
 * as PSGLD's are (exact for a diagonal preconditioner; with HAMCMC's dense H_t an
 * approximation at the boundary). The noise z of row i of W (of H^T) at iteration t is
 * Philox (seed, PYMF_STREAM_W (_H), t, i): it does not depend on how the work is cut.
 *
 * Blocks and determinism: block b of part p holds row piece b of W and column piece
 * c = (b + p) mod B of H^T; the part's B blocks touch disjoint pieces of theta and together
 * all of it. The gradients, the new state and the pairs of a block need only that block's
 * pieces. Every inner product of the L-BFGS products is an entry of the Gram matrix of
 * (s_1 .. s_m, y_1 .. y_m, grad, z) (pymf_lbfgs_gram_products), computed per block (one
 * running sum over the block's W rows, then its H rows) and reduced in block order from 0:
 * the chain is the same bits for any thread count, and an MPI ring of B ranks (one block
 * each, its H pieces passed on as PSGLD's are) reproduces it from the B partial Gram
 * matrices, one small reduction per iteration (pymf_hamcmc_mf_begin / _finish).
 *
 * A non-finite gradient or new state stops the run with PYMF_EDIVERGED naming the
 * iteration; nothing of that iteration is kept (the last finite state and its memory stay).
 */
#ifndef PYMF_HAMCMC_MF_H
#define PYMF_HAMCMC_MF_H

#include "pymf/blocks.h"
#include "pymf/nmf_model.h"

typedef struct {
    int memory;                 /* M >= 2 */
    double gamma;               /* H^0 = gamma I, > 0 */
    int scaled_gamma;           /* nonzero: t > 2M uses H^0 = (s^T y / y^T y) I of the newest
                                   pair in H_t (pymf_lbfgs_scaled_gamma, from the reduced Gram
                                   matrix), gamma only for t <= 2M and while no pair is usable */
    double lambda;              /* y += lambda s, >= 0 */
    pymf_part_order part_order; /* cyclic (t - 1) mod B, or random with prob |Pi| / N */
    uint64_t noise_seed;        /* Philox key of z */
    uint64_t schedule_seed;     /* GSL stream of random parts */
    int n_threads;              /* <= 0: OpenMP's default */
    int only_row_block;         /* MPI: this rank's block (-1: all; then use _run) */
    int langevin_only;          /* nonzero: every iteration is the gamma-preconditioned
                                   Langevin step from theta_{t-1} (SGLD on the grid's parts,
                                   i.e. PSGLD) and no pairs are formed */
} pymf_hamcmc_mf_config;

/* grad U over one block (row piece b, column piece c) at (W, Ht) (full grid-order arrays):
 * grad(-log prior) of the block's coordinates minus `scale` times the gradient of the
 * block's log-likelihood, written into the block's rows of gW and gHt only (so blocks of a
 * part run in parallel). Returns nonzero when every written value is finite. */
typedef int (*pymf_block_potential_grad)(const void *ctx, const pymf_blocked_data *data, int b,
                                         int c, double scale, const double *W,
                                         const double *Ht, double *gW, double *gHt);

/* The target of a chain: its gradient by block, the rank, whether the factors are
 * non-negative (new states mirrored at zero, starts and imports refused when negative) and
 * whether its steps are tamed. A tamed chain moves each coordinate d by the drift
 * delta_d = eps gamma grad_d (Langevin) or eps (H_t grad)_d (quasi-Newton) divided by
 * 1 + |delta_d| (coordinate-wise taming: Hutzenthaler, Jentzen & Kloeden 2012; Brosse,
 * Durmus, Moulines & Sabanis 2019), the noise unchanged. The drift's move is then below 1
 * per coordinate and step, whatever the gradient; it differs from the plain step by
 * O(delta^2), so the chain has the same limit as eps -> 0. For potentials whose gradient is
 * unbounded inside the support (alpha-stable MF near v = 0), where one plain step from a
 * small v throws the state orders of magnitude away. A tamed quasi-Newton chain also leaves
 * out the pairs along which U itself curves down, s^T y < lambda s^T s (i.e.
 * s^T (grad U_t(theta_t) - grad U_t(theta_{t-M})) < 0; counted as skipped): such a pair
 * passes the s^T y > 0 test only thanks to lambda, and its tiny s^T y puts a huge
 * eigenvalue into H_t, whose steps and noise along it then throw the state as far (the
 * alpha-stable likelihood is concave in v for large v). Tweedie chains are plain
 * (tamed = 0). */
typedef struct {
    pymf_block_potential_grad grad;
    const void *ctx; /* must outlive the sampler */
    int rank;
    int non_negative;
    int tamed;
} pymf_hamcmc_potential;

typedef struct pymf_hamcmc_mf pymf_hamcmc_mf;

/* `data` must outlive the sampler. */
pymf_hamcmc_mf *pymf_hamcmc_mf_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                                      const pymf_hamcmc_mf_config *config, pymf_error *err);
/* Another model's potential (pymf/alphamf.h): the same chain; pymf_hamcmc_mf_loglik is then
 * refused (the model's family computes its log-likelihood). */
pymf_hamcmc_mf *pymf_hamcmc_mf_create_potential(const pymf_hamcmc_potential *potential,
                                                const pymf_blocked_data *data,
                                                const pymf_hamcmc_mf_config *config,
                                                pymf_error *err);
void pymf_hamcmc_mf_destroy(pymf_hamcmc_mf *s);

/* Starts the chain at (W, H^T) (I x K, J x K, grid order; finite, >= 0 for the exponential
 * prior) as iteration 0, forgetting the memory. */
pymf_status pymf_hamcmc_mf_start(pymf_hamcmc_mf *s, const double *W, const double *Ht,
                                 pymf_error *err);
/* The current state theta_t (either pointer may be NULL) and t. */
void pymf_hamcmc_mf_get_state(const pymf_hamcmc_mf *s, double *W, double *Ht, int64_t *t);
/* The current state in place (grid order; valid until the chain next moves). */
void pymf_hamcmc_mf_current(const pymf_hamcmc_mf *s, const double **W, const double **Ht);
/* The state the next iteration t + 1 moves, in place: theta_{t+1-M} for a quasi-Newton
 * iteration, else theta_t (a family's Gibbs step conditions on it: pymf/alphamf.h). */
void pymf_hamcmc_mf_moved(const pymf_hamcmc_mf *s, const double **W, const double **Ht);
/* Whether iteration t is a quasi-Newton one (t > 2M, not langevin_only). */
int pymf_hamcmc_mf_quasi_newton(const pymf_hamcmc_mf *s, int64_t t);
/* The Philox key of the noise (other draws of a family's iteration use it with their own
 * stream). */
uint64_t pymf_hamcmc_mf_noise_seed(const pymf_hamcmc_mf *s);
void pymf_hamcmc_mf_set_threads(pymf_hamcmc_mf *s, int n_threads);
/* Memory pairs left out of the quasi-Newton steps because s^T y <= 0, or for a tamed
 * potential s^T y < lambda s^T s (each pair counted at its first use). */
int64_t pymf_hamcmc_mf_skipped_pairs(const pymf_hamcmc_mf *s);
/* The part used at iteration t. */
int pymf_hamcmc_mf_part(const pymf_hamcmc_mf *s, int64_t t);

/* n_iter iterations with step sizes eps[0 .. n_iter - 1] (positive, finite), every block
 * (only_row_block = -1). */
pymf_status pymf_hamcmc_mf_run(pymf_hamcmc_mf *s, int64_t n_iter, const double *eps,
                               pymf_error *err);

/* -sum d_beta / phi over the observed entries at the current state. */
pymf_status pymf_hamcmc_mf_loglik(const pymf_hamcmc_mf *s, double *out, pymf_error *err);

/* For tests: grad U_part(theta) over every block of `part` (gW: I x K, gHt: J x K). */
pymf_status pymf_hamcmc_mf_grad_potential(pymf_hamcmc_mf *s, const double *W, const double *Ht,
                                          int part, double *gW, double *gHt, pymf_error *err);
/* For tests: H g and S z (into hg_*, sz_*) with the memory iteration t + 1 would use, by
 * per-block Gram matrices over the blocks of its part; returns the number of pairs used in
 * *used. */
pymf_status pymf_hamcmc_mf_products(pymf_hamcmc_mf *s, const double *gW, const double *gHt,
                                    const double *zW, const double *zHt, double *hgW,
                                    double *hgHt, double *szW, double *szHt, int *used,
                                    pymf_error *err);

/* ---- distributed (only_row_block = b): one iteration is
 *   begin (this block's partial Gram matrix into partial, gram_len doubles),
 *   a reduction that gives every rank all B partial matrices (B x gram_len, block order),
 *   finish (the new state of this block, its pair, t + 1),
 * then the H pieces move to the ranks that work on them in the next part (get_piece /
 * set_piece): with part p_t, rank r holds piece (r + p_t) mod B, so each rank sends its piece
 * to rank r - (p_{t+1} - p_t) and receives from rank r + (p_{t+1} - p_t) (mod B), cyclic
 * and random parts alike. ---- */
int pymf_hamcmc_mf_gram_len(const pymf_hamcmc_mf *s);
pymf_status pymf_hamcmc_mf_begin(pymf_hamcmc_mf *s, double *partial, pymf_error *err);
pymf_status pymf_hamcmc_mf_finish(pymf_hamcmc_mf *s, double eps, const double *partials,
                                  pymf_error *err);
/* N and |Pi_p| of the whole data set, when `data` holds one row piece. */
pymf_status pymf_hamcmc_mf_set_totals(pymf_hamcmc_mf *s, int64_t n_observed,
                                      const int64_t *part_sizes, pymf_error *err);
/* Column piece c of H^T in every stored plane (window and pairs): piece_len doubles. */
int64_t pymf_hamcmc_mf_piece_len(const pymf_hamcmc_mf *s, int c);
void pymf_hamcmc_mf_get_piece(const pymf_hamcmc_mf *s, int c, double *out);
void pymf_hamcmc_mf_set_piece(pymf_hamcmc_mf *s, int c, const double *in);
/* Rows [c0, c1) of the current state's H^T. */
void pymf_hamcmc_mf_set_cols(pymf_hamcmc_mf *s, int64_t c0, int64_t c1, const double *in);

/* Everything the chain carries, for checkpoints: planes = 3M - 2 planes of W (I x K each)
 * and of H^T (J x K): the window (theta_u in plane u mod M), then s of pair tau in plane
 * M + tau mod (M - 1), then y in plane 2M - 1 + tau mod (M - 1). Planes not reached yet
 * hold zeros. */
int pymf_hamcmc_mf_planes(const pymf_hamcmc_mf *s);
void pymf_hamcmc_mf_export(const pymf_hamcmc_mf *s, double *W_planes, double *Ht_planes,
                           int64_t *t, int64_t *skipped_pairs);
/* Refused with PYMF_EINVAL (the chain left as it was) unless t >= 0, 0 <= skipped <= t,
 * every value is finite and the window is >= 0 under the exponential prior. */
pymf_status pymf_hamcmc_mf_import(pymf_hamcmc_mf *s, const double *W_planes,
                                  const double *Ht_planes, int64_t t, int64_t skipped_pairs,
                                  pymf_error *err);

#endif
