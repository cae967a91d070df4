"""The pieces of an IBP run that threads and MPI share: input checks, the starting state,
the seeds and the C chain of some of the processes."""
import numpy as np

from pymf.data import Ratings, real_array
from pymf.engine.seeds import seed_sequence
from pymf.ibp import _ibp
from pymf.ibp.samplers import CollapsedIBP

# The most features a run may hold, at the start and during sampling. The chain holds dense
# K x K matrices (the collapsed inverse (Z'Z + sigma_x^2/sigma_a^2 I)^-1, its copy for a
# split-merge proposal, the hybrid master's Cholesky factor) and factorises them with loops
# written for K of tens, O(K^3) each: at 2^14 features one such matrix is 2 GiB and an
# iteration takes hours; at 10^5 it is 75 GiB. The starting Z is drawn from the IBP(alpha)
# prior, whose expected number of features for N rows is alpha * H_N (check_alpha); during
# sampling each row proposes Poisson(alpha / N) new features, so a large fixed alpha grows
# K without bound: the C core gets this cap in its config (make_chain) and stops with a
# DivergenceError when a step would go above it.
# The value is _ibp.MAX_FEATURES (also the default of a Chain made directly, as the tests
# do); make_chain passes this module's, so that a test can lower it here.
MAX_FEATURES = _ibp.MAX_FEATURES


def harmonic(N):
    """H_N = 1 + 1/2 + ... + 1/N."""
    return float(np.sum(1.0 / np.arange(1, N + 1)))


def too_many_features(alpha, N, count, what):
    """The ValueError of a starting alpha whose IBP prior has `count` features (`what`: how
    that count was found) for the N rows, more than MAX_FEATURES."""
    gib = 8.0 * float(count) ** 2 / 2.0 ** 30
    return ValueError(
        f"alpha={alpha!r} implies {what} {count:.4g} features for the N={N} rows of X (the "
        f"IBP prior's expected count is alpha * H_N, H_N = {harmonic(N):.4g}): more than the "
        f"{MAX_FEATURES} a run may start with (one of the sampler's K x K matrices would "
        f"need {gib:.3g} GiB). Give a smaller starting alpha, at most "
        f"{MAX_FEATURES / harmonic(N):.4g} for these N rows (alpha is sampled from its "
        f"Gamma(alpha_shape, alpha_rate) prior unless sample_hyper=False, so a start near 1 "
        f"is usual)")


def check_alpha(alpha, N):
    """Refuse a starting alpha whose IBP(alpha) prior for N rows expects more than
    MAX_FEATURES features (drawing the starting Z from it looped over that many columns:
    alpha=1e12 ran out of memory or never ended, alpha=1e4 was numpy's 'Unable to allocate
    15.3 GiB for an array with shape (45306, 45306)')."""
    expected = alpha * harmonic(N)
    if expected > MAX_FEATURES:
        raise too_many_features(alpha, N, expected, "about")
    return alpha


def dense_data(X):
    """X as a float64 array. The model observes every cell (test_mask holds some out), so a
    pymf.Ratings or a scipy.sparse matrix is refused by name: np.array made a 0-d object
    array of it, and the error came from deep inside numpy ("setting an array element with a
    sequence", "float() argument must be ... not 'Ratings'"). A masked array is refused by
    name, complex, string and object arrays by real_array, rather than cast; booleans
    (binary images) are read as 0 and 1."""
    if isinstance(X, Ratings) or (hasattr(X, "tocoo") and hasattr(X, "nnz")):
        raise ValueError(f"X must be a dense N x D array, got a {type(X).__name__}: an "
                         "IBPLinearGaussian model observes every cell (hold cells out with "
                         "test_mask)")
    if isinstance(X, np.ma.MaskedArray):
        raise ValueError("X is a masked array: pymf would ignore the mask; pass the mask as "
                         "test_mask= to hold those cells out")
    try:
        X = np.asarray(X)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"X must be a 2-D array of numbers: {exc}") from None
    return X.astype(np.float64) if X.dtype == bool else real_array(X, "X")


def check_data(X, test_mask, processes=1):
    """(X as float64, mask as bool or None), refusing what the model cannot take."""
    X = np.array(dense_data(X), dtype=np.float64, order="C", copy=True)
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"X must be a non-empty 2-D array (N x D), got shape {X.shape}")
    if test_mask is not None:
        test_mask = np.asarray(test_mask)
        if test_mask.dtype != bool:
            raise ValueError(f"test_mask must be a boolean array, got dtype {test_mask.dtype}")
        if test_mask.shape != X.shape:
            raise ValueError(f"test_mask must have X's shape {X.shape}, got {test_mask.shape}")
    train = np.ones(X.shape, dtype=bool) if test_mask is None else ~test_mask
    bad = ~np.isfinite(X) & train
    if bad.any():
        n, d = np.argwhere(bad)[0]
        raise ValueError(f"X[{n}, {d}] = {X[n, d]} is not finite and not held out "
                         "(test_mask marks the cells to hold out)")
    if not train.any(axis=1).all():
        raise ValueError("every row of X needs at least one cell outside test_mask")
    if processes > X.shape[0]:
        raise ValueError(f"processes={processes} is more than the N={X.shape[0]} rows of X")
    X[~train] = 0.0  # the sampler never sees a held-out value
    return X, test_mask


def initial_state(model, X, train, rng, collapsed):
    """(Z, A, pi, hyper): Z ~ IBP(alpha), A = E[A | Z, training cells], pi = m / (N + 1)."""
    N, D = X.shape
    check_alpha(model.alpha, N)
    columns = []
    for n in range(N):
        for k, column in enumerate(columns):
            m = column[:n].sum()
            column[n] = rng.random() < m / (n + 1)
        for _ in range(rng.poisson(model.alpha / (n + 1))):
            column = np.zeros(N)
            column[n] = 1.0
            columns.append(column)
            if len(columns) > MAX_FEATURES:  # a draw far above check_alpha's expectation
                raise too_many_features(model.alpha, N, len(columns), "a draw of over")
    Z = np.array(columns).T if columns else np.zeros((N, 0))
    Z = Z[:, Z.sum(axis=0) > 0]
    filled = X.copy()
    col_mean = np.array([X[train[:, d], d].mean() if train[:, d].any() else 0.0
                         for d in range(D)])
    filled[~train] = np.broadcast_to(col_mean, X.shape)[~train]
    K = Z.shape[1]
    r = model.sigma_x ** 2 / model.sigma_a ** 2
    A = np.linalg.solve(Z.T @ Z + r * np.eye(K), Z.T @ filled) if K else np.zeros((0, D))
    pi = np.full(K, np.nan) if collapsed else Z.sum(axis=0) / (N + 1)
    return Z, A, pi, np.array([model.sigma_x, model.sigma_a, model.alpha])


def chain_settings(model, sampler):
    collapsed = isinstance(sampler, CollapsedIBP)
    return {"collapsed": collapsed,
            "processes": 1 if collapsed else sampler.processes,
            "sub_iterations": 1 if collapsed else sampler.sub_iterations,
            "warm_start": 0 if collapsed else sampler.warm_start,
            "threads": 1 if collapsed else sampler.n_threads,
            "split_merge": sampler.split_merge}


def seeds(seed):
    chain_child, init_child = seed_sequence(seed).spawn(2)
    return int(chain_child.generate_state(1, np.uint64)[0]), np.random.default_rng(init_child)


def make_chain(model, X, train, settings, chain_seed, first_process=0, n_local=None,
               rows=None):
    """The C chain of processes [first_process, first_process + n_local) (all by default);
    rows: (row_offset, n_rows) of those processes."""
    row0, n_rows = (0, X.shape[0]) if rows is None else rows
    return _ibp.Chain(X[row0:row0 + n_rows], train[row0:row0 + n_rows].astype(np.uint8),
                      X.shape[0], row0, model.prior(), model.sample_flags(),
                      settings["collapsed"], settings["processes"], settings["sub_iterations"],
                      settings["warm_start"], chain_seed, settings["threads"],
                      first_process, n_local, settings["split_merge"],
                      max_features=MAX_FEATURES)
