"""pymf.fit for a LogisticMF model: SIBM (stochastic) or BatchVB.

Seeding: the run's SeedSequence spawns two streams: the Philox key of SIBM's draws, and the
starting q (factor means drawn N(0, 0.01 prior variance) to break the symmetry of u.v,
variances a tenth of the prior's; z's mean at logit(density)). The fit is a pure function
of (seed, data, settings), whatever the number of threads, and a resumed fit equals one
that never stopped.
"""
import math
import warnings

import numpy as np

from pymf.engine import driver
from pymf.engine.checks import check_count
from pymf.engine.seeds import resolve_seed, seed_sequence
from pymf.errors import user_stacklevel
from pymf.sibm import _sibm
from pymf.sibm.binary import as_binary, check_test
from pymf.sibm.kernel import SIBMKernel
from pymf.sibm.result import SIBMResult
from pymf.sibm.samplers import BatchVB


# what an SIBMResult's .natural holds, all of which a start from it needs
NATURAL_KEYS = ("u1", "u2", "v1", "v2", "z", "row_updates", "col_updates", "t", "batch")


def _start(chain, model, X, rng, init):
    if init is not None:
        natural = getattr(init, "natural", init)
        if not isinstance(natural, dict):
            raise ValueError("init must be an SIBMResult (or its .natural dict)")
        missing = [key for key in NATURAL_KEYS if key not in natural]
        if missing:
            raise ValueError(f"init: the .natural dict of an SIBMResult holds "
                             f"{', '.join(NATURAL_KEYS)}; this one lacks {', '.join(missing)}")
        counters = (natural["row_updates"], natural["col_updates"], int(natural["t"]),
                    int(natural["batch"]))
        chain.set_state(natural["u1"], natural["u2"], natural["v1"], natural["v2"],
                        natural["z"], *counters)
        return
    L, M = X.shape
    var_u, var_v = 0.1 * model.prior_var_u, 0.1 * model.prior_var_v
    # the natural parameters written straight into the chain's own arrays: on a
    # 10^5 x 10^5 matrix a copy of q is 32 MB of the fit's peak memory. standard_normal
    # times the scale is Generator.normal(0, scale)'s draw, bit for bit
    q = chain.state(copy=False)
    for eta1, eta2, mean, prior_var, var in (
            (q["u1"], q["u2"], model.prior_mean_u, model.prior_var_u, var_u),
            (q["v1"], q["v2"], model.prior_mean_v, model.prior_var_v, var_v)):
        rng.standard_normal(out=eta1)
        eta1 *= 0.1 * math.sqrt(prior_var)
        eta1 += mean
        eta1 /= var
        eta2.fill(1 / var)
    density = min(max(X.n_ones / (L * M), 1e-6), 1 - 1e-6)
    mu_z, var_z = math.log(density / (1 - density)), 0.01
    chain.set_state(q["u1"], q["u2"], q["v1"], q["v2"], np.array([mu_z / var_z, 1 / var_z]),
                    np.zeros(L, np.int64), np.zeros(M, np.int64), 0, int(chain.counters()[1]))


def prepare_chain(model, X, method, seed, init=None):
    """The C chain a fit starts from, at its starting state: (chain, settings, draw_seed),
    settings being the C configuration's (sampling, batch_size, batch_start, batch_min,
    batch_max, theta_delta, tau0, kappa). X: a BinaryMatrix; seed: an int (resolved).
    Also bench/sibm_large.py's, which hands the same start to a C executable."""
    draw_child, init_child = seed_sequence(seed).spawn(2)
    draw_seed = int(draw_child.generate_state(1, np.uint64)[0])
    if isinstance(method, BatchVB):
        settings = ("uniform", 1, 1, 1, 1, 1.0, 1.0, 1.0)
    else:
        fixed = 0 if method.batch_size == "auto" else method.batch_size
        entries = X.shape[0] * X.shape[1]
        if fixed > entries:
            # 1e7 on a 60 x 50 matrix took 1.3 GB for one update, 1e9 ran on with memory
            # growing: every other family refuses a batch larger than its data
            raise ValueError(f"batch_size={fixed} is larger than the {X.shape[0]} x "
                             f"{X.shape[1]} = {entries} entries of the matrix; pymf.BatchVB "
                             "uses every entry at each update")
        start, low, high = method.sizes(*X.shape)
        settings = (method.sampling, fixed, start, low, high, method.theta_delta, method.tau0,
                    method.kappa)
    chain = _sibm.Chain(X.row_ptr, X.col_idx, X.shape[1], model.rank, model.prior(), *settings,
                        draw_seed, method.n_threads)
    _start(chain, model, X, np.random.default_rng(init_child), init)
    return chain, settings, draw_seed


def warn_one_class(test):
    """A single UserWarning when the test labels are all 0 or all 1: AUC is undefined
    there (it ranks ones against zeros), so test_auc is NaN in every trace point, while
    test_loglik is still the held-out labels' mean log-likelihood. Not an error: a test set
    of held-out ones only is a usual way to score a recommender by log-likelihood."""
    if test is None:
        return
    labels = test[2]
    n1 = int(labels.sum())
    if n1 not in (0, len(labels)):
        return
    present, absent = (1, 0) if n1 else (0, 1)
    warnings.warn(f"test=: the test set's {len(labels)} labels are all {present} (no {absent}): "
                  f"AUC is undefined without both classes, so test_auc is traced as NaN "
                  f"(test_loglik is still traced); hold out entries of both classes for an "
                  f"AUC (pymf.sibm.holdout holds out as many zeros as ones)", UserWarning,
                  stacklevel=user_stacklevel())


def fit_sibm(model, data, method, n_updates=1000, seed=None, init=None, test=None,
             trace_every=None, checkpoint=None, checkpoint_every=None, progress=None,
             callback=None):
    """Fit q for a LogisticMF model with SIBM or BatchVB; returns an SIBMResult.

    n_updates: SIBM's minibatch updates, or BatchVB's sweeps. test = (rows, cols, labels):
    held-out entries traced as test_loglik and test_auc (labels all of one class: test_auc is
    NaN, AUC being undefined without both classes, and a UserWarning says so once at the
    start; test_loglik is traced as usual). trace_every: units between trace
    points (default: 100 for SIBM, 1 for BatchVB). init: an earlier SIBMResult to go on
    from. checkpoint, checkpoint_every, progress, callback: as in pymf.sample.
    """
    X = as_binary(data)
    batch = isinstance(method, BatchVB)
    n_updates = check_count(n_updates, "n_updates", 1)
    test = check_test(test, X.shape)
    warn_one_class(test)
    if trace_every is None:
        trace_every = 1 if batch else min(100, n_updates)
    seed = resolve_seed(seed)
    chain = prepare_chain(model, X, method, seed, init)[0]
    kernel = SIBMKernel(chain, batch, test, X.shape, model.rank)
    plan = driver.Plan(n_updates, 0, n_updates, trace_every, checkpoint_every=checkpoint_every,
                       trace_at_start=True)
    params = {"model": model.params(), "method": method.params(), "seed": seed,
              "shape": list(X.shape), "n_ones": X.n_ones, "n_updates": n_updates,
              "elbo": "exact" if kernel.exact_elbo else "estimate",
              "threads": method.n_threads or None}
    # a checkpoint is checked against the run's fingerprint; without one, the index's digest
    # (a pass over its 74 MB on a 10^5 x 10^5 matrix of 10^7 ones) would serve nothing
    fingerprint = None if checkpoint is None else {
        "model": model.params(), "method": method.params(),
        "data": driver.digest(X.row_ptr, X.col_idx, np.asarray(X.shape)),
        "init": None if init is None else driver.digest(getattr(init, "natural", init)),
        "test": None if test is None else driver.digest(*test)}

    def make_result(record):
        # the chain's own arrays: the fit is over, and q is not copied at its end
        return SIBMResult.from_record(record, params, chain.state(copy=False))

    return driver.run(kernel, plan, seed=seed, keep_draws=False, checkpoint=checkpoint,
                      fingerprint=fingerprint, progress=progress, callback=callback,
                      make_result=make_result, desc=method.kind)
