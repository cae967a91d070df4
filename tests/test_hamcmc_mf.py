"""HAMCMC for matrix factorisation (pymf.HAMCMC on pymf.TweedieNMF, core/src/hamcmc_mf.c):
the gradient against finite differences and a readable NumPy version, the L-BFGS products
of per-block Gram matrices against the same products on the gathered vector, the chain
against a NumPy HAMCMC (tests/hamcmc_mf_reference.py), the posterior of a small Gaussian MF
against an exact Gibbs sampler (with a wrong noise scale rejected), determinism for 1 and 2
threads, checkpoint/resume, divergence and bad input.

Statistical test: family-wise false-alarm rate alpha = 1e-3 with Bonferroni over its
comparisons, batch-means standard errors over 2 independent chains (tests/mcmc_stats.py).
"""
import numpy as np
import pytest
from mcmc_stats import batch_means, bonferroni_z, z_scores

import hamcmc_mf_reference as ref
import pymf
from hamcmc_reference import dense_h_and_s
from pymf.hamcmc import _hamcmc
from pymf.hamcmc._hamcmc_mf import HamcmcChain
from pymf.nmf import _blocks

ALPHA = 1e-3
GAUSSIAN = dict(beta=2.0, phi=1.5, prior="gaussian", lam_w=1.0, lam_h=2.0)
POISSON = dict(beta=1.0, phi=1.0, prior="exponential", lam_w=0.5, lam_h=1.5)


def gaussian_data(I=7, J=6, K=2, seed=0):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(I, K)) @ rng.normal(size=(K, J)) + rng.normal(size=(I, J))


def sparse_version(V, fraction, seed):
    """The entries of V kept with probability `fraction`, as Ratings, and their mask."""
    keep = np.random.default_rng(seed).random(V.shape) < fraction
    rows, cols = np.nonzero(keep)
    return pymf.Ratings(rows, cols, V[rows, cols], shape=V.shape), keep


def blocked(V, B, observed=None):
    """BlockedData of dense V, or of V's observed entries; (data, V and mask in grid order)."""
    if observed is None:
        data = _blocks.BlockedData.from_dense(np.ascontiguousarray(V), B)
        return data, data.dense_values(), np.ones(V.shape, dtype=bool)
    rows, cols = np.nonzero(observed)
    data = _blocks.BlockedData.from_sparse(rows.astype(np.int64), cols.astype(np.int64),
                                           V[rows, cols].astype(np.float64), V.shape, B)
    row_of, col_of = data.row_of, data.col_of
    return data, V[np.ix_(row_of, col_of)], observed[np.ix_(row_of, col_of)]


def make_chain(data, K, model, memory=3, gamma=0.5, lam=0.3, part_order="cyclic", threads=1,
               scaled_gamma=False):
    return HamcmcChain(data, K, model["beta"], model["phi"], model["prior"], model["lam_w"],
                       model["lam_h"], 5, 7, memory=memory, gamma=gamma, lam=lam,
                       part_order=part_order, n_threads=threads, scaled_gamma=scaled_gamma)


def start(rng, I, J, K, model):
    W0, H0 = rng.normal(size=(I, K)), rng.normal(size=(J, K))
    if model["prior"] == "exponential":
        W0, H0 = np.abs(W0) + 0.1, np.abs(H0) + 0.1
    return W0, H0


def potential(V, observed, mask, W, Ht, model, scale):
    """U of a part: -log prior - scale * log p(V_part | W, H), for finite differences."""
    mu = W @ Ht.T
    cells = observed & mask
    if model["beta"] == 2.0:
        divergence = 0.5 * (V - mu) ** 2
    else:  # beta = 1: KL
        divergence = np.where(V > 0, V * np.log(np.where(V > 0, V, 1) / mu), 0) - V + mu
    loglik = -np.sum(np.where(cells, divergence, 0.0)) / model["phi"]
    if model["prior"] == "gaussian":
        log_prior = -0.5 * (model["lam_w"] * np.sum(W * W) + model["lam_h"] * np.sum(Ht * Ht))
    else:
        log_prior = -(model["lam_w"] * W.sum() + model["lam_h"] * Ht.sum())
    return -log_prior - scale * loglik


@pytest.mark.parametrize("model", [GAUSSIAN, POISSON], ids=["gaussian", "poisson"])
@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "sparse"])
def test_gradient_matches_numpy_and_finite_differences(model, sparse):
    rng = np.random.default_rng(1)
    I, J, K, B = 7, 6, 2, 3
    V = gaussian_data(I, J, K)
    if model["prior"] == "exponential":
        V = rng.poisson(2.0, size=(I, J)).astype(float)
    observed = sparse_version(V, 0.6, 2)[1] if sparse else None
    data, V_grid, obs_grid = blocked(V, B, observed)
    chain = make_chain(data, K, model)
    W, Ht = start(rng, I, J, K, model)
    n_observed = obs_grid.sum()
    for part in range(B):
        mask = ref.part_mask(data, part)
        scale = n_observed / (obs_grid & mask).sum()
        gW, gH = chain.grad_potential(W, Ht, part)
        rW, rH = ref.grad_potential(V_grid, obs_grid, mask, W, Ht, model, scale)
        np.testing.assert_allclose(gW, rW, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gH, rH, rtol=1e-12, atol=1e-12)
        h = 1e-6
        for side, (X, g) in enumerate(((W, gW), (Ht, gH))):
            for index in [(0, 0), (X.shape[0] - 1, K - 1), (X.shape[0] // 2, 1)]:
                up, down = X.copy(), X.copy()
                up[index] += h
                down[index] -= h
                args = ((up, Ht), (down, Ht)) if side == 0 else ((W, up), (W, down))
                numeric = (potential(V_grid, obs_grid, mask, *args[0], model, scale)
                           - potential(V_grid, obs_grid, mask, *args[1], model, scale)) / (2 * h)
                assert abs(numeric - g[index]) < 1e-5 * max(1.0, abs(numeric)), (part, side, index)


def _pairs_oldest_first(chain, memory):
    """The M - 1 pairs the next iteration uses, each gathered into one theta-sized vector."""
    snap = chain.snapshot()
    t = int(snap["counters"][0]) + 1
    S, Y = [], []
    for tau in range(t - memory + 1, t):
        slot = tau % (memory - 1)
        S.append(np.concatenate([snap["W_planes"][memory + slot].ravel(),
                                 snap["Ht_planes"][memory + slot].ravel()]))
        Y.append(np.concatenate([snap["W_planes"][2 * memory - 1 + slot].ravel(),
                                 snap["Ht_planes"][2 * memory - 1 + slot].ravel()]))
    return np.array(S), np.array(Y)


@pytest.mark.parametrize("memory, B, scaled", [(2, 3, False), (4, 3, False), (5, 1, False),
                                               (2, 3, True), (4, 3, True)])
def test_blockwise_lbfgs_products_equal_those_of_the_gathered_vector(memory, B, scaled):
    """H g and S z from per-block Gram matrices reduced in block order equal the two-loop and
    product-form recursions on the gathered theta (lbfgs.c with the plain inner product),
    and the dense BFGS matrices; with the scaled gamma too (its s^T y and y^T y taken from
    the reduced Gram matrix)."""
    rng = np.random.default_rng(memory)
    I, J, K = 9, 7, 3
    data, _, _ = blocked(gaussian_data(I, J, K), B)
    chain = make_chain(data, K, GAUSSIAN, memory=memory, gamma=0.4, lam=0.5, scaled_gamma=scaled)
    chain.set_state(*start(rng, I, J, K, GAUSSIAN))
    chain.run(np.full(2 * memory + 3, 1e-2))
    S, Y = _pairs_oldest_first(chain, memory)
    g = [rng.normal(size=(I, K)), rng.normal(size=(J, K))]
    z = [rng.normal(size=(I, K)), rng.normal(size=(J, K))]
    (hg_w, hg_h), (sz_w, sz_h), used = chain.products(*g, *z)
    flat = np.concatenate
    g_flat, z_flat = flat([g[0].ravel(), g[1].ravel()]), flat([z[0].ravel(), z[1].ravel()])
    expected_hg, used_direct = _hamcmc.lbfgs_apply(S, Y, 0.4, g_flat, scaled_gamma=scaled)
    expected_sz, _ = _hamcmc.lbfgs_sqrt_apply(S, Y, 0.4, z_flat, scaled_gamma=scaled)
    assert used == used_direct == memory - 1
    np.testing.assert_allclose(flat([hg_w.ravel(), hg_h.ravel()]), expected_hg, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(flat([sz_w.ravel(), sz_h.ravel()]), expected_sz, rtol=1e-10, atol=1e-12)
    H, root = dense_h_and_s(list(zip(S, Y)), 0.4, len(g_flat), scaled)
    np.testing.assert_allclose(expected_hg, H @ g_flat, rtol=1e-9, atol=1e-11)
    np.testing.assert_allclose(expected_sz, root @ z_flat, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("model, sparse, scaled", [
    (GAUSSIAN, False, False), (GAUSSIAN, True, False), (POISSON, False, False),
    (GAUSSIAN, True, True), (POISSON, False, True)],
    ids=["gaussian-dense", "gaussian-sparse", "poisson-mirrored", "gaussian-sparse-scaled",
         "poisson-mirrored-scaled"])
def test_chain_equals_the_numpy_reference(model, sparse, scaled):
    """30 iterations of M = 3 (Langevin steps to 6, pairs from 4, quasi-Newton from 7) on
    B = 2 cyclic parts (gcd(3, 2) = 1) follow the NumPy HAMCMC to rounding, with a fixed
    gamma and with the scaled one."""
    rng = np.random.default_rng(3)
    I, J, K, B, M = 6, 5, 2, 2, 3
    V = gaussian_data(I, J, K, seed=4)
    if model["prior"] == "exponential":
        V = rng.poisson(2.0, size=(I, J)).astype(float)
    observed = sparse_version(V, 0.7, 5)[1] if sparse else None
    data, V_grid, obs_grid = blocked(V, B, observed)
    W0, H0 = start(rng, I, J, K, model)
    chain = make_chain(data, K, model, memory=M, scaled_gamma=scaled)
    chain.set_state(W0, H0)
    eps = np.full(30, 5e-3)
    expected = ref.hamcmc(data, V_grid, obs_grid, model, W0, H0, eps, 5, M, 0.5, 0.3, scaled)
    for t in range(len(eps)):
        chain.run(eps[t:t + 1])
        W, Ht, _ = chain.get_state()
        np.testing.assert_allclose(W, expected[t][0], rtol=1e-9, atol=1e-11, err_msg=f"t={t + 1}")
        np.testing.assert_allclose(Ht, expected[t][1], rtol=1e-9, atol=1e-11, err_msg=f"t={t + 1}")


def _wh_draws(res):
    return np.einsum("dik,dkj->dij", res.W_samples, res.H_samples)


@pytest.mark.slow
def test_posterior_of_wh_matches_an_exact_gibbs_sampler():
    """Gaussian MF with Gaussian priors (5 x 4, K = 2, sigma^2 = 1, lam = 1), B = 2 random
    parts, M = 2, lam = 5, constant eps = 0.002: the mean and second moment of each entry of
    W H (40 comparisons, Bonferroni at alpha = 1e-3) of 2 HAMCMC chains of 400,000
    iterations match 2 exact Gibbs chains of 40,000 sweeps. The constant step's bias is
    O(eps) (a z of 4.2 at eps = 0.005 with the full data, measured once), under the
    Monte-Carlo error here. A model with twice the noise variance (phi = 2) is rejected by
    the same test (power check)."""
    I, J, K = 5, 4, 2
    V = gaussian_data(I, J, K, seed=11)
    gibbs = np.stack([ref.gibbs_gaussian_mf(V, K, 1.0, 1.0, 1.0, 40_000,
                                            np.random.default_rng(c))[2000:] for c in range(2)])
    g_mean, g_se = batch_means(gibbs)
    g2_mean, g2_se = batch_means(gibbs ** 2)
    critical = bonferroni_z(ALPHA, 2 * I * J)

    def worst_z(phi, n_samples):
        draws = []
        for chain in range(2):
            res = pymf.sample(pymf.TweedieNMF(K, beta=2, phi=phi, prior="gaussian"), V,
                              pymf.HAMCMC(memory=2, gamma=1.0, lam=5.0, step_size=0.002,
                                          blocks=2, n_threads=1),
                              n_samples=n_samples, burnin=5000, thin=10, seed=20 + chain,
                              trace_every=n_samples)
            assert res.trace["skipped_pairs"][-1] == 0
            draws.append(_wh_draws(res))
        draws = np.stack(draws)
        h_mean, h_se = batch_means(draws)
        h2_mean, h2_se = batch_means(draws ** 2)
        return max(np.abs(z_scores(h_mean, h_se, g_mean, g_se)).max(),
                   np.abs(z_scores(h2_mean, h2_se, g2_mean, g2_se)).max())

    assert worst_z(1.0, 400_000) < critical
    assert worst_z(2.0, 100_000) > critical


def test_cyclic_parts_that_starve_a_sub_chain_are_refused():
    V = gaussian_data()
    model = pymf.TweedieNMF(2, beta=2, prior="gaussian")
    with pytest.raises(ValueError, match="interleaved sub-chains"):
        pymf.sample(model, V, pymf.HAMCMC(memory=2, blocks=2, part_order="cyclic"), n_samples=5)
    pymf.sample(model, V, pymf.HAMCMC(memory=3, blocks=2, part_order="cyclic"), n_samples=5)


@pytest.mark.parametrize("sparse, part_order, prior, scaled", [
    (False, "random", "gaussian", False), (True, "random", "exponential", False),
    (True, "cyclic", "gaussian", False), (True, "random", "gaussian", True)])
def test_same_chain_for_one_and_two_threads(sparse, part_order, prior, scaled):
    """Big enough (> 65536 units of work) for the blocks to run on two threads."""
    I, J, K = 180, 150, 4
    V = np.abs(gaussian_data(I, J, K, seed=9)) if prior == "exponential" else gaussian_data(I, J, K, seed=9)
    data = sparse_version(V, 0.8, 1)[0] if sparse else V
    beta = 2.0 if prior == "gaussian" else 1.0
    runs = []
    for threads in (1, 2):
        sampler = pymf.HAMCMC(memory=3, gamma=0.5, lam=1.0, step_size=1e-4, blocks=4,
                              part_order=part_order, n_threads=threads, scaled_gamma=scaled)
        runs.append(pymf.sample(pymf.TweedieNMF(K, beta=beta, prior=prior), data, sampler,
                                n_samples=30, thin=3, seed=4))
    assert np.array_equal(runs[0].W_samples, runs[1].W_samples)
    assert np.array_equal(runs[0].H_samples, runs[1].H_samples)
    assert np.array_equal(runs[0].trace["loglik"], runs[1].trace["loglik"])


def _run(path=None, stop=None, memory=3, n_samples=24, scaled_gamma=False):
    def kill(info):
        if stop is not None and info["iteration"] >= stop:
            raise KeyboardInterrupt

    V = gaussian_data(9, 8, 2, seed=2)
    sampler = pymf.HAMCMC(memory=memory, gamma=0.5, lam=1.0, step_size=2e-3, blocks=3,
                          scaled_gamma=scaled_gamma)
    return pymf.sample(pymf.TweedieNMF(2, beta=2, prior="gaussian"), V, sampler,
                       n_samples=n_samples, thin=2, seed=13, trace_every=1, checkpoint=path,
                       checkpoint_every=1000 if path is not None else None, callback=kill)


@pytest.mark.parametrize("stop, scaled", [(1, False), (3, False), (4, False), (6, False),
                                         (7, False), (9, False), (17, False), (6, True),
                                         (9, True)])
def test_resume_equals_an_uninterrupted_run_wherever_it_stopped(tmp_path, stop, scaled):
    """M = 3: Langevin steps to 2M = 6, pairs from M + 1 = 4, quasi-Newton steps from 7."""
    whole = _run(scaled_gamma=scaled)
    path = tmp_path / "ck.npz"
    with pytest.warns(RuntimeWarning, match="interrupted"):
        first = _run(path, stop, scaled_gamma=scaled)
    assert first.interrupted and first.iterations == stop
    resumed = _run(path, scaled_gamma=scaled)
    assert not resumed.interrupted and resumed.iterations == whole.iterations
    assert np.array_equal(resumed.W_samples, whole.W_samples)
    assert np.array_equal(resumed.H_samples, whole.H_samples)
    assert np.array_equal(resumed.trace["skipped_pairs"][-1], whole.trace["skipped_pairs"][-1])


def test_every_saved_plane_decides_the_continuation_and_bad_states_are_refused():
    rng = np.random.default_rng(2)
    data, _, _ = blocked(gaussian_data(), 2)
    chain = make_chain(data, 2, GAUSSIAN, memory=3)
    chain.set_state(*start(rng, 7, 6, 2, GAUSSIAN))
    chain.run(np.full(10, 1e-2))
    saved = chain.snapshot()
    chain.run(np.full(5, 1e-2))
    reference = chain.get_state()[0]
    for plane in range(7):  # 3 window states, 2 s, 2 y
        changed = {key: value.copy() for key, value in saved.items()}
        changed["W_planes"][plane, 0, 0] += 1e-3
        chain.restore(changed)
        chain.run(np.full(5, 1e-2))
        assert not np.array_equal(chain.get_state()[0], reference), plane
    chain.restore(saved)
    before = chain.get_state()
    for damage, message in (("nan", "NaN or inf"), ("counters", "left out"), ("shape", "shape")):
        bad = {key: value.copy() for key, value in saved.items()}
        if damage == "nan":
            bad["Ht_planes"][4, 1, 1] = np.nan
        elif damage == "counters":
            bad["counters"] = np.array([10, 11])
        else:
            bad["W_planes"] = bad["W_planes"][:5]
        with pytest.raises(ValueError, match=message):
            chain.restore(bad)
        after = chain.get_state()
        assert np.array_equal(after[0], before[0]) and after[2] == before[2]


def test_a_diverging_run_names_the_iteration_and_keeps_the_last_finite_state():
    """In the C core: the chain stops at the first non-finite state, holding the state of
    the iteration before (equal to a chain run that far); through pymf.sample the error
    names the iteration and carries a finite state and the partial result."""
    rng = np.random.default_rng(6)
    data, _, _ = blocked(gaussian_data(9, 8, 2, seed=2), 3)
    W0, H0 = start(rng, 9, 8, 2, GAUSSIAN)
    chain = make_chain(data, 2, GAUSSIAN, memory=2, lam=0.0)
    chain.set_state(W0, H0)
    with pytest.raises(pymf.DivergenceError, match="diverged at iteration") as info:
        chain.run(np.full(2000, 0.5))
    stopped = info.value.iteration
    assert 1 < stopped <= 2000 and chain.iteration == stopped - 1
    W, Ht, _ = chain.get_state()
    assert np.all(np.isfinite(W)) and np.all(np.isfinite(Ht))
    again = make_chain(data, 2, GAUSSIAN, memory=2, lam=0.0)
    again.set_state(W0, H0)
    again.run(np.full(stopped - 1, 0.5))
    assert np.array_equal(again.get_state()[0], W) and np.array_equal(again.get_state()[1], Ht)

    sampler = pymf.HAMCMC(memory=2, lam=0.0, step_size=0.5, blocks=3)
    with pytest.raises(pymf.DivergenceError, match="diverged at iteration") as info:
        pymf.sample(pymf.TweedieNMF(2, beta=2, prior="gaussian"), gaussian_data(9, 8, 2, seed=2),
                    sampler, n_samples=2000, seed=3, trace_every=1)
    exc = info.value
    assert exc.iteration > 1 and exc.result.interrupted
    assert np.all(np.isfinite(exc.state["W"])) and np.all(np.isfinite(exc.state["H"]))


def test_a_non_finite_gradient_is_named():
    V = gaussian_data(6, 5, 2)
    V[2, 3] = 1e308  # finite, but (v - mu) h overflows
    with pytest.raises(pymf.DivergenceError, match="iteration 1: the gradient of U") as info:
        pymf.sample(pymf.TweedieNMF(2, beta=2, prior="gaussian", phi=1e-300), V,
                    pymf.HAMCMC(blocks=2, step_size=1e-3), n_samples=5, seed=1)
    assert info.value.iteration == 1
    assert np.all(np.isfinite(info.value.state["W"]))


@pytest.mark.parametrize("options, message", [
    (dict(memory=1), "memory must be an integer in \\[2, 64\\]"),
    (dict(lam=-0.1), "lam must be >= 0"),
    (dict(gamma=0.0), "gamma must be a positive"),
    (dict(gamma=-1.0), "gamma must be a positive"),
    (dict(blocks=0), "blocks must be a positive integer"),
    (dict(part_order="sorted"), "part_order must be"),
    (dict(n_threads=0), "n_threads must be a positive integer"),
])
def test_bad_settings_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        pymf.HAMCMC(**options)


@pytest.mark.parametrize("options, message", [
    (dict(memory=1), "memory M in \\[2, 64\\]"),
    (dict(lam=-1.0), "lambda .* must be >= 0"),
    (dict(gamma=0.0), "gamma .* must be positive"),
])
def test_the_c_core_refuses_bad_settings_too(options, message):
    data, _, _ = blocked(gaussian_data(), 2)
    settings = dict(memory=2, gamma=1.0, lam=0.0)
    settings.update(options)
    with pytest.raises(ValueError, match=message):
        HamcmcChain(data, 2, 2.0, 1.0, "gaussian", 1.0, 1.0, 1, 2, **settings)


def test_runs_through_pymf_sample_with_a_test_set_and_saves():
    V, _, _ = pymf.datasets.make_tweedie_nmf(30, 25, 3, beta=1.0, seed=3)
    ratings = pymf.Ratings.from_dense(V)
    train, test = ratings.split(0.1, seed=0)
    res = pymf.sample(pymf.TweedieNMF(3), train, pymf.HAMCMC(blocks=3, step_size=1e-3),
                      n_samples=60, burnin=20, thin=3, seed=1, test=test)
    assert res.n_kept == 20 and np.all(res.W_samples >= 0) and np.all(res.H_samples >= 0)
    assert np.isfinite(res.trace["test_rmse"][-1])
    assert res.params["sampler"]["sampler"] == "hamcmc" and res.params["sampler"]["blocks"] == 3
    assert "batch_size" not in res.params["sampler"]
    with pytest.raises(ValueError, match="blocks= sets HAMCMC's block grid"):
        A, x, _ = pymf.datasets.make_linear_gaussian(50, 3, seed=0)
        pymf.sample(pymf.LinearGaussian(), (A, x), pymf.HAMCMC(blocks=2), n_samples=5)


def test_the_automatic_steps_pilot_checks_every_state_of_the_window(monkeypatch):
    """HAMCMC keeps `memory` interleaved states, each its own sub-chain. The pilot of
    step_size="auto" checked only the state get_state returns, and passed steps under which
    another sub-chain had blown up (log-likelihoods of -1e33 to -1e262 between sane ones):
    with gamma = 0.01 and scaled_gamma on a 60 x 50 Gaussian MF, all three seeds diverged
    within 25 iterations. The pilot now checks every state of the window. Power: with the
    one-state check back, the same runs diverge."""
    from pymf.errors import DivergenceError
    from pymf.nmf import kernel as nmf_kernel
    rng = np.random.default_rng(0)
    V = rng.normal(size=(60, 5)) @ rng.normal(size=(5, 50)) + rng.normal(size=(60, 50))
    train = pymf.Ratings.from_dense(V).split(0.1, seed=0)[0]
    model = pymf.TweedieNMF(5, beta=2, phi=1, prior="gaussian")

    def run(seed):
        return pymf.sample(model, train, pymf.HAMCMC(memory=3, blocks=2, gamma=1e-2,
                                                     scaled_gamma=True, lam=1.0, n_threads=1),
                           n_samples=300, seed=seed, progress=False)

    for seed in range(3):
        assert np.min(run(seed).trace["loglik"]) > -1e5  # about -1,500 at the posterior
    monkeypatch.setattr(nmf_kernel, "pilot_states",
                        lambda chain, W, Ht, *rest: [(W, Ht, chain.loglik())])
    with pytest.raises(DivergenceError):
        run(0)
