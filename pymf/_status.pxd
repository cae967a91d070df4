from pymf._core cimport pymf_error

cdef int check(pymf_error *err) except -1
