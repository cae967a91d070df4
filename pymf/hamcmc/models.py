"""The HAMCMC paper's linear-Gaussian model (section 4.1), whose posterior is exact."""
import numpy as np

from pymf.data import real_array
from pymf.engine.checks import check_real


class LinearGaussian:
    """theta ~ N(0, prior_var I), x_n | theta ~ N(a_n . theta, noise_var); data = (A, x)
    with A the N x D design matrix (row n is a_n) and x the N observations."""

    def __init__(self, noise_var=1.0, prior_var=1.0):
        self.noise_var = check_real(noise_var, "noise_var", positive=True)
        self.prior_var = check_real(prior_var, "prior_var", positive=True)

    def params(self):
        return {"model": "linear_gaussian", "noise_var": self.noise_var,
                "prior_var": self.prior_var}

    def __repr__(self):
        return f"LinearGaussian(noise_var={self.noise_var}, prior_var={self.prior_var})"

    def check_data(self, data):
        """(A, x) as float64 arrays, validated."""
        try:
            A, x = data
        except (TypeError, ValueError):
            raise ValueError("the data of a LinearGaussian model are a pair (A, x): the N x D "
                             "design matrix and the N observations") from None
        A, x = real_array(A, "A"), real_array(x, "x")
        if A.ndim != 2 or A.shape[0] == 0 or A.shape[1] == 0:
            raise ValueError(f"A must be a non-empty N x D matrix, got shape {A.shape}")
        if x.ndim != 1 or x.shape[0] != A.shape[0]:
            raise ValueError(f"x must hold one observation per row of A ({A.shape[0]}), got "
                             f"shape {x.shape}")
        A = np.ascontiguousarray(A, dtype=np.float64)
        x = np.ascontiguousarray(x, dtype=np.float64)
        for name, value in (("A", A), ("x", x)):
            if not np.all(np.isfinite(value)):
                raise ValueError(f"{name} contains NaN or inf")
        return A, x

    def posterior(self, data):
        """The exact posterior (mean, covariance): precision A^T A / noise_var + I / prior_var."""
        A, x = self.check_data(data)
        precision = A.T @ A / self.noise_var + np.eye(A.shape[1]) / self.prior_var
        cov = np.linalg.inv(precision)
        cov = (cov + cov.T) / 2
        return cov @ (A.T @ x) / self.noise_var, cov
