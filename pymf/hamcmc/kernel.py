"""The linear-Gaussian chain (pymf.hamcmc._hamcmc.Chain) seen by the engine's run loop. One C call
runs many iterations and returns every one's state, so the loop keeps the thin-th ones
without a Python call per iteration."""
import math

import numpy as np

from pymf.hamcmc import _hamcmc
from pymf.engine.kernel import Kernel
from pymf.errors import DivergenceError


class LinearKernel(Kernel):
    per_unit_draws = True

    def __init__(self, chain, dim, exact_mean):
        self.chain, self.dim, self.exact_mean = chain, dim, exact_mean

    @property
    def counter(self):
        return self.chain.state()[1]

    def draw_shapes(self):
        return {"theta": (1, self.dim)}

    def run(self, steps):
        t = self.counter
        before = self.chain.state()[0]
        out = np.empty((len(steps), self.dim))
        try:
            self.chain.run(steps, out)
        except DivergenceError as exc:
            done = int(exc.iteration) - 1 - t  # iterations of this call that finished
            exc.draws = {"theta": out[:done, None]}
            exc.state = {"theta": self.chain.state()[0]}
            raise
        with np.errstate(over="ignore", invalid="ignore"):
            runaway = ~np.isfinite(np.einsum("ij,ij->i", out, out))
        if runaway.any():
            # finite states whose squares overflow (|theta| > 1e154): the chain ran away;
            # stop at the first, as the C core does at a non-finite one
            first = int(np.argmax(runaway))
            exc = DivergenceError(
                f"the chain diverged at iteration {t + first + 1}: its state overflows when "
                "squared (a step size far too large, or extreme data?); the last state below "
                "that is kept", iteration=t + first + 1)
            exc.draws = {"theta": out[:first, None]}
            exc.state = {"theta": out[first - 1].copy() if first else before}
            raise exc
        return {"theta": out[:, None]}

    def draw(self):
        return {"theta": self.chain.state()[0][None]}

    def trace_point(self, run):
        moments = run.moments["theta"]
        error = math.nan
        if moments.count:
            with np.errstate(over="ignore", invalid="ignore"):
                error = float(np.linalg.norm(moments.mean - self.exact_mean))
        return {"mean_error": error}

    def snapshot(self):
        # the C chain's whole carried state (HAMCMC's window and L-BFGS pairs, PSGLD's V):
        # the step sizes are the schedule's of t, so nothing else is needed to continue
        return self.chain.snapshot()

    def restore(self, arrays):
        self.chain.restore(arrays)

    def last_finite_state(self):
        return {"theta": self.chain.state()[0]}


def make_chain(model, A, x, sampler, kind, options, batch, noise_seed):
    return _hamcmc.Chain(A, x, model.noise_var, model.prior_var, kind, batch, noise_seed,
                         **options)
