# cython: language_level=3, boundscheck=False, wraparound=False
"""The C core's small dense eigenvalue helper (core/include/pymf/eigen.h) for the per-row
step bounds (pymf.engine.autostep.diag_and_rho, pymf.bpmf.kernel.row_curvatures)."""
import numpy as np

from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc


cdef extern from "pymf/eigen.h" nogil:
    int64_t PYMF_LARGEST_EIGENVALUE_WORK(int n)
    double pymf_largest_eigenvalue(int n, const double *A, double *work)


# Above this size LAPACK's blocked reduction, behind NumPy's eigvalsh, is faster than the C
# core's unblocked one although it computes every eigenvalue (crossover at n = 130 to 140 on
# an AMD EPYC, one thread: 584 against 620 us at n = 128, 876 against 804 us at n = 144).
# The choice depends on n alone, so it is the same on every machine.
LAPACK_ABOVE = 128


def largest_eigenvalues(matrices):
    """The largest eigenvalue of each symmetric matrix of a stack (m, n, n) of float64, as
    an array (m): the last column of np.linalg.eigvalsh(matrices), to a few units of
    rounding of each matrix's largest absolute row sum (Householder and bisection in C,
    without the GIL: 2-3x faster than NumPy's full decomposition at n = 11 to 32). Both
    triangles are read: give symmetric matrices. For n > LAPACK_ABOVE it is NumPy's own
    value (which reads the lower triangle)."""
    stack = np.ascontiguousarray(matrices, dtype=np.float64)
    if stack.ndim != 3 or stack.shape[1] != stack.shape[2] or stack.shape[1] < 1:
        raise ValueError(f"largest_eigenvalues: a stack of square matrices (m, n, n) with "
                         f"n >= 1 is needed, got shape {stack.shape}")
    if stack.shape[1] > LAPACK_ABOVE:
        return np.linalg.eigvalsh(stack)[:, -1] if len(stack) else np.empty(0)
    cdef int64_t m = stack.shape[0], index
    cdef int n = stack.shape[1]
    out = np.empty(m)
    if m == 0:
        return out
    cdef const double[:, :, ::1] A = stack
    cdef double[::1] result = out
    cdef double *work = <double *>malloc(PYMF_LARGEST_EIGENVALUE_WORK(n) * sizeof(double))
    if work == NULL:
        raise MemoryError("largest_eigenvalues: no memory for a matrix's work space")
    try:
        with nogil:
            for index in range(m):
                result[index] = pymf_largest_eigenvalue(n, &A[index, 0, 0], work)
    finally:
        free(work)
    return out
