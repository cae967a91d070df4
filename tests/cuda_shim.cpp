// Runs the kernels of cuda/psgld.cu on the CPU: CUDA's keywords are defined away and a
// launch is a loop over the grid (threads of a block run one after the other, which is exact
// for kernels without __syncthreads). The ring kernel's loops are block-strided, so it runs
// with one thread per block, each block on its own std::thread: its blocks really do wait
// for one another through the progress counters, as on the GPU. Built and driven by
// tests/test_cuda.py.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

struct pymf_dim3 {
    unsigned x, y, z;
};
static thread_local pymf_dim3 threadIdx, blockIdx, blockDim, gridDim;

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(n)
#define __shared__ static thread_local
#define __syncthreads()
#define __threadfence() std::atomic_thread_fence(std::memory_order_seq_cst)
static int atomicOr(int *address, int value)
{
    return __atomic_fetch_or(address, value, __ATOMIC_SEQ_CST);
}

// the ring kernel's memory and synchronisation primitives (cuda/psgld.cu, PYMF_HOST_SHIM)
#define PYMF_HOST_SHIM
using std::min;
static thread_local std::vector<double> ring_shared;
static double *ring_shared_memory() { return ring_shared.data(); }
static int ring_progress_of(const int *counter) { return __atomic_load_n(counter, __ATOMIC_ACQUIRE); }
static void ring_publish(int *counter, int value) { __atomic_store_n(counter, value, __ATOMIC_RELEASE); }
static void ring_pause() { std::this_thread::yield(); }
static unsigned long long ring_clock_ns()
{
    return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
template <typename T> static T ring_load(const T *x) { return *x; }
template <typename T> static void ring_store(T *x, T v) { *x = v; }

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

// One std::thread per block, one thread per block, `shared_bytes` of shared memory each;
// block `absent` (if any) never runs, as a block that is never made resident.
template <typename Kernel>
static void launch_concurrent_blocks(unsigned grid_x, size_t shared_bytes, int absent,
                                     Kernel kernel)
{
    std::vector<std::thread> blocks;
    for (unsigned b = 0; b < grid_x; ++b)
        if ((int)b != absent)
            blocks.emplace_back([=] {
                gridDim = {grid_x, 1, 1};
                blockDim = {1, 1, 1};
                blockIdx = {b, 0, 0};
                threadIdx = {0, 0, 0};
                ring_shared.assign(shared_bytes / sizeof(double) + 1, 0.0);
                kernel();
            });
    for (auto &block : blocks)
        block.join();
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
    }                                                                                            \
    extern "C" void shim_launch_ring_dense_##SUFFIX(unsigned grid_x, unsigned block_x,           \
                                                    size_t shared_bytes, int absent,             \
                                                    PYMF_RING_DENSE_DATA(T),                     \
                                                    PYMF_RING_PARAMS(T))                         \
    {                                                                                            \
        (void)block_x; /* one thread per block here: the kernel's loops are block-strided */     \
        launch_concurrent_blocks(grid_x, shared_bytes, absent, [=] {                             \
            psgld_ring_dense_##SUFFIX(V, n_cols, PYMF_RING_ARGS);                                \
        });                                                                                      \
    }                                                                                            \
    extern "C" void shim_launch_ring_sparse_##SUFFIX(unsigned grid_x, unsigned block_x,          \
                                                     size_t shared_bytes, int absent,            \
                                                     PYMF_RING_SPARSE_DATA(T),                   \
                                                     PYMF_RING_PARAMS(T))                        \
    {                                                                                            \
        (void)block_x;                                                                           \
        launch_concurrent_blocks(grid_x, shared_bytes, absent, [=] {                             \
            psgld_ring_sparse_##SUFFIX(rows, cols, vals, by_column, block_offsets,               \
                                       PYMF_RING_ARGS);                                          \
        });                                                                                      \
    }

SHIM_LAUNCHERS(float, f32)
SHIM_LAUNCHERS(double, f64)
