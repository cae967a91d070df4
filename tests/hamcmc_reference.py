"""A readable NumPy HAMCMC (and SGLD / preconditioned SGLD / SGRLD) on the linear-Gaussian
model, written from the paper (Simsekli et al. 2016, Algorithm 1 and Eq. 6, 10, 11) with
dense matrices: H_t is built by the BFGS recursion itself, S_t as the Cholesky-free product
of the Brodlie-Gourlay-Greenstadt factors, so nothing is shared with the C core except the
random draws (Philox, reproduced through pymf._rng)."""
import numpy as np

from pymf import _rng

NOISE_STREAM, BATCH_STREAM = 8, 9  # PYMF_STREAM_SGMCMC_* in core/include/pymf/sgmcmc.h


def gauss(seed, t, dim):
    return _rng.noise(seed, NOISE_STREAM, t, 0, 1, dim)[0]


def minibatch(seed, t, n_data, size):
    """Philox words of counters {g, 0, t, BATCH}, mapped to [0, N) by (w N) >> 32."""
    key = (seed & 0xFFFFFFFF, seed >> 32)
    words = []
    for g in range((size + 3) // 4):
        words += _rng.philox4x32_10((g, 0, t & 0xFFFFFFFF, BATCH_STREAM | ((t >> 32) << 8)), key)
    return np.array([(w * n_data) >> 32 for w in words[:size]], dtype=np.int64)


def grad_potential(A, x, noise_var, prior_var, theta, idx):
    """grad U_Omega: prior part plus N / |Omega| times the minibatch's likelihood part."""
    if idx is None:
        idx = np.arange(len(x))
    a = A[idx]
    return theta / prior_var - len(x) / len(idx) * a.T @ (x[idx] - a @ theta) / noise_var


def scaled_gamma(pairs, fallback):
    """Nocedal & Wright eq. 7.20: s^T y / y^T y of the newest pair with s^T y > 0."""
    for s, y in reversed(pairs):
        if s @ y > 0:
            return (s @ y) / (y @ y)
    return fallback


def two_loop(pairs, gamma, g):
    """Nocedal & Wright Algorithm 7.4: H g from H^0 = gamma I and the pairs (oldest first),
    leaving out those with s^T y <= 0."""
    kept = [(s, y, 1.0 / (s @ y)) for s, y in pairs if s @ y > 0]
    q = np.array(g, dtype=float)
    alphas = []
    for s, y, rho in reversed(kept):
        alpha = rho * (s @ q)
        q = q - alpha * y
        alphas.append(alpha)
    r = gamma * q
    for (s, y, rho), alpha in zip(kept, reversed(alphas)):
        beta = rho * (y @ r)
        r = r + (alpha - beta) * s
    return r


def dense_h_and_s(pairs, gamma, dim, scaled=False):
    """H (BFGS recursion from gamma I, oldest pair first) and S with S S^T = H; scaled: from
    scaled_gamma(pairs, gamma) I instead."""
    if scaled:
        gamma = scaled_gamma(pairs, gamma)
    H = gamma * np.eye(dim)
    S = np.sqrt(gamma) * np.eye(dim)
    B = np.eye(dim) / gamma
    for s, y in pairs:
        sy = s @ y
        if not sy > 0:
            continue
        rho = 1.0 / sy
        H = (np.eye(dim) - rho * np.outer(s, y)) @ H @ (np.eye(dim) - rho * np.outer(y, s)) \
            + rho * np.outer(s, s)
        Bs = B @ s
        sigma = s @ Bs
        p, q = s / sy, np.sqrt(sy / sigma) * Bs + y
        S = (np.eye(dim) - np.outer(p, q)) @ S
        B = B - np.outer(Bs, Bs) / sigma + np.outer(y, y) / sy
    return H, S


def hamcmc(A, x, noise_var, prior_var, theta0, eps, seed, batch, memory, gamma, lam,
           scaled=False):
    """The chain theta_1 .. theta_T (T = len(eps)); the first 2M iterations are Langevin
    steps preconditioned by gamma I (scaled: the later ones start H from scaled_gamma)."""
    n_data, dim = A.shape
    M = memory
    thetas = [np.array(theta0, dtype=float)]
    pairs = {}  # tau -> (s_tau, y_tau)
    for t in range(1, len(eps) + 1):
        idx = minibatch(seed, t, n_data, batch) if batch else None
        z = gauss(seed, t, dim)
        e = eps[t - 1]
        if t > 2 * M:
            base = thetas[t - M]
            grad = grad_potential(A, x, noise_var, prior_var, base, idx)
            H, S = dense_h_and_s([pairs[tau] for tau in range(t - M + 1, t)], gamma, dim,
                                 scaled)
            new = base - e * H @ grad + np.sqrt(2 * e) * S @ z
        else:  # Langevin preconditioned by H^0 = gamma I
            prev = thetas[t - 1]
            new = prev - e * gamma * grad_potential(A, x, noise_var, prior_var, prev, idx) \
                + np.sqrt(2 * e * gamma) * z
        if t > M:
            older = thetas[t - M]
            s = new - older
            y = grad_potential(A, x, noise_var, prior_var, new, idx) \
                - grad_potential(A, x, noise_var, prior_var, older, idx) + lam * s
            pairs[t] = (s, y)
        thetas.append(new)
    return np.array(thetas[1:])


def preconditioned(A, x, noise_var, prior_var, theta0, eps, seed, batch, kind, alpha=0.99,
                   lam=1e-5, chol=None):
    """SGLD, preconditioned SGLD or SGRLD (chol: the metric's Cholesky factor)."""
    n_data, dim = A.shape
    theta = np.array(theta0, dtype=float)
    V = np.zeros(dim)
    out = []
    for t in range(1, len(eps) + 1):
        idx = minibatch(seed, t, n_data, batch) if batch else np.arange(n_data)
        z = gauss(seed, t, dim)
        e = eps[t - 1]
        grad = grad_potential(A, x, noise_var, prior_var, theta, idx)
        if kind == "sgld":
            theta = theta - e * grad + np.sqrt(2 * e) * z
        elif kind == "precond_sgld":
            a = A[idx]
            g = (a * ((x[idx] - a @ theta) / noise_var)[:, None]).mean(axis=0)
            V = (alpha if t > 1 else 0.0) * V + (1 - (alpha if t > 1 else 0.0)) * g * g
            G = 1.0 / (lam + np.sqrt(V))
            theta = theta - e * G * grad + np.sqrt(2 * e) * np.sqrt(G) * z
        else:
            theta = theta - e * chol @ (chol.T @ grad) + np.sqrt(2 * e) * chol @ z
        out.append(theta)
    return np.array(out)
