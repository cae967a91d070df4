"""The per-row plan of step_size="auto" (pymf.engine.autostep, point 5): what DSGLD's and
PSGLD's kernels share, so that each family supplies only what its model decides.

A run planned with it keeps the stable step through the burn-in; at the first bounded unit
(info["row_steps_from"]) every row of the factors gets its own step factors, measured once
at the state just before that unit (the burn-in's end: by then the factors have their
posterior scale, while at the start they are init_scale small and their curvature far too
low). run() splits its call there, so the measurement is at the same state however the
loop cuts the run into calls, and a checkpoint carries the factors, so a run resumed after
that unit sets the same ones instead of measuring at a later state.

A kernel with the plan (RowStepKernel below) supplies:

    row_step_keys              the checkpoint keys of the factor arrays, in the order
                               measure_row_steps gives them. Fixed: checkpoints written
                               earlier carry the factors under these names
    _run_units(steps)          run len(steps) units as the chain would without the plan
    measure_row_steps()        the factor arrays at the current state (a tuple)
    apply_row_steps(*factors, from_unit)   hand them to the C chain (or the MPI workers),
                               to be used from unit from_unit on
    summarise_row_steps(factors, minibatch_scale, row_noise)
                               what params["auto_step"] records of them

The engine knows neither the curvature nor the chain: both are the family's.
"""
import concurrent.futures

import numpy as np

from pymf.engine.kernel import Kernel


def measure_side_by_side(measure, jobs, threads, job_bytes, cap):
    """[measure(job, inner_threads) for job in jobs], in jobs' order. Where `threads` > 1 and
    `cap` bytes hold more than one job's `job_bytes`, up to that many jobs run side by side
    on Python threads, each with inner_threads = 1 (the measurements' C passes, NumPy's
    products and the largest eigenvalues release the GIL); else one after the other, each with all
    `threads`. Each job is computed whole by one caller, so the results are the same bits
    either way; the caller combines them in jobs' order."""
    side_by_side = min(threads, len(jobs), max(1, cap // max(int(job_bytes), 1)))
    if side_by_side > 1:
        with concurrent.futures.ThreadPoolExecutor(side_by_side) as pool:
            return list(pool.map(lambda job: measure(job, 1), jobs))
    return [measure(job, threads) for job in jobs]


class RowStepKernel(Kernel):
    """A kernel whose default step switches to per-row step factors after the burn-in."""

    # the plan: the run's params["auto_step"] (eps, minibatch_scale, row_noise,
    # row_steps_from), which gets the factors' summary when they are set; None where the
    # run has none (a given step, no burn-in, another sampler)
    row_plan = None
    # the factor arrays (row_step_keys' order) once measured or restored
    row_steps = None
    row_step_keys = ()

    def plan_row_steps(self, info):
        """Bound every row's coordinates for the minibatch noise from unit
        info["row_steps_from"] on, with factors measured at the state just before it."""
        self.row_plan = info
        self.row_steps = None

    def take_pilot(self, pilot):
        # the pilot ran without the factors: refused where they are measured before its end
        plan = self.row_plan
        if plan is not None and self.row_steps is None and \
                int(plan["row_steps_from"]) - 1 < len(pilot.steps):
            return False
        return super().take_pilot(pilot)

    def run(self, steps):
        plan = self.row_plan
        if plan is not None and self.row_steps is None:
            # the units before the first bounded one, then the factors at that state; a
            # call that ends before it runs whole (the next call measures)
            before = max(int(plan["row_steps_from"]) - 1 - self.counter, 0)
            if before < len(steps):
                if before:
                    self._run_units(steps[:before])
                self._set_row_steps(self.measure_row_steps())
                steps = steps[before:]
        self._run_units(steps)

    def _set_row_steps(self, factors):
        info = self.row_plan
        self.row_steps = tuple(factors)
        self.apply_row_steps(*self.row_steps, int(info["row_steps_from"]))
        info.update(self.summarise_row_steps(self.row_steps, info["minibatch_scale"],
                                             info["row_noise"]))

    def add_row_steps(self, arrays):
        """arrays (a snapshot) with the factors under row_step_keys, once they are set."""
        if self.row_steps is not None:
            arrays.update(zip(self.row_step_keys, self.row_steps))
        return arrays

    def restore_row_steps(self, arrays):
        """Set the factors a checkpoint carries (a run with the plan only). Without them
        (a checkpoint written before the first bounded unit) run() measures them when it
        gets there, as the uninterrupted run did; past it, at once, at the restored state
        (an old default DSGLD checkpoint resumes so: CHANGELOG)."""
        if self.row_plan is not None and self.row_step_keys[0] in arrays:
            self._set_row_steps(np.asarray(arrays[key], dtype=np.float64)
                                for key in self.row_step_keys)
