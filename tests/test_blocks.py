"""The block grid and the per-block layout of sparse data."""
import numpy as np
import pytest

from pymf.nmf import _blocks


def sparse_input(seed=0, shape=(23, 17), density=0.4):
    rng = np.random.default_rng(seed)
    mask = rng.random(shape) < density
    rows, cols = np.nonzero(mask)
    return rows.astype(np.int64), cols.astype(np.int64), rng.random(rows.size), shape


@pytest.mark.parametrize("permute", [False, True])
@pytest.mark.parametrize("n_blocks", [1, 3, 5])
def test_pieces_and_buckets(permute, n_blocks):
    rows, cols, vals, shape = sparse_input()
    data = _blocks.BlockedData.from_sparse(rows, cols, vals, shape, n_blocks, permute, 11)
    for start, n in ((data.row_start, shape[0]), (data.col_start, shape[1])):
        sizes = np.diff(start)
        assert start[0] == 0 and start[-1] == n and sizes.max() - sizes.min() <= 1
    assert sorted(data.row_of) == list(range(shape[0]))
    assert (not permute) == np.array_equal(data.row_of, np.arange(shape[0]))
    sizes = data.block_sizes()
    assert sizes.sum() == rows.size
    g_rows, g_cols, g_vals = data.sparse_entries()
    # every input entry exactly once, mapped back through the permutation
    back = set(zip(data.row_of[g_rows], data.col_of[g_cols], g_vals))
    assert back == set(zip(rows, cols, vals))
    # entries of block (b, c) lie in its pieces, blocks in order
    position = 0
    for b in range(n_blocks):
        for c in range(n_blocks):
            block = slice(position, position + sizes[b, c])
            assert np.all((g_rows[block] >= data.row_start[b]) & (g_rows[block] < data.row_start[b + 1]))
            assert np.all((g_cols[block] >= data.col_start[c]) & (g_cols[block] < data.col_start[c + 1]))
            assert np.all(np.diff(g_rows[block]) >= 0)
            position += sizes[b, c]
    parts = data.part_sizes()
    for p in range(n_blocks):
        assert parts[p] == sum(sizes[b, (b + p) % n_blocks] for b in range(n_blocks))


def test_dense_grid_order():
    V = np.arange(35.0).reshape(5, 7)
    data = _blocks.BlockedData.from_dense(V, 2, True, 3)
    assert np.array_equal(data.dense_values(), V[data.row_of][:, data.col_of])
    assert data.n_observed == 35 and data.is_dense


def test_permutation_depends_on_seed():
    V = np.ones((50, 40))
    a = _blocks.BlockedData.from_dense(V, 2, True, 1).row_of
    b = _blocks.BlockedData.from_dense(V, 2, True, 2).row_of
    assert not np.array_equal(a, b)


def test_too_many_blocks():
    with pytest.raises(ValueError, match="blocks=6 is larger than the matrix"):
        _blocks.BlockedData.from_dense(np.ones((5, 9)), 6)


def reference_layout(rows, cols, vals, data):
    """NumPy's reading of the layout: entries ordered by block (b, c), then grid row, then
    grid column."""
    row_pos = np.argsort(data.row_of)
    col_pos = np.argsort(data.col_of)
    g_rows, g_cols = row_pos[rows], col_pos[cols]
    b = np.searchsorted(data.row_start, g_rows, side="right") - 1
    c = np.searchsorted(data.col_start, g_cols, side="right") - 1
    order = np.lexsort((g_cols, g_rows, b * data.n_blocks + c))
    return g_rows[order], g_cols[order], vals[order]


@pytest.mark.parametrize("input_order", ["row-major", "shuffled", "column-major"])
@pytest.mark.parametrize("permute", [False, True])
@pytest.mark.parametrize("n_blocks", [1, 2, 4])
def test_layout_is_block_then_row_major_for_any_input_order(input_order, permute, n_blocks):
    # the layout must not depend on the input order (Ratings is sorted by row; other callers
    # pass any order, which takes the unsorted path of the bucketing)
    rows, cols, vals, shape = sparse_input(seed=3, shape=(41, 29), density=0.3)
    order = {"row-major": np.arange(rows.size),
             "shuffled": np.random.default_rng(5).permutation(rows.size),
             "column-major": np.lexsort((rows, cols))}[input_order]
    rows, cols, vals = rows[order], cols[order], vals[order]
    data = _blocks.BlockedData.from_sparse(rows, cols, vals, shape, n_blocks, permute, 7)
    expected = reference_layout(rows, cols, vals, data)
    for got, want in zip(data.sparse_entries(), expected):
        assert np.array_equal(got, want)


def test_layout_with_empty_rows_and_a_wrong_layout_fails_the_reference():
    # rows with no entries, and the power check: swapping two entries of a block is caught
    rows = np.array([4, 0, 4, 2, 0], dtype=np.int64)
    cols = np.array([1, 3, 0, 2, 0], dtype=np.int64)
    vals = np.arange(5.0)
    data = _blocks.BlockedData.from_sparse(rows, cols, vals, (6, 4), 2, True, 1)
    got = data.sparse_entries()
    expected = reference_layout(rows, cols, vals, data)
    assert all(np.array_equal(g, w) for g, w in zip(got, expected))
    swapped = [x.copy() for x in got]
    for x in swapped:
        x[[0, 1]] = x[[1, 0]]
    assert not all(np.array_equal(g, w) for g, w in zip(swapped, expected))
