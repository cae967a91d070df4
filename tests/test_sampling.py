"""The sample() driver: determinism, checkpoint/resume, Ctrl-C, streaming, save/load."""
import os

import numpy as np
import pytest
import scipy.sparse

import pymf

SAMPLERS = {
    "ld": lambda threads: pymf.LD(step_size=1e-4, n_threads=threads, blocks=4),
    "sgld": lambda threads: pymf.SGLD(step_size=1e-4, batch_size=0.25, n_threads=threads, blocks=4),
    "psgld": lambda threads: pymf.PSGLD(blocks=4, step_size=pymf.PolynomialDecay(1e-3, 0.51),
                                        n_threads=threads),
    "psgld-random-permuted": lambda threads: pymf.PSGLD(
        blocks=5, step_size=2e-4, part_order="random", permute=True, n_threads=threads),
}


@pytest.fixture(scope="module")
def poisson_data():
    V, _, _ = pymf.datasets.make_tweedie_nmf(60, 45, 4, beta=1.0, seed=3)
    return V


def sparse_version(V, keep=0.6, seed=0):
    mask = np.random.default_rng(seed).random(V.shape) < keep
    rows, cols = np.nonzero(mask)
    return pymf.Ratings(rows, cols, V[mask], shape=V.shape)


@pytest.mark.parametrize("kind", sorted(SAMPLERS))
@pytest.mark.parametrize("sparse", [False, True])
def test_bit_identical_for_one_and_two_threads(poisson_data, kind, sparse):
    data = sparse_version(poisson_data) if sparse else poisson_data
    model = pymf.TweedieNMF(4, beta=1.0)
    runs = [pymf.sample(model, data, SAMPLERS[kind](threads), n_samples=60, thin=3, seed=11)
            for threads in (1, 2)]
    assert np.array_equal(runs[0].W_samples, runs[1].W_samples)
    assert np.array_equal(runs[0].H_samples, runs[1].H_samples)
    assert np.array_equal(runs[0].trace["loglik"], runs[1].trace["loglik"])
    # and the chain moved (a frozen chain would pass the equality trivially)
    assert not np.allclose(runs[0].W_samples[0], runs[0].W_samples[-1])


def test_same_seed_same_chain_other_seed_other_chain(poisson_data):
    model = pymf.TweedieNMF(4)
    sampler = SAMPLERS["psgld"](None)
    a = pymf.sample(model, poisson_data, sampler, n_samples=20, seed=5)
    b = pymf.sample(model, poisson_data, sampler, n_samples=20, seed=5)
    c = pymf.sample(model, poisson_data, sampler, n_samples=20, seed=6)
    assert np.array_equal(a.W_samples, b.W_samples)
    assert not np.allclose(a.W_samples, c.W_samples)


def test_dense_ratings_and_scipy_inputs_agree(poisson_data):
    """A fully observed matrix as an array, as Ratings, or as scipy.sparse is the same data."""
    model = pymf.TweedieNMF(4)
    sampler = SAMPLERS["psgld"](None)
    dense = pymf.sample(model, poisson_data, sampler, n_samples=10, seed=1)
    ratings = pymf.sample(model, pymf.Ratings.from_dense(poisson_data), sampler, n_samples=10, seed=1)
    matrix = scipy.sparse.coo_matrix(poisson_data)
    # scipy drops zeros: only stored entries are observed, so compare with the same Ratings
    nonzero = pymf.Ratings.from_scipy(matrix)
    from_scipy = pymf.sample(model, matrix, sampler, n_samples=10, seed=1)
    from_ratings = pymf.sample(model, nonzero, sampler, n_samples=10, seed=1)
    np.testing.assert_allclose(dense.W_samples, ratings.W_samples, rtol=1e-9)
    assert np.array_equal(from_scipy.W_samples, from_ratings.W_samples)


def _interrupt_at(iteration):
    def callback(info):
        if info["iteration"] >= iteration:
            raise KeyboardInterrupt
    return callback


@pytest.mark.parametrize("stream", [False, True])
def test_checkpoint_resume_equals_uninterrupted_run(poisson_data, tmp_path, stream):
    model = pymf.TweedieNMF(4)
    sampler = SAMPLERS["psgld-random-permuted"](None)
    test = sparse_version(poisson_data, keep=0.1, seed=9)
    settings = dict(n_samples=120, burnin=30, thin=4, seed=21, test=test, trace_every=10)
    full = pymf.sample(model, poisson_data, sampler, **settings)
    checkpoint = tmp_path / "run.npz"
    sample_dir = str(tmp_path / "samples") if stream else None
    with pytest.warns(RuntimeWarning, match="interrupted"):
        partial = pymf.sample(model, poisson_data, sampler, checkpoint=checkpoint,
                              checkpoint_every=1000, sample_dir=sample_dir,
                              callback=_interrupt_at(70), **settings)
    assert partial.interrupted and 0 < partial.n_kept < full.n_kept
    assert np.array_equal(partial.W_samples[: partial.n_kept], full.W_samples[: partial.n_kept])
    resumed = pymf.sample(model, poisson_data, sampler, checkpoint=checkpoint,
                          sample_dir=sample_dir, **settings)
    assert not resumed.interrupted
    assert np.array_equal(np.asarray(resumed.W_samples), full.W_samples)
    assert np.array_equal(np.asarray(resumed.H_samples), full.H_samples)
    assert np.array_equal(resumed.W_mean, full.W_mean)
    for key in ("iteration", "loglik", "logpost", "test_rmse", "test_rmse_sample"):
        assert np.array_equal(resumed.trace[key], full.trace[key]), key


def test_a_new_run_never_streams_over_draws_already_in_its_sample_dir(poisson_data, tmp_path):
    """A new run streaming into a folder that holds a saved result (or an earlier run's
    draws) wrote its draws over that result's files, and over the draws of a result still
    open, which are memory maps of them. It is refused now, and nothing is touched."""
    model = pymf.TweedieNMF(4)
    sampler = SAMPLERS["psgld"](None)
    saved = str(tmp_path / "saved")
    first = pymf.sample(model, poisson_data, sampler, n_samples=20, seed=0)
    first.save(saved)
    streamed = str(tmp_path / "streamed")
    earlier = pymf.sample(model, poisson_data, sampler, n_samples=20, seed=1, sample_dir=streamed)
    kept = np.array(earlier.W_samples)
    for folder in (saved, streamed):
        with pytest.raises(ValueError, match=r"sample_dir .* already holds W_samples.npy, "
                                             r"H_samples.npy \(an earlier run's draws or a "
                                             r"saved result\); give a new or empty folder"):
            pymf.sample(model, poisson_data, sampler, n_samples=10, seed=9, sample_dir=folder)
    assert np.array_equal(pymf.load(saved).W_samples, first.W_samples)
    assert np.array_equal(earlier.W_samples, kept)


@pytest.mark.parametrize("stop_at", [20, 70])  # before the first kept draw; after some
def test_saving_a_stopped_streamed_run_into_its_sample_dir_keeps_it_resumable(
        poisson_data, tmp_path, stop_at):
    """The result of a run stopped early, saved into the folder its draws stream to (what
    `pymf sample --stream --checkpoint` and the MPI ring do), only flushes the streamed
    files: the run resumes from there. (An empty view of the streamed samples, before the
    first kept draw, was once written over them as a new empty file.)"""
    model = pymf.TweedieNMF(4)
    sampler = SAMPLERS["psgld"](None)
    settings = dict(n_samples=120, burnin=30, thin=40, seed=21, trace_every=10)
    full = pymf.sample(model, poisson_data, sampler, **settings)
    folder = str(tmp_path / "run")
    checkpoint = tmp_path / "run.npz"
    with pytest.warns(RuntimeWarning, match="interrupted"):
        partial = pymf.sample(model, poisson_data, sampler, checkpoint=checkpoint,
                              sample_dir=folder, callback=_interrupt_at(stop_at), **settings)
    assert partial.n_kept == (0 if stop_at < 70 else 1)
    partial.save(folder)
    assert pymf.load(folder).n_kept == partial.n_kept
    resumed = pymf.sample(model, poisson_data, sampler, checkpoint=checkpoint,
                          sample_dir=folder, **settings)
    assert np.array_equal(np.asarray(resumed.W_samples), full.W_samples)
    assert np.array_equal(np.asarray(resumed.H_samples), full.H_samples)


def test_checkpoint_of_another_run_is_refused(poisson_data, tmp_path):
    model = pymf.TweedieNMF(4)
    checkpoint = tmp_path / "run.npz"
    pymf.sample(model, poisson_data, SAMPLERS["psgld"](None), n_samples=10, checkpoint=checkpoint)
    with pytest.raises(ValueError, match="different run"):
        pymf.sample(model, poisson_data, SAMPLERS["psgld"](None), n_samples=10, seed=99,
                    checkpoint=checkpoint)


def test_ctrl_c_keeps_samples_so_far(poisson_data):
    model = pymf.TweedieNMF(4)
    with pytest.warns(RuntimeWarning, match="interrupted"):
        res = pymf.sample(model, poisson_data, SAMPLERS["psgld"](None), n_samples=100, thin=5,
                          trace_every=5, callback=_interrupt_at(50))
    assert res.interrupted
    assert res.n_kept == 10
    assert res.W_samples.shape[0] == 10  # the kept ones only
    np.testing.assert_allclose(res.W_mean, res.W_samples[:10].mean(axis=0))


@pytest.mark.parametrize("suffix", ["", ".npz"])
def test_save_load_round_trip(poisson_data, tmp_path, suffix):
    model = pymf.TweedieNMF(4)
    res = pymf.sample(model, poisson_data, SAMPLERS["psgld"](None), n_samples=30, thin=3, seed=4)
    path = res.save(str(tmp_path / ("result" + suffix)))
    back = pymf.load(path)
    assert back.n_kept == res.n_kept == 10
    for name in ("W_mean", "H_mean", "W_samples", "H_samples", "sample_iterations"):
        assert np.array_equal(getattr(back, name), getattr(res, name)), name
    for key in res.trace:
        assert np.array_equal(back.trace[key], res.trace[key])
    assert back.params == res.params
    rows, cols = np.array([0, 5, 59]), np.array([1, 44, 0])
    np.testing.assert_allclose(back.predict(rows, cols), res.predict(rows, cols))


def test_streamed_samples_are_on_disk(poisson_data, tmp_path):
    model = pymf.TweedieNMF(4)
    out = tmp_path / "stream"
    res = pymf.sample(model, poisson_data, SAMPLERS["psgld"](None), n_samples=20, thin=2,
                      sample_dir=str(out))
    assert isinstance(res.W_samples, np.memmap)
    res.save(str(out))
    back = pymf.load(str(out), mmap=True)
    assert np.array_equal(np.asarray(back.W_samples), np.asarray(res.W_samples))


def test_predict_is_the_posterior_mean_of_wh(poisson_data):
    model = pymf.TweedieNMF(4)
    res = pymf.sample(model, poisson_data, SAMPLERS["psgld"](None), n_samples=20, thin=2)
    rows, cols = np.array([0, 3, 7]), np.array([2, 2, 40])
    expected = np.mean([(W @ H)[rows, cols] for W, H in zip(res.W_samples, res.H_samples)], axis=0)
    mean, std = res.predict(rows, cols, return_std=True)
    np.testing.assert_allclose(mean, expected, rtol=1e-12)
    assert np.all(std > 0)
    with pytest.raises(ValueError, match="row id 60 is out of range"):
        res.predict([60], [0])
    with pytest.raises(ValueError, match="must be integers"):  # 0.9 would silently become 0
        res.predict([0.9], [1])
    with pytest.raises(ValueError, match="same length"):
        res.predict([0, 1], [1])


def test_trace_contents(poisson_data):
    model = pymf.TweedieNMF(4)
    test = sparse_version(poisson_data, keep=0.1)
    res = pymf.sample(model, poisson_data, SAMPLERS["psgld"](None), n_samples=50, thin=5,
                      trace_every=10, test=test)
    assert list(res.trace["iteration"]) == [0, 10, 20, 30, 40, 50]
    assert np.all(np.diff(res.trace["time"]) >= 0)
    # the trace's log-likelihood is the Tweedie one of the final state
    W, H = res.W_samples[-1], res.H_samples[-1]
    mu = W @ H
    V = poisson_data
    expected = -np.sum(np.where(V > 0, V * np.log(np.where(V > 0, V, 1) / mu), 0) - V + mu)
    np.testing.assert_allclose(res.trace["loglik"][-1], expected, rtol=1e-10)
    rmse = np.sqrt(np.mean((mu[test.rows, test.cols] - test.values) ** 2))
    np.testing.assert_allclose(res.trace["test_rmse_sample"][-1], rmse, rtol=1e-10)


def test_a_real_ctrl_c_leaves_a_checkpoint_that_resumes_the_same_chain(poisson_data, tmp_path):
    """SIGINT from another thread lands wherever the run is (mostly inside the C sampler, or
    between the lines that keep a sample); the checkpoint written on the way out must still
    be a consistent state: resuming it gives the uninterrupted chain, every sample kept once."""
    from ctrl_c import CtrlC
    model = pymf.TweedieNMF(4)
    sampler = SAMPLERS["psgld"](None)
    settings = dict(n_samples=20_000, burnin=0, thin=1, seed=8, trace_every=7,
                    checkpoint_every=100_000, keep_samples=True)
    full = pymf.sample(model, poisson_data, sampler, **settings)
    checkpoint = tmp_path / "run.npz"
    with pytest.warns(RuntimeWarning, match="interrupted"), CtrlC() as ctrl_c:
        partial = pymf.sample(model, poisson_data, sampler, checkpoint=checkpoint,
                              callback=ctrl_c.press_at(700), **settings)
    assert partial.interrupted and 0 < partial.n_kept < full.n_kept
    resumed = pymf.sample(model, poisson_data, sampler, checkpoint=checkpoint, **settings)
    assert resumed.n_kept == full.n_kept
    assert np.array_equal(resumed.sample_iterations, full.sample_iterations)
    assert np.array_equal(np.asarray(resumed.W_samples), full.W_samples)
    assert np.array_equal(resumed.W_mean, full.W_mean)
    assert np.array_equal(resumed.trace["iteration"], full.trace["iteration"])
    assert np.array_equal(resumed.trace["loglik"], full.trace["loglik"])


def test_a_second_ctrl_c_stops_at_once_and_writes_nothing(poisson_data, tmp_path):
    """The first Ctrl-C waits for a consistent point; a second one is obeyed at once
    (ForcedInterrupt) and leaves the last periodic checkpoint as it was."""
    import signal
    import threading
    import time
    from pymf.engine.interrupt import DeferredInterrupt, ForcedInterrupt
    checkpoint = tmp_path / "run.npz"
    written = {}

    def press_twice(info):
        if info["iteration"] == 40:
            written["bytes"] = checkpoint.read_bytes()  # the checkpoint of iteration 30
            # sent to the main thread itself, which runs each Python handler before its next
            # call: os.kill lets the kernel hand SIGINT to any thread (the C core's OpenMP
            # workers), and two sent back to back could then merge into one while that
            # thread waited for a core (seen once in a full suite on a loaded machine);
            # a person's two presses are far apart
            main = threading.main_thread().ident
            handler = signal.getsignal(signal.SIGINT)
            deferred = getattr(handler, "__self__", None)
            assert isinstance(deferred, DeferredInterrupt), \
                f"the run did not install its SIGINT handler (found {handler!r})"
            signal.pthread_kill(main, signal.SIGINT)
            # the second only once the first has been handled: two signals both pending
            # before Python runs the handler are one (a full suite on a 2-core AMD machine
            # once ran the run to its end after the two presses)
            deadline = time.monotonic() + 5.0
            while not deferred.requested and time.monotonic() < deadline:
                time.sleep(0.001)
            assert deferred.requested, "the first SIGINT was not handled within 5 s"
            signal.pthread_kill(main, signal.SIGINT)

    with pytest.raises(ForcedInterrupt):
        pymf.sample(pymf.TweedieNMF(4), poisson_data, SAMPLERS["psgld"](None), n_samples=100,
                    trace_every=10, checkpoint=checkpoint, checkpoint_every=30,
                    callback=press_twice)
    assert checkpoint.read_bytes() == written["bytes"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # handler given back


def test_a_run_holds_blas_to_one_thread_and_gives_it_back():
    """pymf.engine.blas: inside a run (seen from its callback) every BLAS threadpool has one
    thread; after it, the caller's count again. The caller sets 2 first, so the test fails
    if the limit is not applied or not undone."""
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads():
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    if not blas_threads():
        pytest.skip("no BLAS threadpool is loaded in this process (threadpoolctl finds none)")
    V, _, _ = pymf.datasets.make_tweedie_nmf(24, 20, 2, beta=1.0, seed=0)
    seen = []
    with threadpool_limits(limits=2, user_api="blas"):
        assert set(blas_threads()) == {2}
        pymf.sample(pymf.TweedieNMF(2), V, pymf.PSGLD(blocks=2, step_size=1e-3), n_samples=4,
                    trace_every=1, seed=0, progress=False,
                    callback=lambda info: seen.append(blas_threads()))
        assert set(blas_threads()) == {2}
    assert seen and all(set(threads) == {1} for threads in seen)


def test_a_blas_loaded_after_the_first_run_is_held_to_one_thread_too(tmp_path):
    """pymf.engine.blas scans the loaded BLAS libraries at every run: SciPy's own OpenBLAS,
    loaded only after a first run (in a fresh process, so that no other test loaded it
    first), is held to one thread in the second run like NumPy's. A scan cached at the
    first run left it at 2 ([[1, 2], ...])."""
    import subprocess
    import sys
    script = tmp_path / "late_blas.py"
    script.write_text("""
import sys
from threadpoolctl import threadpool_info, threadpool_limits
import pymf

def pools():
    return {i["filepath"]: i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"}

V, _, _ = pymf.datasets.make_tweedie_nmf(24, 20, 2, beta=1.0, seed=0)
run = dict(n_samples=2, trace_every=1, seed=0, progress=False)
model, sampler = pymf.TweedieNMF(2), pymf.PSGLD(blocks=2, step_size=1e-3)
pymf.sample(model, V, sampler, **run)
before = len(pools())
import scipy.linalg  # noqa: F401  (brings SciPy's own BLAS)
after = len(pools())
seen = []
with threadpool_limits(limits=2, user_api="blas"):
    pymf.sample(model, V, sampler, callback=lambda info: seen.append(pools()), **run)
print(before, after, seen)
if after <= before:
    print("SKIP: SciPy shares NumPy's BLAS here")
    sys.exit(0)
assert seen and all(set(p.values()) == {1} for p in seen), seen
""")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env=dict(os.environ), timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    if "SKIP" in out.stdout:
        pytest.skip("SciPy uses NumPy's BLAS library in this install: no second library to load")


def test_predict_after_a_stop_in_the_burn_in_says_so(poisson_data):
    """A run stopped before its first kept draw told the user to run with
    keep_samples=True, which it had."""
    with pytest.warns(RuntimeWarning, match="interrupted"):
        res = pymf.sample(pymf.TweedieNMF(4), poisson_data, SAMPLERS["psgld"](None),
                          n_samples=20, burnin=30, seed=0, callback=_interrupt_at(20))
    assert res.n_kept == 0
    with pytest.raises(ValueError, match=r"this run kept no draws \(stopped in the burn-in\?\)"):
        res.predict([0], [0])


def test_a_callback_returning_numpys_true_stops_the_run(poisson_data):
    """A comparison of the trace's values (info["loglik"] > threshold) is numpy.True_, which
    is not True: the stop it asked for was ignored and the run went on to its end."""
    res = pymf.sample(pymf.TweedieNMF(4), poisson_data, SAMPLERS["psgld"](None), n_samples=200,
                      trace_every=10, callback=lambda info: np.int64(info["iteration"]) >= 30)
    assert res.iterations == 30 and res.n_kept == 30
    res = pymf.sample(pymf.TweedieNMF(4), poisson_data, SAMPLERS["psgld"](None), n_samples=50,
                      trace_every=10, callback=lambda info: np.float64(1.0))  # not a bool
    assert res.iterations == 50
