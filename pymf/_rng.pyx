"""Bindings of the C core's shared random numbers (core/include/pymf/philox.h, rng.h): the
Philox Gaussians every Langevin-type sampler adds and the seeds of the GSL streams, for
the tests and references that reproduce a chain's draws."""
import numpy as np

from libc.stdint cimport uint32_t, uint64_t

from pymf._core cimport (PYMF_STREAM_H, PYMF_STREAM_W, pymf_noise_row, pymf_noise_rows,
                         pymf_philox4x32_10, pymf_stream_seed)


cdef extern from "pymf/philox.h" nogil:
    # declared here, not in pymf/_core.pxd: only these tests' binding uses it
    void pymf_box_muller(uint32_t a, uint32_t b, double *z0, double *z1)

STREAM_W = PYMF_STREAM_W
STREAM_H = PYMF_STREAM_H


def noise(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row, uint32_t n_rows,
          int rank, out=None):
    """The standard Gaussians the samplers add at iteration t to rows
    first_row .. first_row + n_rows - 1 of a Philox stream: NMF's W (STREAM_W) or H^T
    (STREAM_H), or another family's stream tag (the vectorised CPU generator the samplers
    use). out: a C-contiguous float64 (n_rows, rank) array to write them into (timings
    without a fresh array's page faults)."""
    if out is None:
        out = np.empty((n_rows, rank))
    elif out.shape != (n_rows, rank):
        raise ValueError(f"out must have shape ({n_rows}, {rank}), got {out.shape}")
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


def box_muller(a, b):
    """The two Gaussians (z0, z1) of the noise transform for each pair of 32-bit words
    (a[i], b[i]) (pymf_box_muller, the per-entry form): tests of its accuracy on any words,
    including the extreme ones Philox rarely produces."""
    cdef uint32_t[::1] words_a = np.ascontiguousarray(a, dtype=np.uint32)
    cdef uint32_t[::1] words_b = np.ascontiguousarray(b, dtype=np.uint32)
    if words_a.shape[0] != words_b.shape[0]:
        raise ValueError("a and b must have the same length")
    z0, z1 = np.empty(words_a.shape[0]), np.empty(words_a.shape[0])
    cdef double[::1] out0 = z0
    cdef double[::1] out1 = z1
    cdef Py_ssize_t i
    with nogil:
        for i in range(words_a.shape[0]):
            pymf_box_muller(words_a[i], words_b[i], &out0[i], &out1[i])
    return z0, z1


def stream_seed(uint64_t base, uint64_t t):
    """The GSL seed of iteration t of a stream (see core/include/pymf/rng.h)."""
    return int(pymf_stream_seed(base, t))
