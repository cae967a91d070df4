"""pymf.sample: runs a sampler on a model and data, and returns a SampleResult.

Python orchestrates (validation, seeding, chunks of iterations, thinning, traces,
checkpoints, progress); the C core runs every iteration (the sampler's chain, a
pymf._chain.FactorChain).

Seeding: numpy.random.SeedSequence(seed) spawns the independent streams of a run:
  0: the Philox key of the Langevin noise, 1: the GSL stream of minibatches / random parts,
  2: the row/column permutation of the block grid, 3: the initial state.
The chain is a pure function of (seed, data, settings): the same for any thread count,
and a run resumed from a checkpoint continues exactly as if it had not stopped.
"""
import hashlib
import json
import os
import sys
import time
import warnings

import numpy as np

from pymf import _blocks, _tweedie
from pymf.data import Ratings, as_observed, real_array
from pymf.errors import DivergenceError
from pymf.interrupt import DeferredInterrupt, ForcedInterrupt
from pymf.result import SampleResult, npz_path, open_checkpoint
from pymf.samplers import check_flag, check_seed

_CHUNK_SECONDS = 0.2  # how long one C call may run: bounds the delay of Ctrl-C


def run_seeds(seed):
    check_seed(seed)
    children = np.random.SeedSequence(int(seed)).spawn(4)
    noise = int(children[0].generate_state(1, np.uint64)[0])
    schedule = int(children[1].generate_state(1, np.uint64)[0])
    permute = int(children[2].generate_state(1, np.uint32)[0])
    return noise, schedule, permute, np.random.default_rng(children[3])


def check_count(value, name, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value!r}")
    return int(value)


def progress_enabled(progress):
    if progress is not None:
        return check_flag(progress, "progress")
    return sys.stderr.isatty() and not os.environ.get("CI")


def data_fingerprint(observed):
    """A short hash of the data, stored with checkpoints and results."""
    digest = hashlib.sha256()
    if isinstance(observed, Ratings):
        for arr in (observed.rows, observed.cols, observed.values):
            digest.update(np.ascontiguousarray(arr).tobytes())
    else:
        digest.update(observed.tobytes())
    digest.update(repr(observed.shape).encode())
    return digest.hexdigest()[:16]


def blocked_data(observed, n_blocks, permute, permute_seed):
    """The C core's block layout of validated data."""
    if isinstance(observed, Ratings):
        return _blocks.BlockedData.from_sparse(observed.rows, observed.cols, observed.values,
                                              observed.shape, n_blocks, permute, permute_seed)
    return _blocks.BlockedData.from_dense(observed, n_blocks, permute, permute_seed)


class GridMap:
    """Converts factors between the user's order and the block grid's order."""

    def __init__(self, data):
        self.row_of, self.col_of = data.row_of, data.col_of
        self.row_pos = np.empty_like(self.row_of)
        self.row_pos[self.row_of] = np.arange(len(self.row_of))
        self.col_pos = np.empty_like(self.col_of)
        self.col_pos[self.col_of] = np.arange(len(self.col_of))

    def to_grid(self, W, H):
        """(W, H) in user order -> (W, H^T) in grid order, C-contiguous."""
        return (np.ascontiguousarray(W[self.row_of], dtype=np.float64),
                np.ascontiguousarray(H.T[self.col_of], dtype=np.float64))

    def from_grid(self, W_grid, Ht_grid):
        W = np.empty_like(W_grid)
        W[self.row_of] = W_grid
        H = np.empty((Ht_grid.shape[1], Ht_grid.shape[0]))
        H[:, self.col_of] = Ht_grid.T
        return W, H

    def test_indices(self, test):
        return (np.ascontiguousarray(self.row_pos[test.rows]),
                np.ascontiguousarray(self.col_pos[test.cols]))


def prepare_test(test, observed):
    """Validate a held-out set against the training data; returns Ratings or None."""
    if test is None:
        return None
    try:
        test = as_observed(test)
    except ValueError as exc:
        raise ValueError(f"the test set: {exc}") from None
    if not isinstance(test, Ratings):
        test = Ratings.from_dense(test)
    if test.shape != observed.shape:
        raise ValueError(f"the test set has shape {test.shape}, the data {observed.shape}")
    if test.nnz == 0:
        raise ValueError("the test set is empty: pass test=None to run without one")
    return test


class _Run:
    """The state of one call of sample(): chain, accumulators, trace, sample storage."""

    def __init__(self, model, observed, sampler, n_samples, burnin, thin, seed, init, test,
                 trace_every, sample_dir, keep_samples, checkpoint, checkpoint_every,
                 resuming=False):
        self.resuming = resuming
        self.model, self.observed, self.sampler = model, observed, sampler
        self.n_samples, self.burnin, self.thin = n_samples, burnin, thin
        self.total = burnin + n_samples
        self.n_keep_total = n_samples // thin
        self.trace_every = trace_every
        self.keep_samples = keep_samples
        self.sample_dir = sample_dir
        self.checkpoint = checkpoint
        self.checkpoint_every = checkpoint_every
        self.shape = observed.shape
        n_rows, n_cols = self.shape
        K = model.rank
        noise_seed, schedule_seed, permute_seed, init_rng = run_seeds(seed)
        n_blocks = sampler.grid_blocks(self.shape)
        if n_blocks > min(n_rows, n_cols):
            raise ValueError(
                f"blocks={n_blocks} is larger than the matrix ({n_rows} x {n_cols}): each of the "
                "B row and column pieces needs at least one row / column")
        self.data = blocked_data(observed, n_blocks, sampler.permute, permute_seed)
        self.grid = GridMap(self.data)
        batch = sampler.batch_size(self.data.n_observed)
        self.chain = sampler.make_chain(self.data, model, noise_seed, schedule_seed, batch)
        if init is None:
            W0, H0 = model.init_factors(self.shape, observed, init_rng)
        else:
            W0, H0 = check_init(init, self.shape, K, model)
        self.chain.set_state(*self.grid.to_grid(W0, H0), 0)

        self.params = {"model": model.params(), "sampler": sampler.params(), "seed": int(seed),
                       "n_samples": n_samples, "burnin": burnin, "thin": thin,
                       "shape": list(self.shape), "n_observed": self.data.n_observed,
                       "n_blocks": n_blocks, "batch_size": batch,
                       "data": data_fingerprint(observed)}
        self.test = test
        if test is not None:
            self.test_rows, self.test_cols = self.grid.test_indices(test)
            self.test_pred_sum = np.zeros(test.nnz)
            self.params["test"] = {"nnz": test.nnz}
        self.W_sum = np.zeros((n_rows, K))
        self.H_sum = np.zeros((K, n_cols))
        self.n_kept = 0
        self.trace = {key: [] for key in self._trace_keys()}
        self.elapsed = 0.0
        self.W_samples = self.H_samples = None
        self.sample_iterations = np.zeros(self.n_keep_total, dtype=np.int64)
        if keep_samples:
            self._allocate_samples()

    def _trace_keys(self):
        keys = ["iteration", "time", "loglik", "logpost"]
        if self.test is not None:
            keys += ["test_rmse", "test_rmse_sample"]
        return keys

    def _allocate_samples(self):
        K = self.model.rank
        n_rows, n_cols = self.shape
        shape_w = (self.n_keep_total, n_rows, K)
        shape_h = (self.n_keep_total, K, n_cols)
        if self.sample_dir is None:
            self.W_samples = np.zeros(shape_w)
            self.H_samples = np.zeros(shape_h)
            return
        os.makedirs(self.sample_dir, exist_ok=True)
        open_memmap = np.lib.format.open_memmap
        paths = [os.path.join(self.sample_dir, name) for name in ("W_samples.npy", "H_samples.npy")]
        if self.resuming:
            # the interrupted run's streamed samples: reopen, never truncate
            for path in paths:
                if not os.path.exists(path):
                    raise ValueError(f"resuming from a checkpoint, but the streamed samples "
                                     f"{path!r} are missing")
            self.W_samples = open_memmap(paths[0], mode="r+")
            self.H_samples = open_memmap(paths[1], mode="r+")
            if self.W_samples.shape != shape_w or self.H_samples.shape != shape_h:
                raise ValueError(f"the streamed samples in {self.sample_dir!r} do not match this run")
            return
        self.W_samples = open_memmap(paths[0], mode="w+", dtype=np.float64, shape=shape_w)
        self.H_samples = open_memmap(paths[1], mode="w+", dtype=np.float64, shape=shape_h)

    def _from_grid(self, W_grid, Ht_grid):
        return self.grid.from_grid(W_grid, Ht_grid)

    def state(self):
        W_grid, Ht_grid, t = self.chain.get_state()
        return W_grid, Ht_grid, t

    # ---- events ----
    def keep(self, t):
        W_grid, Ht_grid, _ = self.chain.get_state()
        W, H = self._from_grid(W_grid, Ht_grid)
        self.W_sum += W
        self.H_sum += H
        if self.W_samples is not None:
            self.W_samples[self.n_kept] = W
            self.H_samples[self.n_kept] = H
        self.sample_iterations[self.n_kept] = t
        if self.test is not None:
            self.test_pred_sum += _tweedie.predict_entries(W_grid, Ht_grid, self.test_rows, self.test_cols)
        self.n_kept += 1

    def record_trace(self, t, loglik=None):
        W_grid, Ht_grid, _ = self.chain.get_state()
        if loglik is None:
            loglik = self.chain.loglik()
        W, H = self._from_grid(W_grid, Ht_grid)
        self.trace["iteration"].append(t)
        self.trace["time"].append(self.elapsed)
        self.trace["loglik"].append(loglik)
        self.trace["logpost"].append(loglik + self.model.log_prior(W, H))
        if self.test is not None:
            current = _tweedie.predict_entries(W_grid, Ht_grid, self.test_rows, self.test_cols)
            mean = self.test_pred_sum / self.n_kept if self.n_kept else current
            self.trace["test_rmse"].append(float(np.sqrt(np.mean((mean - self.test.values) ** 2))))
            self.trace["test_rmse_sample"].append(
                float(np.sqrt(np.mean((current - self.test.values) ** 2))))

    def is_kept(self, t):
        return t > self.burnin and (t - self.burnin) % self.thin == 0

    def next_event(self, t):
        """The first iteration after t at which Python has something to do."""
        events = [self.total]
        if t < self.burnin + self.thin * self.n_keep_total:
            first = max(t + 1, self.burnin + self.thin)
            events.append(first + (-(first - self.burnin)) % self.thin)
        events.append((t // self.trace_every + 1) * self.trace_every)
        if self.checkpoint is not None:
            events.append((t // self.checkpoint_every + 1) * self.checkpoint_every)
        return min(events)

    # ---- result and checkpoints ----
    def result(self, interrupted=False):
        n = max(self.n_kept, 1)
        W_grid, Ht_grid, _ = self.chain.get_state()
        if self.n_kept:
            W_mean, H_mean = self.W_sum / n, self.H_sum / n
        else:  # nothing kept yet (e.g. interrupted in burn-in): report the current state
            W_mean, H_mean = self._from_grid(W_grid, Ht_grid)
        trace = {key: np.asarray(value, dtype=np.int64 if key == "iteration" else np.float64)
                 for key, value in self.trace.items()}
        params = dict(self.params)
        params["threads"] = self.sampler.n_threads or None
        return SampleResult(W_mean, H_mean, self.W_samples, self.H_samples,
                            self.sample_iterations[: self.n_kept], trace, params, self.n_kept,
                            interrupted, iterations=self.chain.iteration)

    def _fingerprint(self):
        keys = ("model", "sampler", "seed", "n_samples", "burnin", "thin", "shape", "n_observed",
                "n_blocks", "batch_size", "data")
        return json.dumps({k: self.params[k] for k in keys}, sort_keys=True)

    def save_checkpoint(self):
        W_grid, Ht_grid, t = self.chain.get_state()
        arrays = {"W_grid": W_grid, "Ht_grid": Ht_grid, "t": np.array(t),
                  "n_kept": np.array(self.n_kept), "W_sum": self.W_sum, "H_sum": self.H_sum,
                  "elapsed": np.array(self.elapsed),
                  "sample_iterations": self.sample_iterations[: self.n_kept],
                  "fingerprint": np.array(self._fingerprint())}
        for key, value in self.trace.items():
            arrays["trace_" + key] = np.asarray(value)
        if self.test is not None:
            arrays["test_pred_sum"] = self.test_pred_sum
        if self.W_samples is not None:
            if self.sample_dir is None:
                arrays["W_samples"] = self.W_samples[: self.n_kept]
                arrays["H_samples"] = self.H_samples[: self.n_kept]
            else:
                self.W_samples.flush()
                self.H_samples.flush()
        tmp = self.checkpoint + ".tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, self.checkpoint)  # atomic: a crash never leaves half a checkpoint

    def restore_checkpoint(self):
        with open_checkpoint(self.checkpoint) as ck:
            if str(ck["fingerprint"]) != self._fingerprint():
                raise ValueError(
                    f"the checkpoint {self.checkpoint!r} was written by a different run (model, "
                    "sampler, seed, data or run length differ); remove it or pass another path")
            self.chain.set_state(ck["W_grid"], ck["Ht_grid"], int(ck["t"]))
            self.n_kept = int(ck["n_kept"])
            self.W_sum = ck["W_sum"].copy()
            self.H_sum = ck["H_sum"].copy()
            self.elapsed = float(ck["elapsed"])
            self.sample_iterations[: self.n_kept] = ck["sample_iterations"]
            for key in self.trace:
                self.trace[key] = list(ck["trace_" + key])
            if self.test is not None:
                self.test_pred_sum = ck["test_pred_sum"].copy()
            if self.W_samples is not None and self.sample_dir is None:
                self.W_samples[: self.n_kept] = ck["W_samples"]
                self.H_samples[: self.n_kept] = ck["H_samples"]


def check_init(init, shape, rank, model):
    if isinstance(init, dict):
        raise ValueError("init must be a pair (W0, H0) of arrays, got a dict")
    try:
        W0, H0 = init
    except (TypeError, ValueError):
        raise ValueError("init must be a pair (W0, H0)") from None
    W0 = real_array(W0, "init's W0")
    H0 = real_array(H0, "init's H0")
    if W0.shape != (shape[0], rank) or H0.shape != (rank, shape[1]):
        raise ValueError(f"init must be W0 of shape {(shape[0], rank)} and H0 of shape "
                         f"{(rank, shape[1])}, got {W0.shape} and {H0.shape}")
    if not (np.all(np.isfinite(W0)) and np.all(np.isfinite(H0))):
        raise ValueError("init contains NaN or inf")
    if model.non_negative and (W0.min() < 0 or H0.min() < 0):
        raise ValueError("init must be non-negative for a non-negative model")
    with np.errstate(over="ignore", invalid="ignore"):
        if not np.all(np.isfinite(W0 @ H0)):
            raise ValueError("init is too large: W0 @ H0 overflows")
    return W0, H0


def sample(model, data, sampler, n_samples, burnin=0, thin=1, seed=0, init=None, test=None,
           trace_every=None, sample_dir=None, keep_samples=True, checkpoint=None,
           checkpoint_every=None, progress=None, callback=None, burnin_rmse=None):
    """Run `sampler` on `model` given `data`; return a SampleResult.

    Runs `burnin` iterations, then `n_samples` iterations, keeping every `thin`-th of the
    latter. `data`: a 2-D array (all entries observed), a pymf.Ratings or a scipy.sparse
    matrix (stored entries observed). `test`: held-out Ratings for the RMSE trace.
    `trace_every`: iterations between trace points (default: thin). `sample_dir`: stream the
    kept samples to .npy files there instead of memory. `checkpoint`: a .npz path; if it
    exists the run resumes from it, and it is rewritten every `checkpoint_every` iterations
    (default: a tenth of the run), on Ctrl-C and at the end. Ctrl-C returns what was sampled
    so far (result.interrupted is True); it takes effect where the chain and the
    bookkeeping agree, so the checkpoint it writes resumes the same chain (a second Ctrl-C
    stops at once and writes nothing). A non-finite update raises pymf.DivergenceError,
    which carries the last finite state and the partial result.

    For a pymf.BPMF model (sampled by pymf.DSGLD, pymf.SGLD or pymf.BPMFGibbs) the units
    are rounds or sweeps, the result is a BPMFResult, `init` is a dict of U, V (a, b) and
    `burnin_rmse` may end burn-in early: see pymf.bpmf.sample_bpmf.
    """
    from pymf.bpmf import BPMF
    from pymf.models import TweedieNMF
    from pymf.hamcmc import HAMCMC, SGRLD, LinearGaussian, PreconditionedSGLD, sample_linear
    if isinstance(model, LinearGaussian):  # the HAMCMC paper's model: pymf.hamcmc
        for name, value in (("test", test), ("sample_dir", sample_dir), ("checkpoint", checkpoint),
                            ("checkpoint_every", checkpoint_every), ("burnin_rmse", burnin_rmse)):
            if value is not None:
                raise ValueError(f"{name}= is not supported for LinearGaussian models")
        return sample_linear(model, data, sampler, n_samples, burnin=burnin, thin=thin, seed=seed,
                             init=init, trace_every=trace_every, keep_samples=keep_samples,
                             callback=callback)
    if isinstance(sampler, (HAMCMC, PreconditionedSGLD, SGRLD)):
        raise ValueError(f"{type(sampler).__name__} samples pymf.LinearGaussian models only (HAMCMC "
                         "for matrix factorisation is not implemented yet)")
    if not isinstance(model, (TweedieNMF, BPMF)):
        raise ValueError(f"model must be pymf.TweedieNMF, pymf.BPMF or pymf.LinearGaussian, "
                         f"got {model!r}")
    if isinstance(model, BPMF):  # Bayesian PMF: pymf.bpmf (burnin_rmse is for it only)
        return _sample_bpmf(model, data, sampler, n_samples, burnin, thin, seed, init, test,
                            trace_every, sample_dir, keep_samples, checkpoint, checkpoint_every,
                            progress, callback, burnin_rmse)
    if not hasattr(sampler, "make_chain"):
        raise ValueError(f"unknown sampler {sampler!r}: use pymf.LD, pymf.SGLD, pymf.PSGLD or "
                         "pymf.Gibbs (pymf.SGD / pymf.DSGD optimise: use pymf.fit)")
    n_samples = check_count(n_samples, "n_samples", 1)
    burnin = check_count(burnin, "burnin", 0)
    thin = check_count(thin, "thin", 1)
    if thin > n_samples:
        raise ValueError(f"thin={thin} is larger than n_samples={n_samples}: nothing would be kept")
    trace_every = thin if trace_every is None else check_count(trace_every, "trace_every", 1)
    observed = as_observed(data)
    model.check_data(observed)
    test = prepare_test(test, observed)
    if getattr(sampler, "backend", "cpu") == "cuda":
        from pymf import gpu
        reason = gpu.available()
        if reason is not True:
            raise RuntimeError(f"backend='cuda' was requested but the GPU path is unusable: {reason}")
    if checkpoint is not None:
        checkpoint = npz_path(checkpoint, "checkpoint")
    if callback is not None and not callable(callback):
        raise ValueError(f"callback must be callable, got {callback!r}")
    keep_samples = check_flag(keep_samples, "keep_samples")
    total = burnin + n_samples
    if checkpoint_every is None:
        checkpoint_every = max(1, total // 10)
    checkpoint_every = check_count(checkpoint_every, "checkpoint_every", 1)

    resuming = checkpoint is not None and os.path.exists(checkpoint)
    run = _Run(model, observed, sampler, n_samples, burnin, thin, seed, init, test, trace_every,
               sample_dir, keep_samples, checkpoint, checkpoint_every, resuming)
    if resuming:
        run.restore_checkpoint()
    t = run.chain.iteration
    if t == 0:
        run.record_trace(0)

    progress_bar = None
    if progress_enabled(progress):
        from tqdm import tqdm
        progress_bar = tqdm(total=total, initial=t, unit="it", desc=sampler.kind)
    chunk = 1
    interrupted = False
    interrupt = DeferredInterrupt()
    try:
        with interrupt:
            while t < total:
                # Ctrl-C takes effect here, where the chain and its bookkeeping agree
                interrupt.check()
                stop = min(run.next_event(t), t + chunk)
                steps = sampler.step_size(np.arange(t + 1, stop + 1))
                started = time.perf_counter()
                try:
                    run.chain.run(steps)
                except DivergenceError as exc:
                    W_grid, Ht_grid, _ = run.chain.get_state()
                    exc.W, exc.H = run._from_grid(W_grid, Ht_grid)
                    exc.result = run.result(interrupted=True)
                    raise
                spent = time.perf_counter() - started
                run.elapsed += spent
                # adapt the chunk so that one C call lasts about _CHUNK_SECONDS
                per_iteration = spent / (stop - t)
                chunk = int(min(max(1, _CHUNK_SECONDS / max(per_iteration, 1e-9)), 100000))
                if progress_bar is not None:
                    progress_bar.update(stop - t)
                t = stop
                traced = t % trace_every == 0 or t == total
                loglik = run.chain.loglik() if traced else None
                if traced and not np.isfinite(loglik):
                    # W and H are finite but W H overflows (huge priors, data or steps):
                    # stop before this state is kept or traced
                    exc = DivergenceError(
                        f"the chain diverged at iteration {t}: its log-likelihood is not finite "
                        "(W H overflows; extreme data, priors or step sizes?)", iteration=t)
                    W_grid, Ht_grid, _ = run.chain.get_state()
                    exc.W, exc.H = run._from_grid(W_grid, Ht_grid)
                    exc.result = run.result(interrupted=True)
                    raise exc
                if run.is_kept(t):
                    run.keep(t)
                if traced:
                    run.record_trace(t, loglik)
                    if callback is not None:
                        callback({"iteration": t, "time": run.elapsed, "loglik": run.trace["loglik"][-1]})
                if checkpoint is not None and (t % checkpoint_every == 0 or t == total):
                    run.save_checkpoint()
    except ForcedInterrupt:
        raise
    except KeyboardInterrupt:
        interrupted = True
        warnings.warn(f"interrupted at iteration {run.chain.iteration} of {total}; returning the "
                      f"{run.n_kept} samples kept so far", RuntimeWarning, stacklevel=2)
        if checkpoint is not None:
            run.save_checkpoint()
    finally:
        if progress_bar is not None:
            progress_bar.close()
    return run.result(interrupted=interrupted)


def _sample_bpmf(model, data, sampler, n_samples, burnin, thin, seed, init, test, trace_every,
                 sample_dir, keep_samples, checkpoint, checkpoint_every, progress, callback,
                 burnin_rmse):
    """pymf.sample for a BPMF model (pymf.bpmf.sample_bpmf): SGLD means DSGLD with one chain
    and one block; the options that only the NMF samplers have are refused by name."""
    from pymf.bpmf import DSGLD, sample_bpmf
    from pymf.samplers import SGLD
    if isinstance(sampler, SGLD):
        n = model.check_data(data).nnz
        sampler = DSGLD(chains=1, split="square", blocks=1, batch_size=sampler.batch_size(n),
                        step_size=sampler.step_size, workers=sampler.n_threads or None)
    return sample_bpmf(model, data, sampler, n_samples, burnin=burnin, thin=thin, seed=seed,
                       test=test, trace_every=trace_every, keep_samples=keep_samples,
                       progress=progress, callback=callback, burnin_rmse=burnin_rmse, init=init,
                       checkpoint=checkpoint, checkpoint_every=checkpoint_every,
                       sample_dir=sample_dir)
