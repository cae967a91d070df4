"""Set-up at scale: pymf.Ratings keeps data already in row-major order without a copy and
sorts other data in np.lexsort's order; the tiling of the weak-scaling runs is built in
row-major order and equals the tiles concatenated and sorted."""
import numpy as np
import pytest

import pymf
from pymf.nmf.mpi import tile_ratings


def random_entries(seed=0, shape=(37, 23), density=0.3):
    rng = np.random.default_rng(seed)
    rows, cols = np.nonzero(rng.random(shape) < density)
    return rows.astype(np.int64), cols.astype(np.int64), rng.random(rows.size), shape


def test_sorted_input_is_kept_without_a_copy():
    rows, cols, vals, shape = random_entries()
    ratings = pymf.Ratings(rows, cols, vals, shape)
    for kept, given in ((ratings.rows, rows), (ratings.cols, cols), (ratings.values, vals)):
        assert np.shares_memory(kept, given) and np.array_equal(kept, given)


@pytest.mark.parametrize("shape", [(37, 23), (2 ** 40, 2 ** 40)])  # the second: lexsort
def test_unsorted_input_is_sorted_as_lexsort_sorts_it(shape):
    rows, cols, vals, _ = random_entries(seed=1)
    rows = rows * (shape[0] // 37)  # spread over the shape: keys beyond 2^63 in the second
    cols = cols * (shape[1] // 23)
    order = np.random.default_rng(2).permutation(rows.size)
    ratings = pymf.Ratings(rows[order], cols[order], vals[order], shape)
    expected = np.lexsort((cols[order], rows[order]))
    assert np.array_equal(ratings.rows, rows[order][expected])
    assert np.array_equal(ratings.cols, cols[order][expected])
    assert np.array_equal(ratings.values, vals[order][expected])
    assert not np.shares_memory(ratings.rows, rows)


@pytest.mark.parametrize("bounds", [(6, 5, 4), (2 ** 21, 2 ** 21, 2 ** 21)])  # the second: lexsort
def test_stable_order_is_lexsorts_with_ties(bounds):
    """pymf.data.stable_order (the BPMF layouts' sorts: block, user, item; user, item; item,
    user) is np.lexsort's order, ties kept in input order, by one int64 key or by lexsort
    itself where the key could overflow."""
    from pymf.data import stable_order
    rng = np.random.default_rng(3)
    keys = [rng.integers(0, 3, 500) * (b // 3) for b in bounds]  # many ties
    got = stable_order(keys, bounds)
    assert np.array_equal(got, np.lexsort(tuple(keys[::-1])))
    assert np.array_equal(stable_order(keys[:2], bounds[:2]), np.lexsort((keys[1], keys[0])))


@pytest.mark.parametrize("sorted_input", [True, False])
def test_a_duplicate_is_refused_in_sorted_and_unsorted_input(sorted_input):
    rows = np.array([0, 1, 1, 2], dtype=np.int64)
    cols = np.array([3, 2, 2, 0], dtype=np.int64)
    if not sorted_input:
        rows, cols = rows[::-1].copy(), cols[::-1].copy()
    with pytest.raises(ValueError, match=r"duplicate entry \(row 1, col 2\)"):
        pymf.Ratings(rows, cols, np.ones(4), (3, 4))


@pytest.mark.parametrize("tile", [1, 2, 3])
def test_tiling_equals_the_tiles_concatenated_and_sorted(tile):
    rows, cols, vals, shape = random_entries(seed=4)
    ratings = pymf.Ratings(rows, cols, vals, shape)
    got = tile_ratings(ratings, tile)
    I, J = shape
    copies = [(a, b) for a in range(tile) for b in range(tile)]
    expected = pymf.Ratings(np.concatenate([rows + a * I for a, _ in copies]),
                            np.concatenate([cols + b * J for _, b in copies]),
                            np.tile(vals, tile * tile), (I * tile, J * tile))
    assert got.shape == expected.shape
    for x, y in ((got.rows, expected.rows), (got.cols, expected.cols),
                 (got.values, expected.values)):
        assert np.array_equal(x, y)


@pytest.mark.parametrize("tile", [0, -2, 1.5, True])
def test_a_tile_count_that_is_not_a_positive_integer_is_refused(tile, capsys):
    """--tile 0 (and tile_ratings(r, 0)) used to run on the data once, as --tile 1."""
    from pymf.nmf.mpi import _parser
    ratings = pymf.Ratings(*random_entries(seed=5))
    with pytest.raises(ValueError, match="tile must be a positive integer"):
        tile_ratings(ratings, tile)
    with pytest.raises(SystemExit):
        _parser().parse_args(["psgld", "--out", "o", "--tile", str(tile)])
    assert "--tile: must be a positive integer" in capsys.readouterr().err
