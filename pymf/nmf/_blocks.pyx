"""Bindings of core/src/blocks.c: the B x B block grid and the data laid out per block."""
import numpy as np

cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t

from pymf._core cimport pymf_error, pymf_error_clear
from pymf._status cimport check

cnp.import_array()


cdef class BlockedData:
    """Observed data in the grid order of a B x B block grid (validated input only).

    Build with :meth:`from_dense` or :meth:`from_sparse`; the Python layer
    (``pymf.data``) validates shapes, values and indices before calling them.
    """

    def __cinit__(self):
        self.ready = False

    def __dealloc__(self):
        if self.ready:
            pymf_blocked_free(&self.data)
        pymf_grid_free(&self.grid)

    cdef int _init_grid(self, int64_t n_rows, int64_t n_cols, int n_blocks, bint permute,
                        unsigned long seed) except -1:
        cdef pymf_error err
        pymf_error_clear(&err)
        pymf_grid_init(&self.grid, n_rows, n_cols, n_blocks, permute, seed, &err)
        return check(&err)

    @staticmethod
    def from_dense(const double[:, ::1] V, int n_blocks, bint permute=False, unsigned long seed=0):
        cdef BlockedData self = BlockedData.__new__(BlockedData)
        cdef pymf_error err
        self._init_grid(V.shape[0], V.shape[1], n_blocks, permute, seed)
        pymf_error_clear(&err)
        with nogil:
            pymf_blocked_from_dense(&self.data, &self.grid, &V[0, 0], &err)
        check(&err)
        self.ready = True
        return self

    @staticmethod
    def from_sparse(const int64_t[::1] rows, const int64_t[::1] cols, const double[::1] vals, shape,
                    int n_blocks, bint permute=False, unsigned long seed=0,
                    _compact=("packed", "float32")):
        """The entries laid out in the most compact lossless format (entry_format). Only
        tests pass `_compact`: the compact formats the layout may use (a subset of
        ("packed", "float32")), to run the same data in a wider format."""
        cdef BlockedData self = BlockedData.__new__(BlockedData)
        cdef pymf_error err
        if not set(_compact) <= {"packed", "float32"}:
            raise ValueError(f"_compact takes 'packed' and 'float32', not {_compact!r}")
        cdef int formats = ((PYMF_ENTRY_PACKED if "packed" in _compact else 0) |
                            (PYMF_ENTRY_FLOAT if "float32" in _compact else 0))
        cdef int64_t nnz = rows.shape[0]
        if cols.shape[0] != nnz or vals.shape[0] != nnz:
            raise ValueError("rows, cols and vals must have the same length")
        self._init_grid(shape[0], shape[1], n_blocks, permute, seed)
        cdef const int64_t *rows_ptr = &rows[0] if nnz > 0 else NULL
        cdef const int64_t *cols_ptr = &cols[0] if nnz > 0 else NULL
        cdef const double *vals_ptr = &vals[0] if nnz > 0 else NULL
        pymf_error_clear(&err)
        with nogil:
            pymf_blocked_from_sparse(&self.data, &self.grid, nnz, rows_ptr, cols_ptr, vals_ptr,
                                     formats, &err)
        check(&err)
        self.ready = True
        return self

    @property
    def shape(self):
        return (int(self.grid.n_rows), int(self.grid.n_cols))

    @property
    def n_blocks(self):
        return int(self.grid.n_blocks)

    @property
    def is_dense(self):
        return bool(self.data.is_dense)

    @property
    def n_observed(self):
        return int(self.data.n_observed)

    @property
    def row_of(self):
        """Grid position -> original row."""
        return np.asarray(<int64_t[:self.grid.n_rows]> self.grid.row_of).copy()

    @property
    def col_of(self):
        return np.asarray(<int64_t[:self.grid.n_cols]> self.grid.col_of).copy()

    @property
    def row_start(self):
        return np.asarray(<int64_t[:self.grid.n_blocks + 1]> self.grid.row_start).copy()

    @property
    def col_start(self):
        return np.asarray(<int64_t[:self.grid.n_blocks + 1]> self.grid.col_start).copy()

    def block_sizes(self):
        """(B, B) array: number of observed entries in block (b, c)."""
        cdef int B = self.grid.n_blocks
        out = np.empty((B, B), dtype=np.int64)
        for b in range(B):
            for c in range(B):
                out[b, c] = pymf_block_size(&self.data, b, c)
        return out

    def part_sizes(self):
        """|Pi_p| for the B parts p = {(b, (b + p) mod B)}."""
        return np.array([pymf_part_size(&self.data, p) for p in range(self.grid.n_blocks)],
                        dtype=np.int64)

    @property
    def entry_format(self):
        """How the sparse entries are stored, as (index, values): index "packed" (one uint32
        an entry, grid row and column side by side: when their bits add up to at most 32)
        or "int32" (two int32 arrays), values "float32" (when every value is exactly a
        float32) or "float64". None for dense data. Both choices are lossless."""
        if self.data.is_dense:
            return None
        return ("packed" if self.data.format & PYMF_ENTRY_PACKED else "int32",
                "float32" if self.data.format & PYMF_ENTRY_FLOAT else "float64")

    @property
    def entry_bytes(self):
        """Bytes a sparse entry takes in the layout (8 to 16); None for dense data."""
        if self.data.is_dense:
            return None
        return ((4 if self.data.format & PYMF_ENTRY_PACKED else 8) +
                (4 if self.data.format & PYMF_ENTRY_FLOAT else 8))

    def line_counts(self):
        """(per grid row, per grid column): the number of observed entries of each row and
        column of the grid (int64), counted without copying the entries."""
        cdef int64_t I = self.grid.n_rows, J = self.grid.n_cols
        if self.data.is_dense:
            return np.full(I, J, dtype=np.int64), np.full(J, I, dtype=np.int64)
        cdef cnp.ndarray[int64_t, ndim=1] row_counts = np.zeros(I, dtype=np.int64)
        cdef cnp.ndarray[int64_t, ndim=1] col_counts = np.zeros(J, dtype=np.int64)
        if self.data.nnz > 0:
            with nogil:
                pymf_blocked_line_counts(&self.data, <int64_t *> row_counts.data,
                                         <int64_t *> col_counts.data)
        return row_counts, col_counts

    def sparse_entries(self):
        """(rows, cols, vals) in grid order and block layout: int32, int32, float64 arrays
        decoded from whatever format the layout stores (copies), for tests and the GPU."""
        if self.data.is_dense:
            raise ValueError("dense data has no entry list")
        cdef int64_t n = self.data.nnz
        cdef cnp.ndarray[cnp.int32_t, ndim=1] rows = np.empty(n, dtype=np.int32)
        cdef cnp.ndarray[cnp.int32_t, ndim=1] cols = np.empty(n, dtype=np.int32)
        cdef cnp.ndarray[double, ndim=1] vals = np.empty(n, dtype=np.float64)
        if n > 0:
            with nogil:
                pymf_blocked_entries(&self.data, <int32_t *> rows.data, <int32_t *> cols.data,
                                     <double *> vals.data)
        return rows, cols, vals

    def dense_values(self):
        """V in grid order (a copy), for tests."""
        if not self.data.is_dense:
            raise ValueError("sparse data has no dense matrix")
        return np.asarray(<double[:self.grid.n_rows * self.grid.n_cols]> self.data.V).reshape(
            self.grid.n_rows, self.grid.n_cols).copy()
