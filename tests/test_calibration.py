"""Calibrated uncertainty: Result.coverage / calibration / plot_calibration (pymf/engine/
calibration.py) on data drawn from the model itself.

The exact sampler (BPMF Gibbs with the diagonal-precision hyperprior, the model pymf.BPMF
states) must cover about 90 % of held-out values with its 90 % posterior predictive
intervals: within z(alpha/2) binomial standard errors of 0.90 (alpha = 1e-3 per
comparison, Bonferroni over the comparisons of a test). Power: the same check rejects
intervals without the noise term and a chain run with a wrong (fixed) tau.

The SG-MCMC samplers with the automatic step bounded for their minibatch noise,
pymf.AutoStep(minibatch_noise=0.1) (pymf.engine.autostep, point 4), pass the same check at
every level: DSGLD on BPMF's model, PSGLD on Gaussian MF (TweedieNMF(beta=2,
prior="gaussian", phi="sample")), whose exact reference is a NumPy Gibbs sampler
(tests/gaussian_mf_reference.py; pymf has no exact sampler of that model). Power: the
default "auto" step (stability only) over-covers beyond the check on the same data,
and so do intervals without the noise term.
"""
import json

import numpy as np
import pytest
from mcmc_stats import bonferroni_z

import pymf
from gaussian_mf_reference import (gaussian_mf_from_the_model, gibbs_gaussian_mf,
                                   predictive_coverage)

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
    assert (tmp_path / "calibration.png").stat().st_size > 10000
    assert path == str(tmp_path / "calibration.png")
    # the path returned is the file written; a wrong path fails before any work
    assert exact.plot_calibration(tmp_path / "plain") == str(tmp_path / "plain.png")
    assert (tmp_path / "plain.png").stat().st_size > 10000
    (tmp_path / "folder.png").mkdir()
    for bad, message in ((tmp_path / "missing" / "c.png", "directory .* does not exist"),
                         (tmp_path / "folder.png", "is a directory"), ("", "non-empty")):
        with pytest.raises(ValueError, match=f"the calibration plot path.*{message}"):
            exact.plot_calibration(bad, test)
    with pytest.raises(ValueError, match="level"):
        exact.coverage(test, levels=(0.9, 1.5))
    with pytest.raises(ValueError, match="held-out"):
        exact.coverage(None)
    # the test set's cells are cells of the data's matrix, as pymf.sample(test=) asks: a
    # test set of another shape was scored as if its entries were the data's
    L, M = train.shape
    for wrong in (pymf.Ratings(test.rows, test.cols, test.values, shape=(L + 1, M)),
                  pymf.Ratings([0], [0], [3.0], shape=(1, 1))):
        with pytest.raises(ValueError, match=rf"the test set has shape \({wrong.shape[0]}, "):
            exact.coverage(wrong)
    with pytest.raises(ValueError, match="seed must be None or an integer >= 0, got -1"):
        exact.calibration(test, seed=-1)


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
    # SIBM's own (rows, cols, labels) test tuple was refused as a matrix of another shape
    _, test = pymf.sibm.holdout(X, 0.1, seed=0)
    for call in (res.coverage, res.calibration):
        with pytest.raises(ValueError, match="binary entries"):
            call(test)


# --- SG-MCMC with automatic steps ------------------------------------------------------

CALIBRATED = 0.1  # AutoStep(minibatch_noise=...): the stationary variance inflated <= 10 %


def dsgld(train, test, step_size, n_samples, burnin):
    model = pymf.BPMF(2, alpha0=10.0, beta0=10.0, mean_rating=0.0)
    return pymf.sample(model, train, pymf.DSGLD(n_threads=1, step_size=step_size),
                       n_samples=n_samples, burnin=burnin, thin=4, seed=3, test=test)


@pytest.fixture(scope="module")
def stability_only(split):
    """DSGLD with the stability rule alone (the default "auto" before its per-row bound)."""
    return dsgld(*split, pymf.AutoStep(per_row=False), 500, 300)


def test_dsgld_with_the_noise_bounded_auto_step_covers_its_nominal_levels(split, stability_only):
    """DSGLD (2 x 2 grid, the default minibatch min(1000, N / 40) = 135 ratings, so its
    gradient is scaled by s = 20) on BPMF's own model: the bounded step covers 50/80/90/95 %
    within binomial error, as the exact Gibbs sampler does; the default "auto" step,
    which bounds the stability only, spreads the factors, lowers tau and over-covers."""
    train, test = split
    res = dsgld(train, test, pymf.AutoStep(minibatch_noise=CALIBRATED), 1000, 300)
    chosen = res.params["auto_step"]
    assert chosen["minibatch_noise"] == CALIBRATED
    assert chosen["minibatch_scale"] == pytest.approx(train.nnz * 2 / (4 * 135))
    assert chosen["eps"] == pytest.approx(2 * CALIBRATED / ((chosen["minibatch_scale"] - 1)
                                                          * chosen["lambda_max"]))
    assert chosen["eps"] < chosen["burnin_eps"] / 10
    step = res.params["sampler"]["step_size"]
    assert step["kind"] == "burnin_then" and step["burnin"] == 300  # the stable step burns in
    cov = res.coverage(test)
    for level, observed in cov.items():
        assert within_mc_error(observed, level, test.nnz, n_comparisons=4), (level, observed)
    mean, sd = res.predict(test.rows, test.cols, return_std=True)  # no noise term
    assert not within_mc_error(np.mean(np.abs(test.values - mean) <= 1.6449 * sd), 0.9, test.nnz)
    # power: the stability rule alone (what step_size="auto" meant before its per-row
    # bound) over-covers
    over = stability_only.coverage(test, levels=(0.9,))[0.9]
    assert over > 0.9 and not within_mc_error(over, 0.9, test.nnz), over
    assert stability_only.sample_stats["tau"].mean() < res.sample_stats["tau"].mean()


def test_dsgld_default_auto_step_covers_its_nominal_levels(split, stability_only):
    """DSGLD's default step_size="auto" on BPMF's own model: after the burn-in every row's
    coordinates get their own step, bounded so that the minibatch noise inflates each row's
    stiffest direction by at most 1 + ROW_NOISE (pymf.engine.autostep, point 5): it covers
    50/80/90/95 % within binomial error, and the sampled tau comes back to the data's 2.
    Power: the same run without the per-row bound (AutoStep(per_row=False)) over-covers."""
    from pymf.engine.autostep import ROW_NOISE
    train, test = split
    res = dsgld(train, test, "auto", 1000, 300)
    chosen = res.params["auto_step"]
    assert chosen["row_noise"] == ROW_NOISE and chosen["row_steps_from"] == 301
    assert chosen["minibatch_scale"] == pytest.approx(train.nnz * 2 / (4 * 135))
    rows = chosen["row_steps"]
    assert 0 < rows["min"] <= rows["median"] < 1 and rows["users_bounded"] > 0.5
    # the burn-in ran the stability rule's annealed step, as before
    assert res.params["sampler"]["step_size"]["kind"] == "annealed"
    cov = res.coverage(test)
    for level, observed in cov.items():
        assert within_mc_error(observed, level, test.nnz, n_comparisons=4), (level, observed)
    assert res.sample_stats["tau"].mean() == pytest.approx(2.0, rel=0.1)
    over = stability_only.coverage(test, levels=(0.9,))[0.9]
    assert not within_mc_error(over, 0.9, test.nnz), over
    assert "row_noise" not in stability_only.params["auto_step"]
    assert stability_only.params["sampler"]["step_size"]["kind"] == "annealed"


def test_dsgld_per_row_steps_are_deterministic_and_resume_bit_for_bit(split, tmp_path):
    """The row factors are measured at the chains' state at the end of the burn-in: the
    same bits for any thread count, and a run interrupted before or after that round and
    resumed equals the uninterrupted one (the factors travel in the checkpoint)."""
    train, _ = split
    model = pymf.BPMF(2, alpha0=10.0, beta0=10.0, mean_rating=0.0)

    def run(threads=1, **options):
        return pymf.sample(model, train, pymf.DSGLD(n_threads=threads), n_samples=30,
                           burnin=20, seed=5, **options)

    whole = run()
    assert whole.params["auto_step"]["row_steps_from"] == 21
    np.testing.assert_array_equal(run(threads=2).samples["U"], whole.samples["U"])
    plain = pymf.sample(model, train, pymf.DSGLD(n_threads=1, step_size=pymf.AutoStep(
        per_row=False)), n_samples=30, burnin=20, seed=5)
    assert not np.array_equal(plain.samples["U"], whole.samples["U"])  # the bound acts
    for stop_at in (10, 30):  # inside the burn-in, and after the factors were set
        path = tmp_path / f"ck{stop_at}.npz"
        calls = {"n": 0}

        def stop(info):
            calls["n"] += 1
            return info["iteration"] >= stop_at

        run(checkpoint=path, callback=stop, checkpoint_every=1)
        resumed = run(checkpoint=path)
        np.testing.assert_array_equal(resumed.samples["U"], whole.samples["U"])
        assert resumed.params["auto_step"] == whole.params["auto_step"]


def test_an_old_default_dsgld_checkpoint_resumes_with_factors_measured_at_its_state(split,
                                                                                  tmp_path):
    """DSGLD's fingerprint does not hold the auto_step record, so a checkpoint of a default
    run written before the per-row factors existed (past the burn-in, without the four factor
    arrays; its settings record "auto" alone, as the new default's do) resumes (CHANGELOG),
    and the factors are measured at its restored state (not at the burn-in's end): the kept
    draws it carries are the uninterrupted run's, the later ones are not."""
    from pymf.bpmf.kernel import BPMFKernel
    train, _ = split
    model = pymf.BPMF(2, alpha0=10.0, beta0=10.0, mean_rating=0.0)
    sampler = pymf.DSGLD(n_threads=1)

    def run(**options):
        return pymf.sample(model, train, sampler, n_samples=30, burnin=20, seed=5, **options)

    whole = run()
    path = tmp_path / "new.npz"
    run(checkpoint=path, callback=lambda info: info["iteration"] >= 30, checkpoint_every=1)
    with np.load(path, allow_pickle=False) as archive:
        arrays = dict(archive)
    factor_arrays = ["kernel_" + key for key in ("row_steps_user", "row_steps_item",
                                                 "row_noise_user", "row_noise_item")]
    assert all(name in arrays for name in factor_arrays)
    np.savez(tmp_path / "old.npz", **{k: v for k, v in arrays.items() if k not in factor_arrays})
    resumed = run(checkpoint=tmp_path / "old.npz")
    # the factors of the checkpoint's state, measured apart from the run
    kernel = BPMFKernel(model, train, sampler.for_data(train.nnz), 5, 0.0, 1)
    kernel.restore({key[len("kernel_"):]: value for key, value in arrays.items()
                    if key.startswith("kernel_")})
    info = whole.params["auto_step"]
    kernel.plan_row_steps(dict(info))
    at_restore = kernel.summarise_row_steps(kernel.measure_row_steps(), info["minibatch_scale"],
                                            info["row_noise"])["row_steps"]
    assert resumed.params["auto_step"]["row_steps"] == at_restore != info["row_steps"]
    assert resumed.params["auto_step"]["row_steps_from"] == info["row_steps_from"]
    carried = int(arrays["counters"][3])
    assert 0 < carried < 30
    np.testing.assert_array_equal(resumed.samples["U"][:carried], whole.samples["U"][:carried])
    assert not np.array_equal(resumed.samples["U"][carried:], whole.samples["U"][carried:])


@pytest.fixture(scope="module")
def gaussian_split():
    """Gaussian MF from TweedieNMF(beta=2, prior="gaussian")'s model, noise variance phi =
    0.25; 40 % held out (3,179 values: the binomial error of a 90 % coverage is 0.005)."""
    return gaussian_mf_from_the_model(100, 80, K=2, sd=0.5, seed=21, held_out=0.4)


def test_exact_gibbs_of_gaussian_mf_covers_and_a_wrong_phi_does_not(gaussian_split):
    """The reference: the exact Gibbs chain of Gaussian MF covers every level; the same
    chain with phi fixed at 1 (4x the noise) is rejected."""
    train, test = gaussian_split
    draws = gibbs_gaussian_mf(train, 2, n_samples=400, burnin=100, seed=1)
    assert np.mean(draws[2]) == pytest.approx(0.25, rel=0.1)
    for level in (0.5, 0.8, 0.9, 0.95):
        observed = predictive_coverage(draws, test, level)
        assert within_mc_error(observed, level, test.nnz, n_comparisons=4), (level, observed)
    Ws, Hs, _ = draws
    wrong = (Ws, Hs, np.ones(len(Ws)))
    assert not within_mc_error(predictive_coverage(wrong, test, 0.9), 0.9, test.nnz)


def psgld(train, test, blocks, step_size, seed=4):
    model = pymf.TweedieNMF(2, beta=2.0, phi="sample", prior="gaussian")
    return pymf.sample(model, train, pymf.PSGLD(blocks=blocks, n_threads=1, step_size=step_size),
                       n_samples=600, burnin=300, thin=2, seed=seed, test=test)


@pytest.mark.parametrize("blocks", [4, 8])
def test_psgld_with_the_noise_bounded_auto_step_covers_its_nominal_levels(gaussian_split, blocks):
    """PSGLD on a B x B grid (each part 1/B of the data, its gradient scaled by s = B) with
    phi sampled: the bounded step covers every level and finds phi as the exact chain
    does; the default "auto" step over-covers (its phi too large) and is rejected."""
    train, test = gaussian_split
    res = psgld(train, test, blocks, pymf.AutoStep(minibatch_noise=CALIBRATED))
    assert res.params["auto_step"]["minibatch_scale"] == blocks
    cov = res.coverage(test)
    for level, observed in cov.items():
        assert within_mc_error(observed, level, test.nnz, n_comparisons=4), (level, observed)
    assert res.noise_variance() == pytest.approx(0.25, rel=0.1)
    mean, sd = res.predict(test.rows, test.cols, return_std=True)
    assert not within_mc_error(np.mean(np.abs(test.values - mean) <= 1.6449 * sd), 0.9, test.nnz)
    # power: the stability rule alone (the default "auto" before PSGLD's per-row bound)
    # over-covers, its phi too large
    global_only = psgld(train, test, blocks, pymf.AutoStep(per_row=False))
    over = global_only.coverage(test, levels=(0.9,))[0.9]
    assert over > 0.9 and not within_mc_error(over, 0.9, test.nnz), over
    assert global_only.noise_variance() > res.noise_variance()


@pytest.mark.parametrize("blocks", [2, 4, 8])
def test_psgld_default_auto_step_covers_its_nominal_levels(gaussian_split, blocks):
    """PSGLD's default step_size="auto" with phi sampled: after the burn-in every row of W
    and of H^T gets per-coordinate steps bounded so that the minibatch noise of a part (s =
    B) inflates each row's stiffest direction by at most 1 + ROW_NOISE (pymf.engine.autostep,
    point 5): it covers 50/80/90/95 % within binomial error on every grid, with phi near the
    data's 0.25. Power: without the bound (AutoStep(per_row=False)) the same check rejects
    the finer grids, where the stability rule alone over-covers (on 2 x 2 it is within
    error: s - 1 = 1 there)."""
    from pymf.engine.autostep import ROW_NOISE
    train, test = gaussian_split
    res = psgld(train, test, blocks, "auto")
    chosen = res.params["auto_step"]
    assert chosen["row_noise"] == ROW_NOISE and chosen["row_steps_from"] == 301
    assert chosen["minibatch_scale"] == blocks
    rows = chosen["row_steps"]
    assert 0 < rows["min"] <= rows["median"] <= 1 and rows["min"] < 1
    assert res.params["sampler"]["step_size"]["kind"] == "constant"
    cov = res.coverage(test)
    for level, observed in cov.items():
        assert within_mc_error(observed, level, test.nnz, n_comparisons=4), (level, observed)
    assert res.noise_variance() == pytest.approx(0.25, rel=0.06)
    if blocks >= 4:
        plain = psgld(train, test, blocks, pymf.AutoStep(per_row=False))
        assert "row_noise" not in plain.params["auto_step"]
        cov = plain.coverage(test)
        assert not all(within_mc_error(observed, level, test.nnz, n_comparisons=4)
                       for level, observed in cov.items()), cov
        assert cov[0.9] > 0.9


def _fisher_reference(W, Ht, rows, cols, beta):
    """NumPy's row-by-row Fisher curvatures of Tweedie MF at phi = 1 (grid order)."""
    mu = np.einsum("ek,ek->e", W[rows], Ht[cols])
    weight = mu ** (beta - 2.0) if beta != 2.0 else np.ones_like(mu)
    fw = np.zeros((len(W), W.shape[1], W.shape[1]))
    fh = np.zeros((len(Ht), W.shape[1], W.shape[1]))
    np.add.at(fw, rows, weight[:, None, None] * np.einsum("ek,el->ekl", Ht[cols], Ht[cols]))
    np.add.at(fh, cols, weight[:, None, None] * np.einsum("ek,el->ekl", W[rows], W[rows]))
    return fw, fh


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("beta", [1.0, 2.0])
def test_psgld_row_steps_follow_the_fisher_curvature_of_each_row(sparse, beta):
    """The C core's Fisher curvature of every row (sum over its entries of mu^(beta - 2)
    h_j h_j^T; w_i w_i^T for H's columns) agrees with NumPy's on dense and sparse data,
    Gaussian and Poisson (mirrored) NMF, and the factors are c_k = min(1, 2 delta / ((B -
    1) eps H_kk rho)) of it: each row's alpha = eps (B - 1) lambda / 2 of the preconditioned
    curvature diag(c) H is at most delta."""
    from pymf.engine import autostep
    from pymf.nmf.kernel import FactorKernel, GridMap, blocked_data, make_chain
    rng = np.random.default_rng(1)
    V, _, _ = pymf.datasets.make_tweedie_nmf(30, 26, 3, beta=beta, seed=2)
    model = pymf.TweedieNMF(3, beta=beta, phi=0.7)
    data = V
    if sparse:
        r, c = np.nonzero(rng.random(V.shape) < 0.6)
        data = pymf.Ratings(r, c, V[r, c], shape=V.shape)
    sampler = pymf.PSGLD(blocks=3)
    layout = blocked_data(data, 3, True, 11)
    chain = make_chain(sampler, layout, model, 5, 6, sampler.batch_size(layout.n_observed))
    W = rng.gamma(2.0, 0.5, (30, 3))
    Ht = rng.gamma(2.0, 0.5, (26, 3))
    grid = GridMap(layout)
    chain.set_state(*grid.to_grid(W, Ht.T), 0)
    Wg, Htg, _ = chain.get_state()
    observed = pymf.Ratings.from_dense(V) if not sparse else data
    rows, cols = grid.test_indices(observed)
    ref_w, ref_h = _fisher_reference(Wg, Htg, rows, cols, beta)
    kernel = FactorKernel(chain, grid, model)
    pieces = range(3)
    np.testing.assert_allclose(np.concatenate([kernel._piece_fisher(b, pieces, True)
                                               for b in pieces]), ref_w, rtol=1e-12)
    np.testing.assert_allclose(np.concatenate([kernel._piece_fisher(c, pieces, False)
                                               for c in pieces]), ref_h, rtol=1e-12)
    eps = 0.05
    kernel.plan_row_steps({"eps": eps, "minibatch_scale": 3.0, "row_noise": 0.35,
                           "row_steps_from": 1})
    kernel.run(np.full(1, eps))  # measured at the state before iteration 1
    step_W, step_Ht = kernel.row_steps
    for c, H in ((step_W, ref_w), (step_Ht, ref_h)):
        assert c.min() < 1.0 and c.max() <= 1.0
        H = H / model.phi
        precond = np.sqrt(c)[:, :, None] * H * np.sqrt(c)[:, None, :]
        alpha = eps * 2.0 * np.linalg.eigvalsh(precond)[:, -1] / 2.0
        assert alpha.max() <= 0.35 * (1 + 1e-9)
        # coordinates that are not bounded keep the stability step
        diag, rho = autostep.diag_and_rho(H)
        free = eps * 2.0 * diag * rho[:, None] / 2.0 <= 0.35
        assert np.all(c[free] == 1.0) and np.all(c[~free] < 1.0)


@pytest.mark.parametrize("sparse", [False, True])
def test_psgld_row_step_factors_are_the_same_bits_for_any_thread_count(sparse, monkeypatch):
    """measure_row_steps shares its 2B pieces among the chain's n_threads Python threads:
    the factors of W's and H^T's rows are bit for bit those of one thread, and those of
    each piece computed alone in order (the curvature's sums over blocks (b, 0..B-1) and
    (0..B-1, c) in the layout's order), at a state where many rows are bounded, on dense
    and sparse (mirrored Poisson) data; the threaded path is the one taken."""
    import concurrent.futures
    from pymf.engine import autostep
    from pymf.nmf.kernel import FactorKernel, GridMap, blocked_data, make_chain
    rng = np.random.default_rng(4)
    V, _, _ = pymf.datasets.make_tweedie_nmf(90, 70, 6, beta=1.0, seed=5)
    data = V
    if sparse:
        r, c = np.nonzero(rng.random(V.shape) < 0.6)
        data = pymf.Ratings(r, c, V[r, c], shape=V.shape)
    model = pymf.TweedieNMF(6, beta=1.0)
    layout = blocked_data(data, 5, True, 3)
    grid = GridMap(layout)
    W, Ht = rng.gamma(2.0, 0.5, (90, 6)), rng.gamma(2.0, 0.5, (70, 6))
    pools = []
    real_pool = concurrent.futures.ThreadPoolExecutor

    def counting_pool(workers):
        pools.append(workers)
        return real_pool(workers)

    monkeypatch.setattr(concurrent.futures, "ThreadPoolExecutor", counting_pool)
    plan = {"eps": 0.02, "minibatch_scale": 5.0, "row_noise": autostep.ROW_NOISE}
    factors = {}
    for threads in (1, 2, 3):
        sampler = pymf.PSGLD(blocks=5, n_threads=threads)
        chain = make_chain(sampler, layout, model, 5, 6, sampler.batch_size(layout.n_observed))
        assert chain.n_threads == threads
        chain.set_state(*grid.to_grid(W, Ht.T), 0)
        kernel = FactorKernel(chain, grid, model)
        kernel.row_plan = plan
        factors[threads] = kernel.measure_row_steps()
        assert len(pools) == (threads > 1) and (not pools or pools.pop() == threads)
    pieces = range(5)
    alone = (np.concatenate([kernel._row_step_factors(kernel._piece_fisher(b, pieces, True))
                             for b in pieces]),
             np.concatenate([kernel._row_step_factors(kernel._piece_fisher(c, pieces, False))
                             for c in pieces]))
    step_W, step_Ht = factors[1]
    assert step_W.shape == (90, 6) and step_Ht.shape == (70, 6)
    for c in (step_W, step_Ht):  # most rows bounded, with factors spread out
        assert np.mean(c.min(axis=1) < 1.0) > 0.5 and len(np.unique(c)) > c.size // 2
    for threads in (2, 3):
        for got, want, ref in zip(factors[threads], factors[1], alone):
            np.testing.assert_array_equal(got, want)
            np.testing.assert_array_equal(got, ref)
    # the curvature buffers held at once are capped: 3 threads measure 2 pieces at a time
    # under a cap of two of the largest piece, and one at a time under a smaller one
    import pymf.nmf.kernel as nmf_kernel
    largest = max(np.diff(layout.row_start).max(), np.diff(layout.col_start).max()) * 36 * 8
    for cap, workers in ((2 * largest, 2), (2 * largest - 1, None)):
        monkeypatch.setattr(nmf_kernel, "MEASURE_BYTES", cap)
        for got, want in zip(kernel.measure_row_steps(), factors[1]):
            np.testing.assert_array_equal(got, want)
        assert pools == ([workers] if workers else [])
        pools.clear()


@pytest.mark.parametrize("sparse", [False, True])
def test_psgld_per_row_steps_are_deterministic_and_resume_bit_for_bit(gaussian_split, tmp_path,
                                                                      sparse):
    """The factors are measured at the state after the burn-in: the same bits for 1 and 2
    threads, and a run interrupted before or after that iteration and resumed equals the
    uninterrupted one (the factors travel in the checkpoint); Gaussian MF with phi sampled,
    and sparse Poisson NMF (mirrored). A given step, and AutoStep(per_row=False), run the
    plain chain."""
    if sparse:
        V, _, _ = pymf.datasets.make_tweedie_nmf(40, 36, 3, beta=1.0, seed=3)
        r, c = np.nonzero(np.random.default_rng(0).random(V.shape) < 0.5)
        train = pymf.Ratings(r, c, V[r, c], shape=V.shape)
        model = pymf.TweedieNMF(3, beta=1.0)
    else:
        train, _ = gaussian_split
        model = pymf.TweedieNMF(2, beta=2.0, phi="sample", prior="gaussian")

    def run(threads=1, step_size="auto", **options):
        return pymf.sample(model, train, pymf.PSGLD(blocks=4, n_threads=threads,
                                                    step_size=step_size),
                           seed=5, **{"n_samples": 30, "burnin": 20, **options})

    # without a burn-in there is no post-burn-in state to measure at: the plain chain
    cold = run(burnin=0)
    assert "row_noise" not in cold.params["auto_step"]
    assert "no burn-in" in cold.params["auto_step"]["per_row"]
    np.testing.assert_array_equal(cold.W_samples, run(step_size=pymf.AutoStep(per_row=False),
                                                      burnin=0).W_samples)
    whole = run()
    assert whole.params["auto_step"]["row_steps_from"] == 21
    assert whole.params["auto_step"]["row_steps"]["min"] < 1
    np.testing.assert_array_equal(run(threads=2).W_samples, whole.W_samples)
    plain = run(step_size=pymf.AutoStep(per_row=False))
    assert not np.array_equal(plain.W_samples, whole.W_samples)  # the bound acts
    # the burn-in is the plain chain's, bit for bit
    burning = whole.trace["iteration"] <= 20
    assert burning.sum() > 10
    np.testing.assert_array_equal(whole.trace["loglik"][burning], plain.trace["loglik"][burning])
    if not model.sample_phi:  # the stability rule alone is the constant step it chose
        given = run(step_size=plain.params["auto_step"]["eps"])
        np.testing.assert_array_equal(given.W_samples, plain.W_samples)
        assert "auto_step" not in given.params
    for stop_at in (10, 30):  # inside the burn-in, and after the factors were set
        path = tmp_path / f"ck{stop_at}.npz"

        def stop(info):
            return info["iteration"] >= stop_at

        first = run(checkpoint=path, callback=stop, checkpoint_every=1)
        assert first.iterations < 50
        resumed = run(checkpoint=path, threads=2)
        np.testing.assert_array_equal(resumed.W_samples, whole.W_samples)
        np.testing.assert_array_equal(resumed.H_samples, whole.H_samples)
        assert resumed.params["auto_step"] == whole.params["auto_step"]


# what the per-row bound added to a default PSGLD checkpoint: the factors' arrays (the
# kernel's snapshot, under the loop's "kernel_" prefix), and the keys of its auto_step record
# (in the fingerprint) that mark the plan
_PER_ROW_ARRAYS = ("kernel_row_steps_W", "kernel_row_steps_Ht")
_PER_ROW_PLAN_KEYS = ("row_noise", "minibatch_scale", "row_steps_from")


def test_an_old_default_psgld_checkpoint_without_row_steps_is_refused(tmp_path):
    """A checkpoint of a default ("auto") PSGLD run with a burn-in, written before the
    per-row factors existed, has no factors and a fingerprint whose auto_step lacks the
    plan's keys. It is refused as another run's (CHANGELOG), not resumed: resumed, the
    factors would be measured at its state instead of the burn-in's end, a chain neither
    version runs. The old checkpoint is a new one (past the burn-in) with what the bound
    added taken out (its fingerprint and its array names then equal those of the checkpoint
    the code before the bound, 48c17d4^, writes for this run: checked once); the same file
    with nothing taken out resumes, so the refusal is the fingerprint's."""
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 36, 3, beta=1.0, seed=3)
    r, c = np.nonzero(np.random.default_rng(0).random(V.shape) < 0.5)
    train = pymf.Ratings(r, c, V[r, c], shape=V.shape)
    model = pymf.TweedieNMF(3, beta=1.0)

    def run(**options):
        return pymf.sample(model, train, pymf.PSGLD(blocks=4, n_threads=1), n_samples=30,
                           burnin=20, seed=5, **options)

    whole = run()
    path = tmp_path / "new.npz"
    run(checkpoint=path, callback=lambda info: info["iteration"] >= 30, checkpoint_every=1)
    with np.load(path, allow_pickle=False) as archive:
        arrays = dict(archive)
    assert int(arrays["kernel_t"]) > whole.params["auto_step"]["row_steps_from"]
    assert all(name in arrays for name in _PER_ROW_ARRAYS)
    key = json.loads(str(arrays["fingerprint"]))
    assert json.dumps(key, sort_keys=True) == str(arrays["fingerprint"])  # rewritable as is

    def rewritten(name, drop_arrays=(), drop_plan_keys=()):
        old_key = json.loads(str(arrays["fingerprint"]))
        for plan_key in drop_plan_keys:
            old_key["run"]["auto_step"].pop(plan_key, None)
        out = {k: v for k, v in arrays.items() if k not in drop_arrays}
        out["fingerprint"] = np.array(json.dumps(old_key, sort_keys=True))
        np.savez(tmp_path / name, **out)
        return tmp_path / name

    control = run(checkpoint=rewritten("same.npz"))
    np.testing.assert_array_equal(control.W_samples, whole.W_samples)
    old = rewritten("old.npz", _PER_ROW_ARRAYS, _PER_ROW_PLAN_KEYS)
    with pytest.raises(ValueError, match="written by a different run"):
        run(checkpoint=old)


def test_the_noise_bound_is_recorded_checked_and_refused_where_unknown(gaussian_split):
    train, _ = gaussian_split
    with pytest.raises(ValueError, match="minibatch_noise"):
        pymf.AutoStep(minibatch_noise=1.5)
    with pytest.raises(ValueError, match="minibatch_noise"):
        pymf.AutoStep(minibatch_noise=True)
    model = pymf.TweedieNMF(2, beta=2.0, phi="sample", prior="gaussian")
    # LD's gradient is the full data's (s = 1): the bound changes nothing
    plain = pymf.sample(model, train, pymf.LD(n_threads=1), n_samples=5, seed=0)
    bounded = pymf.sample(model, train, pymf.LD(n_threads=1, step_size=pymf.AutoStep(0.1)),
                          n_samples=5, seed=0)
    assert bounded.params["auto_step"]["eps"] == plain.params["auto_step"]["eps"]
    np.testing.assert_array_equal(bounded.W_samples, plain.W_samples)
    # HAMCMC's noise is not a minibatch's of known scale: refused, not ignored
    with pytest.raises(ValueError, match="minibatch_noise"):
        pymf.sample(pymf.TweedieNMF(2, beta=2.0, phi=0.25, prior="gaussian"), train,
                    pymf.HAMCMC(step_size=pymf.AutoStep(0.1), n_threads=1), n_samples=5, seed=0)


def test_a_run_with_the_burnin_step_resumes_bit_for_bit(gaussian_split, tmp_path):
    """The burn-in / sampling switch depends on the unit number only: interrupted inside
    the burn-in and resumed, the chain is the uninterrupted one."""
    train, _ = gaussian_split
    model = pymf.TweedieNMF(2, beta=2.0, phi="sample", prior="gaussian")

    def run(**options):
        return pymf.sample(model, train, pymf.PSGLD(blocks=4, n_threads=1,
                                                    step_size=pymf.AutoStep(0.1)),
                           n_samples=40, burnin=40, seed=2, **options)

    whole = run()
    path = tmp_path / "ck.npz"
    calls = {"n": 0}

    def stop(info):
        calls["n"] += 1
        return calls["n"] == 20  # inside the burn-in, before the step changes

    first = run(checkpoint=path, callback=stop)
    assert first.n_kept == 0 and whole.n_kept == 40
    resumed = run(checkpoint=path)
    assert np.array_equal(resumed.W_samples, whole.W_samples)
    assert np.array_equal(resumed.sample_stats["phi"], whole.sample_stats["phi"])
