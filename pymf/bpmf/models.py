"""The BPMF model (Salakhutdinov & Mnih 2008) with the diagonal precisions of the DSGLD
paper (Ahn et al., KDD 2015)."""
import warnings

import numpy as np

from pymf.data import Ratings, as_observed
from pymf.engine.checks import check_flag, check_rank, check_real
from pymf.errors import user_stacklevel

# below this sd of the training ratings the priors dominate (check_data warns); above
# LARGE_SPREAD the factors must reach far past the priors' scale (Gibbs's conditional
# precisions stopped being positive definite in double precision at sd 1e10)
SMALL_SPREAD = 0.1
LARGE_SPREAD = 1e6


class BPMF:
    """r_ij ~ N(mean + u_i . v_j + a_i + b_j, 1/tau); u_i ~ N(0, diag(lam_u)^-1),
    v_j ~ N(0, diag(lam_v)^-1), a_i ~ N(0, 1/lam_a), b_j ~ N(0, 1/lam_b); every precision
    ~ Gamma(alpha0, rate beta0).

    tau="sample" (the default): the noise precision is unknown, with the same
    Gamma(alpha0, rate beta0) prior as the other precisions, and is drawn from its
    conditional Gamma(alpha0 + N/2, rate beta0 + S/2) (N ratings, S the squared residual
    sum) every sweep by BPMFGibbs and with the other precisions (every hyper_every rounds)
    by DSGLD; it starts at init_precision and is recorded with every draw (sample_stats
    "tau"). A float fixes tau (pymf <= 0.2 fixed it at 2.0). The right tau depends on the
    data: on MovieLens-100K a fixed 2.0 cost BPMF Gibbs 0.009 of test RMSE against 1.5,
    which the sampled tau finds by itself (bench/defaults.py).

    Other parameters (defaults from the paper's experiments): rank D; alpha0=1.0,
    beta0=1.0; bias=True (a_i, b_j in the model); mean_rating=None (the training mean);
    init_precision=2.0 (every precision at the start, tau's too when sampled);
    init_scale=0.1 (standard deviation of the initial factors).
    """

    def __init__(self, rank, tau="sample", alpha0=1.0, beta0=1.0, bias=True, mean_rating=None,
                 init_precision=2.0, init_scale=0.1):
        check_rank(rank)
        if isinstance(tau, str):
            if tau != "sample":
                raise ValueError(f"tau must be 'sample' or a positive number, got {tau!r}")
        else:
            tau = float(check_real(tau, "tau", positive=True))
        for name, value in (("alpha0", alpha0), ("beta0", beta0),
                            ("init_precision", init_precision), ("init_scale", init_scale)):
            check_real(value, name, positive=True)
        if mean_rating is not None:
            check_real(mean_rating, "mean_rating")
        self.rank, self.tau = int(rank), tau
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

    @property
    def sample_tau(self):
        return self.tau == "sample"

    @property
    def initial_tau(self):
        """tau at the start: the fixed value, or init_precision when tau is sampled."""
        return self.init_precision if self.sample_tau else self.tau

    def c_model(self, mean_rating):
        """The tuple the C bindings take."""
        return (self.rank, self.initial_tau, float(mean_rating), self.bias, self.alpha0,
                self.beta0, self.sample_tau)

    def check_data(self, data, what="training data"):
        """Validated Ratings (NaN/inf, indices and duplicates are checked by pymf.Ratings).
        A dense array is a matrix of ratings; one that looks like a table of (user, item,
        rating) triples gets a warning (it would be fitted as an N x 3 matrix)."""
        ratings = as_observed(data)
        if not isinstance(ratings, Ratings):
            if _looks_like_triples(ratings):
                warnings.warn(
                    f"the {what} is a dense {ratings.shape[0]} x {ratings.shape[1]} array whose "
                    "first two columns look like user and item ids: it is taken as a matrix of "
                    "ratings (every cell a rating). For a table of (user, item, rating) rows "
                    "pass pymf.Ratings(rows, cols, values)", UserWarning,
                    stacklevel=user_stacklevel())
            ratings = Ratings.from_dense(ratings)
        if ratings.nnz == 0:
            raise ValueError(f"BPMF needs at least one rating; the {what} {'is' if what == 'test set' else 'are'} empty")
        if max(ratings.shape) > 2**31 - 1:
            raise ValueError(f"BPMF takes at most 2**31 - 1 users and items, got shape {ratings.shape}")
        if what == "training data":
            spread = float(np.std(ratings.values))
            if 0.0 < spread < SMALL_SPREAD:
                # the precisions' Gamma(alpha0, beta0) priors (and Gibbs's Wishart W0 = I)
                # hold the factors near a scale of one: on MovieLens's first 2,000 ratings
                # times 0.03 (sd 0.034) Gibbs's 90 % intervals covered 100 % of the test
                # ratings, times 0.001 its RMSE was 4.5 times that of predicting the mean
                warnings.warn(
                    f"the ratings' sd is {spread:.3g}: BPMF's priors expect ratings of a scale "
                    "of about one, and on a scale this small the posterior intervals come out "
                    "too wide and the fit poor. Divide the ratings by their sd (and multiply "
                    "the predictions back by it)", UserWarning,
                    stacklevel=user_stacklevel())
            elif spread > LARGE_SPREAD:
                warnings.warn(
                    f"the ratings' sd is {spread:.3g}: BPMF's priors expect ratings of a scale "
                    "of about one, and the factors must reach far past it (Gibbs fails in "
                    "double precision near sd 1e10). Divide the ratings by their sd (and "
                    "multiply the predictions back by it)", UserWarning,
                    stacklevel=user_stacklevel())
        return ratings


def _looks_like_triples(matrix):
    """A dense array of 3 columns (or 3 rows: a tuple of three arrays) and at least 30 of
    the other, whose first two hold non-negative integers (more than one user): a table of
    (user, item, rating) triples, not a matrix of ratings."""
    if 3 not in matrix.shape:
        return False
    table = matrix if matrix.shape[1] == 3 else matrix.T
    ids = table[:, :2]
    return (table.shape[0] >= 30 and np.all(ids >= 0) and np.all(ids == np.round(ids))
            and len(np.unique(ids[:, 0])) > 1)
