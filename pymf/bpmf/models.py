"""The BPMF model (Salakhutdinov & Mnih 2008) with the diagonal precisions of the DSGLD
paper (Ahn et al., KDD 2015)."""
from pymf.data import Ratings, as_observed
from pymf.engine.checks import check_flag, check_rank, check_real


class BPMF:
    """r_ij ~ N(mean + u_i . v_j + a_i + b_j, 1/tau); u_i ~ N(0, diag(lam_u)^-1),
    v_j ~ N(0, diag(lam_v)^-1), a_i ~ N(0, 1/lam_a), b_j ~ N(0, 1/lam_b); every precision
    ~ Gamma(alpha0, rate beta0).

    Parameters (defaults from the paper's experiments): rank D; tau=2.0; alpha0=1.0,
    beta0=1.0; bias=True (a_i, b_j in the model); mean_rating=None (the training mean);
    init_precision=2.0 (every precision at the start); init_scale=0.1 (standard deviation of
    the initial factors).
    """

    def __init__(self, rank, tau=2.0, alpha0=1.0, beta0=1.0, bias=True, mean_rating=None,
                 init_precision=2.0, init_scale=0.1):
        check_rank(rank)
        for name, value in (("tau", tau), ("alpha0", alpha0), ("beta0", beta0),
                            ("init_precision", init_precision), ("init_scale", init_scale)):
            check_real(value, name, positive=True)
        if mean_rating is not None:
            check_real(mean_rating, "mean_rating")
        self.rank, self.tau = int(rank), float(tau)
        self.alpha0, self.beta0 = float(alpha0), float(beta0)
        self.bias = check_flag(bias, "bias")
        self.mean_rating = None if mean_rating is None else float(mean_rating)
        self.init_precision, self.init_scale = float(init_precision), float(init_scale)

    def params(self):
        return {"model": "bpmf", "rank": self.rank, "tau": self.tau, "alpha0": self.alpha0,
                "beta0": self.beta0, "bias": self.bias, "mean_rating": self.mean_rating,
                "init_precision": self.init_precision, "init_scale": self.init_scale}

    def __repr__(self):
        return f"BPMF(rank={self.rank}, tau={self.tau}, bias={self.bias})"

    def c_model(self, mean_rating):
        """The tuple the C bindings take."""
        return (self.rank, self.tau, float(mean_rating), self.bias, self.alpha0, self.beta0)

    def check_data(self, data, what="training data"):
        """Validated Ratings (NaN/inf, indices and duplicates are checked by pymf.Ratings)."""
        ratings = as_observed(data)
        if not isinstance(ratings, Ratings):
            ratings = Ratings.from_dense(ratings)
        if ratings.nnz == 0:
            raise ValueError(f"BPMF needs at least one rating; the {what} {'is' if what == 'test set' else 'are'} empty")
        if max(ratings.shape) > 2**31 - 1:
            raise ValueError(f"BPMF takes at most 2**31 - 1 users and items, got shape {ratings.shape}")
        return ratings
