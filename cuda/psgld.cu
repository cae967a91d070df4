/*
 * cuda/psgld.cu: the PSGLD iteration on the GPU, mirroring core/src/sgld.c.
 *
 * The per-entry maths (beta-divergence gradient, the mu floor, Philox4x32-10 and the
 * Box-Muller transform) comes from the C core's own headers, compiled here by nvcc
 * (PYMF_HD = __host__ __device__): there is no second copy of any formula. The noise of
 * entry (row, k) at iteration t is the same Philox draw as on the CPU, so a GPU chain
 * follows the CPU chain to floating-point tolerance.
 *
 * One iteration (part p, blocks (b, (b + p) mod B)), all state resident on the device:
 *   1. gradient factors G = scale * d/dmu log p(v | mu) of the part's entries:
 *        dense:  psgld_factors_dense_*   (shared-memory tiles of W and H^T for mu = W H)
 *        sparse: psgld_factors_sparse_*  (one thread per entry)
 *   2. W rows and H columns, one launch (psgld_update_factors_*): one thread per (row of W
 *      or of H^T, group of 4 factors). A W row's gradient is sum_j G_ij h_j over its block's
 *      entries (dense: the block's columns; sparse: the row's entries, CSR order); an H
 *      column's reads G transposed (dense) or through the block's column-major permutation
 *      (sparse); then prior, Philox noise, mirroring. No atomics anywhere but the divergence
 *      flag. Two launches per iteration: the updates need every G of the part.
 * Kernels are templated on the real type and exported as extern "C" *_f32 / *_f64.
 */
#include "pymf/common.h"
#include "pymf/philox.h"
#include "pymf/tweedie.h"

#define PYMF_TILE 16

/* mu = <w, h>: in double, exactly pymf_dot (the C core's four partial sums), so that a
 * double-precision GPU chain computes the sparse gradient with the CPU's very operations;
 * in float, the same pattern in float. */
__device__ __forceinline__ double entry_dot(const double *a, const double *b, int n)
{
    return pymf_dot(a, b, n);
}

__device__ __forceinline__ float entry_dot(const float *a, const float *b, int n)
{
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
    int k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += a[k] * b[k];
        s1 += a[k + 1] * b[k + 1];
        s2 += a[k + 2] * b[k + 2];
        s3 += a[k + 3] * b[k + 3];
    }
    for (; k < n; ++k)
        s0 += a[k] * b[k];
    return (s0 + s1) + (s2 + s3);
}

/* ---- 1. gradient factors -------------------------------------------------------------- */

/* Dense: for each block b of the part, G[i, jj] for rows i of piece b and the block's
 * columns j = col_start[c] + jj, c = (b + part) mod B. G is n_rows x max_width, row-major.
 * grid: (ceil(max_width / TILE), ceil(max_rows_of_a_piece / TILE), B), block: TILE x TILE. */
template <typename T>
__device__ void factors_dense(const T *V, const T *W, const T *Ht, T *G, const long long *row_start,
                              const long long *col_start, int n_blocks, int part, long long n_cols,
                              int rank, long long max_width, T beta, T coef)
{
    __shared__ T w_tile[PYMF_TILE][PYMF_TILE];
    __shared__ T h_tile[PYMF_TILE][PYMF_TILE + 1];
    const int b = blockIdx.z;
    const int c = (b + part) % n_blocks;
    const long long i = row_start[b] + (long long)blockIdx.y * PYMF_TILE + threadIdx.y;
    const long long jj = (long long)blockIdx.x * PYMF_TILE + threadIdx.x;
    const long long j = col_start[c] + jj;
    const bool row_ok = i < row_start[b + 1];
    const bool col_ok = j < col_start[c + 1];
    /* the H^T rows this tile needs, loaded by the tile's threadIdx.y lanes */
    const long long j_load = col_start[c] + (long long)blockIdx.x * PYMF_TILE + threadIdx.y;
    T mu = 0;
    for (int k0 = 0; k0 < rank; k0 += PYMF_TILE) {
        const int k = k0 + threadIdx.x;
        w_tile[threadIdx.y][threadIdx.x] = (row_ok && k < rank) ? W[i * rank + k] : T(0);
        h_tile[threadIdx.y][threadIdx.x] =
            (j_load < col_start[c + 1] && k < rank) ? Ht[j_load * rank + k] : T(0);
        __syncthreads();
        for (int kk = 0; kk < PYMF_TILE; ++kk)
            mu += w_tile[threadIdx.y][kk] * h_tile[threadIdx.x][kk];
        __syncthreads();
    }
    if (row_ok && col_ok) {
        const double floored = pymf_tweedie_floor_mu((double)mu, (double)beta);
        const double g = pymf_tweedie_dlogp_dmu_floored((double)V[i * n_cols + j], floored,
                                                        (double)beta, 1.0);
        G[i * max_width + jj] = (T)((double)coef * g);
    }
}

/* Sparse: entries e of the part's blocks listed in `entries` (n of them); G[e] per entry. */
template <typename T>
__device__ void factors_sparse(const int *rows, const int *cols, const T *vals,
                               const long long *entries, long long n, const T *W, const T *Ht,
                               T *G, int rank, T beta, T coef)
{
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= n)
        return;
    const long long e = entries[idx];
    const T *w = W + (long long)rows[e] * rank;
    const T *h = Ht + (long long)cols[e] * rank;
    const T mu = entry_dot(w, h, rank);
    const double floored = pymf_tweedie_floor_mu((double)mu, (double)beta);
    G[e] = (T)((double)coef *
               pymf_tweedie_dlogp_dmu_floored((double)vals[e], floored, (double)beta, 1.0));
}

/* ---- 2. the Langevin move of factor rows ---------------------------------------------- */

/* Thread idx of one factor matrix X: (row r of X, group of 4 factors). Row r's likelihood
 * gradient is
 *   sum over its n_terms partners q of G[term] * Y[partner, k]
 * where term/partner come from a strided dense layout (dense blocks) or index lists
 * (sparse blocks), described by:
 *   dense:  term = g_row_offset(r) + q * g_stride_q, partner = partner_start(r) + q
 *   sparse: term = list[ptr[r] + q], partner = partner_of[term]
 * The caller passes, per row, the block-specific starts (pymf.gpu.part_layout). */
template <typename T>
__device__ void update_rows(long long idx, T *X_next, const T *X, const T *Y, const T *G,
                            const long long *row_first, const long long *row_count,
                            const long long *g_offset, long long g_stride,
                            const long long *sparse_terms, const int *sparse_partner,
                            long long n_rows, int rank, double eps, double lam, int exponential,
                            unsigned long long seed, unsigned int stream, unsigned long long t,
                            int *diverged)
{
    const int groups = (rank + 3) / 4;
    if (idx >= n_rows * groups)
        return;
    const long long r = idx / groups;
    const int group = (int)(idx % groups);
    double grad[4] = {0.0, 0.0, 0.0, 0.0};
    const long long local = r;
    const long long count = row_count[local];
    for (long long q = 0; q < count; ++q) {
        long long term, partner;
        if (sparse_terms != NULL) {
            term = sparse_terms[row_first[local] + q];
            partner = sparse_partner[term];
        } else {
            term = g_offset[local] + q * g_stride;
            partner = row_first[local] + q;
        }
        const double g = (double)G[term];
        for (int lane = 0; lane < 4; ++lane) {
            const int k = 4 * group + lane;
            if (k < rank)
                grad[lane] += g * (double)Y[partner * rank + k];
        }
    }
    double noise[4];
    pymf_noise_gauss4(seed, stream, t, (unsigned int)r, (unsigned int)group, noise);
    const double noise_sd = sqrt(2.0 * eps);
    for (int lane = 0; lane < 4; ++lane) {
        const int k = 4 * group + lane;
        if (k >= rank)
            break;
        const double x0 = (double)X[r * rank + k];
        const double prior = exponential ? -lam : -lam * x0;
        double x = x0 + eps * (grad[lane] + prior) + noise_sd * noise[lane];
        if (exponential)
            x = fabs(x);
        if (!isfinite(x))
            atomicOr(diverged, 1);
        X_next[r * rank + k] = (T)x;
    }
}

/* ---- exported entry points -------------------------------------------------------------- */

/* The parameters of psgld_update_factors_*, and the same names as arguments (the CPU shim of
 * tests/cuda_shim.cpp forwards them). */
#define PYMF_UPDATE_FACTORS_PARAMS(T)                                                            \
    T *W_next, const T *W, T *Ht_next, const T *Ht, const T *G, const long long *w_first,       \
        const long long *w_count, const long long *w_offset, long long w_stride,                \
        const long long *w_terms, const int *w_partner, long long n_rows, double lam_w,         \
        const long long *h_first, const long long *h_count, const long long *h_offset,          \
        long long h_stride, const long long *h_terms, const int *h_partner, long long n_cols,   \
        double lam_h, int rank, double eps, int exponential, unsigned long long seed,           \
        unsigned long long t, int *diverged
#define PYMF_UPDATE_FACTORS_ARGS                                                                 \
    W_next, W, Ht_next, Ht, G, w_first, w_count, w_offset, w_stride, w_terms, w_partner, n_rows, \
        lam_w, h_first, h_count, h_offset, h_stride, h_terms, h_partner, n_cols, lam_h, rank,    \
        eps, exponential, seed, t, diverged

#define PYMF_EXPORT_KERNELS(T, SUFFIX)                                                          \
    extern "C" __global__ void psgld_factors_dense_##SUFFIX(                                    \
        const T *V, const T *W, const T *Ht, T *G, const long long *row_start,                  \
        const long long *col_start, int n_blocks, int part, long long n_cols, int rank,         \
        long long max_width, T beta, T coef)                                                    \
    {                                                                                           \
        factors_dense<T>(V, W, Ht, G, row_start, col_start, n_blocks, part, n_cols, rank,       \
                         max_width, beta, coef);                                                \
    }                                                                                           \
    extern "C" __global__ void psgld_factors_sparse_##SUFFIX(                                   \
        const int *rows, const int *cols, const T *vals, const long long *entries, long long n, \
        const T *W, const T *Ht, T *G, int rank, T beta, T coef)                                \
    {                                                                                           \
        factors_sparse<T>(rows, cols, vals, entries, n, W, Ht, G, rank, beta, coef);            \
    }                                                                                           \
    extern "C" __global__ void psgld_update_factors_##SUFFIX(PYMF_UPDATE_FACTORS_PARAMS(T))    \
    {                                                                                           \
        const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;                 \
        const long long w_threads = n_rows * ((rank + 3) / 4);                                  \
        if (idx < w_threads)                                                                    \
            update_rows<T>(idx, W_next, W, Ht, G, w_first, w_count, w_offset, w_stride,         \
                           w_terms, w_partner, n_rows, rank, eps, lam_w, exponential, seed,     \
                           PYMF_STREAM_W, t, diverged);                                         \
        else                                                                                    \
            update_rows<T>(idx - w_threads, Ht_next, Ht, W, G, h_first, h_count, h_offset,      \
                           h_stride, h_terms, h_partner, n_cols, rank, eps, lam_h, exponential, \
                           seed, PYMF_STREAM_H, t, diverged);                                   \
    }

PYMF_EXPORT_KERNELS(float, f32)
PYMF_EXPORT_KERNELS(double, f64)
