"""The engine every family runs on; it imports no family.

    kernel.py     the kernel protocol a family implements
    driver.py     the one run loop (burn-in, thinning, kept draws, moments, traces,
                  progress, callbacks, checkpoints, Ctrl-C, divergence)
    result.py     the result base (named axes, save/load, diagnostics, to_arviz) and load()
    registry.py   which family runs which (model, sampler) pair; which class reads a file
    api.py        pymf.sample and pymf.fit
    storage.py    atomic .npz / directory writes, checkpoints, streamed draws
    moments.py    running moments (Welford)
    seeds.py      seeds: None draws fresh entropy, the one used is recorded
    steps.py      step-size schedules
    checks.py     input checks that name what they refuse
    interrupt.py  Ctrl-C that waits for a consistent point
    blas.py       one BLAS thread while any run goes on
    forks.py      one OpenMP thread in a process forked after a pymf run (libgomp hangs)
    diagnostics.py  R-hat / ESS by arviz-stats, ArviZ DataTree
"""
