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
    """

    def __init__(self, rows, cols, values, shape=None):
        rows = _as_index_array(rows, "rows")
        cols = _as_index_array(cols, "cols")
        values = np.asarray(values, dtype=np.float64).ravel()
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
        order = np.lexsort((cols, rows))
        rows, cols, values = rows[order], cols[order], values[order]
        if len(rows) > 1:
            dup = (rows[1:] == rows[:-1]) & (cols[1:] == cols[:-1])
            if dup.any():
                k = int(np.flatnonzero(dup)[0])
                raise ValueError(
                    f"duplicate entry (row {int(rows[k])}, col {int(cols[k])}): each entry may "
                    "be observed once")
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
        coo = matrix.tocoo()
        return cls(coo.row, coo.col, coo.data, shape=coo.shape)

    @classmethod
    def from_dense(cls, V):
        V = np.asarray(V, dtype=np.float64)
        rows, cols = np.indices(V.shape)
        return cls(rows.ravel(), cols.ravel(), V.ravel(), shape=V.shape)

    def split(self, test_fraction=0.2, seed=0):
        """A random (train, test) split of the entries with a fixed seed."""
        if not 0.0 < test_fraction < 1.0:
            raise ValueError("test_fraction must be in (0, 1)")
        rng = np.random.default_rng(seed)
        is_test = rng.random(self.nnz) < test_fraction
        train = Ratings(self.rows[~is_test], self.cols[~is_test], self.values[~is_test], self.shape)
        test = Ratings(self.rows[is_test], self.cols[is_test], self.values[is_test], self.shape)
        return train, test

    def to_dense(self, fill=np.nan):
        V = np.full(self.shape, fill, dtype=np.float64)
        V[self.rows, self.cols] = self.values
        return V


def _as_index_array(x, name):
    arr = np.asarray(x)
    if arr.ndim != 1:
        arr = arr.ravel()
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must be integer indices")
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
        if not isinstance(n, numbers.Integral) or n <= 0:
            raise ValueError(f"shape must hold two positive integers, got {shape!r}")
    return (int(n_rows), int(n_cols))


def as_observed(data):
    """Normalise user data to either a C-contiguous float64 2-D array or a Ratings."""
    if isinstance(data, Ratings):
        return data
    if hasattr(data, "tocoo") and hasattr(data, "nnz"):  # scipy.sparse, without importing it
        return Ratings.from_scipy(data)
    arr = np.asarray(data)
    if arr.dtype == object:
        raise ValueError("data must be a numeric array, a scipy.sparse matrix or a pymf.Ratings")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
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


def observed_shape(observed):
    return observed.shape
