"""The one run loop of every family: burn-in, thinning, kept draws (in memory or streamed
to .npy), running moments, traces, progress, callbacks, checkpoints, Ctrl-C and divergence.

A family hands it a *kernel* (see pymf.engine.kernel for the protocol): an object that runs
units (iterations, rounds, sweeps) of its chains in the C core and reports on its state.
The loop only decides when to run, keep, trace and checkpoint; it never looks inside a
state. Chains are a pure function of the seed and the units run, so how the loop cuts the
run into C calls (by events, and so that one call lasts about CHUNK_SECONDS) never changes
a bit, and a run resumed from a checkpoint equals one that never stopped.
"""
import json
import math
import os
import sys
import time
import warnings
import zipfile

import numpy as np

from pymf.engine.checks import check_callback, check_count, check_flag
from pymf.engine.interrupt import DeferredInterrupt, ForcedInterrupt
from pymf.engine.moments import RunningMoments
from pymf.engine.storage import (DrawStore, check_checkpoint, check_key, check_writable, npz_path,
                                 open_checkpoint, save_npz)
from pymf.errors import DivergenceError, user_stacklevel

CHUNK_SECONDS = 0.2  # how long one C call may run: bounds the delay of Ctrl-C and progress


def progress_enabled(progress):
    """progress=None: a bar on a terminal, none in CI (CI set) or a pipe."""
    if progress is not None:
        return check_flag(progress, "progress")
    return sys.stderr.isatty() and not os.environ.get("CI")


def digest(*values):
    """A short hash of arrays (or objects with .rows/.cols/.values/.shape), for fingerprints
    of data in checkpoints and results."""
    # imported here: hashlib loads OpenSSL's libcrypto (3.4 MB resident), which a run
    # without a checkpoint never needs
    import hashlib
    h = hashlib.sha256()
    for value in values:
        if value is None:
            h.update(b"none")
            continue
        if hasattr(value, "rows") and hasattr(value, "values"):
            arrays = (value.rows, value.cols, value.values, np.asarray(value.shape))
        elif isinstance(value, dict):
            arrays = [np.asarray(value[key]) for key in sorted(value)]
        else:
            arrays = (np.asarray(value),)
        for array in arrays:
            data = np.ascontiguousarray(array)
            # the bytes in place (tobytes() would copy them: 80 MB for 10^7 int64 indices)
            h.update(data.reshape(-1).view(np.uint8) if data.dtype != object
                     else data.tobytes())
            h.update(repr(np.shape(array)).encode())
    return h.hexdigest()[:16]


class Plan:
    """How long a run lasts and what it records, in the kernel's units.

    burnin units first (with burnin_until, burn-in ends at the first trace point where
    burnin_until(trace point) is true, after at most burnin units), then n_samples units,
    of which every thin-th is kept. A trace point every trace_every units and at the end
    (trace_at_start: also before the first unit); a checkpoint every checkpoint_every units.
    """

    def __init__(self, n_samples, burnin, thin, trace_every, checkpoint_every=None,
                 burnin_until=None, trace_at_start=False):
        self.n_samples, self.burnin, self.thin = n_samples, burnin, thin
        self.trace_every = check_count(trace_every, "trace_every", 1)
        total = burnin + n_samples
        self.checkpoint_every = check_count(
            max(1, total // 10) if checkpoint_every is None else checkpoint_every,
            "checkpoint_every", 1)
        self.burnin_until = burnin_until
        self.trace_at_start = trace_at_start

    @property
    def n_keep(self):
        return self.n_samples // self.thin

    def settings(self):
        return {"n_samples": self.n_samples, "burnin": self.burnin, "thin": self.thin,
                "trace_every": self.trace_every}


def checkpoint_key(fingerprint, plan, seed, keep_draws=True, sample_dir=None):
    """What a checkpoint is checked against: the run's fingerprint (JSON-able settings that
    decide the chain, with the data's digest), its plan, its seed and where its kept draws
    live (a checkpoint of streamed draws holds none itself). Two runs with the same key
    write interchangeable checkpoints, whatever runs them (threads, or MPI ranks)."""
    return json.dumps({"run": fingerprint, "plan": plan.settings(), "seed": seed,
                       "streamed": sample_dir is not None and bool(keep_draws),
                       "keep": bool(keep_draws)}, sort_keys=True, default=str)


class Record:
    """What a run produced, handed to the family's result: kept draws (draw, chain, ...),
    the unit of each, running moments, per-draw statistics (draw, chain), the trace."""

    def __init__(self, run, interrupted):
        n = run.n_kept
        self.n_kept = n
        self.draws = run.store.head(n) if run.store is not None else None
        self.draw_units = run.draw_units[:n].copy()
        self.moments = run.moments
        self.test_moments = run.test_moments
        self.draw_stats = {key: np.asarray(value, dtype=np.float64).reshape(-1, run.kernel.n_chains)
                           for key, value in run.draw_stats.items()}
        self.trace = {key: np.asarray(value, dtype=np.int64 if key == "iteration" else np.float64)
                      for key, value in run.trace.items()}
        self.units = run.t
        self.burnin_end = run.burnin_end
        self.elapsed = run.elapsed
        self.interrupted = bool(interrupted)
        self.seed = run.seed


class _Run:
    def __init__(self, kernel, plan, seed, keep_draws, sample_dir, moments, test_values,
                 resuming, write_files=True):
        self.kernel, self.plan, self.seed = kernel, plan, seed
        self.write_files = write_files
        self.t = kernel.counter
        self.n_after = 0  # units run since burn-in ended
        self.burnin_end = None if plan.burnin_until is not None else plan.burnin
        self.n_kept = 0
        self.elapsed = 0.0
        shapes = kernel.draw_shapes()
        # numpy's MemoryError names only an array's shape, not the option behind it
        kept = f"keeping {plan.n_keep} draws (n_samples {plan.n_samples}, thin {plan.thin})"
        try:
            self.draw_units = np.zeros(plan.n_keep, dtype=np.int64)
        except MemoryError as exc:
            raise MemoryError(f"{kept} does not fit in memory even as one unit number a "
                              f"draw ({exc}); a smaller n_samples or a larger thin") from None
        try:
            self.store = (DrawStore(shapes, plan.n_keep, sample_dir, resuming)
                          if keep_draws and write_files else None)
        except MemoryError as exc:
            raise MemoryError(
                f"{kept} does not fit in memory ({exc}); keep fewer (a smaller n_samples or a "
                f"larger thin), stream them to disk (sample_dir=) or keep none "
                f"(keep_samples=False: the running means are still computed)") from None
        self.moments = {name: RunningMoments(tuple(shapes[name][1:]), covariance=cov)
                        for name, cov in moments.items()}
        self.test_values = test_values
        self.test_moments = None if test_values is None else RunningMoments((len(test_values),))
        self.draw_stats = {}
        self.trace = {"iteration": [], "time": []}

    # ---- events ----
    def keep(self, draw):
        """A kept draw of every chain (draw: name -> (chains, ...))."""
        kernel = self.kernel
        if self.store is not None:
            self.store.put(self.n_kept, draw)
        for name, acc in self.moments.items():
            for value in draw[name]:
                acc.add(value)
        if self.test_moments is not None:
            for prediction in kernel.test_predictions():
                self.test_moments.add(prediction)
        for key, value in kernel.draw_stats().items():
            self.draw_stats.setdefault(key, []).extend(np.asarray(value, dtype=np.float64))
        self.draw_units[self.n_kept] = self.t
        self.n_kept += 1

    def test_mean(self):
        if self.test_moments is None or self.test_moments.count == 0:
            return None
        return self.test_moments.mean

    def record_trace(self):
        point = self.kernel.trace_point(self)
        self.trace["iteration"].append(self.t)
        self.trace["time"].append(self.elapsed)
        for key, value in point.items():
            self.trace.setdefault(key, []).append(value)
        return point

    # ---- checkpoints ----
    def save(self, path, fingerprint):
        snapshot = self.kernel.snapshot()  # (collective in a kernel spread over processes)
        if not self.write_files:
            return
        arrays = {"fingerprint": np.array(fingerprint),
                  "counters": np.array([self.t, self.n_after,
                                        -1 if self.burnin_end is None else self.burnin_end,
                                        self.n_kept]),
                  "elapsed": np.array(self.elapsed),
                  "draw_units": self.draw_units[:self.n_kept]}
        for key, value in snapshot.items():
            arrays["kernel_" + key] = value
        if self.store is not None:
            arrays.update(self.store.snapshot(self.n_kept))
        for name, acc in self.moments.items():
            arrays.update(acc.snapshot(f"moments_{name}_"))
        if self.test_moments is not None:
            arrays.update(self.test_moments.snapshot("testmoments_"))
        for key, value in self.draw_stats.items():
            arrays["stat_" + key] = np.asarray(value, dtype=np.float64)
        for key, value in self.trace.items():
            arrays["trace_" + key] = np.asarray(value, dtype=np.float64)
        save_npz(path, arrays)

    def restore(self, path, fingerprint):
        with open_checkpoint(path) as ck:
            check_key(ck, path, fingerprint)
            try:
                self._restore_from(ck)
            except (KeyError, IndexError, TypeError, ValueError, OSError, EOFError,
                    zipfile.BadZipFile) as exc:
                # the fingerprint matched, so the file was written by this run and then
                # damaged or edited: a missing array or one of the wrong shape surfaced
                # as a bare KeyError or IndexError from whichever kernel read it
                raise ValueError(f"the checkpoint {path!r} is damaged ({type(exc).__name__}: "
                                 f"{exc}); remove it or pass another path") from exc

    def _restore_from(self, ck):
        self.kernel.restore({key[7:]: ck[key] for key in ck.files if key.startswith("kernel_")})
        counters = [int(x) for x in np.asarray(ck["counters"]).reshape(-1)]
        if len(counters) != 4 or min(counters[0], counters[1], counters[3]) < 0 or \
                counters[3] > len(self.draw_units):
            raise ValueError(f"counters {counters} are not those of this run")
        self.t, self.n_after, burnin_end, self.n_kept = counters
        self.burnin_end = None if burnin_end < 0 else burnin_end
        self.elapsed = float(ck["elapsed"])
        self.draw_units[:self.n_kept] = ck["draw_units"]
        if self.store is not None:
            self.store.restore(ck, self.n_kept)
        for name, acc in self.moments.items():
            acc.restore(ck, f"moments_{name}_")
        if self.test_moments is not None:
            self.test_moments.restore(ck, "testmoments_")
        self.draw_stats = {key[5:]: list(ck[key]) for key in ck.files if key.startswith("stat_")}
        self.trace = {key[6:]: list(ck[key]) for key in ck.files if key.startswith("trace_")}
        self.trace["iteration"] = [int(x) for x in self.trace["iteration"]]


def run(kernel, plan, *, seed, step_size=None, keep_draws=True, sample_dir=None, moments=None,
        test_values=None, checkpoint=None, fingerprint=None, progress=None, callback=None,
        make_result, desc="sampling", write_files=True):
    """Run `kernel` through `plan`; returns make_result(Record).

    step_size: a schedule (callable of the 1-based unit numbers) or None for samplers that
    take none. moments: {variable: covariance?} to keep running moments of. test_values: the
    held-out values whose predictions (kernel.test_predictions()) are averaged over kept
    draws. checkpoint: a .npz path: if it exists the run resumes from it; it is rewritten
    every plan.checkpoint_every units, at the end, when the callback stops the run and on
    Ctrl-C. fingerprint: JSON-able settings that decide the chain (with the data's digest):
    a checkpoint of another run is refused. callback(info) -> True stops the run. Ctrl-C
    returns what was sampled so far (interrupted=True); it takes effect where the chain
    and this bookkeeping agree, so the checkpoint it writes resumes the same chain (a
    second Ctrl-C stops at once and writes nothing). A non-finite state raises
    pymf.DivergenceError carrying the partial result (.result) and the last finite state.

    write_files=False: one of several processes that run one chain together (the MPI ring's
    ranks other than 0). It runs this same loop, cut at the same units, and makes the same
    kernel calls (which may be collective: kernel.agree and kernel.agree_stop make every
    process take the same decisions), reads the checkpoint to resume, but writes no file
    (checkpoint, streamed draws), shows no bar and warns nothing; the process with
    write_files=True does all of that.
    """
    check_callback(callback)
    keep_draws = check_flag(keep_draws, "keep_samples")
    if checkpoint is not None:
        checkpoint = npz_path(checkpoint, "checkpoint")
        fingerprint = checkpoint_key(fingerprint, plan, seed, keep_draws, sample_dir)
    resuming = checkpoint is not None and os.path.exists(checkpoint)
    if resuming:
        # before any file is opened for the draws: a checkpoint of another run is refused
        # as such (not as "streamed samples missing", where only sample_dir= was added)
        check_checkpoint(checkpoint, fingerprint)
    elif checkpoint is not None and write_files:
        # a tenth of the run in, an unwritable checkpoint ended it, every draw lost
        check_writable(os.path.dirname(os.path.abspath(checkpoint)), "checkpoint")
    state = _Run(kernel, plan, seed, keep_draws, sample_dir, moments or {}, test_values, resuming,
                 write_files)
    if resuming:
        state.restore(checkpoint, fingerprint)
    elif plan.trace_at_start:
        state.record_trace()
    per_unit = getattr(kernel, "per_unit_draws", False)
    # the units step_size="auto"'s pilot ran from the start (a resumed run is past them)
    pilot = None if resuming else getattr(kernel, "kept_pilot", None)
    if pilot is not None:
        kernel.kept_pilot = None
    n_samples, thin, trace_every = plan.n_samples, plan.thin, plan.trace_every
    total_max = plan.burnin + n_samples

    def diverged(exc):
        exc.result = make_result(Record(state, interrupted=True))
        if getattr(exc, "state", None) is None:
            exc.state = kernel.last_finite_state() if hasattr(kernel, "last_finite_state") else None
        return exc

    def save_checkpoint():
        # a write that fails (a full disk, a folder removed or gone read-only) used to end
        # the run and lose every draw in memory: the run goes on, the file keeps the last
        # checkpoint written whole
        try:
            state.save(checkpoint, fingerprint)
        except OSError as exc:
            warnings.warn(f"the checkpoint {checkpoint!r} could not be written at "
                          f"{kernel.unit} {state.t} ({type(exc).__name__}: {exc}); the run goes "
                          "on, and the file holds the last checkpoint written",
                          RuntimeWarning, stacklevel=user_stacklevel())

    bar = None
    if write_files and progress_enabled(progress):
        from tqdm import tqdm
        bar = tqdm(total=total_max, initial=state.t, unit=kernel.unit, desc=desc)
    chunk = 1
    interrupted = False
    interrupt = DeferredInterrupt()
    try:
        with interrupt:
            while True:
                # Ctrl-C takes effect here, where the chain and its bookkeeping agree (and, for
                # a chain spread over processes, where they all agree to stop; they also
                # agree on the length of the next call, so that they cut the run alike)
                requested, chunk = kernel.agree(interrupt.requested, chunk)
                if requested:
                    raise KeyboardInterrupt
                t = state.t
                if state.burnin_end is not None and state.n_after >= n_samples:
                    break
                if state.burnin_end is None and t >= plan.burnin:
                    criterion = getattr(plan.burnin_until, "criterion", "its criterion")
                    if write_files:
                        warnings.warn(f"burn-in did not reach {criterion} within "
                                      f"{plan.burnin} {kernel.unit}s; sampling starts anyway",
                                      RuntimeWarning, stacklevel=user_stacklevel())
                    state.burnin_end = t
                    continue
                sampling = state.burnin_end is not None and t >= state.burnin_end
                if not sampling:
                    k = min(trace_every - t % trace_every,
                            (plan.burnin if state.burnin_end is None else state.burnin_end) - t)
                else:
                    k = min(trace_every - t % trace_every, n_samples - state.n_after)
                    if not per_unit:
                        k = min(k, thin - state.n_after % thin)
                if checkpoint is not None:
                    k = min(k, plan.checkpoint_every - t % plan.checkpoint_every)
                taken = pilot is not None and _takes_pilot(kernel, pilot, t, k, step_size,
                                                           per_unit)
                k = len(pilot.steps) if taken else min(k, chunk)
                steps = (pilot.steps if taken else np.zeros(k) if step_size is None
                         else np.ascontiguousarray(step_size(np.arange(t + 1, t + k + 1)),
                                                   dtype=np.float64))
                started = time.perf_counter()
                if taken:
                    # the pilot's units are the chain's first: their time is the run's
                    started -= pilot.seconds
                    unit_draws = None
                else:
                    try:
                        unit_draws = kernel.run(steps)
                    except DivergenceError as exc:
                        done = getattr(exc, "draws", None)
                        if sampling and done is not None:
                            _keep_units(state, done, t, thin)
                        raise diverged(exc)
                pilot = None
                spent = time.perf_counter() - started
                # adapt the chunk so that one C call lasts about CHUNK_SECONDS
                chunk = int(min(max(1, CHUNK_SECONDS / max(spent / k, 1e-9)), 100000))
                traced = (t + k) % trace_every == 0 or (sampling and state.n_after + k >= n_samples)
                if traced:
                    # a state the trace finds not finite (e.g. W H overflows) is never kept
                    try:
                        kernel.check_state()
                    except DivergenceError as exc:
                        raise diverged(exc)
                if sampling:
                    if per_unit:
                        _keep_units(state, unit_draws, t, thin)
                    else:
                        state.t = t + k
                        state.n_after += k
                        if state.n_after % thin == 0:
                            state.keep(kernel.draw())
                else:
                    state.t = t + k
                state.elapsed += time.perf_counter() - started
                if bar is not None:
                    bar.update(k)
                t = state.t
                finished = state.burnin_end is not None and state.n_after >= n_samples
                point = None
                if traced:
                    try:
                        point = state.record_trace()
                    except DivergenceError as exc:
                        raise diverged(exc)
                    if state.burnin_end is None and plan.burnin_until(point):
                        state.burnin_end = t
                stop = False
                if point is not None:
                    if callback is not None:
                        info = {"iteration": t, "unit": kernel.unit, "time": state.elapsed,
                                "n_kept": state.n_kept, **point}
                        # True, or numpy's True (a comparison of the trace's values):
                        # numpy.True_ is not True, and that stop was ignored
                        answer = callback(info)
                        stop = answer is True or (isinstance(answer, np.bool_) and bool(answer))
                    stop = kernel.agree_stop(stop)
                if checkpoint is not None and (t % plan.checkpoint_every == 0 or finished or stop):
                    save_checkpoint()
                if stop:
                    break
    except ForcedInterrupt:
        raise
    except KeyboardInterrupt:
        interrupted = True
        if write_files:
            warnings.warn(f"interrupted at {kernel.unit} {state.t} of {total_max}; returning the "
                          f"{state.n_kept} draws kept so far", RuntimeWarning,
                          stacklevel=user_stacklevel())
        if checkpoint is not None:
            save_checkpoint()
    finally:
        if bar is not None:
            bar.close()
    return make_result(Record(state, interrupted))


def _takes_pilot(kernel, pilot, t, k, step_size, per_unit):
    """Whether the loop's first call takes the pilot's units (kernel.take_pilot) instead of
    running them: at the start, where the loop would run at least as many units before its
    first trace point, kept draw, end of burn-in or checkpoint (nothing is observed inside
    them), with the same steps bit for bit, and where the kernel agrees. The chain is then
    the one the call would have run: the same state at the same unit (tests/test_autostep.py)."""
    n = len(pilot.steps)
    if t != 0 or per_unit or step_size is None or k < n:
        return False
    steps = np.ascontiguousarray(step_size(np.arange(1, n + 1)), dtype=np.float64)
    return bool(np.array_equal(steps, pilot.steps)) and kernel.take_pilot(pilot)


def _keep_units(state, unit_draws, t, thin):
    """Keep the thin-th ones among the draws of units t + 1, t + 2, ... of a kernel that
    reports every unit's draw (name -> (units, chains, ...)); counts them as sampled."""
    n = len(next(iter(unit_draws.values())))
    for i in range(n):
        state.t = t + i + 1
        state.n_after += 1
        if state.n_after % thin == 0:
            state.keep({name: value[i] for name, value in unit_draws.items()})
    state.t = t + n


def rmse(prediction, values):
    return math.sqrt(float(np.mean((prediction - values) ** 2))) if len(values) else math.nan
