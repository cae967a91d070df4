"""The sampled dispersion of Gaussian matrix factorisation, TweedieNMF(beta=2, phi="sample"):
its conjugate inverse-gamma draw in the C core (core/src/langevin.c) against the exact
conditional, the whole LD chain by Geweke's successive-conditional test, the record (trace,
sample_stats, checkpoints) and the posterior predictive's coverage on data drawn from the
model.

Statistical tests use a family-wise false-alarm rate alpha = 1e-3 with Bonferroni over
their comparisons (tests/mcmc_stats.py); each shows it can fail (a wrong shape or rate, a
wrong simulator, a wrong fixed phi is rejected).
"""
import math

import numpy as np
import pytest
from gaussian_mf_reference import gaussian_mf_from_the_model
from mcmc_stats import batch_means, bonferroni_z
from scipy import stats

import pymf
from pymf.nmf import _blocks, _sgld

ALPHA = 1e-3


def _chain(V, K, phi_every=1, shape=1.0, rate=1.0, kind="ld", blocks=1, lam=1.0, seed=7):
    data = _blocks.BlockedData.from_dense(np.ascontiguousarray(V), blocks, False, 0)
    return _sgld.LangevinChain(data, kind, K, 2.0, 1.0, "gaussian", lam, lam, seed, seed + 1,
                               n_threads=1, phi_every=phi_every, phi_shape=shape,
                               phi_rate=rate, phi_seed=seed + 2)


def _matches_inverse_gamma(phis, shape, rate):
    """1/phi against Gamma(shape, rate): z-tests of the mean of 1/phi and of log phi
    (Bonferroni over 2) and a Kolmogorov-Smirnov test of the whole distribution at alpha/3."""
    precision = stats.gamma(shape, scale=1 / rate)
    x = 1.0 / phis
    n = len(x)
    log_mean = precision.expect(np.log)
    log_sd = math.sqrt(precision.expect(lambda y: (np.log(y) - log_mean) ** 2))
    z = [(x.mean() - precision.mean()) / (precision.std() / math.sqrt(n)),
         (np.log(x).mean() - log_mean) / (log_sd / math.sqrt(n))]
    ks = stats.kstest(x, precision.cdf).pvalue
    return max(abs(v) for v in z) < bonferroni_z(ALPHA / 1.5, 2) and ks > ALPHA / 3


def test_phi_draw_is_the_conjugate_inverse_gamma_and_a_wrong_shape_or_rate_is_rejected():
    rng = np.random.default_rng(3)
    I, J, K = 6, 5, 2
    V = rng.normal(0, 1, (I, J))
    W, Ht = rng.normal(0, 0.7, (I, K)), rng.normal(0, 0.7, (J, K))
    chain = _chain(V, K, shape=1.5, rate=0.7)
    chain.set_state(W, Ht, 0)
    half_rss = chain.half_rss()
    assert half_rss == pytest.approx(0.5 * np.sum((V - W @ Ht.T) ** 2), rel=1e-13)
    phis = np.array([chain.draw_phi(half_rss, t) for t in range(1, 6001)])
    assert len(np.unique(phis)) == len(phis) and chain.phi == phis[-1]
    N = I * J
    shape, rate = 1.5 + N / 2, 0.7 + half_rss
    assert _matches_inverse_gamma(phis, shape, rate)
    # power: the shape off by half an observation, the rate with the RSS instead of RSS / 2
    assert not _matches_inverse_gamma(phis, shape + 0.5, rate)
    assert not _matches_inverse_gamma(phis, shape, 0.7 + 2 * half_rss)
    # the draw is a function of (state, t): the same t gives the same phi
    assert chain.draw_phi(half_rss, 17) == phis[16]


def test_a_fixed_phi_is_never_drawn_and_bad_settings_are_refused():
    rng = np.random.default_rng(1)
    V = rng.normal(0, 1, (8, 7))
    data = _blocks.BlockedData.from_dense(V, 1, False, 0)
    fixed = _sgld.LangevinChain(data, "ld", 2, 2.0, 0.3, "gaussian", 1.0, 1.0, 1, 2, n_threads=1)
    fixed.set_state(rng.normal(size=(8, 2)), rng.normal(size=(7, 2)), 0)
    fixed.run(np.full(5, 1e-3))
    assert fixed.phi == 0.3
    with pytest.raises(ValueError, match="fixed, not sampled"):
        fixed.draw_phi(1.0, 1)
    with pytest.raises(ValueError, match="beta = 2"):  # the C core's own check
        _sgld.LangevinChain(data, "ld", 2, 1.0, 1.0, "exponential", 1.0, 1.0, 1, 2, phi_every=1)
    with pytest.raises(ValueError, match="Gaussian model"):
        pymf.TweedieNMF(2, beta=1.0, phi="sample")
    with pytest.raises(ValueError, match="'sample' or a positive number"):
        pymf.TweedieNMF(2, beta=2.0, phi="auto")
    with pytest.raises(ValueError, match="phi_rate"):
        pymf.TweedieNMF(2, beta=2.0, phi="sample", phi_rate=0.0)
    model = pymf.TweedieNMF(2, beta=2.0, phi="sample", prior="gaussian")
    with pytest.raises(ValueError, match="optimiser"):
        pymf.fit(model, V, pymf.SGD(step_size=1e-3), n_epochs=1, seed=0)
    with pytest.raises(ValueError, match=r"LD, pymf.SGLD and pymf.PSGLD only, not by HAMCMC\(memory"):
        pymf.sample(model, V, pymf.HAMCMC(step_size=1e-4, blocks=1), n_samples=2, seed=0)
    with pytest.raises(ValueError):  # the Gibbs sampler is Poisson NMF's
        pymf.sample(model, np.abs(V), pymf.Gibbs(), n_samples=2, seed=0)


def _geweke_phi(noise_factor, n=6000, sweeps=4, eps=0.02):
    """Geweke's successive-conditional test of LD with phi sampled: each step draws fresh
    data given the state (noise variance phi * noise_factor; 1 is right), then runs `sweeps`
    LD iterations, each followed by the phi draw. A prior phi ~ InvGamma(4, 3) (finite
    variance) and W, H ~ N(0, 1); 3 x 3 data, K = 1. Returns the z-scores of phi and 1/phi
    against their prior means (batch means over the chain)."""
    I, J, K, a0, b0 = 3, 3, 1, 4.0, 3.0
    rng = np.random.default_rng(21)
    W, Ht = rng.normal(size=(I, K)), rng.normal(size=(J, K))
    phi = stats.invgamma(a0, scale=b0).rvs(random_state=rng)
    phis = np.empty(n)
    for step in range(n):
        V = W @ Ht.T + rng.normal(0, math.sqrt(phi * noise_factor), (I, J))
        chain = _chain(V, K, shape=a0, rate=b0, seed=1000 + step)
        chain.set_state(W, Ht, 0)
        chain.set_phi(phi)
        chain.run(np.full(sweeps, eps))
        W, Ht, _ = chain.get_state()
        phi = phis[step] = chain.phi
    kept = phis[500:]
    mean, se = batch_means(np.stack([kept, 1 / kept], axis=1)[None], n_batches=25)
    expect = np.array([b0 / (a0 - 1), a0 / b0])
    return (mean - expect) / se


def test_geweke_ld_with_sampled_phi_and_a_wrong_simulator_fails():
    """The LD move is not exact (its Euler step biases W and H by O(eps)); at eps = 0.02 on
    a posterior of curvature about 2 that bias is far below the Monte-Carlo error here."""
    limit = bonferroni_z(ALPHA, 2)
    z = _geweke_phi(1.0)
    assert np.abs(z).max() < limit, z
    # power: data simulated with 1.5 x the sampled variance (what a draw whose rate is off by
    # that factor would need) move phi away from its prior
    z_wrong = _geweke_phi(1.5)
    assert np.abs(z_wrong).max() > limit, z_wrong


def _gaussian_mf():
    """Data from the model: W, H ~ N(0, 1), noise N(0, 0.5^2); a quarter held out."""
    return gaussian_mf_from_the_model(60, 50, K=2, sd=0.5, seed=13, held_out=0.25)


@pytest.fixture(scope="module")
def gaussian_split():
    return _gaussian_mf()


def _psgld(train, test, phi, seed=4, **options):
    model = pymf.TweedieNMF(2, beta=2.0, phi=phi, prior="gaussian")
    return pymf.sample(model, train, pymf.PSGLD(blocks=2, n_threads=1, step_size=2e-3),
                       n_samples=600, burnin=300, thin=2, seed=seed, test=test, **options)


@pytest.fixture(scope="module")
def sampled(gaussian_split):
    return _psgld(*gaussian_split, phi="sample")


def test_sampled_phi_is_recorded_and_finds_the_noise(gaussian_split, sampled):
    res = sampled
    assert res.params["phi_every"] == 2 and res.params["model"]["phi"] == "sample"
    phis = res.sample_stats["phi"]
    assert phis.shape == (1, 300) and len(np.unique(phis)) > 250
    assert res.trace["phi"][0] == 1.0 and len(res.trace["phi"]) == len(res.trace["loglik"])
    # noise sd 0.5: phi = 0.25; the posterior mean within 15 % (the fit absorbs a little noise)
    assert res.noise_variance() == pytest.approx(0.25, rel=0.15)
    assert res.noise_variance() == pytest.approx(np.mean(phis))


def test_sampled_phi_covers_held_out_values_and_a_wrong_fixed_phi_does_not(gaussian_split, sampled):
    """90 % predictive intervals (each draw's W H plus N(0, its phi) noise) cover 90 % of the
    held-out values within the binomial error of their number; a fixed phi = 1 (the old
    default, 4x the noise) over-covers beyond it."""
    train, test = gaussian_split
    se = math.sqrt(0.9 * 0.1 / test.nnz)
    limit = bonferroni_z(ALPHA, 2) * se
    cov = sampled.coverage(test, levels=(0.9,))[0.9]
    assert abs(cov - 0.9) < limit, cov
    wrong = _psgld(train, test, phi=1.0).coverage(test, levels=(0.9,))[0.9]
    assert abs(wrong - 0.9) > limit, wrong


def test_checkpoint_resume_with_sampled_phi_is_bit_identical(gaussian_split, tmp_path):
    train, _ = gaussian_split
    model = pymf.TweedieNMF(2, beta=2.0, phi="sample", prior="gaussian")
    whole = pymf.sample(model, train, pymf.SGLD(step_size=1e-3, batch_size=0.3, n_threads=1),
                        n_samples=40, thin=2, seed=9)
    path = tmp_path / "ck.npz"
    stop_at = {"n": 0}

    def stop(info):
        stop_at["n"] += 1
        return stop_at["n"] == 10  # stop after ten callbacks, mid-run

    first = pymf.sample(model, train, pymf.SGLD(step_size=1e-3, batch_size=0.3, n_threads=1),
                        n_samples=40, thin=2, seed=9, checkpoint=path, callback=stop)
    assert first.n_kept == 10 < whole.n_kept
    resumed = pymf.sample(model, train, pymf.SGLD(step_size=1e-3, batch_size=0.3, n_threads=2),
                          n_samples=40, thin=2, seed=9, checkpoint=path)
    assert whole.params["phi_every"] == 4  # ceil(N / batch) with batch = 0.3 N
    assert np.array_equal(resumed.sample_stats["phi"], whole.sample_stats["phi"])
    assert np.array_equal(resumed.W_samples, whole.W_samples)
    assert np.array_equal(resumed.trace["phi"], whole.trace["phi"])


def test_the_command_line_samples_phi(tmp_path):
    import json

    from pymf.cli import main
    rng = np.random.default_rng(2)
    np.save(tmp_path / "V.npy", rng.normal(size=(30, 2)) @ rng.normal(size=(2, 20))
            + rng.normal(0, 0.5, (30, 20)))
    assert main(["sample", "--data", str(tmp_path / "V.npy"), "--rank", "2", "--beta", "2",
                 "--prior", "gaussian", "--phi", "sample", "--sampler", "ld", "--samples", "60",
                 "--burnin", "60", "--thin", "2", "--threads", "1", "--no-progress",
                 "--out", str(tmp_path / "out")]) == 0
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["model"]["phi"] == "sample" and summary["phi_mean"] > 0
    assert summary["auto_step"]["eps"] > 0  # LD's default step is "auto"


def test_an_auto_step_follows_the_sampled_phi():
    """step_size="auto" is chosen for the curvature at phi_init = 1, which scales as 1 / phi:
    the chain runs it as eps phi_t / phi_init, and LD finds the noise (variance 0.25). The
    same eps given as a constant (not scaled) runs at eps lambda = 4 once phi is near 0.25,
    twice the stability limit, and its over-dispersed factors leave phi far too large."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 2)) @ rng.normal(size=(2, 50)) + rng.normal(0, 0.5, (60, 50))
    model = pymf.TweedieNMF(2, beta=2, phi="sample", prior="gaussian")
    auto = pymf.sample(model, X, pymf.LD(n_threads=1), n_samples=300, burnin=300, seed=0)
    assert auto.params["auto_step"]["scaled_by_phi"] == 1.0
    assert auto.noise_variance() == pytest.approx(0.25, rel=0.15)
    eps = auto.params["auto_step"]["eps"]
    unscaled = pymf.sample(model, X, pymf.LD(step_size=eps, n_threads=1), n_samples=300,
                           burnin=300, seed=0)
    assert unscaled.noise_variance() > 1.5 * 0.25
