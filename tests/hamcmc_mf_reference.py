"""A readable NumPy HAMCMC for matrix factorisation (Simsekli et al. 2016, Algorithm 1 with
the minibatches of section 4.3: the parts of the PSGLD block grid), written with dense
matrices over the whole theta = (W, H^T): the gradient from W H, H_t and S_t from the BFGS
recursion itself (hamcmc_reference.dense_h_and_s). Nothing is shared with the C core except
the Philox noise (pymf._rng) and the block grid's layout. Also an exact Gibbs sampler of
Gaussian matrix factorisation with Gaussian priors, the reference posterior."""
import numpy as np

from hamcmc_reference import dense_h_and_s
from pymf import _rng

STREAM_W, STREAM_H = 1, 2  # PYMF_STREAM_W / _H in core/include/pymf/philox.h
MU_FLOOR = 1e-10           # PYMF_MU_FLOOR in core/include/pymf/tweedie.h


def part_mask(data, part):
    """(I, J) booleans: the cells of the part's blocks {(b, (b + part) mod B)}, grid order."""
    B, rows, cols = data.n_blocks, data.row_start, data.col_start
    mask = np.zeros(data.shape, dtype=bool)
    for b in range(B):
        c = (b + part) % B
        mask[rows[b]:rows[b + 1], cols[c]:cols[c + 1]] = True
    return mask


def grad_potential(V, observed, mask, W, Ht, model, scale):
    """grad U = -grad log p(W, H) - scale * grad log p(V_part | W, H), as (gW, gHt)."""
    beta, phi = model["beta"], model["phi"]
    mu = W @ Ht.T
    if beta == 2.0:
        dlogp = (V - mu) / phi
    else:
        mu = np.where(mu >= MU_FLOOR, mu, MU_FLOOR)
        dlogp = mu ** (beta - 2.0) * (V - mu) / phi
    G = np.where(observed & mask, scale * dlogp, 0.0)
    if model["prior"] == "gaussian":
        prior_W, prior_H = model["lam_w"] * W, model["lam_h"] * Ht
    else:
        prior_W, prior_H = np.full_like(W, model["lam_w"]), np.full_like(Ht, model["lam_h"])
    return prior_W - G @ Ht, prior_H - G.T @ W


def hamcmc(data, V, observed, model, W0, Ht0, eps, seed, memory, gamma, lam, scaled=False):
    """theta_1 .. theta_T of HAMCMC with cyclic parts, as (W, H^T) pairs in grid order."""
    I, J = data.shape
    K = W0.shape[1]
    B, M = data.n_blocks, memory
    part_sizes = np.array([(observed & part_mask(data, p)).sum() for p in range(B)])
    n_observed = observed.sum()
    split = I * K

    def grad(theta, t):
        p = (t - 1) % B
        scale = n_observed / part_sizes[p] if part_sizes[p] else 0.0
        gW, gH = grad_potential(V, observed, part_mask(data, p), theta[:split].reshape(I, K),
                                theta[split:].reshape(J, K), model, scale)
        return np.concatenate([gW.ravel(), gH.ravel()])

    thetas = [np.concatenate([W0.ravel(), Ht0.ravel()])]
    pairs = {}
    for t in range(1, len(eps) + 1):
        z = np.concatenate([_rng.noise(seed, STREAM_W, t, 0, I, K).ravel(),
                            _rng.noise(seed, STREAM_H, t, 0, J, K).ravel()])
        e = eps[t - 1]
        if t > 2 * M:
            base = thetas[t - M]
            H, S = dense_h_and_s([pairs[tau] for tau in range(t - M + 1, t)], gamma, len(base),
                                 scaled)
            new = base - e * H @ grad(base, t) + np.sqrt(2 * e) * S @ z
        else:
            prev = thetas[t - 1]
            new = prev - e * gamma * grad(prev, t) + np.sqrt(2 * e * gamma) * z
        if model["prior"] == "exponential":
            new = np.abs(new)  # the mirror at the boundary of the non-negative orthant
        if t > M:
            older = thetas[t - M]
            s = new - older
            pairs[t] = (s, grad(new, t) - grad(older, t) + lam * s)
        thetas.append(new)
    return [(th[:split].reshape(I, K), th[split:].reshape(J, K)) for th in thetas[1:]]


def gibbs_gaussian_mf(V, rank, noise_var, lam_w, lam_h, n_sweeps, rng):
    """Exact Gibbs sampling of W ~ N(0, I / lam_w), H ~ N(0, I / lam_h), V = W H + N(0,
    noise_var) (dense): the rows of W given H are independent Gaussians with precision
    lam_w I + H H^T / noise_var, and likewise the columns of H given W. Returns the draws
    of W H, (n_sweeps, I, J)."""
    I, J = V.shape
    W = rng.normal(0, 1 / np.sqrt(lam_w), (I, rank))
    H = rng.normal(0, 1 / np.sqrt(lam_h), (rank, J))
    out = np.empty((n_sweeps, I, J))
    for sweep in range(n_sweeps):
        for side in range(2):
            if side == 0:
                other, data, lam = H, V, lam_w              # W rows | H
            else:
                other, data, lam = W.T, V.T, lam_h          # H columns | W
            precision = lam * np.eye(rank) + other @ other.T / noise_var
            cov = np.linalg.inv(precision)
            mean = data @ other.T @ cov / noise_var         # one row per row of `data`
            draw = mean + rng.normal(size=mean.shape) @ np.linalg.cholesky(cov).T
            if side == 0:
                W = draw
            else:
                H = draw.T
        out[sweep] = W @ H
    return out
