"""The inference methods of the SIBM family: stochastic natural-gradient VI (SIBM) and the
batch VB it is compared with. Settings only; pymf.fit runs them."""
from pymf.engine.checks import check_count, check_real, check_threads

SAMPLINGS = ("uniform", "balanced", "biased")


class SIBM:
    """Stochastic variational inference for big binary matrices (Hernández-Lobato, Houlsby
    & Ghahramani): each update draws a minibatch of entries from `sampling` and takes a
    natural-gradient step on the rows, columns and bias it touched.

    sampling     "biased" (default: the poster's best; ones weighted by their row's and
                 column's zero counts, zeros by their one counts), "balanced" (half ones,
                 half zeros) or "uniform".
    batch_size   "auto" (default): re-set after every update from the noise-to-signal ratio
                 of the per-entry natural-parameter targets (poster section 8), starting at
                 batch_start and kept in [batch_min, batch_max]; or a fixed integer.
    theta_delta  the automatic size's one parameter: smaller means larger minibatches.
                 Defaults theta_delta = 100, batch_start = batch_min = 1000: the best of
                 theta_delta in {0.5, 5, 10, 20, 50, 100, 200, 1000, 5000} and batch_min in
                 {100, 1000} by test log-likelihood after 6 s, S-Biased, on the developers'
                 own 2000 x 2000 synthetic matrix (make_binary_mf(2000, 2000, 10,
                 density=0.01, scale=2, seed=0), held-out split seed 0), not the benchmark's.
                 On that matrix a fixed S of 1000-5000 did as well or better (README).
    tau0, kappa  step sizes rho = (tau0 + n)^-kappa, n a row's (column's) own update count
                 (z: the update number); Hoffman et al.'s usual kappa = 0.7, tau0 = 1.
    n_threads    OpenMP threads (None: all); the result does not depend on it.
    """

    kind = "sibm"

    def __init__(self, sampling="biased", batch_size="auto", theta_delta=100.0, batch_start=1000,
                 batch_min=1000, batch_max=1 << 22, tau0=1.0, kappa=0.7, n_threads=None):
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
        self.sampling = sampling
        if isinstance(batch_size, str):
            if batch_size != "auto":
                raise ValueError(f"batch_size must be 'auto' or a positive integer, got "
                                 f"{batch_size!r}")
            self.batch_size = "auto"
        else:
            self.batch_size = check_count(batch_size, "batch_size", 1)
        self.theta_delta = check_real(theta_delta, "theta_delta", positive=True)
        self.batch_min = check_count(batch_min, "batch_min", 1)
        self.batch_max = check_count(batch_max, "batch_max", self.batch_min)
        self.batch_start = check_count(batch_start, "batch_start", 1)
        if not self.batch_min <= self.batch_start <= self.batch_max:
            raise ValueError(f"batch_start={self.batch_start} must lie in [batch_min, "
                             f"batch_max] = [{self.batch_min}, {self.batch_max}]")
        self.tau0 = check_real(tau0, "tau0")
        if self.tau0 < 0:
            raise ValueError(f"tau0 must be >= 0, got {tau0!r}")
        self.kappa = check_real(kappa, "kappa")
        if not 0.5 < self.kappa <= 1.0:
            raise ValueError(f"kappa must be in (0.5, 1], got {kappa!r}")
        self.n_threads = check_threads(n_threads)

    def params(self):
        return {"method": self.kind, "sampling": self.sampling, "batch_size": self.batch_size,
                "theta_delta": self.theta_delta, "batch_start": self.batch_start,
                "batch_min": self.batch_min, "batch_max": self.batch_max, "tau0": self.tau0,
                "kappa": self.kappa}

    def __repr__(self):
        return (f"SIBM(sampling={self.sampling!r}, batch_size={self.batch_size!r}, "
                f"theta_delta={self.theta_delta})")


class BatchVB:
    """Batch variational Bayes with the same bound: every sweep visits all L x M entries,
    zeros included (coordinate ascent: the ELBO never decreases). Memory 16 L M bytes."""

    kind = "batch_vb"

    def __init__(self, n_threads=None):
        self.n_threads = check_threads(n_threads)

    def params(self):
        return {"method": self.kind}

    def __repr__(self):
        return "BatchVB()"
