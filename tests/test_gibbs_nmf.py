"""The C Gibbs sampler for Poisson NMF (core/src/gibbs_nmf.c): a Geweke "getting it right"
test, agreement with the NumPy reference sampler of test_posterior.py, dense versus sparse
data, determinism and bad input.

Statistical tests use a family-wise false-alarm rate ALPHA = 1e-3 each (Bonferroni over the
compared statistics), Monte-Carlo standard errors from batch means (tests/mcmc_stats.py) and
fixed seeds, not tuned by trying seeds. Checked by hand once: passing the Gamma rate where GSL
wants a scale (gsl_ran_gamma(r, shape, rate) for W) fails the Geweke test with |z| up to ~570
against a limit of 4.06.
"""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import pymf
from mcmc_stats import batch_means, bonferroni_z, z_scores
from pymf.nmf import _blocks, _gibbs_nmf
from test_posterior import V_POISSON, poisson_gibbs

ALPHA = 1e-3


def geweke_draws(n_steps, lam_sampler, seed):
    """Successive-conditional simulator (Geweke 2004): alternate V ~ Po(W H) and one C Gibbs
    sweep (W, H) | V. Its stationary law is the prior, so E[w] = 1/lam, E[w^2] = 2/lam^2."""
    rng = np.random.default_rng(seed)
    shape, rank, lam = (2, 3), 2, 1.0
    W = rng.exponential(1 / lam, (shape[0], rank))
    H = rng.exponential(1 / lam, (rank, shape[1]))
    out = []
    for step in range(n_steps):
        V = rng.poisson(W @ H).astype(float)
        data = _blocks.BlockedData.from_dense(V, 1)
        chain = _gibbs_nmf.GibbsChain(data, rank, lam_sampler, lam_sampler, seed * 100003 + step)
        chain.set_state(np.ascontiguousarray(W), np.ascontiguousarray(H.T), 0)
        chain.run(np.array([1.0]))
        W, Ht, _ = chain.get_state()
        H = Ht.T.copy()
        out.append(np.concatenate([W.ravel(), H.ravel(), (W ** 2).ravel(), (H ** 2).ravel()]))
    return np.array(out)


@pytest.mark.slow
def test_geweke_getting_it_right():
    """Prior moments of every w and h (mean and second moment) from the successive-
    conditional simulator, 4 chains x 6000 steps, z-test with batch means at a family-wise
    false-alarm rate of 1e-3 (Bonferroni over 20 statistics)."""
    draws = np.stack([geweke_draws(6000, 1.0, seed)[500:] for seed in range(4)])
    mean, se = batch_means(draws)
    expected = np.concatenate([np.full(10, 1.0), np.full(10, 2.0)])
    z = (mean - expected) / se
    assert np.all(np.abs(z) < bonferroni_z(ALPHA, z.size)), np.round(z, 2)


@pytest.mark.slow
def test_geweke_detects_a_wrong_conditional():
    """The same test has power: a sampler whose Gamma rate uses lam = 1.6 instead of the
    prior's 1.0 is rejected."""
    draws = np.stack([geweke_draws(6000, 1.6, seed)[500:] for seed in range(4)])
    mean, se = batch_means(draws)
    expected = np.concatenate([np.full(10, 1.0), np.full(10, 2.0)])
    z = (mean - expected) / se
    assert np.abs(z).max() > bonferroni_z(ALPHA, z.size)


def c_gibbs_wh(data, n_chains, n_samples, first_seed):
    """(chains, n_samples, I, J) draws of W H from the C sampler through pymf.sample (one
    thread: the chain does not depend on it, and small problems only pay for barriers)."""
    draws = []
    for chain in range(n_chains):
        res = pymf.sample(pymf.TweedieNMF(2, beta=1.0), data, pymf.Gibbs(n_threads=1),
                          n_samples=n_samples, burnin=500, seed=first_seed + chain,
                          trace_every=n_samples)
        draws.append(np.einsum("sik,skj->sij", res.W_samples, res.H_samples))
    return np.stack(draws)


@pytest.mark.slow
def test_c_gibbs_matches_numpy_reference_posterior():
    """E[(W H)_ij] on the 3 x 4 count matrix V_POISSON (K = 2, lam = 1): 8 C chains x 20000
    sweeps against 64 chains x 3500 kept sweeps of the independent NumPy sampler; z-test,
    Bonferroni over the 12 entries."""
    ref_mean, ref_se = batch_means(poisson_gibbs(V_POISSON, 2, 1.0, n_chains=64, n_sweeps=4000,
                                                 burn=500, seed=2))
    mean, se = batch_means(c_gibbs_wh(V_POISSON, 8, 20000, 300))
    z = z_scores(mean, se, ref_mean, ref_se).ravel()
    assert np.all(np.abs(z) < bonferroni_z(ALPHA, z.size)), (mean, ref_mean)
    # power: the posterior mean is not the data (the priors shrink it) by many standard errors
    assert np.abs(ref_mean - V_POISSON).max() > 10 * np.sqrt(ref_se ** 2 + se ** 2).max()


def full_ratings(V):
    rows, cols = np.nonzero(np.ones(V.shape, dtype=bool))
    return pymf.Ratings(rows, cols, V[rows, cols], shape=V.shape)


@pytest.mark.slow
def test_dense_and_fully_observed_sparse_give_the_same_posterior():
    """Sparse data with every entry observed is the dense problem: E[(W H)_ij] and
    E[(W H)_ij^2] from 4 + 4 chains with different seeds agree (z-test, Bonferroni over 24
    statistics)."""
    dense = c_gibbs_wh(V_POISSON, 4, 12000, 400)
    sparse = c_gibbs_wh(full_ratings(V_POISSON), 4, 12000, 500)
    (m1, s1), (m2, s2) = batch_means(dense), batch_means(sparse)
    (q1, t1), (q2, t2) = batch_means(dense ** 2), batch_means(sparse ** 2)
    z = np.concatenate([z_scores(m1, s1, m2, s2).ravel(), z_scores(q1, t1, q2, t2).ravel()])
    assert np.all(np.abs(z) < bonferroni_z(ALPHA, z.size)), np.round(z, 2)


def test_dense_and_fully_observed_sparse_chains_are_identical():
    """gibbs_nmf.h: both sum the Gamma rates in index order, so the same seed gives the same
    chain bit for bit (on a permuted 3 x 3 grid)."""
    V, _, _ = pymf.datasets.make_tweedie_nmf(12, 9, 3, seed=4)
    rows, cols = np.nonzero(np.ones(V.shape, dtype=bool))
    datasets = [_blocks.BlockedData.from_dense(V, 3, True, 5),
                _blocks.BlockedData.from_sparse(rows.astype(np.int64), cols.astype(np.int64),
                                                V[rows, cols], V.shape, 3, True, 5)]
    rng = np.random.default_rng(6)
    W0, Ht0 = rng.uniform(0.5, 1.5, (12, 3)), rng.uniform(0.5, 1.5, (9, 3))
    states = []
    for data in datasets:
        chain = _gibbs_nmf.GibbsChain(data, 3, 1.0, 1.0, 11, n_threads=1)
        chain.set_state(W0, Ht0, 0)
        chain.run(np.ones(25))
        states.append(chain.get_state())
    assert np.array_equal(states[0][0], states[1][0]) and np.array_equal(states[0][1], states[1][1])
    assert states[0][2] == 25 and not np.allclose(states[0][0], W0)


@pytest.mark.parametrize("sparse", [False, True])
def test_bit_identical_for_one_and_two_threads(sparse):
    V, _, _ = pymf.datasets.make_tweedie_nmf(40, 30, 3, seed=1)
    data = V
    if sparse:
        mask = np.random.default_rng(0).random(V.shape) < 0.5
        rows, cols = np.nonzero(mask)
        data = pymf.Ratings(rows, cols, V[mask], shape=V.shape)
    runs = [pymf.sample(pymf.TweedieNMF(3), data, pymf.Gibbs(n_threads=n, blocks=4), n_samples=20,
                        seed=3) for n in (1, 2)]
    assert np.array_equal(runs[0].W_samples, runs[1].W_samples)
    assert np.array_equal(runs[0].H_samples, runs[1].H_samples)
    assert not np.allclose(runs[0].W_samples[0], runs[0].W_samples[-1])


def test_set_threads_mid_chain_changes_nothing():
    V, _, _ = pymf.datasets.make_tweedie_nmf(30, 24, 4, seed=2)
    data = _blocks.BlockedData.from_dense(V, 3)
    rng = np.random.default_rng(1)
    W0, Ht0 = rng.uniform(0.5, 1.5, (30, 4)), rng.uniform(0.5, 1.5, (24, 4))
    states = []
    for threads in ((1, 1), (2, 1), (1, 3)):
        chain = _gibbs_nmf.GibbsChain(data, 4, 1.0, 1.0, 9, n_threads=threads[0])
        chain.set_state(W0, Ht0, 0)
        chain.run(np.ones(10))
        chain.set_threads(threads[1])
        chain.run(np.ones(10))
        states.append(chain.get_state())
    for W, Ht, t in states[1:]:
        assert np.array_equal(W, states[0][0]) and np.array_equal(Ht, states[0][1]) and t == 20


@pytest.mark.parametrize("V, message", [(np.array([[1.5, 2.0], [0.0, 1.0]]), "integer"),
                                        (np.array([[1.0, -2.0], [0.0, 1.0]]), "negative")])
def test_bad_data(V, message):
    with pytest.raises(ValueError, match=message):
        pymf.sample(pymf.TweedieNMF(1), V, pymf.Gibbs(), n_samples=2)


@pytest.mark.parametrize("value, problem", [(2.5, "is not an integer"), (-1.0, "is negative"),
                                            (np.nan, "is NaN"), (2.0 ** 33, "is larger than 2"),
                                            (3.0 + 1e-12, "is not an integer")])
def test_bad_counts_rejected_by_the_c_core(value, problem):
    """The C core's own check (the layer under pymf.sample's), naming the entry in the
    original row / column order of a permuted grid, and the value to all its digits (%g
    printed 3 + 1e-12 as "3", which read as an integer refused)."""
    shown = r"v = 3.0000000000010\d* at " if value == 3.0 + 1e-12 else ""
    V = np.ones((4, 5))
    V[2, 3] = value
    data = _blocks.BlockedData.from_dense(V, 2, True, 7)
    with pytest.raises(ValueError, match=rf"{shown}row 2, column 3 {problem}"):
        _gibbs_nmf.GibbsChain(data, 2, 1.0, 1.0, 0)
    rows, cols = np.nonzero(np.ones(V.shape, dtype=bool))
    sparse = _blocks.BlockedData.from_sparse(rows.astype(np.int64), cols.astype(np.int64),
                                             V[rows, cols], V.shape, 2, True, 7)
    with pytest.raises(ValueError, match=rf"{shown}row 2, column 3 {problem}"):
        _gibbs_nmf.GibbsChain(sparse, 2, 1.0, 1.0, 0)


@pytest.mark.parametrize("lam", [0.0, -1.0, np.inf, np.nan])
def test_bad_prior_rates(lam):
    data = _blocks.BlockedData.from_dense(np.ones((3, 3)), 1)
    with pytest.raises(ValueError, match="lam_w and lam_h"):
        _gibbs_nmf.GibbsChain(data, 2, lam, 1.0, 0)
    with pytest.raises(ValueError, match="lam_w and lam_h"):
        _gibbs_nmf.GibbsChain(data, 2, 1.0, lam, 0)


def test_wrong_model_for_gibbs():
    with pytest.raises(ValueError, match="Poisson NMF"):
        pymf.sample(pymf.TweedieNMF(1, beta=0.5), np.ones((3, 3)), pymf.Gibbs(), n_samples=2)
    data = _blocks.BlockedData.from_dense(np.ones((3, 3)), 1)
    for beta, phi in ((0.5, 1.0), (1.0, 2.0)):
        with pytest.raises(ValueError, match="Poisson NMF"):
            _gibbs_nmf.GibbsChain(data, 1, 1.0, 1.0, 0, beta=beta, phi=phi)


def test_impossible_start_is_rejected_and_the_state_kept():
    """A start with (W H)_ij = 0 where v_ij > 0 has zero likelihood: the multinomial is
    undefined. The sweep fails with ValueError naming the entry, the state is unchanged."""
    V = np.array([[1.0, 0.0], [2.0, 3.0]])
    data = _blocks.BlockedData.from_dense(V, 1)
    chain = _gibbs_nmf.GibbsChain(data, 2, 1.0, 1.0, 0)
    W0 = np.array([[0.0, 0.0], [1.0, 1.0]])
    Ht0 = np.ones((2, 2))
    chain.set_state(W0, Ht0, 4)
    with pytest.raises(ValueError, match=r"sweep 5: \(W H\) = 0 at row 0, column 0"):
        chain.run(np.ones(3))
    W, Ht, t = chain.get_state()
    assert np.array_equal(W, W0) and np.array_equal(Ht, Ht0) and t == 4


def test_non_finite_draw_raises_divergence_and_keeps_the_last_state():
    """All-zero counts, H = 0 and lam_w = 5e-324: the Gamma scale of w is 1 / 5e-324 = inf."""
    data = _blocks.BlockedData.from_dense(np.zeros((2, 3)), 1)
    chain = _gibbs_nmf.GibbsChain(data, 2, 5e-324, 1.0, 0)
    W0, Ht0 = np.ones((2, 2)), np.zeros((3, 2))
    chain.set_state(W0, Ht0, 7)
    with pytest.raises(pymf.DivergenceError) as info:
        chain.run(np.ones(2))
    assert info.value.iteration == 8
    W, Ht, t = chain.get_state()
    assert np.array_equal(W, W0) and np.array_equal(Ht, Ht0) and t == 7


def test_loglik_is_the_poisson_loglik():
    """loglik() = sum over entries of -(v log(v / mu) - v + mu) at the current state."""
    V = np.array([[3.0, 0.0, 1.0], [2.0, 5.0, 4.0]])
    data = _blocks.BlockedData.from_dense(V, 1)
    chain = _gibbs_nmf.GibbsChain(data, 2, 1.0, 1.0, 3)
    rng = np.random.default_rng(0)
    chain.set_state(rng.uniform(0.5, 1.5, (2, 2)), rng.uniform(0.5, 1.5, (3, 2)), 0)
    chain.run(np.ones(3))
    W, Ht, _ = chain.get_state()
    mu = W @ Ht.T
    with np.errstate(divide="ignore", invalid="ignore"):
        d = np.where(V > 0, V * np.log(V / mu), 0.0) - V + mu
    assert chain.loglik() == pytest.approx(-d.sum(), rel=1e-12)


def test_chain_and_data_collected_in_a_cycle():
    """The cycle collector may free the BlockedData before the chain that points into it
    (tp_clear order is arbitrary; a pytest.raises traceback makes such cycles): destroying
    the sampler must not read the data. Run in a child process, so that a crash fails this
    test only (the old destroy crashed here every time)."""
    code = textwrap.dedent("""
        import gc
        import numpy as np
        from pymf.nmf import _blocks, _gibbs_nmf
        for n in range(200):
            data = _blocks.BlockedData.from_dense(np.ones((6, 6)), 3)
            box = [_gibbs_nmf.GibbsChain(data, 2, 1.0, 1.0, 0), data]
            box.append(box)
            del data, box
            np.ones((6, 6, 50))
            gc.collect()
    """)
    # from the tests folder: in the repository root, `-c` would import the source tree
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          cwd=os.path.dirname(os.path.abspath(__file__)))
    assert proc.returncode == 0, proc.stderr[-2000:]
