"""Readable NumPy references for the IBP family's tests: the collapsed likelihood, the IBP
prior of a left-ordered-form class, the exact posterior over classes of a tiny matrix by
enumeration, and a plain collapsed Gibbs sampler (with a deliberately wrong variant for the
power checks)."""
import itertools
import math

import numpy as np
from scipy.special import gammaln


def collapsed_loglik(Z, Y, sigma_x, sigma_a):
    """log p(Y | Z) with A ~ N(0, sigma_a^2) integrated out, straight from Griffiths &
    Ghahramani (2011, eq. 26): one inverse and one determinant."""
    N, D = Y.shape
    K = Z.shape[1]
    P = Z.T @ Z + (sigma_x ** 2 / sigma_a ** 2) * np.eye(K)
    M = np.linalg.inv(P) if K else np.zeros((0, 0))
    logdet = np.linalg.slogdet(P)[1] if K else 0.0
    fit = np.trace(Y.T @ (np.eye(N) - Z @ M @ Z.T) @ Y)
    return (-0.5 * N * D * math.log(2 * math.pi) - (N - K) * D * math.log(sigma_x)
            - K * D * math.log(sigma_a) - 0.5 * D * logdet - fit / (2 * sigma_x ** 2))


def lof_log_prior(Z, alpha):
    """log P([Z]) under IBP(alpha): K log alpha - sum_h log K_h! - alpha H_N
    + sum_k log((N - m_k)! (m_k - 1)! / N!), the K_h counting identical columns."""
    N = Z.shape[0]
    cols = [tuple(c) for c in Z.T.astype(int) if c.any()]
    value = len(cols) * math.log(alpha) - alpha * sum(1.0 / n for n in range(1, N + 1))
    for col in set(cols):
        value -= math.lgamma(cols.count(col) + 1)
    for col in cols:
        m = sum(col)
        value += gammaln(N - m + 1) + gammaln(m) - gammaln(N + 1)
    return value


def class_key(Z):
    """The left-ordered-form class of Z: the sorted multiset of its non-zero columns."""
    Z = np.asarray(Z).astype(int)
    return tuple(sorted(tuple(c) for c in Z.T if c.any()))


def enumerate_posterior(Y, alpha, sigma_x, sigma_a, max_features):
    """{class: posterior probability} over every class with at most max_features
    features, and the prior-times-likelihood mass of the classes with exactly
    max_features (to show the truncation is harmless)."""
    N = Y.shape[0]
    types = [t for t in itertools.product((0, 1), repeat=N) if any(t)]
    weights = {}
    for K in range(max_features + 1):
        for combo in itertools.combinations_with_replacement(range(len(types)), K):
            Z = np.array([types[i] for i in combo], dtype=float).T.reshape(N, K)
            weights[class_key(Z)] = lof_log_prior(Z, alpha) + collapsed_loglik(
                Z, Y, sigma_x, sigma_a)
    top = max(weights.values())
    total = sum(math.exp(w - top) for w in weights.values())
    probs = {key: math.exp(w - top) / total for key, w in weights.items()}
    edge = sum(p for key, p in probs.items() if len(key) == max_features)
    return probs, edge


def _predictive_logpdf(y, Zo, Yo, z, sigma_x, sigma_a, fresh):
    """log p(y | z, the other rows) with `fresh` features that no other row has."""
    K = Zo.shape[1]
    r = sigma_x ** 2 / sigma_a ** 2
    M = np.linalg.inv(Zo.T @ Zo + r * np.eye(K)) if K else np.zeros((0, 0))
    mean = z @ M @ Zo.T @ Yo if K else np.zeros(len(y))
    var = sigma_x ** 2 * (1 + z @ M @ z) + fresh * sigma_a ** 2
    return float(-0.5 * len(y) * math.log(2 * math.pi * var) - np.sum((y - mean) ** 2) / (2 * var))


def collapsed_gibbs(Y, alpha, sigma_x, sigma_a, n_sweeps, rng, poisson_rate=None):
    """Classes visited by a plain collapsed Gibbs sampler (singletons by MH, as the C core).
    poisson_rate: the rate of the new-feature proposal; None is the right alpha / N, the
    classic mistake alpha gives the power check a sampler with a wrong conditional."""
    N = Y.shape[0]
    rate = alpha / N if poisson_rate is None else poisson_rate
    Z = np.zeros((N, 0))
    keys = []
    for _ in range(n_sweeps):
        for n in range(N):
            others = np.delete(np.arange(N), n)
            m = Z[others].sum(axis=0)
            k_old = int(np.sum((m == 0) & (Z[n] == 1)))  # row n's singletons
            Z, m = Z[:, m > 0], m[m > 0]
            for k in range(Z.shape[1]):
                logp = []
                for value in (0.0, 1.0):
                    Z[n, k] = value
                    prior = m[k] / N if value else 1 - m[k] / N
                    logp.append(math.log(prior) + _predictive_logpdf(
                        Y[n], Z[others], Y[others], Z[n], sigma_x, sigma_a, k_old))
                p1 = 1.0 / (1.0 + math.exp(logp[0] - logp[1]))
                Z[n, k] = float(rng.random() < p1)
            k_new = rng.poisson(rate)
            ratio = (_predictive_logpdf(Y[n], Z[others], Y[others], Z[n], sigma_x, sigma_a, k_new)
                     - _predictive_logpdf(Y[n], Z[others], Y[others], Z[n], sigma_x, sigma_a,
                                          k_old))
            k_final = k_new if math.log(rng.random()) < ratio else k_old
            fresh = np.zeros((N, k_final))
            fresh[n] = 1.0
            Z = np.hstack([Z, fresh])
        keys.append(class_key(Z))
    return keys


def batch_z_scores(keys, probs, n_batches=50):
    """z-scores of the visited frequency of every class with probability >= 1 % (and of
    all others lumped), with Monte-Carlo standard errors from n_batches batch means (the
    draws are autocorrelated)."""
    categories = [key for key, p in probs.items() if p >= 0.01]
    index = {key: i for i, key in enumerate(categories)}
    labels = np.array([index.get(key, len(categories)) for key in keys])
    expected = np.array([probs[key] for key in categories] + [1 - sum(probs[k] for k in categories)])
    n = len(labels) // n_batches * n_batches
    onehot = np.eye(len(expected))[labels[:n]]
    batches = onehot.reshape(n_batches, -1, len(expected)).mean(axis=1)
    mean = batches.mean(axis=0)
    se = batches.std(axis=0, ddof=1) / math.sqrt(n_batches)
    se = np.maximum(se, 1e-4)
    return (mean - expected) / se, mean, expected
