"""Tweedie non-negative (or real-valued) matrix factorisation, the model of the PSGLD paper.

    V_ij ~ Tweedie(mu_ij, phi, power p = 2 - beta),   mu = W H,
    log p(V | W, H) = -sum_ij d_beta(V_ij || mu_ij) / phi + const.

prior="exponential": w_ik ~ E(lam_w), h_kj ~ E(lam_h), non-negative (samplers mirror).
prior="gaussian":    w_ik ~ N(0, 1/lam_w), h_kj ~ N(0, 1/lam_h), real-valued; this needs a
                     likelihood defined for any real mu, i.e. beta = 2 (Gaussian).

phi="sample" (beta = 2 only): the noise variance is unknown, phi ~ InvGamma(phi_shape,
phi_rate), and the Langevin samplers (LD, SGLD, PSGLD, also on the MPI ring) draw it from
its conjugate conditional InvGamma(phi_shape + N/2, phi_rate + RSS/2) once per pass over the
data (pymf.nmf.kernel.phi_every); an "auto" step then runs as eps phi_t / phi_init, since
the likelihood's curvature scales as 1 / phi. The default InvGamma(1, 1) is BPMF's default prior on
its noise precision (tau = 1/phi ~ Gamma(1, 1)): weak, worth two observations, so the N
residuals decide. For beta != 2 the dispersion is not conjugate (the Tweedie normaliser
c(v, phi) has no closed form) and phi="sample" is refused.
"""
import math

import numpy as np

from pymf.data import nonempty_values, observed_values
from pymf.engine.checks import check_rank, check_real

PRIORS = ("exponential", "gaussian")


class TweedieNMF:
    """phi: the dispersion, a positive number (fixed), or "sample" (beta = 2: drawn, starting
    from phi_init, under the prior InvGamma(phi_shape, phi_rate); see the module's text)."""

    def __init__(self, rank, beta=1.0, phi=1.0, prior="exponential", lam_w=1.0, lam_h=1.0,
                 phi_shape=1.0, phi_rate=1.0, phi_init=1.0):
        rank = check_rank(rank)
        beta = check_real(beta, "beta")
        if isinstance(phi, str):
            if phi != "sample":
                raise ValueError(f"phi must be 'sample' or a positive number, got {phi!r}")
            if beta != 2.0:
                raise ValueError(
                    "phi='sample' is for the Gaussian model (beta = 2), whose dispersion has "
                    "a conjugate inverse-gamma conditional; for beta != 2 give phi a number "
                    f"(got beta={beta})")
        else:
            phi = check_real(phi, "phi (the dispersion)", positive=True)
        self.phi_shape = check_real(phi_shape, "phi_shape", positive=True)
        self.phi_rate = check_real(phi_rate, "phi_rate", positive=True)
        self.phi_init = check_real(phi_init, "phi_init", positive=True)
        if prior not in PRIORS:
            raise ValueError(f"prior must be one of {PRIORS}, got {prior!r}")
        lam_w = check_real(lam_w, "lam_w", positive=True)
        lam_h = check_real(lam_h, "lam_h", positive=True)
        if prior == "gaussian" and beta != 2.0:
            raise ValueError(
                "prior='gaussian' gives real-valued factors, so mu = W H can be negative; "
                f"only beta = 2 (Gaussian likelihood) is defined there, got beta={beta}")
        self.rank = int(rank)
        self.beta = beta
        self.phi = phi
        self.prior = prior
        self.lam_w = float(lam_w)
        self.lam_h = float(lam_h)

    @property
    def non_negative(self):
        return self.prior == "exponential"

    @property
    def sample_phi(self):
        return self.phi == "sample"

    @property
    def initial_phi(self):
        """phi at the start: the fixed value, or phi_init when phi is sampled."""
        return self.phi_init if self.sample_phi else self.phi

    def params(self):
        out = {"model": "tweedie", "rank": self.rank, "beta": self.beta, "phi": self.phi,
               "prior": self.prior, "lam_w": self.lam_w, "lam_h": self.lam_h}
        if self.sample_phi:  # a fixed phi's record (and fingerprint) is as before
            out.update(phi_shape=self.phi_shape, phi_rate=self.phi_rate, phi_init=self.phi_init)
        return out

    def __repr__(self):
        return (f"TweedieNMF(rank={self.rank}, beta={self.beta}, phi={self.phi}, "
                f"prior={self.prior!r}, lam_w={self.lam_w}, lam_h={self.lam_h})")

    def check_data(self, observed):
        """Raise ValueError if the observed values are outside the likelihood's support."""
        values = nonempty_values(observed)
        if self.non_negative and values.min() < 0:
            raise ValueError(
                f"the data contain negative values (min {values.min():g}) but the model is "
                "non-negative (exponential prior); use prior='gaussian' with beta=2 for real data")
        if self.beta <= 0 and values.min() <= 0:
            raise ValueError(
                f"beta={self.beta} (gamma / inverse-Gaussian family) needs strictly positive "
                f"data, found min {values.min():g}")

    def init_factors(self, shape, observed, rng, data_mean=None):
        """A random starting point with the data's scale: E[(W H)_ij] ~ mean |V|.

        The mean is rounded to 3 significant digits, so that a distributed run, which sums
        the data piece by piece, starts from exactly the same point as a shared-memory one.
        """
        n_rows, n_cols = shape
        if data_mean is None:
            data_mean = float(np.mean(np.abs(observed_values(observed))))
        data_mean = float(f"{max(data_mean, 1e-3):.3g}")
        scale = math.sqrt(data_mean / self.rank)
        W = rng.uniform(0.5, 1.5, size=(n_rows, self.rank)) * scale
        H = rng.uniform(0.5, 1.5, size=(self.rank, n_cols)) * scale
        if not self.non_negative:
            W *= rng.choice([-1.0, 1.0], size=W.shape)
            H *= rng.choice([-1.0, 1.0], size=H.shape)
        return W, H

    def prior_fitted_rms(self):
        """sqrt(E[(W H)_ij^2]) under the prior: exponential priors, sum over k of
        E[w^2] E[h^2] plus the cross terms, K (K + 3) / (lam_w lam_h)^2; Gaussian ones
        K / (lam_w lam_h). The scale a fitted value has before the data speak (the NMF
        kernel's blow-up check, pymf.nmf.kernel.blowup_limit)."""
        K, product = self.rank, self.lam_w * self.lam_h
        return math.sqrt(K * (K + 3)) / product if self.non_negative else math.sqrt(K / product)

    def log_prior(self, W, H):
        if self.non_negative:
            return (W.size * math.log(self.lam_w) - self.lam_w * float(W.sum())
                    + H.size * math.log(self.lam_h) - self.lam_h * float(H.sum()))
        return (0.5 * W.size * math.log(self.lam_w / (2 * math.pi)) - 0.5 * self.lam_w * float(np.sum(W * W))
                + 0.5 * H.size * math.log(self.lam_h / (2 * math.pi)) - 0.5 * self.lam_h * float(np.sum(H * H)))


def has_predictive_draws(beta):
    """Whether draw_tweedie samples this beta's likelihood."""
    return 0.0 <= beta <= 1.0 or beta == 2.0


def draw_tweedie(mu, beta, phi, rng):
    """Draws of V ~ Tweedie(mu, phi, p = 2 - beta) for an array of means mu >= 0 (any real mu
    for beta = 2): Gaussian (beta = 2), phi * Poisson(mu / phi) (beta = 1), compound
    Poisson-gamma (0 < beta < 1: N ~ Poisson(mu^(2-p) / (phi (2 - p))) gammas of shape
    (2 - p)/(p - 1) and scale phi (p - 1) mu^(p - 1)) and gamma (beta = 0, shape 1/phi).
    The posterior predictive of pymf's coverage(); other betas have no sampler here."""
    mu = np.asarray(mu, dtype=np.float64)
    if beta == 2.0:
        return mu + rng.normal(0.0, math.sqrt(phi), mu.shape)
    mu = np.maximum(mu, 0.0)
    if beta == 1.0:
        return phi * rng.poisson(mu / phi)
    if beta == 0.0:
        return rng.gamma(1.0 / phi, phi * np.maximum(mu, 1e-300))
    if has_predictive_draws(beta):  # 0 < beta < 1
        p = 2.0 - beta
        counts = rng.poisson(mu ** (2 - p) / (phi * (2 - p)))
        shape = counts * (2 - p) / (p - 1)
        scale = phi * (p - 1) * np.maximum(mu, 1e-300) ** (p - 1)
        return np.where(counts > 0, rng.gamma(np.maximum(shape, 1e-300), scale), 0.0)
    raise ValueError(f"posterior predictive draws are implemented for beta in [0, 1] and "
                     f"beta = 2, not beta={beta}")
