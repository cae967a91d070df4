"""The C Gibbs sampler for Poisson NMF: a Geweke "getting it right" test, agreement with the
NumPy reference sampler of test_posterior.py, determinism and bad input."""
import numpy as np
import pytest

import pymf
from mcmc_stats import batch_means, bonferroni_z, z_scores
from pymf import _blocks, _gibbs_nmf
from test_posterior import V_POISSON, poisson_gibbs

ALPHA = 1e-3


def geweke_draws(n_steps, lam_sampler, seed):
    """Successive-conditional simulator (Geweke 2004): alternate V ~ Po(W H) and one C Gibbs
    sweep (W, H) | V. Its stationary law is the prior, so E[w] = 1/lam, E[w^2] = 2/lam^2."""
    rng = np.random.default_rng(seed)
    shape, rank, lam = (2, 3), 2, 1.0
    W = rng.exponential(1 / lam, (shape[0], rank))
    H = rng.exponential(1 / lam, (rank, shape[1]))
    out = []
    for step in range(n_steps):
        V = rng.poisson(W @ H).astype(float)
        data = _blocks.BlockedData.from_dense(V, 1)
        chain = _gibbs_nmf.GibbsChain(data, rank, lam_sampler, lam_sampler, seed * 100003 + step)
        chain.set_state(np.ascontiguousarray(W), np.ascontiguousarray(H.T), 0)
        chain.run(np.array([1.0]))
        W, Ht, _ = chain.get_state()
        H = Ht.T.copy()
        out.append(np.concatenate([W.ravel(), H.ravel(), (W ** 2).ravel(), (H ** 2).ravel()]))
    return np.array(out)


def test_geweke_getting_it_right():
    """Prior moments of every w and h (mean and second moment) from the successive-
    conditional simulator, 4 chains x 6000 steps, z-test with batch means at a family-wise
    false-alarm rate of 1e-3 (Bonferroni over 20 statistics)."""
    draws = np.stack([geweke_draws(6000, 1.0, seed)[500:] for seed in range(4)])
    mean, se = batch_means(draws)
    expected = np.concatenate([np.full(10, 1.0), np.full(10, 2.0)])
    z = (mean - expected) / se
    assert np.all(np.abs(z) < bonferroni_z(ALPHA, z.size)), np.round(z, 2)


def test_geweke_detects_a_wrong_conditional():
    """The same test has power: a sampler whose Gamma rate uses lam = 1.6 instead of the
    prior's 1.0 is rejected."""
    draws = np.stack([geweke_draws(6000, 1.6, seed)[500:] for seed in range(4)])
    mean, se = batch_means(draws)
    expected = np.concatenate([np.full(10, 1.0), np.full(10, 2.0)])
    z = (mean - expected) / se
    assert np.abs(z).max() > bonferroni_z(ALPHA, z.size)


def test_c_gibbs_matches_numpy_reference_posterior():
    ref_mean, ref_se = batch_means(poisson_gibbs(V_POISSON, 2, 1.0, n_chains=64, n_sweeps=4000,
                                                 burn=500, seed=2))
    model = pymf.TweedieNMF(2, beta=1.0)
    draws = []
    for chain in range(8):
        res = pymf.sample(model, V_POISSON, pymf.Gibbs(), n_samples=20000, burnin=500, seed=300 + chain,
                          trace_every=20000)
        draws.append(np.einsum("sik,skj->sij", res.W_samples, res.H_samples))
    mean, se = batch_means(np.stack(draws))
    z = z_scores(mean, se, ref_mean, ref_se).ravel()
    assert np.all(np.abs(z) < bonferroni_z(ALPHA, z.size)), (mean, ref_mean)


@pytest.mark.parametrize("sparse", [False, True])
def test_bit_identical_for_one_and_two_threads(sparse):
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 30, 3, seed=1)
    data = V
    if sparse:
        mask = np.random.default_rng(0).random(V.shape) < 0.5
        rows, cols = np.nonzero(mask)
        data = pymf.Ratings(rows, cols, V[mask], shape=V.shape)
    runs = [pymf.sample(pymf.TweedieNMF(3), data, pymf.Gibbs(n_threads=n, blocks=4), n_samples=20,
                        seed=3) for n in (1, 2)]
    assert np.array_equal(runs[0].W_samples, runs[1].W_samples)
    assert np.array_equal(runs[0].H_samples, runs[1].H_samples)
    assert not np.allclose(runs[0].W_samples[0], runs[0].W_samples[-1])


@pytest.mark.parametrize("V, message", [(np.array([[1.5, 2.0], [0.0, 1.0]]), "integer"),
                                        (np.array([[1.0, -2.0], [0.0, 1.0]]), "negative")])
def test_bad_data(V, message):
    with pytest.raises(ValueError, match=message):
        pymf.sample(pymf.TweedieNMF(1), V, pymf.Gibbs(), n_samples=2)


def test_wrong_model_for_gibbs():
    with pytest.raises(ValueError, match="Poisson NMF"):
        pymf.sample(pymf.TweedieNMF(1, beta=0.5), np.ones((3, 3)), pymf.Gibbs(), n_samples=2)
