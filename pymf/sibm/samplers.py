"""The inference methods of the SIBM family: stochastic natural-gradient VI (SIBM) and the
batch VB it is compared with. Settings only; pymf.fit runs them."""
from pymf.engine.checks import MAX_UNITS, check_count, check_real, check_threads

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
    batch_min    None (default): max(1000, (L + M) / 4) for an L x M matrix, half a draw
                 per row and column on average when L = M; batch_start None: batch_min.
    theta_delta  the automatic size's one parameter: smaller means larger minibatches.
    tau0, kappa  step sizes rho = (tau0 + n)^-kappa, n a row's (column's) own update count
                 (z: the update number); kappa = 0.7 as in Hoffman et al.
    Where the defaults come from (test log-likelihood reached in a fixed time, S-Biased):
    theta_delta = 100 from {0.5, 5, 10, 20, 50, 100, 200, 1000, 5000} and batch_min 1000
    from {100, 1000} on the developers' own 2000 x 2000 matrix (make_binary_mf(2000, 2000,
    10, density=0.01, scale=2, seed=0), holdout seed 0); tau0 = 10 from {1, 10, 100, 1000}
    on the same matrix (tau0 = 1 let a row's first single-draw target move it most of the
    way: the test log-likelihood first fell far); the (L + M) / 4 scaling from
    batch_min in {1000, 5000} on a 10^4 x 10^4 matrix of seed 0 (bench/sibm_synthetic.py
    reports on seed 1). A fixed S of a few thousand did as well or better (README).
    n_threads    OpenMP threads (None: all); the result does not depend on it.
    """

    kind = "sibm"

    def __init__(self, sampling="biased", batch_size="auto", theta_delta=100.0, batch_start=None,
                 batch_min=None, batch_max=1 << 22, tau0=10.0, kappa=0.7, n_threads=None):
        if sampling not in SAMPLINGS:
            raise ValueError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
        self.sampling = sampling
        if isinstance(batch_size, str):
            if batch_size != "auto":
                raise ValueError(f"batch_size must be 'auto' or a positive integer, got "
                                 f"{batch_size!r}")
            self.batch_size = "auto"
        else:
            self.batch_size = check_count(batch_size, "batch_size", 1, MAX_UNITS)
        self.theta_delta = check_real(theta_delta, "theta_delta", positive=True)
        self.batch_max = check_count(batch_max, "batch_max", 1, MAX_UNITS)
        self.batch_min = None if batch_min is None else check_count(batch_min, "batch_min", 1, MAX_UNITS)
        self.batch_start = None if batch_start is None else check_count(batch_start,
                                                                        "batch_start", 1,
                                                                        MAX_UNITS)
        self.sizes(1, 1)  # refuses inconsistent bounds now, not at fit time
        self.tau0 = check_real(tau0, "tau0")
        if self.tau0 < 0:
            raise ValueError(f"tau0 must be >= 0, got {tau0!r}")
        self.kappa = check_real(kappa, "kappa")
        if not 0.5 < self.kappa <= 1.0:
            raise ValueError(f"kappa must be in (0.5, 1], got {kappa!r}")
        self.n_threads = check_threads(n_threads)

    def sizes(self, n_rows, n_cols):
        """(batch_start, batch_min, batch_max) of the automatic size for an n_rows x n_cols
        matrix (the defaults resolved)."""
        low = self.batch_min
        if low is None:
            low = min(max(1000, (n_rows + n_cols) // 4), self.batch_max)
        start = low if self.batch_start is None else self.batch_start
        if not low <= start <= self.batch_max:
            raise ValueError(f"the automatic batch size needs batch_min <= batch_start <= "
                             f"batch_max, got {low}, {start}, {self.batch_max}")
        return start, low, self.batch_max

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
