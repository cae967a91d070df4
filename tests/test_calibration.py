"""Calibrated uncertainty: Result.coverage / calibration / plot_calibration (pymf/engine/
calibration.py) on data drawn from the model itself.

The exact sampler (BPMF Gibbs with the diagonal-precision hyperprior, the model pymf.BPMF
states) must cover about 90 % of held-out values with its 90 % posterior predictive
intervals: within z(alpha/2) binomial standard errors of 0.90 (alpha = 1e-3 per
comparison, Bonferroni over the comparisons of a test). Power: the same check rejects
intervals without the noise term and a chain run with a wrong (fixed) tau.
"""
import json

import numpy as np
import pytest
from mcmc_stats import bonferroni_z

import pymf

ALPHA = 1e-3


def bpmf_from_the_model(L=150, M=120, D=2, density=0.4, seed=7):
    """Ratings drawn from pymf.BPMF's own generative model with precisions near 1 (the
    prior Gamma(10, 10)), noise precision tau = 2, mean 0; 25 % of them held out."""
    rng = np.random.default_rng(seed)
    lam_u, lam_v = rng.gamma(10, 1 / 10, D), rng.gamma(10, 1 / 10, D)
    lam_a, lam_b = rng.gamma(10, 1 / 10, 2)
    U = rng.normal(0, 1, (L, D)) / np.sqrt(lam_u)
    V = rng.normal(0, 1, (M, D)) / np.sqrt(lam_v)
    a, b = rng.normal(0, 1 / np.sqrt(lam_a), L), rng.normal(0, 1 / np.sqrt(lam_b), M)
    rows, cols = np.nonzero(rng.random((L, M)) < density)
    values = np.sum(U[rows] * V[cols], axis=1) + a[rows] + b[cols] + rng.normal(0, 1 / np.sqrt(2.0), len(rows))
    return pymf.Ratings(rows, cols, values, shape=(L, M)).split(0.25, seed=seed)


def within_mc_error(observed, level, n, n_comparisons=1):
    """|observed - level| within the binomial Monte-Carlo error of n held-out values."""
    se = np.sqrt(level * (1 - level) / n)
    return abs(observed - level) < bonferroni_z(ALPHA, n_comparisons) * se


def gibbs(train, test, tau="sample", keep_samples=True):
    model = pymf.BPMF(2, tau=tau, alpha0=10.0, beta0=10.0, mean_rating=0.0)
    sampler = pymf.BPMFGibbs(hyperprior="gamma", n_threads=1)
    return pymf.sample(model, train, sampler, n_samples=300, burnin=100, seed=3, test=test,
                       keep_samples=keep_samples)


@pytest.fixture(scope="module")
def split():
    return bpmf_from_the_model()


@pytest.fixture(scope="module")
def exact(split):
    return gibbs(*split)


def test_exact_sampler_covers_its_nominal_levels(split, exact):
    train, test = split
    cov = exact.coverage(test)
    assert set(cov) == {0.5, 0.8, 0.9, 0.95}
    for level, observed in cov.items():
        assert within_mc_error(observed, level, test.nnz, n_comparisons=4), (level, observed)
    # without kept draws: Gaussian intervals from the running moments of the test entries
    moments_only = gibbs(train, test, keep_samples=False).coverage(test, levels=(0.9,))[0.9]
    assert within_mc_error(moments_only, 0.9, test.nnz)
    assert abs(moments_only - cov[0.9]) < 0.02


def test_coverage_rejects_intervals_without_noise_and_a_wrong_tau(split, exact):
    train, test = split
    mean, sd = exact.predict(test.rows, test.cols, return_std=True)  # no noise term
    inside = np.abs(test.values - mean) <= 1.6449 * sd
    assert not within_mc_error(inside.mean(), 0.9, test.nnz)
    wrong = gibbs(train, test, tau=3.0)  # the data have tau = 2: intervals 18 % too narrow
    assert not within_mc_error(wrong.coverage(test, levels=(0.9,))[0.9], 0.9, test.nnz)


def test_calibration_table_and_plot(split, exact, tmp_path):
    train, test = split
    table = exact.calibration(test, n_bins=5)
    json.dumps(table)
    assert table["n"] == test.nnz and len(table["bin_rmse"]) == 5
    assert table["coverage"] == [exact.coverage(test)[lvl] for lvl in table["levels"]]
    # binned RMSE follows the predicted sd (calibrated: within 25 % in every bin)
    np.testing.assert_allclose(table["bin_rmse"], table["bin_sd"], rtol=0.25)
    path = exact.plot_calibration(tmp_path / "calibration.png")
    assert (tmp_path / "calibration.png").stat().st_size > 10000 and path
    with pytest.raises(ValueError, match="level"):
        exact.coverage(test, levels=(0.9, 1.5))
    with pytest.raises(ValueError, match="held-out"):
        exact.coverage(None)


def test_a_point_estimate_has_no_coverage(split):
    train, test = split
    fit = pymf.fit(pymf.BPMF(2, tau=2.0), train, pymf.SGD(step_size=1e-5, batch_size=50),
                   n_epochs=1, seed=0)
    with pytest.raises(ValueError, match="no posterior predictive"):
        fit.coverage(test)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 2.0])
def test_tweedie_predictive_draws_have_the_model_moments(beta):
    """draw_tweedie: mean mu and variance phi mu^p (p = 2 - beta), z-tests over 4 means."""
    from pymf.nmf.models import draw_tweedie
    mu, phi, n = np.array([0.3, 1.0, 2.5, 7.0]), 0.8, 200000
    draws = draw_tweedie(np.broadcast_to(mu, (n, 4)), beta, phi, np.random.default_rng(1))
    var = phi * mu ** (2 - beta)
    z_mean = (draws.mean(0) - mu) / np.sqrt(var / n)
    assert np.abs(z_mean).max() < bonferroni_z(ALPHA, 8), z_mean
    # the variance's standard error from the fourth central moment of the draws
    m4 = np.mean((draws - mu) ** 4, axis=0)
    z_var = (draws.var(0) - var) / np.sqrt((m4 - var ** 2) / n)
    assert np.abs(z_var).max() < bonferroni_z(ALPHA, 8), z_var
    if beta != 2.0:
        assert draws.min() >= 0


def test_poisson_nmf_gibbs_covers_held_out_counts():
    """Poisson NMF from its own model (exponential priors), the exact Gibbs sampler: the
    90 % interval of a count covers at least 90 % (inclusive quantiles of a discrete
    predictive) and not much more than its Gaussian error; intervals without the Poisson
    noise cover far less."""
    rng = np.random.default_rng(11)
    W, H = rng.exponential(1.0, (40, 2)), rng.exponential(1.0, (2, 30))
    V = rng.poisson(W @ H).astype(float)
    train, test = pymf.Ratings.from_dense(V).split(0.25, seed=2)
    res = pymf.sample(pymf.TweedieNMF(2, beta=1.0), train, pymf.Gibbs(n_threads=1),
                      n_samples=400, burnin=200, seed=5)
    cov = res.coverage(test, levels=(0.9,))[0.9]
    se = np.sqrt(0.09 / test.nnz)
    assert 0.9 - bonferroni_z(ALPHA, 2) * se < cov < 0.99, cov  # 0.96 here: counts are discrete
    mean, sd = res.predict(test.rows, test.cols, return_std=True)
    no_noise = np.mean(np.abs(test.values - mean) <= 1.6449 * sd)
    assert no_noise < 0.9 - bonferroni_z(ALPHA, 2) * se, no_noise


def test_sibm_says_why_it_has_no_coverage():
    from pymf.sibm import make_binary_mf
    X = make_binary_mf(40, 30, 2, seed=0)[0]
    res = pymf.fit(pymf.LogisticMF(2), X, pymf.BatchVB(), n_updates=2, seed=0)
    with pytest.raises(ValueError, match="binary entries"):
        res.coverage(np.ones((40, 30)))
