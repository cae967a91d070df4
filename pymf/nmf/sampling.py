"""The NMF family's runners: pymf.sample with LD, SGLD, PSGLD or Gibbs, and pymf.fit with
SGD or DSGD, on a pymf.TweedieNMF model. Python validates and lays the data out; the
engine's loop (pymf.engine.driver) runs the kernel (pymf.nmf.kernel); the C core runs
every iteration."""
import numpy as np

from pymf.data import Ratings, as_observed
from pymf.engine import driver
from pymf.engine.checks import check_count, check_run_length
from pymf.engine.seeds import resolve_seed
from pymf.errors import GPUUnavailableError
from pymf.nmf.kernel import (FactorKernel, GridMap, blocked_data, check_init, make_chain,
                             prepare_test, resolve_auto_step, run_facts, run_fingerprint,
                             run_seeds, sample_params)
from pymf.nmf.result import FitResult, SampleResult


def _setup(model, data, sampler, seed, init, test, chain_factory=make_chain, burnin=0,
           kept_pilot=None):
    """Validated data, the kernel at its starting state, and the run's recorded facts.
    chain_factory: make_chain's signature; another family's sampler of this model (HAMCMC)
    passes its own. burnin: the run's, for an "auto" step's burn-in phase."""
    observed = as_observed(data)
    model.check_data(observed)
    test = prepare_test(test, observed.shape)
    seed = resolve_seed(seed)
    noise_seed, schedule_seed, permute_seed, init_rng = run_seeds(seed)
    shape = observed.shape
    n_blocks = sampler.grid_blocks(shape)
    if n_blocks > min(shape):
        raise ValueError(
            f"blocks={n_blocks} is larger than the matrix ({shape[0]} x {shape[1]}): each of the "
            "B row and column pieces needs at least one row / column")
    # the starting point before the block layout: its temporaries (mean |V| over the data)
    # and the layout's copy of the data are then never alive together
    if init is None:
        W0, H0 = model.init_factors(shape, observed, init_rng)
    else:
        W0, H0 = check_init(init, shape, model.rank, model)
    data = blocked_data(observed, n_blocks, sampler.permute, permute_seed)
    grid = GridMap(data)
    batch = sampler.batch_size(data.n_observed)
    chain = chain_factory(sampler, data, model, noise_seed, schedule_seed, batch)
    given_init = None if init is None else (W0, H0)  # for the fingerprint
    start = grid.to_grid(W0, H0)
    # dropped before the chain copies the grid-order start: two copies of the factors
    # alive beside the chain's, not three (33 MB a copy at 10M ratings, K = 50)
    del W0, H0
    chain.set_state(*start, 0)
    del start
    sampler, auto_step = resolve_auto_step(sampler, chain, data, model, seed, burnin,
                                           kept_pilot)
    facts = run_facts(model, sampler, seed, shape, data.n_observed, n_blocks, batch)
    if auto_step is not None:
        facts["auto_step"] = auto_step
    fingerprint = run_fingerprint(facts, driver.digest(observed), test, given_init)
    return observed, test, grid, chain, seed, facts, fingerprint, sampler


def watch_blowups(kernel, observed):
    """The kernel checks its fitted values' RMS at every trace point (FactorKernel
    .set_blowup_limit) where every entry of the data is observed."""
    values = observed.values if isinstance(observed, Ratings) else np.asarray(observed)
    with np.errstate(over="ignore"):  # data near the float range: no limit (inf)
        squares = float(np.sum(np.square(values)))
    kernel.set_blowup_limit(squares, values.size)


def sample_nmf(model, data, sampler, n_samples, burnin=0, thin=1, seed=None, init=None,
               test=None, trace_every=None, sample_dir=None, keep_samples=True,
               checkpoint=None, checkpoint_every=None, progress=None, callback=None,
               chain_factory=make_chain, kernel_class=FactorKernel, result_class=SampleResult):
    """pymf.sample for a TweedieNMF model; returns a SampleResult (see pymf.sample).
    chain_factory, kernel_class and result_class: another family's sampler of this model
    (HAMCMC), or another factor model (pymf.alphamf), runs its own C chain, kernel and
    result through this same set-up."""
    n_samples, burnin, thin = check_run_length(n_samples, burnin, thin)
    trace_every = thin if trace_every is None else check_count(trace_every, "trace_every", 1)
    if getattr(sampler, "backend", "cpu") == "cuda":
        from pymf import gpu
        if not gpu.is_available():
            raise GPUUnavailableError("backend='cuda' was requested but the GPU path is "
                                      "unusable: "
                               f"{gpu.why_unavailable()}")
    plan = driver.Plan(n_samples, burnin, thin, trace_every, checkpoint_every,
                       trace_at_start=True)
    kept_pilot = []
    observed, test, grid, chain, seed, facts, fingerprint, sampler = _setup(
        model, data, sampler, seed, init, test, chain_factory, burnin, kept_pilot)
    kernel = kernel_class(chain, grid, model, test)
    watch_blowups(kernel, observed)
    # step_size="auto"'s accepted pilot: the run's first units, unless the loop must run
    # them (pymf.engine.driver)
    kernel.kept_pilot = kept_pilot[0] if kept_pilot else None
    if "row_noise" in facts.get("auto_step", {}):
        kernel.plan_row_steps(facts["auto_step"])  # PSGLD's per-row bound after the burn-in
    params = sample_params(facts, n_samples, burnin, thin, sampler, test)

    def make_result(record):
        return result_class.from_record(record, params, kernel.state())

    return driver.run(kernel, plan, seed=seed, step_size=sampler.step_size,
                      keep_draws=keep_samples, sample_dir=sample_dir,
                      moments={"W": False, "H": False},
                      test_values=None if test is None else test.values,
                      checkpoint=checkpoint, fingerprint=fingerprint, progress=progress,
                      callback=callback, make_result=make_result, desc=sampler.kind)


class _FitKernel(FactorKernel):
    """An optimiser's state seen as a kernel: the trace also counts epochs and has only
    the current state's test RMSE."""

    def __init__(self, chain, grid, model, test, per_epoch):
        super().__init__(chain, grid, model, test)
        self.per_epoch = per_epoch

    def trace_point(self, run):
        point = super().trace_point(None)
        point.pop("test_rmse_sample", None)
        return {"epoch": self.counter / self.per_epoch, **point}


def fit_nmf(model, data, optimizer, n_epochs=10, seed=None, init=None, test=None,
            trace_every=None, progress=None, callback=None, checkpoint=None):
    """MAP estimate of (W, H) with SGD or DSGD; returns a FitResult (see pymf.fit)."""
    n_epochs = check_count(n_epochs, "n_epochs", 1)
    observed, test, grid, chain, seed, facts, fingerprint, optimizer = _setup(
        model, data, optimizer, seed, init, test)
    per_epoch = optimizer.iterations_per_epoch(facts["n_observed"])
    total = n_epochs * per_epoch
    trace_every = per_epoch if trace_every is None else check_count(trace_every, "trace_every", 1)
    kernel = _FitKernel(chain, grid, model, test, per_epoch)
    watch_blowups(kernel, observed)
    plan = driver.Plan(total, 0, total, trace_every, trace_at_start=True)
    facts["optimizer"] = facts.pop("sampler")
    params = {**facts, "n_epochs": n_epochs, "threads": optimizer.n_threads or None}

    def make_result(record):
        return FitResult.from_record(record, params, kernel.state())

    return driver.run(kernel, plan, seed=seed, step_size=optimizer.step_size, keep_draws=False,
                      checkpoint=checkpoint, fingerprint=fingerprint, progress=progress,
                      callback=callback, make_result=make_result, desc=optimizer.kind)
