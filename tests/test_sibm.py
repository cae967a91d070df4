"""SIBM (pymf.sibm): the C core against the NumPy reference (tests/sibm_reference.py), the
noisy ELBO's unbiasedness and its importance weights, one natural-gradient step with rho = 1
against batch VB, convergence to the batch optimum, the Jaakkola-Jordan bound, determinism,
checkpoints and bad input.

Statistical tests use z-scores against their Monte-Carlo standard error with a fixed
threshold (|z| < 4.5: a false alarm about once in 150,000 runs per comparison)."""
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sparse

import pymf
from pymf.sibm import _sibm
from pymf.sibm.binary import as_binary

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sibm_reference as ref  # noqa: E402

PRIOR = (0.0, 1.0, 0.0, 1.0, 0.0, 10.0)
Z_MAX = 4.5


def small_matrix(L=7, M=5, density=0.3, seed=1):
    rng = np.random.default_rng(seed)
    return (rng.random((L, M)) < density).astype(float)


def chain_for(X, D=2, sampling="uniform", batch=0, seed=7, n_threads=1, spread=0.5, state_seed=3):
    """A C chain on dense X with a random (not prior) q, so that every term matters."""
    C = sparse.csr_matrix(X)
    chain = _sibm.Chain(C.indptr, C.indices, X.shape[1], D, PRIOR, sampling, batch, 100, 1,
                        10 ** 6, 0.5, 1.0, 0.7, seed, n_threads)
    rng = np.random.default_rng(state_seed)
    st = chain.state()
    L, M = X.shape
    u2 = rng.uniform(1, 4, (L, D))
    v2 = rng.uniform(1, 4, (M, D))
    chain.set_state(rng.normal(0, spread, (L, D)) * u2, u2, rng.normal(0, spread, (M, D)) * v2,
                    v2, np.array([-0.3 * 2.0, 2.0]), st["row_updates"], st["col_updates"], 0, 100)
    return chain


def copy_state(src, dst):
    dst.set_state(**{k: v for k, v in src.state().items()})


# ---- the C core against the reference ----

def test_elbo_matches_the_reference():
    X = small_matrix()
    chain = chain_for(X)
    assert chain.elbo() == pytest.approx(ref.elbo(X, ref.Q(chain.state()), PRIOR), rel=1e-12)


def test_batch_sweep_matches_the_reference():
    X = small_matrix()
    chain = chain_for(X)
    q = ref.Q(chain.state())
    chain.batch_sweep(1)
    ref.batch_sweep(X, q, PRIOR)
    got = ref.Q(chain.state())
    for name in ("mu_u", "var_u", "mu_v", "var_v", "mu_z", "var_z"):
        np.testing.assert_allclose(getattr(got, name), getattr(q, name), rtol=1e-10, atol=1e-12)


def test_batch_vb_never_decreases_the_elbo():
    X = small_matrix(12, 9, 0.25)
    chain = chain_for(X, D=3)
    elbos = [chain.elbo()]
    for _ in range(30):
        chain.batch_sweep(1)
        elbos.append(chain.elbo())
    assert np.all(np.diff(elbos) >= -1e-9 * abs(elbos[0]))
    assert elbos[-1] > elbos[0] + 1


def test_one_step_with_rho_one_and_every_entry_equals_a_batch_sweep():
    X = small_matrix()
    L, M = X.shape
    a, b = chain_for(X), chain_for(X)
    rows, cols = np.divmod(np.arange(L * M), M)
    # S-Uniform's weights: 1 / p(j | i) = M, 1 / p(i | j) = L, 1 / p(i, j) = L M
    b.update_entries(rows, cols, X[rows, cols], np.full(L * M, float(M)),
                     np.full(L * M, float(L)), np.full(L * M, float(L * M)), 1.0)
    a.batch_sweep(1)
    for key in ("u1", "u2", "v1", "v2", "z"):
        np.testing.assert_allclose(b.state()[key], a.state()[key], rtol=1e-12, atol=1e-13)


def test_the_one_step_check_fails_for_a_wrong_weight():
    """Power: the same comparison with the column weight off by 10 % does not pass."""
    X = small_matrix()
    L, M = X.shape
    a, b = chain_for(X), chain_for(X)
    rows, cols = np.divmod(np.arange(L * M), M)
    b.update_entries(rows, cols, X[rows, cols], np.full(L * M, float(M)),
                     np.full(L * M, 1.1 * L), np.full(L * M, float(L * M)), 1.0)
    a.batch_sweep(1)
    assert not np.allclose(b.state()["v1"], a.state()["v1"], rtol=1e-6)


# ---- the bound ----

def test_the_bound_is_below_the_log_likelihood_and_tight_at_xi_equal_abs_s():
    s = np.linspace(-8, 8, 161)
    for x in (0.0, 1.0):
        t = 2 * x - 1
        exact = ref.log_sigmoid(t * s)
        for xi in (0.1, 1.0, 3.0, 7.0):
            bound = ref.log_sigmoid(xi) + (t * s - xi) / 2 - ref.jj_lambda(xi) * (s * s - xi * xi)
            assert np.all(bound <= exact + 1e-12)
        tight = ref.log_sigmoid(np.abs(s)) + (t * s - np.abs(s)) / 2
        np.testing.assert_allclose(tight, exact, atol=1e-12)


def test_the_closed_form_xi_maximises_the_expected_bound():
    """f from the C core (at xi^2 = E[s^2]) equals the largest expected bound over a fine
    grid of xi, and exceeds it nowhere."""
    X = small_matrix()
    chain = chain_for(X)
    rows, cols = np.array([0, 3, 6]), np.array([1, 4, 0])
    mean, var, f = chain.entry_moments(rows, cols, X[rows, cols])
    for k in range(3):
        xi = np.linspace(1e-3, 10, 20001)
        e2 = var[k] + mean[k] ** 2
        grid = ref.log_sigmoid(xi) - xi / 2 + (X[rows[k], cols[k]] - 0.5) * mean[k] \
            - ref.jj_lambda(xi) * (e2 - xi * xi)
        assert f[k] >= grid.max() - 1e-12
        assert f[k] == pytest.approx(grid.max(), abs=1e-7)


# ---- sampling strategies and the noisy ELBO ----

def skewed_matrix():
    """40 x 40: columns 0-19 all ones (b_j = 1 in S-Biased), and row 0 also holds ones in
    columns 20 and 21 (b_j = 40): S-Biased's rejection within row 0 accepts about one draw
    in nine, so its 32 attempts run out in about 2 % of row 0's draws and the exact walk of
    the row is exercised too."""
    X = np.zeros((40, 40))
    X[:, :20] = 1
    X[0, 20:22] = 1
    return X


@pytest.mark.parametrize("matrix", ["small", "skewed"])
@pytest.mark.parametrize("sampling", ["uniform", "balanced", "biased"])
def test_draw_weights_are_the_inverse_probabilities(sampling, matrix):
    """Empirical frequencies of every cell match 1 / w_z (chi-square-like z-scores per cell),
    and the labels are the matrix's."""
    X = small_matrix(6, 5, 0.3, seed=4) if matrix == "small" else skewed_matrix()
    chain = chain_for(X, sampling=sampling)
    n = 400_000
    rows, cols, x, w_row, w_col, w_z = chain.draw(1, n)
    assert np.array_equal(x, X[rows, cols])
    L, M = X.shape
    counts = np.bincount(rows * M + cols, minlength=L * M)
    p = np.zeros(L * M)
    p[rows * M + cols] = 1 / w_z
    assert p.sum() == pytest.approx(1.0, abs=1e-12)
    z = (counts - n * p) / np.sqrt(n * p * (1 - p))
    assert np.max(np.abs(z)) < Z_MAX
    # w_row = 1 / p(j | i): summing p(j | i) over a row gives 1
    for i in range(L):
        js = np.unique(cols[rows == i])
        assert len(js) == M
        first = [np.flatnonzero((rows == i) & (cols == j))[0] for j in js]
        assert np.sum(1 / w_row[first]) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("sampling", ["uniform", "balanced", "biased"])
def test_noisy_elbo_is_unbiased_and_fails_without_its_weights(sampling):
    X = small_matrix(8, 6, 0.2, seed=5)
    chain = chain_for(X, sampling=sampling, D=2)
    exact = chain.elbo()
    estimates = np.array([chain.elbo_estimate(t, 200) for t in range(1, 3001)])
    se = estimates.std(ddof=1) / np.sqrt(len(estimates))
    assert abs(estimates.mean() - exact) / se < Z_MAX
    # the same draws without importance weights: L M mean(f) - KL
    L, M = X.shape
    rows, cols, x, _, _, _ = chain.draw(1, 600_000, stream=_sibm.STREAM_ELBO)
    f = chain.entry_moments(rows, cols, x)[2]
    naive = L * M * f.mean() - chain.kl()
    naive_se = L * M * f.std(ddof=1) / np.sqrt(len(f))
    if sampling == "uniform":
        assert abs(naive - exact) / naive_se < Z_MAX  # the weights are all 1 here
    else:
        assert abs(naive - exact) / naive_se > 10


def test_row_targets_need_the_conditional_weight_not_the_posters_c():
    """Given that a draw fell in row i, w_row = 1 / p(j | i) makes E[w_row g(j)] = sum_j g(j)
    for any g (the row's batch target); the poster's c_ij = 1 / (L M p(i, j)), scaled by M
    so that it is right for S-Uniform, is biased under S-Biased."""
    X = small_matrix(6, 8, 0.3, seed=6)
    chain = chain_for(X, sampling="biased")
    L, M = X.shape
    rows, cols, _, w_row, _, w_z = chain.draw(1, 600_000)
    g = np.linspace(1.0, 2.0, M) ** 2
    for i in range(L):
        mine = rows == i
        ours = w_row[mine] * g[cols[mine]]
        poster = (w_z[mine] / (L * M)) * M * g[cols[mine]]
        target = g.sum()
        assert abs(ours.mean() - target) / (ours.std(ddof=1) / np.sqrt(mine.sum())) < Z_MAX
        if i == 0:
            z_poster = abs(poster.mean() - target) / (poster.std(ddof=1) / np.sqrt(mine.sum()))
    assert z_poster > 10


# ---- convergence to the batch optimum ----

@pytest.mark.slow
def test_svi_converges_to_the_batch_vb_optimum():
    X, _, _, _ = pymf.sibm.make_binary_mf(60, 50, 2, density=0.2, scale=2.0, seed=3)
    model = pymf.LogisticMF(2)
    batch = pymf.fit(model, X, pymf.BatchVB(), n_updates=400, seed=1, trace_every=400)
    svi = pymf.fit(model, X, pymf.SIBM(sampling="biased", batch_size=3000, tau0=1.0, kappa=0.6),
                   n_updates=3000, seed=1, trace_every=3000)
    elbo_b, elbo_s = batch.trace["elbo"][-1], svi.trace["elbo"][-1]
    assert abs(elbo_s - elbo_b) < 1e-3 * abs(elbo_b)
    rows, cols = np.divmod(np.arange(60 * 50), 50)
    mean_b, var_b = batch._entries(rows, cols)
    mean_s, var_s = svi._entries(rows, cols)
    # stated tolerances on the logits E[s] (which span about -5 .. 5) and their sd: a
    # constant-size minibatch leaves SVI's iterate jittering around the optimum
    assert np.mean(np.abs(mean_s - mean_b)) < 0.05
    assert np.max(np.abs(mean_s - mean_b)) < 0.25
    assert np.max(np.abs(np.sqrt(var_s) - np.sqrt(var_b))) < 0.05
    np.testing.assert_allclose(svi.z_mean, batch.z_mean, atol=0.05)


# ---- determinism, checkpoints, save/load ----

def synthetic():
    X, _, _, _ = pymf.sibm.make_binary_mf(300, 200, 4, density=0.05, seed=2)
    return X


@pytest.mark.parametrize("batch_size", ["auto", 6000])  # 6000: the parallel path (>= 4096)
@pytest.mark.parametrize("sampling", ["uniform", "balanced", "biased"])
def test_same_fit_for_one_and_two_threads(sampling, batch_size):
    X = synthetic()
    fits = [pymf.fit(pymf.LogisticMF(4), X, pymf.SIBM(sampling=sampling, batch_size=batch_size,
                                                      n_threads=n),
                     n_updates=60, seed=4, trace_every=20) for n in (1, 2)]
    for key, value in fits[0].natural.items():
        np.testing.assert_array_equal(value, fits[1].natural[key])
    np.testing.assert_array_equal(fits[0].trace["batch_size"], fits[1].trace["batch_size"])


def test_batch_vb_same_for_one_and_two_threads():
    X = synthetic()
    fits = [pymf.fit(pymf.LogisticMF(3), X, pymf.BatchVB(n_threads=n), n_updates=3, seed=4)
            for n in (1, 2)]
    for key, value in fits[0].natural.items():
        np.testing.assert_array_equal(value, fits[1].natural[key])


@pytest.mark.parametrize("method", [pymf.SIBM(), pymf.BatchVB()], ids=["sibm", "batch"])
def test_checkpoint_kill_resume_equals_an_uninterrupted_fit(method, tmp_path):
    X = synthetic()
    model = pymf.LogisticMF(3)
    n = 12 if isinstance(method, pymf.BatchVB) else 80
    whole = pymf.fit(model, X, method, n_updates=n, seed=9, trace_every=2)
    path = tmp_path / "ck.npz"

    def kill(info):
        if info["iteration"] >= n // 2:
            raise KeyboardInterrupt

    with pytest.warns(RuntimeWarning, match="interrupted"):
        first = pymf.fit(model, X, method, n_updates=n, seed=9, trace_every=2, checkpoint=path,
                         checkpoint_every=4, callback=kill)
    assert first.interrupted
    resumed = pymf.fit(model, X, method, n_updates=n, seed=9, trace_every=2, checkpoint=path,
                       checkpoint_every=4)
    assert resumed.iterations == n
    for key, value in whole.natural.items():
        np.testing.assert_array_equal(value, resumed.natural[key])
    np.testing.assert_array_equal(whole.trace["elbo"], resumed.trace["elbo"])
    other = pymf.fit(model, X, method, n_updates=n, seed=10, trace_every=2)
    assert not np.array_equal(other.natural["u1"], whole.natural["u1"])


@pytest.mark.parametrize("suffix", ["", ".npz"])
def test_save_load_round_trip_and_predictions(tmp_path, suffix):
    X = synthetic()
    train, test = pymf.sibm.holdout(X, 0.1, seed=0)
    res = pymf.fit(pymf.LogisticMF(4), train, pymf.SIBM(), n_updates=50, seed=1, test=test,
                   trace_every=10)
    for key in ("elbo", "test_loglik", "test_auc", "batch_size", "time"):
        assert len(res.trace[key]) == 6 and np.all(np.isfinite(res.trace[key]))
    path = res.save(tmp_path / ("res" + suffix))
    back = pymf.load(path)
    assert isinstance(back, pymf.SIBMResult) and back.seed == 1
    np.testing.assert_array_equal(back.U_mean, res.U_mean)
    p, sd = res.predict_proba(test[0], test[1], return_std=True)
    np.testing.assert_array_equal(back.predict_proba(test[0], test[1]), p)
    assert np.all((p > 0) & (p < 1) & (sd >= 0) & (sd < 0.5))


def test_predict_proba_against_quadrature():
    """The probit approximation is within 0.02 of E_q[sigmoid(s)]."""
    from pymf.sibm.kernel import probabilities
    mean = np.linspace(-6, 6, 25).repeat(4)
    var = np.tile([0.01, 0.5, 2.0, 9.0], 25)
    p = probabilities(mean, var)
    rng = np.random.default_rng(0)
    s = mean[:, None] + np.sqrt(var)[:, None] * rng.standard_normal((1, 200_000))
    exact = (1 / (1 + np.exp(-s))).mean(axis=1)
    assert np.max(np.abs(p - exact)) < 0.02


# ---- bad input ----

@pytest.mark.parametrize("data, match", [
    (np.array([[0, 2], [1, 0]]), "values must be 0 or 1"),
    (sparse.csr_matrix(np.array([[0, 0.5], [1, 0]])), "values must be 0 or 1"),
    (sparse.coo_matrix((np.ones(2), ([0, 0], [1, 1])), shape=(2, 2)), "duplicate entry"),
    (pymf.Ratings([0, 1], [0, 1], [1.0, 3.0], shape=(2, 2)), "values must be 0 or 1"),
    (np.zeros((0, 3)), "empty"),
    (np.ones(4), "2-D"),
])
def test_bad_matrices_are_refused_by_name(data, match):
    with pytest.raises(ValueError, match=match):
        pymf.fit(pymf.LogisticMF(2), data, pymf.SIBM(), n_updates=2)


def test_bad_indices_are_refused():
    from pymf.sibm.binary import _from_coo
    with pytest.raises(ValueError, match="negative"):
        _from_coo(np.array([0, -1]), np.array([0, 1]), (2, 2), "X")
    with pytest.raises(ValueError, match="out of range"):
        _from_coo(np.array([0, 2]), np.array([0, 1]), (2, 2), "X")
    with pytest.raises(ValueError, match="outside"):
        _sibm.Chain(np.array([0, 1]), np.array([5]), 3, 2, PRIOR, "uniform", 0, 100, 1, 1000,
                    0.5, 1.0, 0.7, 1, 1)
    with pytest.raises(ValueError, match="sorted and unique"):
        _sibm.Chain(np.array([0, 2]), np.array([1, 1]), 3, 2, PRIOR, "uniform", 0, 100, 1, 1000,
                    0.5, 1.0, 0.7, 1, 1)


@pytest.mark.parametrize("make, match", [
    (lambda: pymf.LogisticMF(0), "rank"),
    (lambda: pymf.LogisticMF(-2), "rank"),
    (lambda: pymf.LogisticMF(2, prior_var_u=0), "prior_var_u"),
    (lambda: pymf.SIBM(theta_delta=0), "theta_delta"),
    (lambda: pymf.SIBM(theta_delta=-1.0), "theta_delta"),
    (lambda: pymf.SIBM(sampling="random"), "sampling"),
    (lambda: pymf.SIBM(batch_size=0), "batch_size"),
    (lambda: pymf.SIBM(batch_size="big"), "batch_size"),
    (lambda: pymf.SIBM(kappa=0.4), "kappa"),
    (lambda: pymf.SIBM(batch_min=10, batch_start=5), "batch_min <= batch_start"),
    (lambda: pymf.SIBM(batch_start=10, batch_max=5), "batch_start <= batch_max"),
    (lambda: pymf.SIBM(n_threads=0), "n_threads"),
])
def test_bad_settings_are_refused_by_name(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_bad_test_sets_and_run_lengths_are_refused():
    X = synthetic()
    model = pymf.LogisticMF(2)
    with pytest.raises(ValueError, match="n_updates"):
        pymf.fit(model, X, pymf.SIBM(), n_updates=0)
    with pytest.raises(ValueError, match="test"):
        pymf.fit(model, X, pymf.SIBM(), n_updates=2, test=([0], [0]))
    with pytest.raises(ValueError, match="test labels"):
        pymf.fit(model, X, pymf.SIBM(), n_updates=2,
                 test=(np.array([0]), np.array([0]), np.array([0.5])))
    with pytest.raises(TypeError, match="LogisticMF"):
        pymf.fit(model, X, pymf.SGD(), n_epochs=1)
    with pytest.raises(ValueError, match="too dense"):
        pymf.fit(model, np.ones((20, 20)) - np.eye(20) * (np.arange(20) == 0)[:, None],
                 pymf.SIBM(sampling="balanced"), n_updates=1)


def test_cli_sibm_runs_and_writes_a_summary(tmp_path):
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "pymf", "sibm", "--data", "synthetic",
                           "--synthetic-size", "200", "--rank", "3", "--updates", "30",
                           "--no-progress", "--out", str(out)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr
    import json
    summary = json.loads((out / "summary.json").read_text())
    assert summary["shape"] == [200, 200] and 0 <= summary["final_test_auc"] <= 1
    assert isinstance(pymf.load(out / "result.npz"), pymf.SIBMResult)


def test_every_input_form_gives_the_same_matrix():
    """A canonical CSR (taken as it is), a COO, an unsorted CSR, Ratings of ones and a dense
    array (stored zeros dropped) give the same ones."""
    dense = small_matrix(9, 7, 0.3, seed=8)
    csr = sparse.csr_matrix(dense)
    with_zero = csr.copy()
    with_zero.data[0] = 0.0  # a stored zero: that entry is a zero
    expected = dense.copy()
    r0, c0 = np.nonzero(dense)
    expected[r0[0], c0[0]] = 0
    rows, cols = np.nonzero(dense)
    order = np.random.default_rng(0).permutation(len(rows))
    unsorted = sparse.csr_matrix((np.ones(len(rows)), (rows[order], cols[order])), shape=dense.shape)
    unsorted.has_sorted_indices = False
    forms = [csr, csr.tocoo(), unsorted, pymf.Ratings(rows, cols, np.ones(len(rows)), shape=dense.shape),
             dense]
    for form in forms:
        X = as_binary(form)
        assert X.shape == dense.shape
        back = np.zeros(dense.shape)
        back[X.coo()] = 1
        np.testing.assert_array_equal(back, dense)
    X = as_binary(with_zero)
    back = np.zeros(dense.shape)
    back[X.coo()] = 1
    np.testing.assert_array_equal(back, expected)


def test_a_binary_matrix_of_csr_arrays_fits_as_its_scipy_matrix(tmp_path):
    """pymf.sibm.BinaryMatrix from the CSR arrays of scipy's save_npz file, read with np.load
    (no scipy): the same fit, bit for bit; its int64 arrays are the core's, not copies."""
    X = synthetic()
    sparse.save_npz(tmp_path / "x.npz", X)
    archive = np.load(tmp_path / "x.npz")
    B = pymf.sibm.BinaryMatrix(archive["indptr"].astype(np.int64),
                               archive["indices"].astype(np.int64), archive["shape"])
    assert as_binary(B) is B
    method = pymf.SIBM(sampling="biased", batch_size=500)
    fits = [pymf.fit(pymf.LogisticMF(3), data, method, n_updates=20, seed=5, trace_every=10)
            for data in (X, B)]
    for key, value in fits[0].natural.items():
        np.testing.assert_array_equal(value, fits[1].natural[key])
    np.testing.assert_array_equal(fits[0].trace["elbo"], fits[1].trace["elbo"])
    with pytest.raises(ValueError, match="row offsets"):
        pymf.sibm.BinaryMatrix(B.row_ptr[:-1], B.col_idx, B.shape)
    with pytest.raises(ValueError, match="1-D"):
        pymf.sibm.BinaryMatrix(B.row_ptr, B.col_idx.reshape(1, -1), B.shape)
    bad = pymf.sibm.BinaryMatrix(B.row_ptr, B.col_idx[::-1], B.shape)  # rows' columns unsorted
    with pytest.raises(ValueError, match="sorted and unique|outside"):
        pymf.fit(pymf.LogisticMF(3), bad, method, n_updates=2)


def test_default_batch_bounds_scale_with_the_matrix():
    assert pymf.SIBM().sizes(2000, 2000)[:2] == (1000, 1000)
    assert pymf.SIBM().sizes(10_000, 10_000)[:2] == (5000, 5000)
    assert pymf.SIBM().sizes(50, 40)[:2] == (1000, 1000)
    assert pymf.SIBM(batch_min=200, batch_start=300).sizes(10_000, 10_000)[:2] == (300, 200)


def test_a_fixed_batch_larger_than_the_matrix_is_refused():
    """SIBM(batch_size=1e7) on a 60 x 50 matrix took 1.3 GB for one update and 1e9 ran on
    with memory growing (batch_max bounds only the automatic size)."""
    X = pymf.sibm.make_binary_mf(60, 50, 3, density=0.1, seed=0)
    X = X[0] if isinstance(X, tuple) else X
    with pytest.raises(ValueError, match=r"batch_size=3001 is larger than the 60 x 50 = 3000 "
                                         r"entries of the matrix; pymf.BatchVB"):
        pymf.fit(pymf.LogisticMF(3), X, pymf.SIBM(batch_size=3001), n_updates=1, seed=0)
    pymf.fit(pymf.LogisticMF(3), X, pymf.SIBM(batch_size=3000), n_updates=1, seed=0)


def test_state_in_place_shares_q_and_set_state_still_checks_it():
    """The C object works in the Chain's own arrays (a fit holds q once): state(copy=False)
    hands them out, state() copies; set_state given them back checks them, so a non-finite
    value written in place is refused by name and a copied state is left as it was."""
    chain = chain_for(small_matrix())
    own, copied = chain.state(copy=False), chain.state()
    assert own["u1"] is chain.state(copy=False)["u1"]
    assert copied["u1"] is not own["u1"]
    np.testing.assert_array_equal(copied["u2"], own["u2"])
    chain.run(3)
    assert not np.array_equal(copied["u1"], own["u1"])  # own moved with the updates
    before = chain.state()
    own["u2"][1, 0] = np.nan
    with pytest.raises(ValueError, match="U: natural parameters must be finite"):
        chain.set_state(own["u1"], own["u2"], own["v1"], own["v2"], own["z"],
                        own["row_updates"], own["col_updates"], int(own["t"]),
                        int(own["batch"]))
    np.testing.assert_array_equal(before["v1"], chain.state()["v1"])
