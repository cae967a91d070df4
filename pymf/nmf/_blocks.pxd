# core/include/pymf/blocks.h (the block grid and the data laid out per block) and BlockedData.
from libc.stdint cimport int32_t, int64_t, uint32_t

from pymf._core cimport pymf_error, pymf_status


cdef extern from "pymf/blocks.h" nogil:
    ctypedef struct pymf_grid:
        int64_t n_rows
        int64_t n_cols
        int n_blocks
        int64_t *row_start
        int64_t *col_start
        int64_t *row_of
        int64_t *col_of
        int64_t *row_pos
        int64_t *col_pos

    ctypedef struct pymf_blocked_data:
        const pymf_grid *grid
        int is_dense
        double *V
        int64_t nnz
        int format
        int col_bits
        uint32_t *index
        int32_t *row_idx
        int32_t *col_idx
        float *vals_f32
        double *vals_f64
        int64_t *block_ptr
        int64_t n_observed

    pymf_status pymf_grid_init(pymf_grid *grid, int64_t n_rows, int64_t n_cols, int n_blocks,
                               int permute, unsigned long seed, pymf_error *err)
    void pymf_grid_free(pymf_grid *grid)
    pymf_status pymf_blocked_from_dense(pymf_blocked_data *data, const pymf_grid *grid,
                                        const double *V, pymf_error *err)
    pymf_status pymf_blocked_from_sparse(pymf_blocked_data *data, const pymf_grid *grid,
                                         int64_t nnz, const int64_t *rows, const int64_t *cols,
                                         const double *vals, int formats, pymf_error *err)
    void pymf_blocked_free(pymf_blocked_data *data)
    void pymf_blocked_entries(const pymf_blocked_data *data, int32_t *rows, int32_t *cols,
                              double *vals)
    void pymf_blocked_line_counts(const pymf_blocked_data *data, int64_t *row_counts,
                                  int64_t *col_counts)
    int64_t pymf_block_size(const pymf_blocked_data *data, int b, int c)
    int64_t pymf_part_size(const pymf_blocked_data *data, int part)

    enum:
        PYMF_ENTRY_PACKED
        PYMF_ENTRY_FLOAT

    ctypedef enum pymf_part_order:
        PYMF_PARTS_CYCLIC
        PYMF_PARTS_RANDOM


cdef class BlockedData:
    cdef pymf_grid grid
    cdef pymf_blocked_data data
    cdef bint ready
    cdef int _init_grid(self, int64_t n_rows, int64_t n_cols, int n_blocks, bint permute,
                        unsigned long seed) except -1
