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


def assert_layout_is_the_reference(data, rows, cols, vals):
    for got, want in zip(data.sparse_entries(), reference_layout(rows, cols, vals, data)):
        assert np.array_equal(got, want)


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
    assert_layout_is_the_reference(data, rows, cols, vals)


@pytest.mark.parametrize("shape", [(9, 3000), (7, 70000), (5, 256), (6, 257)])
def test_layout_of_long_rows_is_block_then_row_major(shape):
    # rows of hundreds of entries: the layout sorts a row by grid column with a radix sort on
    # 8-bit digits past 32 entries (2 passes for 3000 and 257 columns, 3 for 70000, 1 for 256)
    rng = np.random.default_rng(11)
    n_rows, n_cols = shape
    per_row = min(n_cols, 600)
    rows = np.repeat(np.arange(n_rows, dtype=np.int64), per_row)
    cols = np.concatenate([rng.choice(n_cols, per_row, replace=False)
                           for _ in range(n_rows)]).astype(np.int64)
    vals = rng.random(rows.size)
    order = rng.permutation(rows.size)
    for permute in (False, True):
        data = _blocks.BlockedData.from_sparse(rows[order], cols[order], vals[order], shape,
                                               3, permute, 7)
        assert_layout_is_the_reference(data, rows[order], cols[order], vals[order])


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


# ---------------------------------------------------------------- entry formats ----------
# A sparse entry is stored in the most compact lossless format: one uint32 for its grid row
# and column when their bits add up to at most 32 ("packed", else two int32s), and a float32
# value when every value is exactly a float32 (else float64). 2^17 x (2^16 + 1) needs
# 17 + 17 = 34 bits; 2^16 x 2^16 needs 32.
COMPACT_SUBSETS = [("packed", "float32"), ("packed",), ("float32",), ()]


def few_entries(shape, values, seed=0):
    """len(values) distinct entries spread over the whole shape, its corners included."""
    rng = np.random.default_rng(seed)
    n = len(values)
    flat = np.unique(np.concatenate([
        [0, shape[0] * shape[1] - 1, shape[1] - 1, (shape[0] - 1) * shape[1]],
        rng.choice(shape[0] * shape[1], size=n, replace=False)]))[:n]
    rows, cols = np.divmod(flat, shape[1])
    return rows.astype(np.int64), cols.astype(np.int64), np.asarray(values, dtype=np.float64)


@pytest.mark.parametrize("shape, index", [
    ((23, 17), "packed"), ((2 ** 16, 2 ** 16), "packed"), ((1, 2 ** 20), "packed"),
    ((2 ** 16 + 1, 2 ** 16), "int32"), ((2 ** 17, 2 ** 16 + 1), "int32")])
@pytest.mark.parametrize("values, dtype", [
    (np.arange(1.0, 51.0) % 5 + 1, "float32"),                      # ratings 1-5
    (np.arange(50) * 0.5 - 3.0, "float32"),                          # halves, 0, negatives
    ([2.0 ** 24, -0.0, 2.0 ** -149, 3.4028234663852886e38] + [1.0] * 46, "float32"),
    ([0.1] + [1.0] * 49, "float64"),                                 # one value not a float32
    ([2.0 ** 24 + 1] + [1.0] * 49, "float64"),
    ([1e300] + [1.0] * 49, "float64"),                               # beyond float32's range
    ([2.0 ** -150 * 3] + [1.0] * 49, "float64")])                    # below its subnormals
def test_the_entry_format_is_the_most_compact_lossless_one(shape, index, values, dtype):
    rows, cols, vals = few_entries(shape, values)
    n_blocks = 2 if shape[0] > 1 else 1
    data = _blocks.BlockedData.from_sparse(rows, cols, vals, shape, n_blocks, True, 5)
    assert data.entry_format == (index, dtype)
    assert data.entry_bytes == (4 if index == "packed" else 8) + (4 if dtype == "float32" else 8)
    # the entries come back exactly (signed zeros included), as int32, int32, float64
    got = data.sparse_entries()
    assert [x.dtype for x in got] == [np.int32, np.int32, np.float64]
    for g, w in zip(got, reference_layout(rows, cols, vals, data)):
        assert np.array_equal(g, w) and np.array_equal(np.signbit(g), np.signbit(w))
    row_counts, col_counts = data.line_counts()
    assert np.array_equal(row_counts, np.bincount(got[0], minlength=shape[0]))
    assert np.array_equal(col_counts, np.bincount(got[1], minlength=shape[1]))


def test_wider_formats_on_request_and_dense_data_has_none():
    rows, cols, vals, shape = sparse_input(seed=2)
    vals = np.round(vals * 8) / 8  # eighths: exact float32s
    for compact in COMPACT_SUBSETS:
        data = _blocks.BlockedData.from_sparse(rows, cols, vals, shape, 3, True, 1, _compact=compact)
        assert data.entry_format == ("packed" if "packed" in compact else "int32",
                                     "float32" if "float32" in compact else "float64")
        assert_layout_is_the_reference(data, rows, cols, vals)
    with pytest.raises(ValueError, match="_compact"):
        _blocks.BlockedData.from_sparse(rows, cols, vals, shape, 3, _compact=("float16",))
    dense = _blocks.BlockedData.from_dense(np.ones((4, 3)), 2)
    assert dense.entry_format is None and dense.entry_bytes is None
    empty = _blocks.BlockedData.from_sparse(rows[:0], cols[:0], vals[:0], shape, 2)
    assert empty.entry_format == ("packed", "float32")
    assert all(x.size == 0 for x in empty.sparse_entries())


def _run_chains(data, K, W, Ht):
    """States and log-likelihoods of LD, SGLD, PSGLD (with its per-row Fisher curvature),
    SGD and DSGD on `data` from (W, Ht)."""
    from pymf.nmf import _sgd, _sgld
    out = []
    for kind, batch in (("ld", 0), ("sgld", 40), ("psgld", 0)):
        for beta, prior in ((1.0, "exponential"), (0.5, "gaussian")):
            chain = _sgld.LangevinChain(data, kind, K, beta, 1.0, prior, 1.0, 1.0, 17, 23,
                                        batch_size=batch, part_order="random", n_threads=2)
            chain.set_state(W, Ht, 0)
            chain.run(np.full(12, 2e-4))
            out += [*chain.get_state()[:2], chain.loglik()]
            if kind == "psgld":
                B = data.n_blocks
                for b in range(B):
                    f_w = np.zeros((int(data.row_start[b + 1] - data.row_start[b]), K, K))
                    f_h = np.zeros((int(data.col_start[b + 1] - data.col_start[b]), K, K))
                    chain.fisher_block(b, b, f_w, f_h)
                    out += [f_w, f_h]
    for kind, batch in (("sgd", 30), ("dsgd", 0)):
        chain = _sgd.Optimiser(data, kind, K, 1.0, 1.0, "exponential", 1.0, 1.0, 29,
                              batch_size=batch, n_threads=2)
        chain.set_state(W, Ht, 0)
        chain.run(np.full(12, 1e-3))
        out += [*chain.get_state()[:2], chain.loglik()]
    return out


@pytest.mark.parametrize("shape, density", [((60, 47), 0.3), ((2 ** 17, 2 ** 16 + 1), None)])
def test_chains_are_bit_identical_in_every_entry_format(shape, density):
    """The same data in the four formats (packed / int32 index x float32 / float64 values):
    every chain must compute the same bits. On the 2^17 x (2^16 + 1) grid the index cannot
    be packed, which the default layout must find by itself."""
    rng = np.random.default_rng(4)
    if density is None:
        rows, cols, _ = few_entries(shape, np.ones(300), seed=4)
    else:
        rows, cols = (x.astype(np.int64) for x in np.nonzero(rng.random(shape) < density))
    vals = rng.poisson(3.0, rows.size).astype(np.float64)  # counts: exact float32s
    K = 3
    W = rng.gamma(2.0, 0.5, (shape[0], K))
    Ht = rng.gamma(2.0, 0.5, (shape[1], K))
    results, formats = [], []
    for compact in COMPACT_SUBSETS:
        data = _blocks.BlockedData.from_sparse(rows, cols, vals, shape, 3, True, 8,
                                               _compact=compact)
        formats.append(data.entry_format)
        row_of, col_of = data.row_of, data.col_of
        results.append(_run_chains(data, K, np.ascontiguousarray(W[row_of]),
                                   np.ascontiguousarray(Ht[col_of])))
    packed = "int32" if density is None else "packed"
    assert formats == [(packed, "float32"), (packed, "float64"), ("int32", "float32"),
                       ("int32", "float64")]
    assert _blocks.BlockedData.from_sparse(rows, cols, vals, shape, 3).entry_format == \
        (packed, "float32")
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert np.array_equal(a, b)
    # the power check: the chains moved, and a changed value changes them
    assert not np.array_equal(results[0][0], W[row_of])
    vals[0] += 1.0
    data = _blocks.BlockedData.from_sparse(rows, cols, vals, shape, 3, True, 8)
    changed = _run_chains(data, K, np.ascontiguousarray(W[row_of]), np.ascontiguousarray(Ht[col_of]))
    assert not all(np.array_equal(a, b) for a, b in zip(results[0], changed))
