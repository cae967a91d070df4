"""Data generators and loaders.

make_tweedie_nmf draws V from the Tweedie NMF generative model of the PSGLD paper:
W ~ E(lam_w), H ~ E(lam_h), V_ij ~ Tweedie(mu_ij = (W H)_ij, phi, power p = 2 - beta), for
  beta = 2     Gaussian N(mu, phi)
  beta = 1     Poisson (phi = 1), or phi * Poisson(mu / phi) (over-dispersed)
  0 < beta < 1 compound Poisson-gamma, with a point mass at 0
  beta = 0     gamma, mean mu, variance phi mu^2
  beta = -1    inverse Gaussian, mean mu, variance phi mu^3
In every case E[V] = mu and Var[V] = phi mu^p. No Tweedie distribution exists for
1 < beta < 2 (power 0 < p < 1); other powers have no sampler here.
"""
import os

import numpy as np

from pymf.data import Ratings
from pymf.engine.checks import check_real
from pymf.engine.seeds import check_seed


def tweedie_draw(mu, phi, beta, rng):
    """Draws of Tweedie(mu, phi, p = 2 - beta), elementwise."""
    mu = np.asarray(mu, dtype=np.float64)
    if np.any(mu <= 0) and beta != 2.0:
        raise ValueError("mu must be positive for a non-Gaussian Tweedie distribution")
    if beta == 2.0:
        return rng.normal(mu, np.sqrt(phi))
    if beta == 1.0:
        return phi * rng.poisson(mu / phi).astype(np.float64)
    if 0.0 < beta < 1.0:
        p = 2.0 - beta
        rate = mu ** (2.0 - p) / (phi * (2.0 - p))      # Poisson number of gamma summands
        shape = (2.0 - p) / (p - 1.0)                     # each summand's gamma shape
        scale = phi * (p - 1.0) * mu ** (p - 1.0)         # and scale
        counts = rng.poisson(rate)
        out = np.zeros_like(mu)
        positive = counts > 0
        out[positive] = rng.gamma(shape * counts[positive], scale[positive])
        return out
    if beta == 0.0:
        return rng.gamma(1.0 / phi, phi * mu)
    if beta == -1.0:
        return rng.wald(mu, 1.0 / phi)
    if 1.0 < beta < 2.0:
        raise ValueError(
            f"beta={beta}: no Tweedie distribution exists for power p = 2 - beta in (0, 1); "
            "the beta-divergence is defined there, but no generative model")
    raise ValueError(f"beta={beta}: draws are available for beta = 2, 1, 0, -1 and 0 < beta < 1")


def _positive_int(n, name):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n <= 0:
        raise ValueError(f"{name} must be a positive integer, got {n!r}")


def make_tweedie_nmf(n_rows, n_cols, rank, beta=1.0, phi=1.0, seed=0, lam_w=1.0, lam_h=1.0):
    """(V, W_true, H_true) from the Tweedie NMF generative model (see the module doc)."""
    for name, n in (("n_rows", n_rows), ("n_cols", n_cols), ("rank", rank)):
        _positive_int(n, name)
    phi = check_real(phi, "phi", positive=True)
    check_seed(seed)
    beta = check_real(beta, "beta")
    lam_w = check_real(lam_w, "lam_w", positive=True)
    lam_h = check_real(lam_h, "lam_h", positive=True)
    rng = np.random.default_rng(seed)
    W = rng.exponential(1.0 / lam_w, size=(int(n_rows), int(rank)))
    H = rng.exponential(1.0 / lam_h, size=(int(rank), int(n_cols)))
    V = tweedie_draw(W @ H, float(phi), float(beta), rng)
    return V, W, H


def make_linear_gaussian(n_data, dim, noise_var=10.0, prior_var=1.0, spread=100.0, seed=0):
    """(A, x, theta_true) from the linear-Gaussian model of the HAMCMC paper (section 4.1):
    theta ~ N(0, prior_var I), x_n ~ N(a_n . theta, noise_var). The rows a_n are drawn from
    N(0, C) with C = Q diag(c) Q^T, Q a random rotation and c log-spaced over a factor
    `spread`, so that the posterior is correlated and its scales differ (the setting where
    SGLD mixes poorly)."""
    for name, n in (("n_data", n_data), ("dim", dim)):
        _positive_int(n, name)
    noise_var = check_real(noise_var, "noise_var", positive=True)
    check_seed(seed)
    prior_var = check_real(prior_var, "prior_var", positive=True)
    if not check_real(spread, "spread") >= 1:
        raise ValueError(f"spread must be >= 1, got {spread!r}")
    rng = np.random.default_rng(seed)
    n_data, dim = int(n_data), int(dim)
    Q, _ = np.linalg.qr(rng.normal(size=(dim, dim)))
    scales = np.logspace(0.0, -np.log10(spread), dim) if dim > 1 else np.ones(1)
    A = rng.normal(size=(n_data, dim)) * np.sqrt(scales) @ Q.T
    theta = rng.normal(0.0, np.sqrt(prior_var), dim)
    x = A @ theta + rng.normal(0.0, np.sqrt(noise_var), n_data)
    return A, x, theta


def demo(size=256, rank=32, seed=0):
    """The embedded default data: the paper's synthetic Poisson-NMF (I = J = size, K = rank)."""
    return make_tweedie_nmf(size, size, rank, beta=1.0, phi=1.0, seed=seed)


def _csv_header_lines(path):
    """1 where the CSV's first line is a header (its first three fields are not all
    numbers), else 0."""
    with open(path) as fh:
        first = fh.readline().split(",")[:3]
    try:
        [float(field) for field in first]
    except ValueError:
        return 1
    return 0 if len(first) == 3 else 1


def load_movielens(path):
    """MovieLens ratings as pymf.Ratings with 0-based contiguous indices.

    Reads u.data (tab-separated user item rating time), ratings.dat (user::item::rating::time)
    and ratings.csv (header userId,movieId,rating,timestamp, or none: a first line of numbers
    is a rating, which skipping it lost). Users are rows, items columns.
    The original ids are kept as .user_ids and .item_ids (row r is user user_ids[r]).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"no MovieLens file at {path!r}")
    name = os.path.basename(path)
    try:
        if name.endswith(".csv"):
            table = np.loadtxt(path, delimiter=",", skiprows=_csv_header_lines(path),
                               usecols=(0, 1, 2))
        elif name.endswith(".dat"):
            with open(path) as fh:
                rows = [line.split("::")[:3] for line in fh if line.strip()]
            if any(len(row) < 3 for row in rows):
                raise ValueError("a line has fewer than three '::'-separated fields")
            table = np.array(rows, dtype=np.float64)
        else:
            table = np.loadtxt(path, usecols=(0, 1, 2))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{path!r} is not a MovieLens ratings file (user item rating per "
                         f"line): {exc}") from None
    table = np.atleast_2d(table)
    if table.shape[1] < 3 or table.shape[0] == 0:
        raise ValueError(f"{path!r} has no (user, item, rating) rows")
    if not (np.all(table[:, :2] == np.round(table[:, :2])) and np.all(np.abs(table[:, :2]) < 2.0 ** 62)):
        raise ValueError(f"{path!r} has user or item ids that are not integers (or out of range)")
    user_ids, rows = np.unique(table[:, 0].astype(np.int64), return_inverse=True)
    item_ids, cols = np.unique(table[:, 1].astype(np.int64), return_inverse=True)
    ratings = Ratings(rows, cols, table[:, 2], shape=(len(user_ids), len(item_ids)))
    ratings.user_ids, ratings.item_ids = user_ids, item_ids
    return ratings


def __getattr__(name):
    # the IBP family's images (pymf/ibp/data.py), imported when first asked for: importing
    # them imports the IBP family and its extension module, which the other data sets'
    # users need not load
    if name == "make_cambridge":
        from pymf.ibp.data import make_cambridge
        return make_cambridge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {"make_cambridge"})
