"""Results of the BPMF family: posterior draws (BPMFResult) and MAP estimates (BPMFFit)."""
import numpy as np

from pymf.data import entry_ids
from pymf.engine.checks import check_flag
from pymf.engine.moments import RunningMoments
from pymf.engine.result import Result

_DIMS = {"U": ["user", "factor"], "V": ["item", "factor"], "a": ["user"], "b": ["item"]}


class BPMFResult(Result):
    """What pymf.sample returns for a BPMF model.

    test_mean, test_std   posterior predictive mean and standard deviation of every test
                          rating over all kept samples of all chains (Welford, streaming)
    samples               dict of arrays (kept, chains, ...) of U, V, a, b (original order)
                          when keep_samples=True, else None; posterior: the same as
                          (chain, draw, ...) views
    trace                 iteration (rounds or sweeps), time (s), train_rmse (mean of the
                          chains' current states), test_rmse (the running average of the
                          kept samples; NaN during burn-in: the test RMSE of a single sample
                          is never reported)
    last_state            the chains' final (on divergence: last finite) U, V, a, b, each
                          (chains, ...) in the original order
    summaries             (= sample_stats) per chain and kept sample: train_rmse, norm_U,
                          norm_V, lam_u_mean, lam_v_mean, lam_a, lam_b, tau: for
                          diagnostics()
    tau                   the model's fixed noise precision, or "sample" (then drawn: its
                          draws are sample_stats["tau"], and noise_variance() averages 1/tau)
    burnin_end            the unit at which burn-in ended (burnin, or earlier by burnin_rmse)
    """

    kind = "bpmf_samples"
    dims = _DIMS

    @classmethod
    def from_record(cls, record, params, mean_rating, tau, test, last_state):
        self = cls.__new__(cls)
        self._set_record(record, params)
        moments = record.test_moments or RunningMoments((0,))
        self.test_mean, self.test_std = moments.mean.copy(), moments.std()
        self.test_count = moments.count
        self.test_pairs = None if test is None else (test.rows.copy(), test.cols.copy())
        self.burnin_end, self.mean_rating, self.tau = record.burnin_end, mean_rating, tau
        self.last_state = last_state
        return self

    @property
    def samples(self):
        return self._draws or None

    @property
    def summaries(self):
        return self.sample_stats

    def __repr__(self):
        rmse = self.trace["test_rmse"][-1] if len(self.trace.get("test_rmse", [])) else float("nan")
        return (f"BPMFResult({self.params.get('sampler', {}).get('sampler')}, "
                f"test_rmse={rmse:.4f}, kept={self.test_count})")

    def predict(self, users, items, return_std=False, noise=False):
        """Posterior predictive mean (and sd, return_std=True) for (user, item) pairs: 0-based
        row and column indices of the training Ratings, in their own (unpermuted) order
        (load_movielens's R.user_ids[r] is row r's id in the file).

        The sd is the posterior standard deviation of the expected rating; noise=True adds
        the observation noise 1/tau (the predictive distribution of a new rating; with a
        sampled tau its posterior mean, noise_variance()). Uses the
        kept samples; without them only the test pairs (tracked by Welford) can be predicted."""
        shape = (self.last_state["U"].shape[1], self.last_state["V"].shape[1]) \
            if self.last_state is not None else (np.inf, np.inf)
        users, items = entry_ids(users, items, shape, ("user", "item"))
        if self.n_kept == 0:
            # no draw kept (a divergence or Ctrl-C in the burn-in): a mean of nothing, which
            # read 0.0 with an sd of NaN
            raise ValueError("this run kept no draws (stopped in the burn-in?): nothing to "
                             "predict from; its last state is result.last_state")
        if self.samples is not None:
            s = self.samples
            acc = RunningMoments((len(users),))
            for k in range(s["U"].shape[0]):
                for c in range(s["U"].shape[1]):
                    acc.add(self.mean_rating + np.einsum("nd,nd->n", s["U"][k, c][users],
                                                         s["V"][k, c][items])
                            + s["a"][k, c][users] + s["b"][k, c][items])
            mean, std = acc.mean, acc.std()
        elif self.test_pairs is not None and np.array_equal(users, self.test_pairs[0]) \
                and np.array_equal(items, self.test_pairs[1]):
            mean, std = self.test_mean.copy(), self.test_std.copy()
        else:
            raise ValueError("this result kept no samples (keep_samples=False): only the test "
                             "pairs can be predicted")
        if check_flag(noise, "noise"):
            std = np.sqrt(std ** 2 + self.noise_variance())
        return (mean, std) if return_std else mean

    def noise_variance(self):
        """The observation noise's variance 1/tau: fixed, or (tau="sample") its posterior
        mean over the kept draws of every chain (the last state's tau without draws)."""
        if self.tau != "sample":
            return 1.0 / self.tau
        taus = np.asarray(self.draw_stats.get("tau", []), dtype=np.float64)
        if taus.size == 0:
            taus = np.asarray(self.trace.get("tau", [np.nan])[-1:])
        return float(np.mean(1.0 / taus))

    def predictive_draws(self, rows, cols, rng, max_draws):
        """New ratings of the entries from up to max_draws kept draws (evenly spread over
        draws and chains): each draw's expected rating plus N(0, 1/tau) noise with that
        draw's tau. None if no samples were kept."""
        if self.samples is None or self.n_kept == 0:
            return None
        rows, cols = entry_ids(rows, cols, (self.last_state["U"].shape[1],
                                            self.last_state["V"].shape[1]), ("user", "item"))
        s = self.samples
        n_kept, n_chains = s["U"].shape[:2]
        pairs = [(k, c) for k in range(n_kept) for c in range(n_chains)]
        pick = np.unique(np.linspace(0, len(pairs) - 1, min(max_draws, len(pairs))).astype(int))
        taus = np.asarray(self.draw_stats["tau"]) if self.tau == "sample" else None
        out = np.empty((len(pick), len(rows)))
        for n, index in enumerate(pick):
            k, c = pairs[index]
            tau = self.tau if taus is None else taus[k, c]
            out[n] = (self.mean_rating + np.einsum("nd,nd->n", s["U"][k, c][rows], s["V"][k, c][cols])
                      + s["a"][k, c][rows] + s["b"][k, c][cols]
                      + rng.normal(0.0, 1.0 / np.sqrt(tau), len(rows)))
        return out

    def predictive_moments(self, rows, cols):
        """Posterior predictive mean and sd of new ratings (noise included): the family's
        hook for Result.coverage."""
        if self.test_count == 0:
            raise ValueError("this run kept no draws and no running moments of these entries "
                             "(keep_samples=False without a test set, or a run stopped in the "
                             "burn-in): no posterior predictive to check")
        return self.predict(rows, cols, return_std=True, noise=True)

    def _family_arrays(self):
        arrays = {"test_mean": self.test_mean, "test_std": self.test_std}
        if self.test_pairs is not None:
            arrays["test_users"], arrays["test_items"] = self.test_pairs
        for key, value in (self.last_state or {}).items():
            arrays["last_" + key] = value
        return arrays

    def _family_meta(self):
        return {"burnin_end": self.burnin_end, "mean_rating": self.mean_rating, "tau": self.tau,
                "test_count": self.test_count, "last": sorted(self.last_state or {})}

    def _load_family(self, get, meta):
        self.test_mean, self.test_std = get("test_mean"), get("test_std")
        self.test_count = meta["test_count"]
        users = get("test_users")
        self.test_pairs = None if users is None else (users, get("test_items"))
        self.last_state = {key: get("last_" + key) for key in meta["last"]} or None
        self.burnin_end, self.mean_rating, self.tau = (meta["burnin_end"], meta["mean_rating"],
                                                       meta["tau"])

    @classmethod
    def from_legacy(cls, get, meta):
        """A BPMFResult file of pymf 0.1 (before the engine)."""
        self = cls.__new__(cls)
        names = get("__files__")
        samples = {k[7:]: get(k) for k in names if k.startswith("sample_")} or None
        stats = {k[8:]: np.asarray(get(k)).T for k in names if k.startswith("summary_")}
        n = 0 if samples is None else len(samples["U"])
        self._set_common(params=meta["params"], seed=meta["params"].get("seed"),
                         trace={k[6:]: get(k) for k in names if k.startswith("trace_")},
                         draws=samples, draw_stats=stats, n_kept=n,
                         iterations=int(get("trace_iteration")[-1]) if n else 0)
        self.test_mean, self.test_std = get("test_mean"), get("test_std")
        self.test_count = meta["test_count"]
        self.test_pairs = (get("test_users"), get("test_items")) if "test_users" in names else None
        self.last_state = {k[5:]: get(k) for k in names if k.startswith("last_")} or None
        self.burnin_end, self.mean_rating, self.tau = (meta["burnin_end"], meta["mean_rating"],
                                                       meta["tau"])
        return self


class BPMFFit(Result):
    """MAP estimate of BPMF by (D)SGD: U, V, a, b (original order), trace (iteration =
    rounds, epoch, time, train_rmse, test_rmse of the current estimate), predict()."""

    kind = "bpmf_fit"

    @classmethod
    def from_record(cls, record, params, state, mean_rating):
        self = cls.__new__(cls)
        self._set_record(record, params)
        self.U, self.V, self.a, self.b = (state[key][0] for key in "UVab")
        self.mean_rating = mean_rating
        return self

    def predict(self, users, items, return_std=False):
        """The MAP estimate's expected rating (return_std=True: with zeros, a point estimate
        has no posterior spread)."""
        users, items = entry_ids(users, items, (len(self.U), len(self.V)), ("user", "item"))
        mean = self.mean_rating + np.einsum("nd,nd->n", self.U[users], self.V[items]) + \
            self.a[users] + self.b[items]
        return (mean, np.zeros(len(users))) if return_std else mean

    def _family_arrays(self):
        return {"U": self.U, "V": self.V, "a": self.a, "b": self.b}

    def _family_meta(self):
        return {"mean_rating": self.mean_rating}

    def _load_family(self, get, meta):
        self.U, self.V, self.a, self.b = (get(key) for key in "UVab")
        self.mean_rating = meta["mean_rating"]
