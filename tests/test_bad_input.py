"""Bad input gives a ValueError that names the problem; divergence a DivergenceError."""
import re

import numpy as np
import pytest
import scipy.sparse

import pymf

V_OK = np.abs(np.random.default_rng(0).normal(size=(12, 10))) + 0.1
MODEL = pymf.TweedieNMF(3)
PSGLD = pymf.PSGLD(blocks=2, step_size=1e-3)


def run(data=V_OK, model=MODEL, sampler=PSGLD, **kwargs):
    kwargs.setdefault("n_samples", 5)
    return pymf.sample(model, data, sampler, **kwargs)


@pytest.mark.parametrize("bad, message", [(np.nan, "NaN or inf"), (np.inf, "NaN or inf")])
def test_non_finite_dense_data(bad, message):
    V = V_OK.copy()
    V[3, 4] = bad
    with pytest.raises(ValueError, match=message):
        run(V)


def test_non_finite_ratings():
    with pytest.raises(ValueError, match="NaN or inf"):
        pymf.Ratings([0, 1], [0, 1], [1.0, np.nan])


def test_negative_data_for_non_negative_model():
    V = V_OK.copy()
    V[0, 0] = -1.0
    with pytest.raises(ValueError, match="negative values"):
        run(V)


def test_zero_data_for_gamma_likelihood():
    V = V_OK.copy()
    V[1, 1] = 0.0
    with pytest.raises(ValueError, match="strictly positive"):
        run(V, pymf.TweedieNMF(3, beta=0.0))


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (0, 4)])
def test_wrong_shapes(shape):
    with pytest.raises(ValueError, match="2-D|empty"):
        run(np.ones(shape))


@pytest.mark.parametrize("rank", [0, -2, 1.5, True])
def test_rank_must_be_positive_integer(rank):
    with pytest.raises(ValueError, match="rank"):
        pymf.TweedieNMF(rank)


def test_blocks_larger_than_matrix():
    with pytest.raises(ValueError, match="blocks=13 is larger than the matrix"):
        run(sampler=pymf.PSGLD(blocks=13, step_size=1e-3))


@pytest.mark.parametrize("rows, cols, message", [
    ([0, 12], [0, 1], "row index 12 is out of range"),
    ([0, 1], [0, 10], "column index 10 is out of range"),
    ([0, -1], [0, 1], "negative index"),
    ([2, 2], [3, 3], "duplicate entry"),
    ([0.5, 1], [0, 1], "integer"),
])
def test_bad_sparse_indices(rows, cols, message):
    with pytest.raises(ValueError, match=message):
        pymf.Ratings(rows, cols, [1.0, 2.0], shape=(12, 10))


@pytest.mark.parametrize("step", [0.0, -1e-3, np.nan, np.inf])
def test_non_positive_step_size(step):
    with pytest.raises(ValueError, match="step size"):
        pymf.PSGLD(blocks=2, step_size=step)


def test_polynomial_decay_exponent():
    with pytest.raises(ValueError, match=r"b must be in \(0.5, 1\]"):
        pymf.PolynomialDecay(0.01, 0.4)


@pytest.mark.parametrize("kwargs, message", [
    (dict(beta=1.0, prior="gaussian"), "only beta = 2"),
    (dict(phi=0.0), "phi"),
    (dict(lam_w=-1.0), "lam_w"),
    (dict(prior="laplace"), "prior"),
])
def test_bad_model_parameters(kwargs, message):
    with pytest.raises(ValueError, match=message):
        pymf.TweedieNMF(3, **kwargs)


def test_bad_run_settings():
    with pytest.raises(ValueError, match="n_samples"):
        run(n_samples=0)
    with pytest.raises(ValueError, match="thin"):
        run(n_samples=5, thin=6)
    with pytest.raises(ValueError, match="seed"):
        run(seed=-1)
    with pytest.raises(ValueError, match="init"):
        run(init=(np.ones((12, 2)), np.ones((3, 10))))
    with pytest.raises(ValueError, match="non-negative"):
        run(init=(-np.ones((12, 3)), np.ones((3, 10))))
    with pytest.raises(ValueError, match="test set"):
        run(test=pymf.Ratings([0], [0], [1.0], shape=(3, 3)))


def test_gpu_backend_without_gpu_is_a_clear_error():
    from pymf import gpu
    if gpu.is_available():
        pytest.skip("a usable GPU is present")
    with pytest.raises(RuntimeError, match="backend='cuda'"):
        run(sampler=pymf.PSGLD(blocks=2, step_size=1e-3, backend="cuda"))


@pytest.mark.parametrize("sampler", [pymf.PSGLD(blocks=2, step_size=1e6), pymf.LD(step_size=1e6),
                                     pymf.SGLD(step_size=1e6)])
def test_divergence_names_iteration_and_keeps_last_finite_state(sampler):
    with pytest.raises(pymf.DivergenceError, match="diverged at iteration") as info:
        run(sampler=sampler, n_samples=500)
    err = info.value
    assert err.iteration >= 1
    assert np.all(np.isfinite(err.W)) and np.all(np.isfinite(err.H))
    assert err.result is not None and err.result.n_kept == err.iteration - 1


@pytest.mark.parametrize("sampler", [pymf.LD(n_threads=1), pymf.PSGLD(blocks=2, n_threads=1)])
def test_nmf_fitted_values_that_run_away_are_a_divergence(sampler):
    """LD and PSGLD with step "auto" on a 2 x 2 count matrix sampled fitted values of about
    1,700 where the exact posterior mean is 1.3 to 2.8 (a factor mirrored near zero under a
    positive count is thrown far off by the drift v / w), with no word: 78 % of draws had
    an entry above 20. Fitted values whose RMS passes BLOWUP_FACTOR times the larger of the
    data's and the prior's are a divergence now, with the last state that passed."""
    from pymf.nmf.kernel import BLOWUP_FACTOR
    V = np.array([[3.0, 0.0], [1.0, 5.0]])
    with pytest.raises(pymf.DivergenceError, match=r"diverged at iteration \d+: the RMS of its "
                       r"fitted values W H is [0-9.e+]+, more than 100 times the larger of the "
                       r"data's and the prior's \(2\.96\).*pymf.Gibbs samples Poisson NMF "
                       r"exactly\); the last state that passed, at iteration \d+, is kept"
                       ) as info:
        pymf.sample(pymf.TweedieNMF(1), V, sampler, n_samples=30000, burnin=5000, seed=4,
                    progress=False)
    W, H = info.value.state["W"], info.value.state["H"]
    assert np.sqrt(np.mean((W @ H) ** 2)) <= BLOWUP_FACTOR * 2.96
    assert np.all(info.value.result.W_samples @ info.value.result.H_samples < 300)


def test_an_nmf_chain_that_leaves_the_posterior_is_stopped_before_it_overflows():
    """LD with step 0.05 on a 40 x 30 Poisson matrix: W H overflowed at iteration 1033, and
    the error kept a "last finite state" with |W| of 1e152 and 1,027 draws of garbage."""
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 30, 3, beta=1.0, seed=0)
    with pytest.raises(pymf.DivergenceError, match="the RMS of its fitted values") as info:
        pymf.sample(pymf.TweedieNMF(3), V, pymf.LD(step_size=0.05, n_threads=1),
                    n_samples=2000, burnin=5, seed=0, progress=False)
    assert info.value.iteration < 100
    assert np.abs(info.value.state["W"]).max() < 1e3


def test_a_sane_nmf_chain_passes_the_fitted_values_check():
    """The same data and "auto" step (a stable chain): no divergence, and the limit is set
    from the data (every entry observed)."""
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 30, 3, beta=1.0, seed=0)
    res = pymf.sample(pymf.TweedieNMF(3), V, pymf.LD(n_threads=1), n_samples=500, seed=0,
                      progress=False)
    assert res.n_kept == 500


def test_divergence_leaves_a_usable_checkpoint(tmp_path):
    """Checkpoints only ever hold finite states: after a divergence the last one is intact.
    (A step of 0.3: its fitted values run away at iteration 5; 1e6 now stops at iteration 1,
    before any checkpoint, by the fitted values' check.)"""
    path = tmp_path / "ck.npz"
    with pytest.raises(pymf.DivergenceError) as info:
        run(sampler=pymf.PSGLD(blocks=2, step_size=0.3), n_samples=500, checkpoint=path,
            checkpoint_every=1)
    assert info.value.iteration >= 2
    with np.load(path) as ck:
        assert int(ck["kernel_t"]) == info.value.iteration - 1
        assert np.all(np.isfinite(ck["kernel_W_grid"])) and np.all(np.isfinite(ck["kernel_Ht_grid"]))


@pytest.mark.parametrize("bad, message", [
    (V_OK.astype(complex), "real numbers"), (V_OK.astype(str), "real numbers"),
    (V_OK > 1, "real numbers"), (np.ma.masked_array(V_OK, V_OK > 1), "masked array"),
    ([[1.0, 2.0], [3.0]], "rectangular")])
def test_data_that_would_be_cast_silently_is_refused(bad, message):
    """complex (imaginary part dropped), strings, booleans, masked arrays (mask ignored)."""
    with pytest.raises(ValueError, match=message):
        run(bad)
    if not isinstance(bad, list):
        with pytest.raises(ValueError, match=message):
            pymf.Ratings([0, 1], [0, 1], np.asarray(bad).ravel()[:2] if not
                         isinstance(bad, np.ma.MaskedArray) else bad.ravel()[:2])


def test_huge_float_indices_are_not_wrapped_into_negative_ones():
    with pytest.raises(ValueError, match="integer indices"):
        pymf.Ratings([1e20], [0], [1.0])


@pytest.mark.parametrize("make", [
    lambda: pymf.PSGLD(blocks=2, n_threads=100_000), lambda: pymf.LD(n_threads=65_536),
    lambda: pymf.Gibbs(blocks=2, n_threads=10**6), lambda: pymf.DSGLD(n_threads=40_000),
    lambda: pymf.BPMFGibbs(n_threads=2**31)])
def test_thread_counts_the_runtime_cannot_create_are_refused(make):
    """Tens of thousands of OpenMP threads made libgomp abort the process or segfault."""
    with pytest.raises(ValueError, match="too many threads"):
        make()


def test_minibatches_larger_than_the_data_are_refused():
    with pytest.raises(ValueError, match="larger than the 120 entries"):
        run(sampler=pymf.SGLD(step_size=1e-3, batch_size=2**31))
    R = pymf.Ratings.from_dense(V_OK)
    with pytest.raises(ValueError, match="larger than the 120 training ratings"):
        pymf.sample(pymf.BPMF(2), R, pymf.DSGLD(blocks=2, batch_size=10**9), n_samples=2)
    with pytest.raises(ValueError, match="too many"):
        pymf.DSGLD(chains=10**6)
    with pytest.raises(ValueError, match="nothing would be kept"):
        pymf.sample(pymf.BPMF(2), R, pymf.DSGLD(blocks=2, batch_size=10), n_samples=5, thin=6)


def test_an_overflowing_product_is_a_divergence_not_a_nan_trace():
    """W and H stay finite but W H overflows (a huge prior rate): the run stops with
    DivergenceError naming the iteration, instead of returning NaN log-likelihoods."""
    with pytest.raises(pymf.DivergenceError, match="diverged at iteration") as info:
        run(model=pymf.TweedieNMF(3, lam_w=1e300), n_samples=20)
    assert info.value.result.n_kept == info.value.iteration - 1
    with pytest.raises(ValueError, match="W0 @ H0 overflows"):
        run(init=(np.full((12, 3), 1e200), np.full((3, 10), 1e200)))


def test_bpmf_gibbs_stops_on_a_non_finite_state_and_keeps_the_last_finite_one():
    R = pymf.Ratings.from_dense(V_OK)
    with pytest.raises(pymf.DivergenceError, match="diverged at sweep 1") as info:
        pymf.sample(pymf.BPMF(2, mean_rating=1e300), R, pymf.BPMFGibbs(), n_samples=3)
    assert all(np.all(np.isfinite(v)) for v in info.value.result.last_state.values())
    with pytest.raises(ValueError, match="nw_nu0 must be a positive finite number"):
        pymf.BPMFGibbs(nw_nu0=np.inf)
    with pytest.raises(ValueError, match="nu0 > rank - 1"):  # the C core's own check
        pymf.sample(pymf.BPMF(3), R, pymf.BPMFGibbs(nw_nu0=1.5), n_samples=3)


def test_files_that_are_not_results_or_checkpoints_are_named(tmp_path):
    """pymf.load and checkpoint= on a foreign, empty or truncated file: a ValueError saying
    so (not a KeyError or EOFError from inside numpy); a FitResult loads back."""
    foreign, empty = tmp_path / "foreign.npz", tmp_path / "empty.npz"
    np.savez(foreign, a=np.ones(3))
    empty.write_bytes(b"")
    for path in (foreign, empty):
        with pytest.raises(ValueError, match="not a result saved by pymf"):
            pymf.load(path)
        with pytest.raises(ValueError, match="checkpoint"):
            run(checkpoint=path)
    fit = pymf.fit(MODEL, V_OK, pymf.SGD(step_size=1e-3), n_epochs=2)
    back = pymf.load(fit.save(str(tmp_path / "fit.npz")))
    assert isinstance(back, pymf.FitResult) and np.array_equal(back.W, fit.W)
    with pytest.raises(ValueError, match="out of range"):
        back.predict([12], [0])
    with pytest.raises(ValueError, match="positive integer"):
        pymf.Gibbs(blocks=1.5)


@pytest.mark.parametrize("call, message", [
    (lambda: pymf.TweedieNMF(2, beta="a"), "beta must be a finite number"),
    (lambda: pymf.TweedieNMF(2, lam_w=None), "lam_w must be a positive finite number"),
    (lambda: pymf.TweedieNMF(2**40), "rank=.* is too large"),
    (lambda: pymf.BPMF(2, mean_rating="a"), "mean_rating must be a finite number"),
    (lambda: pymf.BPMFGibbs(nw_nu0="a"), "nw_nu0"),
    (lambda: pymf.PSGLD(blocks=2, permute="no"), "permute must be True or False"),
    (lambda: pymf.BPMF(2, bias="no"), "bias must be True or False"),
    (lambda: pymf.DSGLD(round_length=2**31), "round_length"),
    # these reached the C core's int and failed as a bare OverflowError naming no option
    (lambda: pymf.DSGLD(hyper_every=2**31), r"hyper_every=2147483648 is too large \(at most 2\*\*31 - 1\)"),
    (lambda: pymf.CollapsedIBP(split_merge=2**31), r"split_merge=2147483648 is too large"),
    (lambda: pymf.HybridIBP(sub_iterations=10**12), r"sub_iterations=1000000000000 is too large"),
    (lambda: pymf.HybridIBP(warm_start=2**70), r"warm_start=\d+ is too large"),
    (lambda: pymf.SIBM(batch_max=10**30), r"batch_max=\d+ is too large"),
    (lambda: pymf.SIBM(batch_size=10**20), r"batch_size=\d+ is too large"),
    (lambda: pymf.datasets.make_tweedie_nmf(5, 5, 2, phi=np.inf), "phi must be"),
    (lambda: pymf.datasets.make_tweedie_nmf(5, 5, 2, lam_w=0), "lam_w must be"),
    (lambda: pymf.datasets.make_tweedie_nmf(None, 5, 2), "n_rows must be a positive integer"),
    (lambda: run(test=pymf.Ratings([], [], [], shape=V_OK.shape)), "test set is empty"),
    (lambda: run(test=np.ones(10)), "the test set: .*2-D"),
])
def test_parameters_are_named_in_their_errors(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_a_sampler_given_a_model_it_cannot_run_is_a_type_error_naming_both():
    with pytest.raises(TypeError, match="PSGLD cannot sample a NoneType model"):
        pymf.sample(None, V_OK, PSGLD, n_samples=2)
    with pytest.raises(TypeError, match="SGD cannot fit a NoneType model; SGD runs on BPMF, "
                                        "TweedieNMF"):
        pymf.fit(None, V_OK, pymf.SGD())
    with pytest.raises(TypeError, match="CollapsedIBP cannot sample a TweedieNMF model; a "
                                        "TweedieNMF model takes .*PSGLD"):
        pymf.sample(MODEL, V_OK, pymf.CollapsedIBP(), n_samples=2)


def test_movielens_files_with_bad_lines_or_ids_are_named(tmp_path):
    bad_ids = tmp_path / "u.data"
    bad_ids.write_text("1.5\t1\t3\t0\n2\t1\t4\t0\n")
    with pytest.raises(ValueError, match="not integers"):
        pymf.datasets.load_movielens(bad_ids)
    short = tmp_path / "ratings.dat"
    short.write_text("1::2::3::4\n1::3\n")
    with pytest.raises(ValueError, match="fewer than three"):
        pymf.datasets.load_movielens(short)
    binary = tmp_path / "junk.data"
    binary.write_bytes(bytes(range(256)) * 4)
    with pytest.raises(ValueError, match="not a MovieLens ratings file"):
        pymf.datasets.load_movielens(binary)


def test_second_fuzzing_pass(tmp_path):
    """What a second pass found: each is now a ValueError (or DivergenceError) naming it."""
    R = pymf.Ratings.from_dense(V_OK)
    res = run(n_samples=4)
    cases = [
        (lambda: pymf.fit(pymf.BPMF(2), R, pymf.SGD(), init={"U": np.zeros((12, 2))}),
         "init= is not supported when fitting a BPMF"),
        (lambda: run(keep_samples="no"), "keep_samples must be True or False"),
        (lambda: run(progress="no"), "progress must be True or False"),
        (lambda: run(callback=5), "callback must be callable"),
        (lambda: run(checkpoint=""), "non-empty file name"),
        (lambda: run(checkpoint=tmp_path / "missing" / "ck"), "does not exist"),
        (lambda: res.save(None), "non-empty file name"),
        (lambda: pymf.load(res.save(str(tmp_path / "r.npz")), mmap="yes"), "mmap must be"),
        (lambda: pymf.PolynomialDecay("a"), "PolynomialDecay: a must be"),
        (lambda: R.split("a"), "test_fraction must be a number"),
        (lambda: R.split(0.2, seed=-1), "seed must be a non-negative integer"),
        (lambda: pymf.datasets.make_tweedie_nmf(5, 5, 2, seed=-1), "seed must be"),
        (lambda: pymf.Ratings.from_scipy(V_OK), "takes a scipy.sparse matrix"),
        (lambda: pymf.Ratings([0], [0], [1.0], shape=(True, True)), "two positive integers"),
    ]
    for call, message in cases:
        with pytest.raises(ValueError, match=message):
            call()
    fit = pymf.fit(MODEL, V_OK, pymf.SGD(step_size=1e-3), n_epochs=1)
    assert pymf.load(fit.save(str(tmp_path / "plain"))).W.shape == (12, 3)  # plain.npz
    A, x, _ = pymf.datasets.make_linear_gaussian(50, 3, seed=0)
    with pytest.raises(pymf.DivergenceError, match="diverged at iteration") as info:
        pymf.sample(pymf.LinearGaussian(), (A, x), pymf.SGRLD(step_size=1e6), n_samples=50)
    assert np.all(np.isfinite(info.value.result.mean)) or info.value.result.n_kept == 0


def test_many_split_merge_proposals_run():
    """The split-merge scratch was sized for (K + split_merge)^2 doubles up front (80 GB at
    10^5 proposals), and its failed allocation was reported as 'a split-merge proposal met
    a matrix that is not positive definite'."""
    X = pymf.datasets.make_cambridge(n=6, sigma_x=0.5, seed=0)[0]
    ibp = pymf.IBPLinearGaussian()
    for sampler in (pymf.CollapsedIBP(split_merge=10**5),
                    pymf.HybridIBP(processes=2, split_merge=10**5)):
        res = pymf.sample(ibp, X[:4], sampler, n_samples=1, seed=0)
        assert res.n_kept == 1


def test_ibp_data_that_is_not_a_dense_array_is_named():
    """Ratings and scipy.sparse gave numpy's 'float() argument must be ... not Ratings' and
    'setting an array element with a sequence'; a masked array's mask was ignored."""
    X = pymf.datasets.make_cambridge(n=6, sigma_x=0.5, seed=0)[0]
    ibp = pymf.IBPLinearGaussian()
    for data in (pymf.Ratings.from_dense(X), scipy.sparse.csr_matrix(X)):
        with pytest.raises(ValueError, match="X must be a dense N x D array"):
            pymf.sample(ibp, data, pymf.CollapsedIBP(), n_samples=2)
    with pytest.raises(ValueError, match="pass the mask as test_mask"):
        pymf.sample(ibp, np.ma.masked_array(X, X > 0.5), pymf.CollapsedIBP(), n_samples=2)


@pytest.mark.parametrize("change, message", [
    (lambda ck: ck.pop("kernel_W_grid"), "damaged .*KeyError"),
    (lambda ck: ck.pop("counters"), "damaged .*KeyError"),
    (lambda ck: ck.update(counters=-ck["counters"] - 7), "damaged .*counters"),
    (lambda ck: ck.update(counters=np.int64(3)), "damaged .*counters"),
])
def test_a_damaged_checkpoint_of_this_run_is_named(tmp_path, change, message):
    """A checkpoint whose fingerprint matches but whose arrays were lost or edited: a
    ValueError naming the file, not a KeyError, a TypeError ('NoneType' object is not
    callable, from negative counters) or an IndexError from whichever kernel read it."""
    path = tmp_path / "ck.npz"
    run(n_samples=3, seed=0, checkpoint=path, callback=lambda info: True)  # stops at 1
    ck = dict(np.load(path))
    change(ck)
    np.savez(path, **ck)
    with pytest.raises(ValueError, match=message):
        run(n_samples=3, seed=0, checkpoint=path)


@pytest.mark.parametrize("call, message", [
    # Python's float power raised OverflowError (34, 'Numerical result out of range')
    (lambda: pymf.sample(pymf.AlphaStableNMF(2), np.full((4, 4), 1e300),
                         pymf.PSGLD(blocks=1, step_size=1e-3), n_samples=2),
     "data's scale is too large"),
    (lambda: pymf.IBPLinearGaussian(sigma_a=1e200), "sigma_a squared must be"),
    (lambda: pymf.IBPLinearGaussian(sigma_x=1e150, sigma_a=1e-150), "sigma_x / sigma_a squared"),
    # a zero variance: 'the collapsed update of row 2 met a matrix that is not positive definite'
    (lambda: pymf.IBPLinearGaussian(sigma_x=1e-200), "sigma_x squared must be"),
    # wrapped by the cast to int64 and reported as a negative index
    (lambda: pymf.Ratings(np.array([2**64 - 1], dtype=np.uint64), [0], [1.0]),
     "index \\(18446744073709551615\\) too large"),
    (lambda: pymf.fit(MODEL, V_OK, pymf.SGD(step_size=1e-3), n_epochs=1).predict(
        np.array([2**64 - 1], dtype=np.uint64), [0]), "row id 18446744073709551615 is out"),
    # the first bad value of a dense matrix was printed as its whole row
    (lambda: pymf.fit(pymf.LogisticMF(2), V_OK, pymf.SIBM(batch_size=10), n_updates=2),
     r"must be 0 or 1, found np.float64\([0-9.]+\)$"),
])
def test_values_that_overflowed_or_were_misreported(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_result_methods_name_what_they_were_given(tmp_path):
    """LinearResult.predict with a design matrix of the wrong width failed inside numpy's
    matmul; pymf.load of a directory that is not a saved result was a FileNotFoundError
    for its meta.json, although the path given exists."""
    A, x, _ = pymf.datasets.make_linear_gaussian(50, 3, seed=0)
    res = pymf.sample(pymf.LinearGaussian(), (A, x), pymf.HAMCMC(memory=3, step_size=0.01),
                      n_samples=3, seed=0)
    assert np.shape(res.predict(A[:2])) == (2,) and np.ndim(res.predict(A[0])) == 0
    with pytest.raises(ValueError, match=r"A must be a vector of 3 values or an n x 3 matrix"):
        res.predict([0], [0])
    with pytest.raises(ValueError, match="not a result saved by pymf .*without the meta.json"):
        pymf.load(tmp_path)


def test_an_auto_step_whose_pilot_always_diverges_raises_divergence_error():
    """A pilot that fails at every step: the back-offs run out and DivergenceError says so
    (iteration 0); raised without its iteration argument it was a TypeError instead. Data of
    scale 1e-300 made NMF's pilot fail so until the fall it allows became at least a nat per
    observed entry (tests/test_autostep.py): they run now."""
    from pymf.engine import autostep
    with pytest.raises(pymf.DivergenceError, match="the pilot diverged even at eps") as info:
        autostep.choose(lambda theta: -theta, np.ones(4), np.random.SeedSequence(0),
                        lambda eps: False)
    assert info.value.iteration == 0
    res = run(V_OK * 1e-300, sampler=pymf.PSGLD(blocks=2), n_samples=2)
    assert np.all(np.isfinite(res.trace["loglik"]))


def test_an_option_a_family_does_not_take_is_named_with_the_options_it_does():
    """Python's own message named the family's runner: 'sample_ibp() got an unexpected
    keyword argument 'init''."""
    X = np.zeros((5, 3))
    with pytest.raises(TypeError, match="pymf.sample of IBPLinearGaussian with CollapsedIBP "
                                        "takes no option 'init'; it takes burnin, thin"):
        pymf.sample(pymf.IBPLinearGaussian(), X, pymf.CollapsedIBP(), n_samples=2, init=None)
    with pytest.raises(TypeError, match="takes no option 'burn_in'; it takes burnin") as info:
        run(n_samples=2, burn_in=3)
    # the NMF runner's hooks for the families built on it are not the user's options
    assert str(info.value).endswith("checkpoint, checkpoint_every, progress, callback")
    with pytest.raises(TypeError, match="pymf.fit of TweedieNMF with SGD takes no option "
                                        "'n_epoch'; it takes n_epochs"):
        pymf.fit(MODEL, V_OK, pymf.SGD(step_size=1e-3), n_epoch=3)


def test_too_many_kept_draws_name_the_options_behind_them():
    """numpy's MemoryError named only an array's shape ('Unable to allocate 7.28 TiB for an
    array with shape (1000000000000,)'). Both sizes exceed any 64-bit address space, so the
    allocations fail whatever the machine's overcommit policy."""
    with pytest.raises(MemoryError, match=r"keeping 1000000000000000 draws \(n_samples "
                                          r"1000000000000000, thin 1\).*a larger thin"):
        run(n_samples=10**15)
    # 10^7 draws of 22 x 200,000 factors: 175 TiB
    with pytest.raises(MemoryError, match=r"keeping 10000000 draws .*sample_dir=.*"
                                          r"keep_samples=False"):
        run(model=pymf.TweedieNMF(200_000), n_samples=10**7)


def test_an_ibp_alpha_that_implies_too_many_features_is_named():
    """The starting Z is drawn from the IBP(alpha) prior: alpha=1e12 looped over about
    4.5e12 columns (out of memory or no end), alpha=1e4 was numpy's 'Unable to allocate
    15.3 GiB for an array with shape (45306, 45306)'. Now a ValueError naming alpha, its
    value, the features it implies and the largest alpha these rows allow."""
    from pymf.ibp.chain import MAX_FEATURES
    X = pymf.datasets.make_cambridge(n=50, seed=0)[0]
    for alpha, implied in ((1e4, r"4\.499e\+04"), (1e12, r"4\.499e\+12")):
        for sampler in (pymf.CollapsedIBP(), pymf.HybridIBP(processes=2)):
            with pytest.raises(ValueError, match=rf"alpha={alpha!r} implies about {implied} "
                                                 rf"features for the N=50 rows of X.*more than "
                                                 rf"the {MAX_FEATURES}.*at most 3642"):
                pymf.sample(pymf.IBPLinearGaussian(alpha=alpha), X, sampler, n_samples=2,
                            seed=0)


def test_cli_data_files_that_are_not_numpy_files_are_named(tmp_path, capsys):
    """Random bytes or a text file named .npy or .npz were numpy's 'This file contains
    pickled (object) data. If you trust the file you can load it unsafely using the
    `allow_pickle=` keyword argument' (pymf sample, bpmf, ibp), an empty .npy and a .npz
    without X were an EOFError and a KeyError traceback (pymf ibp). Now one line naming the
    file, what is wrong with it and the formats --data takes, and exit status 2."""
    from pymf import cli
    rng = np.random.default_rng(0)
    files = {}
    for name, content in (("random.npy", rng.bytes(4096)), ("text.npy", b"1 2 3\n4 5 6\n"),
                          ("random.npz", rng.bytes(4096)), ("text.npz", b"1 2 3\n4 5 6\n"),
                          ("empty.npy", b"")):
        files[name] = tmp_path / name
        files[name].write_bytes(content)
    np.savez(tmp_path / "other.npz", Y=np.ones(3))
    out = ["--out", str(tmp_path / "o")]
    cases = [(["sample", "--data", str(files["random.npy"])], "random.npy' is not a valid "
              "NumPy .npy file", "--data takes 'demo'"),
             (["bpmf", "--data", str(files["text.npy"])], "text.npy' is not a valid NumPy "
              ".npy file", "a .npz holding a matrix V"),
             (["sample", "--data", str(files["random.npz"])], "random.npz' is not a valid "
              "NumPy .npz file", "a .npy matrix"),
             (["ibp", "--data", str(files["text.npy"])], "text.npy' is not a valid NumPy .npy "
              "file", "--data takes 'cambridge'"),
             (["ibp", "--data", str(files["text.npz"])], "text.npz' is not a valid NumPy .npz "
              "file", "a .npz holding X"),
             (["ibp", "--data", str(files["empty.npy"])], "empty.npy' is empty, not a NumPy "
              ".npy file", "a .npy file of X"),
             (["ibp", "--data", str(tmp_path / "other.npz")], "other.npz' holds no array X "
              "(it holds Y)", "a .npz holding X"),
             (["sibm", "--data", str(files["random.npz"])], "random.npz' is not a valid NumPy "
              ".npz file", "scipy.sparse.save_npz"),
             (["sibm", "--data", str(files["random.npy"])], "pymf sibm reads no .npy file",
              "a MovieLens ratings file")]
    for argv, problem, accepted in cases:
        assert cli.main(argv + out) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("pymf: error: --data ") and err.count("\n") == 1, err
        assert problem in err and accepted in err and "pickle" not in err, err


def test_an_sibm_test_set_of_one_class_warns_that_its_auc_is_nan():
    """Labels all 1 (or all 0): test_auc was NaN without a word. AUC is undefined there,
    but test_loglik still measures the fit, so it is one UserWarning at the start naming
    the class present, not an error; test_auc stays NaN and test_loglik finite."""
    import warnings
    X = pymf.sibm.make_binary_mf(60, 50, 3, density=0.1, seed=0)[0]
    train, (rows, cols, labels) = pymf.sibm.holdout(X, 0.2, seed=0)
    n = int(labels.sum())
    for present, absent in ((1, 0), (0, 1)):
        pick = labels == present
        with pytest.warns(UserWarning) as record:
            res = pymf.fit(pymf.LogisticMF(3), train, pymf.SIBM(batch_size=100), n_updates=4,
                           seed=0, trace_every=2, test=(rows[pick], cols[pick], labels[pick]))
        assert len(record) == 1 and record[0].filename == __file__
        assert str(record[0].message).startswith(
            f"test=: the test set's {n} labels are all {present} (no {absent}): AUC is "
            "undefined without both classes, so test_auc is traced as NaN")
        assert np.all(np.isnan(res.trace["test_auc"]))
        assert np.all(np.isfinite(res.trace["test_loglik"]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # both classes: no warning, and an AUC
        res = pymf.fit(pymf.LogisticMF(3), train, pymf.SIBM(batch_size=100), n_updates=4,
                       seed=0, test=(rows, cols, labels))
    assert 0.0 <= res.trace["test_auc"][-1] <= 1.0


def test_an_ibp_chain_that_grows_past_the_feature_cap_stops_by_name(monkeypatch):
    """A large fixed alpha (sample_hyper=False) proposes Poisson(alpha / N) new features per
    row, so the chain's K grew without bound during sampling (MAX_FEATURES bounded only the
    start) until memory ran out, reported as a matrix that is not positive definite. Now the
    cap holds during sampling: a step whose outcome would pass it stops with a
    DivergenceError naming the iteration, the count, the cap and alpha, carrying the partial
    result and the last good state (the last completed iteration's, the same as a run that
    ended there). A smaller cap here, so that the test is fast: MAX_FEATURES is the one
    source of it (pymf.ibp.chain hands it to the C core). A small fixed sigma_x makes the
    chain add features to explain the noise, so that it grows past the cap after its first
    iteration (the collapsed sweep's random visit order changed the chains; the iteration
    each stops at is read from the error)."""
    import re
    import pymf.ibp.chain as ibp_chain
    monkeypatch.setattr(ibp_chain, "MAX_FEATURES", 32)
    X = pymf.datasets.make_cambridge(n=50, seed=0)[0]
    model = pymf.IBPLinearGaussian(alpha=20 / ibp_chain.harmonic(50), sigma_x=0.1,
                                   sample_hyper=False)
    for sampler in (pymf.CollapsedIBP(), pymf.HybridIBP(processes=2)):
        with pytest.raises(pymf.DivergenceError) as info:
            pymf.sample(model, X, sampler, n_samples=50, seed=3, progress=False)
        exc = info.value
        found = re.fullmatch(r"iteration (\d+): the chain would hold (\d+) features, more than "
                             r"the cap MAX_FEATURES = 32 \(alpha = 4\.44523, N = 50 rows\); kept "
                             r"the state of iteration (\d+)\. Give a smaller alpha, or let it "
                             r"be sampled \(sample_hyper=True\)", str(exc))
        assert found, str(exc)
        t, held, kept = (int(g) for g in found.groups())
        assert t == exc.iteration >= 2 and kept == t - 1 and held > 32
        K = exc.result.trace["K"]  # at the start and after iterations 1 .. t - 1
        assert len(K) == t and K.max() <= 32 and K[-1] == exc.state["Z"].shape[1]
        ended_there = pymf.sample(model, X, sampler, n_samples=t - 1, seed=3, progress=False)
        for name in ("Z", "A", "pi", "sigma_x", "sigma_a", "alpha"):
            np.testing.assert_array_equal(exc.state[name], ended_there.last_state[name])


def test_a_file_that_is_not_a_result_is_named_without_numpy_pickle_advice(tmp_path, capsys):
    """pymf.load (and pymf predict --result) on random bytes named .npz said 'not a result
    saved by pymf' and then numpy's 'This file contains pickled (object) data. If you trust
    the file you can load it unsafely using the `allow_pickle=` keyword argument'. Now only
    what is wrong (not a zip archive, a .npy, empty, or a .npz without 'meta' and what it
    holds) and what a result file holds."""
    from pymf import cli
    garbage, npy, empty, foreign = (tmp_path / f"{name}.npz"
                                    for name in ("garbage", "npy", "empty", "foreign"))
    garbage.write_bytes(np.random.default_rng(0).bytes(200))
    with open(npy, "wb") as fh:
        np.save(fh, np.ones(3))
    empty.write_bytes(b"")
    np.savez(foreign, X=np.ones(3), V=np.ones(2))
    holds = "holding 'meta' (the kind of result and its settings, as JSON) and the result's"
    for path, problem in ((garbage, "it is not a zip archive, as numpy.savez writes"),
                          (npy, "it is a NumPy .npy file (one array), not a .npz archive"),
                          (empty, "it is empty"),
                          (foreign, "it is a .npz archive without 'meta'; it holds V, X")):
        with pytest.raises(ValueError) as info:
            pymf.load(path)
        message = str(info.value)
        assert message.startswith(f"{str(path)!r} is not a result saved by pymf: {problem}; ")
        assert holds in message and "pickle" not in message, message
        assert cli.main(["predict", "--result", str(path), "--rows", "0", "--cols", "0"]) == 2
        err = capsys.readouterr().err
        assert err == f"pymf: error: {message}\n", err


def test_sibm_holdout_refuses_what_it_cannot_hold_out():
    """holdout holds out as many zeros as ones: a matrix with too few zeros made its draw
    loop for ever (the CLI's default test fraction on dense data), one with no ones ended in
    a NumPy message. Both name the problem now; a matrix with just enough zeros finishes."""
    with pytest.raises(ValueError, match=r"holdout: 2 ones held out \(fraction 0.1 of 25\) "
                       r"need as many zeros, and the matrix has 0; give a smaller fraction"):
        pymf.sibm.holdout(np.ones((5, 5)), 0.1, seed=0)
    with pytest.raises(ValueError, match="holdout: the matrix has no ones to hold out"):
        pymf.sibm.holdout(np.zeros((5, 5)), 0.1, seed=0)
    X = np.ones((10, 10))
    X[0, :5] = 0
    train, (rows, cols, labels) = pymf.sibm.holdout(X, 0.05, seed=0)  # 5 ones, 5 zeros
    assert np.array_equal(np.sort(cols[labels == 0]), np.arange(5))
    assert np.all(rows[labels == 0] == 0)


def test_bpmf_warns_of_a_ratings_table_taken_as_a_matrix_and_of_tiny_ratings():
    """A (user, item, rating) table passed as a dense array (np.c_[rows, cols, values], a
    DataFrame, a tuple of the three arrays) was fitted as an N x 3 matrix without a word;
    ratings of a tiny scale met priors that hold the factors near a scale of one, and got
    intervals that cover everything. Both warn now, naming what to do; a matrix of ratings
    of a usual scale does not."""
    import warnings
    rng = np.random.default_rng(0)
    table = np.c_[rng.integers(0, 50, 200), rng.integers(0, 40, 200),
                  rng.integers(1, 6, 200)].astype(float)
    model = pymf.BPMF(2)
    for data in (table, tuple(table.T)):
        with pytest.warns(UserWarning, match=r"first two columns look like user and item ids: "
                          r"it is taken as a matrix of ratings .* pass pymf.Ratings\(rows, "
                          r"cols, values\)") as record:
            model.check_data(data)
        assert record[0].filename == __file__
    with pytest.warns(UserWarning, match=r"the ratings' sd is 0.0[0-9]+: BPMF's priors expect "
                                         r"ratings of a scale of about one"):
        model.check_data(pymf.Ratings.from_dense(rng.normal(size=(20, 10)) * 0.01))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model.check_data(rng.normal(size=(200, 3)))  # real-valued: a matrix
        model.check_data(rng.normal(3, 1, size=(20, 10)))


def test_a_checkpoint_path_that_names_a_directory_is_refused(tmp_path, monkeypatch):
    """checkpoint="." wrote a file "..npz" into the working directory."""
    monkeypatch.chdir(tmp_path)
    for path in (".", "..", "sub/"):
        with pytest.raises(ValueError, match=f"the checkpoint path '{re.escape(path)}' is a "
                                             "directory, not a file name"):
            run(V_OK, n_samples=2, checkpoint=path)
    assert not list(tmp_path.iterdir())


def test_an_sibm_init_that_is_not_a_result_is_named():
    """An init dict lacking keys ended in a bare KeyError: 'row_updates'."""
    X = pymf.sibm.make_binary_mf(20, 15, 2, density=0.2, seed=0)[0]
    with pytest.raises(ValueError, match="init: the .natural dict of an SIBMResult holds u1, "
                                         "u2, .*; this one lacks u2, v1"):
        pymf.fit(pymf.LogisticMF(2), X, pymf.SIBM(), init={"u1": 1})
    with pytest.raises(ValueError, match="init must be an SIBMResult"):
        pymf.fit(pymf.LogisticMF(2), X, pymf.SIBM(), init=[1, 2])


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # NumPy's overflow on the way there
def test_an_auto_step_that_underflows_names_the_curvature_not_a_step_never_given():
    """Data or priors of an extreme scale make the start's curvature overflow: the run then
    refused "step size at iteration 1 is 0", a step the user never set."""
    A, x, _ = pymf.datasets.make_linear_gaussian(50, 3, seed=0)
    for model, data in ((pymf.LinearGaussian(noise_var=1e-300), (A, x)),
                        (pymf.LinearGaussian(), (A * 1e100, x))):
        with pytest.raises(ValueError, match=r"step_size='auto': the curvature at the start, "
                                             r"lambda_max = inf, leaves no positive step"):
            pymf.sample(model, data, pymf.HAMCMC(gamma=0.1), n_samples=20, seed=0)


def test_saving_a_result_over_an_existing_file_is_named(tmp_path):
    """A directory save onto an existing file was a bare '[Errno 17] File exists'."""
    existing = tmp_path / "notes.txt"
    existing.write_text("mine")
    with pytest.raises(ValueError, match="the result path .* is an existing file: a path "
                                         "without .npz saves a directory there"):
        run(n_samples=2).save(str(existing))
    assert existing.read_text() == "mine"


def test_a_run_longer_than_a_run_can_count_is_refused():
    """n_samples=10**30 ended in numpy's "Maximum allowed dimension exceeded"."""
    X, _, _ = pymf.datasets.make_cambridge(n=20, seed=0)
    with pytest.raises(ValueError, match=rf"burnin \+ n_samples = {10 ** 30} units is more "
                                         r"than a run counts \(at most 2\*\*62\)"):
        pymf.sample(pymf.IBPLinearGaussian(), X, pymf.CollapsedIBP(), n_samples=10**30, seed=0)


def test_a_linear_gaussian_init_that_is_a_result_is_named():
    """init=<LinearResult> was refused as 'dtype object'."""
    A, x, _ = pymf.datasets.make_linear_gaussian(50, 3, seed=0)
    res = pymf.sample(pymf.LinearGaussian(), (A, x), pymf.HAMCMC(gamma=0.1), n_samples=5, seed=0)
    with pytest.raises(ValueError, match=r"init is a starting vector theta of 3 values, not a "
                                         r"result: .* pass result.samples\[-1\]"):
        pymf.sample(pymf.LinearGaussian(), (A, x), pymf.HAMCMC(gamma=0.1), n_samples=5,
                    seed=0, init=res)
    pymf.sample(pymf.LinearGaussian(), (A, x), pymf.HAMCMC(gamma=0.1), n_samples=5, seed=0,
                init=res.samples[-1])
