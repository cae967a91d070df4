"""pymf.sample for a LinearGaussian model: SGLD, PreconditionedSGLD, SGRLD or HAMCMC.

Seeding: the run's SeedSequence spawns two streams: the Philox key of the noise and the
minibatches, and the starting state (a draw from the prior unless init= is given). The
chain is a pure function of (seed, data, settings).
"""
import math

import numpy as np

from pymf.data import real_array
from pymf.engine import driver
from pymf.engine.checks import check_count, check_run_length
from pymf.engine.seeds import resolve_seed, seed_sequence
from pymf.hamcmc.kernel import LinearKernel, make_chain
from pymf.hamcmc.result import LinearResult
from pymf.langevin import SGLD


def _check_init(init, model, dim, rng):
    if init is None:
        return rng.normal(0.0, math.sqrt(model.prior_var), dim)
    theta = real_array(init, "init")
    if theta.shape != (dim,):
        raise ValueError(f"init must be a vector of {dim} values, got shape {theta.shape}")
    if not np.all(np.isfinite(theta)):
        raise ValueError("init contains NaN or inf")
    if not np.all(np.abs(theta) < 1e150):
        raise ValueError("init is too large (|value| >= 1e150 overflows when squared)")
    return theta


def sample_linear(model, data, sampler, n_samples, burnin=0, thin=1, seed=None, init=None,
                  test=None, trace_every=None, sample_dir=None, keep_samples=True,
                  checkpoint=None, checkpoint_every=None, progress=None, callback=None):
    """Runs SGLD, PreconditionedSGLD, SGRLD or HAMCMC on a LinearGaussian model; see
    pymf.sample (test= is not supported for this model: its posterior is known exactly)."""
    if test is not None:
        raise ValueError("test= is not supported for LinearGaussian models")
    if getattr(sampler, "blocks", None) is not None:
        raise ValueError("blocks= sets HAMCMC's block grid on a TweedieNMF model; a "
                         "LinearGaussian model's minibatches are set by batch_size=")
    A, x = model.check_data(data)
    N, D = A.shape
    n_samples, burnin, thin = check_run_length(n_samples, burnin, thin)
    total = burnin + n_samples
    trace_every = check_count(max(1, total // 200) if trace_every is None else trace_every,
                              "trace_every", 1)
    seed = resolve_seed(seed)
    noise_child, init_child = seed_sequence(seed).spawn(2)
    noise_seed = int(noise_child.generate_state(1, np.uint64)[0])
    theta0 = _check_init(init, model, D, np.random.default_rng(init_child))
    exact_mean, exact_cov = model.posterior((A, x))
    if isinstance(sampler, SGLD):
        kind, options = "sgld", {}
    else:
        kind, options = sampler.kind, sampler.chain_options()
    if kind == "sgrld":
        options = {"metric_chol": np.linalg.cholesky(exact_cov)}
    chain = make_chain(model, A, x, sampler, kind,
                       options, sampler.batch_size(N), noise_seed)
    chain.start(theta0)
    kernel = LinearKernel(chain, D, exact_mean)
    params = {"model": model.params(), "sampler": sampler.params(), "seed": seed,
              "n_data": N, "dim": D, "n_samples": n_samples, "burnin": burnin, "thin": thin}
    plan = driver.Plan(n_samples, burnin, thin, trace_every, checkpoint_every)
    # what decides the chain besides the seed and the plan (driver.checkpoint_key adds
    # those): a checkpoint of a run with other settings, data or init is refused
    fingerprint = {"model": model.params(),
                   "sampler": {key: value for key, value in sampler.params().items()
                               if key != "n_threads"},
                   "data": driver.digest(A, x),
                   "init": None if init is None else driver.digest(theta0)}

    def make_result(record):
        return LinearResult.from_record(record, params, exact_mean, exact_cov,
                                        chain.skipped_pairs)

    return driver.run(kernel, plan, seed=seed, step_size=sampler.step_size,
                      keep_draws=keep_samples, sample_dir=sample_dir,
                      moments={"theta": True}, checkpoint=checkpoint, fingerprint=fingerprint,
                      progress=progress, callback=callback, make_result=make_result, desc=kind)
