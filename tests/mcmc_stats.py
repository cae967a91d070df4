"""Monte-Carlo error helpers shared by the statistical tests.

The posterior tests compare two estimates of the same expectations, each from several
independent chains, with a z-test: z = (a - b) / sqrt(se_a^2 + se_b^2). The standard
errors come from batch means (each chain cut into batches much longer than its
autocorrelation time). With m comparisons in a test and a family-wise false-alarm rate
alpha, each |z| must stay below the two-sided Bonferroni quantile z(alpha / m).
"""
import numpy as np
from scipy import stats


def batch_means(draws, n_batches=20):
    """draws: (chains, draws, ...) -> (mean, standard error) over all chains, batch means."""
    draws = np.asarray(draws, dtype=np.float64)
    n_chains, n_draws = draws.shape[:2]
    usable = (n_draws // n_batches) * n_batches
    batches = draws[:, :usable].reshape((n_chains, n_batches, usable // n_batches) + draws.shape[2:])
    means = batches.mean(axis=2).reshape((n_chains * n_batches,) + draws.shape[2:])
    return means.mean(axis=0), means.std(axis=0, ddof=1) / np.sqrt(means.shape[0])


def bonferroni_z(alpha, n_comparisons):
    return stats.norm.isf(alpha / (2 * n_comparisons))


def z_scores(mean_a, se_a, mean_b, se_b):
    return (np.asarray(mean_a) - mean_b) / np.sqrt(np.asarray(se_a) ** 2 + np.asarray(se_b) ** 2)
