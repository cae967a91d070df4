"""The result of sampling an IBPLinearGaussian model."""
import math
import numbers

import numpy as np

from pymf.data import entry_ids
from pymf.engine.result import Result
from pymf.engine.storage import png_path
from pymf.ibp.kernel import pack_kept, unpack_kept


class IBPResult(Result):
    """What pymf.sample returns for an IBPLinearGaussian model.

    trace              iteration, time (s, sampling only), K (features in use, K+), sigma_x,
                       sigma_a, alpha, train_loglik (log p(X_train | Z, A, sigma_x)) and with
                       test_mask: heldout_loglik (the paper's: log p(X_test | Z, A, sigma_x)
                       + log P([Z] | alpha) at the current state) and predictive_loglik (the
                       sum of the log posterior predictive densities of the held-out cells
                       over the kept draws so far; NaN before the first)
    Z_samples          the kept draws of Z: a list of boolean N x K_s arrays (stored
                       bit-packed; K varies from draw to draw)
    A_samples          the kept draws of A: a list of K_s x D arrays
    posterior          K, sigma_x, sigma_a, alpha of the kept draws, (chain, draw)
    last_state         Z, A, pi (NaN for collapsed Gibbs), sigma_x, sigma_a, alpha at the end
    test_density       the posterior predictive density of every held-out cell (row-major
                       order of the mask), or None

    draw_mean(s, rows, cols)  kept draw s's (Z A) at the cells
    coverage(test), calibration(test) and plot_calibration(path, test) (pymf.engine.result)
    take the held-out cells as pymf.Ratings (for a mask: rows, cols = np.nonzero(mask);
    pymf.Ratings(rows, cols, X[rows, cols], shape=X.shape)).
    """

    kind = "ibp_samples"
    dims = {"K": [], "sigma_x": [], "sigma_a": [], "alpha": []}

    @classmethod
    def from_record(cls, record, params, kept_Z, kept_A, shape, last_state):
        self = cls.__new__(cls)
        self._set_record(record, params)
        self.shape = tuple(shape)
        n = record.n_kept
        self._kept_Z, self._kept_A = list(kept_Z[:n]), list(kept_A[:n])
        self.last_state = last_state
        moments = record.test_moments
        self.test_density = None if moments is None or moments.count == 0 else moments.mean.copy()
        return self

    @property
    def Z_samples(self):
        return [self._Z_of_draw(s) for s in range(len(self._kept_A))]

    @property
    def A_samples(self):
        return list(self._kept_A)

    @property
    def predictive_loglik(self):
        """Sum over the held-out cells of the log posterior predictive density."""
        if self.test_density is None:
            return math.nan
        return float(np.sum(np.log(self.test_density)))

    def _Z_of_draw(self, s):
        """Kept draw s's Z, unpacked (N x K_s booleans)."""
        N, K = self.shape[0], self._kept_A[s].shape[0]
        return np.unpackbits(self._kept_Z[s], count=N * K).reshape(N, K).astype(bool)

    def predictive_draws(self, rows, cols, rng, max_draws):
        """New values of the cells from up to max_draws kept draws (evenly spread): each
        draw's (Z A)_nd plus N(0, sigma_x^2) noise with that draw's sigma_x. None if no
        draws were kept (or, on an MPI rank other than 0, recorded). The family's hook for
        Result.coverage and calibration."""
        if not self._kept_A or "sigma_x" not in self.posterior:
            return None
        rows, cols = entry_ids(rows, cols, self.shape)
        n_kept = len(self._kept_A)
        pick = np.unique(np.linspace(0, n_kept - 1, min(max_draws, n_kept)).astype(int))
        sigma_x = np.asarray(self.posterior["sigma_x"], dtype=np.float64)[0]
        out = np.empty((len(pick), len(rows)))
        for n, s in enumerate(pick):
            out[n] = self.draw_mean(s, rows, cols) + rng.normal(0.0, sigma_x[s], len(rows))
        return out

    def draw_mean(self, s, rows, cols):
        """Kept draw s's (Z A) at the cells (rows[i], cols[i]) (integer arrays of one
        length, inside the matrix): the mean that predict averages and predictive_draws
        adds noise to."""
        A = self._kept_A[s]
        if not A.shape[0]:
            return np.zeros(len(rows))
        return np.einsum("ik,ki->i", self._Z_of_draw(s)[rows].astype(np.float64), A[:, cols])

    def predict(self, rows, cols, return_std=False):
        """Posterior mean (and sd) of (Z A)[rows[i], cols[i]] over the kept draws."""
        rows, cols = np.asarray(rows), np.asarray(cols)
        if rows.shape != cols.shape or rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu":
            raise ValueError("rows and cols must be integer arrays of one shape")
        N, D = self.shape
        if rows.size and (rows.min() < 0 or rows.max() >= N or cols.min() < 0 or cols.max() >= D):
            raise ValueError(f"an entry is outside the {N} x {D} matrix")
        if not self._kept_A:
            raise ValueError("this result kept no draws (keep_samples=False, or a run stopped "
                             "before its first): nothing to predict from")
        values = np.array([self.draw_mean(s, rows.ravel(), cols.ravel())
                           for s in range(len(self._kept_A))])
        mean = values.mean(axis=0)
        return (mean, values.std(axis=0)) if return_std else mean

    def features_png(self, path, image_shape=None, draw=None):
        """The features (rows of A) of a kept draw (default: the last; draw=None and no
        kept draws: the final state), most used first, as images of image_shape (default:
        square when D is a square), with each one's count m_k; returns the file written
        (path, with .png added unless it ends so)."""
        path = png_path(path, "features")
        if draw is not None:
            n = len(self._kept_A)
            if isinstance(draw, bool) or not isinstance(draw, (numbers.Integral, np.integer)) \
                    or not -n <= draw < n:
                raise ValueError(f"draw must be the index of a kept draw, in [{-n}, {n}), got "
                                 f"{draw!r}" + ("" if n else " (this run kept no draws)"))
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        if draw is None and not self._kept_A:
            Z, A = self.last_state["Z"], self.last_state["A"]
        else:
            index = -1 if draw is None else int(draw)
            Z, A = self.Z_samples[index], self._kept_A[index]
        D = self.shape[1]
        if image_shape is None:
            side = int(round(math.sqrt(D)))
            image_shape = (side, side) if side * side == D else (1, D)
        counts = np.asarray(Z, dtype=float).sum(axis=0)
        order = np.argsort(-counts, kind="stable")
        K = max(len(order), 1)
        fig, axes = plt.subplots(1, K, figsize=(1.6 * K, 1.9), squeeze=False)
        for ax in axes[0]:
            ax.axis("off")
        for ax, k in zip(axes[0], order):
            ax.imshow(A[k].reshape(image_shape), cmap="gray", interpolation="nearest")
            ax.set_title(f"m={int(counts[k])}", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return path

    def __repr__(self):
        K = self.trace["K"][-1] if len(self.trace.get("K", [])) else float("nan")
        sx = self.trace["sigma_x"][-1] if len(self.trace.get("sigma_x", [])) else float("nan")
        return (f"IBPResult({self.params['sampler']['sampler']}, {self.iterations} iterations, "
                f"K={K:g}, sigma_x={sx:.4g}, kept={self.n_kept})")

    def _family_arrays(self):
        arrays = {"ibp_" + k: v for k, v in pack_kept(self._kept_Z, self._kept_A,
                                                     self.shape[1]).items()}
        for key, value in self.last_state.items():
            arrays["ibp_last_" + key] = np.asarray(value)
        if self.test_density is not None:
            arrays["ibp_test_density"] = self.test_density
        return arrays

    def _family_meta(self):
        return {"shape": list(self.shape), "last_keys": sorted(self.last_state)}

    def _load_family(self, get, meta):
        self.shape = tuple(meta["shape"])
        names = ("kept_Z_bytes", "kept_Z_packed", "kept_K", "kept_A_flat", "kept_D")
        self._kept_Z, self._kept_A = unpack_kept({k: get("ibp_" + k) for k in names})
        self.last_state = {}
        for key in meta["last_keys"]:
            value = np.asarray(get("ibp_last_" + key))
            self.last_state[key] = float(value) if value.ndim == 0 else value
        density = get("ibp_test_density")
        self.test_density = None if density is None else np.asarray(density)
