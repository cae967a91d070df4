"""Bindings of the C core's shared random numbers (core/include/pymf/philox.h, rng.h): the
Philox Gaussians every Langevin-type sampler adds and the seeds of the GSL streams, for
the tests and references that reproduce a chain's draws."""
import numpy as np

from libc.stdint cimport uint32_t, uint64_t

from pymf._core cimport (PYMF_STREAM_H, PYMF_STREAM_W, pymf_noise_row, pymf_noise_rows,
                         pymf_philox4x32_10, pymf_stream_seed)

STREAM_W = PYMF_STREAM_W
STREAM_H = PYMF_STREAM_H


def noise(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row, uint32_t n_rows,
          int rank):
    """The standard Gaussians the samplers add at iteration t to rows
    first_row .. first_row + n_rows - 1 of a Philox stream: NMF's W (STREAM_W) or H^T
    (STREAM_H), or another family's stream tag (the vectorised CPU generator the samplers
    use)."""
    out = np.empty((n_rows, rank))
    cdef double[:, ::1] o = out
    if n_rows > 0:
        with nogil:
            pymf_noise_rows(seed, stream, t, first_row, n_rows, rank, &o[0, 0])
    return out


def noise_scalar(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row,
                 uint32_t n_rows, int rank):
    """The same Gaussians, one Philox call at a time (the per-entry path the GPU kernels
    use); equal to noise() bit for bit."""
    out = np.empty((n_rows, rank))
    cdef double[:, ::1] o = out
    cdef uint32_t r
    for r in range(n_rows):
        pymf_noise_row(seed, stream, t, first_row + r, rank, &o[r, 0])
    return out


def philox4x32_10(counter, key):
    """Philox4x32-10 of a 4-word counter and a 2-word key (known-answer tests)."""
    cdef uint32_t c[4]
    cdef uint32_t k[2]
    cdef uint32_t o[4]
    for i in range(4):
        c[i] = counter[i]
    k[0] = key[0]
    k[1] = key[1]
    pymf_philox4x32_10(c, k, o)
    return (o[0], o[1], o[2], o[3])


def stream_seed(uint64_t base, uint64_t t):
    """The GSL seed of iteration t of a stream (see core/include/pymf/rng.h)."""
    return int(pymf_stream_seed(base, t))
