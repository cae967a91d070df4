"""The sampled noise precision tau of BPMF (tau="sample", the default): its conjugate Gibbs
draw in the C core against the exact Gamma conditional, the Gibbs sampler's tau by Geweke's
successive-conditional test, and DSGLD's tau on data of known noise.

Statistical tests use a family-wise false-alarm rate alpha = 1e-3 with Bonferroni over
their comparisons (tests/mcmc_stats.py); each shows it can fail (a wrong shape or rate, or
a wrong simulator, is rejected).
"""
import numpy as np
import pytest
from mcmc_stats import batch_means, bonferroni_z
from scipy import stats
from support import synthetic_ratings as synthetic
from test_bpmf import _gibbs_chain

import pymf
from pymf.bpmf import _bpmf
from pymf.bpmf.layout import Layout

ALPHA = 1e-3


def _tau_draws(model, R, params, n):
    """n draws of tau from the DSGLD hyper step (bpmf_model.c) at a fixed state."""
    layout = Layout(R, (1, 1), False, np.random.default_rng(0)).c
    cm = model.c_model(3.0)
    ones_u, ones_i = np.ones(layout.n_users), np.ones(layout.n_items)
    draws = np.empty(n)
    for r in range(n):
        p = _bpmf.Params(model.rank, params.U, params.V, params.a, params.b, params.lambdas.copy())
        _bpmf.hyper_step(layout, cm, p, ones_u, ones_i, 17, r + 1)
        draws[r] = p.lambdas[-1]
    return draws, _bpmf.sq_error(layout, cm, params), layout.nnz


def _matches_gamma(draws, shape, rate):
    """Mean and mean of log against Gamma(shape, rate) (z-tests, Bonferroni over 2) and a
    Kolmogorov-Smirnov test of the whole distribution at alpha / 3."""
    mean, log_mean = shape / rate, stats.gamma(shape, scale=1 / rate).expect(np.log)
    sd, log_sd = np.sqrt(shape) / rate, np.sqrt(stats.gamma(shape, scale=1 / rate).expect(
        lambda x: (np.log(x) - log_mean) ** 2))
    n = len(draws)
    z = [(draws.mean() - mean) / (sd / np.sqrt(n)), (np.log(draws).mean() - log_mean) / (log_sd / np.sqrt(n))]
    ks = stats.kstest(draws, stats.gamma(shape, scale=1 / rate).cdf).pvalue
    return max(abs(v) for v in z) < bonferroni_z(ALPHA / 1.5, 2) and ks > ALPHA / 3


def test_tau_draw_is_the_conjugate_gamma_and_a_wrong_shape_or_rate_is_rejected():
    R = synthetic(L=6, M=5, D=2, density=0.6)
    model = pymf.BPMF(2, alpha0=1.5, beta0=0.7)
    rng = np.random.default_rng(3)
    params = _bpmf.Params(2, rng.normal(0, 0.5, (6, 2)), rng.normal(0, 0.5, (5, 2)),
                          rng.normal(0, 0.3, 6), rng.normal(0, 0.3, 5), np.ones(7))
    draws, S, N = _tau_draws(model, R, params, 6000)
    assert len(np.unique(draws)) == len(draws)
    shape, rate = model.alpha0 + N / 2, model.beta0 + S / 2
    assert _matches_gamma(draws, shape, rate)
    # power: the same test rejects the shape off by one half-rating and the rate without /2
    assert not _matches_gamma(draws, shape + 0.5, rate)
    assert not _matches_gamma(draws, shape, model.beta0 + S)


def test_fixed_tau_is_never_drawn():
    R = synthetic(L=6, M=5, D=2, density=0.6)
    rng = np.random.default_rng(3)
    params = _bpmf.Params(2, rng.normal(0, 0.5, (6, 2)), rng.normal(0, 0.5, (5, 2)),
                          np.zeros(6), np.zeros(5), np.full(7, 1.3))
    draws, _, _ = _tau_draws(pymf.BPMF(2, tau=1.3), R, params, 5)
    assert np.all(draws == 1.3)


def _geweke_tau(noise_factor, n=12000):
    """Geweke's successive-conditional test of the Gibbs sweep with tau sampled: a sweep,
    then fresh ratings given the state (noise precision tau * noise_factor; 1 is right).
    Returns the z-scores of tau and 1/tau against their prior moments."""
    D, L, M = 1, 3, 3
    alpha0, beta0 = 4.0, 3.0
    model = pymf.BPMF(D, alpha0=alpha0, beta0=beta0, mean_rating=0.0)
    rows, cols = np.nonzero(np.ones((L, M)))
    R = pymf.Ratings(rows, cols, np.zeros(L * M), shape=(L, M))
    chain, by_user, by_item = _gibbs_chain(model, R, "gamma", seed=31)
    rng = np.random.default_rng(32)
    chain.set_state(rng.normal(size=(L, D)), rng.normal(size=(M, D)), np.zeros(L), np.zeros(M),
                    np.full(2 * D + 3, alpha0 / beta0), 0)
    taus = []
    for t in range(n):
        U, V, a, b, h, _ = chain.get_state()
        mean = np.sum(U[rows] * V[cols], axis=1) + a[rows] + b[cols]
        values = mean + rng.normal(0, 1 / np.sqrt(h[-1] * noise_factor), L * M)
        chain.set_ratings(values[by_user], values[by_item])
        chain.run(1)
        taus.append(chain.get_state()[4][-1])
    taus = np.array(taus)[1000:]
    mean, se = batch_means(np.stack([taus, 1 / taus], axis=1)[None], n_batches=25)
    expect = np.array([alpha0 / beta0, beta0 / (alpha0 - 1)])
    return (mean - expect) / se


@pytest.mark.slow
def test_gibbs_tau_geweke_and_a_wrong_simulator_fails():
    limit = bonferroni_z(ALPHA, 2)
    z = _geweke_tau(1.0)
    assert np.abs(z).max() < limit, z
    # power: ratings simulated with 1.5 x the sampled precision (what a sampler whose rate
    # is off by that factor would need) move tau away from its prior
    z_wrong = _geweke_tau(1.5)
    assert np.abs(z_wrong).max() > limit, z_wrong


def test_sampled_tau_finds_the_noise_of_the_data():
    """Data with noise sd 0.5 (tau = 4), chains starting at tau = 2 (init_precision): Gibbs's
    posterior mean of tau lands within 10 % of 4, DSGLD's within 15 % of Gibbs's (its
    minibatch noise spreads the factors a little, which widens the residuals); the draws
    are recorded with every kept sample and traced."""
    rng = np.random.default_rng(5)
    L, M, D = 60, 50, 2
    U, V = rng.normal(0, 1, (L, D)), rng.normal(0, 1, (M, D))
    rows, cols = np.nonzero(rng.random((L, M)) < 0.6)
    values = 3.0 + np.sum(U[rows] * V[cols], axis=1) + rng.normal(0, 0.5, len(rows))
    R = pymf.Ratings(rows, cols, values, shape=(L, M))
    gibbs = pymf.sample(pymf.BPMF(D), R, pymf.BPMFGibbs(hyperprior="gamma", n_threads=1),
                        n_samples=200, burnin=100, seed=4)
    sampler = pymf.DSGLD(blocks=2, batch_size=100, round_length=10, hyper_every=2,
                         step_size=pymf.AnnealedStep(1e-3, 1000), n_threads=1)
    dsgld = pymf.sample(pymf.BPMF(D), R, sampler, n_samples=600, burnin=400, seed=4)
    tau_gibbs = np.mean(gibbs.sample_stats["tau"])
    assert tau_gibbs == pytest.approx(4.0, rel=0.10)
    assert np.mean(dsgld.sample_stats["tau"]) == pytest.approx(tau_gibbs, rel=0.15)
    for res in (gibbs, dsgld):
        assert "tau" in res.trace and res.trace["tau"][0] != res.trace["tau"][-1]
        assert res.noise_variance() == pytest.approx(np.mean(1 / res.sample_stats["tau"]))
