/*
 * pymf/alphamf.h: alpha-stable matrix factorisation (Simsekli, Liutkus & Cemgil 2015), sampled
 * by Metropolis and SG-MCMC within Gibbs as in the HAMCMC paper's section 4.2 (real-valued
 * data; the paper's speech spectrograms are complex).
 *
 * Model (v = W H, I x J, every entry of X real):
 *   W_ik ~ GG(a_w, b_w, p), H_kj ~ GG(a_h, b_h, p), p = 2 / alpha:
 *          generalised gamma (Stacy 1962) with density p(x) = p b^(a/p) / Gamma(a/p)
 *          x^(a-1) exp(-b x^p), x >= 0 (x^p ~ Gamma(a/p, rate b));
 *   X_ij | W, H ~ SaS with scale sigma_ij = v_ij^(1/alpha): E[exp(i t X)] = exp(-v_ij |t|^alpha);
 * written conditionally Gaussian by the product property:
 *   Phi_ij = 2 A_ij,  A ~ S(alpha/2, 1, cos(pi alpha / 4)^(2/alpha), 0) (Samorodnitsky-Taqqu),
 *          i.e. E[exp(-lambda A)] = exp(-lambda^(alpha/2)),
 *   X_ij | Phi, W, H ~ N(0, Phi_ij v_ij^(2/alpha)).
 * Then E[cos(t X)] = E[exp(-Phi v^(2/alpha) t^2 / 2)] = E[exp(-A (v^(2/alpha) t^2))]
 * = exp(-v |t|^alpha). (The paper's complex case N_c(0, s), whose real part has variance
 * s / 2, needs Phi = 4 A instead.) A is drawn by Kanter's (Chambers-Mallows-Stuck)
 * representation with U ~ U(0, pi), E ~ Exp(1), a = alpha / 2:
 *   A = sin(a U) / sin(U)^(1/a) * (sin((1 - a) U) / E)^((1 - a) / a).
 *
 * One iteration t (1-based): the part Pi_t of the PSGLD grid is chosen as the HAMCMC chain
 * chooses it (pymf/hamcmc_mf.h); every Phi_ij of Pi_t gets one Metropolis step with the prior
 * as proposal at the state the (W, H) step then moves (accepted with the ratio of the two
 * Gaussian likelihoods), then (W, H) make one SG-MCMC step given Phi on Pi_t: HAMCMC, or the
 * plain Langevin step of PSGLD (pymf_hamcmc_mf_config.langevin_only), both mirrored at zero.
 * PSGLD, and HAMCMC up to iteration 2M, move theta_{t-1} and keep one Phi. HAMCMC's
 * quasi-Newton iterations move theta_{t-M}: the chain is M interleaved subchains, and Phi
 * has one copy per subchain (t mod M), stepped at theta_{t-M}, so that each subchain is a
 * Metropolis-within-Gibbs chain and H_t, built from the other subchains' pairs, does not
 * depend through Phi on the state it moves (with one shared Phi stepped at theta_{t-1} the
 * 2 x 2 test below was far off). The copies start equal (copy 0 of the first 2M
 * iterations); checkpoints hold them all.
 * The Phi step's three uniforms of entry e at iteration t are the Philox words of counter
 * {e >> 32, e mod 2^32, t, PYMF_STREAM_PHI} under the chain's noise key: entry e is
 * i J + j in grid order for dense data, the entry's position in the block layout for sparse
 * data. Nothing depends on how the blocks are shared among threads.
 * v is floored at PYMF_ALPHAMF_V_FLOOR (W H = 0 only on the boundary of the orthant).
 *
 * Tamed steps (model.tamed, the Python default): the likelihood's gradient in v,
 * (X^2 / (Phi v^(2/alpha)) - 1) / (alpha v), grows like X^2 / (Phi v^(1 + 2/alpha)) as
 * v -> 0, so one explicit step from a small v (or under a small Phi just accepted from the
 * prior) moves W and H by eps times a huge gradient and throws v to 1e3 - 1e10, where the
 * posterior has no mass and whence the chain returns slowly (on a 2 x 2 problem 1 % of the
 * draws had some v above 50; a smaller constant step did not remove it). Taming the drift
 * coordinate-wise, delta -> delta / (1 + |delta|), bounds each move by 1 and changes steps
 * with a small drift by O(delta^2) only: the same limit as eps -> 0. A tamed HAMCMC chain
 * also leaves out the memory pairs along which U curves down (pymf_hamcmc_potential). With
 * both, and HAMCMC's Phi per subchain (above), the PSGLD and HAMCMC chains on that 2 x 2
 * problem match the exact marginal posterior (tests/test_alphamf.py); the plain steps
 * (model.tamed = 0) do not.
 */
#ifndef PYMF_ALPHAMF_H
#define PYMF_ALPHAMF_H

#include "pymf/blocks.h"
#include "pymf/hamcmc_mf.h"

#define PYMF_STREAM_PHI 3u
#define PYMF_ALPHAMF_V_FLOOR 1e-300
#define PYMF_ALPHAMF_PHI_START_FLOOR 1e-2

typedef struct {
    int rank;
    double alpha;   /* (0, 2] */
    double a_w, b_w; /* GG(a, b, 2 / alpha) of W: a > 0, b > 0 */
    double a_h, b_h;
    int tamed;      /* nonzero: the (W, H) steps' drift is tamed (pymf_hamcmc_potential) */
} pymf_alphamf_model;

typedef struct pymf_alphamf pymf_alphamf;

pymf_status pymf_alphamf_model_check(const pymf_alphamf_model *model, pymf_error *err);

/* `data` must outlive the sampler. update_phi = 0 keeps Phi fixed (tests of the (W, H) step).
 * Phi is 2 (its value for alpha = 2) until the chain is started or Phi set. */
pymf_alphamf *pymf_alphamf_create(const pymf_alphamf_model *model, const pymf_blocked_data *data,
                                  const pymf_hamcmc_mf_config *config, int update_phi,
                                  pymf_error *err);
void pymf_alphamf_destroy(pymf_alphamf *s);
/* Starts the chain at (W, H^T) (pymf_hamcmc_mf_start) and every Phi at its conditional
 * maximiser there, X^2 / v^(2/alpha), floored at PYMF_ALPHAMF_PHI_START_FLOOR: a Phi left at a
 * typical prior value under an outlier X would need ~|X|^(1.2 alpha) prior proposals to
 * reach its scale, and until then the gradient inflates the outlier's row and column of v. */
pymf_status pymf_alphamf_start(pymf_alphamf *s, const double *W, const double *Ht,
                               pymf_error *err);
/* The (W, H) chain: state, checkpoint planes, threads, parts. */
pymf_hamcmc_mf *pymf_alphamf_chain(pymf_alphamf *s);

/* n_iter iterations (Phi step, then the (W, H) step) with step sizes eps[0 .. n_iter - 1]. A
 * diverging (W, H) step stops with PYMF_EDIVERGED naming the iteration; the last finite
 * (W, H) is kept, and the Phi of that iteration's part have taken their step. */
pymf_status pymf_alphamf_run(pymf_alphamf *s, int64_t n_iter, const double *eps,
                             pymf_error *err);
/* One Phi step over the entries of `part` of the Phi copy of the chain's next iteration, at
 * the state that iteration moves (pymf_hamcmc_mf_moved), with iteration t's uniforms (the
 * chain does not move). */
pymf_status pymf_alphamf_phi_step(pymf_alphamf *s, int64_t t, int part, pymf_error *err);

/* Phi, one per observed entry in the order above, for each copy (copy-major: n_copies x
 * n_observed values). set refuses values that are not positive and finite (PYMF_EINVAL,
 * Phi left as it was). */
int64_t pymf_alphamf_n_phi(const pymf_alphamf *s);
int pymf_alphamf_phi_copies(const pymf_alphamf *s);
void pymf_alphamf_get_phi(const pymf_alphamf *s, double *out);
pymf_status pymf_alphamf_set_phi(pymf_alphamf *s, const double *in, pymf_error *err);
/* Phi proposals accepted and made so far (carried by checkpoints: set_counts). */
void pymf_alphamf_counts(const pymf_alphamf *s, int64_t *accepted, int64_t *proposed);
pymf_status pymf_alphamf_set_counts(pymf_alphamf *s, int64_t accepted, int64_t proposed,
                                    pymf_error *err);

/* sum over the observed entries of log N(X_ij; 0, Phi_ij v_ij^(2/alpha)) at the current state
 * (not finite when the state or the data overflow it: the caller reports the divergence) */
pymf_status pymf_alphamf_loglik(const pymf_alphamf *s, double *out, pymf_error *err);

/* A with E[exp(-lambda A)] = exp(-lambda^a), 0 < a <= 1, from U in (0, pi) and E > 0. */
double pymf_positive_stable(double a, double u_angle, double e);
/* n prior draws of Phi = 2 A (a = alpha / 2) with the uniforms of entries 0 .. n - 1 at
 * iteration t under key `seed` (the words an MH step would use for its proposal). */
pymf_status pymf_alphamf_draw_phi(double alpha, uint64_t seed, uint64_t t, int64_t n,
                                  double *out, pymf_error *err);

#endif
