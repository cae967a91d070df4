"""Random numbers: Philox known answers, the noise transform, the GSL streams (pygsl)."""
import numpy as np
import pytest
from scipy import stats

from pymf import _rng
from pymf.nmf import _blocks, _sgld


@pytest.mark.parametrize("counter, key, expected", [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(counter, key, expected):
    """Random123's kat_vectors for philox4x32_10."""
    assert _rng.philox4x32_10(counter, key) == expected


def reference_noise(seed, stream, t, row, rank):
    """The documented counter layout (philox.h) and Box-Muller with NumPy's log/cos/sin."""
    out = []
    for group in range((rank + 3) // 4):
        ctr = (group, row, t & 0xFFFFFFFF, stream | ((t >> 32) << 8))
        words = _rng.philox4x32_10(ctr, (seed & 0xFFFFFFFF, seed >> 32))
        u = (np.array(words, float) + 0.5) / 2 ** 32
        for a, b in ((u[0], u[1]), (u[2], u[3])):
            radius = np.sqrt(-2 * np.log(a))
            out += [radius * np.cos(2 * np.pi * b), radius * np.sin(2 * np.pi * b)]
    return np.array(out[:rank])


@pytest.mark.parametrize("rank", [1, 4, 7, 32])
def test_noise_follows_the_documented_counter_layout(rank):
    seed, t = 0x123456789ABCDEF, 2 ** 33 + 5  # t above 2^32 exercises its high word
    got = _rng.noise(seed, _rng.STREAM_H, t, 40, 3, rank)
    for r in range(3):
        # the C transform uses its own branch-free log and sincos (error < 1e-15)
        np.testing.assert_allclose(got[r], reference_noise(seed, _rng.STREAM_H, t, 40 + r, rank),
                                   rtol=1e-13, atol=1e-13)
    assert np.array_equal(got, _rng.noise_scalar(seed, _rng.STREAM_H, t, 40, 3, rank))


def test_noise_is_standard_gaussian():
    """Mean, variance, kurtosis and a KS test over 1e6 draws; family-wise false-alarm rate
    1e-3 over the four statistics."""
    x = _rng.noise(7, _rng.STREAM_W, 1, 0, 31250, 32).ravel()
    n = x.size
    limit = stats.norm.isf(1e-3 / 8)
    assert abs(x.mean()) / np.sqrt(1 / n) < limit
    assert abs(x.var() - 1) / np.sqrt(2 / n) < limit
    assert abs(np.mean(x ** 4) - 3) / np.sqrt(96 / n) < limit
    assert stats.kstest(x, "norm").pvalue > 1e-3 / 4


def test_noise_depends_on_every_index_and_not_on_the_request():
    base = _rng.noise(1, _rng.STREAM_W, 5, 10, 4, 8)
    for other in (_rng.noise(2, _rng.STREAM_W, 5, 10, 4, 8), _rng.noise(1, _rng.STREAM_H, 5, 10, 4, 8),
                  _rng.noise(1, _rng.STREAM_W, 6, 10, 4, 8), _rng.noise(1, _rng.STREAM_W, 5, 11, 4, 8)):
        assert not np.any(np.isclose(base[1:3], other[1:3]))
    wide = _rng.noise(1, _rng.STREAM_W, 5, 0, 100, 8)
    assert np.array_equal(wide[10:14], base)


def test_stream_seeds_differ_by_iteration():
    seeds = [_rng.stream_seed(42, t) for t in range(1, 1000)]
    assert len(set(seeds)) == len(seeds) and all(0 <= s < 2 ** 32 for s in seeds)


def test_sgld_minibatch_reproduced_by_pygsl():
    """Where C draws from GSL, pygsl's mt19937 set to the same seed reproduces the numbers."""
    rng_module = pytest.importorskip("pygsl.rng", reason="pygsl (the 'test' extra) is not installed")
    for t in (1, 2, 1000):
        got = _sgld.sgld_minibatch(987654321, t, 5000, 50)
        r = rng_module.mt19937()
        r.set(_rng.stream_seed(987654321, t))
        expected = [r.uniform_int(5000) for _ in range(50)]
        assert list(got) == expected


def test_grid_permutation_reproduced_by_pygsl():
    """The block grid's seeded shuffle is gsl_ran_shuffle on mt19937: rows, then columns."""
    rng_module = pytest.importorskip("pygsl.rng", reason="pygsl (the 'test' extra) is not installed")
    data = _blocks.BlockedData.from_dense(np.ones((13, 7)), 2, True, 31337)
    r = rng_module.mt19937()
    r.set(31337)
    # gsl_ran_shuffle (Knuth): for i = n-1 .. 1, j = uniform_int(i + 1), swap(i, j)
    def shuffle(n):
        a = list(range(n))
        for i in range(n - 1, 0, -1):
            j = r.uniform_int(i + 1)
            a[i], a[j] = a[j], a[i]
        return a
    assert list(data.row_of) == shuffle(13)
    assert list(data.col_of) == shuffle(7)
