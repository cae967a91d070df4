"""step_size="auto": a step size chosen from the problem itself, before a run.

1. Curvature. The largest eigenvalue lambda_max of the Hessian of the negative log
   posterior at the starting state, by LANCZOS_STEPS steps of the Lanczos process on
   Hessian-vector products, each a forward finite difference of the family's full-data
   gradient on fixed data: H v ~ -(g(theta + h v) - g(theta)) / h, h = FD_SCALE (1 +
   |theta|_rms) (one gradient per step; the curvature only sets a step, to a factor of two
   at most). The estimate is the largest |Ritz value|, the largest |eigenvalue| of the
   steps' tridiagonal matrix: what the power method converges to, sooner. On DSGLD's
   10^7-rating start (bench/dsgld_large.py) 6 Lanczos steps came within 0.3 % of lambda_max
   and 7 within 0.1 %, where the 10 power iterations pymf used before were 0.7 % short and
   16 still 0.06 %: its top eigenvalues, the biases of the most rated items, lie close
   together. Three vectors are kept (no reorthogonalisation: a few steps lose little
   orthogonality, and a lost one repeats a Ritz value rather than inflating it). The start
   vector comes from a generator seeded by the run's seed: the same data, model and seed
   give the same step.
2. Rule. Langevin's Euler step theta += eps grad + N(0, 2 eps) is stable on a Gaussian of
   precision lambda for eps lambda < 2. eps = FRACTION * 2 / lambda_max, half the
   stability limit (eps lambda_max = 1): on the paper's synthetic NMF (I = 256, K = 32,
   beta in {0, 0.5, 1, 2}, PSGLD, 1000-2000 iterations) the best step of a x2 ladder was
   1x to 2x this one and 4x it diverged or ran away (a tenth of the limit lost up to 3x in
   final log-likelihood: short runs are limited by the slow directions). The price is a
   stationary variance inflated by 1 / (1 - eps lambda / 2) <= 2 in the stiffest direction
   only; the others, far less stiff, are hardly touched. A decaying schedule gets the same
   eps as its first step.
3. Pilot. PILOT_UNITS units from the start with that step (the family's own chain, put back
   afterwards; DSGLD's runs up to the whole burn-in where PILOT_DRAWS minibatch draws pay
   for it, pilot_units: on small data its curvature outgrows the start's); if they diverge
   or the log posterior falls by more than its own scale, the step is halved (at most
   MAX_BACKOFFS times). A family whose pilot runs the schedule's own first steps (DSGLD's
   annealed steps from eps; the constant step of the CPU Langevin chains on NMF) keeps the
   accepted pilot's end state (KeptPilot), and the run's first call takes it instead of
   running the same units again where nothing is observed inside them (pymf.engine.driver):
   the same chain, without paying for its first PILOT_UNITS units twice (at 10^7 ratings
   about 2 s, twenty DSGLD rounds).

4. Minibatch noise (optional: AutoStep(minibatch_noise=delta)). A stochastic gradient whose
   likelihood term is a minibatch scaled up by s = N / m (DSGLD: N G / (P Q m), a block's
   entries over its visit rate times the minibatch; SGLD: N / batch; PSGLD: the B of its
   B x B grid, a part being 1/B of the data; LD: s = 1) has, for a minibatch drawn with
   replacement and the Fisher identity, a noise covariance of about (s - 1) H_lik, whose
   largest eigenvalue is at most (s - 1) lambda_max. On a Gaussian of precision lambda, the
   chain theta += eps (grad + noise) + N(0, 2 eps) then has a stationary variance inflated
   by about 1 + alpha, alpha = eps (s - 1) lambda / 2: Welling & Teh's (2011, section 4)
   condition alpha << 1 for the injected noise to dominate. The stability rule alone puts
   alpha near (s - 1) / 2 in the stiffest direction (DSGLD's default minibatch, a tenth of
   a block: about 10 on a 2 x 2 grid), which over-disperses the factors, inflates the
   residuals and lowers a sampled tau (wide predictive intervals, counted twice). With
   minibatch_noise=delta the step is also at most 2 delta / ((s - 1) lambda_max), so
   alpha <= delta in every direction: calibrated intervals at the price of a step up to
   (s - 1) / (2 delta) times smaller, i.e. slower mixing (docs/tuning.md, "Calibrated SG-MCMC").
   The pilot runs the stability rule's step as before, and that step stays the burn-in's
   (pymf.engine.steps.with_burnin): burn-in draws are discarded, so only the kept ones
   need the bound.

5. Per-row bound (DSGLD's and PSGLD's default: AutoStep(), per_row=True;
   AutoStep(per_row=False) is the stability rule alone). The bound of point 4 holds the
   stiffest direction of the whole posterior to delta, which on MovieLens-100K made every
   row's step 175x smaller. DSGLD moves rows (a user's or item's factors and bias)
   independently, so each of its coordinates gets its own step eps c_k, c_k in (0, 1] (a
   constant diagonal preconditioner: drift eps c_k g_k and noise N(0, 2 eps c_k) leave the
   posterior stationary; no correction term, as the preconditioner does not depend on theta). With
   H = tau sum_j (v_j, 1)(v_j, 1)^T a row's likelihood Hessian and rho the largest
   eigenvalue of its correlation matrix, c_k = min(1, 2 ROW_NOISE / ((s - 1) eps H_kk rho))
   keeps that row's alpha <= ROW_NOISE in every direction, while rows and coordinates of
   little curvature (few ratings; factor columns of small scale) keep the stability step.
   The factors are measured once, at the chains' state after the burn-in (the mean over
   chains, each with its own tau): at the start the factors are init_scale small and their
   curvature 100x too low. Burn-in draws are discarded, so the burn-in runs the stability
   rule's step as before; the factors travel in checkpoints. ROW_NOISE = 0.35: on the data
   of tests/test_calibration.py (BPMF's own model, s = 20) 0.25 / 0.35 / 0.5 covered
   0.906 / 0.911 / 0.917 at 90 % (exact Gibbs 0.893; no bound 0.943), and on MovieLens-100K
   (s = 40, 3,000 rounds, seed 0) they reached test RMSE 0.9005 / 0.8999 / (per row, not
   per coordinate, 0.9025), against 0.8993 without the bound (coverage 0.903 / 0.905
   against 0.920). Injecting less noise where the minibatch supplies the rest (SGFS's
   correction, the C core takes noise factors below the step's) calibrated too (0.894 at
   delta 0.5) but mixed slower on MovieLens (0.9017). pymf.AutoStep(minibatch_noise=delta)
   keeps its global bound (point 4) and no per-row factors.
   PSGLD's default too (core/src/langevin.c; the GPU kernels of cuda/psgld.cu alike). Its rows
   of W and of H^T move independently given the other factor, so the same factors c_k apply
   there, with what changes: (a) the curvature is the Tweedie likelihood's Fisher
   (Gauss-Newton) matrix H = sum_j mu_ij^(beta - 2) / phi h_j h_j^T over the row's observed
   entries (w_i w_i^T for a column of H), the inverse of each entry's variance phi mu^(2 -
   beta) times the outer product of its mu's gradient (positive semi-definite where the Hessian need
   not be; equal to the Hessian in expectation; for Gaussian MF it is the Hessian); no bias
   coordinate; (b) s = B, a part holding 1/B of the data (cyclic parts visit every block once
   in B iterations, so the noise is the part's, not a random minibatch's: the measured
   coverage says the bound holds); (c) a sampled phi: the chain runs eps phi_t / phi_init and
   H scales as 1 / phi_t, so eps c H stays at its value at phi_init, where c is computed; (d)
   mirrored (non-negative) chains reflect each coordinate at 0 on its own, which a diagonal
   preconditioner leaves exact. Measured once, at the state after the burn-in
   (pymf.nmf.kernel.FactorKernel; the MPI ring passes H^T's curvature along its ranks in piece
   order, the bits of shared memory). Without a burn-in no factors are set: measured at the
   start, they slowed the way from a cold start (256^2 Poisson NMF, B = 4, 300 iterations:
   -38,864 against -36,856, 5.4 % lower), and the draws of that way are not calibrated by any
   step. On Gaussian MF (tests/test_calibration.py's data, 300 burn-in and 600 kept
   iterations) PSGLD covers 0.913 / 0.906 / 0.904 at 90 % on 2 x 2 / 4 x 4 / 8 x 8 grids,
   against 0.914 / 0.925 / 0.959 without the bound.

A preconditioned sampler (theta += eps P grad log p + N(0, 2 eps P)) is stable for
eps lambda_max(P H) < 2: its runner passes P grad log p as the gradient, so the same rule
bounds the preconditioned curvature (the linear-Gaussian runner's start_preconditioner;
HAMCMC on MF: P = gamma I). The rule knows the curvature, not the minibatch noise, whose
contribution to the stationary variance grows with eps (docs/tuning.md, "Automatic steps").
Over MPI the runner computes the step as shared memory does, on one rank, and broadcasts it.

The cost is LANCZOS_STEPS + 1 full gradients plus the pilot: on the paper's 1024^2
Poisson NMF with PSGLD on an 8 x 8 grid about 100 iterations' worth (bench/auto_step.py),
0.11 s on 2 cores (the pilot's included), a few percent of a run of thousands of iterations. That holds because a
run keeps BLAS to one thread (pymf.engine.blas): the norms here are NumPy products, and
OpenBLAS's spinning workers otherwise doubled the gradients' time. What was chosen is
recorded in the result (params["auto_step"]).
"""
import math
import numbers

import numpy as np

from pymf._linalg import largest_eigenvalues
from pymf.errors import DivergenceError

LANCZOS_STEPS = 7
FD_SCALE = 1e-5
FRACTION = 0.5
PILOT_UNITS = 20
# DSGLD's pilot runs up to the whole burn-in where that costs at most this many minibatch
# draws (pilot_units): the chain's curvature grows as its factors and tau leave the start
PILOT_DRAWS = 1_000_000
MAX_BACKOFFS = 8
# a Lanczos residual below this share of the estimate ends the steps (largest_curvature):
# far above the finite differences' error on a quadratic (rounding / FD_SCALE, about 1e-11)
LANCZOS_BREAKDOWN = 1e-8
ROW_NOISE = 0.35  # DSGLD's default per-row bound delta_row (point 5)


class AutoStep:
    """The step_size="auto" setting of a sampler (resolved per run by choose()).

    minibatch_noise  None (the default, what step_size="auto" means): the stability rule
                     (and, for DSGLD, the per-row bound of point 5). A number delta in
                     (0, 1): the step is also bounded so that the minibatch gradient's noise
                     inflates the stationary variance by at most a factor 1 + delta (the
                     module's point 4), for calibrated posterior intervals; DSGLD, SGLD,
                     PSGLD and LD only (LD and SGLD on NMF and BPMF models).
    per_row          True (default): DSGLD (and SGLD on a BPMF model) and PSGLD (with a
                     burn-in) bound each row's coordinates after the burn-in
                     (point 5); False: the stability rule alone (what "auto" was before the
                     bound). Other samplers ignore it."""

    def __init__(self, minibatch_noise=None, per_row=True):
        if not isinstance(per_row, bool):
            raise ValueError(f"AutoStep: per_row must be True or False, got {per_row!r}")
        self.per_row = per_row
        if minibatch_noise is not None:
            if (isinstance(minibatch_noise, bool) or not isinstance(minibatch_noise, numbers.Real)
                    or not 0 < minibatch_noise < 1):
                raise ValueError("AutoStep: minibatch_noise must be None or a number in (0, 1) "
                                 f"(the stationary variance's allowed inflation), got "
                                 f"{minibatch_noise!r}")
            minibatch_noise = float(minibatch_noise)
        self.minibatch_noise = minibatch_noise

    def params(self):
        out = {"kind": "auto"}
        if self.minibatch_noise is not None:
            out["minibatch_noise"] = self.minibatch_noise
        if not self.per_row:
            out["per_row"] = False
        return out

    def __repr__(self):
        if self.minibatch_noise is None and self.per_row:
            return "'auto'"
        args = [] if self.minibatch_noise is None else [f"minibatch_noise={self.minibatch_noise}"]
        return f"AutoStep({', '.join(args + ([] if self.per_row else ['per_row=False']))})"

    def __call__(self, t):
        raise ValueError("step_size='auto' is chosen by the NMF, BPMF and linear-Gaussian "
                         "runners; this model's sampler needs a step size")


class KeptPilot:
    """An accepted pilot's units, kept for the run (the kernel's kept_pilot): steps, the
    steps it ran from the start (units 1 .. len(steps)); snapshot, the kernel's snapshot()
    where they ended; seconds, what they took."""

    def __init__(self, steps, snapshot, seconds):
        self.steps = np.array(steps, dtype=np.float64)
        self.snapshot, self.seconds = snapshot, float(seconds)


def is_auto(step_size):
    return isinstance(step_size, AutoStep)


def pilot_units(burnin, draws_per_unit):
    """The units a pilot runs: PILOT_UNITS, or as many of the burn-in's first units as
    PILOT_DRAWS minibatch draws pay for where that is more (at most the whole burn-in).
    The curvature that sets the step is measured at the start, where the factors are
    init-scale small and tau is its starting value; both grow as the chain finds the data's
    scale, and on small precise data (60 x 40 and 100 x 80 matrices from a rank-3 model with
    noise sd 0.3, tau about 11 against its start of 2) DSGLD's step diverged in 2 and 5 of 12
    runs between rounds 42 and 88 of a 100-round burn-in, after 20 pilot rounds had passed;
    a pilot of the whole burn-in caught all 7 and backed off, and the other runs kept
    their step. Such data cost little per unit, which is what allows the longer pilot; at
    MovieLens-100K's 40,000 draws a round it is 25 rounds, and at the 10M benchmark's
    millions, 20 (docs/tuning.md, "A divergence the pilot does not catch")."""
    affordable = PILOT_DRAWS // max(int(draws_per_unit), 1)
    return int(max(PILOT_UNITS, min(int(burnin), affordable)))


def largest_curvature(gradient, theta, seed, n_steps=LANCZOS_STEPS):
    """lambda_max of -Hessian(log p) at theta (a 1-D array): the largest |Ritz value| of
    n_steps Lanczos steps on finite-difference Hessian-vector products; gradient(theta) is
    grad log p (1-D)."""
    theta = np.asarray(theta, dtype=np.float64)
    rng = np.random.default_rng(seed)
    q = rng.standard_normal(theta.shape)
    q /= np.linalg.norm(q)
    q_before = np.zeros_like(q)
    h = FD_SCALE * (1.0 + math.sqrt(float(np.mean(theta * theta))))
    estimate, beta = 0.0, 0.0
    alphas, betas = [], []
    g0 = np.asarray(gradient(theta))
    for _ in range(n_steps):
        w = -(np.asarray(gradient(theta + h * q)) - g0) / h
        if not np.all(np.isfinite(w)):
            break
        w -= beta * q_before
        alpha = float(q @ w)
        w -= alpha * q
        alphas.append(alpha)
        ritz = np.linalg.eigvalsh(np.diag(alphas) + np.diag(betas, 1) + np.diag(betas, -1))
        estimate = max(abs(float(ritz[0])), abs(float(ritz[-1])))
        beta = float(np.linalg.norm(w))
        # an invariant subspace (w is the finite differences' error): the Ritz values are
        # the eigenvalues there, and a further step would turn that error into a direction
        if not beta > LANCZOS_BREAKDOWN * estimate:
            break
        betas.append(beta)
        q_before, q = q, w / beta
    if not estimate > 0.0:
        raise ValueError("step_size='auto' could not measure the curvature at the start "
                         "(a flat or non-finite gradient): give a step size")
    return estimate


def choose(gradient, theta, seed, pilot, fraction=FRACTION, step=None, minibatch_scale=None,
           curvature_factor=1.0, n_pilot_units=PILOT_UNITS):
    """(eps, info): eps = fraction * 2 / (curvature_factor lambda_max), halved while
    pilot(eps) fails. curvature_factor >= 1: how much more curvature than lambda_max one
    iteration's stochastic gradient can put on a part of theta (SGLD on sparse rows:
    pymf.nmf.kernel.minibatch_kick); recorded as "minibatch_kick" when not 1.

    pilot(eps) runs the family's chain n_pilot_units units (PILOT_UNITS, or pilot_units'
    count where the family asks for it) from the start and returns True if it stayed usable
    (it must put the chain back itself); recorded as "pilot_units".
    step: the sampler's AutoStep; where it sets minibatch_noise, eps is at most
    2 minibatch_noise / ((minibatch_scale - 1) lambda_max) (the module's point 4), and a
    family that does not give its minibatch_scale refuses it."""
    noise_bound = None if step is None else step.minibatch_noise
    if noise_bound is not None and minibatch_scale is None:
        raise ValueError("AutoStep(minibatch_noise=...) is for DSGLD, PSGLD, and LD and SGLD on "
                         "matrix-factorisation models (NMF, BPMF), whose "
                         "minibatch scale is known; give this sampler step_size='auto' or a step")
    lam = largest_curvature(gradient, theta, seed)
    eps = fraction * 2.0 / (lam * curvature_factor)
    if not (eps > 0.0 and math.isfinite(eps)):
        # a curvature of 1e308 and more (data or priors of an extreme scale): the run then
        # refused "step size at iteration 1 is 0", a step the user never gave
        raise ValueError(f"step_size='auto': the curvature at the start, lambda_max = {lam:g}, "
                         "leaves no positive step in double precision (data or priors of an "
                         "extreme scale?); rescale them, or give a step size")
    backoffs = 0
    while True:
        try:
            ok = pilot(eps)
        except DivergenceError:
            ok = False
        if ok:
            break
        backoffs += 1
        if backoffs > MAX_BACKOFFS:
            # iteration 0: the pilot runs before the chain's first iteration (without it
            # the constructor's TypeError replaced this message)
            raise DivergenceError(f"step_size='auto': the pilot diverged even at eps = {eps:g} "
                                  f"(lambda_max {lam:g} at the start); give a step size",
                                  iteration=0)
        eps *= 0.5
    info = {"lambda_max": lam, "fraction": fraction, "eps": eps, "backoffs": backoffs,
            "lanczos_steps": LANCZOS_STEPS, "pilot_units": int(n_pilot_units)}
    if curvature_factor != 1.0:
        info["minibatch_kick"] = float(curvature_factor)
    if noise_bound is not None:
        # the piloted stable step stays the burn-in's (steps.with_burnin); a smaller step is
        # as stable, so the bounded one needs no pilot of its own
        bound = math.inf if minibatch_scale <= 1.0 else \
            2.0 * noise_bound / ((minibatch_scale - 1.0) * lam)
        info.update(minibatch_noise=noise_bound, minibatch_scale=float(minibatch_scale),
                    burnin_eps=eps, eps=min(eps, bound))
    return info["eps"], info


def row_step_factors(curvatures, eps, minibatch_scale, row_noise=None):
    """The per-coordinate step factors c = min(1, 2 row_noise / ((s - 1) eps lambda)) of
    point 5: coordinate k's alpha_k = eps c_k (s - 1) lambda_k / 2 <= row_noise (lambda,
    the curvature that bounds its share of the minibatch noise; 0 for a coordinate without
    ratings, which keeps eps). row_noise None: ROW_NOISE."""
    row_noise = ROW_NOISE if row_noise is None else row_noise
    curvatures = np.asarray(curvatures, dtype=np.float64)
    out = np.ones_like(curvatures)
    if minibatch_scale > 1.0:
        alpha = eps * (minibatch_scale - 1.0) * curvatures / 2.0
        np.divide(row_noise, alpha, out=out, where=alpha > row_noise)
    return out


def _bounded_share(factors):
    """The share of rows (the last axis: a row's coordinates) with a bounded coordinate."""
    return float(np.mean(np.min(factors, axis=-1) < 1.0)) if factors.size else 0.0


def _factors_summary(minibatch_scale, row_noise, bounded, factors, **extra):
    """params["auto_step"]'s record of a per-row bound: the share of each named side's rows
    that are bounded (bounded: name -> factors), the smallest and median factor of all."""
    both = np.concatenate([f.ravel() for f in factors])
    return {"row_noise": ROW_NOISE if row_noise is None else row_noise,
            "minibatch_scale": float(minibatch_scale),
            "row_steps": {**{name: _bounded_share(f) for name, f in bounded.items()},
                          "min": float(both.min()), "median": float(np.median(both)),
                          **extra}}


def row_steps_summary(step_user, step_item, minibatch_scale, row_noise=None):
    """What params["auto_step"] records of DSGLD's per-row bound (the last coordinate of a
    row is its bias)."""
    bias = np.concatenate([step_user[:, -1], step_item[:, -1]])
    return _factors_summary(minibatch_scale, row_noise,
                            {"users_bounded": step_user, "items_bounded": step_item},
                            (step_user, step_item), median_bias=float(np.median(bias)))


def diag_and_rho(hessians):
    """(diag, rho) of a stack of symmetric positive semi-definite K x K curvatures (n, K, K):
    diag (n, K) their diagonals, rho (n) the largest eigenvalue of each correlation matrix
    diag^-1/2 H diag^-1/2, at least 1 (1 to K), so that step factors c_k <= kappa /
    (H_kk rho) keep the preconditioned curvature diag(c) H at most kappa in every direction
    (a coordinate without curvature counts as uncorrelated). Point 5's rows of NMF."""
    hessians = np.asarray(hessians, dtype=np.float64)
    diag = np.einsum("ikk->ik", hessians).copy()
    if not len(hessians):
        return diag, np.zeros(0)
    inv_root = np.zeros_like(diag)
    np.divide(1.0, np.sqrt(diag), out=inv_root, where=diag > 0)
    corr = hessians * inv_root[:, :, None] * inv_root[:, None, :]
    return diag, np.maximum(largest_eigenvalues(corr), 1.0)


def factor_steps_summary(step_W, step_Ht, minibatch_scale, row_noise=None):
    """What params["auto_step"] records of PSGLD's per-row bound: the share of the rows of W
    and of H^T (columns of H) with a bounded coordinate, the smallest and median factor."""
    return _factors_summary(minibatch_scale, row_noise,
                            {"rows_bounded": step_W, "cols_bounded": step_Ht},
                            (step_W, step_Ht))
