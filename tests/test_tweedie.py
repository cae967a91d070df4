"""Tweedie / beta-divergence maths of the C core against a readable NumPy reference and
against finite differences, for beta in {-1, 0, 0.5, 1, 1.5, 2, 3}, dense and sparse."""
import numpy as np
import pytest

from pymf.nmf import _blocks, _tweedie

BETAS = [-1.0, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0]


def ref_divergence(v, mu, beta):
    """d_beta(v || mu), written out case by case."""
    v, mu = np.asarray(v, float), np.asarray(mu, float)
    if beta == 1.0:
        return np.where(v > 0, v * np.log(np.where(v > 0, v, 1.0) / mu), 0.0) - v + mu
    if beta == 0.0:
        return v / mu - np.log(v / mu) - 1.0
    return v ** beta / (beta * (beta - 1)) - v * mu ** (beta - 1) / (beta - 1) + mu ** beta / beta


def ref_dlogp(v, mu, beta, phi):
    return mu ** (beta - 2) * (v - mu) / phi


def positive_data(rng, shape, beta):
    v = rng.gamma(2.0, 1.0, size=shape)
    if beta > 0:  # zeros are allowed (and exercised) where the divergence is defined at v = 0
        v[rng.random(shape) < 0.2] = 0.0
    return v


@pytest.mark.parametrize("beta", BETAS)
def test_elementwise_divergence_and_gradient_match_reference(beta):
    rng = np.random.default_rng(1)
    v = positive_data(rng, 500, beta)
    mu = rng.uniform(0.1, 5.0, 500)
    np.testing.assert_allclose(_tweedie.beta_divergence(v, mu, beta), ref_divergence(v, mu, beta),
                               rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(_tweedie.dlogp_dmu(v, mu, beta, 0.7), ref_dlogp(v, mu, beta, 0.7),
                               rtol=1e-12)
    # the gradient is the derivative of -d / phi (central differences, step 1e-6)
    h = 1e-6
    numeric = -(_tweedie.beta_divergence(v, mu + h, beta) - _tweedie.beta_divergence(v, mu - h, beta)) / (2 * h) / 0.7
    np.testing.assert_allclose(_tweedie.dlogp_dmu(v, mu, beta, 0.7), numeric, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("limit", [0.0, 1.0])
def test_continuity_at_the_special_cases(limit):
    """The general formula at beta = limit +/- 1e-5 approaches the exact limit: the
    divergence is smooth in beta, so the gap is O(1e-5) relative (tolerance 1e-4)."""
    rng = np.random.default_rng(2)
    v = rng.gamma(2.0, 1.0, 200) + 0.05
    mu = rng.uniform(0.2, 4.0, 200)
    exact = _tweedie.beta_divergence(v, mu, limit)
    for beta in (limit - 1e-5, limit + 1e-5):
        near = _tweedie.beta_divergence(v, mu, beta)
        np.testing.assert_allclose(near, exact, rtol=1e-4, atol=1e-8)
        np.testing.assert_allclose(_tweedie.dlogp_dmu(v, mu, beta), _tweedie.dlogp_dmu(v, mu, limit),
                                   rtol=1e-4)


@pytest.mark.parametrize("beta", [0.0, 0.5, 1.0, 1.5])
def test_mu_floor_below_two(beta):
    v = np.array([1.0])
    assert np.isfinite(_tweedie.dlogp_dmu(v, np.array([0.0]), beta))
    assert _tweedie.dlogp_dmu(v, np.array([0.0]), beta) == _tweedie.dlogp_dmu(v, np.array([_tweedie.MU_FLOOR]), beta)
    # beta = 2 takes any real mu, unfloored (real-valued factorisations)
    assert _tweedie.dlogp_dmu(v, np.array([-1.0]), 2.0)[0] == 2.0


def make_data(beta, sparse, n_blocks, permute, seed=0):
    rng = np.random.default_rng(seed)
    n_rows, n_cols, rank = 11, 9, 3
    V = positive_data(rng, (n_rows, n_cols), beta)
    W = rng.uniform(0.3, 1.5, (n_rows, rank))
    Ht = rng.uniform(0.3, 1.5, (n_cols, rank))
    if sparse:
        mask = rng.random(V.shape) < 0.5
        rows, cols = np.nonzero(mask)
        data = _blocks.BlockedData.from_sparse(rows.astype(np.int64), cols.astype(np.int64), V[mask],
                                               V.shape, n_blocks, permute, 7)
    else:
        mask = np.ones(V.shape, bool)
        data = _blocks.BlockedData.from_dense(V, n_blocks, permute, 7)
    # W and Ht are given in grid order; the reference maps them back to the original order
    W_orig = np.empty_like(W)
    W_orig[data.row_of] = W
    Ht_orig = np.empty_like(Ht)
    Ht_orig[data.col_of] = Ht
    return data, V, mask, W, Ht, W_orig, Ht_orig


def ref_loglik(V, mask, W, Ht, beta, phi):
    return -np.sum(ref_divergence(V, W @ Ht.T, beta)[mask]) / phi


@pytest.mark.parametrize("beta", BETAS)
@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("n_blocks, permute", [(1, False), (3, False), (4, True)])
def test_loglik_and_gradient_match_reference_and_finite_differences(beta, sparse, n_blocks, permute):
    phi = 1.7
    data, V, mask, W, Ht, W_orig, Ht_orig = make_data(beta, sparse, n_blocks, permute)
    np.testing.assert_allclose(_tweedie.loglik(data, W, Ht, beta, phi),
                               ref_loglik(V, mask, W_orig, Ht_orig, beta, phi), rtol=1e-11)
    gW, gHt = _tweedie.gradient(data, W, Ht, beta, phi)
    G = np.where(mask, ref_dlogp(V, W_orig @ Ht_orig.T, beta, phi), 0.0)
    np.testing.assert_allclose(gW, (G @ Ht_orig)[data.row_of], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gHt, (G.T @ W_orig)[data.col_of], rtol=1e-10, atol=1e-12)
    # finite differences of the C log-likelihood itself, on a few coordinates
    h = 1e-6
    for (i, k) in [(0, 0), (5, 2), (10, 1)]:
        Wp, Wm = W.copy(), W.copy()
        Wp[i, k] += h
        Wm[i, k] -= h
        numeric = (_tweedie.loglik(data, Wp, Ht, beta, phi) - _tweedie.loglik(data, Wm, Ht, beta, phi)) / (2 * h)
        assert numeric == pytest.approx(gW[i, k], rel=1e-5, abs=1e-6)
    for (j, k) in [(0, 1), (8, 0)]:
        Hp, Hm = Ht.copy(), Ht.copy()
        Hp[j, k] += h
        Hm[j, k] -= h
        numeric = (_tweedie.loglik(data, W, Hp, beta, phi) - _tweedie.loglik(data, W, Hm, beta, phi)) / (2 * h)
        assert numeric == pytest.approx(gHt[j, k], rel=1e-5, abs=1e-6)


@pytest.mark.parametrize("sparse", [False, True])
def test_whole_matrix_results_do_not_depend_on_threads(sparse):
    data, V, mask, W, Ht, _, _ = make_data(0.5, sparse, 3, True, seed=3)
    assert _tweedie.loglik(data, W, Ht, 0.5, 1.0, n_threads=1) == _tweedie.loglik(data, W, Ht, 0.5, 1.0, n_threads=2)
    g1 = _tweedie.gradient(data, W, Ht, 0.5, 1.0, n_threads=1)
    g2 = _tweedie.gradient(data, W, Ht, 0.5, 1.0, n_threads=2)
    assert np.array_equal(g1[0], g2[0]) and np.array_equal(g1[1], g2[1])


def test_bad_likelihood_parameters():
    data, V, mask, W, Ht, _, _ = make_data(1.0, False, 1, False)
    with pytest.raises(ValueError, match="phi"):
        _tweedie.loglik(data, W, Ht, 1.0, 0.0)
    with pytest.raises(ValueError, match="rows"):
        _tweedie.loglik(data, W[:5], Ht, 1.0, 1.0)
