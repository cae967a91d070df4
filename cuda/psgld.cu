/*
 * cuda/psgld.cu: the PSGLD iteration on the GPU, mirroring core/src/langevin.c.
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
 * Or, where the blocks fit in shared memory, a chunk of iterations in one launch
 * (psgld_ring_dense_*, psgld_ring_sparse_*, section 3): the same maths per iteration.
 * Kernels are templated on the real type and exported as extern "C" *_f32 / *_f64.
 */
#include "pymf/common.h"
#include "pymf/linalg.h"
#include "pymf/philox.h"
#include "pymf/tweedie.h"

#define PYMF_TILE 16

/* mu = <w, h>: in double, exactly pymf_dot_fused (the C core's four partial sums, each term
 * one fused multiply-add), so that a double-precision GPU chain computes the sparse
 * gradient with the CPU's very operations; in float, the same pattern in float
 * (pymf_dot_float_fused). Both in pymf/linalg.h. entry_fma: the one fma of a term, in
 * either precision. */
__device__ __forceinline__ double entry_dot(const double *a, const double *b, int n)
{
    return pymf_dot_fused(a, b, n);
}

__device__ __forceinline__ float entry_dot(const float *a, const float *b, int n)
{
    return pymf_dot_float_fused(a, b, n);
}

__device__ __forceinline__ double entry_fma(double a, double b, double c)
{
    return fma(a, b, c);
}

__device__ __forceinline__ float entry_fma(float a, float b, float c)
{
    return fmaf(a, b, c);
}

/* ---- 1. gradient factors -------------------------------------------------------------- */

/* Dense: for each block b of the part, G[i, jj] for rows i of piece b and the block's
 * columns j = col_start[c] + jj, c = (b + part) mod B. G is n_rows x max_width, row-major.
 * grid: (ceil(max_rows_of_a_piece / TILE) * ceil(max_width / TILE), 1, B), block: TILE x TILE
 * (the tiles of a block flattened into grid.x, whose limit is 2^31 - 1, not 65535). */
template <typename T>
__device__ void factors_dense(const T *V, const T *W, const T *Ht, T *G, const long long *row_start,
                              const long long *col_start, int n_blocks, int part, long long n_cols,
                              int rank, long long max_width, T beta, T coef)
{
    __shared__ T w_tile[PYMF_TILE][PYMF_TILE];
    __shared__ T h_tile[PYMF_TILE][PYMF_TILE + 1];
    const int b = blockIdx.z;
    const int c = (b + part) % n_blocks;
    const long long col_tiles = (max_width + PYMF_TILE - 1) / PYMF_TILE;
    const long long tile_row = blockIdx.x / col_tiles, tile_col = blockIdx.x % col_tiles;
    const long long i = row_start[b] + tile_row * PYMF_TILE + threadIdx.y;
    const long long jj = tile_col * PYMF_TILE + threadIdx.x;
    const long long j = col_start[c] + jj;
    const bool row_ok = i < row_start[b + 1];
    const bool col_ok = j < col_start[c + 1];
    /* the H^T rows this tile needs, loaded by the tile's threadIdx.y lanes */
    const long long j_load = col_start[c] + tile_col * PYMF_TILE + threadIdx.y;
    /* mu in entry_dot's order: four partial sums over k mod 4, each term one fma, the tail
     * beyond the last whole group of four in the first; tiles are 16 wide, so a group of
     * four never straddles two tiles */
    T s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (int k0 = 0; k0 < rank; k0 += PYMF_TILE) {
        const int k = k0 + threadIdx.x;
        w_tile[threadIdx.y][threadIdx.x] = (row_ok && k < rank) ? W[i * rank + k] : T(0);
        h_tile[threadIdx.y][threadIdx.x] =
            (j_load < col_start[c + 1] && k < rank) ? Ht[j_load * rank + k] : T(0);
        __syncthreads();
        const T *w = w_tile[threadIdx.y], *h = h_tile[threadIdx.x];
        for (int kk = 0; kk < PYMF_TILE && k0 + kk < rank; kk += 4) {
            if (k0 + kk + 4 <= rank) {
                s0 = entry_fma(w[kk], h[kk], s0);
                s1 = entry_fma(w[kk + 1], h[kk + 1], s1);
                s2 = entry_fma(w[kk + 2], h[kk + 2], s2);
                s3 = entry_fma(w[kk + 3], h[kk + 3], s3);
            } else {
                for (int q = kk; k0 + q < rank; ++q)
                    s0 = entry_fma(w[q], h[q], s0);
            }
        }
        __syncthreads();
    }
    const T mu = (s0 + s1) + (s2 + s3);
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

/* The Langevin move of the n (<= 4) factors k = 4 group + lane of one row, from their values
 * x0 and likelihood gradients: prior, Philox noise of (stream, t, row, group), mirroring.
 * factor: the n factors' step factors c (PSGLD's per-row bound: step eps c, noise
 * sqrt(2 eps) sqrt(c) z, as core/src/langevin.c moves them) or NULL for the plain move.
 * False if a new value is not finite once stored as T (a float overflows long before a
 * double). Shared by the update and ring kernels. */
template <typename T>
__device__ __forceinline__ bool langevin_move4(const double x0[4], const double grad[4], int n,
                                               double eps, double lam, int exponential,
                                               unsigned long long seed, unsigned int stream,
                                               unsigned long long t, unsigned int row,
                                               unsigned int group, const double *factor,
                                               double out[4])
{
    double noise[4];
    pymf_noise_gauss4(seed, stream, t, row, group, noise);
    const double noise_sd = sqrt(2.0 * eps);
    bool finite = true;
    for (int lane = 0; lane < n; ++lane) {
        const double prior = exponential ? -lam : -lam * x0[lane];
        double x;
        if (factor != NULL)
            x = x0[lane] + eps * factor[lane] * (grad[lane] + prior) +
                noise_sd * sqrt(factor[lane]) * noise[lane];
        else
            x = x0[lane] + eps * (grad[lane] + prior) + noise_sd * noise[lane];
        if (exponential)
            x = fabs(x);
        finite = finite && isfinite((double)(T)x);
        out[lane] = x;
    }
    return finite;
}

/* One term of a row's likelihood gradient, for the factors k = 4 group + lane it has:
 * grad[lane] = fma(g, y[k], grad[lane]), y being the partner's factor row (the C core's
 * pymf_axpy2_fused: one rounding per term). */
template <typename T>
__device__ __forceinline__ void add_term4(double grad[4], double g, const T *y, int rank, int group)
{
    for (int lane = 0; lane < 4; ++lane) {
        const int k = 4 * group + lane;
        if (k < rank)
            grad[lane] = fma(g, (double)y[k], grad[lane]);
    }
}

/* x0[lane] = x[4 group + lane] for the factors of the group that exist; returns how many. */
template <typename T>
__device__ __forceinline__ int load4(double x0[4], const T *x, int rank, int group)
{
    const int n = min(4, rank - 4 * group);
    for (int lane = 0; lane < n; ++lane)
        x0[lane] = (double)x[4 * group + lane];
    return n;
}

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
                            int *diverged, const double *step_factors)
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
        add_term4(grad, (double)G[term], Y + partner * rank, rank, group);
    }
    double x0[4], x[4];
    const int n = load4(x0, X + r * rank, rank, group);
    const double *factor = step_factors != NULL ? step_factors + r * rank + 4 * group : NULL;
    if (!langevin_move4<T>(x0, grad, n, eps, lam, exponential, seed, stream, t, (unsigned int)r,
                        (unsigned int)group, factor, x))
        atomicOr(diverged, 1);
    for (int lane = 0; lane < n; ++lane)
        X_next[r * rank + 4 * group + lane] = (T)x[lane];
}

/* ---- 3. many iterations in one launch: the ring kernels (blocks in shared memory) -------
 *
 * Launches cost microseconds, the work of one iteration on small blocks less than that, so
 * psgld_ring_*_* run a whole chunk of iterations in one launch. Thread block b owns grid
 * row b: W_b stays in shared memory for the launch; at iteration t it meets H's column block
 * c = (b + part) mod B. Within a part the blocks are disjoint, and H_c was last moved at t - 1
 * by thread block b + 1 (mod B): the ring of the MPI path. So b waits for one neighbour's
 * progress counter, never for the whole grid, and G never leaves shared memory.
 *
 * The maths is the update kernel's (same G, same sums in the same order, same Philox noise,
 * same mirroring), so both paths give the same chain: bit for bit in the CPU shim; on a GPU
 * the C sampler's to rounding (nvcc contracts a * b + c to FMAs, CUDA's log and sincos are
 * not glibc's in the last bit). Every loop is block-strided: the kernel is right for any
 * blockDim, which lets the CPU shim run it with one thread per block and one std::thread per
 * block (tests/cuda_shim.cpp), real concurrency through the same protocol.
 * All B blocks must be resident at once (pymf.gpu launches it only where B <= the number of
 * multiprocessors); a neighbour that has not come after wait_limit_ns (pymf.gpu: one second)
 * is reported through `stalled`, not a hang. */

/* 512 threads: a 32 x 32 block at rank 32 has 512 update items (rows x groups of 4), one
 * each. Measured on an H100 (1024 x 1024, K = 32, B = 32, float64): 14.8 us per iteration
 * with 256 threads, 12.0 with 512, 12.5 with 1024; the same chain bit for bit. */
#define PYMF_RING_THREADS 512

#ifndef PYMF_HOST_SHIM
__device__ __forceinline__ double *ring_shared_memory()
{
    extern __shared__ double pymf_ring_shared[]; /* double: aligned for both real types */
    return pymf_ring_shared;
}

__device__ __forceinline__ int ring_progress_of(const int *counter)
{
    return *(const volatile int *)counter;
}

/* Every thread's H stores are made visible at GPU scope before the counter moves: the
 * barrier orders them before thread 0's fence, and the fence before its store (the pattern
 * of a cooperative-groups grid barrier). */
__device__ __forceinline__ void ring_publish(int *counter, int value)
{
    __syncthreads();
    if (threadIdx.x == 0) {
        __threadfence();
        atomicExch(counter, value);
    }
}

__device__ __forceinline__ unsigned long long ring_clock_ns()
{
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    return now;
}

__device__ __forceinline__ void ring_pause()
{
#if __CUDA_ARCH__ >= 700
    __nanosleep(32);
#endif
}

/* H is written by other multiprocessors: read it from L2 (L1 is not coherent) */
template <typename T> __device__ __forceinline__ T ring_load(const T *x) { return __ldcg(x); }
template <typename T> __device__ __forceinline__ void ring_store(T *x, T v) { __stcg(x, v); }
#endif

/* Thread 0 polls the neighbour's counter until it reaches `needed`; false (in every thread)
 * if it has not within wait_limit_ns nanoseconds. */
__device__ __forceinline__ bool ring_wait(const int *counter, int needed,
                                          long long wait_limit_ns, int *stalled)
{
    int ok = 1;
    if (threadIdx.x == 0) {
        const unsigned long long start = ring_clock_ns();
        while (ring_progress_of(counter) < needed &&
               ring_clock_ns() - start < (unsigned long long)wait_limit_ns)
            ring_pause();
        ok = ring_progress_of(counter) >= needed;
        if (!ok)
            atomicOr(stalled, 1);
        __threadfence();
    }
    return __syncthreads_and(ok) != 0; /* a barrier that also tells every thread thread 0's ok */
}

/* The block (b, c) a ring thread block meets, as the ring loop sees it: its entries (for G),
 * and for each W row / H column the range of its terms (first, count) and each term's G slot
 * and partner (the H column or W row inside the block). */
template <typename T> struct RingDenseBlock {
    const T *V;
    long long n_cols, r0, c0;
    int height, width;
    __device__ void select(int b, int c, long long row0, long long col0, int h, int w)
    {
        r0 = row0, c0 = col0, height = h, width = w;
    }
    __device__ int n_entries() const { return height * width; }
    __device__ void entry(int x, int *ii, int *jj, double *v) const
    {
        *ii = x / width;
        *jj = x % width;
        *v = (double)V[(r0 + *ii) * n_cols + c0 + *jj];
    }
    __device__ int w_terms(int r, int *first) const { return *first = 0, width; }
    __device__ int h_terms(int col, int *first) const { return *first = 0, height; }
    __device__ void w_term(int r, int m, int *g, int *partner) const
    {
        *g = r * width + m;
        *partner = m;
    }
    __device__ void h_term(int col, int m, int *g, int *partner) const
    {
        *g = m * width + col;
        *partner = m;
    }
};

/* Sparse: the block's entries lo..hi-1 sorted by row (BlockedData's order) and, through
 * by_column, by column; a row's or a column's range is found by binary search. The terms
 * come in the update kernel's order, so both strategies do the same sums. */
template <typename T> struct RingSparseBlock {
    const int *rows, *cols;
    const T *vals;
    const long long *by_column;
    long long r0, c0, lo;
    int height, width, n;
    const long long *block_offsets; /* B * B + 1: block (b, c)'s entries start at [b * B + c] */
    int n_blocks;
    __device__ void select(int b, int c, long long row0, long long col0, int h, int w)
    {
        r0 = row0, c0 = col0, height = h, width = w;
        lo = block_offsets[(long long)b * n_blocks + c];
        n = (int)(block_offsets[(long long)b * n_blocks + c + 1] - lo);
    }
    __device__ int n_entries() const { return n; }
    __device__ void entry(int x, int *ii, int *jj, double *v) const
    {
        *ii = rows[lo + x] - (int)r0;
        *jj = cols[lo + x] - (int)c0;
        *v = (double)vals[lo + x];
    }
    /* first m in [0, n) with key(m) >= target */
    template <typename Key> __device__ int lower_bound(Key key, int target) const
    {
        int low = 0, high = n;
        while (low < high) {
            const int mid = (low + high) / 2;
            if (key(mid) < target)
                low = mid + 1;
            else
                high = mid;
        }
        return low;
    }
    __device__ int w_terms(int r, int *first) const
    {
        auto row = [this](int m) { return rows[lo + m]; };
        *first = lower_bound(row, (int)r0 + r);
        return lower_bound(row, (int)r0 + r + 1) - *first;
    }
    __device__ int h_terms(int col, int *first) const
    {
        auto column = [this](int m) { return cols[by_column[lo + m]]; };
        *first = lower_bound(column, (int)c0 + col);
        return lower_bound(column, (int)c0 + col + 1) - *first;
    }
    __device__ void w_term(int r, int m, int *g, int *partner) const
    {
        *g = m;
        *partner = cols[lo + m] - (int)c0;
    }
    __device__ void h_term(int col, int m, int *g, int *partner) const
    {
        const long long e = by_column[lo + m];
        *g = (int)(e - lo);
        *partner = rows[e] - (int)r0;
    }
};

/* The ring loop; `block.select(b, c)` points the policy at block (b, c). */
template <typename T, typename Block>
__device__ void ring_iterations(Block block, T *W, T *Ht, const long long *row_start,
                                const long long *col_start, int n_blocks, int rank,
                                long long max_height, long long max_width, T beta,
                                const double *coef_of_part, const double *eps, int n_iter,
                                unsigned long long t0, double lam_w, double lam_h,
                                int exponential, unsigned long long seed, int *progress,
                                long long wait_limit_ns, int *diverged, int *stalled,
                                const double *step_W, const double *step_Ht,
                                unsigned long long steps_from)
{
    const int b = blockIdx.x;
    const int neighbour = (b + 1) % n_blocks;
    const long long r0 = row_start[b];
    const int height = (int)(row_start[b + 1] - r0); /* a block fits in shared memory: int */
    const int groups = (rank + 3) / 4;
    /* factor rows in shared memory are rank + 1 long: threads reading different rows at the
     * same k then fall in different banks */
    const int ld = rank + 1;
    T *shared = (T *)ring_shared_memory();
    T *W_now = shared, *W_new = shared + max_height * ld;
    T *H_s = W_new + max_height * ld;
    T *G_s = H_s + max_width * ld;
    for (int x = threadIdx.x; x < height * rank; x += blockDim.x)
        W_now[(x / rank) * ld + x % rank] = W[r0 * rank + x];
    for (int i = 0; i < n_iter; ++i) {
        const unsigned long long t = t0 + (unsigned long long)i + 1;
        const int part = (int)((t - 1) % (unsigned long long)n_blocks);
        const int c = (b + part) % n_blocks;
        const long long c0 = col_start[c];
        const int width = (int)(col_start[c + 1] - c0);
        block.select(b, c, r0, c0, height, width);
        if (i > 0 && !ring_wait(&progress[neighbour], i, wait_limit_ns, stalled))
            break; /* W_b goes back as it was after iteration i - 1 */
        for (int x = threadIdx.x; x < width * rank; x += blockDim.x)
            H_s[(x / rank) * ld + x % rank] = ring_load(&Ht[c0 * rank + x]);
        __syncthreads();
        const double coef = coef_of_part[part];
        for (int x = threadIdx.x; x < block.n_entries(); x += blockDim.x) {
            int ii, jj;
            double v;
            block.entry(x, &ii, &jj, &v);
            const T mu = entry_dot(W_now + ii * ld, H_s + jj * ld, rank);
            const double floored = pymf_tweedie_floor_mu((double)mu, (double)beta);
            G_s[x] = (T)(coef * pymf_tweedie_dlogp_dmu_floored(v, floored, (double)beta, 1.0));
        }
        __syncthreads();
        /* the Langevin move, as update_rows: one item per (row of W_b or of H_c^T, 4 factors) */
        for (int x = threadIdx.x; x < (height + width) * groups; x += blockDim.x) {
            const bool is_w = x < height * groups;
            const int item = is_w ? x : x - height * groups;
            const int r = item / groups, group = item % groups;
            const T *partners = is_w ? H_s : W_now;
            const T *own = is_w ? W_now : H_s;
            int first;
            const int count = is_w ? block.w_terms(r, &first) : block.h_terms(r, &first);
            double grad[4] = {0.0, 0.0, 0.0, 0.0};
            for (int m = first; m < first + count; ++m) {
                int g_slot, partner;
                if (is_w)
                    block.w_term(r, m, &g_slot, &partner);
                else
                    block.h_term(r, m, &g_slot, &partner);
                add_term4(grad, (double)G_s[g_slot], partners + partner * ld, rank, group);
            }
            double x0[4], value[4];
            const int n = load4(x0, own + r * ld, rank, group);
            const long long row = is_w ? r0 + r : c0 + r;
            const double *factors = is_w ? step_W : step_Ht;
            const double *factor = factors != NULL && t >= steps_from
                                       ? factors + row * rank + 4 * group
                                       : NULL;
            if (!langevin_move4<T>(x0, grad, n, eps[i], is_w ? lam_w : lam_h, exponential, seed,
                                is_w ? PYMF_STREAM_W : PYMF_STREAM_H, t, (unsigned int)row,
                                (unsigned int)group, factor, value))
                atomicOr(&diverged[i], 1);
            for (int lane = 0; lane < n; ++lane) {
                if (is_w)
                    W_new[r * ld + 4 * group + lane] = (T)value[lane];
                else
                    ring_store(&Ht[(c0 + r) * rank + 4 * group + lane], (T)value[lane]);
            }
        }
        T *swap = W_now;
        W_now = W_new;
        W_new = swap;
        ring_publish(&progress[b], i + 1); /* H_c is ready for thread block b - 1 */
    }
    __syncthreads();
    for (int x = threadIdx.x; x < height * rank; x += blockDim.x)
        W[r0 * rank + x] = W_now[(x / rank) * ld + x % rank];
}

/* The ring kernels' common parameters (after their data), and the same names as arguments
 * (forwarded by the kernels and by the CPU shim of tests/cuda_shim.cpp). */
#define PYMF_RING_PARAMS(T)                                                                      \
    T *W, T *Ht, const long long *row_start, const long long *col_start, int n_blocks, int rank, \
        long long max_height, long long max_width, T beta, const double *coef_of_part,          \
        const double *eps, int n_iter, unsigned long long t0, double lam_w, double lam_h,       \
        int exponential, unsigned long long seed, int *progress, long long wait_limit_ns,       \
        int *diverged, int *stalled, const double *step_W, const double *step_Ht,               \
        unsigned long long steps_from
#define PYMF_RING_ARGS                                                                           \
    W, Ht, row_start, col_start, n_blocks, rank, max_height, max_width, beta, coef_of_part, eps, \
        n_iter, t0, lam_w, lam_h, exponential, seed, progress, wait_limit_ns, diverged,         \
        stalled, step_W, step_Ht, steps_from
#define PYMF_RING_DENSE_DATA(T) const T *V, long long n_cols
#define PYMF_RING_SPARSE_DATA(T)                                                                 \
    const int *rows, const int *cols, const T *vals, const long long *by_column,                \
        const long long *block_offsets

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
        unsigned long long t, int *diverged, const double *step_W, const double *step_Ht
#define PYMF_UPDATE_FACTORS_ARGS                                                                 \
    W_next, W, Ht_next, Ht, G, w_first, w_count, w_offset, w_stride, w_terms, w_partner, n_rows, \
        lam_w, h_first, h_count, h_offset, h_stride, h_terms, h_partner, n_cols, lam_h, rank,    \
        eps, exponential, seed, t, diverged, step_W, step_Ht

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
                           PYMF_STREAM_W, t, diverged, step_W);                                 \
        else                                                                                    \
            update_rows<T>(idx - w_threads, Ht_next, Ht, W, G, h_first, h_count, h_offset,      \
                           h_stride, h_terms, h_partner, n_cols, rank, eps, lam_h, exponential, \
                           seed, PYMF_STREAM_H, t, diverged, step_Ht);                          \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(PYMF_RING_THREADS)                             \
        psgld_ring_dense_##SUFFIX(PYMF_RING_DENSE_DATA(T), PYMF_RING_PARAMS(T))                 \
    {                                                                                           \
        RingDenseBlock<T> block = {V, n_cols, 0, 0, 0, 0};                                      \
        ring_iterations<T>(block, PYMF_RING_ARGS);                                              \
    }                                                                                           \
    extern "C" __global__ void __launch_bounds__(PYMF_RING_THREADS)                             \
        psgld_ring_sparse_##SUFFIX(PYMF_RING_SPARSE_DATA(T), PYMF_RING_PARAMS(T))               \
    {                                                                                           \
        RingSparseBlock<T> block = {rows, cols, vals, by_column, 0, 0, 0, 0, 0, 0,              \
                                    block_offsets, n_blocks};                                   \
        ring_iterations<T>(block, PYMF_RING_ARGS);                                              \
    }

PYMF_EXPORT_KERNELS(float, f32)
PYMF_EXPORT_KERNELS(double, f64)
