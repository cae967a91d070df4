"""The SIBM chain of q (pymf.sibm._sibm.Chain) seen by the engine's run loop: a unit is one
stochastic update (SIBM) or one sweep (batch VB). q is kept in natural parameters; the loop
keeps no draws (variational inference has none), only the trace and checkpoints."""
import functools

import numpy as np

from pymf.engine.kernel import Kernel

EXACT_ELBO_LIMIT = 5e7  # L M D up to which the traced ELBO is exact (O(L M D)); above, an
ELBO_DRAWS = 20000      # unbiased estimate from this many draws of the sampling strategy


def predictive(chain_state, rows, cols):
    """E_q[s] and Var_q[s] of entries (rows, cols), s = u.v + z, from q's natural
    parameters."""
    mu_u, var_u = chain_state["u1"] / chain_state["u2"], 1 / chain_state["u2"]
    mu_v, var_v = chain_state["v1"] / chain_state["v2"], 1 / chain_state["v2"]
    z1, z2 = chain_state["z"]
    return moments(mu_u, var_u, mu_v, var_v, z1 / z2, 1 / z2, rows, cols)


def moments(mu_u, var_u, mu_v, var_v, mu_z, var_z, rows, cols):
    mu, vu = mu_u[rows], var_u[rows]
    mv, vv = mu_v[cols], var_v[cols]
    mean = np.einsum("ij,ij->i", mu, mv) + mu_z
    var = np.einsum("ij,ij->i", vu, vv + mv * mv) + np.einsum("ij,ij->i", mu * mu, vv) + var_z
    return mean, var


@functools.cache
def _gauss_hermite():
    # computed when first needed, not on import: hermegauss solves an eigenproblem through
    # LAPACK, whose code pages a fit without return_std never needs resident
    nodes, weights = np.polynomial.hermite_e.hermegauss(32)
    return nodes, weights / weights.sum()


def probabilities(mean, var, return_std=False):
    """E_q[sigmoid(s)] by the probit approximation sigmoid(m / sqrt(1 + pi v / 8)) (MacKay
    1992; error below 0.02 everywhere); its sd under q by 32-point Gauss-Hermite
    quadrature."""
    from scipy.special import expit
    p = expit(mean / np.sqrt(1 + np.pi * var / 8))
    if not return_std:
        return p
    nodes, weights = _gauss_hermite()
    s = mean[:, None] + np.sqrt(var)[:, None] * nodes[None, :]
    sig = expit(s)
    first = sig @ weights
    second = (sig * sig) @ weights
    return p, np.sqrt(np.maximum(second - first * first, 0.0))


def test_scores(p, labels):
    """(mean log-likelihood, AUC) of probabilities p for 0/1 labels (AUC: the Mann-Whitney
    statistic, ties counted half; NaN with one class only)."""
    from scipy.stats import rankdata
    eps = 1e-12
    loglik = float(np.mean(labels * np.log(np.maximum(p, eps))
                           + (1 - labels) * np.log(np.maximum(1 - p, eps))))
    n1 = int(labels.sum())
    n0 = len(labels) - n1
    if n1 == 0 or n0 == 0:
        return loglik, float("nan")
    ranks = rankdata(p)
    auc = (ranks[labels == 1].sum() - n1 * (n1 + 1) / 2) / (n1 * n0)
    return loglik, float(auc)


class SIBMKernel(Kernel):
    def __init__(self, chain, batch, test, shape, rank):
        self.chain, self.batch, self.test = chain, batch, test
        self.unit = "sweep" if batch else "update"
        L, M = shape
        self.exact_elbo = L * M * rank <= EXACT_ELBO_LIMIT
        self.batch_size = L * M if batch else int(chain.counters()[1])

    @property
    def counter(self):
        return int(self.chain.counters()[0])

    def draw_shapes(self):
        return {}

    def run(self, steps):
        if self.batch:
            self.chain.batch_sweep(len(steps))
        else:
            sizes = self.chain.run(len(steps))
            self.batch_size = int(sizes[-1])

    def draw(self):
        return {}

    def trace_point(self, run):
        # the updates' scratch (14 MB at S = 10^5) is not held while the ELBO estimate's
        # draws, the test predictions and then the result are allocated: they would add to
        # the updates' peak; the next update allocates it again (a few ms a trace point)
        self.chain.release_scratch()
        if self.exact_elbo:
            elbo = self.chain.elbo()
        else:
            elbo = self.chain.elbo_estimate(self.counter + 1, ELBO_DRAWS)
        point = {"elbo": elbo, "batch_size": float(self.batch_size)}
        if self.test is not None:
            rows, cols, labels = self.test
            mean, var = predictive(self.chain.state(copy=False), rows, cols)
            point["test_loglik"], point["test_auc"] = test_scores(probabilities(mean, var),
                                                                  labels)
        return point

    def snapshot(self):
        # written to the checkpoint at once: the chain's own arrays need no copy
        state = self.chain.state(copy=False)
        return {key: np.asarray(value) for key, value in state.items()}

    def restore(self, arrays):
        self.chain.set_state(arrays["u1"], arrays["u2"], arrays["v1"], arrays["v2"],
                             arrays["z"], arrays["row_updates"], arrays["col_updates"],
                             int(arrays["t"]), int(arrays["batch"]))
        self.batch_size = int(arrays["batch"]) if not self.batch else self.batch_size

    def last_finite_state(self):
        return self.chain.state()
