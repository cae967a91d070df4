from libc.stdint cimport int64_t

from pymf._core cimport pymf_blocked_data, pymf_grid


cdef class BlockedData:
    cdef pymf_grid grid
    cdef pymf_blocked_data data
    cdef bint ready
    cdef int _init_grid(self, int64_t n_rows, int64_t n_cols, int n_blocks, bint permute,
                        unsigned long seed) except -1
