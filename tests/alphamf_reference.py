"""Readable NumPy references for alpha-stable MF (core/src/alphamf.c): the gradient of the
conditionally Gaussian potential and a random-walk Metropolis sampler of p(W, H | X, Phi)."""
import numpy as np


def log_gg(x, a, b, p):
    """log GG(x; a, b, p) up to a constant: (a - 1) log x - b x^p."""
    return (a - 1.0) * np.log(x) - b * x ** p


def grad_potential(X, Phi, W, H, alpha, a_w, b_w, a_h, b_h):
    """grad of U = -log p(X | Phi, W, H) - log p(W) - log p(H) in (W, H), entry by entry:
    dU/dv_ij = -(X^2 / (Phi v^(2/alpha)) - 1) / (alpha v), dv_ij/dW_ik = H_kj."""
    p = 2.0 / alpha
    v = W @ H
    dv = -(X ** 2 / (Phi * v ** p) - 1.0) / (alpha * v)
    gW = dv @ H.T - (a_w - 1.0) / W + b_w * p * W ** (p - 1.0)
    gH = W.T @ dv - (a_h - 1.0) / H + b_h * p * H ** (p - 1.0)
    return gW, gH


def log_target(X, Phi, W, H, alpha, exponent=None, a=1.0, b=1.0):
    """log p(W, H | X, Phi) + const for stacks of (W, H) (chains x I x K, chains x K x J).
    exponent: the power of v in the variance (2 / alpha; another value is a wrong model)."""
    p = 2.0 / alpha
    exponent = p if exponent is None else exponent
    v = W @ H
    var = Phi * v ** exponent
    loglik = np.sum(-0.5 * np.log(var) - 0.5 * X ** 2 / var, axis=(-2, -1))
    prior = np.sum(log_gg(W, a, b, p), axis=(-2, -1)) + np.sum(log_gg(H, a, b, p), axis=(-2, -1))
    return loglik + prior


def random_walk_mh(X, Phi, alpha, K, n_chains, n_steps, step, rng, exponent=None):
    """n_chains independent random-walk Metropolis chains on (W, H) > 0, proposals
    |theta + step z| (a reflected Gaussian walk: symmetric, so the plain ratio applies).
    Returns the final states (W, H) of every chain."""
    I, J = X.shape
    W = rng.uniform(0.5, 1.5, (n_chains, I, K))
    H = rng.uniform(0.5, 1.5, (n_chains, K, J))
    current = log_target(X, Phi, W, H, alpha, exponent)
    for _ in range(n_steps):
        W_new = np.abs(W + step * rng.standard_normal(W.shape))
        H_new = np.abs(H + step * rng.standard_normal(H.shape))
        proposed = log_target(X, Phi, W_new, H_new, alpha, exponent)
        accept = np.log(rng.random(n_chains)) < proposed - current
        W[accept], H[accept] = W_new[accept], H_new[accept]
        current = np.where(accept, proposed, current)
    return W, H


def sas_log_density(alpha):
    """log f(z) of the standard SaS law (E[exp(i t Z)] = exp(-|t|^alpha)): scipy's
    levy_stable tabulated on |z| in [1e-3, 1e4] (log-log interpolation), the power tail
    -(1 + alpha) log|z| beyond, f(0)'s value below."""
    from scipy.stats import levy_stable
    grid = np.geomspace(1e-3, 1e4, 400)
    log_f = np.log(levy_stable.pdf(grid, alpha, 0.0))
    log_grid = np.log(grid)

    def log_density(z):
        log_z = np.log(np.maximum(np.abs(z), 1e-300))
        inside = np.interp(log_z, log_grid, log_f)
        tail = log_f[-1] - (1.0 + alpha) * (log_z - log_grid[-1])
        return np.where(log_z > log_grid[-1], tail, inside)

    return log_density


def random_walk_mh_marginal(X, alpha, K, n_chains, n_steps, step, rng, likelihood_alpha=None):
    """Random-walk Metropolis on p(W, H | X) with Phi integrated out: X_ij ~ SaS with scale
    v_ij^(1/alpha) (density f(x / sigma) / sigma), GG(1, 1, 2/alpha) priors. likelihood_alpha:
    another stable index in the likelihood only (a wrong model). Final states (W, H)."""
    like_alpha = alpha if likelihood_alpha is None else likelihood_alpha
    log_f = sas_log_density(like_alpha)
    p = 2.0 / alpha

    def log_target(W, H):
        sigma = (W @ H) ** (1.0 / like_alpha)
        loglik = np.sum(log_f(X / sigma) - np.log(sigma), axis=(-2, -1))
        return loglik + np.sum(log_gg(W, 1.0, 1.0, p), axis=(-2, -1)) \
            + np.sum(log_gg(H, 1.0, 1.0, p), axis=(-2, -1))

    I, J = X.shape
    W = rng.uniform(0.5, 1.5, (n_chains, I, K))
    H = rng.uniform(0.5, 1.5, (n_chains, K, J))
    current = log_target(W, H)
    for _ in range(n_steps):
        W_new = np.abs(W + step * rng.standard_normal(W.shape))
        H_new = np.abs(H + step * rng.standard_normal(H.shape))
        proposed = log_target(W_new, H_new)
        accept = np.log(rng.random(n_chains)) < proposed - current
        W[accept], H[accept] = W_new[accept], H_new[accept]
        current = np.where(accept, proposed, current)
    return W, H
