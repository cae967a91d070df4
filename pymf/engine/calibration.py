"""Calibration of posterior predictive intervals on held-out data, for every result that
predicts: Result.coverage, Result.calibration and Result.plot_calibration call these.

A family's result gives its posterior predictive through one of two hooks:

  predictive_draws(rows, cols, rng, max_draws)  (S, n) draws of new values of the entries
      (every kept draw's expected value plus the model's noise, drawn with rng), or None
      when it has no kept draws;
  predictive_moments(rows, cols)  (mean, sd) of the predictive, noise included, used when
      there are no draws (a Gaussian interval mean +- z sd).

The central interval of level l is [q((1 - l)/2), q((1 + l)/2)] of the draws (inclusive, so
for count data it covers at least l); coverage is the fraction of held-out values inside.
"""
import math
import numbers

import numpy as np

from pymf.data import Ratings, as_observed
from pymf.engine.seeds import check_seed

LEVELS = (0.5, 0.8, 0.9, 0.95)
MAX_DRAWS = 500  # predictive draws per entry: the quantiles' Monte-Carlo error ~ 1/sqrt(500)


def check_levels(levels):
    try:
        levels = tuple(levels)
    except TypeError:
        raise ValueError(f"levels must be a sequence of numbers in (0, 1), got {levels!r}") from None
    if not levels:
        raise ValueError("levels is empty: give at least one level in (0, 1)")
    for level in levels:
        if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
            raise ValueError(f"every level must be a number in (0, 1), got {level!r}")
    return tuple(float(level) for level in levels)


def held_out(test):
    """The held-out entries as Ratings (a dense matrix means every entry is held out)."""
    if test is None:
        raise ValueError("coverage needs held-out data: pass test= (pymf.Ratings, a scipy.sparse "
                         "matrix or a dense matrix)")
    test = as_observed(test)
    if not isinstance(test, Ratings):
        test = Ratings.from_dense(test)
    if test.nnz == 0:
        raise ValueError("the test set is empty")
    return test


def predictive(result, test, seed=0, max_draws=MAX_DRAWS):
    """(test, mean, sd, draws or None) of the posterior predictive at the held-out entries.
    The test set's shape must be the data's, as pymf.sample(test=...) asks (its entries
    are cells of that matrix); seed: what numpy.random.default_rng takes."""
    test = held_out(test)
    shape = (getattr(result, "params", None) or {}).get("shape")
    if shape is not None and tuple(test.shape) != tuple(shape):
        raise ValueError(f"the test set has shape {tuple(test.shape)}, the data "
                         f"{tuple(shape)}")
    if seed is not None:
        try:
            check_seed(seed)  # the engine's own check of a seed
        except ValueError:
            raise ValueError(f"seed must be None or an integer >= 0, got {seed!r}") from None
    rng = np.random.default_rng(seed)
    draws = result.predictive_draws(test.rows, test.cols, rng, max_draws)
    if draws is not None:
        draws = np.asarray(draws, dtype=np.float64)
        return test, draws.mean(axis=0), draws.std(axis=0), draws
    mean, sd = result.predictive_moments(test.rows, test.cols)
    return test, np.asarray(mean, dtype=np.float64), np.asarray(sd, dtype=np.float64), None


def intervals(mean, sd, draws, level):
    if draws is not None:
        lower, upper = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2], axis=0)
        return lower, upper
    from scipy.special import ndtri  # here: scipy.special costs `import pymf` 0.3 s and 9 MB

    z = ndtri((1 + level) / 2)
    return mean - z * sd, mean + z * sd


def coverage(result, test, levels=LEVELS, seed=0):
    levels = check_levels(levels)
    test, mean, sd, draws = predictive(result, test, seed)
    out = {}
    for level in levels:
        lower, upper = intervals(mean, sd, draws, level)
        out[level] = float(np.mean((test.values >= lower) & (test.values <= upper)))
    return out


def calibration(result, test, levels=LEVELS, n_bins=10, seed=0):
    """Observed against nominal coverage, and the held-out RMSE against the predicted sd in
    n_bins bins of equal counts by predicted sd: a calibrated posterior puts both on the
    diagonal. Returns a dict of plain lists (JSON-ready)."""
    levels = check_levels(levels)
    if isinstance(n_bins, bool) or not isinstance(n_bins, numbers.Integral) or n_bins < 1:
        raise ValueError(f"n_bins must be a positive integer, got {n_bins!r}")
    test, mean, sd, draws = predictive(result, test, seed)
    observed = []
    for level in levels:
        lower, upper = intervals(mean, sd, draws, level)
        observed.append(float(np.mean((test.values >= lower) & (test.values <= upper))))
    error = test.values - mean
    order = np.argsort(sd, kind="stable")
    bins = [b for b in np.array_split(order, min(n_bins, len(order))) if len(b)]
    return {"levels": list(levels), "coverage": observed, "n": int(test.nnz),
            "rmse": float(math.sqrt(np.mean(error ** 2))),
            "mean_sd": float(np.mean(sd)),
            "bin_sd": [float(np.sqrt(np.mean(sd[b] ** 2))) for b in bins],
            "bin_rmse": [float(np.sqrt(np.mean(error[b] ** 2))) for b in bins],
            "bin_count": [int(len(b)) for b in bins],
            "from_draws": draws is not None}


def plot_calibration(table, path, title=None):
    """Two panels: nominal against observed interval coverage, and RMSE against predicted
    sd in bins. Writes a PNG to path (matplotlib, Agg) and returns the path."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 4))
    left.plot([0, 1], [0, 1], color="0.6", lw=1, label="ideal")
    left.plot(table["levels"], table["coverage"], "o-", label="observed")
    left.set_xlabel("nominal coverage of the central interval")
    left.set_ylabel("fraction of held-out values inside")
    left.set_xlim(0, 1)
    left.set_ylim(0, 1)
    left.legend(loc="upper left")
    top = max(max(table["bin_sd"]), max(table["bin_rmse"])) * 1.1
    right.plot([0, top], [0, top], color="0.6", lw=1, label="ideal")
    right.plot(table["bin_sd"], table["bin_rmse"], "o-", label="held-out RMSE")
    right.set_xlabel("predicted sd (bin rms)")
    right.set_ylabel("RMSE of the posterior mean")
    right.legend(loc="upper left")
    fig.suptitle(title or f"calibration on {table['n']} held-out values")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
