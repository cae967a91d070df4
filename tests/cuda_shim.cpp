// Runs the element-wise kernels of cuda/psgld.cu on the CPU: CUDA's keywords are defined
// away and a launch is a loop over the grid (threads of a block run one after the other,
// which is exact for kernels without __syncthreads). Built and driven by tests/test_cuda.py.
#include <cstdint>

struct pymf_dim3 {
    unsigned x, y, z;
};
static pymf_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __syncthreads()
static int atomicOr(int *address, int value)
{
    const int old = *address;
    *address = old | value;
    return old;
}

#include "psgld.cu"

template <typename Kernel>
static void launch(unsigned grid_x, unsigned block_x, Kernel kernel)
{
    gridDim = {grid_x, 1, 1};
    blockDim = {block_x, 1, 1};
    for (unsigned b = 0; b < grid_x; ++b)
        for (unsigned t = 0; t < block_x; ++t) {
            blockIdx = {b, 0, 0};
            threadIdx = {t, 0, 0};
            kernel();
        }
}

extern "C" void shim_factors_sparse_f64(const int *rows, const int *cols, const double *vals,
                                        const long long *entries, long long n, const double *W,
                                        const double *Ht, double *G, int rank, double beta,
                                        double coef)
{
    launch((unsigned)((n + 63) / 64), 64, [&] {
        psgld_factors_sparse_f64(rows, cols, vals, entries, n, W, Ht, G, rank, beta, coef);
    });
}

extern "C" void shim_update_rows_f64(double *X_next, const double *X, const double *Y,
                                     const double *G, const long long *row_first,
                                     const long long *row_count, const long long *g_offset,
                                     long long g_stride, const long long *sparse_terms,
                                     const int *sparse_partner, long long n_rows, int rank,
                                     double eps, double lam, int exponential,
                                     unsigned long long seed, unsigned int stream,
                                     unsigned long long t, int *diverged)
{
    const long long threads = n_rows * ((rank + 3) / 4);
    launch((unsigned)((threads + 63) / 64), 64, [&] {
        psgld_update_rows_f64(X_next, X, Y, G, row_first, row_count, g_offset, g_stride,
                              sparse_terms, sparse_partner, 0, n_rows, rank, eps, lam,
                              exponential, seed, stream, t, diverged);
    });
}

// The launches of pymf.gpu.CudaPSGLDChain as they are: the grid and block size it chose and
// the kernel's own parameter list, so that the CPU tests drive the GPU chain's iteration
// itself (tests/test_cuda.py, HostShimDevice).
#define SHIM_LAUNCHERS(T, SUFFIX)                                                                \
    extern "C" void shim_launch_factors_sparse_##SUFFIX(                                         \
        unsigned grid_x, unsigned block_x, const int *rows, const int *cols, const T *vals,      \
        const long long *entries, long long n, const T *W, const T *Ht, T *G, int rank, T beta,  \
        T coef)                                                                                  \
    {                                                                                            \
        launch(grid_x, block_x, [&] {                                                            \
            psgld_factors_sparse_##SUFFIX(rows, cols, vals, entries, n, W, Ht, G, rank, beta,    \
                                          coef);                                                 \
        });                                                                                      \
    }                                                                                            \
    extern "C" void shim_launch_update_rows_##SUFFIX(                                            \
        unsigned grid_x, unsigned block_x, T *X_next, const T *X, const T *Y, const T *G,        \
        const long long *row_first, const long long *row_count, const long long *g_offset,       \
        long long g_stride, const long long *sparse_terms, const int *sparse_partner,            \
        long long first_row, long long n_rows, int rank, double eps, double lam,                 \
        int exponential, unsigned long long seed, unsigned int stream, unsigned long long t,     \
        int *diverged)                                                                           \
    {                                                                                            \
        launch(grid_x, block_x, [&] {                                                            \
            psgld_update_rows_##SUFFIX(X_next, X, Y, G, row_first, row_count, g_offset,          \
                                       g_stride, sparse_terms, sparse_partner, first_row,        \
                                       n_rows, rank, eps, lam, exponential, seed, stream, t,     \
                                       diverged);                                                \
        });                                                                                      \
    }

SHIM_LAUNCHERS(float, f32)
SHIM_LAUNCHERS(double, f64)
