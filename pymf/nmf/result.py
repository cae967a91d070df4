"""Results of the NMF family: posterior draws of (W, H) (SampleResult) and MAP estimates
(FitResult)."""
import numpy as np

from pymf.nmf import _tweedie
from pymf.data import entry_ids
from pymf.engine.result import Result
from pymf.nmf.models import draw_tweedie


class SampleResult(Result):
    """Posterior summaries of one chain of an NMF sampler.

    W_mean (I x K), H_mean (K x J): means over the kept samples (the current state if none
    was kept yet); W_var, H_var: their variances.
    W_samples (kept x I x K), H_samples (kept x K x J): the kept samples (None if not kept);
    posterior: the same as {"W": (chain, draw, I, K), "H": (chain, draw, K, J)}.
    trace: dict of 1-D arrays, all of the same length: "iteration", "time" (seconds of
        sampling, trace computations excluded), "loglik" (sum of -d_beta/phi, i.e. the
        log-likelihood up to a constant of V), "logpost" (loglik + log prior) and, with a
        test set, "test_rmse" (of the running posterior-mean prediction) and
        "test_rmse_sample" (of the current state); with phi="sample" also "phi".
    sample_stats: per kept draw, "norm_W", "norm_H" and (phi="sample") "phi".
    params: the model, sampler and run settings; seed: the seed used (reproduces the run).
    n_kept: the number of kept samples; sample_iterations: the iteration of each;
    iterations: the iterations the chain ran (burn-in included); interrupted: True if
    Ctrl-C ended the run early.
    """

    kind = "nmf_samples"
    dims = {"W": ["row", "factor"], "H": ["factor", "column"]}

    @classmethod
    def from_record(cls, record, params, current_state):
        self = cls.__new__(cls)
        self._set_record(record, params)
        if record.moments["W"].count:
            self.W_mean, self.H_mean = record.moments["W"].mean, record.moments["H"].mean
            self.W_var, self.H_var = record.moments["W"].var(), record.moments["H"].var()
        else:  # nothing kept yet (e.g. interrupted in burn-in): report the current state
            self.W_mean, self.H_mean = current_state
            self.W_var = np.full_like(self.W_mean, np.nan)
            self.H_var = np.full_like(self.H_mean, np.nan)
        return self

    @property
    def W_samples(self):
        return None if not self._draws else self._draws["W"][:, 0]

    @property
    def H_samples(self):
        return None if not self._draws else self._draws["H"][:, 0]

    @property
    def sample_iterations(self):
        return self.draw_units

    def __repr__(self):
        shape = None if self.W_mean is None else (self.W_mean.shape[0], self.H_mean.shape[1])
        return (f"SampleResult(shape={shape}, n_kept={self.n_kept}, "
                f"interrupted={self.interrupted}, trace={sorted(self.trace)})")

    def predict(self, rows, cols, return_std=False):
        """Posterior mean (and standard deviation) of mu_ij = (W H)_ij over the kept samples."""
        rows, cols = entry_ids(rows, cols, (self.W_mean.shape[0], self.H_mean.shape[1]))
        if not self._draws:
            raise ValueError("this result kept no samples; run with keep_samples=True "
                             "(the default) to predict posterior means")
        if self.n_kept == 0:
            raise ValueError("this run kept no draws (stopped in the burn-in?): nothing to "
                             "predict from; its last state is W_mean and H_mean")
        total = np.zeros(rows.size)
        total_sq = np.zeros(rows.size)
        W_samples, H_samples = self.W_samples, self.H_samples
        for s in range(self.n_kept):
            W = np.ascontiguousarray(W_samples[s])
            Ht = np.ascontiguousarray(H_samples[s].T)
            mu = _tweedie.predict_entries(W, Ht, rows, cols)
            total += mu
            total_sq += mu * mu
        mean = total / self.n_kept
        if not return_std:
            return mean
        var = np.maximum(total_sq / self.n_kept - mean * mean, 0.0)
        return mean, np.sqrt(var)

    def predictive_draws(self, rows, cols, rng, max_draws):
        """New values of the entries from up to max_draws kept draws (evenly spread): each
        draw's mu = (W H)_ij, then Tweedie(mu, phi, p = 2 - beta) noise (pymf.nmf.models.
        draw_tweedie; with phi="sample", that draw's phi). None if no samples were kept."""
        if not self._draws or self.n_kept == 0:
            return None
        rows, cols = entry_ids(rows, cols, (self.W_mean.shape[0], self.H_mean.shape[1]))
        model = self.params["model"]
        pick = np.unique(np.linspace(0, self.n_kept - 1, min(max_draws, self.n_kept)).astype(int))
        W_samples, H_samples = self.W_samples, self.H_samples
        out = np.empty((len(pick), len(rows)))
        for n, s in enumerate(pick):
            mu = _tweedie.predict_entries(np.ascontiguousarray(W_samples[s]),
                                          np.ascontiguousarray(H_samples[s].T), rows, cols)
            out[n] = draw_tweedie(mu, model["beta"], self.phi_of_draw(s), rng)
        return out

    def phi_of_draw(self, s):
        """The dispersion of kept draw s: the model's, or (phi="sample") the one drawn."""
        phi = self.params["model"]["phi"]
        return float(self.draw_stats["phi"][s][0]) if phi == "sample" else phi

    def noise_variance(self):
        """phi: fixed, or (phi="sample") its posterior mean over the kept draws (the last
        traced value without draws). The variance of the observation noise for beta = 2."""
        phi = self.params["model"]["phi"]
        if phi != "sample":
            return float(phi)
        draws = np.asarray(self.draw_stats.get("phi", []), dtype=np.float64)
        if draws.size == 0:
            return float(self.trace["phi"][-1])
        return float(np.mean(draws))

    def _family_arrays(self):
        return {"W_mean": self.W_mean, "H_mean": self.H_mean, "W_var": self.W_var,
                "H_var": self.H_var}

    def _load_family(self, get, meta):
        self.W_mean, self.H_mean = get("W_mean"), get("H_mean")
        self.W_var, self.H_var = get("W_var"), get("H_var")

    @classmethod
    def from_legacy(cls, get, meta):
        """A SampleResult file of pymf 0.1 (before the engine): samples (kept x ...), no
        variances, no seed record beyond params."""
        self = cls.__new__(cls)
        n = meta["n_kept"]
        W, H = get("W_samples"), get("H_samples")
        draws = None if W is None else {"W": W[:n, None], "H": H[:n, None]}
        self._set_common(params=meta["params"], seed=meta["params"].get("seed"),
                         trace={k: np.asarray(get("trace_" + k)) for k in meta["trace_keys"]},
                         draws=draws, draw_units=get("sample_iterations")[:n], n_kept=n,
                         interrupted=meta.get("interrupted", False),
                         iterations=meta.get("iterations") or 0)
        self.W_mean, self.H_mean = get("W_mean"), get("H_mean")
        self.W_var = self.H_var = None
        return self


class FitResult(Result):
    """A MAP estimate: W (I x K), H (K x J), trace (dict of arrays: iteration, epoch, time,
    loglik, logpost, and test_rmse with a test set), params, seed, iterations."""

    kind = "nmf_fit"

    @classmethod
    def from_record(cls, record, params, state):
        self = cls.__new__(cls)
        self._set_record(record, params)
        self.W, self.H = state
        return self

    def predict(self, rows, cols, return_std=False):
        """(W H)_ij of the MAP estimate (return_std=True: with zeros, a point estimate has no
        posterior spread)."""
        rows, cols = entry_ids(rows, cols, (self.W.shape[0], self.H.shape[1]))
        mean = _tweedie.predict_entries(np.ascontiguousarray(self.W),
                                        np.ascontiguousarray(self.H.T), rows, cols)
        return (mean, np.zeros(len(rows))) if return_std else mean

    def _family_arrays(self):
        return {"W": self.W, "H": self.H}

    def _load_family(self, get, meta):
        self.W, self.H = get("W"), get("H")

    @classmethod
    def from_legacy(cls, get, meta):
        self = cls.__new__(cls)
        self._set_common(params=meta["params"], seed=meta["params"].get("seed"),
                         trace={k: get("trace_" + k) for k in meta["trace_keys"]},
                         iterations=meta["iterations"])
        self.W, self.H = get("W"), get("H")
        return self
