"""The result of a linear-Gaussian run."""
import numpy as np

from pymf.engine.result import Result


class LinearResult(Result):
    """What pymf.sample returns for a LinearGaussian model.

    mean, cov         the mean and covariance of the kept samples (cov is NaN with fewer
                      than two)
    samples           kept x D (None with keep_samples=False); posterior["theta"]: the same
                      as (chain, draw, D)
    exact_mean, exact_cov  the exact posterior
    trace             iteration, time (s), mean_error (Euclidean distance between the mean of
                      the samples kept so far and the exact posterior mean; NaN in burn-in)
    skipped_pairs     HAMCMC: curvature pairs left out because s^T y <= 0
    """

    kind = "linear_samples"
    dims = {"theta": ["dim"]}

    @classmethod
    def from_record(cls, record, params, exact_mean, exact_cov, skipped_pairs):
        self = cls.__new__(cls)
        self._set_record(record, params)
        moments = record.moments["theta"]
        self.mean = moments.mean if moments.count else np.full(len(exact_mean), np.nan)
        self.cov = moments.cov()
        self.exact_mean, self.exact_cov = exact_mean, exact_cov
        self.skipped_pairs = int(skipped_pairs)
        return self

    @property
    def samples(self):
        return None if not self._draws else self._draws["theta"][:, 0]

    def predict(self, A, return_std=False):
        """Posterior mean (and sd) of a . theta for every row a of A, over the kept samples."""
        A = np.asarray(A, dtype=np.float64)
        if self.samples is None or self.n_kept == 0:
            raise ValueError("this result kept no samples (keep_samples=False)")
        D = np.shape(self.samples)[-1]
        if A.ndim not in (1, 2) or A.shape[-1] != D:
            # the product below failed with numpy's matmul "mismatch in its core dimension"
            raise ValueError(f"A must be a vector of {D} values or an n x {D} matrix (rows of "
                             f"the design matrix), got shape {A.shape}")
        values = np.asarray(self.samples) @ A.T
        mean = values.mean(axis=0)
        return (mean, values.std(axis=0)) if return_std else mean

    def __repr__(self):
        error = self.trace["mean_error"][-1] if len(self.trace["mean_error"]) else float("nan")
        return (f"LinearResult({self.params['sampler']['sampler']}, kept={self.n_kept}, "
                f"mean_error={error:.4g})")

    def _family_arrays(self):
        return {"mean": self.mean, "cov": self.cov, "exact_mean": self.exact_mean,
                "exact_cov": self.exact_cov}

    def _family_meta(self):
        return {"skipped_pairs": self.skipped_pairs}

    def _load_family(self, get, meta):
        self.mean, self.cov = get("mean"), get("cov")
        self.exact_mean, self.exact_cov = get("exact_mean"), get("exact_cov")
        self.skipped_pairs = meta["skipped_pairs"]

    @classmethod
    def from_legacy(cls, get, meta):
        """A LinearResult file of pymf 0.1 (before the engine)."""
        self = cls.__new__(cls)
        samples = get("samples")
        names = get("__files__")
        self._set_common(params=meta["params"], seed=meta["params"].get("seed"),
                         trace={k[6:]: get(k) for k in names if k.startswith("trace_")},
                         draws=None if samples is None else {"theta": samples[:, None]},
                         n_kept=meta["n_kept"], interrupted=meta["interrupted"],
                         iterations=meta["iterations"])
        self._load_family(get, meta)
        return self
