"""The Gibbs sampler for Poisson NMF (the PSGLD paper's baseline), through pymf.sample."""
import numpy as np

from pymf import _gibbs_nmf
from pymf.samplers import _check_blocks, _check_threads


class _NoStep:
    """Gibbs has no step size; the driver asks for one per iteration to count them."""

    def __call__(self, t):
        return np.ones(np.shape(t))

    def params(self):
        return {"kind": "none"}


class Gibbs:
    """Gamma-Poisson auxiliary-variable Gibbs sampler (beta=1, phi=1, exponential priors,
    non-negative integer data). One iteration is one sweep over S, W and H.

    blocks: pieces of rows / columns the sweep is parallelised over (default min(8, I, J));
    the chain is the same for any thread count, and depends on `blocks`.
    """
    kind = "gibbs"

    def __init__(self, n_threads=None, blocks=None):
        self.n_threads = _check_threads(n_threads)
        self.blocks = None if blocks is None else _check_blocks(blocks)
        self.permute = False
        self.step_size = _NoStep()

    def grid_blocks(self, shape):
        return self.blocks if self.blocks is not None else max(1, min(8, shape[0], shape[1]))

    def batch_size(self, n_observed):
        return 0

    def make_chain(self, data, model, noise_seed, schedule_seed, batch_size):
        if model.beta != 1.0 or model.phi != 1.0 or model.prior != "exponential":
            raise ValueError("pymf.Gibbs is for Poisson NMF: TweedieNMF(beta=1, phi=1, "
                             f"prior='exponential'), got {model!r}")
        return _gibbs_nmf.GibbsChain(data, model.rank, model.lam_w, model.lam_h, schedule_seed,
                                     n_threads=self.n_threads)

    def params(self):
        return {"sampler": "gibbs", "blocks": self.blocks}

    def __repr__(self):
        return "Gibbs()"
