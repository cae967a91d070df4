"""The kernel protocol: what a family gives the engine's run loop (pymf.engine.driver).

A sampler object (settings only) builds a kernel for a model and data; the kernel owns the
chains (usually a C object) and runs *units*: iterations (NMF, HAMCMC), rounds (DSGLD) or
sweeps (Gibbs). Everything else (burn-in, thinning, kept draws, moments, traces,
checkpoints, Ctrl-C, divergence, progress, callbacks) is the loop's.

    kernel.n_chains           chains run side by side (1 for most samplers)
    kernel.unit               "iteration", "round" or "sweep" (progress bars, messages)
    kernel.counter            units done so far (0 at the start, restored on resume)
    kernel.draw_shapes()      {variable: (n_chains, ...)}: what a kept draw holds
    kernel.run(steps)         run len(steps) units with these step sizes (ignored by samplers
                              without one); raise pymf.DivergenceError at a non-finite state,
                              keeping the last finite one. A kernel with per_unit_draws =
                              True returns {variable: (units, n_chains, ...)}, the draw of
                              every unit it ran (the loop keeps the thin-th ones), and puts
                              the completed units' draws on the error as .draws
    kernel.draw()             {variable: (n_chains, ...)}: the current state, user order
    kernel.draw_stats()       {name: (n_chains,)}: scalars recorded with every kept draw
    kernel.test_predictions() (n_chains, n_test) predictions of the held-out entries, or None
    kernel.check_state()      called at trace points before a draw is kept: raise
                              DivergenceError where the state is finite but useless
    kernel.trace_point(run)   {name: float}: the family's trace at the current state; run
                              has run.test_mean() (the running mean of the test predictions,
                              None before any kept draw), run.moments and run.n_kept
    kernel.snapshot()         {name: ndarray}: all a checkpoint needs besides the counter
    kernel.restore(arrays)    the inverse of snapshot (the counter included)
    kernel.last_finite_state() what DivergenceError.state holds
    kernel.agree(requested, n)  at every safe point of the loop: (Ctrl-C requested, units of
                              the next call) as every process that runs this chain agrees on
                              them (the MPI ring: Ctrl-C on any rank, the least n); one
                              process: as given
    kernel.agree_stop(stop)   at every trace point: whether the callback stopped the run, as
                              every process agrees (the ring: rank 0's callback decides)
    kernel.kept_pilot         None, or the units a step_size="auto" pilot already ran from the
                              start (pymf.engine.autostep.KeptPilot): the loop's first call
                              takes them instead of running them again where that is the
                              same chain (driver.run)
    kernel.take_pilot(pilot)  put the chain where the pilot ended, or refuse (False) where
                              the kernel itself would have done something else in its units

A kernel whose chain spans several processes runs the loop in each (the writing one with
write_files=True, the others with False); every call above happens at the same point in
each, so the kernel may make them collective.

Kernel below gives the optional ones their neutral defaults. A kernel whose default step
switches to per-row step factors after the burn-in (DSGLD's, PSGLD's) derives from
pymf.engine.rowsteps.RowStepKernel, which holds that plan and splits run() for it.
"""


class Kernel:
    n_chains = 1
    unit = "iteration"
    per_unit_draws = False
    kept_pilot = None

    def take_pilot(self, pilot):
        self.restore(pilot.snapshot)
        return True

    def draw_stats(self):
        return {}

    def test_predictions(self):
        return None

    def check_state(self):
        pass

    def last_finite_state(self):
        return self.draw()

    def agree(self, requested, n):
        return requested, n

    def agree_stop(self, stop):
        return stop
