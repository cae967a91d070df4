"""A readable NumPy Gibbs sampler of Gaussian matrix factorisation, the exact reference for
pymf.TweedieNMF(K, beta=2, prior="gaussian", phi="sample") (pymf has no exact sampler of it):

    V_ij ~ N((W H)_ij, phi) for the observed (i, j),
    w_i ~ N(0, I / lam_w),  h_j ~ N(0, I / lam_h),  phi ~ InvGamma(phi_shape, phi_rate).

Every conditional is conjugate: a row w_i given H and phi is Gaussian with precision
lam_w I + sum_j h_j h_j^T / phi over its observed columns and mean Prec^-1 sum_j V_ij h_j / phi
(the same for h_j given W), and phi given W, H is InvGamma(phi_shape + N/2, phi_rate + RSS/2).
One sweep draws all rows of W, all columns of H, then phi.
"""
import numpy as np

import pymf


def gaussian_mf_from_the_model(I, J, K=2, sd=0.5, seed=13, held_out=0.25):
    """(train, test): V = W H + N(0, sd^2) noise with W, H ~ N(0, 1) (the model with
    lam_w = lam_h = 1 and phi = sd^2), the fraction held_out of the entries held out."""
    rng = np.random.default_rng(seed)
    W, H = rng.normal(0, 1, (I, K)), rng.normal(0, 1, (K, J))
    V = W @ H + rng.normal(0, sd, (I, J))
    return pymf.Ratings.from_dense(V).split(held_out, seed=seed)


def _draw_rows(rng, values, mask, other, lam, phi):
    """Every row x_r of the factor whose rows index values' rows: x_r | other, phi."""
    K = other.shape[1]
    precision = lam * np.eye(K) + np.einsum("rj,jk,jl->rkl", mask, other, other) / phi
    linear = (values * mask) @ other / phi
    chol = np.linalg.cholesky(precision)
    mean = np.linalg.solve(precision, linear[..., None])[..., 0]
    # x = mean + L^-T z has covariance (L L^T)^-1 = precision^-1
    z = rng.standard_normal(mean.shape)
    return mean + np.linalg.solve(np.swapaxes(chol, -1, -2), z[..., None])[..., 0]


def gibbs_gaussian_mf(ratings, K, n_samples, burnin, seed, lam_w=1.0, lam_h=1.0,
                      phi_shape=1.0, phi_rate=1.0):
    """(W draws (S, I, K), H draws (S, J, K), phi draws (S,)) of the exact Gibbs chain."""
    rng = np.random.default_rng(seed)
    I, J = ratings.shape
    values = np.zeros((I, J))
    mask = np.zeros((I, J))
    values[ratings.rows, ratings.cols] = ratings.values
    mask[ratings.rows, ratings.cols] = 1.0
    W, H = rng.normal(0, 0.1, (I, K)), rng.normal(0, 0.1, (J, K))
    phi = 1.0
    Ws, Hs, phis = [], [], []
    for sweep in range(burnin + n_samples):
        W = _draw_rows(rng, values, mask, H, lam_w, phi)
        H = _draw_rows(rng, values.T, mask.T, W, lam_h, phi)
        rss = float(np.sum(mask * (values - W @ H.T) ** 2))
        phi = 1.0 / rng.gamma(phi_shape + ratings.nnz / 2, 1.0 / (phi_rate + rss / 2))
        if sweep >= burnin:
            Ws.append(W)
            Hs.append(H)
            phis.append(phi)
    return np.array(Ws), np.array(Hs), np.array(phis)


def predictive_coverage(draws, test, level, seed=0):
    """Coverage of the central `level` intervals of the posterior predictive (each draw's
    W H plus N(0, its phi) noise) at the held-out entries, by inclusive quantiles as
    pymf.engine.calibration computes them."""
    Ws, Hs, phis = draws
    rng = np.random.default_rng(seed)
    means = np.einsum("sik,sik->si", Ws[:, test.rows], Hs[:, test.cols])
    new_values = means + rng.standard_normal(means.shape) * np.sqrt(phis)[:, None]
    lower, upper = np.quantile(new_values, [(1 - level) / 2, (1 + level) / 2], axis=0)
    return float(np.mean((test.values >= lower) & (test.values <= upper)))
