"""MAP optimisation baselines: SGD and DSGD (Gemulla et al. 2011) through pymf.fit.

They optimise the same posterior the samplers sample (see core/include/pymf/sgd.h for the
objective), on the same block grid and parts as PSGLD, and are the speed and accuracy
baselines of the samplers. fit() returns a FitResult with W, H and a trace.
"""
import numbers
import time

import numpy as np

from pymf import _sgd, _tweedie
from pymf.data import entry_ids
from pymf.samplers import _check_blocks, _check_threads, as_step_size, check_flag
from pymf.sampling import (GridMap, blocked_data, check_count, check_init, prepare_test,
                           progress_enabled, run_seeds)
from pymf.data import as_observed
from pymf.errors import DivergenceError


class SGD:
    """Plain SGD: each iteration applies batch_size single-entry moves drawn with
    replacement (default: N / 16 per iteration, so 16 iterations make an epoch)."""
    kind = "sgd"

    def __init__(self, step_size=1e-3, batch_size=None, n_threads=None):
        self.step_size = as_step_size(step_size)
        if batch_size is not None and (isinstance(batch_size, bool) or
                                       not isinstance(batch_size, numbers.Integral) or batch_size < 1):
            raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
        self._batch = batch_size
        self.n_threads = _check_threads(n_threads)
        self.blocks, self.permute, self.part_order = None, False, "cyclic"

    def grid_blocks(self, shape):
        return 1

    def iterations_per_epoch(self, n_observed):
        return int(np.ceil(n_observed / self.batch_size(n_observed)))

    def batch_size(self, n_observed):
        if self._batch is not None and self._batch > n_observed:
            raise ValueError(f"batch_size={self._batch} is larger than the {n_observed} entries "
                             "of the data")
        return self._batch if self._batch is not None else max(1, n_observed // 16)

    def params(self):
        return {"optimizer": "sgd", "step_size": self.step_size.params(), "batch_size": self._batch}


class DSGD:
    """Distributed (stratified) SGD on a B x B grid: an iteration is one part, its blocks
    in parallel; B iterations make an epoch."""
    kind = "dsgd"

    def __init__(self, blocks, step_size=1e-3, part_order="cyclic", permute=False, n_threads=None):
        self.blocks = _check_blocks(blocks)
        self.step_size = as_step_size(step_size)
        if part_order not in ("cyclic", "random"):
            raise ValueError(f"part_order must be 'cyclic' or 'random', got {part_order!r}")
        self.part_order = part_order
        self.permute = check_flag(permute, "permute")
        self.n_threads = _check_threads(n_threads)

    def grid_blocks(self, shape):
        return self.blocks

    def iterations_per_epoch(self, n_observed):
        return self.blocks

    def batch_size(self, n_observed):
        return 0

    def params(self):
        return {"optimizer": "dsgd", "blocks": self.blocks, "step_size": self.step_size.params(),
                "part_order": self.part_order, "permute": self.permute}


class FitResult:
    """W (I x K), H (K x J), trace (dict of arrays: iteration, epoch, time, loglik, logpost,
    and test_rmse with a test set), params, iterations."""

    def __init__(self, W, H, trace, params, iterations):
        self.W, self.H, self.trace, self.params, self.iterations = W, H, trace, params, iterations

    def predict(self, rows, cols, return_std=False):
        """(W H)_ij of the MAP estimate (return_std=True: with zeros, a point estimate has no
        posterior spread)."""
        rows, cols = entry_ids(rows, cols, (self.W.shape[0], self.H.shape[1]))
        if return_std:
            return self.predict(rows, cols), np.zeros(len(rows))
        return _tweedie.predict_entries(np.ascontiguousarray(self.W), np.ascontiguousarray(self.H.T),
                                        rows, cols)

    def save(self, path):
        import json
        from pymf.result import npz_path
        path = npz_path(path)
        np.savez(path, W=self.W, H=self.H, meta=np.array(json.dumps(
            {"kind": "fit", "params": self.params, "iterations": self.iterations,
             "trace_keys": sorted(self.trace)})),
            **{"trace_" + k: v for k, v in self.trace.items()})
        return path


def fit(model, data, optimizer, n_epochs=10, seed=0, init=None, test=None, trace_every=None,
        progress=None, callback=None):
    """MAP estimate of (W, H) with SGD or DSGD; returns a FitResult.

    n_epochs: passes over the data (an epoch is B DSGD iterations, or N entries of SGD).
    trace_every: iterations between trace points (default: one per epoch).
    A non-finite move raises pymf.DivergenceError (the last finite state attached).
    """
    from pymf.bpmf import BPMF, fit_bpmf
    from pymf.models import TweedieNMF
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable, got {callback!r}")
    if isinstance(model, BPMF):
        for name, value in (("init", init), ("trace_every", trace_every), ("progress", progress)):
            if value is not None:
                raise ValueError(f"{name}= is not supported when fitting a BPMF model")
        return fit_bpmf(model, data, optimizer, n_epochs=n_epochs, seed=seed, test=test,
                        callback=callback)
    if not isinstance(model, TweedieNMF):
        raise ValueError(f"pymf.fit optimises pymf.TweedieNMF or pymf.BPMF models, got {model!r}")
    if not isinstance(optimizer, (SGD, DSGD)):
        raise ValueError(f"optimizer must be pymf.SGD or pymf.DSGD, got {optimizer!r}")
    n_epochs = check_count(n_epochs, "n_epochs", 1)
    observed = as_observed(data)
    model.check_data(observed)
    test = prepare_test(test, observed)
    _, schedule_seed, permute_seed, init_rng = run_seeds(seed)
    n_blocks = optimizer.grid_blocks(observed.shape)
    if n_blocks > min(observed.shape):
        raise ValueError(f"blocks={n_blocks} is larger than the matrix "
                         f"({observed.shape[0]} x {observed.shape[1]})")
    blocked = blocked_data(observed, n_blocks, optimizer.permute, permute_seed)
    grid = GridMap(blocked)
    batch = optimizer.batch_size(blocked.n_observed)
    opt = _sgd.Optimiser(blocked, optimizer.kind, model.rank, model.beta, model.phi, model.prior,
                         model.lam_w, model.lam_h, schedule_seed, batch_size=batch,
                         part_order=optimizer.part_order, n_threads=optimizer.n_threads)
    if init is None:
        W0, H0 = model.init_factors(observed.shape, observed, init_rng)
    else:
        W0, H0 = check_init(init, observed.shape, model.rank, model)
    opt.set_state(*grid.to_grid(W0, H0), 0)
    per_epoch = optimizer.iterations_per_epoch(blocked.n_observed)
    total = n_epochs * per_epoch
    trace_every = per_epoch if trace_every is None else check_count(trace_every, "trace_every", 1)
    keys = ["iteration", "epoch", "time", "loglik", "logpost"] + (["test_rmse"] if test is not None else [])
    trace = {key: [] for key in keys}
    if test is not None:
        test_rows, test_cols = grid.test_indices(test)
    elapsed = 0.0

    def record(t):
        W_grid, Ht_grid, _ = opt.get_state()
        loglik = opt.loglik()
        W, H = grid.from_grid(W_grid, Ht_grid)
        trace["iteration"].append(t)
        trace["epoch"].append(t / per_epoch)
        trace["time"].append(elapsed)
        trace["loglik"].append(loglik)
        trace["logpost"].append(loglik + model.log_prior(W, H))
        if test is not None:
            pred = _tweedie.predict_entries(W_grid, Ht_grid, test_rows, test_cols)
            trace["test_rmse"].append(float(np.sqrt(np.mean((pred - test.values) ** 2))))
        if callback is not None:
            callback({"iteration": t, "time": elapsed, "loglik": loglik})

    record(0)
    bar = None
    if progress_enabled(progress):
        from tqdm import tqdm
        bar = tqdm(total=total, unit="it", desc=optimizer.kind)
    t = 0
    try:
        while t < total:
            stop = min(total, (t // trace_every + 1) * trace_every)
            started = time.perf_counter()
            try:
                opt.run(optimizer.step_size(np.arange(t + 1, stop + 1)))
            except DivergenceError as exc:
                exc.W, exc.H = grid.from_grid(*opt.get_state()[:2])
                raise
            elapsed += time.perf_counter() - started
            if bar is not None:
                bar.update(stop - t)
            t = stop
            record(t)
    finally:
        if bar is not None:
            bar.close()
    W, H = grid.from_grid(*opt.get_state()[:2])
    trace = {k: np.asarray(v) for k, v in trace.items()}
    params = {"model": model.params(), "optimizer": optimizer.params(), "seed": int(seed),
              "n_epochs": n_epochs, "batch_size": batch, "n_blocks": n_blocks}
    return FitResult(W, H, trace, params, t)
