"""pymf beside other processes and Python threads: a child forked after the parent ran
pymf's OpenMP threads (multiprocessing's default start method on Linux) used to hang for
ever in libgomp; two runs overlapping in two Python threads left the process's BLAS at
one thread for good. Both failed on the code before."""
import multiprocessing
import warnings

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

import pymf
from pymf.engine.blas import one_blas_thread


def poisson_data():
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 30, 3, beta=1.0, seed=0)
    return V


def chain(seed, n_threads):
    """A run, and the warnings it gave (module level: the forked child runs it)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = pymf.sample(pymf.TweedieNMF(3), poisson_data(), pymf.PSGLD(blocks=2, step_size=1e-3,
                                                                         n_threads=n_threads),
                          n_samples=30, seed=seed, progress=False)
    return np.asarray(res.W_samples), [str(w.message) for w in caught]


def test_a_child_forked_after_a_threaded_run_runs_on_one_thread_with_the_same_chain():
    parent, _ = chain(1, 2)  # the parent's OpenMP thread team exists from here on
    pool = multiprocessing.get_context("fork").Pool(1)
    try:
        child, said = pool.apply_async(chain, (1, 2)).get(timeout=120)  # hung for ever
    except multiprocessing.TimeoutError:
        pytest.fail("the forked child hung in its first OpenMP parallel region")
    finally:
        pool.terminate()
        pool.join()
    assert np.array_equal(child, parent)
    assert any("forked from one that had run pymf" in s and "'spawn'" in s for s in said), said


def blas_threads():
    return [info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"]


def test_overlapping_runs_put_the_blas_threads_back_when_the_last_one_ends():
    """Each run saved and restored the limit it found: the second saved the first's 1, and
    the first's end gave the second a threaded BLAS while it still ran."""
    if not blas_threads():
        pytest.skip("no BLAS that threadpoolctl can limit (numpy's OpenBLAS normally is)")
    with threadpool_limits(limits=2, user_api="blas"):
        before = blas_threads()
        first, second = one_blas_thread(), one_blas_thread()
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)  # the first run ends while the second goes on
        assert set(blas_threads()) == {1}
        second.__exit__(None, None, None)
        assert blas_threads() == before
