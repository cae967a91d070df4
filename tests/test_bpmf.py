"""BPMF: DSGLD, its bias-corrected estimator, the Gibbs baselines, determinism, bad input.

Statistical tests use a family-wise false-alarm rate alpha = 1e-3 with Bonferroni over
their comparisons and batch-means Monte-Carlo errors (tests/mcmc_stats.py); each one also
shows that it can fail (a wrong sampler is rejected).
"""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from mcmc_stats import batch_means, bonferroni_z, z_scores
from support import synthetic_ratings as synthetic

import pymf
from pymf._linalg import largest_eigenvalues
from pymf.bpmf import _bpmf
from pymf.bpmf.layout import Layout

ALPHA = 1e-3


def c_model(model, mean):
    return model.c_model(mean)


def random_params(L, M, D, rng, lam=None):
    lam = rng.uniform(0.5, 2.0, _bpmf.n_precisions(D)) if lam is None else lam
    return _bpmf.Params(D, rng.normal(0, 0.5, (L, D)), rng.normal(0, 0.5, (M, D)),
                        rng.normal(0, 0.3, L), rng.normal(0, 0.3, M), lam)


def numpy_log_posterior(R, mean, tau, p, D):
    """Readable reference: the log posterior given the precisions, up to a constant."""
    lam_u, lam_v, lam_a, lam_b = p.lambdas[:D], p.lambdas[D:2 * D], p.lambdas[2 * D], p.lambdas[2 * D + 1]
    pred = mean + np.sum(p.U[R.users] * p.V[R.items], axis=1) + p.a[R.users] + p.b[R.items]
    return (-0.5 * tau * np.sum((R.ratings - pred) ** 2) - 0.5 * np.sum(lam_u * p.U ** 2)
            - 0.5 * np.sum(lam_v * p.V ** 2) - 0.5 * lam_a * np.sum(p.a ** 2)
            - 0.5 * lam_b * np.sum(p.b ** 2))


@pytest.mark.parametrize("bias", [True, False])
def test_log_posterior_and_gradient_match_numpy_and_finite_differences(bias):
    R = synthetic(L=7, M=5, D=3)
    model = pymf.BPMF(3, tau=1.7, bias=bias)
    layout = Layout(R, (2, 2), True, np.random.default_rng(0)).c
    rng = np.random.default_rng(2)
    p = random_params(7, 5, 3, rng)
    if not bias:
        p.a[:] = 0.0
        p.b[:] = 0.0
    lp, gU, gV, ga, gb = _bpmf.log_posterior(layout, c_model(model, 3.1), p)
    assert lp == pytest.approx(numpy_log_posterior(layout, 3.1, 1.7, p, 3), rel=1e-12)
    h = 1e-6
    for arr, grad in ((p.U, gU), (p.V, gV)) + (((p.a, ga), (p.b, gb)) if bias else ()):
        flat, gflat = arr.reshape(-1), grad.reshape(-1)
        for k in range(flat.size):
            old = flat[k]
            flat[k] = old + h
            up = _bpmf.log_posterior(layout, c_model(model, 3.1), p)[0]
            flat[k] = old - h
            down = _bpmf.log_posterior(layout, c_model(model, 3.1), p)[0]
            flat[k] = old
            assert gflat[k] == pytest.approx((up - down) / (2 * h), rel=1e-6, abs=1e-6)
    if not bias:
        assert np.all(ga == 0) and np.all(gb == 0)


def numpy_row_gram(layout, p, D, bias):
    """Readable reference of _bpmf.row_gram: each row's sum of x x^T over its ratings by
    np.bincount in the layout's order, x = (the other side's factor row, 1 or 0)."""
    users = np.asarray(layout.users, dtype=np.int64)
    items = np.asarray(layout.items, dtype=np.int64)
    out = []
    for rows, other, n in ((users, p.V[items], layout.n_users), (items, p.U[users], layout.n_items)):
        X = np.hstack([other, np.full((len(rows), 1), 1.0 if bias else 0.0)])
        H = np.empty((n, D + 1, D + 1))
        for k in range(D + 1):
            for l in range(k, D + 1):
                H[:, k, l] = H[:, l, k] = np.bincount(rows, weights=X[:, k] * X[:, l], minlength=n)
        out.append(H)
    return out


@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (4, 2), (2, 3)])
@pytest.mark.parametrize("bias", [True, False])
def test_row_gram_is_bincounts_in_layout_order_for_any_thread_count(grid, bias):
    """The per-row bound's curvature sums (DSGLD's "auto" after the burn-in): the C core's
    must be the NumPy reference's bit for bit (the chains' step factors, and so the chains,
    depend on them), whatever the threads; a user and an item without ratings get 0."""
    D = 4
    R = synthetic(L=40, M=25, D=D, density=0.3, seed=5)
    keep = (R.rows != 7) & (R.cols != 3)
    R = pymf.Ratings(R.rows[keep], R.cols[keep], R.values[keep], shape=R.shape)
    model = pymf.BPMF(D, tau=1.3, bias=bias)
    lay = Layout(R, grid, True, np.random.default_rng(3))
    p = random_params(40, 25, D, np.random.default_rng(4))
    want = numpy_row_gram(lay.c, p, D, bias)
    for threads in (1, 2, 3):
        got = _bpmf.row_gram(lay.c, c_model(model, 3.0), p, threads)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.tobytes() == w.tobytes()
    assert not got[0][lay.user_pos[7]].any() and not got[1][lay.item_pos[3]].any()
    # power: adding a row's terms in another order changes the last bits somewhere
    users = np.asarray(lay.c.users, dtype=np.int64)
    order = np.argsort(-np.arange(len(users)), kind="stable")
    X = np.hstack([p.V[np.asarray(lay.c.items)[order]], np.ones((len(users), 1))])
    reversed_00 = np.bincount(users[order], weights=X[:, 0] * X[:, 1], minlength=40)
    assert not np.array_equal(reversed_00, want[0][:, 0, 1])


def numpy_correlations(H):
    """What the per-row bound computed from row_gram's sums before the C core did: each
    row's diagonal and its correlation matrix H * r[:, None] * r[None, :], r = 1/sqrt(diag)
    where diag > 0, else 0."""
    diag = np.einsum("ikk->ik", H).copy()
    inv_root = np.zeros_like(diag)
    np.divide(1.0, np.sqrt(diag), out=inv_root, where=diag > 0)
    return diag, H * inv_root[:, :, None] * inv_root[:, None, :]


@pytest.mark.parametrize("D", [1, 3, 7, 10, 17])
@pytest.mark.parametrize("bias", [True, False])
def test_row_gram_and_correlations_for_many_ranks_and_long_rows(D, bias):
    """row_gram sums each row's terms in register tiles of 4 rows and 4 or 8 columns, over
    panels of 128 ratings: every rank's tile shapes and rows of over one and two panels (the
    items here have up to 300 ratings) must still give the reference's bits, and
    row_correlations the correlation matrices NumPy computes from them, both triangles (they
    may differ in the last bit), for any thread count. An item without ratings gets 0."""
    R = synthetic(L=300, M=12, D=3, density=0.95, seed=2)
    keep = R.cols != 5
    R = pymf.Ratings(R.rows[keep], R.cols[keep], R.values[keep], shape=R.shape)
    counts = np.bincount(R.cols, minlength=12)
    assert counts.max() > 256 and counts[5] == 0
    cm = c_model(pymf.BPMF(D, tau=1.3, bias=bias), 3.0)
    lay = Layout(R, (2, 3), True, np.random.default_rng(3))
    p = random_params(300, 12, D, np.random.default_rng(4))
    want = numpy_row_gram(lay.c, p, D, bias)
    want_corr = [numpy_correlations(H) for H in want]
    for threads in (1, 2):
        got = _bpmf.row_gram(lay.c, cm, p, threads)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.tobytes() == w.tobytes()
        corr = _bpmf.row_correlations(lay.c, cm, p, threads)
        for (diag, Rm), (want_diag, want_R) in zip(corr, want_corr):
            assert diag.tobytes() == want_diag.tobytes() and Rm.tobytes() == want_R.tobytes()
    assert not corr[1][1][lay.item_pos[5]].any()
    # row_curvatures: several states at once (the states' rows listed once), each state's
    # diagonals and the largest eigenvalue of each correlation matrix, the same bits
    states = [p, random_params(300, 12, D, np.random.default_rng(5))]
    wants = [[(d, largest_eigenvalues(Rm)) for d, Rm in
              (numpy_correlations(H) for H in numpy_row_gram(lay.c, q, D, bias))] for q in states]
    for threads in (1, 2, 3):
        got = _bpmf.row_curvatures(lay.c, cm, states, threads)
        for side, (diag, rho) in enumerate(got):
            for k in range(len(states)):
                assert diag[k].tobytes() == wants[k][side][0].tobytes()
                assert rho[k].tobytes() == wants[k][side][1].tobytes()
    assert got[1][1][0, lay.item_pos[5]] == 0.0
    # the correlations' two triangles are rounded apart, as NumPy's are (else a symmetric
    # copy of one triangle would pass)
    if D >= 7:
        Rm = want_corr[0][1]
        assert not np.array_equal(Rm, np.swapaxes(Rm, 1, 2))


@pytest.mark.parametrize("grid", [(1, 1), (2, 2), (4, 2), (2, 3)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("D", [4, 7])
def test_threaded_gradient_is_the_log_posteriors_bit_for_bit(grid, bias, D):
    """step_size="auto" takes its Lanczos steps' gradients on the run's threads, one
    stripe a task: they must be log_posterior's one-pass gradient bit for bit (the chosen
    step, and so the chains, depend on them), for any thread count. The stripes form four
    ratings' residuals at a time (and add four of a row's terms at once): ranks 4 and 7,
    and blocks whose rating counts leave remainders, take every path."""
    R = synthetic(L=40, M=25, D=D, density=0.3, seed=5)
    keep = (R.rows != 7) & (R.cols != 3)
    R = pymf.Ratings(R.rows[keep], R.cols[keep], R.values[keep], shape=R.shape)
    cm = c_model(pymf.BPMF(D, tau=1.3, bias=bias), 3.0)
    lay = Layout(R, grid, True, np.random.default_rng(3))
    p = random_params(40, 25, D, np.random.default_rng(4))
    want = _bpmf.log_posterior(lay.c, cm, p)[1:]
    for threads in (1, 2, 3):
        got = _bpmf.log_posterior_gradient(lay.c, cm, p, threads)
        for g, w in zip(got, want):
            assert g.shape == w.shape and g.tobytes() == w.tobytes()
    # power: the same terms added in another order (the items' before the prior) differ
    gV = np.zeros_like(p.V)
    users, items = np.asarray(lay.c.users), np.asarray(lay.c.items)
    r = np.asarray(lay.c.ratings) - 3.0 - np.einsum("nd,nd->n", p.U[users], p.V[items]) \
        - p.a[users] - p.b[items]
    np.add.at(gV, items, 1.3 * r[:, None] * p.U[users])
    gV -= p.lambdas[D:2 * D] * p.V
    assert np.allclose(gV, want[1], rtol=1e-10, atol=1e-12)
    assert not np.array_equal(gV, want[1])


def sequential_sq_error(layout, mean, p, D):
    """Readable reference of the sum of squared residuals with the C core's order: each
    rating's dot product summed from 0 in column order, the residual's terms taken off one
    by one, then the squares added one by one, block after block."""
    users, items = np.asarray(layout.users), np.asarray(layout.items)
    dot = np.zeros(len(users))
    for k in range(D):
        dot = dot + p.U[users, k] * p.V[items, k]
    r = np.asarray(layout.ratings) - mean - dot - p.a[users] - p.b[items]
    total = 0.0
    for block in np.split(r * r, np.asarray(layout.block_ptr)[1:-1]):
        s = 0.0
        for x in block.tolist():
            s += x
        total += s
    return total


@pytest.mark.parametrize("D", [1, 3, 8, 10, 13, 30])
def test_residual_sums_have_the_sequential_bits_for_any_rank(D):
    """The sums of squared residuals (tau's draws, the trace, kept draws' statistics) are
    the readable sequential reference's bits for every rank and thread count, down to each
    rating's residual."""
    R = synthetic(L=45, M=31, D=3, density=0.4, seed=8)
    lay = Layout(R, (3, 2), True, np.random.default_rng(3))
    cm = c_model(pymf.BPMF(D, tau=1.3), 3.0)
    rng = np.random.default_rng(D)
    sets = [random_params(45, 31, D, rng) for _ in range(3)]
    want = [sequential_sq_error(lay.c, 3.0, p, D) for p in sets]
    for threads in (1, 2, 3):
        assert [_bpmf.sq_error(lay.c, cm, p, threads) for p in sets] == want
    # A total hides a residual's last bits, so: ratings equal to their predictions summed
    # in the sequential order (the mean, a and b 0) must leave a sum of exactly 0, on every
    # path; summed in the other column order they leave residuals (the check's power).
    p = sets[0]
    zero = np.zeros(45), np.zeros(31)
    p = _bpmf.Params(D, p.U, p.V, *zero, p.lambdas)
    users, items = np.asarray(lay.c.users), np.asarray(lay.c.items)
    dot, flipped = np.zeros(len(users)), np.zeros(len(users))
    for k in range(D):
        dot = dot + p.U[users, k] * p.V[items, k]
        flipped = flipped + p.U[users, D - 1 - k] * p.V[items, D - 1 - k]
    exact = _bpmf.BlockLayout(lay.c.n_users, lay.c.n_items, lay.c.row_start, lay.c.col_start,
                              lay.c.block_ptr, users, items, dot)
    cm0 = c_model(pymf.BPMF(D, tau=1.3), 0.0)
    for threads in (1, 2, 3):
        assert _bpmf.sq_error(exact, cm0, p, threads) == 0.0
    if D >= 3:
        assert np.count_nonzero(flipped != dot) > len(dot) // 10


def test_chains_residual_sums_in_one_pass_and_after_taus_draw():
    """DSGLDChains.sq_errors: every chain's sum of squared residuals in one pass over
    (chain, block) tasks, or the sums tau's draw computed at this round: each must be the
    one-chain function's bits (the trace, kept draws' statistics and tau's draws read them),
    for any thread count, and a new round or set_state must not leave a stale one."""
    R = synthetic(L=40, M=25, D=3, density=0.3, seed=6)
    lay = Layout(R, (4, 2), True, np.random.default_rng(3))
    model = pymf.BPMF(3)  # tau="sample": run() computes the sums at hyper steps
    cm = c_model(model, 3.0)

    def fresh(chains, c):
        return _bpmf.sq_error(lay.c, cm, chains.get_state(c), 1)

    results = []
    for threads in (1, 2, 3):
        chains = _bpmf.DSGLDChains(lay.c, cm, 3, 20, 2, 2, True, [11, 12, 13], [21, 22, 23],
                                   threads)
        rng = np.random.default_rng(4)
        for c in range(3):
            p = random_params(40, 25, 3, rng)
            chains.set_state(c, p.U, p.V, p.a, p.b, p.lambdas, 0)
        start = [fresh(chains, c) for c in range(3)]
        assert chains.sq_errors().tolist() == start
        assert [chains.sq_error(c) for c in range(3)] == start
        chains.run(np.full(3, 1e-3))   # round 3: no hyper step, a new state
        got = chains.sq_errors()
        assert got.tolist() == [fresh(chains, c) for c in range(3)] and got.tolist() != start
        chains.run(np.full(1, 1e-3))   # round 4: tau's draw, whose sums are kept
        kept = chains.sq_errors()
        assert kept.tolist() == [fresh(chains, c) for c in range(3)]
        p = random_params(40, 25, 3, np.random.default_rng(9))
        chains.set_state(1, p.U, p.V, p.a, p.b, p.lambdas, 4)  # the same round, a new state
        assert chains.sq_error(1) == fresh(chains, 1) != kept[1]
        results.append((got.tobytes(), kept.tobytes()))
    assert results[1] == results[0] and results[2] == results[0]


def test_predictions_on_threads_are_the_one_thread_values():
    """Large prediction sets (>= 65,536 pairs: the test set's running mean at scale) are
    computed on the run's threads; every value must be the one-thread value."""
    R = synthetic(L=40, M=25, D=3, density=0.3, seed=6)
    lay = Layout(R, (2, 2), True, np.random.default_rng(3))
    p = random_params(40, 25, 3, np.random.default_rng(4))
    rng = np.random.default_rng(7)
    users, items = rng.integers(0, 40, 70_000), rng.integers(0, 25, 70_000)
    cm = c_model(pymf.BPMF(3, tau=1.3), 3.0)
    one = _bpmf.predict(cm, p, users, items, 1)
    want = 3.0 + np.einsum("nd,nd->n", p.U[users], p.V[items]) + p.a[users] + p.b[items]
    assert np.allclose(one, want, rtol=1e-14, atol=1e-14)
    for threads in (2, 3):
        assert _bpmf.predict(cm, p, users, items, threads).tobytes() == one.tobytes()


def test_bias_correctors_match_formula():
    R = synthetic(L=9, M=8)
    layout = Layout(R, (3, 2), False, np.random.default_rng(0)).c
    m = 7
    h_user, h_item = layout.bias_correctors(m)
    P, Q = layout.grid
    expect_u, expect_i = np.zeros(9), np.zeros(8)
    v = 1.0 / max(P, Q)
    for s in range(P * Q):
        lo, hi = layout.block_ptr[s], layout.block_ptr[s + 1]
        if hi == lo:
            continue
        for ids, out in ((layout.users[lo:hi], expect_u), (layout.items[lo:hi], expect_i)):
            counts = np.bincount(ids, minlength=len(out))
            out += v * np.where(counts > 0, 1 - (1 - counts / (hi - lo)) ** m, 0)
    np.testing.assert_allclose(h_user, expect_u, rtol=1e-12)
    np.testing.assert_allclose(h_item, expect_i, rtol=1e-12)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux")
def test_bias_correctors_raise_memory_error_when_their_scratch_cannot_be_allocated(tmp_path):
    """The C function returns PYMF_ENOMEM (it returned zeros before): the binding raises.
    In a child process whose address space leaves room for the two output arrays only."""
    code = textwrap.dedent("""
        import resource
        from pymf.bpmf import _bpmf
        n = 1 << 24  # 128 MiB per array of doubles
        layout = _bpmf.BlockLayout(n, n, [0, n], [0, n], [0, 1], [0], [0], [1.0])
        with open("/proc/self/status") as fh:
            vm = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:")) * 1024
        room = vm + 2 * 8 * n + (48 << 20)  # h_user, h_item and a margin; not the scratch
        resource.setrlimit(resource.RLIMIT_AS, (room, resource.getrlimit(resource.RLIMIT_AS)[1]))
        try:
            layout.bias_correctors(5)
        except MemoryError as exc:
            print("MemoryError:", exc)
    """)
    # run outside the repository, so that the child imports the installed pymf
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MemoryError: out of memory for the bias correctors"), done.stdout


@pytest.mark.slow
@pytest.mark.parametrize("grid", [(2, 2), (3, 1), (2, 3), (1, 1)])
def test_bias_corrected_estimator_is_unbiased(grid):
    """Average of the minibatch estimator over the schedule (block s with frequency v(s))
    and over minibatches equals the full gradient of the log posterior, within its
    Monte-Carlo error (z-tests, Bonferroni over every coordinate)."""
    R = synthetic(L=8, M=7, D=2, density=0.7)
    D = 2
    model = pymf.BPMF(D, tau=2.0)
    cm = c_model(model, 3.0)
    layout = Layout(R, grid, True, np.random.default_rng(4)).c
    m = 5
    h_user, h_item = layout.bias_correctors(m)
    p = random_params(layout.n_users, layout.n_items, D, np.random.default_rng(5))
    _, gU, gV, ga, gb = _bpmf.log_posterior(layout, cm, p)
    full = np.concatenate([gU.ravel(), ga, gV.ravel(), gb])
    P, Q = grid
    v = 1.0 / max(P, Q)
    n_draws = 4000
    mean = np.zeros_like(full)
    var = np.zeros_like(full)
    for s in range(P * Q):
        worker = _bpmf.BlockWorker(layout, s, cm, m, h_user, h_item)
        u0, i0 = worker.user_offset, worker.item_offset
        nu, ni = worker.n_stripe_users, worker.n_stripe_items
        args = (p.U[u0:u0 + nu].copy(), p.V[i0:i0 + ni].copy(), p.a[u0:u0 + nu].copy(),
                p.b[i0:i0 + ni].copy(), p.lambdas)
        draws = np.zeros((n_draws, full.size))
        for t in range(n_draws):
            sU, sV, sa, sb = worker.gradient(12345, *args, t + 1)
            gUf, gaf, gVf, gbf = (np.zeros_like(gU), np.zeros_like(ga), np.zeros_like(gV),
                                  np.zeros_like(gb))
            gUf[u0:u0 + nu], gaf[u0:u0 + nu] = sU, sa
            gVf[i0:i0 + ni], gbf[i0:i0 + ni] = sV, sb
            draws[t] = np.concatenate([gUf.ravel(), gaf, gVf.ravel(), gbf])
        mean += v * draws.mean(axis=0)
        var += v ** 2 * draws.var(axis=0, ddof=1) / n_draws
    se = np.sqrt(var)
    z = (mean - full) / np.where(se > 0, se, 1.0)
    assert np.all(se[full != 0] > 0)
    assert np.abs(z).max() < bonferroni_z(ALPHA, full.size), np.abs(z).max()


@pytest.mark.slow
def test_estimator_without_corrector_is_rejected():
    """The same test rejects the estimator with hbar = 1 (prior not corrected)."""
    R = synthetic(L=8, M=7, D=2, density=0.7)
    model = pymf.BPMF(2, tau=2.0)
    cm = c_model(model, 3.0)
    layout = Layout(R, (1, 1), True, np.random.default_rng(4)).c
    m = 3
    p = random_params(layout.n_users, layout.n_items, 2, np.random.default_rng(5),
                      lam=np.full(7, 20.0))
    _, gU, _, _, _ = _bpmf.log_posterior(layout, cm, p)
    worker = _bpmf.BlockWorker(layout, 0, cm, m, np.ones(layout.n_users), np.ones(layout.n_items))
    draws = np.array([worker.gradient(7, p.U, p.V, p.a, p.b, p.lambdas, t + 1)[0].ravel()
                      for t in range(4000)])
    z = (draws.mean(0) - gU.ravel()) / (draws.std(0, ddof=1) / np.sqrt(len(draws)))
    assert np.abs(z).max() > bonferroni_z(ALPHA, z.size)


def _gibbs_chain(model, R, hyperprior, seed=0, nu0=None):
    L, M = R.shape
    by_user = np.lexsort((R.cols, R.rows))
    by_item = np.lexsort((R.rows, R.cols))
    user_ptr = np.concatenate([[0], np.cumsum(np.bincount(R.rows, minlength=L))])
    item_ptr = np.concatenate([[0], np.cumsum(np.bincount(R.cols, minlength=M))])
    chain = _bpmf.BPMFGibbsChain(model.c_model(0.0), L, M, user_ptr, R.cols[by_user],
                                 R.values[by_user], item_ptr, R.rows[by_item], R.values[by_item],
                                 hyperprior, 2.0, nu0, 1.0, seed, seed + 1, 1)
    return chain, by_user, by_item


# The Wishart case's prior: nu0 = D + 8 degrees of freedom (W0 = I). With BPMF's default
# nu0 = D, E[Lambda^-1] is infinite, so the factors are heavy-tailed and the chain makes
# rare, long excursions to small Lambda: over 40 seeds this test's z-scores of Lambda's
# diagonal then had a mean of +1 and a standard deviation of 2 (7 of 40 seeds failed).
# With nu0 = D + 8 they have mean within 0.5 and sd 0.9-1.2, none failed, and E[u^2] is
# finite (1 + 1/beta0) / (nu0 - D - 1) and tested. The conditionals' code is the same.
WISHART_NU0 = 10.0


def _geweke_moments(hyperprior, nu0_of_chain=WISHART_NU0, n=30000):
    D, L, M = 2, 3, 3
    alpha0, beta0 = 4.0, 3.0
    model = pymf.BPMF(D, tau=1.5, alpha0=alpha0, beta0=beta0, mean_rating=0.0)
    rows, cols = np.nonzero(np.ones((L, M)))
    R = pymf.Ratings(rows, cols, np.zeros(L * M), shape=(L, M))
    chain, by_user, by_item = _gibbs_chain(
        model, R, hyperprior, seed=11, nu0=nu0_of_chain if hyperprior == "wishart" else None)
    rng = np.random.default_rng(12)
    if hyperprior == "gamma":
        hyper = np.append(np.full(2 * D + 2, alpha0 / beta0), 1.5)  # ..., lam_a, lam_b, tau
    else:
        lam0 = WISHART_NU0 * np.eye(D).ravel()  # the prior mean of Lambda
        hyper = np.concatenate([np.zeros(D), lam0, np.zeros(D), lam0, [alpha0 / beta0] * 2, [1.5]])
    chain.set_state(rng.normal(size=(L, D)), rng.normal(size=(M, D)), np.zeros(L), np.zeros(M),
                    hyper, 0)
    stats = []
    for t in range(n):
        U, V, a, b, h, _ = chain.get_state()
        mean = np.sum(U[rows] * V[cols], axis=1) + a[rows] + b[cols]
        values = mean + rng.normal(0, 1 / np.sqrt(1.5), L * M)
        chain.set_ratings(values[by_user], values[by_item])
        chain.run(1)
        U, V, a, b, h, _ = chain.get_state()
        if hyperprior == "gamma":
            stats.append([h[0], h[D], h[2 * D], U[0, 0] ** 2, V[1, 1] ** 2, a[0] ** 2, b[2] ** 2])
        else:
            # hyper = mu_u, Lambda_u, mu_v, Lambda_v, lam_a, lam_b, tau
            stats.append([h[D], h[D + 1], h[2 * D + D * D], h[-3], U[0, 0] ** 2, a[0] ** 2])
    draws = np.array(stats)[None, 2000:]
    mean, se = batch_means(draws, n_batches=25)
    lam = alpha0 / beta0
    if hyperprior == "gamma":
        inv = beta0 / (alpha0 - 1)  # E[1/lambda]: the prior variance of a factor
        expect = np.array([lam, lam, lam, inv, inv, inv, inv])
    else:
        # Lambda ~ W(I, nu0): E = nu0 I; u | mu, Lambda ~ N(mu, Lambda^-1), mu ~ N(0, (2 Lambda)^-1)
        # (nw_beta0 = 2): E[u^2] = (1 + 1/2) E[Lambda^-1]_00 = 1.5 / (nu0 - D - 1)
        nu0 = WISHART_NU0
        expect = np.array([nu0, 0.0, nu0, lam, 1.5 / (nu0 - D - 1), beta0 / (alpha0 - 1)])
    return (mean - expect) / se


@pytest.mark.slow
@pytest.mark.parametrize("hyperprior", ["gamma", "wishart"])
def test_gibbs_conditionals_geweke(hyperprior):
    """Geweke's successive-conditional test: alternating a Gibbs sweep with a fresh draw of
    the ratings given the parameters leaves the prior invariant, so the chain's moments of
    the hyper-parameters and factors must match the prior's (z-tests with batch means)."""
    z = _geweke_moments(hyperprior)
    assert np.abs(z).max() < bonferroni_z(ALPHA, z.size), z


@pytest.mark.slow
def test_geweke_rejects_a_wishart_conditional_with_one_degree_of_freedom_too_many():
    """The power check of the Wishart case: a chain whose Normal-Wishart conditional uses
    nu0 + 1 against the prior's nu0 (the classic off-by-one) fails the same z-test."""
    z = _geweke_moments("wishart", nu0_of_chain=WISHART_NU0 + 1.0)
    assert np.abs(z).max() > bonferroni_z(ALPHA, z.size), z


def _posterior_draws(model, train, test, sampler, n, burnin, thin, seeds):
    out = []
    for seed in seeds:
        res = pymf.sample(model, train, sampler, n_samples=n, burnin=burnin, thin=thin, seed=seed,
                          test=test)
        S = res.samples
        pred = res.mean_rating + np.einsum("kcnd,kcnd->kcn", S["U"][:, :, test.rows],
                                           S["V"][:, :, test.cols]) \
            + S["a"][:, :, test.rows] + S["b"][:, :, test.cols]
        out.append(np.moveaxis(pred, 1, 0))
    return np.concatenate(out, axis=0)  # (chains, draws, pairs)


def _compare(d, g):
    """z-scores of E[pred], E[pred^2] per pair and of the pooled squared deviation from the
    reference means (sensitive to a too narrow or too wide posterior)."""
    gm, gs = batch_means(g)
    g2m, g2s = batch_means(g ** 2)
    dm, ds = batch_means(d)
    d2m, d2s = batch_means(d ** 2)
    ref = gm
    tg, tgs = batch_means(((g - ref) ** 2).mean(axis=2))
    td, tds = batch_means(((d - ref) ** 2).mean(axis=2))
    return (z_scores(dm, ds, gm, gs), z_scores(d2m, d2s, g2m, g2s),
            float(z_scores(td, tds, tg, tgs)))


@pytest.fixture(scope="module")
def small_problem():
    R = synthetic()
    train, test = R.split(0.2, seed=3)
    model = pymf.BPMF(2, tau=2.0, alpha0=2.0, beta0=2.0)
    gibbs = _posterior_draws(model, train, test, pymf.BPMFGibbs("gamma"), 10000, 500, 5, [0, 1])
    return model, train, test, gibbs


@pytest.mark.slow
def test_dsgld_posterior_predictive_matches_gibbs(small_problem):
    """DSGLD (2 x 2 square split, 2 chains, 2 runs) against the exact Gibbs sampler of the
    same model: posterior predictive mean and second moment of every held-out rating and
    the pooled spread, at family-wise alpha = 1e-3. The step (1e-3, constant) is small
    enough that its discretisation bias is below the Monte-Carlo error here."""
    model, train, test, gibbs = small_problem
    sampler = pymf.DSGLD(split="square", blocks=2, batch_size=20, round_length=5,
                         step_size=1e-3, hyper_every=1)
    d = _posterior_draws(model, train, test, sampler, 20000, 1000, 10, [0, 1])
    z1, z2, zt = _compare(d, gibbs)
    crit = bonferroni_z(ALPHA, 2 * test.nnz + 1)
    assert max(np.abs(z1).max(), np.abs(z2).max(), abs(zt)) < crit, (z1, z2, zt)


@pytest.mark.slow
def test_paper_noise_samples_a_tempered_posterior(small_problem):
    """Power check and the reason for noise_correction: with the paper's N(0, 2 eps) noise
    on touched rows only, the predictive spread is too narrow and the test rejects it."""
    model, train, test, gibbs = small_problem
    sampler = pymf.DSGLD(split="square", blocks=2, batch_size=20, round_length=5,
                         step_size=1e-3, hyper_every=1, noise_correction=False)
    d = _posterior_draws(model, train, test, sampler, 20000, 1000, 10, [0, 1])
    _, _, zt = _compare(d, gibbs)
    assert zt < -bonferroni_z(ALPHA, 2 * test.nnz + 1), zt


@pytest.mark.slow
def test_wishart_gibbs_and_dsgld_agree_on_predictions(small_problem):
    """The original BPMF (Normal-Wishart) is a different prior, so this is a sanity check,
    not a correctness test (that is the Geweke test): predictive means within 0.05 RMS and
    0.2 at most of the diagonal model's (the ratings' sd is about 1.2 here)."""
    model, train, test, gibbs = small_problem
    res = pymf.sample(model, train, pymf.BPMFGibbs("wishart"), n_samples=4000, burnin=500,
                      seed=0, test=test, keep_samples=False)
    diff = res.test_mean - gibbs.mean(axis=(0, 1))
    assert np.sqrt(np.mean(diff ** 2)) < 0.05 and np.abs(diff).max() < 0.2


def _dsgld_state(n_threads, split="square", blocks=2, chains=None):
    R = synthetic(L=40, M=30, D=3)
    model = pymf.BPMF(3)
    sampler = pymf.DSGLD(split=split, blocks=blocks, chains=chains, batch_size=30,
                         round_length=4, step_size=pymf.AnnealedStep(2e-3, 50), hyper_every=3,
                         n_threads=n_threads)
    res = pymf.sample(model, R, sampler, n_samples=30, burnin=10, thin=5, seed=9)
    return res.samples


@pytest.mark.parametrize("split,blocks", [("square", 2), ("column", 3), ("hybrid", (2, 3))])
def test_dsgld_same_chains_for_any_thread_count(split, blocks):
    one = _dsgld_state(1, split, blocks)
    two = _dsgld_state(2, split, blocks)
    for key in one:
        assert np.array_equal(one[key], two[key]), key


def _conditional_draws(R, order, n_rows, F, Fb, prior, mean, bias, tau, noise_seed, stream):
    """NumPy's Gibbs draw of every row of one side: P = P0 + tau sum f f^T and
    h = P0 m0 + tau sum (r - mean - b_j) f over the row's ratings, f = (the other side's
    factor row, 1 with biases), x = L^-T (L^-1 h + z) with the chain's Philox noise z."""
    from pymf import _rng
    P0, h0 = prior
    rows, cols = (R.rows, R.cols) if stream == 6 else (R.cols, R.rows)
    w = P0.shape[0]
    out = np.empty((n_rows, w))
    for i in range(n_rows):
        e = order[rows[order] == i]
        f = F[cols[e]]
        if bias:
            f = np.hstack([f, np.ones((len(e), 1))])
        P = P0 + tau * f.T @ f
        h = h0 + tau * f.T @ (R.values[e] - mean - Fb[cols[e]])
        Lc = np.linalg.cholesky(P)
        z = _rng.noise(noise_seed, stream, 1, i, 1, w)[0]
        out[i] = np.linalg.solve(Lc.T, np.linalg.solve(Lc, h) + z)
    return out


@pytest.mark.parametrize("hyperprior", ["wishart", "gamma"])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("D", [1, 4, 5, 10, 13])
def test_gibbs_row_draws_are_the_numpy_conditional(D, bias, hyperprior):
    """One sweep's draws of U and then V against the conditional draws computed in NumPy
    from the same state, hyper-parameters and Philox noise. Users rate up to all 300
    items, more than the C core's chunks of 128 ratings, and ranks up to 13 (+ bias) take
    several of its register tiles of 4 rows by 8 columns. NumPy's Cholesky rounds otherwise
    than GSL's, hence 1e-9, not bits: a rating left out or counted twice moves a draw by
    far more."""
    L, M = 40, 300
    rng = np.random.default_rng(D)
    dense = rng.random((L, M)) < np.linspace(0.05, 1.0, L)[:, None]
    rows, cols = np.nonzero(dense)
    R = pymf.Ratings(rows, cols, rng.integers(1, 6, len(rows)).astype(float), shape=(L, M))
    model = pymf.BPMF(D, tau=2.0, bias=bias)
    chain, by_user, by_item = _gibbs_chain(model, R, hyperprior, seed=3)
    hyper0 = np.zeros(chain.hyper_size)  # mu 0, Lambda I (or lambda 1), the biases' 1, tau
    for side in (0, 1):
        if hyperprior == "wishart":
            base = side * (D + D * D)
            hyper0[base + D:base + D + D * D] = np.eye(D).ravel()
        else:
            hyper0[side * D:(side + 1) * D] = 1.0
    hyper0[-3:] = 1.0, 1.0, 2.0
    U0, V0 = rng.normal(0, 0.5, (L, D)), rng.normal(0, 0.5, (M, D))
    a0, b0 = (rng.normal(0, 0.3, L), rng.normal(0, 0.3, M)) if bias else (np.zeros(L), np.zeros(M))
    chain.set_state(U0, V0, a0, b0, hyper0, 0)
    chain.run(1)
    U1, V1, a1, b1, hyper, _ = chain.get_state()
    hs, tau = len(hyper), hyper[-1]
    w = D + bias

    def prior(side):
        P0, h0 = np.zeros((w, w)), np.zeros(w)
        if hyperprior == "wishart":
            base = side * (D + D * D)
            mu, Lam = hyper[base:base + D], hyper[base + D:base + D + D * D].reshape(D, D)
            P0[:D, :D], h0[:D] = Lam, Lam @ mu
        else:
            P0[:D, :D] = np.diag(hyper[side * D:(side + 1) * D])
        if bias:
            P0[D, D] = hyper[hs - 3 + side]
        return P0, h0

    users = _conditional_draws(R, by_user, L, V0, b0, prior(0), 0.0, bias, tau, 3, 6)
    items = _conditional_draws(R, by_item, M, U1, a1, prior(1), 0.0, bias, tau, 3, 7)
    got_users = np.hstack([U1, a1[:, None]]) if bias else U1
    got_items = np.hstack([V1, b1[:, None]]) if bias else V1
    np.testing.assert_allclose(got_users, users, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got_items, items, rtol=1e-9, atol=1e-9)


def test_gibbs_same_chain_for_any_thread_count():
    R = synthetic(L=40, M=30, D=3)
    model = pymf.BPMF(3)
    out = [pymf.sample(model, R, pymf.BPMFGibbs(n_threads=w), n_samples=5, seed=3).samples
           for w in (1, 2)]
    for key in out[0]:
        assert np.array_equal(out[0][key], out[1][key]), key


def test_chains_differ_and_seed_changes_them():
    s = _dsgld_state(1)
    assert not np.array_equal(s["U"][:, 0], s["U"][:, 1])
    R = synthetic(L=40, M=30, D=3)
    sampler = pymf.DSGLD(blocks=2, batch_size=30, round_length=4, step_size=1e-3)
    a = pymf.sample(pymf.BPMF(3), R, sampler, n_samples=3, seed=1).samples["U"]
    b = pymf.sample(pymf.BPMF(3), R, sampler, n_samples=3, seed=2).samples["U"]
    assert not np.array_equal(a, b)


def test_result_predict_trace_diagnostics_and_save(tmp_path):
    R = synthetic(L=40, M=30, D=3)
    train, test = R.split(0.2, seed=0)
    model = pymf.BPMF(3, tau=2.0)  # the fixed tau of pymf <= 0.2 (its default then)
    sampler = pymf.DSGLD(blocks=2, batch_size=30, round_length=4, step_size=1e-3)
    res = pymf.sample(model, train, sampler, n_samples=40, burnin=10, thin=4, seed=0, test=test)
    assert res.test_count == 10 * 2
    mean, std = res.predict(test.rows, test.cols, return_std=True)
    np.testing.assert_allclose(mean, res.test_mean, rtol=1e-10)
    np.testing.assert_allclose(std, res.test_std, rtol=1e-8, atol=1e-12)
    _, std_noise = res.predict(test.rows, test.cols, return_std=True, noise=True)
    np.testing.assert_allclose(std_noise ** 2, std ** 2 + 1 / model.tau)
    assert np.isfinite(res.trace["test_rmse"][-1])
    assert np.all(np.diff(res.trace["time"]) >= 0)
    # test_rmse is the RMSE of the running average
    r = res.test_mean - test.values
    assert res.trace["test_rmse"][-1] == pytest.approx(np.sqrt(np.mean(r ** 2)))
    diag = res.diagnostics()
    assert set(diag) >= {"train_rmse", "norm_U", "norm_V", "lam_u_mean", "lam_a"}
    assert all(np.isfinite(d["rhat"]) and d["ess_bulk"] > 0 for d in diag.values())
    path = res.save(tmp_path / "bpmf.npz")
    back = pymf.load(tmp_path / "bpmf.npz")
    np.testing.assert_array_equal(back.test_mean, res.test_mean)
    np.testing.assert_array_equal(back.samples["U"], res.samples["U"])
    assert back.predict(test.rows[:3], test.cols[:3]) == pytest.approx(mean[:3])
    assert path


def test_diagnostics_across_four_chains():
    R = synthetic(L=40, M=30, D=3)
    sampler = pymf.DSGLD(blocks=2, chains=4, batch_size=30, round_length=4, step_size=1e-3)
    res = pymf.sample(pymf.BPMF(3), R, sampler, n_samples=200, burnin=50, thin=2, seed=0,
                      keep_samples=False)
    diag = res.diagnostics()
    assert set(diag) >= {"train_rmse", "norm_U", "lam_u_mean", "lam_a"}
    for name, d in diag.items():
        assert np.isfinite(d["rhat"]) and d["ess_bulk"] > 0 and d["ess_tail"] > 0, name


def test_burnin_by_training_rmse_threshold():
    R = synthetic(L=40, M=30, D=3)
    sampler = pymf.DSGLD(blocks=2, batch_size=30, round_length=4, step_size=2e-3)
    res = pymf.sample(pymf.BPMF(3), R, sampler, n_samples=10, burnin=500, seed=0,
                      burnin_rmse=1.0, trace_every=5, keep_samples=False)
    assert res.burnin_end is not None and res.burnin_end < 500
    k = list(res.trace["iteration"]).index(res.burnin_end)
    assert res.trace["train_rmse"][k] <= 1.0
    assert all(x > 1.0 for x in res.trace["train_rmse"][:k])
    with pytest.warns(RuntimeWarning, match="burn-in did not reach") as caught:
        pymf.sample(pymf.BPMF(3), R, sampler, n_samples=2, burnin=4, seed=0, burnin_rmse=1e-6,
                    keep_samples=False)
    assert caught[0].filename == __file__  # the user's call, not a line inside pymf


def test_sgld_and_optimisers_through_the_common_api():
    R = synthetic(L=40, M=30, D=3)
    train, test = R.split(0.2, seed=0)
    model = pymf.BPMF(3)
    res = pymf.sample(model, train, pymf.SGLD(step_size=1e-3, batch_size=30), n_samples=50,
                      seed=0, test=test)
    assert res.params["sampler"]["chains"] == 1 and res.params["sampler"]["grid"] == [1, 1]
    for opt in (pymf.SGD(step_size=1e-3, batch_size=50), pymf.DSGD(blocks=2, step_size=1e-3)):
        fit = pymf.fit(model, train, opt, n_epochs=30, test=test)
        assert fit.trace["train_rmse"][-1] < fit.trace["train_rmse"][0]
        assert np.isfinite(fit.predict(test.rows, test.cols)).all()


def test_empty_users_and_items_get_their_prior():
    """A user or item with no training rating is never in a minibatch: it is drawn from its
    prior at each precision update, so its predictions stay finite and centred."""
    R = synthetic(L=40, M=30, D=3)
    keep = (R.rows != 5) & (R.cols != 7)
    train = pymf.Ratings(R.rows[keep], R.cols[keep], R.values[keep], shape=R.shape)
    sampler = pymf.DSGLD(blocks=2, batch_size=30, round_length=4, step_size=1e-3, hyper_every=1)
    res = pymf.sample(pymf.BPMF(3), train, sampler, n_samples=300, thin=3, seed=0)
    U = res.samples["U"][:, :, 5]
    assert np.all(np.isfinite(U)) and np.std(U) > 0
    # prior draws: zero-mean factors
    assert abs(U.mean()) < 4 * U.std() / np.sqrt(U.size / 10)
    mean, std = res.predict([5, 5], [0, 7])
    assert np.all(np.isfinite(mean)) and np.all(std > 0)


def test_bad_input():
    R = synthetic(L=10, M=8)
    model = pymf.BPMF(2)
    sampler = pymf.DSGLD(blocks=2, batch_size=5, round_length=2, step_size=1e-3)
    with pytest.raises(ValueError, match="NaN or inf"):
        pymf.sample(model, pymf.Ratings([0, 1], [0, 1], [1.0, np.nan], shape=(3, 3)), sampler, 2)
    with pytest.raises(ValueError, match="out of range"):
        pymf.Ratings([0, 5], [0, 1], [1.0, 2.0], shape=(3, 3))
    with pytest.raises(ValueError, match="duplicate"):
        pymf.Ratings([0, 0], [1, 1], [1.0, 2.0], shape=(3, 3))
    with pytest.raises(ValueError, match="empty"):
        pymf.sample(model, pymf.Ratings([], [], [], shape=(3, 3)), sampler, 2)
    with pytest.raises(ValueError, match="rank"):
        pymf.BPMF(0)
    with pytest.raises(ValueError, match="tau"):
        pymf.BPMF(2, tau=-1)
    with pytest.raises(ValueError, match="too many blocks"):
        pymf.sample(model, R, pymf.DSGLD(blocks=11, batch_size=5, step_size=1e-3), 2)
    with pytest.raises(ValueError, match="hybrid"):
        pymf.DSGLD(split="hybrid", blocks=3)
    with pytest.raises(ValueError, match="split"):
        pymf.DSGLD(split="diagonal")
    with pytest.raises(ValueError, match="step"):
        pymf.DSGLD(step_size=-1.0)
    with pytest.raises(ValueError, match="test set has shape"):
        pymf.sample(model, R, sampler, 2, test=pymf.Ratings([0], [0], [1.0], shape=(2, 2)))
    with pytest.raises(TypeError, match="PSGLD cannot sample a BPMF model; a BPMF model takes "
                                        "BPMFGibbs, DSGLD, SGLD"):
        pymf.sample(model, R, pymf.PSGLD(blocks=2, step_size=1e-3), 2)
    res = pymf.sample(model, R, sampler, 3, seed=0)
    with pytest.raises(ValueError, match="out of range"):
        res.predict([100], [0])
    # the C core refuses a non-finite state, naming the value
    layout = Layout(R, (2, 2), False, np.random.default_rng(0)).c
    chains = _bpmf.DSGLDChains(layout, model.c_model(3.0), 1, 5, 2, 0, True, [1], [2])
    U = np.zeros((10, 2))
    U[3, 1] = np.nan
    with pytest.raises(ValueError, match=r"not finite: U\[7\]"):
        chains.set_state(0, U, np.zeros((8, 2)), np.zeros(10), np.zeros(8), np.ones(7), 0)


def test_divergence_names_the_round_and_keeps_the_last_finite_state():
    R = synthetic(L=40, M=30, D=3)
    sampler = pymf.DSGLD(blocks=2, batch_size=30, round_length=4, step_size=50.0)
    with pytest.raises(pymf.DivergenceError, match="round") as info:
        pymf.sample(pymf.BPMF(3), R, sampler, n_samples=100, seed=0)
    assert info.value.iteration >= 1
    partial = info.value.result
    assert partial is not None
    assert all(np.all(np.isfinite(v)) for v in partial.last_state.values())


def test_command_line_bpmf_and_predict(tmp_path, capsys):
    from pymf import cli
    R = synthetic(L=40, M=30, D=3)
    data = tmp_path / "u.data"
    with open(data, "w") as fh:
        for r, c, v in zip(R.rows, R.cols, R.values):
            fh.write(f"{r + 1}\t{c + 1}\t{v:.3f}\t0\n")
    out = tmp_path / "run"
    assert cli.main(["bpmf", "--data", str(data), "--rank", "3", "--batch-size", "30",
                     "--round-length", "4", "--samples", "20", "--burnin", "5", "--thin", "2",
                     "--out", str(out), "--no-progress"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert np.isfinite(summary["final_test_rmse"]) and summary["kept_samples"] == 10 * 2
    assert cli.main(["predict", "--result", str(out / "result.npz"), "--rows", "0", "1",
                     "--cols", "2", "3"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and all(np.isfinite(float(x)) for x in lines[0].split()[2:])
    assert cli.main(["bpmf", "--data", str(data), "--rank", "0", "--out", str(out)]) == 2
    # --checkpoint: OUT/checkpoint.npz, and a second call resumes it (here: already finished)
    args = ["bpmf", "--data", str(data), "--rank", "3", "--batch-size", "30", "--round-length",
            "4", "--samples", "20", "--burnin", "5", "--thin", "2", "--out", str(out),
            "--no-progress", "--checkpoint", "--checkpoint-every", "5"]
    assert cli.main(args) == 0 and (out / "checkpoint.npz").exists()
    first = pymf.load(out / "result.npz")
    capsys.readouterr()
    assert cli.main(args) == 0
    assert np.array_equal(pymf.load(out / "result.npz").test_mean, first.test_mean)


def test_ctrl_c_returns_what_was_sampled():
    R = synthetic(L=40, M=30, D=3)
    sampler = pymf.DSGLD(blocks=2, batch_size=30, round_length=4, step_size=1e-3)

    def interrupt(info):
        if info["iteration"] >= 20:
            raise KeyboardInterrupt

    with pytest.warns(RuntimeWarning, match="interrupted at round 20 of 1000") as caught:
        res = pymf.sample(pymf.BPMF(3), R, sampler, n_samples=1000, thin=2, seed=0,
                          trace_every=5, callback=interrupt)
    # the warning names the user's call of pymf.sample, not a line inside pymf
    assert caught[0].filename == __file__
    assert res.interrupted
    assert res.trace["iteration"][-1] == 20 and res.samples["U"].shape[0] == 10
    assert all(np.all(np.isfinite(v)) for v in res.last_state.values())


# ----------------------------------------------------------------------------- checkpoints

CHECKPOINT_SAMPLERS = {  # with a training RMSE that ends burn-in after / before unit 23
    "dsgld-hybrid": (lambda: pymf.DSGLD(split="hybrid", blocks=(2, 3), batch_size=20,
                                        round_length=3, step_size=pymf.AnnealedStep(5e-3, 50),
                                        hyper_every=4), 1.03),
    "gibbs-wishart": (lambda: pymf.BPMFGibbs(), 0.78),
    "gibbs-gamma": (lambda: pymf.BPMFGibbs("gamma"), 0.78),
}


def _same_results(a, b):
    """Every output of two BPMF runs except wall time."""
    assert a.test_count == b.test_count and a.burnin_end == b.burnin_end
    for key in ("test_mean", "test_std"):
        assert np.array_equal(getattr(a, key), getattr(b, key)), key
    for key in "UVab":
        assert np.array_equal(a.samples[key], b.samples[key]), key
        assert np.array_equal(a.last_state[key], b.last_state[key]), key
    for key in ("iteration", "train_rmse", "test_rmse"):
        assert np.array_equal(a.trace[key], b.trace[key], equal_nan=True), key
    assert a.summaries.keys() == b.summaries.keys()
    for key in a.summaries:
        assert np.array_equal(a.summaries[key], b.summaries[key]), key


@pytest.mark.parametrize("kind", sorted(CHECKPOINT_SAMPLERS))
@pytest.mark.parametrize("burnin_by_rmse", [False, True])
def test_resumed_run_equals_the_uninterrupted_one(kind, burnin_by_rmse, tmp_path):
    """Stopped by the callback at unit 23 (between two checkpoints; with burnin_rmse, before
    burn-in ends for DSGLD and after for Gibbs) and resumed: the same chains, samples,
    Welford predictions, summaries and traces as a run that never stopped."""
    R = synthetic(L=40, M=30, D=3)
    train, test = R.split(0.2, seed=1)
    make_sampler, threshold = CHECKPOINT_SAMPLERS[kind]
    settings = dict(n_samples=40, burnin=60 if burnin_by_rmse else 15, thin=3, seed=4,
                    test=test, trace_every=4, burnin_rmse=threshold if burnin_by_rmse else None)
    model = pymf.BPMF(3, tau=1.5)
    full = pymf.sample(model, train, make_sampler(), **settings)
    if burnin_by_rmse:
        assert full.burnin_end < 60  # the threshold ended burn-in, not the limit
    checkpoint = tmp_path / "bpmf.npz"
    partial = pymf.sample(model, train, make_sampler(), checkpoint=checkpoint,
                          checkpoint_every=10, callback=lambda info: info["iteration"] >= 23, **settings)
    assert partial.trace["iteration"][-1] == 24  # the first trace point at or after 23
    assert partial.test_count < full.test_count
    resumed = pymf.sample(model, train, make_sampler(), checkpoint=checkpoint,
                          checkpoint_every=10, **settings)
    _same_results(resumed, full)
    # the chain moved after the checkpoint (equal results are not two frozen chains)
    assert not np.array_equal(resumed.last_state["U"], partial.last_state["U"])


def test_streamed_samples_resume_with_the_checkpoint(tmp_path):
    """sample_dir: the kept samples go to .npy files (kept x chains x ...), the same values
    as in memory; a stopped run reopens them on resume without truncating."""
    R = synthetic(L=40, M=30, D=3)
    train, test = R.split(0.2, seed=1)
    make_sampler, _ = CHECKPOINT_SAMPLERS["dsgld-hybrid"]
    settings = dict(n_samples=40, burnin=15, thin=3, seed=4, test=test, trace_every=4)
    model = pymf.BPMF(3, tau=1.5)
    full = pymf.sample(model, train, make_sampler(), **settings)
    sample_dir, checkpoint = tmp_path / "samples", tmp_path / "bpmf.npz"
    partial = pymf.sample(model, train, make_sampler(), checkpoint=checkpoint,
                          sample_dir=sample_dir, callback=lambda info: info["iteration"] >= 23, **settings)
    assert 0 < partial.samples["U"].shape[0] < full.samples["U"].shape[0]
    resumed = pymf.sample(model, train, make_sampler(), checkpoint=checkpoint,
                          sample_dir=sample_dir, **settings)
    _same_results(resumed, full)
    on_disk = np.load(sample_dir / "U_samples.npy", mmap_mode="r")
    assert np.array_equal(on_disk, full.samples["U"])
    # a checkpoint of a run that kept its samples in memory does not resume a streamed one
    with pytest.raises(ValueError, match="different run"):
        pymf.sample(model, train, make_sampler(), checkpoint=checkpoint, **settings)
    (sample_dir / "V_samples.npy").unlink()
    with pytest.raises(ValueError, match="streamed samples .* are missing"):
        pymf.sample(model, train, make_sampler(), checkpoint=checkpoint,
                    sample_dir=sample_dir, **settings)


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    R = synthetic(L=20, M=15, D=2)
    sampler = pymf.DSGLD(blocks=2, batch_size=20, round_length=3, step_size=1e-3)
    checkpoint = tmp_path / "bpmf.npz"
    pymf.sample(pymf.BPMF(2), R, sampler, n_samples=10, seed=1, checkpoint=checkpoint)
    for change in (dict(seed=2), dict(n_samples=12), dict(model=pymf.BPMF(2, tau=3.0)),
                   dict(sampler=pymf.BPMFGibbs())):
        args = {**dict(model=pymf.BPMF(2), sampler=sampler, n_samples=10, seed=1), **change}
        with pytest.raises(ValueError, match="different run"):
            pymf.sample(args.pop("model"), R, args.pop("sampler"), checkpoint=checkpoint, **args)
    # the thread count does not change the chains: a checkpoint resumes under any
    res = pymf.sample(pymf.BPMF(2), R, pymf.DSGLD(blocks=2, batch_size=20, round_length=3,
                                                   step_size=1e-3, n_threads=1),
                      n_samples=10, seed=1, checkpoint=checkpoint)
    assert res.trace["iteration"][-1] == 10


def test_a_real_ctrl_c_leaves_a_checkpoint_that_resumes_the_same_chains(tmp_path):
    """SIGINT from another thread, wherever it lands: the run stops at the next consistent
    point, returns what it has, and its checkpoint resumes to the uninterrupted result."""
    from ctrl_c import CtrlC
    R = synthetic(L=40, M=30, D=3)
    train, test = R.split(0.2, seed=1)
    sampler = pymf.DSGLD(blocks=2, batch_size=20, round_length=2, step_size=1e-3)
    settings = dict(n_samples=3000, thin=1, seed=6, test=test, trace_every=3,
                    checkpoint_every=100_000)
    full = pymf.sample(pymf.BPMF(3), train, sampler, **settings)
    checkpoint = tmp_path / "bpmf.npz"
    with CtrlC() as ctrl_c, pytest.warns(RuntimeWarning, match="interrupted at round"):
        partial = pymf.sample(pymf.BPMF(3), train, sampler, checkpoint=checkpoint,
                              callback=ctrl_c.press_at(30), **settings)
    assert partial.interrupted and 0 < partial.test_count < full.test_count
    resumed = pymf.sample(pymf.BPMF(3), train, sampler, checkpoint=checkpoint, **settings)
    _same_results(resumed, full)


def test_init_starts_every_chain_there():
    """DSGLD with a negligible step size stays where init put it: every chain, through the
    permuted grid, back in the original order; a single U is used for every chain; biases
    default to zero; bad init is refused by name."""
    R = synthetic(L=30, M=20, D=2)
    model = pymf.BPMF(2)
    sampler = pymf.DSGLD(blocks=2, batch_size=20, round_length=3, step_size=1e-14,
                         hyper_every=0)
    rng = np.random.default_rng(0)
    C = sampler.n_chains
    init = {"U": rng.normal(size=(C, 30, 2)), "V": rng.normal(size=(C, 20, 2)),
            "a": rng.normal(size=(C, 30)), "b": rng.normal(size=(C, 20))}
    res = pymf.sample(model, R, sampler, n_samples=2, seed=3, init=init)
    for key in "UVab":
        np.testing.assert_allclose(res.last_state[key], init[key], atol=1e-5)
    one = pymf.sample(model, R, sampler, n_samples=2, seed=3,
                      init={"U": init["U"][1], "V": init["V"][1]})
    np.testing.assert_allclose(one.last_state["U"], np.broadcast_to(init["U"][1], (C, 30, 2)),
                               atol=1e-5)
    np.testing.assert_allclose(one.last_state["a"], 0.0, atol=1e-5)
    for bad, message in (({"U": np.zeros((30, 2))}, "dict with U"),
                         ({"U": np.zeros((30, 3)), "V": np.zeros((20, 2))}, "shape"),
                         ({"U": np.zeros((C + 1, 30, 2)), "V": np.zeros((20, 2))}, "per chain"),
                         ({"U": np.full((30, 2), np.nan), "V": np.zeros((20, 2))}, "NaN"),
                         ({"U": np.zeros((30, 2)), "V": np.zeros((20, 2)), "W": 1}, "unknown")):
        with pytest.raises(ValueError, match=message):
            pymf.sample(model, R, sampler, n_samples=1, init=bad)


def test_gibbs_init_from_a_previous_result_starts_near_the_posterior():
    """BPMF Gibbs started from a converged run's last_state fits the training data at once;
    started at random it does not yet (a Gibbs sweep moves far, so compare the fit)."""
    R = synthetic(L=30, M=20, D=2)
    model = pymf.BPMF(2)
    first = pymf.sample(model, R, pymf.BPMFGibbs(), n_samples=50, seed=3)
    again = pymf.sample(model, R, pymf.BPMFGibbs(), n_samples=1, seed=4, init=first.last_state)
    fresh = pymf.sample(model, R, pymf.BPMFGibbs(), n_samples=1, seed=4)
    assert again.trace["train_rmse"][0] < fresh.trace["train_rmse"][0] - 0.1


def test_block_steps_shrink_by_the_tau_reference_only_past_it():
    """pymf_dsgld_tau_scaled_step: with a tau reference, a chain whose tau exceeds it steps
    with eps * (reference / tau), bit for bit the steps at that smaller eps without one;
    at or below it, the plain steps. Fails if the scaling were skipped, inverted or
    applied below the reference."""
    R = synthetic(L=12, M=9, D=2, density=0.6)
    model = pymf.BPMF(2)  # tau sampled: the last precision is tau
    cm = c_model(model, 3.0)
    layout = Layout(R, (1, 1), True, np.random.default_rng(4)).c
    worker = _bpmf.BlockWorker(layout, 0, cm, 20, *layout.bias_correctors(20))
    rng = np.random.default_rng(6)

    def run(tau, eps, reference):
        p = random_params(layout.n_users, layout.n_items, 2, np.random.default_rng(5))
        lambdas = p.lambdas.copy()
        lambdas[-1] = tau
        U, V, a, b = p.U.copy(), p.V.copy(), p.a.copy(), p.b.copy()
        worker.steps(11, True, U, V, a, b, lambdas, 1, 5, eps, True, False, reference)
        return np.concatenate([U.ravel(), V.ravel(), a, b])

    eps = float(rng.uniform(1e-3, 2e-3))
    for tau in (5.0, 2.5, 2.0000000001):
        assert np.array_equal(run(tau, eps, 2.0), run(tau, eps * (2.0 / tau), 0.0)), tau
        assert not np.array_equal(run(tau, eps, 2.0), run(tau, eps, 0.0)), tau
    for tau in (2.0, 1.5, 0.3):
        assert np.array_equal(run(tau, eps, 2.0), run(tau, eps, 0.0)), tau
    chains = _bpmf.DSGLDChains(layout, cm, 2, 20, 3, 10, True, np.arange(2, dtype=np.uint64),
                               np.arange(2, dtype=np.uint64))
    with pytest.raises(ValueError, match="tau_reference has 1 values"):
        chains.set_tau_reference([2.0])
    with pytest.raises(ValueError, match="tau reference -1 of chain 1 is not positive"):
        chains.set_tau_reference([2.0, -1.0])
    chains.set_tau_reference(None)


def test_a_result_without_kept_draws_refuses_to_predict(synthetic_ratings):
    """A run that diverged (or was stopped) in its burn-in kept no draw: predict used to
    answer 0.0 with an sd of NaN, a mean of nothing; it now says why it cannot."""
    train, test = synthetic_ratings(30, 20, 2, density=0.5, seed=1).split(0.2, seed=0)
    with pytest.raises(pymf.DivergenceError) as info:
        pymf.sample(pymf.BPMF(2), train, pymf.DSGLD(n_threads=1, step_size=50.0),
                    n_samples=50, seed=0, progress=False, test=test)
    result = info.value.result
    assert result.n_kept == 0
    for call in (lambda: result.predict([0], [0]), lambda: result.coverage(test)):
        with pytest.raises(ValueError, match="this run kept no draws"):
            call()
