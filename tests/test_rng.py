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
        # the C transform uses its own division-free log, sin and cos (philox.h)
        np.testing.assert_allclose(got[r], reference_noise(seed, _rng.STREAM_H, t, 40 + r, rank),
                                   rtol=0, atol=BOX_MULLER_ERROR_PER_RADIUS * 6.8)
    assert np.array_equal(got, _rng.noise_scalar(seed, _rng.STREAM_H, t, 40, 3, rank))


# The transform's accuracy (philox.h: -2 log u within 5e-14 relative, sin and cos of the
# angle within 4e-15 and 6e-14 absolute, by short division-free polynomials): each Gaussian
# of a pair within this factor of the pair's radius sqrt(-2 log u) of the exact Box-Muller
# value: 7.4e-14 on these words, a margin of 3.4x. (The previous transform, with a division
# and longer series, reached 6.6e-16 under a bound of 1e-14; 2.5e-13 relative is still 1e-3
# of float32's resolution and 1e-9 of the noise's own scale per Langevin step.)
BOX_MULLER_ERROR_PER_RADIUS = 2.5e-13


def _exact_box_muller(a, b):
    """Box-Muller of the words in long double (64-bit mantissa, rounding 5e-20): the radius
    and the pair (radius cos, radius sin) of angle 2 pi u_b."""
    ua = (a.astype(np.longdouble) + np.longdouble(0.5)) / np.longdouble(2.0 ** 32)
    ub = (b.astype(np.longdouble) + np.longdouble(0.5)) / np.longdouble(2.0 ** 32)
    radius = np.sqrt(-2 * np.log(ua))
    angle = 2 * np.longdouble("3.14159265358979323846264338327950288") * ub
    return radius, radius * np.cos(angle), radius * np.sin(angle)


def _within_bound(z0, z1, radius, exact0, exact1):
    error = np.maximum(np.abs(z0 - exact0), np.abs(z1 - exact1))
    return bool(np.all(error <= BOX_MULLER_ERROR_PER_RADIUS * radius))


@pytest.mark.skipif(np.finfo(np.longdouble).eps > 1e-18,
                    reason="needs an extended-precision long double as the reference")
def test_box_muller_is_within_its_error_bound():
    """pymf_box_muller against long double on 4.2 million word pairs: the extreme words of
    the radius (u next to 0 and to 1, where log u is tiny and must stay accurate
    relative to itself), words next to the log's 16 interval boundaries 1 + i/16 of every
    octave and to every eighth turn of the angle, and random words. A float32-accurate
    transform fails."""
    rng = np.random.default_rng(20)
    edges = np.r_[np.arange(2 ** 16), 2 ** 32 - 1 - np.arange(2 ** 16)]
    # words whose uniform is next to a boundary m = 1 + i/16 of an octave 2^-j
    cuts = np.array([(1 + i / 16) * 2.0 ** -j * 2 ** 32 for i in range(16) for j in range(1, 33)])
    cuts = cuts[cuts < 2 ** 32 - 64]
    near_cuts = (np.floor(cuts)[:, None] + np.arange(-32, 32)).ravel()
    eighths = (np.arange(8) * 2 ** 29)[:, None] + np.arange(-2 ** 12, 2 ** 12)
    a = np.r_[edges, near_cuts[near_cuts >= 0], rng.integers(0, 2 ** 32, 4_000_000)]
    a = a.astype(np.uint32)
    b = np.resize(np.r_[eighths.ravel() % 2 ** 32, rng.integers(0, 2 ** 32, 2 ** 20)], a.size)
    b = b.astype(np.uint32)
    z0, z1 = _rng.box_muller(a, b)
    radius, exact0, exact1 = _exact_box_muller(a, b)
    assert _within_bound(z0, z1, radius, exact0, exact1)
    assert np.max(np.abs(np.r_[z0, z1])) <= np.sqrt(-2 * np.log(2.0 ** -33))  # the truncation
    # power: a transform accurate to float32 only is rejected
    assert not _within_bound(z0.astype(np.float32).astype(float), z1, radius, exact0, exact1)


def _ad_inf_cdf(z):
    """P(A^2 <= z) of the Anderson-Darling statistic of a fully specified distribution, large
    n (Marsaglia and Marsaglia, J. Stat. Software 9(2), 2004, adinf)."""
    if z < 2:
        return np.exp(-1.2337141 / z) / np.sqrt(z) * (2.00012 + (0.247105 - (0.0649821 - (
            0.0347962 - (0.011672 - 0.00168691 * z) * z) * z) * z) * z)
    return np.exp(-np.exp(1.0776 - (2.30695 - (0.43424 - (0.082433 - (
        0.008056 - 0.0003146 * z) * z) * z) * z) * z))


def _looks_standard_gaussian(x, alpha=1e-3):
    """Moments (mean, variance, kurtosis), KS and Anderson-Darling against N(0, 1) and the
    counts beyond 3, 4 and 5 (two-sided binomial tests): a family-wise false-alarm rate
    alpha, Bonferroni over the nine tests."""
    n, each = x.size, alpha / 9
    limit = stats.norm.isf(each / 2)
    if abs(x.mean()) / np.sqrt(1 / n) > limit or abs(x.var() - 1) / np.sqrt(2 / n) > limit:
        return False
    if abs(np.mean(x ** 4) - 3) / np.sqrt(96 / n) > limit:
        return False
    if stats.kstest(x, "norm").pvalue < each:
        return False
    s = np.sort(x)
    i = np.arange(1, n + 1)
    anderson = -n - np.mean((2 * i - 1) * (stats.norm.logcdf(s) + stats.norm.logsf(s[::-1])))
    if 1 - _ad_inf_cdf(anderson) < each:
        return False
    for threshold in (3, 4, 5):
        beyond = int(np.count_nonzero(np.abs(x) > threshold))
        if stats.binomtest(beyond, n, 2 * stats.norm.sf(threshold)).pvalue < each:
            return False
    return True


def test_noise_is_standard_gaussian():
    """2^20 draws of the samplers' noise pass moments, KS, Anderson-Darling and tail counts
    against N(0, 1); the same tests reject slightly wrong transforms of the same draws (a
    1 % larger scale, a 2 % larger value beyond 2, a log off by log(2)/4 for a quarter of
    the draws), so they could see a wrong Box-Muller."""
    x = _rng.noise(7, _rng.STREAM_W, 1, 0, 32768, 32).ravel()
    assert _looks_standard_gaussian(x)
    assert not _looks_standard_gaussian(1.01 * x)
    assert not _looks_standard_gaussian(np.where(np.abs(x) > 2, 1.02 * x, x))
    # the pairs (z0, z1) of each Box-Muller call: radius and angle back from them; then a
    # log that is a quarter octave off (log u off by log(2) / 4) where the mantissa of u
    # is in [2^(3/8), 2^(5/8)), a quarter of the draws
    z0, z1 = x[0::2], x[1::2]
    radius, angle = np.hypot(z0, z1), np.arctan2(z1, z0)
    mantissa = 2 * np.frexp(np.exp(-radius ** 2 / 2))[0]
    off = (mantissa >= 2 ** (3 / 8)) & (mantissa < 2 ** (5 / 8))
    wrong_radius = np.sqrt(radius ** 2 - off * np.log(2) / 2)
    wrong = np.empty_like(x)
    wrong[0::2], wrong[1::2] = wrong_radius * np.cos(angle), wrong_radius * np.sin(angle)
    assert not _looks_standard_gaussian(wrong)


@pytest.mark.parametrize("rank", [4, 8, 16, 32, 64, 128, 12, 36, 10])
@pytest.mark.parametrize("n_rows", [1, 5, 37, 300])
def test_noise_equals_the_per_entry_generator_on_every_counter_path(rank, n_rows):
    # With AVX-512, power-of-two group counts (rank 4, 8, ..., 128) compute each counter
    # from its index in registers; other ranks go through the lane arrays (12, 36: whole
    # groups; 10: the scatter). Counts of 1 to 9,600 counters cover partial and whole
    # vectors, and a first row above 2^31 the row word's high bit.
    seed, t, first_row = 0xFEDCBA9876543210, 2 ** 32 + 77, 3_000_000_000
    got = _rng.noise(seed, _rng.STREAM_W, t, first_row, n_rows, rank)
    assert np.array_equal(got, _rng.noise_scalar(seed, _rng.STREAM_W, t, first_row, n_rows, rank))


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
