"""Alpha-stable matrix factorisation (Simsekli, Liutkus & Cemgil, IEEE SPL 2015), real-valued:

    W_ik ~ GG(a_w, b_w, p), H_kj ~ GG(a_h, b_h, p), p = 2 / alpha,   v = W H,
    X_ij | W, H ~ SaS(scale v_ij^(1/alpha)):  E[exp(i t X_ij)] = exp(-v_ij |t|^alpha),

GG(a, b, p) the generalised gamma of Stacy (1962) with density
p b^(a/p) / Gamma(a/p) x^(a-1) exp(-b x^p) on x >= 0 (x^p ~ Gamma(a/p, rate b)); the
defaults a = b = 1 give p(x) proportional to exp(-x^p), whose gradient is finite at 0.
The samplers use the conditionally Gaussian form (core/include/pymf/alphamf.h):
Phi_ij = 2 A_ij with E[exp(-lambda A)] = exp(-lambda^(alpha/2)), X_ij | Phi ~
N(0, Phi_ij v_ij^(2/alpha)). alpha = 2 is the Gaussian model N(0, 2 v); smaller alpha gives
heavier tails (alpha = 1: Cauchy with scale v).

The paper's speech experiments use complex STFT coefficients (N_c, Phi = 4 A); this
implementation is the real-valued case, and the data sets of those experiments are not
available offline (bench/alphamf_synthetic.py samples data from the model instead).
"""
import math

import numpy as np

from pymf.alphamf import _alphamf
from pymf.data import nonempty_values, observed_values
from pymf.engine.checks import check_flag, check_rank, check_real


def _check_alpha(alpha):
    alpha = check_real(alpha, "alpha", positive=True)
    if not 0.0 < alpha <= 2.0:
        raise ValueError(f"alpha (the stable index) must be in (0, 2], got {alpha}")
    return alpha


class AlphaStableNMF:
    """The model above; alpha is given (not sampled).

    tamed (default True): the (W, H) steps of HAMCMC and PSGLD move each coordinate by
    their drift delta tamed to delta / (1 + |delta|) (Hutzenthaler, Jentzen & Kloeden 2012;
    Brosse, Durmus, Moulines & Sabanis 2019), the noise unchanged. The likelihood's gradient
    grows like X^2 / (Phi v^(1 + 2/alpha)) as v -> 0, and one plain step from a small v
    throws v orders of magnitude away (on a 2 x 2 problem 1 % of the draws had some v above
    50, where the posterior has no mass); taming bounds every drift move by 1 in the units of
    W and H and changes small drifts by O(delta^2), so the limit as the step size -> 0 is
    the same. Tamed HAMCMC also leaves out memory pairs along which U curves down
    (s^T y < lam s^T s: the likelihood is concave in v for large v, and such a pair's tiny
    s^T y put a huge eigenvalue into the preconditioner). tamed=False is the plain step (to
    compare; it fails that 2 x 2 test). The setting is part of params() (result params,
    checkpoint fingerprints)."""

    non_negative = True
    sample_phi = False

    def __init__(self, rank, alpha=1.2, a_w=1.0, b_w=1.0, a_h=1.0, b_h=1.0, tamed=True):
        self.rank = int(check_rank(rank))
        self.alpha = _check_alpha(alpha)
        self.tamed = check_flag(tamed, "tamed")
        self.a_w = check_real(a_w, "a_w (the shape of W's generalised gamma prior)", positive=True)
        self.b_w = check_real(b_w, "b_w (the rate of W's generalised gamma prior)", positive=True)
        self.a_h = check_real(a_h, "a_h (the shape of H's generalised gamma prior)", positive=True)
        self.b_h = check_real(b_h, "b_h (the rate of H's generalised gamma prior)", positive=True)

    @property
    def power(self):
        """p = 2 / alpha, the generalised gamma priors' power."""
        return 2.0 / self.alpha

    def params(self):
        return {"model": "alpha_stable", "rank": self.rank, "alpha": self.alpha,
                "a_w": self.a_w, "b_w": self.b_w, "a_h": self.a_h, "b_h": self.b_h,
                "tamed": self.tamed}

    def __repr__(self):
        return (f"AlphaStableNMF(rank={self.rank}, alpha={self.alpha}, a_w={self.a_w}, "
                f"b_w={self.b_w}, a_h={self.a_h}, b_h={self.b_h}, tamed={self.tamed})")

    def check_data(self, observed):
        """Real-valued data of any sign; every value finite."""
        values = nonempty_values(observed)
        if not np.all(np.isfinite(values)):
            raise ValueError("the data contain NaN or inf: alpha-stable MF needs finite values")

    def init_factors(self, shape, observed, rng):
        """A random start with the data's scale: v_ij ~ median(|X|)^alpha (the median of
        |X| is about the SaS scale v^(1/alpha)), rounded to 3 significant digits."""
        median = float(np.median(np.abs(observed_values(observed))))
        try:
            v0 = float(f"{max(median, 1e-3) ** self.alpha:.3g}")
        except OverflowError:  # Python's float power raises instead of giving inf
            raise ValueError(f"the data's scale is too large: median |X| = {median:.3g} makes "
                             f"v = median^alpha overflow; rescale the data") from None
        scale = math.sqrt(v0 / self.rank)
        W = rng.uniform(0.5, 1.5, size=(shape[0], self.rank)) * scale
        H = rng.uniform(0.5, 1.5, size=(self.rank, shape[1])) * scale
        return W, H

    def _log_gg(self, x, a, b):
        p = self.power
        const = math.log(p) + (a / p) * math.log(b) - math.lgamma(a / p)
        with np.errstate(divide="ignore"):
            return float(x.size * const + (a - 1.0) * np.sum(np.log(x)) - b * np.sum(x ** p))

    def log_prior(self, W, H):
        return self._log_gg(W, self.a_w, self.b_w) + self._log_gg(H, self.a_h, self.b_h)

    def neg_log_conditional(self, X, Phi, W, H):
        """U(W, H) = -log p(W, H | X, Phi) + const, NumPy (the tests' reference)."""
        v = W @ H
        var = Phi * v ** self.power
        loglik = -0.5 * np.sum(np.log(2 * np.pi * var)) - 0.5 * np.sum(X * X / var)
        return -(loglik + self.log_prior(W, H))


def draw_gg(a, b, p, size, rng):
    """GG(a, b, p) draws: x = y^(1/p), y ~ Gamma(a / p, rate b)."""
    return rng.gamma(a / p, 1.0 / b, size=size) ** (1.0 / p)


def make_alpha_stable(n_rows, n_cols, rank, alpha=1.2, a=1.0, b=1.0, seed=0):
    """Synthetic data from AlphaStableNMF(rank, alpha, a, b, a, b): (X, W, H, Phi). Phi comes
    from the C core's stable draws (pymf.alphamf._alphamf.draw_phi) keyed by the seed."""
    alpha = _check_alpha(alpha)
    rng = np.random.default_rng(seed)
    p = 2.0 / alpha
    W = draw_gg(a, b, p, (n_rows, rank), rng)
    H = draw_gg(a, b, p, (rank, n_cols), rng)
    key = int(rng.integers(0, 2**63))
    Phi = _alphamf.draw_phi(alpha, key, n_rows * n_cols).reshape(n_rows, n_cols)
    v = W @ H
    X = np.sqrt(Phi * v ** p) * rng.standard_normal((n_rows, n_cols))
    return X, W, H, Phi
