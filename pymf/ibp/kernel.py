"""The IBP chain (pymf.ibp._ibp.Chain) seen by the engine's run loop: a unit is one
iteration (collapsed Gibbs: one sweep and the draws of A and the hyper-parameters; hybrid:
L sub-iterations and one master step).

The number of features K changes from draw to draw, so the engine keeps only the scalars
(K, sigma_x, sigma_a, alpha) of every kept draw; the kernel keeps Z (bit-packed) and A of
the same draws itself and puts them in checkpoints, so a resumed run keeps the same ones.

With split-merge moves on, the trace also counts them since the start of the run:
split_merge_accept and split_merge_proposed (split_accept, merge_accept by kind); the
counts travel in checkpoints.

Held-out measures (the sampler itself never reads a held-out value):
  heldout_loglik     the paper's: log p(X_test | Z, A, sigma_x) + log P([Z] | alpha), the
                     joint of the held-out cells and the current Z (its left-ordered-form
                     class under the IBP), at the current state;
  predictive_loglik  the proper one: sum over held-out cells of log of the posterior
                     predictive density (1/S) sum_s N(x; z_n^s A_d^s, sigma_x^s^2) over the
                     S kept draws so far (NaN before the first).
"""
import math

import numpy as np

from pymf.engine.kernel import Kernel
from pymf.ibp.chain import harmonic

SCALARS = ("K", "sigma_x", "sigma_a", "alpha")


def lof_log_prior(Z, alpha):
    """log P([Z] | alpha) of the left-ordered-form class of Z under the IBP (Griffiths &
    Ghahramani 2011, eq. 14); all-zero columns are ignored."""
    Z = np.asarray(Z, dtype=bool)
    N = Z.shape[0]
    m = Z.sum(axis=0)
    Z = Z[:, m > 0]
    m = m[m > 0]
    K = Z.shape[1]
    value = K * math.log(alpha) - alpha * harmonic(N)
    if K:
        from scipy.special import gammaln  # here: it costs `import pymf` 0.3 s and 9 MB

        _, multiplicity = np.unique(np.packbits(Z, axis=0), axis=1, return_counts=True)
        value -= float(np.sum(gammaln(multiplicity + 1.0)))
        value += float(np.sum(gammaln(N - m + 1.0) + gammaln(m) - gammaln(N + 1.0)))
    return value


def cell_means(Z, A, rows, cols):
    """(Z A)[rows[i], cols[i]] for every i."""
    if Z.shape[1] == 0:
        return np.zeros(len(rows))
    return np.einsum("ik,ki->i", Z[rows], A[:, cols])


def gauss_logpdf(x, mean, sigma):
    return -0.5 * math.log(2 * math.pi) - math.log(sigma) - 0.5 * ((x - mean) / sigma) ** 2


class IBPKernel(Kernel):
    unit = "iteration"
    keep_draws = True  # False: keep_samples=False (draw() keeps no Z and A)

    def __init__(self, chain, X, test_mask, split_merge=0):
        self.chain = chain
        self.split_merge = split_merge
        self.X = X
        self.N, self.D = X.shape
        if test_mask is not None and test_mask.any():
            self.test_rows, self.test_cols = np.nonzero(test_mask)
            self.test_values = X[self.test_rows, self.test_cols]
        else:
            self.test_rows = self.test_cols = self.test_values = None
        self.train_mask = None if test_mask is None else ~test_mask
        self.kept_Z, self.kept_A = [], []
        self._state = None

    # ---- the chain's state (one process here; pymf.ibp.mpi gathers the ranks' rows) ----
    @property
    def counter(self):
        return int(self.chain.iteration)

    def state(self):
        """{Z (N x K), A, pi, hyper, Y_missing, t} of the whole chain, cached per unit."""
        if self._state is None or int(self._state["t"]) != self.counter:
            self._state = self.chain.state()
        return self._state

    def draw_shapes(self):
        return {name: (1,) for name in SCALARS}

    def run(self, steps):
        self.chain.run(len(steps))

    def _scalars(self, st):
        sigma_x, sigma_a, alpha = st["hyper"]
        return {"K": np.array([st["Z"].shape[1]], dtype=np.float64),
                "sigma_x": np.array([sigma_x]), "sigma_a": np.array([sigma_a]),
                "alpha": np.array([alpha])}

    def draw(self):
        """A kept draw: the scalars for the engine; Z (packed) and A kept here, unless the
        run keeps no draws (keep_samples=False: the running moments only, as every family)."""
        st = self.state()
        if self.keep_draws:
            self.kept_Z.append(np.packbits(st["Z"].astype(bool), axis=None))
            self.kept_A.append(st["A"].copy())
        return self._scalars(st)

    def last_finite_state(self):
        st = self.state()
        return {"Z": st["Z"], "A": st["A"], "pi": st["pi"], "sigma_x": float(st["hyper"][0]),
                "sigma_a": float(st["hyper"][1]), "alpha": float(st["hyper"][2])}

    def test_predictions(self):
        """The density of every held-out cell under the current state (the engine's
        running mean of these is the posterior predictive density)."""
        if self.test_values is None:
            return None
        st = self.state()
        mean = cell_means(st["Z"], st["A"], self.test_rows, self.test_cols)
        sigma_x = float(st["hyper"][0])
        return np.exp(gauss_logpdf(self.test_values, mean, sigma_x))[None, :]

    def trace_point(self, run):
        st = self.state()
        sigma_x, sigma_a, alpha = (float(v) for v in st["hyper"])
        Z, A = st["Z"], st["A"]
        point = {"K": float(Z.shape[1]), "sigma_x": sigma_x, "sigma_a": sigma_a,
                 "alpha": alpha}
        if self.split_merge:
            point.update(split_merge_trace(self.chain.split_merge_counts))
        fit = self.X - Z @ A if Z.shape[1] else self.X.copy()
        if self.train_mask is not None:
            fit = fit[self.train_mask]
        point["train_loglik"] = float(np.sum(gauss_logpdf(fit, 0.0, sigma_x)))
        if self.test_values is not None:
            mean = cell_means(Z, A, self.test_rows, self.test_cols)
            heldout = float(np.sum(gauss_logpdf(self.test_values, mean, sigma_x)))
            point["heldout_loglik"] = heldout + lof_log_prior(Z, alpha)
            density = run.test_mean()
            with np.errstate(divide="ignore"):  # a density of 0 is a log density of -inf
                point["predictive_loglik"] = (math.nan if density is None
                                              else float(np.sum(np.log(density))))
        return point

    # ---- checkpoints ----
    def snapshot(self):
        st = self.state()
        arrays = {"Z": st["Z"], "A": st["A"], "pi": st["pi"], "hyper": st["hyper"],
                  "Y_missing": self.y_missing(), "t": np.int64(self.counter)}
        arrays.update(pack_kept(self.kept_Z, self.kept_A, self.D))
        if self.split_merge:
            arrays["split_merge_counts"] = self.chain.split_merge_counts
        return arrays

    def y_missing(self):
        return self.chain.state()["Y_missing"]

    def restore(self, arrays):
        self.set_state(arrays["Z"], arrays["A"], arrays["pi"], arrays["hyper"],
                       arrays["Y_missing"], int(arrays["t"]))
        self.kept_Z, self.kept_A = unpack_kept(arrays)
        if self.split_merge:
            self.chain.split_merge_counts = arrays["split_merge_counts"]

    def set_state(self, Z, A, pi, hyper, Y_missing, t):
        self.chain.set_state(Z, A, pi, hyper, Y_missing, t)
        self._state = None


def split_merge_trace(counts):
    """The trace's split-merge counts (since the start of the run) from the C core's (splits
    proposed, accepted, merges proposed, accepted)."""
    split_proposed, split_accept, merge_proposed, merge_accept = (float(c) for c in counts)
    return {"split_merge_accept": split_accept + merge_accept,
            "split_merge_proposed": split_proposed + merge_proposed,
            "split_accept": split_accept, "merge_accept": merge_accept}


def pack_kept(kept_Z, kept_A, D):
    """The kept Z (packed bits) and A of every draw as flat arrays with their sizes."""
    return {"kept_Z_bytes": np.array([len(z) for z in kept_Z], dtype=np.int64),
            "kept_Z_packed": (np.concatenate(kept_Z) if kept_Z else np.zeros(0, np.uint8)),
            "kept_K": np.array([a.shape[0] for a in kept_A], dtype=np.int64),
            "kept_A_flat": (np.concatenate([a.ravel() for a in kept_A]) if kept_A
                            else np.zeros(0)),
            "kept_D": np.int64(D)}


def unpack_kept(arrays):
    sizes, packed = np.asarray(arrays["kept_Z_bytes"]), np.asarray(arrays["kept_Z_packed"])
    Ks, flat, D = np.asarray(arrays["kept_K"]), np.asarray(arrays["kept_A_flat"]), int(arrays["kept_D"])
    kept_Z, kept_A = [], []
    z0 = a0 = 0
    for nbytes, K in zip(sizes, Ks):
        kept_Z.append(packed[z0:z0 + nbytes].copy())
        kept_A.append(flat[a0:a0 + K * D].reshape(K, D).copy())
        z0 += nbytes
        a0 += K * D
    return kept_Z, kept_A
