"""pymf.sample and pymf.fit: look the (model, sampler) pair up in the registry and hand
over to the family that registered it."""
from pymf.engine import registry


def sample(model, data, sampler, n_samples, **options):
    """Run `sampler` on `model` given `data`; returns the family's result.

    Every family takes: burnin (units run first, not kept), thin (keep every thin-th of the
    n_samples units after burn-in), seed (None: fresh entropy; the seed used is recorded
    in result.seed and reproduces the run; an int or a numpy.random.SeedSequence), init,
    test (held-out entries traced as test_rmse), trace_every, keep_samples, sample_dir
    (stream the kept draws to .npy files there), checkpoint (a .npz path: resumed from if
    it exists, rewritten every checkpoint_every units, at the end and on Ctrl-C), progress
    (a tqdm bar; default: on a terminal, not in CI) and callback (callback(info) at every
    trace point, info a dict with iteration, time, n_kept and the trace values; returning
    True stops the run there). Units are iterations (NMF, HAMCMC), rounds (DSGLD) or
    sweeps (Gibbs). Ctrl-C returns what was sampled so far (result.interrupted); a
    non-finite state raises pymf.DivergenceError with the partial result as .result and
    the last finite state as .state. A sampler that cannot run the model is a TypeError
    naming both. Family options: see the family's runner (e.g. burnin_rmse for BPMF; IBP
    takes test_mask instead of init and test, and has no sample_dir); an option the pair
    does not take is a TypeError that lists those it does.
    """
    return registry.runner("sample", model, sampler)(model, data, sampler, n_samples, **options)


def fit(model, data, optimizer, **options):
    """A point estimate or a variational fit of `model` given `data`: MAP with an optimiser
    (pymf.SGD, pymf.DSGD; n_epochs), or variational inference of a LogisticMF model
    (pymf.SIBM, pymf.BatchVB; n_updates, the updates or sweeps, and init, an earlier
    SIBMResult); seed, test, callback and progress as in pymf.sample."""
    return registry.runner("fit", model, optimizer)(model, data, optimizer, **options)
