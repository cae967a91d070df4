"""A slow, readable NumPy version of SIBM's maths (pymf/sibm.h), written from the poster
and the Jaakkola-Jordan bound, for the tests to check the C core against: the ELBO at the
optimal xi, and one batch VB sweep (stages z, u_1, v_1, ..., u_D, v_D, xi recomputed before
each)."""
import numpy as np


def jj_lambda(xi):
    xi = np.asarray(xi, dtype=float)
    small = xi < 1e-4
    safe = np.where(small, 1.0, xi)
    return np.where(small, 0.125 - xi ** 2 / 96.0, np.tanh(safe / 2) / (4 * safe))


def log_sigmoid(a):
    return -np.logaddexp(0.0, -a)


class Q:
    """Means and variances of q: mu_u, var_u (L x D), mu_v, var_v (M x D), mu_z, var_z."""

    def __init__(self, state):
        self.mu_u = state["u1"] / state["u2"]
        self.var_u = 1 / state["u2"]
        self.mu_v = state["v1"] / state["v2"]
        self.var_v = 1 / state["v2"]
        self.mu_z = state["z"][0] / state["z"][1]
        self.var_z = 1 / state["z"][1]

    def moments(self):
        """E[s] and Var[s] of every entry (L x M)."""
        mean = self.mu_u @ self.mu_v.T + self.mu_z
        var = (self.var_u @ self.var_v.T + self.var_u @ (self.mu_v ** 2).T
               + (self.mu_u ** 2) @ self.var_v.T + self.var_z)
        return mean, var


def kl(mu, var, mu0, var0):
    return 0.5 * np.sum(np.log(var0 / var) + (var + (mu - mu0) ** 2) / var0 - 1)


def elbo(X, q, prior):
    """The bound's ELBO at the optimal xi; prior = (mean_u, var_u, mean_v, var_v, mean_z, var_z)."""
    mean, var = q.moments()
    xi = np.sqrt(var + mean ** 2)
    lik = np.sum(log_sigmoid(xi) - xi / 2 + (X - 0.5) * mean)
    mu_u0, var_u0, mu_v0, var_v0, mu_z0, var_z0 = prior
    return lik - kl(q.mu_u, q.var_u, mu_u0, var_u0) - kl(q.mu_v, q.var_v, mu_v0, var_v0) \
        - kl(q.mu_z, q.var_z, mu_z0, var_z0)




def batch_sweep(X, q, prior):
    """One coordinate-ascent sweep, in place on q."""
    mu_u0, var_u0, mu_v0, var_v0, mu_z0, var_z0 = prior
    D = q.mu_u.shape[1]
    mean, var = q.moments()
    lam = jj_lambda(np.sqrt(var + mean ** 2))
    prec = 1 / var_z0 + np.sum(2 * lam)
    pm = mu_z0 / var_z0 + np.sum((X - 0.5) - 2 * lam * (mean - q.mu_z))
    q.mu_z, q.var_z = pm / prec, 1 / prec
    for d in range(D):
        for side in ("u", "v"):
            mean, var = q.moments()
            lam = jj_lambda(np.sqrt(var + mean ** 2))
            if side == "u":
                m_own, m_oth, v_oth = q.mu_u[:, d], q.mu_v[:, d], q.var_v[:, d]
                L_ = lam
                Xs, means = X, mean
            else:
                m_own, m_oth, v_oth = q.mu_v[:, d], q.mu_u[:, d], q.var_u[:, d]
                L_ = lam.T
                Xs, means = X.T, mean.T
            e2 = m_oth ** 2 + v_oth
            prec_c = 2 * L_ @ e2
            rest = means - np.outer(m_own, m_oth)
            pm_c = ((Xs - 0.5) * m_oth[None, :]).sum(1) - 2 * (L_ * rest * m_oth[None, :]).sum(1)
            mu0, var0 = (mu_u0, var_u0) if side == "u" else (mu_v0, var_v0)
            prec = 1 / var0 + prec_c
            new_mu, new_var = (mu0 / var0 + pm_c) / prec, 1 / prec
            if side == "u":
                q.mu_u[:, d], q.var_u[:, d] = new_mu, new_var
            else:
                q.mu_v[:, d], q.var_v[:, d] = new_mu, new_var
    return q
