"""pymf.sample for an IBPLinearGaussian model: collapsed Gibbs or the hybrid sampler.

Seeding: the run's SeedSequence spawns two streams: the C core's seed (every process's and
the master's random numbers, reseeded per iteration from it) and the starting state: Z
drawn from the IBP(alpha) prior, A its posterior mean given Z and the training cells
(held-out cells replaced by their column's training mean, so no held-out value is used),
pi_k = m_k / (N + 1). The chain is a pure function of (seed, data, mask, settings, P): the
thread count never changes it, and a resumed run equals one that never stopped.
"""
import numpy as np

from pymf.engine import driver
from pymf.engine.checks import check_run_length
from pymf.engine.seeds import resolve_seed, seed_sequence
from pymf.ibp import _ibp
from pymf.ibp.kernel import IBPKernel
from pymf.ibp.result import IBPResult
from pymf.ibp.samplers import CollapsedIBP


def check_data(X, test_mask, processes=1):
    """(X as float64, mask as bool or None), refusing what the model cannot take."""
    try:
        X = np.array(X, dtype=np.float64, order="C", copy=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"X must be a 2-D array of numbers: {exc}") from None
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
    columns = []
    for n in range(N):
        for k, column in enumerate(columns):
            m = column[:n].sum()
            column[n] = rng.random() < m / (n + 1)
        for _ in range(rng.poisson(model.alpha / (n + 1))):
            column = np.zeros(N)
            column[n] = 1.0
            columns.append(column)
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
            "threads": 1 if collapsed else sampler.n_threads}


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
                      first_process, n_local)


def run_params(model, sampler, seed, X, test_mask):
    return {"model": model.params(), "sampler": sampler.params(), "seed": seed,
            "shape": list(X.shape),
            "n_test": 0 if test_mask is None else int(test_mask.sum())}


def fingerprint(model, sampler, X, test_mask):
    return {"model": model.params(), "sampler": sampler.params(),
            "data": driver.digest(X), "mask": driver.digest(test_mask)}


def sample_ibp(model, data, sampler, n_samples, burnin=0, thin=1, seed=None, test_mask=None,
               trace_every=1, keep_samples=True, checkpoint=None, checkpoint_every=None,
               progress=None, callback=None):
    """Sample Z, A, sigma_x, sigma_a and alpha of an IBPLinearGaussian model given the
    N x D matrix `data`; returns an IBPResult.

    test_mask: a boolean N x D array, True at the held-out cells (their values in data are
    never read by the sampler; they are only compared with its predictions, so NaN there
    gives NaN held-out measures); traced as heldout_loglik and predictive_loglik. Units
    are iterations; burnin, thin, seed, trace_every, keep_samples, checkpoint,
    checkpoint_every, progress and callback as in pymf.sample.
    """
    return run_ibp(model, data, sampler, n_samples, burnin, thin, seed, test_mask, trace_every,
                   keep_samples, checkpoint, checkpoint_every, progress, callback)


def run_ibp(model, data, sampler, n_samples, burnin, thin, seed, test_mask, trace_every,
            keep_samples, checkpoint, checkpoint_every, progress, callback, comm=None):
    """sample_ibp on threads (comm None) or as one rank of an MPI job (pymf.ibp.mpi)."""
    n_samples, burnin, thin = check_run_length(n_samples, burnin, thin)
    processes = 1 if isinstance(sampler, CollapsedIBP) else sampler.processes
    X_eval = np.array(data, dtype=np.float64)  # with the held-out values, for the trace
    X, test_mask = check_data(X_eval, test_mask, processes)
    train = np.ones(X.shape, dtype=bool) if test_mask is None else ~test_mask
    seed = resolve_seed(seed)
    chain_seed, init_rng = seeds(seed)
    settings = chain_settings(model, sampler)
    Z, A, pi, hyper = initial_state(model, X, train, init_rng, settings["collapsed"])
    if comm is None:
        chain = make_chain(model, X, train, settings, chain_seed)
        kernel = IBPKernel(chain, X_eval, test_mask)
    else:
        from pymf.ibp.mpi import RankKernel
        kernel = RankKernel(comm, model, X, train, settings, chain_seed, X_eval, test_mask)
        chain = kernel.chain
    chain.set_state(Z, A, pi, hyper)
    plan = driver.Plan(n_samples, burnin, thin, trace_every, checkpoint_every=checkpoint_every,
                       trace_at_start=True)
    params = run_params(model, sampler, seed, X, test_mask)

    def make_result(record):
        return IBPResult.from_record(record, params, kernel.kept_Z, kernel.kept_A, X.shape,
                                     kernel.last_finite_state())

    write_files = comm is None or comm.Get_rank() == 0
    return driver.run(kernel, plan, seed=seed, keep_draws=keep_samples,
                      test_values=kernel.test_values, checkpoint=checkpoint,
                      fingerprint=fingerprint(model, sampler, X_eval, test_mask),
                      progress=progress, callback=callback, make_result=make_result,
                      desc=sampler.kind, write_files=write_files)
