"""Turns the C core's status codes into Python exceptions (the only place that does)."""
from pymf._core cimport (PYMF_EDIVERGED, PYMF_EINVAL, PYMF_ENOMEM, PYMF_ENUMERIC, PYMF_OK,
                         pymf_error)

from pymf.errors import DivergenceError


cdef int check(pymf_error *err) except -1:
    if err.status == PYMF_OK:
        return 0
    message = err.message.decode("utf-8", "replace")
    if err.status == PYMF_EINVAL:
        raise ValueError(message)
    if err.status == PYMF_ENOMEM:
        raise MemoryError(message)
    if err.status == PYMF_EDIVERGED:
        raise DivergenceError(message, iteration=int(err.iteration))
    raise RuntimeError(message)
