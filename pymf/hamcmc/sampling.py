"""pymf.sample for a LinearGaussian model: SGLD, PreconditionedSGLD, SGRLD or HAMCMC.

Seeding: the run's SeedSequence spawns two streams: the Philox key of the noise and the
minibatches, and the starting state (a draw from the prior unless init= is given). The
chain is a pure function of (seed, data, settings).
"""
import copy
import math

import numpy as np

from pymf.data import real_array
from pymf.engine import autostep, driver
from pymf.engine.checks import check_count, check_run_length
from pymf.engine.seeds import resolve_seed, seed_sequence
from pymf.engine.steps import ConstantStep
from pymf.errors import DivergenceError
from pymf.hamcmc import _hamcmc
from pymf.hamcmc.kernel import LinearKernel, make_chain
from pymf.hamcmc.result import LinearResult
from pymf.langevin import SGLD


def _check_init(init, model, dim, rng):
    if init is None:
        return rng.normal(0.0, math.sqrt(model.prior_var), dim)
    if isinstance(init, LinearResult):
        # real_array's message named only its dtype, object
        raise ValueError(f"init is a starting vector theta of {dim} values, not a result: to "
                         "go on from an earlier run's last kept draw, pass result.samples[-1]")
    theta = real_array(init, "init")
    if theta.shape != (dim,):
        raise ValueError(f"init must be a vector of {dim} values, got shape {theta.shape}")
    if not np.all(np.isfinite(theta)):
        raise ValueError("init contains NaN or inf")
    if not np.all(np.abs(theta) < 1e150):
        raise ValueError("init is too large (|value| >= 1e150 overflows when squared)")
    return theta


def start_preconditioner(chain, kind, options, theta0):
    """(name, P) of the sampler's preconditioner at the start, P a function of a vector:
    its move is theta += -eps P grad U + N(0, 2 eps P), stable for eps lambda_max(P H) < 2.
    SGLD: I. SGRLD: its metric L L^T. HAMCMC: gamma I, the preconditioner of its first 2M
    iterations and of the directions its L-BFGS pairs do not reach (where they do, H_t ~
    (Hessian + lam I)^-1 and P H ~ I, stable at any eps < 2). PreconditionedSGLD: diag(1 /
    (lam + sqrt V)) with V = g * g of its first minibatch at the start (one iteration run
    to read it, then the chain is started again)."""
    if kind == "sgld":
        return "identity", lambda v: v
    if kind == "sgrld":
        L = options["metric_chol"]
        return "metric", lambda v: L @ (L.T @ v)
    if kind == "hamcmc":
        gamma = options["gamma"]
        return "gamma", lambda v: gamma * v
    chain.run(np.array([1e-12]))  # any step: V of iteration 1 is g * g at theta0
    diagonal = 1.0 / (options["lam"] + np.sqrt(chain.snapshot()["V"]))
    chain.start(theta0)
    return "rmsprop_start", lambda v: diagonal * v


def auto_step(model, A, x, chain, kind, options, theta0, seed, step=None):
    """(eps, info) for step_size="auto" on a LinearGaussian model: pymf.engine.autostep's
    rule on the preconditioned Hessian P H (start_preconditioner), H from finite
    differences of the full-data gradient; the pilot runs the chain PILOT_UNITS iterations
    from theta0 and fails where it diverges or its potential U grows by more than |U| at
    the start; the chain is started again at theta0 afterwards."""
    name, precondition = start_preconditioner(chain, kind, options, theta0)

    def potential(theta):
        residual = x - A @ theta
        return (residual @ residual / (2 * model.noise_var)
                + theta @ theta / (2 * model.prior_var))

    def gradient(theta):  # P grad log p: its curvature is P H
        grad_u, _ = _hamcmc.grad_potential(A, x, model.noise_var, model.prior_var, theta)
        return precondition(-grad_u)

    start = potential(theta0)

    def pilot(eps):
        try:
            chain.run(np.full(autostep.PILOT_UNITS, eps))
            theta = chain.state()[0]
            with np.errstate(over="ignore", invalid="ignore"):
                value = potential(theta)
            return bool(np.all(np.isfinite(theta))) and math.isfinite(value) \
                and value <= start + abs(start)
        except DivergenceError:
            return False
        finally:
            chain.start(theta0)

    eps, info = autostep.choose(gradient, theta0, seed_sequence(seed), pilot, step=step)
    info["preconditioner"] = name
    return eps, info


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
    chosen = None
    if autostep.is_auto(sampler.step_size):
        eps, chosen = auto_step(model, A, x, chain, kind, options, theta0, seed,
                                step=sampler.step_size)
        sampler = copy.copy(sampler)
        sampler.step_size = ConstantStep(eps)
    kernel = LinearKernel(chain, D, exact_mean)
    params = {"model": model.params(), "sampler": sampler.params(), "seed": seed,
              "n_data": N, "dim": D, "n_samples": n_samples, "burnin": burnin, "thin": thin}
    if chosen is not None:
        params["auto_step"] = chosen
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
