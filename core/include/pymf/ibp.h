/*
 * pymf/ibp.h: linear-Gaussian latent features under the Indian Buffet Process, sampled by
 * collapsed Gibbs (Griffiths & Ghahramani 2005) and by the hybrid parallel sampler of
 * Zhang, Dubey & Williamson ("Parallel MCMC for the Indian Buffet Process", Algorithm 1).
 *
 * Model: X = Z A + E, Z ~ IBP(alpha), A_k ~ N(0, sigma_A^2 I_D), E_nd ~ N(0, sigma_X^2).
 * Hyper-priors (the paper gives none; these are the authors' code's):
 *   sigma_X^2 ~ InvGamma(sx_shape, sx_scale), sigma_A^2 ~ InvGamma(sa_shape, sa_scale),
 *   alpha ~ Gamma(alpha_shape, rate alpha_rate), so alpha | Z ~ Gamma(alpha_shape + K+,
 *   rate alpha_rate + H_N), H_N = sum_{n<=N} 1/n. Defaults (Python): all (1, 1).
 *
 * Held-out cells (observed[n*D+d] == 0) are latent variables: their values are drawn from
 * N(z_n A_d, sigma_X^2) once per iteration, after A (exact data augmentation). The core
 * never reads the value stored in a held-out cell.
 *
 * The collapsed block ("tail"). For a set of features collapsed over their loadings, on
 * data Y (the data, or in the hybrid the residual Y = X - Z+ A+), the core keeps
 *   M = (Z'Z + r I)^-1 with r = sigma_X^2 / sigma_A^2,  S = Z'Y,  Abar = M S,
 *   logdet = log |Z'Z + r I|.
 * Row n is taken out by one rank-one downdate (Sherman-Morrison, and the determinant lemma
 * for logdet: |P - z z'| = |P| (1 - z'Mz)) and put back by one rank-one update; between
 * them every flip of z_nk is scored by the predictive density
 *   y_n | z_n, rest ~ N(z_n Abar_-n, sigma_X^2 (1 + z_n M_-n z_n') I_D)
 * whose mean and variance move by O(D + K) per flip (the rank-one updates of M and of
 * log|M| that a flip implies, in closed form). No O(K^3) work happens per flip; M, S, Abar
 * and logdet are recomputed from Z once per sweep (collapsed) or per sub-iteration (tail),
 * which also bounds the rounding drift of the updates.
 * Singletons (features owned by row n alone) are handled as Meeds et al. (2007) and Knowles &
 * Ghahramani (2007): they are not Gibbs-sampled; a Metropolis-Hastings step proposes to
 * replace the row's k_old singletons by k_new ~ Poisson(alpha / N) fresh ones and accepts
 * with the ratio of the predictive densities (the prior and the proposal cancel). A fresh
 * feature adds sigma_A^2 to the predictive variance and nothing to its mean. A row visits
 * its features in a random order drawn for it: the singleton step appends new features
 * last, so a sweep in label order depends on that order and biased the chain (+1 % on
 * E[K+] against exact enumeration).
 *
 * Collapsed Gibbs: one process holding every row; all features live in the collapsed block.
 * One iteration = one sweep over the rows, then A | Z, Y, sigma_X^2 | A, sigma_A^2 | A,
 * alpha | Z, and the held-out cells | Z, A (A is drawn before it is used and integrated out
 * again by the next sweep: a partially collapsed Gibbs sampler, van Dyk & Park 2008).
 *
 * Hybrid (paper Algorithm 1). Rows are split into P contiguous pieces ("processes";
 * process p owns rows [N p / P, N (p + 1) / P)). One iteration:
 *   - p' ~ Uniform{0..P-1} from the master stream (one process, never several);
 *   - L sub-iterations: every process updates z_nk, k < K+, on its rows given pi_k and A
 *     (uncollapsed), but only for the features another row of its own process owns: that
 *     set depends only on rows the update of row n leaves alone, and no feature loses its
 *     last owner here, so births and deaths both happen in p' collapsed tail and balance.
 *     The paper's step (every row may drop any feature given pi_k while only p' rows can
 *     gain new ones) under-weights small features: tests/test_ibp.py's enumeration of a
 *     3 x 2 matrix measured max |z| of 42 (P = 2) and 66 (P = 3) for it, under 2 for this;
 *   - then L sub-iterations of p' alone: its tail holds the features that no other process
 *     uses after the first stage (their A_k, pi_k integrated out) and new ones, collapsed
 *     (prior (m_k - z_nk) / N, m_k counted on p' rows, the only ones that own them), with
 *     the other features' A fixed, and it proposes new features by MH as above. Collapsed
 *     updates dissolve a feature fitted to its few owners' noise, which updates given A_k
 *     almost never do (the over-splitting of the authors' code). The tail is chosen after
 *     the first stage, from rows the second stage does not change: deciding it at the
 *     start instead, while the other processes update, would freeze their z_nk of those
 *     features at 0 depending on the state, which biases the chain (the enumeration test
 *     caught it). The other processes wait during the second stage, as they wait for p'
 *     in the paper's algorithm, whose p' does both in each sub-iteration;
 *   - the sufficient statistics of every process (m, Z'Z, Z'Y, sum of y^2 over the K+ +
 *     K* features) are summed in process order; the master merges the new features, drops
 *     empty ones, draws A | Z, Y, pi_k ~ Beta(m_k, 1 + N - m_k), sigma_X^2, sigma_A^2 and
 *     alpha; every process then draws its held-out cells.
 *   - warm start: during the first warm_start iterations every process keeps a tail and
 *     proposes new features (a burn-in heuristic, as in the authors' code); they are merged
 *     in process order.
 * Split-merge moves (config.split_merge proposals per iteration; Jain & Neal 2004 with
 * Dahl's sequential allocation, as Meeds et al. 2007 adapt split-merge to the IBP). They
 * are Metropolis-Hastings moves on p(Z | Y, sigma_X, sigma_A, alpha) with A (and pi)
 * integrated out. Target, for Z as a list of K distinguishable non-empty columns:
 *   P(Z) = alpha^K / K! exp(-alpha H_N) prod_k f(m_k),  f(m) = (N - m)! (m - 1)! / N!
 * (summing over the K! / prod_h K_h! orders of a left-ordered-form class gives Griffiths &
 * Ghahramani's eq. 14), times log p(Y | Z) = K D log(sigma_X / sigma_A) - D/2 log|Z'Z + rI|
 * + tr(S' M S) / (2 sigma_X^2) + const, read off the collapsed block (an empty column adds
 * D log(sigma_X/sigma_A) - D/2 log r = 0). One proposal:
 *   - rows i != j uniformly (an ordered pair); k uniformly among i's features, l among j's
 *     (either has none: no move);
 *   - k == l: split k. i keeps k, j takes a new feature k'; the other owners of k, in a
 *     uniformly random order, are each allocated to "k only", "k' only" or "both" with
 *     probability proportional to w_o p(y_n | the rows allocated so far, every row that
 *     does not own k) (the collapsed predictive, the row's other features as they are;
 *     w_o from independent p_k = (m_k + 1/2) / (c + 1), p_k' likewise over the c rows
 *     allocated so far, anchors included). q = the product of the chosen probabilities;
 *   - k != l, i not owning l and j not owning k: merge them (every owner of either owns k;
 *     l is dropped). q = the probability that the split from the merged state (same i, j
 *     and order) allocates the rows as they are now, computed by running the allocation
 *     forced to the current Z. An anchor owning both: no move (no split makes that);
 *   - accept a split with min(1, alpha f(m_k) f(m_k') / f(m) * L'/L / q) (m: the owners
 *     of k before it), a merge with the inverse form times q. A merge draws its uniform
 *     first and computes q only if the rest of the ratio does not already refuse it
 *     (q <= 1: the same decision). The pick probabilities 1/(N(N-1) |F_i| |F_j|) are the
 *     same both ways (the anchors own one of the two features each), and the K! of the
 *     labelled prior cancels the 1/(K+1) of the place the new column takes among the K+1
 *     (pymf appends it; no move depends on the order of the columns).
 * Cost per proposal, for m owners of the feature(s): taking them out (and a merge's putting
 * them back merged) in one pass, S and the counts row by row and M, Abar, logdet factorised
 * afresh from the Gram matrix of the rows left, O(m nnz D + N nnz K + K^3 + K^2 D) (nnz: a
 * row's features); the sequential allocation (a split, and a merge that the rest of its
 * ratio does not already refuse) by rank-one updates, O(m (K^2 + K D)) (a row's three
 * allocations share one base, so scoring them adds O(D) each); a rejected proposal
 * restores Z's two columns and a saved copy of M, S, Abar, logdet (O(K^2 + K D)). At
 * N = 1000, K about 6 the one-pass removal and put-back cost a fifth of the rank-one
 * updates they replaced (the same draws; only rounding differs). Collapsed Gibbs makes the
 * moves after its sweep on the block it keeps; the hybrid's master after its step, on a
 * block of every row built from Z and Y (O(N K^2 + N K D)); if a move was accepted it
 * draws A | Z, Y and pi_k ~ Beta(m_k, 1 + N - m_k) again (a partially collapsed step: a
 * move that keeps p(Z | Y, hyper) followed by p(A, pi | Z, Y, hyper); on rejection the old
 * A, pi already are a draw from it). The moves draw from their own stream (seed, 4, t). An MPI rank
 * gathers every row's Z and Y and makes the same moves; it keeps its own rows.
 * Random numbers: process p uses a GSL mt19937 reseeded at iteration t from (seed, p, t)
 * (pymf/rng.h), the master its own stream; threads only pick who runs which process, so the
 * chain depends on P, never on the thread count, and an MPI job with one process per rank
 * (the same calls with the statistics exchanged in between) gives the same bits.
 */
#ifndef PYMF_IBP_H
#define PYMF_IBP_H

#include "pymf/common.h"

typedef struct {
    double alpha_shape, alpha_rate;  /* Gamma prior of alpha (shape, rate) */
    double sx_shape, sx_scale;       /* InvGamma prior of sigma_X^2 */
    double sa_shape, sa_scale;       /* InvGamma prior of sigma_A^2 */
    int sample_alpha, sample_sigma_x, sample_sigma_a;  /* 0: kept at the value set */
} pymf_ibp_prior;

typedef struct {
    int collapsed;          /* 1: collapsed Gibbs (n_processes must be 1); 0: hybrid */
    int n_processes;        /* P: defines the chain */
    int sub_iterations;     /* L (hybrid) */
    int64_t warm_start;     /* hybrid: iterations in which every process proposes features */
    uint64_t seed;
    int n_threads;          /* <= 0: OpenMP's default; never changes the chain */
    int first_process;      /* the processes this object runs: [first, first + n_local) */
    int n_local;            /* (threads: 0 and P; an MPI rank: its own) */
    int split_merge;        /* split-merge proposals per iteration; 0: none */
    int split_merge_flaw;   /* tests only: 1 drops the allocation probability from the
                               Metropolis-Hastings ratio (a wrong move, for power checks) */
    int max_features;       /* >= 1: the most features the chain may hold (Python passes
                               pymf.ibp.chain.MAX_FEATURES). A step whose outcome would hold
                               more (a row's new features, a split, the master's merge) stops
                               the run with PYMF_EDIVERGED naming the iteration, the count,
                               the cap and alpha; the state goes back to the end of the last
                               iteration. Proposals are never truncated: below the cap the
                               chain is the same bits (the checks draw no random numbers). */
} pymf_ibp_config;

/* The rows [row_offset, row_offset + n_rows) of an N_total x D matrix, row-major.
 * observed: 1 for a training cell, 0 for a held-out one; NULL: all observed. */
typedef struct {
    int64_t n_total, row_offset, n_rows;
    int n_cols;
    const double *X;
    const unsigned char *observed;
} pymf_ibp_data;

typedef struct pymf_ibp pymf_ibp;

pymf_ibp *pymf_ibp_create(const pymf_ibp_data *data, const pymf_ibp_prior *prior,
                          const pymf_ibp_config *config, pymf_error *err);
void pymf_ibp_destroy(pymf_ibp *s);
void pymf_ibp_set_threads(pymf_ibp *s, int n_threads);

/* hyper = (sigma_x, sigma_a, alpha); Z: every row (N_total x K, 0/1: each object takes its
 * rows, and the counts of every process), A: K x D, pi: K
 * (hybrid; ignored by collapsed Gibbs); Y_missing: the held-out cells' current values in
 * row-major order of this object's rows (NULL: start them at z_n A_d). */
pymf_status pymf_ibp_set_state(pymf_ibp *s, int K, const double *Z, const double *A,
                               const double *pi, const double *hyper, const double *Y_missing,
                               int64_t iteration, pymf_error *err);
int pymf_ibp_n_features(const pymf_ibp *s);
int64_t pymf_ibp_n_missing(const pymf_ibp *s);
int64_t pymf_ibp_iteration(const pymf_ibp *s);
void pymf_ibp_get_state(const pymf_ibp *s, double *Z, double *A, double *pi, double *hyper,
                        double *Y_missing);

/* Threads: n_iterations whole iterations (needs n_local == n_processes). A failure inside
 * an iteration (the feature cap, a matrix that is not positive definite, ...) puts the
 * state back as the last completed iteration left it (pymf_ibp_abort). */
pymf_status pymf_ibp_run(pymf_ibp *s, int64_t n_iterations, pymf_error *err);
/* Abandons the iteration begun (if any): Z, K and the split-merge counts go back to what
 * they were when it began (saved by begin; A, pi, the hyper-parameters and the held-out
 * cells change only when the master commits). An MPI job calls it on every rank when a
 * step failed on any of them; without an iteration begun it does nothing. */
void pymf_ibp_abort(pymf_ibp *s);

/* The steps of one iteration, for a job whose processes live in several address spaces:
 *   begin -> local_sweeps -> local_counts -> (gather every process's counts, P x K+)
 *   -> tail_sweeps(all counts) -> new_features -> (gather every process's count)
 *   -> local_stats(new_features of all P) -> (sum every process's buffer in process order)
 *   -> master(summed)
 * stats_size(K, D) doubles per process, K = K+ plus every process's new features
 * (m, Z'Z, Z'Y, sum of y^2). */
int pymf_ibp_active_process(const pymf_ibp *s);  /* p' of the iteration begun */
pymf_status pymf_ibp_begin(pymf_ibp *s, pymf_error *err);
pymf_status pymf_ibp_local_sweeps(pymf_ibp *s, pymf_error *err);
void pymf_ibp_local_counts(const pymf_ibp *s, double *counts_local);  /* n_local x K+ */
pymf_status pymf_ibp_tail_sweeps(pymf_ibp *s, const double *counts_all, pymf_error *err);
void pymf_ibp_new_features(const pymf_ibp *s, int *counts_local);
int64_t pymf_ibp_stats_size(int K, int D);
/* The feature cap after the tail stage (hybrid), from every process's new-feature count:
 * PYMF_EDIVERGED (the iteration abandoned, pymf_ibp_abort) when the chain surely holds more
 * than config.max_features. Call it before local_stats and before sizing the statistics'
 * buffers (pymf_ibp_run and _ibp.Chain.local_stats do). Every rank decides alike. Collapsed Gibbs: PYMF_OK (its sweep checks each row). */
pymf_status pymf_ibp_check_new_features(pymf_ibp *s, const int *new_features_all,
                                        pymf_error *err);
pymf_status pymf_ibp_local_stats(pymf_ibp *s, const int *new_features_all, double *stats_local,
                                 pymf_error *err);
pymf_status pymf_ibp_master(pymf_ibp *s, const double *stats_summed, pymf_error *err);

/* Split-merge moves (config.split_merge proposals), between iterations. Hybrid: after
 * master, on every row; an object that holds every process passes NULL, NULL, an MPI rank
 * every row's Z (N x K) and Y (N x D, held-out cells as imputed), and keeps its own rows.
 * Collapsed Gibbs runs its moves inside local_sweeps; called between iterations it runs
 * one round on the current state (the tests' entry). */
pymf_status pymf_ibp_split_merge(pymf_ibp *s, const double *Z_all, const double *Y_all,
                                 pymf_error *err);
/* splits proposed, splits accepted, merges proposed, merges accepted since creation (or
 * as set: a checkpoint carries them) */
void pymf_ibp_split_merge_counts(const pymf_ibp *s, int64_t *counts);
void pymf_ibp_set_split_merge_counts(pymf_ibp *s, const int64_t *counts);

/* Collapsed block of the collapsed sampler, for the tests: M (K x K) and log|Z'Z + rI| as
 * the rank-one updates left them. Returns K. */
int pymf_ibp_collapsed_block(const pymf_ibp *s, double *M, double *logdet);

/* The rank-one steps, exposed for the tests: M <- (M^-1 + sign z z')^-1 in place (K x K,
 * symmetric) and *logdet_inv += log(1 + sign z'Mz) (log|M^-1|). */
pymf_status pymf_ibp_rank_one(double *M, int K, const double *z, int sign, double *logdet_inv,
                              pymf_error *err);
/* log p(Y | Z) with A integrated out (Griffiths & Ghahramani eq. 25). */
pymf_status pymf_ibp_collapsed_loglik(const double *Z, const double *Y, int64_t N, int K, int D,
                                      double sigma_x, double sigma_a, double *out,
                                      pymf_error *err);

#endif
