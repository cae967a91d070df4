"""Bindings of core/src/tweedie.c: beta-divergence, Tweedie log-likelihood and gradients."""
import numpy as np

from libc.stdint cimport int64_t

from pymf._core cimport pymf_error, pymf_error_clear
from pymf._status cimport check
from pymf.nmf._blocks cimport BlockedData

MU_FLOOR = PYMF_MU_FLOOR


def beta_divergence(v, mu, double beta):
    """Element-wise d_beta(v || mu) (mu floored at MU_FLOOR for beta < 2)."""
    cdef double[::1] vf = np.ascontiguousarray(v, dtype=np.float64).ravel()
    cdef double[::1] muf = np.ascontiguousarray(mu, dtype=np.float64).ravel()
    if vf.shape[0] != muf.shape[0]:
        raise ValueError("v and mu must have the same number of entries")
    out = np.empty(vf.shape[0])
    cdef double[::1] o = out
    cdef Py_ssize_t e
    with nogil:
        for e in range(vf.shape[0]):
            o[e] = pymf_beta_divergence(vf[e], muf[e], beta)
    return out.reshape(np.shape(v))


def dlogp_dmu(v, mu, double beta, double phi=1.0):
    """Element-wise d/dmu log p(v | mu, phi, beta) = mu^(beta-2) (v - mu) / phi."""
    cdef double[::1] vf = np.ascontiguousarray(v, dtype=np.float64).ravel()
    cdef double[::1] muf = np.ascontiguousarray(mu, dtype=np.float64).ravel()
    if vf.shape[0] != muf.shape[0]:
        raise ValueError("v and mu must have the same number of entries")
    out = np.empty(vf.shape[0])
    cdef double[::1] o = out
    cdef double inv_phi = 1.0 / phi
    cdef Py_ssize_t e
    with nogil:
        for e in range(vf.shape[0]):
            o[e] = pymf_tweedie_dlogp_dmu(vf[e], muf[e], beta, inv_phi)
    return out.reshape(np.shape(v))


cdef pymf_tweedie _likelihood(int rank, double beta, double phi) except *:
    cdef pymf_tweedie lik
    cdef pymf_error err
    lik.rank = rank
    lik.beta = beta
    lik.phi = phi
    pymf_error_clear(&err)
    pymf_tweedie_check(&lik, &err)
    check(&err)
    return lik


def loglik(BlockedData data, const double[:, ::1] W, const double[:, ::1] Ht, double beta, double phi,
           int n_threads=0):
    """-sum d_beta / phi over the observed entries; W (I x K) and Ht (J x K) in grid order."""
    cdef pymf_tweedie lik = _likelihood(W.shape[1], beta, phi)
    _check_factor_shapes(data, W, Ht)
    cdef pymf_error err
    cdef double out = 0.0
    pymf_error_clear(&err)
    with nogil:
        pymf_tweedie_loglik(&lik, &data.data, &W[0, 0], &Ht[0, 0], n_threads, &out, &err)
    check(&err)
    return out


def gradient(BlockedData data, const double[:, ::1] W, const double[:, ::1] Ht, double beta, double phi,
             int n_threads=0):
    """Full likelihood gradient (gW, gHt) in grid order."""
    cdef pymf_tweedie lik = _likelihood(W.shape[1], beta, phi)
    _check_factor_shapes(data, W, Ht)
    gW = np.empty_like(np.asarray(W))
    gHt = np.empty_like(np.asarray(Ht))
    cdef double[:, ::1] gw = gW
    cdef double[:, ::1] gh = gHt
    cdef pymf_error err
    pymf_error_clear(&err)
    with nogil:
        pymf_tweedie_grad(&lik, &data.data, &W[0, 0], &Ht[0, 0], n_threads, &gw[0, 0],
                          &gh[0, 0], &err)
    check(&err)
    return gW, gHt


def predict_entries(const double[:, ::1] W, const double[:, ::1] Ht, const int64_t[::1] rows,
                    const int64_t[::1] cols):
    """<W[rows[e]], Ht[cols[e]]> for each entry (indices must be in range)."""
    if rows.shape[0] != cols.shape[0]:
        raise ValueError("rows and cols must have the same length")
    if W.shape[1] != Ht.shape[1]:
        raise ValueError("W and Ht must have the same number of columns (the rank)")
    out = np.empty(rows.shape[0])
    if rows.shape[0] == 0:
        return out
    cdef double[::1] o = out
    with nogil:
        pymf_predict_entries(&W[0, 0], &Ht[0, 0], W.shape[1], rows.shape[0], &rows[0], &cols[0],
                             &o[0])
    return out


cdef _check_factor_shapes(BlockedData data, const double[:, ::1] W, const double[:, ::1] Ht):
    if W.shape[0] != data.grid.n_rows or Ht.shape[0] != data.grid.n_cols:
        raise ValueError(f"W must have {data.grid.n_rows} rows and Ht {data.grid.n_cols} rows")
    if W.shape[1] != Ht.shape[1]:
        raise ValueError("W and Ht must have the same number of columns (the rank)")
