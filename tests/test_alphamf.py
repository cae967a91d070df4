"""Alpha-stable matrix factorisation (pymf.AlphaStableNMF, core/src/alphamf.c): the
generative model's characteristic function, the gradient against finite differences and a
NumPy version, the Phi step's invariant distribution on one cell, the (W, H) step against a
NumPy random-walk Metropolis sampler of the same conditional posterior, each statistical
test with a power check; determinism for 1 and 2 threads, checkpoint/resume, divergence
and bad input.

Statistical tests: z-scores against the Bonferroni quantile of a family-wise false-alarm
rate of 1e-3 (tests/mcmc_stats.py).
"""
import math

import numpy as np
import pytest
from mcmc_stats import batch_means, bonferroni_z, z_scores

import alphamf_reference as ref
import pymf
from pymf.alphamf import _alphamf, make_alpha_stable
from pymf.nmf import _blocks

FAMILY_ALPHA = 1e-3


def chain_of(X, K, alpha, B=1, langevin_only=True, update_phi=True, prior=(1.0, 1.0, 1.0, 1.0),
             seed=5, **options):
    data = _blocks.BlockedData.from_dense(np.ascontiguousarray(X, dtype=np.float64), B)
    chain = _alphamf.AlphaChain(data, K, alpha, *prior, seed, seed + 1,
                                langevin_only=langevin_only, update_phi=update_phi, **options)
    return chain


@pytest.mark.parametrize("alpha", [1.2, 0.8])
def test_hierarchical_draws_have_the_sas_characteristic_function(alpha):
    """X = sqrt(Phi v^(2/alpha)) Z with the C core's Phi draws: E[cos(t X)] = exp(-v t^alpha)
    at t = 0.25, 0.5, 1, 2, 4 (n = 400,000; |cos| <= 1 gives the standard error). The
    complex case's constant ((2 cos(pi alpha / 4))^(2/alpha) in place of
    2 cos(pi alpha / 4)^(2/alpha), i.e. Phi scaled by 2^(2/alpha - 1)) fails the test."""
    n, v = 400_000, 1.7
    phi = _alphamf.draw_phi(alpha, 1234, n)
    z = np.random.default_rng(0).standard_normal(n)
    ts = np.array([0.25, 0.5, 1.0, 2.0, 4.0])
    critical = bonferroni_z(FAMILY_ALPHA, len(ts))

    def worst_z(phi_draws):
        X = np.sqrt(phi_draws * v ** (2 / alpha)) * z
        c = np.cos(np.outer(ts, X))
        return np.max(np.abs(c.mean(axis=1) - np.exp(-v * ts ** alpha))
                      / (c.std(axis=1) / math.sqrt(n)))

    assert worst_z(phi) < critical
    assert worst_z(phi * 2.0 ** (2 / alpha - 1)) > critical


def test_alpha_two_is_gaussian():
    assert np.all(_alphamf.draw_phi(2.0, 1, 100) == 2.0)  # X ~ N(0, 2 v)


@pytest.mark.parametrize("B, part, prior", [(1, 0, (1.0, 1.0, 1.0, 1.0)),
                                            (2, 1, (1.5, 0.7, 2.0, 1.3))])
def test_gradient_matches_numpy_and_finite_differences(B, part, prior):
    rng = np.random.default_rng(3)
    I, J, K, alpha = 6, 5, 2, 1.3
    X = rng.standard_cauchy((I, J))
    W = rng.uniform(0.3, 1.5, (I, K))
    H = rng.uniform(0.3, 1.5, (K, J))
    Phi = rng.uniform(0.5, 3.0, (I, J))
    chain = chain_of(X, K, alpha, B=B, prior=prior)
    chain.set_phi(Phi)
    gW, gHt = chain.grad_potential(W, H.T, part)
    # the part's entries, scaled N / |Pi_part| (B = 1: every entry, scale 1)
    rows = np.repeat(np.arange(B), [len(r) for r in np.array_split(np.arange(I), B)])
    cols = np.repeat(np.arange(B), [len(c) for c in np.array_split(np.arange(J), B)])
    in_part = (cols[None, :] - rows[:, None]) % B == part
    scale = in_part.size / in_part.sum()
    model = pymf.AlphaStableNMF(K, alpha, *prior)

    def U(W_, H_):
        v = W_ @ H_
        var = Phi * v ** (2 / alpha)
        loglik = np.sum(np.where(in_part, -0.5 * np.log(var) - 0.5 * X ** 2 / var, 0.0))
        return -(scale * loglik + model.log_prior(W_, H_))

    eps = 1e-6
    fd_W = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        d = np.zeros_like(W)
        d[idx] = eps
        fd_W[idx] = (U(W + d, H) - U(W - d, H)) / (2 * eps)
    fd_H = np.zeros_like(H)
    for idx in np.ndindex(H.shape):
        d = np.zeros_like(H)
        d[idx] = eps
        fd_H[idx] = (U(W, H + d) - U(W, H - d)) / (2 * eps)
    np.testing.assert_allclose(gW, fd_W, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(gHt, fd_H.T, rtol=1e-5, atol=1e-5)
    if B == 1:
        rW, rH = ref.grad_potential(X, Phi, W, H, alpha, *prior)
        np.testing.assert_allclose(gW, rW, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(gHt, rH.T, rtol=1e-12, atol=1e-12)


def test_phi_step_leaves_its_conditional_invariant_on_one_cell():
    """One cell (x = 2.5, v = 0.8, alpha = 1.2), W and H fixed: 200,000 Phi steps against
    importance-weighted prior draws (weights N(x; 0, Phi v^(2/alpha))) on E[log Phi] and
    P(Phi < 2), P(Phi < 8). Power check: the prior's own draws (a step that always accepts)
    fail the same test."""
    alpha, x, v = 1.2, 2.5, 0.8
    chain = chain_of(np.array([[x]]), 1, alpha)
    chain.set_state(np.array([[math.sqrt(v)]]), np.array([[math.sqrt(v)]]))
    n = 200_000
    draws = np.empty(n)
    for t in range(1, n + 1):
        chain.phi_step(t, 0)
        draws[t - 1] = chain.get_phi()[0]
    draws = draws[1000:]
    prior = _alphamf.draw_phi(alpha, 99, 2_000_000)
    var = prior * v ** (2 / alpha)
    w = np.exp(-0.5 * np.log(var) - 0.5 * x * x / var)
    w /= w.sum()

    def stats(values):
        return np.stack([np.log(values), values < 2.0, values < 8.0], axis=-1).astype(float)

    f = stats(prior)
    is_mean = w @ f
    is_se = np.sqrt(w ** 2 @ (f - is_mean) ** 2)
    critical = bonferroni_z(FAMILY_ALPHA, 3)
    mean, se = batch_means(stats(draws)[None], n_batches=40)
    assert np.abs(z_scores(mean, se, is_mean, is_se)).max() < critical
    assert 0.2 < chain.phi_counts[0] / chain.phi_counts[1] < 0.95
    prior_mean, prior_se = batch_means(stats(_alphamf.draw_phi(alpha, 7, n))[None], n_batches=40)
    assert np.abs(z_scores(prior_mean, prior_se, is_mean, is_se)).max() > critical


X_TINY = np.array([[1.0, -0.5], [2.0, 0.3]])
PHI_TINY = np.array([[2.0, 1.0], [3.0, 0.5]])


def _sg_draws(langevin_only, seeds, n_iter, eps, thin=20, **options):
    """(chains, draws, 4) of v = W H from the C chain with Phi fixed, full batch (B = 1)."""
    out = []
    for seed in seeds:
        chain = chain_of(X_TINY, 1, 1.2, langevin_only=langevin_only, update_phi=False,
                         seed=seed, **options)
        chain.set_state(np.ones((2, 1)), np.ones((2, 1)))
        chain.set_phi(PHI_TINY)
        chain.run(np.full(5000, eps))  # burn-in
        draws = np.empty((n_iter // thin, 4))
        for s in range(n_iter // thin):
            chain.run(np.full(thin, eps))
            W, Ht, _ = chain.get_state()
            draws[s] = (W @ Ht.T).ravel()
        out.append(draws)
    return np.stack(out)


def test_wh_step_matches_random_walk_metropolis_and_rejects_wrong_models():
    """I = J = 2, K = 1, alpha = 1.2, Phi fixed, full batch: the means and second moments
    of v = W H (8 comparisons) from 2 PSGLD (Langevin) chains of 150,000 steps at
    eps = 1e-3 and 2 HAMCMC (M = 2, lam = 1) chains of 200,000 steps at eps = 5e-4 against
    6,000 independent random-walk Metropolis chains of 1,500 steps (NumPy,
    tests/alphamf_reference.py). (HAMCMC at eps = 1e-3 and lam = 0 gave z of 1.4-2.6, all
    of one sign: its O(eps) bias, measured once.) Power check: the reference with the
    variance's exponent 1/alpha instead of 2/alpha (the SaS scale's), or with Phi doubled,
    is rejected."""
    rng = np.random.default_rng(17)

    def reference(n_chains, exponent=None, phi=PHI_TINY):
        W, H = ref.random_walk_mh(X_TINY, phi, 1.2, 1, n_chains, 1500, 0.35, rng, exponent)
        v = (W @ H).reshape(n_chains, 4)
        moments = np.stack([v, v * v], axis=-1)
        return moments.mean(axis=0), moments.std(axis=0) / math.sqrt(n_chains)

    critical = bonferroni_z(FAMILY_ALPHA, 8)

    def worst_z(draws, target, target_se):
        mean, se = batch_means(np.stack([draws, draws ** 2], axis=-1))
        return np.abs(z_scores(mean, se, target, target_se)).max()

    good = reference(6000)
    psgld = _sg_draws(True, (1, 2), 150_000, 1e-3)
    assert worst_z(psgld, *good) < critical
    hamcmc = _sg_draws(False, (3, 4), 200_000, 5e-4, memory=2, lam=1.0)
    assert worst_z(hamcmc, *good) < critical
    for wrong in (reference(2000, exponent=1 / 1.2), reference(2000, phi=2 * PHI_TINY)):
        assert worst_z(psgld, *wrong) > critical
        assert worst_z(hamcmc, *wrong) > critical


SMALL = make_alpha_stable(12, 10, 2, alpha=1.2, seed=4)[0]


@pytest.mark.parametrize("tamed", [True, False])
@pytest.mark.parametrize("sampler", [
    pymf.HAMCMC(memory=3, lam=1.0, step_size=1e-5, blocks=4, n_threads=1),
    pymf.PSGLD(blocks=4, step_size=1e-5, part_order="random", n_threads=1)])
def test_same_chain_for_one_and_two_threads(sampler, tamed):
    """128 x 128, K = 4: enough work (> 65536 units) for the blocks to run on two threads;
    tamed and plain steps alike."""
    X = make_alpha_stable(128, 128, 4, alpha=1.2, seed=8)[0]
    runs = []
    for threads in (1, 2):
        sampler.n_threads = threads
        runs.append(pymf.sample(pymf.AlphaStableNMF(4, alpha=1.2, tamed=tamed), X, sampler,
                                n_samples=20, thin=2, seed=4))
    assert runs[0].params["model"]["tamed"] is tamed
    assert np.array_equal(runs[0].W_samples, runs[1].W_samples)
    assert np.array_equal(runs[0].H_samples, runs[1].H_samples)
    for key in ("loglik", "phi_acceptance"):  # the conditional loglik depends on every Phi
        assert np.array_equal(runs[0].trace[key], runs[1].trace[key], equal_nan=True)
    assert 0.0 < runs[0].trace["phi_acceptance"][-1] < 1.0


def _run(sampler, path=None, stop=None, tamed=True):
    def kill(info):
        if stop is not None and info["iteration"] >= stop:
            raise KeyboardInterrupt

    return pymf.sample(pymf.AlphaStableNMF(2, alpha=1.2, tamed=tamed), SMALL, sampler,
                       n_samples=24, thin=2, seed=13, trace_every=1, checkpoint=path,
                       checkpoint_every=1000 if path is not None else None, callback=kill)


@pytest.mark.parametrize("kind, stop, tamed", [
    ("hamcmc", 1, True), ("hamcmc", 4, True), ("hamcmc", 7, True), ("hamcmc", 17, True),
    ("psgld", 5, True), ("hamcmc", 17, False), ("psgld", 5, False)])
def test_resume_equals_an_uninterrupted_run_wherever_it_stopped(tmp_path, kind, stop, tamed):
    """HAMCMC M = 3: Langevin steps to 2M = 6, pairs from 4, quasi-Newton from 7; tamed
    (the default) and plain steps. A checkpoint of one is refused by a run of the other."""
    def sampler():
        if kind == "hamcmc":
            return pymf.HAMCMC(memory=3, lam=1.0, step_size=1e-3, blocks=3)
        return pymf.PSGLD(blocks=3, step_size=1e-3, part_order="random")

    whole = _run(sampler(), tamed=tamed)
    assert not np.array_equal(whole.W_samples, _run(sampler(), tamed=not tamed).W_samples)
    path = tmp_path / "ck.npz"
    with pytest.warns(RuntimeWarning, match="interrupted"):
        first = _run(sampler(), path, stop, tamed=tamed)
    assert first.interrupted and first.iterations == stop
    with pytest.raises(ValueError, match="different run"):
        _run(sampler(), path, tamed=not tamed)
    resumed = _run(sampler(), path, tamed=tamed)
    assert not resumed.interrupted and resumed.iterations == whole.iterations
    assert np.array_equal(resumed.W_samples, whole.W_samples)
    assert np.array_equal(resumed.H_samples, whole.H_samples)
    assert np.array_equal(resumed.trace["loglik"][-1], whole.trace["loglik"][-1])
    assert np.array_equal(resumed.trace["phi_acceptance"][-1], whole.trace["phi_acceptance"][-1])
    saved = tmp_path / "res.npz"
    whole.save(saved)
    loaded = pymf.load(saved)
    assert isinstance(loaded, pymf.AlphaResult)
    assert np.array_equal(loaded.predict([0, 3], [1, 2]), whole.predict([0, 3], [1, 2]))


def test_phi_is_part_of_the_checkpoint_and_bad_states_are_refused():
    chain = chain_of(SMALL, 2, 1.2, B=2, langevin_only=False, memory=2)
    chain.set_state(np.ones((12, 2)) * 0.5, np.ones((10, 2)) * 0.5)
    chain.run(np.full(10, 1e-3))
    saved = chain.snapshot()
    chain.run(np.full(5, 1e-3))
    reference = chain.get_state()[0]
    changed = {key: value.copy() for key, value in saved.items()}
    changed["phi"] *= 1.5
    chain.restore(changed)
    chain.run(np.full(5, 1e-3))
    assert not np.array_equal(chain.get_state()[0], reference)
    chain.restore(saved)
    chain.run(np.full(5, 1e-3))
    assert np.array_equal(chain.get_state()[0], reference)
    chain.restore(saved)
    before = chain.get_phi(), chain.get_state()[0]
    for damage, message in (("phi", "positive and finite"), ("counts", "impossible"),
                            ("planes", "NaN or inf"), ("missing", "lacks phi")):
        bad = {key: value.copy() for key, value in saved.items()}
        if damage == "phi":
            bad["phi"][0] = -1.0
        elif damage == "counts":
            bad["phi_counts"] = np.array([10, 5])
        elif damage == "planes":
            bad["W_planes"][0, 0, 0] = np.nan
        else:
            del bad["phi"]
        with pytest.raises(ValueError, match=message):
            chain.restore(bad)
        assert np.array_equal(chain.get_phi(), before[0])
        assert np.array_equal(chain.get_state()[0], before[1])


@pytest.mark.parametrize("tamed, step", [(False, 0.5), (True, 1e200)])
def test_a_diverging_run_names_the_iteration_and_keeps_the_last_finite_state(tamed, step):
    """alpha = 0.5: the priors' gradient 4 b x^3 makes too large a plain step overshoot
    cubically; a tamed drift moves at most 1 per step, so it takes a step whose noise makes
    eps times that gradient overflow. Data whose square overflows make the first gradient
    non-finite."""
    with pytest.raises(pymf.DivergenceError, match="diverged at iteration") as info:
        pymf.sample(pymf.AlphaStableNMF(2, alpha=0.5, tamed=tamed), SMALL,
                    pymf.PSGLD(blocks=2, step_size=step, part_order="random"),
                    n_samples=2000, seed=3, trace_every=1)
    exc = info.value
    assert exc.iteration >= 1 and exc.result.interrupted
    assert np.all(np.isfinite(exc.state["W"])) and np.all(np.isfinite(exc.state["H"]))
    X = SMALL.copy()
    X[3, 4] = 1e200
    with pytest.raises(pymf.DivergenceError, match="iteration 1: the gradient of U"):
        chain = chain_of(X, 2, 1.2, B=1)  # the first part holds every entry
        chain.set_state(np.ones((12, 2)), np.ones((10, 2)))
        chain.run(np.full(3, 1e-3))


@pytest.mark.parametrize("build, message", [
    (lambda: pymf.AlphaStableNMF(2, alpha=0.0), "alpha"),
    (lambda: pymf.AlphaStableNMF(2, alpha=2.5), r"alpha .* \(0, 2\]"),
    (lambda: pymf.AlphaStableNMF(2, alpha=float("nan")), "alpha"),
    (lambda: pymf.AlphaStableNMF(0), "rank"),
    (lambda: pymf.AlphaStableNMF(2, a_w=0.0), "a_w"),
    (lambda: pymf.AlphaStableNMF(2, b_h=-1.0), "b_h"),
    (lambda: pymf.AlphaStableNMF(2, tamed="no"), "tamed must be True or False"),
])
def test_bad_models_are_refused_by_name(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_bad_data_and_settings_are_refused_by_name():
    model = pymf.AlphaStableNMF(2)
    X = SMALL.copy()
    X[1, 1] = np.nan
    step = dict(step_size=1e-3, blocks=2)
    with pytest.raises(ValueError, match="NaN or inf"):
        pymf.sample(model, X, pymf.HAMCMC(**step), n_samples=2)
    with pytest.raises(ValueError, match="needs a step size"):
        pymf.sample(model, SMALL, pymf.HAMCMC(blocks=2), n_samples=2)
    with pytest.raises(ValueError, match="test= is not taken"):
        pymf.sample(model, SMALL, pymf.HAMCMC(**step), n_samples=2, test=SMALL)
    with pytest.raises(TypeError):
        pymf.sample(model, SMALL, pymf.LD(step_size=1e-3), n_samples=2)
    with pytest.raises(ValueError, match="alpha must be in"):
        _alphamf.draw_phi(2.5, 1, 3)
    chain = chain_of(SMALL, 2, 1.2)
    with pytest.raises(ValueError, match="Phi must hold"):
        chain.set_phi(np.ones(3))
    with pytest.raises(ValueError, match="non-negative|negative"):
        chain.set_state(-np.ones((12, 2)), np.ones((10, 2)))


def test_start_puts_phi_at_its_conditional_maximiser():
    alpha = 1.2
    chain = chain_of(SMALL, 2, alpha, B=2)
    W, H = np.full((12, 2), 0.7), np.full((10, 2), 0.4)
    chain.set_state(W, H)
    expected = np.maximum(SMALL ** 2 / (W @ H.T) ** (2 / alpha), 1e-2)
    np.testing.assert_allclose(chain.get_phi(), expected.ravel(), rtol=1e-13)
    assert chain.phi_counts == (0, 0)


def test_sparse_data_gradient_and_start_use_each_entry_once():
    """Ratings (60 % of a 9 x 8 matrix), B = 2, part 1: the gradient against finite
    differences of the readable U over the part's entries (Phi in the block layout's order),
    and the start's Phi entry by entry."""
    rng = np.random.default_rng(5)
    I, J, K, alpha = 9, 8, 2, 1.2
    V = rng.standard_cauchy((I, J))
    rows, cols = np.nonzero(rng.random((I, J)) < 0.6)
    data = _blocks.BlockedData.from_sparse(rows.astype(np.int64), cols.astype(np.int64),
                                           V[rows, cols], (I, J), 2)
    chain = _alphamf.AlphaChain(data, K, alpha, 1.0, 1.0, 1.0, 1.0, 1, 2)
    r, c, x = data.sparse_entries()
    W = rng.uniform(0.3, 1.5, (I, K))
    H = rng.uniform(0.3, 1.5, (K, J))
    chain.set_state(W, H.T.copy())
    assert chain.phi_copies == 2  # HAMCMC, M = 2: a copy per subchain, equal at the start
    np.testing.assert_allclose(
        chain.get_phi().reshape(2, -1),
        np.broadcast_to(np.maximum(x ** 2 / np.einsum("nk,nk->n", W[r], H.T[c]) ** (2 / alpha),
                                   1e-2), (2, len(x))),
        rtol=1e-13)
    Phi = rng.uniform(0.5, 3.0, len(x))
    chain.set_phi(Phi)
    piece = lambda index, starts: np.searchsorted(starts, index, side="right") - 1  # noqa: E731
    in_part = (piece(c, data.col_start) - piece(r, data.row_start)) % 2 == 1
    scale = len(x) / in_part.sum()
    model = pymf.AlphaStableNMF(K, alpha)

    def U(W_, H_):
        v = np.einsum("nk,nk->n", W_[r], H_.T[c])
        var = Phi * v ** (2 / alpha)
        return -(scale * np.sum((-0.5 * np.log(var) - 0.5 * x ** 2 / var)[in_part])
                 + model.log_prior(W_, H_))

    gW, gHt = chain.grad_potential(W, H.T, 1)
    eps = 1e-6
    for idx in [(0, 0), (4, 1), (8, 0)]:
        d = np.zeros_like(W)
        d[idx] = eps
        assert gW[idx] == pytest.approx((U(W + d, H) - U(W - d, H)) / (2 * eps), rel=1e-5, abs=1e-6)
    for idx in [(0, 0), (1, 5), (0, 7)]:
        d = np.zeros_like(H)
        d[idx] = eps
        assert gHt[idx[::-1]] == pytest.approx((U(W, H + d) - U(W, H - d)) / (2 * eps),
                                               rel=1e-5, abs=1e-6)
    res = pymf.sample(model, pymf.Ratings(rows, cols, V[rows, cols], shape=(I, J)),
                      pymf.PSGLD(blocks=2, step_size=1e-3, part_order="random"), n_samples=20,
                      seed=1)
    assert res.n_kept == 20 and np.all(np.isfinite(res.W_mean))


@pytest.fixture(scope="module")
def marginal_reference():
    """v = W H (6,000 x 4) of 6,000 random-walk Metropolis chains of 1,500 steps on
    p(W, H | X_TINY) with Phi integrated out (the SaS density tabulated by scipy,
    tests/alphamf_reference.py), and its quartiles (3 x 4)."""
    rng = np.random.default_rng(23)
    W, H = ref.random_walk_mh_marginal(X_TINY, 1.2, 1, 6000, 1500, 0.35, rng)
    v = (W @ H).reshape(6000, 4)
    return v, np.quantile(v, [0.25, 0.5, 0.75], axis=0)


def _whole_chain_draws(seeds, eps, n_iter=100_000, thin=40, **options):
    """(chains, draws, 4) of v = W H from the whole chain (a Phi step and a (W, H) step per
    iteration), full batch, 5,000 iterations of burn-in from W = H = 1."""
    draws = []
    for seed in seeds:
        chain = chain_of(X_TINY, 1, 1.2, update_phi=True, seed=seed, **options)
        chain.set_state(np.ones((2, 1)), np.ones((2, 1)))
        chain.run(np.full(5000, eps))
        out = np.empty((n_iter // thin, 4))
        for s in range(len(out)):
            chain.run(np.full(thin, eps))
            W_, Ht, _ = chain.get_state()
            out[s] = (W_ @ Ht.T).ravel()
        draws.append(out)
    return np.stack(draws)


def _against_marginal(draws, reference):
    """(worst |z| of the 12 probabilities P(v_ij < q) at the reference's quartiles q, the
    share of draws with some v_ij above 50)."""
    v, quartiles = reference

    def below(values):
        return (values[..., None, :] < quartiles).reshape(values.shape[:-1] + (12,)).astype(float)

    mean, se = batch_means(below(draws))
    target = below(v)
    z = z_scores(mean, se, target.mean(axis=0), target.std(axis=0) / math.sqrt(len(v)))
    return float(np.abs(z).max()), float(np.mean(draws.max(axis=-1) > 50))


WHOLE_CHAINS = {
    "psgld": dict(langevin_only=True, eps=1e-4),
    "hamcmc": dict(langevin_only=False, memory=2, lam=1.0, eps=1e-4),
}


@pytest.mark.parametrize("kind", sorted(WHOLE_CHAINS))
def test_whole_gibbs_chain_samples_the_marginal_posterior_of_wh(kind, marginal_reference):
    """Phi and (W, H) together, tamed steps (the default): I = J = 2, K = 1, alpha = 1.2,
    full batch, 2 chains of 100,000 iterations (eps = 1e-4; HAMCMC M = 2, lam = 1) against
    6,000 random-walk Metropolis chains of 1,500 steps on p(W, H | X) with Phi integrated
    out: the probabilities P(v_ij < q) at the reference's quartiles q (12 comparisons, batch
    means of the chains against the reference's binomial standard error, |z| below the
    Bonferroni quantile of a family-wise 1e-3, 3.93; worst |z| PSGLD 1.8, HAMCMC 2.1) and
    the share of draws with some v_ij above 50 (the reference's largest v is 6; the plain
    steps' excursions put 1 % (PSGLD) and 28 % (HAMCMC) of their draws there, test below):
    below 1e-3 (both 0). HAMCMC keeps a Phi per subchain (core/include/pymf/alphamf.h)."""
    options = dict(WHOLE_CHAINS[kind])
    eps = options.pop("eps")
    assert marginal_reference[0].max() < 50
    worst, above = _against_marginal(_whole_chain_draws((31, 32), eps, **options),
                                     marginal_reference)
    assert worst < bonferroni_z(FAMILY_ALPHA, 12)
    assert above < 1e-3


@pytest.mark.parametrize("kind", sorted(WHOLE_CHAINS))
def test_untamed_whole_chain_fails_the_same_comparison(kind, marginal_reference):
    """Power check of the test above: the plain (untamed) steps, same settings, make the
    excursions of v that the tamed steps remove, so the same comparison rejects them. An
    excursion is a chance event of each chain, not of every chain: untamed HAMCMC made
    them in 4 of the 6 chains of seeds 31-36, with the noise transform before issue 20's
    and with the present one alike (different chains: seed 32 and 35 before, 31 and 32
    now), so two fixed chains miss them with probability about 1/9. The chains of seeds
    31, 32, 33, ... therefore run until their draws show excursions, at most 7 (if a chain
    shows them with probability 2/3, none of 7 does with probability 5e-4). Seeds 31 and 32
    were enough before: PSGLD 1.0 % of its draws with some v_ij above 50 (v up to ~70; its
    bulk is close, worst |z| 3.0: the excursions are the defect), HAMCMC 28 % (|z| 5.8)."""
    options = dict(WHOLE_CHAINS[kind])
    eps = options.pop("eps")
    chains = [_whole_chain_draws((31,), eps, tamed=False, **options)[0]]
    for seed in range(32, 38):
        chains.append(_whole_chain_draws((seed,), eps, tamed=False, **options)[0])
        if _against_marginal(np.stack(chains), marginal_reference)[1] >= 1e-3:
            break
    assert _against_marginal(np.stack(chains), marginal_reference)[1] >= 1e-3
