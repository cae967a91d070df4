"""The linear-Gaussian latent feature model with an Indian Buffet Process prior."""
from pymf.engine.checks import check_real


class IBPLinearGaussian:
    """X = Z A + E: Z ~ IBP(alpha) (binary, unbounded number of columns), rows of A
    A_k ~ N(0, sigma_a^2 I_D), noise E_nd ~ N(0, sigma_x^2).

    alpha, sigma_x, sigma_a are the starting values; all three are sampled (the paper gives
    no hyper-priors; these are the authors' code's):
        sigma_x^2 ~ InvGamma(sx_shape, sx_scale), sigma_a^2 ~ InvGamma(sa_shape, sa_scale),
        alpha ~ Gamma(alpha_shape, rate=alpha_rate), so alpha | Z ~ Gamma(alpha_shape + K+,
        rate alpha_rate + H_N).
    Defaults: IG(1, 1), IG(1, 1), Gamma(1, 1). sample_hyper=False keeps all three fixed at
    their starting values (the exact-enumeration tests use it).

    The run's starting Z is drawn from the IBP(alpha) prior, which expects alpha * H_N
    features for N rows (H_N = 1 + 1/2 + ... + 1/N); a starting alpha that expects more
    than pymf.ibp.chain.MAX_FEATURES (16384: the chain holds dense K x K matrices) is a
    ValueError naming alpha, the features it implies and the largest alpha the rows allow.
    The cap holds during sampling too: every row proposes Poisson(alpha / N) new features,
    so a large fixed alpha (sample_hyper=False) can grow K without bound. A step whose
    outcome would hold more than MAX_FEATURES features (a row's new features, a split, the
    hybrid master's merge) stops the run with a pymf.DivergenceError naming the iteration,
    the count, the cap and alpha, carrying the partial result (.result) and the state of
    the last completed iteration (.state). Proposals are never truncated (that would change
    the target distribution): a chain that stays under the cap is the same bits.
    """

    def __init__(self, alpha=1.0, sigma_x=1.0, sigma_a=1.0, alpha_shape=1.0, alpha_rate=1.0,
                 sx_shape=1.0, sx_scale=1.0, sa_shape=1.0, sa_scale=1.0, sample_hyper=True):
        self.alpha = check_real(alpha, "alpha", positive=True)
        self.sigma_x = check_real(sigma_x, "sigma_x", positive=True)
        self.sigma_a = check_real(sigma_a, "sigma_a", positive=True)
        # the chain works with the variances and their ratio: 1e200 squared was an
        # OverflowError from Python's float power, 1e-200 squared a zero variance
        ratio = self.sigma_x / self.sigma_a
        for name, variance in (("sigma_x", self.sigma_x * self.sigma_x),
                               ("sigma_a", self.sigma_a * self.sigma_a),
                               ("sigma_x / sigma_a", ratio * ratio)):
            if not 0.0 < variance < float("inf"):
                raise ValueError(f"{name} squared must be a positive finite number, got "
                                 f"{variance!r} (sigma_x={self.sigma_x!r}, "
                                 f"sigma_a={self.sigma_a!r})")
        self.alpha_shape = check_real(alpha_shape, "alpha_shape", positive=True)
        self.alpha_rate = check_real(alpha_rate, "alpha_rate", positive=True)
        self.sx_shape = check_real(sx_shape, "sx_shape", positive=True)
        self.sx_scale = check_real(sx_scale, "sx_scale", positive=True)
        self.sa_shape = check_real(sa_shape, "sa_shape", positive=True)
        self.sa_scale = check_real(sa_scale, "sa_scale", positive=True)
        if not isinstance(sample_hyper, bool):
            raise ValueError(f"sample_hyper must be True or False, got {sample_hyper!r}")
        self.sample_hyper = sample_hyper

    def prior(self):
        """The C core's order: (alpha_shape, alpha_rate, sx_shape, sx_scale, sa_shape,
        sa_scale)."""
        return (self.alpha_shape, self.alpha_rate, self.sx_shape, self.sx_scale, self.sa_shape,
                self.sa_scale)

    def sample_flags(self):
        flag = int(self.sample_hyper)
        return (flag, flag, flag)

    def params(self):
        return {"model": "ibp_linear_gaussian", "alpha": self.alpha, "sigma_x": self.sigma_x,
                "sigma_a": self.sigma_a, "alpha_shape": self.alpha_shape,
                "alpha_rate": self.alpha_rate, "sx_shape": self.sx_shape,
                "sx_scale": self.sx_scale, "sa_shape": self.sa_shape, "sa_scale": self.sa_scale,
                "sample_hyper": self.sample_hyper}

    def __repr__(self):
        return (f"IBPLinearGaussian(alpha={self.alpha}, sigma_x={self.sigma_x}, "
                f"sigma_a={self.sigma_a})")
