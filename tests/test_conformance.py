"""What every registered (model, sampler) pair does the same way, because the engine runs
them all: the same chain for 1 and 2 threads, checkpoint/kill/resume equal to an
uninterrupted run, a save/load round trip, Ctrl-C, the divergence payload, bad input, the
ArviZ view, and seeds (None draws fresh entropy, result.seed reproduces the run).

A new family adds its samplers to CASES; test_every_registered_pair_has_a_case fails until
it does. Where a check cannot apply (a sampler with no thread option, a Gibbs sampler that
takes no step to blow up), the case says so and the check asserts that instead.
"""
import inspect

import numpy as np
import pytest

import pymf
from pymf.engine import registry


def nmf_data():
    V, _, _ = pymf.datasets.make_tweedie_nmf(14, 12, 2, beta=1.0, seed=3)
    return V


def bpmf_data():
    rng = np.random.default_rng(1)
    L, M = 24, 18
    rows, cols = np.nonzero(rng.random((L, M)) < 0.5)
    values = 3 + rng.normal(0, 1, len(rows))
    return pymf.Ratings(rows, cols, values, shape=(L, M))


def linear_data():
    A, x, _ = pymf.datasets.make_linear_gaussian(60, 3, seed=2)
    return A, x


def alphamf_data():
    return pymf.alphamf.make_alpha_stable(14, 12, 2, alpha=1.2, seed=3)[0]


def ibp_data():
    X, _, _ = pymf.datasets.make_cambridge(n=30, seed=3)
    return X


# name -> (model, data, sampler factory(n_threads, step), step that diverges or None)
CASES = {
    "nmf-ld": (lambda: pymf.TweedieNMF(2), nmf_data,
               lambda n, s=1e-3: pymf.LD(step_size=s, n_threads=n), 1e8),
    "nmf-sgld": (lambda: pymf.TweedieNMF(2), nmf_data,
                 lambda n, s=1e-3: pymf.SGLD(step_size=s, batch_size=20, n_threads=n), 1e8),
    "nmf-psgld": (lambda: pymf.TweedieNMF(2), nmf_data,
                  lambda n, s=1e-3: pymf.PSGLD(blocks=2, step_size=s, n_threads=n), 1e8),
    "nmf-gibbs": (lambda: pymf.TweedieNMF(2), nmf_data,
                  lambda n, s=None: pymf.Gibbs(n_threads=n, blocks=2), None),
    "bpmf-dsgld": (lambda: pymf.BPMF(2), bpmf_data,
                   lambda n, s=1e-3: pymf.DSGLD(blocks=2, batch_size=20, round_length=3,
                                                step_size=s, n_threads=n), 1e6),
    "bpmf-sgld": (lambda: pymf.BPMF(2), bpmf_data,
                  lambda n, s=1e-3: pymf.SGLD(step_size=s, batch_size=20, n_threads=n), 1e6),
    "bpmf-gibbs": (lambda: pymf.BPMF(2), bpmf_data,
                   lambda n, s=None: pymf.BPMFGibbs(n_threads=n), None),
    "nmf-hamcmc": (lambda: pymf.TweedieNMF(2), nmf_data,
                   lambda n, s=1e-3: pymf.HAMCMC(blocks=2, memory=3, step_size=s, n_threads=n),
                   1e8),
    "linear-hamcmc": (pymf.LinearGaussian, linear_data,
                      lambda n, s=1e-3: pymf.HAMCMC(step_size=s, batch_size=10), 1e6),
    "linear-precond_sgld": (pymf.LinearGaussian, linear_data,
                            lambda n, s=1e-3: pymf.PreconditionedSGLD(step_size=s, batch_size=10),
                            1e200),  # its RMSprop scaling keeps moderate huge steps bounded
    "linear-sgrld": (pymf.LinearGaussian, linear_data,
                     lambda n, s=1e-3: pymf.SGRLD(step_size=s, batch_size=10), 1e6),
    "linear-sgld": (pymf.LinearGaussian, linear_data,
                    lambda n, s=1e-3: pymf.SGLD(step_size=s, batch_size=10), 1e6),
    # alpha = 0.5: the priors' gradient grows as x^3; the tamed drift (the default) moves
    # at most 1 per step, so it takes a step whose noise (~sqrt(2 eps)) makes eps times
    # that gradient overflow
    "alphamf-hamcmc": (lambda: pymf.AlphaStableNMF(2, alpha=0.5), alphamf_data,
                       lambda n, s=1e-3: pymf.HAMCMC(blocks=2, memory=3, step_size=s,
                                                     n_threads=n), 1e200),
    "alphamf-psgld": (lambda: pymf.AlphaStableNMF(2, alpha=0.5), alphamf_data,
                      lambda n, s=1e-3: pymf.PSGLD(blocks=2, step_size=s, n_threads=n), 1e200),
    # IBP: Gibbs-type samplers without a step; collapsed Gibbs is sequential (takes no
    # thread option: run with 1 and 2 it is trivially the same chain)
    "ibp-collapsed": (pymf.IBPLinearGaussian, ibp_data, lambda n, s=None: pymf.CollapsedIBP(),
                      None),
    "ibp-hybrid": (pymf.IBPLinearGaussian, ibp_data,
                   lambda n, s=None: pymf.HybridIBP(processes=2, n_threads=n), None),
}
THREADED = {name for name in CASES if not name.startswith("linear-")}
RUN = dict(n_samples=24, burnin=6, thin=3)


def run(name, n_threads=None, step=None, **options):
    make_model, make_data, make_sampler, _ = CASES[name]
    sampler = make_sampler(n_threads) if step is None else make_sampler(n_threads, step)
    settings = {**RUN, "seed": 5, **options}
    return pymf.sample(make_model(), make_data(), sampler, **settings)


def same_draws(a, b):
    assert a.n_kept == b.n_kept and a.n_kept > 0
    assert sorted(a.posterior) == sorted(b.posterior)
    for key in a.posterior:
        np.testing.assert_array_equal(np.asarray(a.posterior[key]), np.asarray(b.posterior[key]))
    np.testing.assert_array_equal(a.draw_units, b.draw_units)


def test_every_registered_pair_has_a_case():
    covered = set()
    for name, (make_model, _, make_sampler, _) in CASES.items():
        covered.add((type(make_model()).__name__, type(make_sampler(None)).__name__))
    for model_type, sampler_types in registry.pairs("sample"):
        for sampler_type in sampler_types if isinstance(sampler_types, tuple) else (sampler_types,):
            assert (model_type.__name__, sampler_type.__name__) in covered, \
                f"add a conformance case for {sampler_type.__name__} on {model_type.__name__}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_same_chain_for_one_and_two_threads(name):
    if name not in THREADED:
        # the linear-Gaussian samplers run on one thread and take no thread option
        sampler = CASES[name][2](None)
        # (SGLD and HAMCMC take one for the NMF family, where they use it)
        assert "n_threads" not in inspect.signature(type(sampler)).parameters \
            or isinstance(sampler, (pymf.SGLD, pymf.HAMCMC))
        same_draws(run(name), run(name))
        return
    same_draws(run(name, 1), run(name, 2))


@pytest.mark.parametrize("name", sorted(CASES))
def test_checkpoint_kill_resume_equals_an_uninterrupted_run(name, tmp_path):
    path = tmp_path / "ck.npz"
    whole = run(name)

    def kill(info):
        if info["iteration"] >= 14:
            raise KeyboardInterrupt

    with pytest.warns(RuntimeWarning, match="interrupted"):
        first = run(name, checkpoint=path, checkpoint_every=4, trace_every=1, callback=kill)
    assert first.interrupted and path.exists()
    seen = []
    resumed = run(name, checkpoint=path, checkpoint_every=4, trace_every=1,
                  callback=lambda info: seen.append(info["iteration"]))
    assert seen[0] > 14  # it did resume
    same_draws(whole, resumed)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("suffix", ["", ".npz"])
def test_save_load_round_trip(name, suffix, tmp_path):
    res = run(name)
    back = pymf.load(res.save(str(tmp_path / ("result" + suffix))))
    assert type(back) is type(res) and back.kind == res.kind
    same_draws(res, back)
    assert back.seed == res.seed == 5 and back.params == res.params
    for key in res.trace:
        np.testing.assert_array_equal(back.trace[key], res.trace[key])
    for key in res.sample_stats:
        np.testing.assert_array_equal(back.sample_stats[key], res.sample_stats[key])


@pytest.mark.parametrize("name", sorted(CASES))
def test_ctrl_c_returns_the_draws_so_far(name):
    def press(info):
        if info["iteration"] >= 15:
            raise KeyboardInterrupt

    with pytest.warns(RuntimeWarning, match="interrupted"):
        res = run(name, trace_every=1, callback=press)
    assert res.interrupted
    assert res.n_kept == len(res.draw_units) == (15 - RUN["burnin"]) // RUN["thin"]
    assert all(v.shape[1] == res.n_kept for v in res.posterior.values())


# only samplers that take a step: a Gibbs sampler has none to make it diverge (its own tests
# cover non-finite states: test_bad_input)
@pytest.mark.parametrize("name", sorted(n for n, case in CASES.items() if case[3] is not None))
def test_divergence_carries_the_partial_result_and_the_last_finite_state(name):
    step = CASES[name][3]
    with pytest.raises(pymf.DivergenceError) as info:
        run(name, step=step, n_samples=2000, burnin=0, thin=1)
    exc = info.value
    assert exc.iteration >= 1
    assert exc.result is not None and exc.result.interrupted
    assert type(exc.result).__name__ == type(run(name)).__name__
    assert exc.state and all(np.all(np.isfinite(v)) for v in exc.state.values())


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("options, message", [
    (dict(n_samples=0), "n_samples must be an integer >= 1"),
    (dict(burnin=-1), "burnin must be an integer >= 0"),
    (dict(thin=30), "thin=30 is larger than n_samples=24"),
    (dict(callback=5), "callback must be callable"),
    (dict(seed=-1), "seed must be None, a non-negative integer"),
    (dict(keep_samples="yes"), "keep_samples must be True or False"),
    (dict(trace_every=0), "trace_every must be an integer >= 1"),
])
def test_bad_run_settings_are_named(name, options, message):
    with pytest.raises(ValueError, match=message):
        run(name, **options)


@pytest.mark.parametrize("name", sorted(CASES))
def test_to_arviz_has_chain_and_draw_dims(name):
    pytest.importorskip("arviz_base", reason="to_arviz needs the arviz extra (arviz-base)")
    res = run(name)
    tree = res.to_arviz()
    posterior = tree["posterior"]
    for key, value in res.posterior.items():
        assert posterior[key].dims[:2] == ("chain", "draw")
        assert posterior[key].shape == value.shape
    if res.sample_stats:
        assert set(tree["sample_stats"].data_vars) == set(res.sample_stats)


@pytest.mark.parametrize("name", sorted(CASES))
def test_seed_none_draws_fresh_entropy_and_the_recorded_seed_reproduces(name):
    a = run(name, seed=None)
    b = run(name, seed=None)
    assert a.seed != b.seed
    assert any(not np.array_equal(a.posterior[k], b.posterior[k]) for k in a.posterior)
    same_draws(a, run(name, seed=a.seed))
    sequence = np.random.SeedSequence(2024)
    same_draws(run(name, seed=sequence), run(name, seed=2024))
