"""The result of fitting a LogisticMF model: q, the trace, predictions."""
import functools

import numpy as np

from pymf.engine.result import Result
from pymf.sibm.kernel import moments, probabilities


class SIBMResult(Result):
    """What pymf.fit returns for a LogisticMF model (SIBM or BatchVB).

    U_mean, U_var (L x D), V_mean, V_var (M x D), z_mean, z_var: q, the mean-field Gaussian
    posterior approximation. trace: iteration (updates or sweeps), time (s), elbo (exact
    while L M D <= 5e7, else an unbiased estimate from 20,000 draws), batch_size, and with
    test=: test_loglik (mean log-likelihood of the held-out labels) and test_auc (NaN when
    the labels are all of one class: AUC is undefined there; pymf.fit warns at the start).
    natural: q's natural parameters and counters (init= of a further fit).
    """

    kind = "sibm_fit"

    @classmethod
    def from_record(cls, record, params, state):
        self = cls.__new__(cls)
        self._set_record(record, params)
        self._set_state(state)
        return self

    def _set_state(self, state):
        self.natural = {key: np.asarray(value) for key, value in state.items()}
        z1, z2 = self.natural["z"]
        self.z_mean, self.z_var = float(z1 / z2), float(1 / z2)

    # q's means and variances are computed from its natural parameters when first asked for:
    # on a 10^5 x 10^5 matrix they are 16 MB each, which the end of a fit need not hold
    # beside the chain's own q
    @functools.cached_property
    def U_var(self):
        return 1 / self.natural["u2"]

    @functools.cached_property
    def U_mean(self):
        return self.natural["u1"] * self.U_var

    @functools.cached_property
    def V_var(self):
        return 1 / self.natural["v2"]

    @functools.cached_property
    def V_mean(self):
        return self.natural["v1"] * self.V_var

    def _entries(self, rows, cols):
        rows = np.asarray(rows)
        cols = np.asarray(cols)
        if rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu" or rows.shape != cols.shape:
            raise ValueError("rows and cols must be integer arrays of one shape")
        L, M = self.U_mean.shape[0], self.V_mean.shape[0]
        if rows.size and (rows.min() < 0 or rows.max() >= L or cols.min() < 0 or cols.max() >= M):
            raise ValueError(f"an entry is outside the {L} x {M} matrix")
        return moments(self.U_mean, self.U_var, self.V_mean, self.V_var, self.z_mean,
                       self.z_var, rows.ravel(), cols.ravel())

    def predict_proba(self, rows, cols, return_std=False):
        """E_q[sigmoid(u_i . v_j + z)] for every (rows[k], cols[k]) by the probit
        approximation sigmoid(m / sqrt(1 + pi v / 8)), m and v the mean and variance of
        u.v + z under q; return_std=True adds its sd under q (Gauss-Hermite quadrature)."""
        mean, var = self._entries(rows, cols)
        return probabilities(mean, var, return_std)

    def predict(self, rows, cols, return_std=False):
        """The expected value of the entries: predict_proba."""
        return self.predict_proba(rows, cols, return_std)

    def coverage(self, test, *args, **kwargs):
        """Not defined for binary entries (predictive_moments says why), whatever test is:
        SIBM's own (rows, cols, labels) test tuple was refused as a matrix of another shape
        before that explanation."""
        return self.predictive_moments(None, None)

    def calibration(self, test, *args, **kwargs):
        """Not defined either (coverage)."""
        return self.predictive_moments(None, None)

    def predictive_moments(self, rows, cols):
        """No interval coverage: an entry is 0 or 1, and every central interval of a
        Bernoulli predictive either holds both values or one, so its coverage says nothing
        about calibration (that is a reliability diagram of predict_proba)."""
        raise ValueError("coverage is not defined for SIBM's binary entries: a 0/1 value's "
                         "central interval is {0, 1} or a single value; check predict_proba "
                         "with a reliability diagram instead")

    def __repr__(self):
        elbo = self.trace["elbo"][-1] if len(self.trace.get("elbo", [])) else float("nan")
        return (f"SIBMResult({self.params['method']['method']}, {self.iterations} "
                f"{'sweeps' if self.params['method']['method'] == 'batch_vb' else 'updates'}, "
                f"elbo={elbo:.6g})")

    def _family_arrays(self):
        return {"natural_" + key: value for key, value in self.natural.items()}

    def _load_family(self, get, meta):
        names = ("u1", "u2", "v1", "v2", "z", "row_updates", "col_updates", "t", "batch")
        self._set_state({key: get("natural_" + key) for key in names})
