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
from pymf.engine.seeds import resolve_seed
from pymf.ibp.chain import (chain_settings, check_alpha, check_data, dense_data, initial_state,
                            make_chain, seeds)
from pymf.ibp.distributed import RankKernel
from pymf.ibp.kernel import IBPKernel
from pymf.ibp.result import IBPResult
from pymf.ibp.samplers import CollapsedIBP


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
    X_eval = np.array(dense_data(data))  # with the held-out values, for the trace
    X, test_mask = check_data(X_eval, test_mask, processes)
    check_alpha(model.alpha, X.shape[0])
    train = np.ones(X.shape, dtype=bool) if test_mask is None else ~test_mask
    seed = resolve_seed(seed)
    chain_seed, init_rng = seeds(seed)
    settings = chain_settings(model, sampler)
    Z, A, pi, hyper = initial_state(model, X, train, init_rng, settings["collapsed"])
    if comm is None:
        chain = make_chain(model, X, train, settings, chain_seed)
        kernel = IBPKernel(chain, X_eval, test_mask, settings["split_merge"])
    else:
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
    kernel.keep_draws = bool(keep_samples)
    return driver.run(kernel, plan, seed=seed, keep_draws=keep_samples,
                      test_values=kernel.test_values, checkpoint=checkpoint,
                      fingerprint=fingerprint(model, sampler, X_eval, test_mask),
                      progress=progress, callback=callback, make_result=make_result,
                      desc=sampler.kind, write_files=write_files)
