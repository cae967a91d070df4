"""The IBP family's split-merge moves (CollapsedIBP(split_merge=n), HybridIBP(split_merge=n)):
the move alone and the chains that use it against the exact posterior of a tiny matrix
(tests/test_ibp.py's enumeration over left-ordered-form classes), a power check with the
allocation probability dropped from the Metropolis-Hastings ratio, determinism over
threads, checkpoints, bad input.

Statistical tests as in tests/test_ibp.py: frequencies of every class of probability
>= 1 % (and the rest lumped) against the exact posterior, standard errors from 50 batch
means, alarm at |z| > 4. Seeds were chosen once, never re-picked.
"""
import numpy as np
import pytest

import ibp_reference as ref
import pymf
from pymf.ibp import _ibp
from test_ibp import same_run, small_problem

Z_LIMIT = 4.0
Y_TINY = np.array([[1.0, 0.2], [0.9, 0.1], [0.1, 1.1]])
ALPHA, SIGMA_X, SIGMA_A = 1.0, 0.5, 1.0
HYPER = np.array([SIGMA_X, SIGMA_A, ALPHA])


@pytest.fixture(scope="module")
def exact_posterior():
    probs, edge = ref.enumerate_posterior(Y_TINY, ALPHA, SIGMA_X, SIGMA_A, max_features=8)
    assert edge < 1e-3
    return probs


def tiny_chain(collapsed, processes, split_merge, flaw=0, seed=7):
    """A chain on the tiny matrix with the hyper-parameters fixed (sample_flags 0)."""
    chain = _ibp.Chain(Y_TINY, np.ones(Y_TINY.shape, np.uint8), 3, 0, (1, 1, 1, 1, 1, 1),
                       (0, 0, 0), collapsed, processes, 5, 0, seed, 1, 0, None, split_merge,
                       flaw)
    chain.set_state(np.zeros((3, 0)), np.zeros((0, 2)), np.zeros(0), HYPER)
    return chain


def chain_classes(chain, n_iterations=20000):
    keys = []
    for _ in range(n_iterations):
        chain.run(1)
        keys.append(ref.class_key(chain.state()["Z"]))
    return keys


def max_abs_z(keys, probs):
    z, _, _ = ref.batch_z_scores(keys, probs)
    return np.abs(z).max()


@pytest.mark.parametrize("collapsed, processes", [(True, 1), (False, 2), (False, 3)])
def test_chains_with_split_merge_match_the_exact_posterior(exact_posterior, collapsed,
                                                           processes):
    chain = tiny_chain(collapsed, processes, split_merge=2)
    z = max_abs_z(chain_classes(chain), exact_posterior)
    splits, split_accepts, merges, merge_accepts = chain.split_merge_counts
    assert split_accepts > 1000 and merge_accepts > 1000  # the moves did run
    assert z < Z_LIMIT, z


def move_alone_classes(probs, flaw, n_draws=30000, seed=3):
    """Independent draws of Z from the exact posterior, each moved by one round of three
    split-merge proposals: if the move keeps the posterior, the moved draws follow it too.
    (Not irreducible alone: it never leaves K = 0, so it is tested for invariance.)"""
    keys = list(probs)
    weights = np.array([probs[key] for key in keys])
    rng = np.random.default_rng(seed)
    chain = tiny_chain(True, 1, split_merge=3, flaw=flaw, seed=seed)
    moved = []
    for t, index in enumerate(rng.choice(len(keys), size=n_draws, p=weights / weights.sum())):
        key = keys[index]
        Z = np.array(key, dtype=float).T.reshape(3, len(key))
        chain.set_state(Z, np.zeros((Z.shape[1], 2)), np.zeros(Z.shape[1]), HYPER, t=t)
        chain.split_merge()
        moved.append(ref.class_key(chain.state()["Z"]))
    return moved, chain.split_merge_counts


def test_the_move_alone_keeps_the_exact_posterior(exact_posterior):
    moved, counts = move_alone_classes(exact_posterior, flaw=0)
    assert counts[1] > 2000 and counts[3] > 2000
    assert max_abs_z(moved, exact_posterior) < Z_LIMIT


def test_power_the_allocation_probability_dropped_is_rejected(exact_posterior):
    """The same move with the sequential allocation's probability left out of the ratio
    (a split accepted as if it were proposed with probability 1) fails both tests."""
    moved, _ = move_alone_classes(exact_posterior, flaw=1)
    assert max_abs_z(moved, exact_posterior) > Z_LIMIT
    chain = tiny_chain(True, 1, split_merge=2, flaw=1)
    assert max_abs_z(chain_classes(chain), exact_posterior) > Z_LIMIT


# ---------- determinism, checkpoints, traces, bad input ----------

def test_hybrid_with_split_merge_is_the_same_chain_for_one_and_two_threads():
    X, mask, model = small_problem()
    runs = [pymf.sample(model, X, pymf.HybridIBP(processes=3, warm_start=3, n_threads=t,
                                                 split_merge=4),
                        n_samples=40, seed=11, thin=4, test_mask=mask, progress=False)
            for t in (1, 2)]
    same_run(*runs)
    assert runs[0].trace["split_merge_accept"][-1] > 0


@pytest.mark.parametrize("sampler", [pymf.CollapsedIBP(split_merge=3),
                                     pymf.HybridIBP(processes=2, split_merge=3)])
def test_checkpoint_resume_with_split_merge_is_bit_identical(tmp_path, sampler):
    X, mask, model = small_problem()
    settings = dict(n_samples=30, burnin=10, thin=3, seed=5, test_mask=mask, progress=False)
    whole = pymf.sample(model, X, sampler, **settings)
    path = tmp_path / "ck.npz"
    stopped = pymf.sample(model, X, sampler, checkpoint=path,
                          callback=lambda info: info["iteration"] >= 22, **settings)
    assert stopped.iterations == 22
    resumed = pymf.sample(model, X, sampler, checkpoint=path, **settings)
    same_run(whole, resumed)


def test_trace_counts_the_moves_and_only_when_they_are_on():
    X, mask, model = small_problem()
    on = pymf.sample(model, X, pymf.CollapsedIBP(split_merge=5), n_samples=20, seed=2,
                     test_mask=mask, progress=False)
    accepted, proposed = on.trace["split_merge_accept"], on.trace["split_merge_proposed"]
    assert np.all(np.diff(accepted) >= 0) and np.all(accepted <= proposed)
    assert 0 < proposed[-1] <= 5 * 20
    np.testing.assert_array_equal(accepted, on.trace["split_accept"] + on.trace["merge_accept"])
    off = pymf.sample(model, X, pymf.CollapsedIBP(split_merge=0), n_samples=20, seed=2,
                      test_mask=mask, progress=False)
    assert "split_merge_accept" not in off.trace
    assert pymf.CollapsedIBP().split_merge == pymf.HybridIBP().split_merge == 10


def test_bad_split_merge_settings_are_refused():
    for make in (pymf.CollapsedIBP, pymf.HybridIBP):
        with pytest.raises(ValueError, match="split_merge"):
            make(split_merge=-1)
        with pytest.raises(ValueError, match="split_merge"):
            make(split_merge=1.5)
    # one MPI rank's object (process 0 of 3, row 0) must be given every row
    chain = _ibp.Chain(Y_TINY[:1], np.ones((1, 2), np.uint8), 3, 0, (1, 1, 1, 1, 1, 1),
                       (0, 0, 0), False, 3, 5, 0, 1, 1, 0, 1, 2)
    chain.set_state(np.ones((3, 1)), np.zeros((1, 2)), np.full(1, 0.5), HYPER)
    with pytest.raises(ValueError, match="every row's Z and Y"):
        chain.split_merge()
