"""The samplers target the right posterior: moments against exact or gold-standard references.

1. Gaussian likelihood (beta = 2, phi = sigma^2), Gaussian priors, a 3 x 3 matrix of rank 2:
   the conditionals w_i | H, V and h_j | W, V are Gaussian, so an exact Gibbs sampler
   (written here, vectorised over independent chains) is the reference. LD, SGLD and PSGLD
   must reproduce E[(W H)_ij] and E[(W H)_ij^2].
2. Poisson likelihood (beta = 1, phi = 1), exponential priors, a 3 x 4 count matrix of rank 2:
   the reference is the Gamma-Poisson auxiliary-variable Gibbs sampler (DESIGN.md 3.2),
   written here; PSGLD with mirroring must reproduce E[(W H)_ij].

Monte-Carlo error: batch means over independent chains (tests/mcmc_stats.py). Family-wise
false-alarm rate 1e-3 per sampler, Bonferroni over the compared entries. The Langevin
samplers use constant steps small enough that their discretisation bias (O(eps): about
eps * L / 2 = 0.4% of a posterior variance here, L ~ 8 the largest curvature) is far below
the Monte-Carlo error (about 2% of a posterior standard deviation).
The same seeds are used on every run: nothing here was tuned by trying seeds.
"""
import numpy as np
import pytest

import pymf
from mcmc_stats import batch_means, bonferroni_z, z_scores

ALPHA = 1e-3
pytestmark = pytest.mark.slow  # long chains against exact references

# ---------------------------------------------------------------- Gaussian model -----
SIGMA2 = 0.5
LAM = 1.0
V_GAUSS = np.array([[1.2, -0.4, 0.8],
                    [0.3, 1.5, -1.1],
                    [-0.7, 0.9, 0.2]])


def gaussian_gibbs(V, rank, n_chains, n_sweeps, burn, seed):
    """Exact Gibbs for V = W H + N(0, SIGMA2), w_i, h_j ~ N(0, I / LAM), chains in parallel.
    Returns (chains, kept, I, J) draws of W H."""
    rng = np.random.default_rng(seed)
    n_rows, n_cols = V.shape
    W = rng.normal(size=(n_chains, n_rows, rank))
    H = rng.normal(size=(n_chains, rank, n_cols))
    eye = np.eye(rank)
    out = []

    def draw_rows(F, data):
        # rows x_r | F ~ N(P^-1 F data_r / s2, P^-1), P = LAM I + F F^T / s2 (same P for all r)
        precision = LAM * eye + np.einsum("ckj,clj->ckl", F, F) / SIGMA2
        cov = np.linalg.inv(precision)
        mean = np.einsum("ckl,clj,rj->crk", cov, F, data) / SIGMA2
        chol = np.linalg.cholesky(cov)
        z = rng.normal(size=mean.shape)
        return mean + np.einsum("ckl,crl->crk", chol, z)

    for sweep in range(n_sweeps):
        W = draw_rows(H, V)                                        # (c, I, K)
        H = np.transpose(draw_rows(np.transpose(W, (0, 2, 1)), V.T), (0, 2, 1))
        if sweep >= burn:
            out.append(W @ H)
    return np.stack(out, axis=1)


def langevin_draws(sampler, V, model, n_chains, n_iter, thin, burn, first_seed):
    draws = []
    for chain in range(n_chains):
        res = pymf.sample(model, V, sampler, n_samples=n_iter, burnin=burn, thin=thin,
                          seed=first_seed + chain, trace_every=n_iter)
        draws.append(np.einsum("sik,skj->sij", res.W_samples, res.H_samples))
    return np.stack(draws)


@pytest.fixture(scope="module")
def gaussian_reference():
    wh = gaussian_gibbs(V_GAUSS, rank=2, n_chains=64, n_sweeps=3000, burn=500, seed=1)
    return batch_means(wh), batch_means(wh ** 2)


@pytest.mark.parametrize("name, sampler", [
    ("LD", pymf.LD(step_size=1e-3)),
    ("SGLD", pymf.SGLD(step_size=5e-4, batch_size=6)),
    ("PSGLD", pymf.PSGLD(blocks=3, step_size=1e-3)),
])
def test_gaussian_mf_moments_match_exact_gibbs(gaussian_reference, name, sampler):
    (ref_mean, ref_se), (ref_sq, ref_sq_se) = gaussian_reference
    model = pymf.TweedieNMF(2, beta=2.0, phi=SIGMA2, prior="gaussian", lam_w=LAM, lam_h=LAM)
    n_iter = 400_000 if name != "SGLD" else 800_000
    wh = langevin_draws(sampler, V_GAUSS, model, n_chains=4, n_iter=n_iter, thin=100,
                        burn=20_000, first_seed=100)
    mean, se = batch_means(wh)
    sq, sq_se = batch_means(wh ** 2)
    z = np.concatenate([z_scores(mean, se, ref_mean, ref_se).ravel(),
                        z_scores(sq, sq_se, ref_sq, ref_sq_se).ravel()])
    limit = bonferroni_z(ALPHA, z.size)
    assert np.all(np.abs(z) < limit), (
        f"{name}: max |z| = {np.abs(z).max():.2f} >= {limit:.2f}\nmean\n{mean}\nref\n{ref_mean}"
        f"\nsecond moment\n{sq}\nref\n{ref_sq}")
    # the test has power: the reference differs clearly from a wrong target (the prior mean 0)
    assert np.abs(ref_mean).max() > 10 * ref_se.max()


# ---------------------------------------------------------------- Poisson model ------
V_POISSON = np.array([[3.0, 0.0, 1.0, 4.0],
                      [1.0, 2.0, 0.0, 2.0],
                      [5.0, 1.0, 2.0, 6.0]])


def poisson_gibbs(V, rank, lam, n_chains, n_sweeps, burn, seed):
    """Gamma-Poisson auxiliary-variable Gibbs (Cemgil 2009) for V ~ Po(W H), W, H ~ E(lam).
    Returns (chains, kept, I, J) draws of W H."""
    rng = np.random.default_rng(seed)
    n_rows, n_cols = V.shape
    W = rng.exponential(1.0, size=(n_chains, n_rows, rank))
    H = rng.exponential(1.0, size=(n_chains, rank, n_cols))
    counts = np.broadcast_to(V.astype(np.int64), (n_chains, n_rows, n_cols))
    out = []
    for sweep in range(n_sweeps):
        rates = W[:, :, :, None] * H[:, None, :, :]                 # (c, I, K, J)
        probs = np.moveaxis(rates / rates.sum(axis=2, keepdims=True), 2, -1)  # (c, I, J, K)
        S = rng.multinomial(counts, probs)                           # (c, I, J, K)
        W = rng.gamma(1.0 + S.sum(axis=2), 1.0 / (lam + H.sum(axis=2)[:, None, :]))
        H = rng.gamma(1.0 + np.moveaxis(S.sum(axis=1), -1, 1),
                      1.0 / (lam + W.sum(axis=1)[:, :, None]))
        if sweep >= burn:
            out.append(W @ H)
    return np.stack(out, axis=1)


def test_poisson_nmf_psgld_matches_gamma_poisson_gibbs():
    ref_mean, ref_se = batch_means(poisson_gibbs(V_POISSON, 2, 1.0, n_chains=64, n_sweeps=4000,
                                                 burn=500, seed=2))
    model = pymf.TweedieNMF(2, beta=1.0, phi=1.0, prior="exponential", lam_w=1.0, lam_h=1.0)
    sampler = pymf.PSGLD(blocks=3, step_size=1e-3)
    wh = langevin_draws(sampler, V_POISSON, model, n_chains=4, n_iter=400_000, thin=100,
                        burn=20_000, first_seed=200)
    mean, se = batch_means(wh)
    z = z_scores(mean, se, ref_mean, ref_se).ravel()
    limit = bonferroni_z(ALPHA, z.size)
    assert np.all(np.abs(z) < limit), (
        f"max |z| = {np.abs(z).max():.2f} >= {limit:.2f}\nPSGLD\n{mean}\nGibbs\n{ref_mean}")
    # power: the posterior mean is not simply the data (shrinkage by the priors shows)
    assert np.abs(ref_mean - V_POISSON).max() > 10 * ref_se.max()
