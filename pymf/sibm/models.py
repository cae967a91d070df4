"""The logistic matrix-factorisation model of SIBM."""
from pymf.engine.checks import check_rank, check_real


class LogisticMF:
    """x_ij ~ Bernoulli(sigmoid(u_i . v_j + z)) over a fully observed binary matrix, with
    Gaussian priors u_id ~ N(prior_mean_u, prior_var_u), v_jd ~ N(prior_mean_v,
    prior_var_v), z ~ N(prior_mean_z, prior_var_z).

    Defaults: standard normal factors (the scale on which the logistic link works), and a
    wide prior on the global bias z (variance 10: a sparse matrix needs z near
    logit(density), about -4.6 at 1 % ones). Fitted by pymf.fit with pymf.SIBM (stochastic)
    or pymf.BatchVB.
    """

    def __init__(self, rank, prior_mean_u=0.0, prior_var_u=1.0, prior_mean_v=0.0,
                 prior_var_v=1.0, prior_mean_z=0.0, prior_var_z=10.0):
        self.rank = check_rank(rank)
        self.prior_mean_u = check_real(prior_mean_u, "prior_mean_u")
        self.prior_var_u = check_real(prior_var_u, "prior_var_u", positive=True)
        self.prior_mean_v = check_real(prior_mean_v, "prior_mean_v")
        self.prior_var_v = check_real(prior_var_v, "prior_var_v", positive=True)
        self.prior_mean_z = check_real(prior_mean_z, "prior_mean_z")
        self.prior_var_z = check_real(prior_var_z, "prior_var_z", positive=True)

    def prior(self):
        """(mean_u, var_u, mean_v, var_v, mean_z, var_z), the C core's order."""
        return (self.prior_mean_u, self.prior_var_u, self.prior_mean_v, self.prior_var_v,
                self.prior_mean_z, self.prior_var_z)

    def params(self):
        return {"model": "logistic_mf", "rank": self.rank, "prior_mean_u": self.prior_mean_u,
                "prior_var_u": self.prior_var_u, "prior_mean_v": self.prior_mean_v,
                "prior_var_v": self.prior_var_v, "prior_mean_z": self.prior_mean_z,
                "prior_var_z": self.prior_var_z}

    def __repr__(self):
        return f"LogisticMF(rank={self.rank})"
