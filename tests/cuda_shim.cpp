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

extern "C" void shim_update_factors_f64(PYMF_UPDATE_FACTORS_PARAMS(double))
{
    const long long threads = (n_rows + n_cols) * ((rank + 3) / 4);
    launch((unsigned)((threads + 63) / 64), 64,
           [&] { psgld_update_factors_f64(PYMF_UPDATE_FACTORS_ARGS); });
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
    extern "C" void shim_launch_update_factors_##SUFFIX(unsigned grid_x, unsigned block_x,       \
                                                        PYMF_UPDATE_FACTORS_PARAMS(T))           \
    {                                                                                            \
        launch(grid_x, block_x,                                                                  \
               [&] { psgld_update_factors_##SUFFIX(PYMF_UPDATE_FACTORS_ARGS); });               \
    }

SHIM_LAUNCHERS(float, f32)
SHIM_LAUNCHERS(double, f64)
