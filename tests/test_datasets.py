"""Data generators, the MovieLens loader and the Ratings container."""
import os

import numpy as np
import pytest

import pymf

MOVIELENS = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data", "ml-100k.data")


@pytest.mark.parametrize("beta", [2.0, 1.0, 0.5, 0.0, -1.0])
@pytest.mark.parametrize("phi", [1.0, 0.5])
def test_tweedie_draws_have_mean_mu_and_variance_phi_mu_power(beta, phi):
    """E[V] = mu, Var[V] = phi mu^p with p = 2 - beta; z-tests over 200,000 draws at three
    values of mu (family-wise false-alarm rate 1e-3 over 6 statistics, Bonferroni). The
    variance's standard error uses the sample fourth central moment."""
    from scipy import stats
    rng = np.random.default_rng(0)
    p = 2.0 - beta
    n = 200_000
    limit = stats.norm.isf(1e-3 / 12)
    for mu in (0.5, 1.0, 3.0):
        x = pymf.datasets.tweedie_draw(np.full(n, mu), phi, beta, rng)
        mean_z = (x.mean() - mu) / (x.std() / np.sqrt(n))
        centred = x - x.mean()
        var = centred.var()
        var_se = np.sqrt((np.mean(centred ** 4) - var ** 2) / n)
        var_z = (var - phi * mu ** p) / var_se
        assert abs(mean_z) < limit and abs(var_z) < limit, (mu, x.mean(), var, phi * mu ** p)


def test_compound_poisson_has_point_mass_at_zero():
    x = pymf.datasets.tweedie_draw(np.full(10000, 0.3), 1.0, 0.5, np.random.default_rng(1))
    assert 0.05 < np.mean(x == 0) < 0.95 and np.all(x >= 0)


@pytest.mark.parametrize("beta", [1.5, 1.2])
def test_no_tweedie_distribution_between_one_and_two(beta):
    with pytest.raises(ValueError, match="no Tweedie distribution"):
        pymf.datasets.make_tweedie_nmf(4, 4, 2, beta=beta)


def test_make_tweedie_nmf_shapes_and_seed():
    V, W, H = pymf.datasets.make_tweedie_nmf(7, 5, 3, seed=4)
    assert V.shape == (7, 5) and W.shape == (7, 3) and H.shape == (3, 5)
    assert np.array_equal(V, pymf.datasets.make_tweedie_nmf(7, 5, 3, seed=4)[0])
    assert np.all(V == np.round(V))  # Poisson counts


def test_ratings_sorting_split_and_dense():
    r = pymf.Ratings([2, 0, 1], [1, 2, 0], [3.0, 1.0, 2.0], shape=(3, 3))
    assert list(r.rows) == [0, 1, 2] and list(r.values) == [1.0, 2.0, 3.0]
    dense = r.to_dense()
    assert dense[2, 1] == 3.0 and np.isnan(dense[0, 0])
    big = pymf.Ratings.from_dense(np.arange(100.0).reshape(10, 10))
    train, test = big.split(0.3, seed=1)
    assert train.nnz + test.nnz == 100 and 10 < test.nnz < 50
    pairs = set(zip(train.rows, train.cols)) | set(zip(test.rows, test.cols))
    assert len(pairs) == 100


def test_load_movielens_formats(tmp_path):
    (tmp_path / "u.data").write_text("196\t242\t3\t881250949\n186\t302\t3\t891717742\n196\t302\t4\t1\n")
    (tmp_path / "ratings.dat").write_text("1::1193::5::978300760\n2::1193::4::1\n")
    (tmp_path / "ratings.csv").write_text("userId,movieId,rating,timestamp\n1,31,2.5,1\n7,31,4.0,2\n")
    r = pymf.datasets.load_movielens(tmp_path / "u.data")
    assert r.shape == (2, 2) and r.nnz == 3 and list(r.user_ids) == [186, 196]
    assert pymf.datasets.load_movielens(tmp_path / "ratings.dat").shape == (2, 1)
    r = pymf.datasets.load_movielens(tmp_path / "ratings.csv")
    assert r.nnz == 2 and list(r.values) == [2.5, 4.0]
    # a CSV without the header: its first line is a rating (skipping it lost one)
    (tmp_path / "plain.csv").write_text("1,31,2.5,1\n7,31,4.0,2\n")
    r = pymf.datasets.load_movielens(tmp_path / "plain.csv")
    assert r.nnz == 2 and list(r.values) == [2.5, 4.0]
    with pytest.raises(FileNotFoundError):
        pymf.datasets.load_movielens(tmp_path / "nothing.data")


@pytest.mark.skipif(not os.path.exists(MOVIELENS), reason="MovieLens-100K (../shared/data/ml-100k.data) is absent")
def test_movielens_100k_loads_and_samples():
    r = pymf.datasets.load_movielens(MOVIELENS)
    assert r.shape == (943, 1682) and r.nnz == 100_000
    train, test = r.split(0.2, seed=0)
    res = pymf.sample(pymf.TweedieNMF(5), train, pymf.PSGLD(blocks=4, step_size=1e-4, permute=True),
                      n_samples=200, thin=20, test=test, seed=0)
    assert np.isfinite(res.trace["test_rmse"][-1]) and res.trace["test_rmse"][-1] < 2.0
