"""PSGLD's CPU kernels compute the documented sums in the documented order, bit for bit.

The dense block gradient (core/src/tweedie.c) is register-tiled and the Langevin noise
(core/src/philox.c) runs 8 or 16 Philox counters per vector; both promise the very bits of
the per-entry definitions, which the golden chains, the MPI ring (sparse blocks against
dense ones) and the CUDA kernels rely on. Here the gradient is checked against a NumPy
reference that adds in exactly that order, each term by one fused multiply-add:
  mu_ij  = (s0 + s1) + (s2 + s3), s_r = fma(w_ik, h_jk, s_r) over k = r mod 4 below
           4 floor(K/4), the tail k >= 4 floor(K/4) added to s0 (pymf_dot_fused,
           pymf/linalg.h);
  g_ij   = d/dmu log p(v_ij | mu_ij) / phi (the C formula itself, _tweedie.dlogp_dmu);
  gW_i   = fma(g_ij, h_j, gW_i) over j in part order (block after block, j ascending in
           each), and gHt_j = fma(g_ij, w_i, gHt_j) over i likewise.
NumPy has no fma: _fma computes it exactly from error-free transformations (Dekker's
product, Knuth's sum, one addition rounded to odd: Boldo and Melquiond's emulation), and
NumPy's other operations round once each, so equal order means equal bits. The power
check: the same reference with mu from a single running sum over k, from np.dot, or in
pymf_dot's order without FMA differs from the C gradient (so this test sees a changed order
and the fused terms).
PSGLD's per-row Fisher curvature (core/src/fisher_dense.h) is register-tiled the same way
on dense blocks; given every entry, sparse blocks still run its per-entry loop, whose bits
the tiles must keep.
"""
import numpy as np
import pytest

from pymf import _rng
from pymf.nmf import _blocks, _tweedie


def _split(a):
    """Veltkamp's split: a = hi + lo exactly, each half 26 bits or fewer."""
    t = a * 134217729.0  # 2^27 + 1
    hi = t - (t - a)
    return hi, a - hi


def _two_sum(a, b):
    """s + err = a + b exactly, s = a + b rounded (Knuth)."""
    s = a + b
    bv = s - a
    return s, (a - (s - bv)) + (b - bv)


def _fma(a, b, c):
    """a * b + c rounded once (C99 fma), element-wise, for finite arguments whose products
    neither overflow nor underflow (the test problems' ranges). Boldo and Melquiond's
    emulation: the product exactly as ph + pl (Dekker), ph + c exactly as th + tl, then
    tl + pl rounded to odd (round to nearest, then a step toward the exact sum where it was
    inexact and its last bit even) and added to th rounded to nearest."""
    a, b, c = np.broadcast_arrays(np.asarray(a, float), np.asarray(b, float),
                                  np.asarray(c, float))
    ph = a * b
    ahi, alo = _split(a)
    bhi, blo = _split(b)
    pl = ((ahi * bhi - ph) + ahi * blo + alo * bhi) + alo * blo
    th, tl = _two_sum(c, ph)
    v, err = _two_sum(tl, pl)
    even = (v.view(np.int64) & 1) == 0
    v = np.where((err != 0) & even, np.nextafter(v, np.where(err > 0, np.inf, -np.inf)), v)
    return th + v


def test_fma_emulation_is_exact():
    """_fma against exact rational arithmetic, rounded once: cancellations, ties and
    products whose low half decides the rounding."""
    from fractions import Fraction
    rng = np.random.default_rng(1)
    a = rng.uniform(-1, 1, 4000) * 2.0 ** rng.integers(-30, 30, 4000)
    b = rng.uniform(-1, 1, 4000) * 2.0 ** rng.integers(-30, 30, 4000)
    c = np.concatenate([-(a[:2000] * b[:2000]), rng.uniform(-1, 1, 2000)])  # near-cancelling
    c[:1000] = np.nextafter(c[:1000], 0.0)
    got = _fma(a, b, c)
    for x, y, z, r in zip(a, b, c, got):
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        assert r == float(exact), (x, y, z)  # float(Fraction) rounds to nearest, ties even


def _adder(order):
    """acc + x y as the order adds it: two roundings ("unfused", pymf_dot's), else one (fma)."""
    return (lambda x, y, acc: acc + x * y) if order == "unfused" else _fma


def _reference_mu(W, Ht, order):
    I, K = W.shape
    J = Ht.shape[0]
    if order == "blas":
        return W @ Ht.T
    if order == "sequential":
        total = np.zeros((I, J))
        for k in range(K):
            total = _fma(W[:, k][:, None], Ht[:, k][None, :], total)
        return total
    add = _adder(order)
    K4 = K - K % 4
    partial = [np.zeros((I, J)) for _ in range(4)]
    for k in range(K4):
        partial[k % 4] = add(W[:, k][:, None], Ht[:, k][None, :], partial[k % 4])
    for k in range(K4, K):
        partial[0] = add(W[:, k][:, None], Ht[:, k][None, :], partial[0])
    return (partial[0] + partial[1]) + (partial[2] + partial[3])


def _reference_gradient(V, W, Ht, beta, phi, row_start, col_start, order="pymf_dot_fused"):
    """pymf_tweedie_grad's sums in its order: part p = 0..B-1, the blocks (b, (b + p) mod B)."""
    B = len(row_start) - 1
    mu = _reference_mu(W, Ht, order)
    if beta < 2:
        mu = np.where(mu >= 1e-10, mu, 1e-10)
    g = _tweedie.dlogp_dmu(V, mu, beta, 1.0) * (1.0 / phi)
    add = _adder(order)
    gW, gHt = np.zeros_like(W), np.zeros_like(Ht)
    for part in range(B):
        for b in range(B):
            c = (b + part) % B
            rows = slice(row_start[b], row_start[b + 1])
            for j in range(col_start[c], col_start[c + 1]):
                gW[rows] = add(g[rows, j][:, None], Ht[j][None, :], gW[rows])
            for i in range(row_start[b], row_start[b + 1]):
                cols = slice(col_start[c], col_start[c + 1])
                gHt[cols] = add(g[i, cols][:, None], W[i][None, :], gHt[cols])
    return gW, gHt


def _problem(I, J, K, seed):
    rng = np.random.default_rng(seed)
    V = rng.gamma(2.0, 1.0, (I, J)) + 0.05
    W = rng.uniform(0.1, 1.0, (I, K)) / np.sqrt(K)
    Ht = rng.uniform(0.1, 1.0, (J, K)) / np.sqrt(K)
    return V, W, Ht


# shapes that leave partial row and column panels (32) and mu tiles (4 x 8 and 4 x 16), K
# around the 4- and 8-wide vectors and the 16- and 32-wide chunks, one block and several
@pytest.mark.parametrize("I, J, K, B", [(37, 45, 1, 2), (70, 53, 5, 3), (64, 64, 32, 2),
                                        (101, 67, 33, 3), (40, 75, 13, 1), (9, 70, 40, 9)])
@pytest.mark.parametrize("beta", [0.0, 1.0, 2.0])
def test_dense_gradient_is_pymf_dot_fused_order_bit_for_bit(I, J, K, B, beta):
    V, W, Ht = _problem(I, J, K, seed=I * 1000 + K)
    data = _blocks.BlockedData.from_dense(V, B)
    gW, gHt = _tweedie.gradient(data, W, Ht, beta, 1.3, n_threads=1)
    ref_gW, ref_gHt = _reference_gradient(V, W, Ht, beta, 1.3, data.row_start, data.col_start)
    assert np.array_equal(gW, ref_gW) and np.array_equal(gHt, ref_gHt)
    gW2, gHt2 = _tweedie.gradient(data, W, Ht, beta, 1.3, n_threads=2)
    assert np.array_equal(gW2, gW) and np.array_equal(gHt2, gHt)


@pytest.mark.parametrize("order", ["sequential", "blas", "unfused"])
def test_power_a_different_summation_order_is_seen(order):
    V, W, Ht = _problem(70, 53, 32, seed=5)
    data = _blocks.BlockedData.from_dense(V, 3)
    gW, gHt = _tweedie.gradient(data, W, Ht, 1.0, 1.0, n_threads=1)
    other_gW, other_gHt = _reference_gradient(V, W, Ht, 1.0, 1.0, data.row_start,
                                              data.col_start, order=order)
    np.testing.assert_allclose(other_gW, gW, rtol=1e-9)  # the same gradient up to rounding,
    assert not (np.array_equal(other_gW, gW) and np.array_equal(other_gHt, gHt))  # not bits


# K around the vectors (4 and 8 lanes) and the gW / gHt chunks (16 and 32 columns); blocks
# whose panels end in partial mu tiles (4 x 8, and 4 x 16 for 8 lanes) and partial panels
@pytest.mark.parametrize("K", [1, 3, 7, 8, 13, 32, 33])
@pytest.mark.parametrize("I, J, B", [(50, 44, 3), (83, 77, 2), (37, 45, 1)])
def test_sparse_blocks_give_the_dense_kernels_bits(I, J, B, K):
    """The MPI ring and sparse data run the per-entry loop, dense data the tiled kernel:
    the same entries must give the same gradient."""
    V, W, Ht = _problem(I, J, K, seed=7)
    rows, cols = np.nonzero(np.ones_like(V))
    dense = _blocks.BlockedData.from_dense(V, B)
    sparse = _blocks.BlockedData.from_sparse(rows.astype(np.int64), cols.astype(np.int64),
                                             V[rows, cols].copy(), V.shape, B)
    for beta in (0.5, 1.0):
        a = _tweedie.gradient(dense, W, Ht, beta, 1.0, n_threads=1)
        b = _tweedie.gradient(sparse, W, Ht, beta, 1.0, n_threads=1)
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5, 8, 13, 16, 31, 32, 33, 40])
def test_vector_noise_equals_one_philox_call_at_a_time(rank):
    """Many 64-counter chunks (the 16- and 8-lane Philox paths and their scalar tails, the
    contiguous output of rank % 4 == 0 and the scatter of other ranks) against the
    per-entry generator the GPU kernels use."""
    t = 2 ** 33 + 11
    for first_row, n_rows in ((0, 1), (3, 77), (1000, 130)):
        fast = _rng.noise(0xFEEDF00D, _rng.STREAM_W, t, first_row, n_rows, rank)
        slow = _rng.noise_scalar(0xFEEDF00D, _rng.STREAM_W, t, first_row, n_rows, rank)
        assert np.array_equal(fast, slow)


@pytest.mark.parametrize("K, prior, beta", [(32, "exponential", 1.0), (13, "gaussian", 2.0)])
def test_psgld_chain_on_dense_blocks_equals_the_per_entry_chain(K, prior, beta):
    """PSGLD's block step writes the tiled gradient in place (pymf_tweedie_block_grad_set);
    the same matrix given as sparse entries runs the per-entry loop after zeroing. The two
    chains, and the dense chain on two threads, must agree bit for bit."""
    from pymf.nmf import _sgld
    V, W, Ht = _problem(70, 61, K, seed=11)
    rows, cols = np.nonzero(np.ones_like(V))
    dense = _blocks.BlockedData.from_dense(V, 3)
    sparse = _blocks.BlockedData.from_sparse(rows.astype(np.int64), cols.astype(np.int64),
                                             V[rows, cols].copy(), V.shape, 3)
    states = []
    for data, threads in ((dense, 1), (sparse, 1), (dense, 2)):
        chain = _sgld.LangevinChain(data, "psgld", K, beta, 1.0, prior, 1.0, 1.0, 5, 6,
                                    n_threads=threads)
        chain.set_state(W, Ht, 0)
        chain.run(np.full(15, 1e-4))
        states.append(chain.get_state())
    for W_t, Ht_t, t in states[1:]:
        assert t == 15 and np.array_equal(W_t, states[0][0]) and np.array_equal(Ht_t, states[0][1])
    assert not np.array_equal(states[0][0], W)  # the chain moved



def _fisher_pieces(chain, data, B, K, rows, both, seed):
    """Every row piece's (rows=True) or column piece's Fisher curvature, added block by
    block in piece order onto a random start (the MPI ring adds onto a partly filled
    buffer; seed None: zeros); both: each block computes the other side's too (into a
    scratch buffer)."""
    rng = np.random.default_rng(seed)
    start, other_start = (data.row_start, data.col_start) if rows else \
        (data.col_start, data.row_start)
    out = []
    for p in range(B):
        shape = (int(start[p + 1] - start[p]), K, K)
        f = np.zeros(shape) if seed is None else rng.standard_normal(shape)
        for q in range(B):
            other = np.zeros((int(other_start[q + 1] - other_start[q]), K, K)) if both else None
            if rows:
                chain.fisher_block(p, q, f, other)
            else:
                chain.fisher_block(q, p, other, f)
        out.append(f)
    return np.concatenate(out)


# K around the 4- and 8-wide vectors, the 2- and 4-row groups and the 16- and 32-column
# chunks; shapes that leave partial panels (32 x 32), one block and several
@pytest.mark.parametrize("K", [1, 3, 7, 8, 13, 32, 33])
@pytest.mark.parametrize("I, J, B", [(50, 44, 3), (83, 77, 2), (37, 45, 1)])
def test_dense_fisher_is_the_per_entry_fisher_bit_for_bit(I, J, B, K):
    """PSGLD's per-row Fisher curvature (pymf_langevin_fisher_block): dense blocks run
    register-tiled products, sparse ones the per-entry loop (two rank-1 updates per entry in
    the layout's row-major order: the dense path's code and order before the tiles). Given
    every entry, the two must give the same upper triangles bit for bit (the lower ones are
    mirrored from them) for each beta's weight, and NumPy's curvature up to rounding."""
    from pymf.nmf import _sgld
    V, W, Ht = _problem(I, J, K, seed=13 + K)
    rows, cols = np.nonzero(np.ones_like(V))
    dense = _blocks.BlockedData.from_dense(V, B)
    sparse = _blocks.BlockedData.from_sparse(rows.astype(np.int64), cols.astype(np.int64),
                                             V[rows, cols].copy(), V.shape, B)
    upper = np.triu(np.ones((K, K), dtype=bool))
    for beta in (0.0, 1.0, 1.5, 2.0):
        chains = []
        for data in (dense, sparse):
            chain = _sgld.LangevinChain(data, "psgld", K, beta, 1.0, "exponential", 1.0, 1.0,
                                        5, 6, n_threads=1)
            chain.set_state(W, Ht, 0)
            chains.append(chain)
        a = (W @ Ht.T) ** (beta - 2.0)
        for side, x, weight in ((True, Ht, a), (False, W, a.T)):
            for both in (False, True):
                fd, fs = (_fisher_pieces(ch, dense, B, K, side, both, seed=K) for ch in chains)
                assert np.array_equal(fd[:, upper], fs[:, upper]), (beta, side, both)
            f = _sgld.fisher_mirror(_fisher_pieces(chains[0], dense, B, K, side, False, None))
            np.testing.assert_allclose(f, np.einsum("ij,jk,jl->ikl", weight, x, x), rtol=1e-12)
