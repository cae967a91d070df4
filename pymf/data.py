"""Observed data: sparse ratings (pymf.Ratings), dense arrays and scipy.sparse matrices.

Conventions
-----------
* A dense NumPy array means every entry is observed. NaN or inf is an error, never
  "missing": pass a Ratings object (or a scipy.sparse matrix) for partly observed data.
* A scipy.sparse matrix means its *stored* entries are the observed ones (explicit zeros
  included) and everything else is missing, as for Ratings. For a fully observed count
  matrix stored sparsely, pass ``V.toarray()``.
* Indices are 0-based.
"""
import numbers

import numpy as np


class Ratings:
    """Sparse observed entries (row, col, value) of an I x J matrix, 0-based.

    Parameters
    ----------
    rows, cols : array_like of int
    values : array_like of float
    shape : (int, int), optional
        Defaults to (max(rows) + 1, max(cols) + 1).

    Raises ValueError for mismatched lengths, non-integer, negative or out-of-range
    indices, duplicate (row, col) pairs and non-finite values.

    The entries are kept sorted by row, then column. Input already in that order, as
    contiguous int64 indices and float64 values, is kept without a copy (no sort, no second
    copy of a large data set): the Ratings then shares those arrays, which must not be
    modified afterwards.
    """

    def __init__(self, rows, cols, values, shape=None):
        rows = _as_index_array(rows, "rows")
        cols = _as_index_array(cols, "cols")
        values = real_array(values, "values").ravel()
        if not (len(rows) == len(cols) == len(values)):
            raise ValueError(
                f"rows, cols and values must have the same length, got {len(rows)}, "
                f"{len(cols)} and {len(values)}")
        if len(values) and not np.all(np.isfinite(values)):
            bad = int(np.flatnonzero(~np.isfinite(values))[0])
            raise ValueError(f"values contain NaN or inf (first at position {bad})")
        if shape is None:
            if len(rows) == 0:
                raise ValueError("shape is required for an empty Ratings")
            shape = (int(rows.max()) + 1, int(cols.max()) + 1)
        shape = _as_shape(shape)
        if len(rows) and (rows.max() >= shape[0]):
            raise ValueError(f"row index {int(rows.max())} is out of range for {shape[0]} rows")
        if len(cols) and (cols.max() >= shape[1]):
            raise ValueError(f"column index {int(cols.max())} is out of range for {shape[1]} columns")
        if not _strictly_row_major(rows, cols):
            # sorted copies; entries already in strict (row, col) order are kept as given,
            # without the sort's index and copies (3 x 8 bytes an entry at 10^8 entries)
            order = stable_order((rows, cols), shape)
            rows, cols, values = rows[order], cols[order], values[order]
            if len(rows) > 1:
                dup = (rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1])
                if dup.any():
                    k = int(np.flatnonzero(dup)[0])
                    raise ValueError(
                        f"duplicate entry (row {int(rows[k])}, col {int(cols[k])}): each entry "
                        "may be observed once")
        self.rows, self.cols, self.values = rows, cols, values
        self.shape = shape

    @property
    def nnz(self):
        return len(self.values)

    def __len__(self):
        return self.nnz

    def __repr__(self):
        return f"Ratings(shape={self.shape}, nnz={self.nnz})"

    @classmethod
    def from_scipy(cls, matrix):
        if not hasattr(matrix, "tocoo"):
            raise ValueError(f"from_scipy takes a scipy.sparse matrix, got {type(matrix).__name__}"
                             " (for a dense array use Ratings.from_dense)")
        coo = matrix.tocoo()
        return cls(coo.row, coo.col, coo.data, shape=coo.shape)

    @classmethod
    def from_dense(cls, V):
        V = np.asarray(V, dtype=np.float64)
        rows, cols = np.indices(V.shape)
        return cls(rows.ravel(), cols.ravel(), V.ravel(), shape=V.shape)

    def split(self, test_fraction=0.2, seed=0):
        """A random (train, test) split of the entries with a fixed seed."""
        if isinstance(test_fraction, bool) or not isinstance(test_fraction, numbers.Real) \
                or not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction must be a number in (0, 1), got {test_fraction!r}")
        from pymf.engine.seeds import check_seed, seed_sequence
        rng = np.random.default_rng(seed_sequence(check_seed(seed)))
        is_test = rng.random(self.nnz) < test_fraction
        train = Ratings(self.rows[~is_test], self.cols[~is_test], self.values[~is_test], self.shape)
        test = Ratings(self.rows[is_test], self.cols[is_test], self.values[is_test], self.shape)
        return train, test

    def to_dense(self, fill=np.nan):
        V = np.full(self.shape, fill, dtype=np.float64)
        V[self.rows, self.cols] = self.values
        return V


def stable_order(keys, bounds):
    """The stable order by keys[0], then keys[1], ...: np.lexsort(keys[::-1])'s, for
    integer keys with 0 <= keys[k] < bounds[k], computed as a stable sort of one int64 key
    where the bounds' product cannot overflow it (2x faster than np.lexsort with two keys
    at 10^7 entries, 4.5x with three; else np.lexsort)."""
    if np.prod([float(b) for b in bounds]) >= 2.0 ** 62:
        return np.lexsort(tuple(keys[::-1]))
    key = np.asarray(keys[0], dtype=np.int64).copy()
    for k, bound in zip(keys[1:], bounds[1:]):
        key *= np.int64(bound)
        key += k
    return np.argsort(key, kind="stable")



def _strictly_row_major(rows, cols, chunk=1 << 20):
    """Whether (rows[e], cols[e]) increase strictly with e: sorted by row then column, with
    no duplicate. Checked in chunks, so that the temporaries stay small."""
    for start in range(0, max(len(rows) - 1, 0), chunk):
        stop = min(start + chunk, len(rows) - 1)
        r0, r1 = rows[start:stop], rows[start + 1:stop + 1]
        c0, c1 = cols[start:stop], cols[start + 1:stop + 1]
        if not np.all((r1 > r0) | ((r1 == r0) & (c1 > c0))):
            return False
    return True


def real_array(x, name):
    """x as a float64 array, refusing what would be cast silently: complex numbers (the
    imaginary part would be dropped), booleans, strings, dates, objects and masked arrays
    (the mask would be ignored)."""
    if isinstance(x, np.ma.MaskedArray):
        raise ValueError(f"{name} is a masked array: pymf would ignore the mask; pass the "
                         "observed entries as a pymf.Ratings (or a scipy.sparse matrix)")
    arr = np.asarray(x)
    if arr.dtype == bool or not (np.issubdtype(arr.dtype, np.integer)
                                 or np.issubdtype(arr.dtype, np.floating)):
        raise ValueError(f"{name} must hold real numbers (integer or floating point), got "
                         f"dtype {arr.dtype}")
    return np.asarray(arr, dtype=np.float64)


def entry_ids(rows, cols, shape, names=("row", "column")):
    """(rows, cols) of entries to predict, as int64 arrays: integers (not floats, which would
    be truncated, nor booleans), 1-D, of one length, inside shape."""
    out = []
    for ids, name, n in zip((rows, cols), names, shape):
        arr = np.asarray(ids)
        if arr.size and (arr.dtype == bool or not np.issubdtype(arr.dtype, np.integer)):
            raise ValueError(f"{name} ids must be integers, got dtype {arr.dtype}")
        if arr.size and arr.dtype.kind == "u" and arr.max() >= n:
            # before the cast to int64, which wraps 2^64 - 1 into the id -1
            raise ValueError(f"{name} id {int(arr.max())} is out of range: ids must be in "
                             f"[0, {n})")
        arr = np.ascontiguousarray(arr, dtype=np.int64).ravel()
        if arr.size and (arr.min() < 0 or arr.max() >= n):
            bad = int(arr.min()) if arr.min() < 0 else int(arr.max())
            raise ValueError(f"{name} id {bad} is out of range: ids must be in [0, {n})")
        out.append(arr)
    if out[0].shape != out[1].shape:
        raise ValueError(f"{names[0]} and {names[1]} ids must have the same length, got "
                         f"{out[0].size} and {out[1].size}")
    return out[0], out[1]


def _as_index_array(x, name):
    arr = np.asarray(x)
    if arr.ndim != 1:
        arr = arr.ravel()
    if arr.dtype == bool:
        raise ValueError(f"{name} must be integer indices, got booleans")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) \
                and np.all(arr == np.round(arr)) and np.all(np.abs(arr) < 2.0 ** 62):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must be integer indices")
    if arr.size and arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
        # the cast to int64 would wrap it into a negative index, and the error say so
        raise ValueError(f"{name} contain an index ({int(arr.max())}) too large for int64")
    arr = arr.astype(np.int64, copy=False)
    if arr.size and arr.min() < 0:
        raise ValueError(f"{name} contain a negative index ({int(arr.min())}); indices are 0-based")
    return np.ascontiguousarray(arr)


def _as_shape(shape):
    try:
        n_rows, n_cols = shape
    except (TypeError, ValueError):
        raise ValueError(f"shape must be a pair (n_rows, n_cols), got {shape!r}") from None
    for n in (n_rows, n_cols):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral) or n <= 0:
            raise ValueError(f"shape must hold two positive integers, got {shape!r}")
    return (int(n_rows), int(n_cols))


def as_observed(data):
    """Normalise user data to either a C-contiguous float64 2-D array or a Ratings."""
    if isinstance(data, Ratings):
        return data
    if hasattr(data, "tocoo") and hasattr(data, "nnz"):  # scipy.sparse, without importing it
        return Ratings.from_scipy(data)
    try:
        arr = np.asarray(data)
    except ValueError:  # e.g. ragged nested lists
        raise ValueError("data must be a numeric array, a scipy.sparse matrix or a pymf.Ratings "
                         "(a nested list must be rectangular)") from None
    if arr.dtype == object:
        raise ValueError("data must be a numeric array, a scipy.sparse matrix or a pymf.Ratings")
    arr = np.ascontiguousarray(real_array(data, "the data"))
    if arr.ndim != 2:
        raise ValueError(f"a dense data matrix must be 2-D, got shape {arr.shape}")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"the data matrix is empty (shape {arr.shape})")
    if not np.all(np.isfinite(arr)):
        i, j = np.argwhere(~np.isfinite(arr))[0]
        raise ValueError(
            f"the data contain NaN or inf (first at [{i}, {j}]); for missing entries pass a "
            "pymf.Ratings or a scipy.sparse matrix of the observed ones")
    return arr


def observed_values(observed):
    return observed.values if isinstance(observed, Ratings) else observed.ravel()


def nonempty_values(observed):
    """The observed values; a ValueError when there are none (every model needs one)."""
    values = observed_values(observed)
    if values.size == 0:
        raise ValueError("the data has no observed entries")
    return values


def observed_shape(observed):
    return observed.shape
