"""The result of an alpha-stable MF run: the NMF family's SampleResult (W and H means,
variances, draws, save / load) whose predictions are of v = W H, the SaS scale^alpha."""
import math

import numpy as np

from pymf.data import entry_ids
from pymf.nmf.result import SampleResult


def positive_stable(a, size, rng):
    """A with E[exp(-lambda A)] = exp(-lambda^a), 0 < a <= 1, by Kanter's representation
    (the NumPy twin of the C core's pymf_positive_stable)."""
    if a >= 1.0:
        return np.ones(size)
    u = rng.uniform(0.0, math.pi, size)
    e = rng.standard_exponential(size)
    return (np.sin(a * u) / np.sin(u) ** (1.0 / a)) * (np.sin((1.0 - a) * u) / e) ** ((1.0 - a) / a)


class AlphaResult(SampleResult):
    """SampleResult of pymf.AlphaStableNMF: predict(rows, cols) is the posterior mean of
    v_ij = (W H)_ij, the scale of X_ij raised to alpha (X itself has median 0); the trace
    holds loglik = log p(X | Phi, W, H) given the current Phi, logpost (+ log prior),
    skipped_pairs (HAMCMC) and phi_acceptance (share of Phi proposals accepted so far)."""

    kind = "alphamf_samples"

    def predictive_draws(self, rows, cols, rng, max_draws):
        """New X_ij from up to max_draws kept draws: Phi from its prior, then
        N(0, Phi v^(2/alpha)). None if no samples were kept."""
        if not self._draws or self.n_kept == 0:
            return None
        rows, cols = entry_ids(rows, cols, (self.W_mean.shape[0], self.H_mean.shape[1]))
        alpha = self.params["model"]["alpha"]
        pick = np.unique(np.linspace(0, self.n_kept - 1, min(max_draws, self.n_kept)).astype(int))
        out = np.empty((len(pick), len(rows)))
        for n, s in enumerate(pick):
            W, H = self.W_samples[s], self.H_samples[s]
            v = np.einsum("nk,kn->n", W[rows], H[:, cols])
            phi = 2.0 * positive_stable(alpha / 2.0, len(rows), rng)
            out[n] = np.sqrt(phi * v ** (2.0 / alpha)) * rng.standard_normal(len(rows))
        return out

    def noise_variance(self):
        raise ValueError("an alpha-stable model has no noise variance (alpha < 2 has infinite "
                         "variance); see predict() for the scale v = W H")
