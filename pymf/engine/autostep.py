"""step_size="auto": a step size chosen from the problem itself, before a run.

1. Curvature. The largest eigenvalue lambda_max of the Hessian of the negative log
   posterior at the starting state, by POWER_ITERATIONS power iterations of Hessian-vector
   products, each a forward finite difference of the family's full-data gradient on fixed
   data: H v ~ -(g(theta + h v) - g(theta)) / h, h = FD_SCALE (1 + |theta|_rms) (one
   gradient per iteration; the curvature only sets a step, to a factor of two at most).
   The start vector comes from a generator seeded by the run's seed: the same data, model
   and seed give the same step.
2. Rule. Langevin's Euler step theta += eps grad + N(0, 2 eps) is stable on a Gaussian of
   precision lambda for eps lambda < 2. eps = FRACTION * 2 / lambda_max, half the
   stability limit (eps lambda_max = 1): on the paper's synthetic NMF (I = 256, K = 32,
   beta in {0, 0.5, 1, 2}, PSGLD, 1000-2000 iterations) the best step of a x2 ladder was
   1x to 2x this one and 4x it diverged or ran away (a tenth of the limit lost up to 3x in
   final log-likelihood: short runs are limited by the slow directions). The price is a
   stationary variance inflated by 1 / (1 - eps lambda / 2) <= 2 in the stiffest direction
   only; the others, far less stiff, are hardly touched. A decaying schedule gets the same
   eps as its first step.
3. Pilot. PILOT_UNITS units from the start with that step (the family's own chain, put
   back afterwards); if they diverge or the log posterior falls by more than its own
   scale, the step is halved (at most MAX_BACKOFFS times).

A preconditioned sampler (theta += eps P grad log p + N(0, 2 eps P)) is stable for
eps lambda_max(P H) < 2: its runner passes P grad log p as the gradient, so the same rule
bounds the preconditioned curvature (the linear-Gaussian runner's start_preconditioner;
HAMCMC on MF: P = gamma I). The rule knows the curvature, not the minibatch noise, whose
contribution to the stationary variance grows with eps (README, "Works without tuning").
Over MPI the runner computes the step as shared memory does, on one rank, and broadcasts it.

The cost is POWER_ITERATIONS + 1 full gradients plus the pilot: on the paper's 1024^2
Poisson NMF with PSGLD on an 8 x 8 grid about 100 iterations' worth (bench/auto_step.py),
a few percent of a run of thousands of iterations. What was chosen is recorded in the result (params["auto_step"]).
"""
import math

import numpy as np

from pymf.errors import DivergenceError

POWER_ITERATIONS = 10
FD_SCALE = 1e-5
FRACTION = 0.5
PILOT_UNITS = 20
MAX_BACKOFFS = 8


class AutoStep:
    """The step_size="auto" setting of a sampler (resolved per run by choose())."""

    def params(self):
        return {"kind": "auto"}

    def __repr__(self):
        return "'auto'"

    def __call__(self, t):
        raise ValueError("step_size='auto' is chosen by the NMF, BPMF and linear-Gaussian "
                         "runners; this model's sampler needs a step size")


def is_auto(step_size):
    return isinstance(step_size, AutoStep)


def largest_curvature(gradient, theta, seed, n_iter=POWER_ITERATIONS):
    """lambda_max of -Hessian(log p) at theta (a 1-D array) by power iterations of
    finite-difference Hessian-vector products; gradient(theta) is grad log p (1-D)."""
    theta = np.asarray(theta, dtype=np.float64)
    rng = np.random.default_rng(seed)
    v = rng.standard_normal(theta.shape)
    v /= np.linalg.norm(v)
    h = FD_SCALE * (1.0 + math.sqrt(float(np.mean(theta * theta))))
    estimate = 0.0
    g0 = np.asarray(gradient(theta))
    for _ in range(n_iter):
        hv = -(np.asarray(gradient(theta + h * v)) - g0) / h
        norm = float(np.linalg.norm(hv))
        if not math.isfinite(norm) or norm == 0.0:
            break
        estimate = norm  # |H v| for a unit v: converges to the largest |eigenvalue|
        v = hv / norm
    if not estimate > 0.0:
        raise ValueError("step_size='auto' could not measure the curvature at the start "
                         "(a flat or non-finite gradient): give a step size")
    return estimate


def choose(gradient, theta, seed, pilot, fraction=FRACTION):
    """(eps, info): eps = fraction * 2 / lambda_max, halved while pilot(eps) fails.

    pilot(eps) runs the family's chain PILOT_UNITS units with constant step eps from the
    start and returns True if it stayed usable (it must put the chain back itself)."""
    lam = largest_curvature(gradient, theta, seed)
    eps = fraction * 2.0 / lam
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
            raise DivergenceError(f"step_size='auto': the pilot diverged even at eps = {eps:g} "
                                  f"(lambda_max {lam:g} at the start); give a step size")
        eps *= 0.5
    return eps, {"lambda_max": lam, "fraction": fraction, "eps": eps, "backoffs": backoffs,
                 "power_iterations": POWER_ITERATIONS, "pilot_units": PILOT_UNITS}
