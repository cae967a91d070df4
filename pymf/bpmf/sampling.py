"""The BPMF family's runners: pymf.sample with DSGLD, SGLD (DSGLD with one chain and one
block) or BPMFGibbs, and pymf.fit with SGD / DSGD, on a pymf.BPMF model.

Units: DSGLD counts rounds (round_length minibatch steps on the blocks of one orthogonal
group per chain; one sample per chain per round); BPMFGibbs counts sweeps. burnin,
n_samples and thin are in these units.
"""
import copy
import numbers

import numpy as np

from pymf.bpmf.kernel import BPMFKernel
from pymf.bpmf.layout import check_init
from pymf.bpmf.result import BPMFFit, BPMFResult
from pymf.bpmf.samplers import DSGLD
from pymf.engine import autostep, driver
from pymf.engine.steps import AnnealedStep, with_burnin
from pymf.engine.checks import check_count, check_run_length, check_threads
from pymf.engine.seeds import resolve_seed
from pymf.langevin import DSGD, SGD, SGLD


SGLD_ROUND_LENGTH = 50
AUTO_KAPPA = 1000.0  # step_size="auto" anneals like DSGLD's benchmarked default


def _without_threads(params):
    """Sampler settings that decide the chains: the thread count (and the MPI layout) do not."""
    return {key: value for key, value in params.items() if key != "n_threads"}


def _check_test(model, test, ratings):
    if test is None:
        return None
    test = model.check_data(test, "test set")
    if test.shape != ratings.shape:
        raise ValueError(f"the test set has shape {test.shape}, the training data {ratings.shape}")
    return test


def sample_bpmf(model, data, sampler, n_samples, burnin=0, thin=1, seed=None, init=None,
                test=None, trace_every=None, sample_dir=None, keep_samples=True,
                checkpoint=None, checkpoint_every=None, progress=None, callback=None,
                burnin_rmse=None, n_threads=None, _kernel=None):
    """pymf.sample for a BPMF model; returns a BPMFResult.

    burnin       rounds (DSGLD) or sweeps (Gibbs) of burn-in; with burnin_rmse, the largest
                 number of them
    burnin_rmse  burn-in ends as soon as the chains' mean training RMSE is at or below this
                 value (checked every trace_every units)
    init         the starting state instead of a random one: a dict with U (users x rank)
                 and V (items x rank), optionally a and b (the biases), in the original
                 order, each for all chains or stacked per chain (chains x ...); a previous
                 result's last_state continues its chains
    sample_dir   stream the kept samples to .npy files there (U_samples.npy, ...: kept x
                 chains x ...) instead of memory; the result's samples are memory maps
    n_threads    OpenMP threads (default: the sampler's)
    The other options are pymf.sample's.
    """
    if isinstance(sampler, SGLD):
        n = model.check_data(data).nnz
        # rounds of 50 steps, the precisions drawn every 10 rounds: SGLD's own schedule
        # (DSGLD's default rounds became 10 steps long; SGLD's chain did not change)
        sampler = DSGLD(chains=1, split="square", blocks=1, batch_size=sampler.batch_size(n),
                        round_length=SGLD_ROUND_LENGTH, step_size=sampler.step_size,
                        n_threads=sampler.n_threads or None)
    ratings = model.check_data(data)
    n_samples, burnin, thin = check_run_length(n_samples, burnin, thin)
    if isinstance(sampler, DSGLD):
        sampler = sampler.for_data(ratings.nnz)
    if burnin_rmse is not None and not (isinstance(burnin_rmse, numbers.Real)
                                        and not isinstance(burnin_rmse, bool) and burnin_rmse > 0):
        raise ValueError(f"burnin_rmse must be a positive number, got {burnin_rmse!r}")
    test = _check_test(model, test, ratings)
    mean_rating = float(ratings.values.mean()) if model.mean_rating is None else model.mean_rating
    n_threads = (sampler.n_threads or 0) if n_threads is None else check_threads(n_threads)
    total_max = burnin + n_samples
    if trace_every is None:
        trace_every = max(1, min(thin, total_max // 100 or 1))
    seed = resolve_seed(seed)
    n_chains = _kernel.n_chains if _kernel is not None else sampler.n_chains
    init = check_init(init, model, ratings.shape, n_chains)
    # _kernel: pymf.bpmf.mpi's parameter server, which has the same face as BPMFKernel
    kernel = _kernel if _kernel is not None else BPMFKernel(model, ratings, sampler, seed,
                                                            mean_rating, n_threads)
    if init is not None:
        kernel.set_initial(init)
    auto_step = None
    if autostep.is_auto(getattr(sampler, "step_size", None)):
        # the first round gets the rule's step, then the benchmarked annealing (kappa 1000);
        # the pilot runs these steps, so that its rounds can be the run's first
        def annealed_from(eps):
            return AnnealedStep(eps * (1 + 1 / AUTO_KAPPA) ** 0.51, AUTO_KAPPA)

        if model.sample_tau:
            # the curvature is measured at the chains' starting tau: where tau climbs past
            # it, their steps shrink with it (ChainsKernel.use_tau_reference), the pilot's too
            kernel.use_tau_reference(kernel.current_taus())
        # the MPI parameter server's kernel has its own auto_step: the same step
        eps0, auto_step = kernel.auto_step(seed, annealed_from,
                                           burnin if burnin_rmse is None else 0)
        if kernel.tau_reference is not None:
            # recorded; raised where the per-row factors are measured
            auto_step["tau_reference"] = kernel.tau_reference.tolist()
        # a step bounded for the minibatch noise runs after the burn-in (a burn-in that
        # ends at burnin_rmse may end early: then the bounded step from the start)
        sampler = copy.copy(sampler)
        sampler.step_size = with_burnin(annealed_from, eps0, auto_step,
                                        0 if burnin_rmse is not None else burnin)
        if "row_noise" in auto_step:
            # the per-row bound (pymf.engine.autostep, point 5) after the burn-in, measured
            # at its end: burn-in draws are discarded, and by then the factors have their
            # posterior scale (at the start they are init_scale small)
            auto_step["row_steps_from"] = 1 if burnin_rmse is not None else burnin + 1
            kernel.plan_row_steps(auto_step)
    if test is not None:
        kernel.attach_test(test)
    burnin_until = None
    if burnin_rmse is not None:
        def burnin_until(point):
            return point["train_rmse"] <= burnin_rmse
        burnin_until.criterion = f"training RMSE {burnin_rmse}"
    plan = driver.Plan(n_samples, burnin, thin, trace_every, checkpoint_every,
                       burnin_until=burnin_until)
    fingerprint = {"model": model.params(), "sampler": _without_threads(sampler.params()),
                   "burnin_rmse": burnin_rmse, "data": driver.digest(ratings),
                   "test": driver.digest(test), "init": None if init is None else driver.digest(init)}
    params = {"model": model.params(), "sampler": sampler.params(), "seed": seed,
              "shape": list(ratings.shape), "nnz": ratings.nnz, "n_samples": n_samples,
              "burnin": burnin, "thin": thin}
    if auto_step is not None:
        params["auto_step"] = auto_step

    def make_result(record):
        return BPMFResult.from_record(record, params, mean_rating, model.tau, test, kernel.draw())

    return driver.run(kernel, plan, seed=seed, step_size=getattr(sampler, "step_size", None),
                      keep_draws=keep_samples, sample_dir=sample_dir,
                      test_values=None if test is None else test.values,
                      checkpoint=checkpoint, fingerprint=fingerprint, progress=progress,
                      callback=callback, make_result=make_result, desc=sampler.kind)


class _Current:
    """Stands for the run in trace_point: an estimate's test RMSE is its own, not that of
    a running mean."""

    def __init__(self, prediction):
        self.prediction = prediction

    def test_mean(self):
        return self.prediction


class _FitKernel(BPMFKernel):
    """(D)SGD's single noiseless chain: the trace counts epochs and holds the current
    estimate's test RMSE."""

    def __init__(self, model, ratings, settings, seed, mean_rating, n_threads, rounds_per_epoch):
        super().__init__(model, ratings, settings, seed, mean_rating, n_threads, add_noise=False)
        self.rounds_per_epoch = rounds_per_epoch

    def trace_point(self, run):
        current = self.test_predictions()[0] if self.test is not None else None
        point = super().trace_point(_Current(current))
        return {"epoch": self.counter / self.rounds_per_epoch, **point}


def fit_bpmf(model, data, optimizer, n_epochs=10, seed=None, test=None, n_threads=None,
             progress=None, callback=None, checkpoint=None, init=None, trace_every=None):
    """SGD (one block) or DSGD (B x B blocks, one orthogonal group per round) on the BPMF
    log posterior with the precisions fixed at model.init_precision: the DSGLD estimator
    without noise. One epoch = as many minibatch steps as ratings / batch_size. Returns a
    BPMFFit; the trace has a point per epoch."""
    for name, value in (("init", init), ("trace_every", trace_every)):
        if value is not None:
            raise ValueError(f"{name}= is not supported when fitting a BPMF model (one trace "
                             "point per epoch, from a random start)")
    grid = (1, 1) if isinstance(optimizer, SGD) else (optimizer.blocks, optimizer.blocks)
    ratings = model.check_data(data)
    n_epochs = check_count(n_epochs, "n_epochs", 1)
    mean_rating = float(ratings.values.mean()) if model.mean_rating is None else model.mean_rating
    batch = optimizer.batch_size(ratings.nnz) if isinstance(optimizer, SGD) else None
    batch = min(ratings.nnz, batch or 1000)
    P, Q = grid
    # a round visits one group: each of its blocks gets about |block| / m steps
    round_length = max(1, int(round(ratings.nnz / (P * Q) / batch)))
    rounds_per_epoch = max(P, Q)
    settings = DSGLD(chains=1, split="hybrid", blocks=grid, batch_size=batch,
                     round_length=round_length, hyper_every=0, permute=True)
    seed = resolve_seed(seed)
    n_threads = (optimizer.n_threads or 0) if n_threads is None else check_threads(n_threads)
    kernel = _FitKernel(model, ratings, settings, seed, mean_rating, n_threads, rounds_per_epoch)
    test = _check_test(model, test, ratings)
    if test is not None:
        kernel.attach_test(test)
    total = n_epochs * rounds_per_epoch
    plan = driver.Plan(total, 0, total, rounds_per_epoch)
    params = {"model": model.params(), "optimizer": optimizer.params(), "seed": seed,
              "grid": list(grid), "batch_size": batch, "round_length": round_length,
              "n_epochs": n_epochs}
    fingerprint = {**params, "optimizer": _without_threads(optimizer.params()),
                   "data": driver.digest(ratings), "test": driver.digest(test)}

    def make_result(record):
        return BPMFFit.from_record(record, params, kernel.draw(), mean_rating)

    return driver.run(kernel, plan, seed=seed, step_size=optimizer.step_size, keep_draws=False,
                      checkpoint=checkpoint, fingerprint=fingerprint, progress=progress,
                      callback=callback, make_result=make_result, desc=optimizer.kind)
