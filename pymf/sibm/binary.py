"""Binary matrices given by their ones: validation into the C core's CSR form, synthetic
data drawn from the model, and held-out splits. A dense L x M array is never formed (except
from a dense input)."""
import numpy as np

from pymf.data import Ratings
from pymf.engine.checks import check_count, check_rank, check_real
from pymf.engine.seeds import resolve_seed, seed_sequence


class BinaryMatrix:
    """The ones of an n_rows x n_cols binary matrix in CSR form (row_ptr, col_idx: columns
    strictly increasing within each row), as the C core holds it (int64; int64 arrays are
    kept, not copied). pymf.fit takes one as it is: a matrix's index arrays saved with
    np.save (or read from scipy.sparse.save_npz's file with np.load) need neither scipy nor
    a copy. The offsets, columns' range and order are checked when a fit starts (by the C
    core, in one pass); the shapes here."""

    def __init__(self, row_ptr, col_idx, shape):
        self.row_ptr = np.ascontiguousarray(row_ptr, dtype=np.int64)
        self.col_idx = np.ascontiguousarray(col_idx, dtype=np.int64)
        if len(shape) != 2:
            raise ValueError(f"shape must be (n_rows, n_cols), got {tuple(shape)}")
        self.shape = (int(shape[0]), int(shape[1]))
        if self.row_ptr.ndim != 1 or self.col_idx.ndim != 1:
            raise ValueError("row_ptr and col_idx must be 1-D")
        if min(self.shape) <= 0 or len(self.row_ptr) != self.shape[0] + 1:
            raise ValueError(f"a {self.shape[0]} x {self.shape[1]} matrix needs "
                             f"{self.shape[0] + 1} row offsets, got {len(self.row_ptr)}")

    @property
    def n_ones(self):
        return len(self.col_idx)

    def coo(self):
        rows = np.repeat(np.arange(self.shape[0], dtype=np.int64), np.diff(self.row_ptr))
        return rows, self.col_idx

    def contains(self, rows, cols):
        """Whether each (rows[k], cols[k]) is a one."""
        keys = np.asarray(rows, dtype=np.int64) * self.shape[1] + np.asarray(cols, dtype=np.int64)
        mine = self.coo()[0] * self.shape[1] + self.col_idx  # sorted: CSR order
        pos = np.searchsorted(mine, keys)
        return (pos < len(mine)) & (mine[np.minimum(pos, len(mine) - 1)] == keys)


def _from_coo(rows, cols, shape, what):
    rows = np.asarray(rows)
    cols = np.asarray(cols)
    if rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu":
        raise ValueError(f"{what}: row and column indices must be integers")
    L, M = shape
    if L <= 0 or M <= 0:
        raise ValueError(f"{what}: the matrix is empty ({L} x {M})")
    if len(rows) and (rows.min() < 0 or cols.min() < 0):
        raise ValueError(f"{what}: negative row or column index")
    if len(rows) and (rows.max() >= L or cols.max() >= M):
        raise ValueError(f"{what}: an index is out of range for the {L} x {M} matrix")
    keys = rows.astype(np.int64) * M + cols.astype(np.int64)
    order = np.argsort(keys, kind="stable")
    keys = keys[order]
    if len(keys) > 1 and np.any(keys[1:] == keys[:-1]):
        k = int(keys[np.flatnonzero(keys[1:] == keys[:-1])[0]])
        raise ValueError(f"{what}: duplicate entry (row {k // M}, column {k % M})")
    r = keys // M
    row_ptr = np.zeros(L + 1, dtype=np.int64)
    np.cumsum(np.bincount(r, minlength=L), out=row_ptr[1:])
    return BinaryMatrix(row_ptr, keys % M, (L, M))


def _check_binary_values(values, what):
    values = np.asarray(values)
    if values.dtype.kind == "c" or values.dtype.kind not in "biuf":
        raise ValueError(f"{what}: values must be 0 or 1, got dtype {values.dtype}")
    bad = (values != 0) & (values != 1)
    if np.any(bad):
        # ravel: indexing a dense 2-D array with the flat index printed a whole row
        first = values.ravel()[np.flatnonzero(bad)[0]]
        raise ValueError(f"{what}: values must be 0 or 1, found {first!r}")
    return values


def as_binary(data):
    """A BinaryMatrix from a scipy.sparse matrix (stored 0s are zeros; other values than 0
    and 1 are refused), pymf.Ratings of ones, a BinaryMatrix, or a dense 0/1 array."""
    if isinstance(data, BinaryMatrix):
        return data
    what = "the binary matrix"
    if isinstance(data, Ratings):
        values = _check_binary_values(data.values, what)
        keep = values == 1
        return _from_coo(data.rows[keep], data.cols[keep], data.shape, what)
    try:
        import scipy.sparse as sparse
    except ImportError:  # scipy is a dependency; kept optional here for clarity
        sparse = None
    if sparse is not None and sparse.issparse(data):
        if data.format == "csr" and data.has_canonical_format and min(data.shape) > 0:
            # sorted, duplicate-free rows: the CSR arrays as they are (no O(ones log ones)
            # sort, no COO copy); stored zeros are dropped
            values = _check_binary_values(data.data, what)
            if np.any(values == 0):
                data = data.copy()
                data.eliminate_zeros()
            return BinaryMatrix(data.indptr, data.indices, data.shape)
        coo = data.tocoo()
        values = _check_binary_values(coo.data, what)
        keep = values == 1
        # a COO with a duplicated (row, col) would be summed by tocsr(): refuse it instead
        return _from_coo(coo.row[keep], coo.col[keep], coo.shape, what)
    if isinstance(data, np.ndarray) or isinstance(data, (list, tuple)):
        array = np.asarray(data)
        if array.ndim != 2:
            raise ValueError(f"{what}: a dense input must be 2-D, got shape {array.shape}")
        if array.dtype == object:
            raise ValueError(f"{what}: values must be 0 or 1, got an object array")
        if np.ma.isMaskedArray(data):
            raise ValueError(f"{what}: masked arrays are not supported (every entry is observed)")
        _check_binary_values(array, what)
        rows, cols = np.nonzero(array)
        return _from_coo(rows, cols, array.shape, what)
    raise TypeError(f"{what} must be a scipy.sparse matrix of ones, pymf.Ratings of ones, a "
                    f"pymf.sibm.BinaryMatrix or a dense 0/1 array, got {type(data).__name__}")


def check_test(test, shape):
    """test = (rows, cols, labels): held-out entries with 0/1 labels."""
    if test is None:
        return None
    if not isinstance(test, (tuple, list)) or len(test) != 3:
        raise ValueError("test must be a tuple (rows, cols, labels)")
    rows, cols, labels = (np.asarray(a) for a in test)
    if rows.dtype.kind not in "iu" or cols.dtype.kind not in "iu":
        raise ValueError("test: rows and cols must be integer arrays")
    if not (rows.shape == cols.shape == labels.shape and rows.ndim == 1 and len(rows)):
        raise ValueError("test: rows, cols and labels must be non-empty 1-D arrays of one length")
    if rows.min() < 0 or cols.min() < 0 or rows.max() >= shape[0] or cols.max() >= shape[1]:
        raise ValueError(f"test: an entry is outside the {shape[0]} x {shape[1]} matrix")
    labels = _check_binary_values(labels, "test labels").astype(np.float64)
    return rows.astype(np.int64), cols.astype(np.int64), labels


def make_binary_mf(n_rows, n_cols, rank, density=0.01, n_ones=None, scale=1.0, seed=0):
    """A binary matrix drawn from the model, as scipy.sparse.csr_matrix of ones, with the
    truth: (X, U, V, z). U, V ~ N(0, scale^2 / sqrt(rank)) entrywise, so u.v has variance
    scale^4 (sd scale^2) whatever the rank; z is set so that the expected density is `density` (or
    n_ones / (n_rows n_cols)). Entries are drawn row block by row block: memory is
    O((L + M) rank + ones), never L x M."""
    import scipy.sparse as sparse
    from scipy.optimize import brentq
    from scipy.special import expit
    L = check_count(n_rows, "n_rows", 1)
    M = check_count(n_cols, "n_cols", 1)
    D = check_rank(rank)
    if n_ones is not None:
        density = check_count(n_ones, "n_ones", 1) / (L * M)
    density = check_real(density, "density", positive=True)
    if not density < 1:
        raise ValueError(f"density must be in (0, 1), got {density!r}")
    rng = np.random.default_rng(seed_sequence(resolve_seed(seed)))
    sd = check_real(scale, "scale", positive=True) / D ** 0.25
    U = rng.normal(0, sd, (L, D))
    V = rng.normal(0, sd, (M, D))
    # z from a sample of cells: mean sigmoid(s + z) = density
    probe_rows = rng.integers(0, L, 20000)
    probe_cols = rng.integers(0, M, 20000)
    s = np.einsum("ij,ij->i", U[probe_rows], V[probe_cols])
    z = brentq(lambda z: expit(s + z).mean() - density, -40, 40)
    rows, cols = [], []
    block = max(1, int(2e7 // M))
    for start in range(0, L, block):
        logits = U[start:start + block] @ V.T + z
        r, c = np.nonzero(rng.random(logits.shape) < expit(logits))
        rows.append(r + start)
        cols.append(c)
    rows, cols = np.concatenate(rows), np.concatenate(cols)
    X = sparse.csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(L, M))
    return X, U, V, z


def holdout(data, fraction=0.1, seed=0):
    """(train, test): a `fraction` of the ones and as many zeros held out. The held-out ones
    become zeros of the training matrix (the usual implicit-feedback protocol: an unseen
    interaction looks like a zero); test = (rows, cols, labels)."""
    import scipy.sparse as sparse
    X = as_binary(data)
    fraction = check_real(fraction, "fraction", positive=True)
    if not fraction < 1:
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    rng = np.random.default_rng(seed_sequence(resolve_seed(seed)))
    rows, cols = X.coo()
    L, M = X.shape
    if X.n_ones == 0:
        raise ValueError("holdout: the matrix has no ones to hold out")
    n_test = max(1, int(round(fraction * X.n_ones)))
    n_zeros = L * M - X.n_ones
    if n_zeros < n_test:
        # as many zeros as ones are held out: the draw below could never finish
        raise ValueError(f"holdout: {n_test} ones held out (fraction {fraction:g} of "
                         f"{X.n_ones}) need as many zeros, and the matrix has {n_zeros}; "
                         "give a smaller fraction")
    pick = rng.choice(X.n_ones, n_test, replace=False)
    keep = np.ones(X.n_ones, dtype=bool)
    keep[pick] = False
    zero_rows, zero_cols = [], []
    taken = set()
    while len(zero_rows) < n_test:
        r = rng.integers(0, L, 2 * n_test)
        c = rng.integers(0, M, 2 * n_test)
        ok = ~X.contains(r, c)
        for a, b in zip(r[ok], c[ok]):
            if (a, b) not in taken and len(zero_rows) < n_test:
                taken.add((a, b))
                zero_rows.append(a)
                zero_cols.append(b)
    train = sparse.csr_matrix((np.ones(int(keep.sum())), (rows[keep], cols[keep])), shape=X.shape)
    test_rows = np.concatenate([rows[pick], np.array(zero_rows, dtype=np.int64)])
    test_cols = np.concatenate([cols[pick], np.array(zero_cols, dtype=np.int64)])
    labels = np.concatenate([np.ones(n_test), np.zeros(n_test)])
    return train, (test_rows, test_cols, labels)


def binarize(ratings):
    """MovieLens-style ratings as a binary matrix: rated = 1 (whatever the rating)."""
    import scipy.sparse as sparse
    return sparse.csr_matrix((np.ones(len(ratings.rows)), (ratings.rows, ratings.cols)),
                             shape=ratings.shape)
