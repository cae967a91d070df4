"""Running moments of kept draws: posterior means and variances without storing draws.

Welford's update (mean += delta / n; m2 += delta * (x - mean)) keeps the variance accurate
when the mean is large against the spread, which plain sums of squares do not. With
covariance=True a vector variable also keeps its co-moment matrix (D x D). A chain about
to diverge can produce huge finite draws: the moments then hold inf without warnings, and
the DivergenceError that follows says what happened.
"""
import numpy as np


class RunningMoments:
    def __init__(self, shape, covariance=False):
        self.count = 0
        self.mean = np.zeros(shape)
        self.m2 = np.zeros(shape)
        self.comoment = np.zeros(shape + shape) if covariance else None

    def add(self, x):
        self.count += 1
        with np.errstate(over="ignore", invalid="ignore"):
            delta = x - self.mean
            self.mean += delta / self.count
            after = x - self.mean
            self.m2 += delta * after
            if self.comoment is not None:
                self.comoment += np.outer(delta, after)

    def var(self):
        """Population variance of the draws so far (NaN before the first)."""
        if not self.count:
            return np.full_like(self.mean, np.nan)
        return self.m2 / self.count

    def std(self):
        return np.sqrt(self.var())

    def cov(self):
        """Sample covariance (n - 1), NaN with fewer than two draws."""
        if self.count < 2:
            return np.full_like(self.comoment, np.nan)
        return self.comoment / (self.count - 1)

    def snapshot(self, prefix):
        out = {prefix + "count": np.array(self.count), prefix + "mean": self.mean,
               prefix + "m2": self.m2}
        if self.comoment is not None:
            out[prefix + "comoment"] = self.comoment
        return out

    def restore(self, archive, prefix):
        self.count = int(archive[prefix + "count"])
        self.mean = archive[prefix + "mean"].copy()
        self.m2 = archive[prefix + "m2"].copy()
        if self.comoment is not None:
            self.comoment = archive[prefix + "comoment"].copy()
