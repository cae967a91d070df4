"""Step-size schedules, shared by every gradient sampler and optimiser.

A float means a constant step; PolynomialDecay(a, b): eps_t = (a / t) ** b (the SGLD and
PSGLD papers'); AnnealedStep(eps0, kappa, gamma): eps_t = eps0 (1 + t / kappa) ** -gamma
(the DSGLD paper's). t counts the sampler's units from 1. "auto" (AutoStep): chosen per run
from the problem's curvature (pymf.engine.autostep).
"""
import numbers

import numpy as np

from pymf.engine.autostep import AutoStep
from pymf.engine.checks import check_real


class ConstantStep:
    def __init__(self, value):
        self.value = check_real(value, "the step size", positive=True)

    def __call__(self, t):
        return np.full(np.shape(t), self.value, dtype=np.float64)

    def params(self):
        return {"kind": "constant", "value": self.value}

    def __repr__(self):
        return f"{self.value}"


class PolynomialDecay:
    """eps_t = (a / t) ** b for t = 1, 2, ... (b in (0.5, 1] satisfies the Robbins-Monro
    conditions sum eps = inf, sum eps^2 < inf)."""

    def __init__(self, a, b=0.51):
        a = check_real(a, "PolynomialDecay: a", positive=True)
        b = check_real(b, "PolynomialDecay: b")
        if not (0.5 < b <= 1.0):
            raise ValueError(f"PolynomialDecay: b must be in (0.5, 1], got {b}")
        self.a, self.b = a, b

    def __call__(self, t):
        t = np.asarray(t, dtype=np.float64)
        return (self.a / t) ** self.b

    def params(self):
        return {"kind": "polynomial", "a": self.a, "b": self.b}

    def __repr__(self):
        return f"PolynomialDecay(a={self.a}, b={self.b})"


class AnnealedStep:
    """eps_t = eps0 (1 + t / kappa) ** -gamma for round t = 1, 2, ... (the DSGLD paper's
    schedule, gamma=0.51 there; annealed once per round)."""

    def __init__(self, eps0, kappa=100.0, gamma=0.51):
        eps0 = check_real(eps0, "AnnealedStep: eps0", positive=True)
        kappa = check_real(kappa, "AnnealedStep: kappa", positive=True)
        gamma = check_real(gamma, "AnnealedStep: gamma")
        if not (0.5 < gamma <= 1.0):
            raise ValueError(f"AnnealedStep: gamma must be in (0.5, 1], got {gamma}")
        self.eps0, self.kappa, self.gamma = eps0, kappa, gamma

    def __call__(self, t):
        return self.eps0 * (1.0 + np.asarray(t, dtype=np.float64) / self.kappa) ** -self.gamma

    def params(self):
        return {"kind": "annealed", "eps0": self.eps0, "kappa": self.kappa, "gamma": self.gamma}

    def __repr__(self):
        return f"AnnealedStep(eps0={self.eps0}, kappa={self.kappa}, gamma={self.gamma})"


class BurninStep:
    """burnin_step(t) for the units t <= burnin, then step(t): what an
    AutoStep(minibatch_noise=...) runs (with_burnin), the stable step
    while burning in and the bounded one for the kept draws."""

    def __init__(self, burnin_step, step, burnin):
        self.burnin_step, self.step, self.burnin = burnin_step, step, int(burnin)

    def __call__(self, t):
        t = np.asarray(t, dtype=np.float64)
        return np.where(t <= self.burnin, self.burnin_step(t), self.step(t))

    def params(self):
        return {"kind": "burnin_then", "burnin_step": self.burnin_step.params(),
                "step": self.step.params(), "burnin": self.burnin}

    def __repr__(self):
        return f"BurninStep({self.burnin_step!r}, {self.step!r}, burnin={self.burnin})"


def with_burnin(schedule_of, eps, info, burnin):
    """The schedule a run gets from an "auto" step: schedule_of(eps), or, where
    AutoStep(minibatch_noise=...) bounded it, schedule_of(info["burnin_eps"]) for the
    burnin units and schedule_of(eps) after them (BurninStep): burn-in
    draws are discarded, so until then the step needs stability only, and the chain
    reaches the posterior's bulk at the stable step's speed. The switch costs little: the
    stiff directions that the bound shrinks are the ones that relax fastest (in about
    (s - 1) / (2 delta) steps at the bounded step)."""
    sampling = schedule_of(eps)
    if "burnin_eps" not in info or burnin <= 0 or info["burnin_eps"] == eps:
        return sampling
    return BurninStep(schedule_of(info["burnin_eps"]), sampling, burnin)


def step_option(step, minibatch_noise, schedule_of=ConstantStep):
    """A command line's step: "auto" (AutoStep(minibatch_noise)) or schedule_of(number);
    --minibatch-noise bounds an automatic step only."""
    if step == "auto":
        return AutoStep(minibatch_noise)
    if minibatch_noise is not None:
        raise ValueError("--minibatch-noise bounds the automatic step: use it with the step "
                         f"'auto', not {step!r}")
    return schedule_of(step)


def as_step_size(step_size):
    if isinstance(step_size, (ConstantStep, PolynomialDecay, AnnealedStep, AutoStep, BurninStep)):
        return step_size
    if isinstance(step_size, str) and step_size == "auto":
        return AutoStep()
    if isinstance(step_size, numbers.Real) and not isinstance(step_size, bool):
        return ConstantStep(step_size)
    raise ValueError("step_size must be 'auto', a positive float, a PolynomialDecay or an "
                     f"AnnealedStep, got {step_size!r}")


def step_size_from_params(params):
    if params["kind"] == "auto":
        return AutoStep(params.get("minibatch_noise"), params.get("per_row", True))
    if params["kind"] == "constant":
        return ConstantStep(params["value"])
    if params["kind"] == "burnin_then":
        return BurninStep(step_size_from_params(params["burnin_step"]),
                          step_size_from_params(params["step"]), params["burnin"])
    if params["kind"] == "annealed":
        return AnnealedStep(params["eps0"], params["kappa"], params["gamma"])
    return PolynomialDecay(params["a"], params["b"])
