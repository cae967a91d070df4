// Runs the kernels of cuda/psgld.cu on the CPU: CUDA's keywords are defined away and a
// launch is a loop over the grid. Three ways to run a grid:
//   launch:                   threads of a block one after the other (exact for kernels
//                             without __syncthreads);
//   launch_threads:           every thread of a block on its own std::thread, __syncthreads a
//                             real barrier and __shared__ memory shared by them (the dense
//                             factor kernel's tiles); blocks one after the other;
//   launch_concurrent_blocks: one thread per block, every block on its own std::thread (the
//                             ring kernels: block-strided loops, blocks that really wait for
//                             one another through the progress counters, as on the GPU).
// Built and driven by tests/test_cuda.py.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
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
#define __shared__ static /* one block runs at a time wherever a kernel has __shared__ */

// A reusable barrier for the threads of one block (C++14 has no std::barrier).
class BlockBarrier {
  public:
    explicit BlockBarrier(unsigned n) : count_(n) {}
    void wait()
    {
        std::unique_lock<std::mutex> lock(mutex_);
        const unsigned long generation = generation_;
        if (++waiting_ == count_) {
            waiting_ = 0;
            ++generation_;
            changed_.notify_all();
        } else {
            changed_.wait(lock, [&] { return generation != generation_; });
        }
    }

  private:
    std::mutex mutex_;
    std::condition_variable changed_;
    unsigned count_, waiting_ = 0;
    unsigned long generation_ = 0;
};
static thread_local BlockBarrier *block_barrier = nullptr; // set by launch_threads only
static void __syncthreads()
{
    if (block_barrier != nullptr)
        block_barrier->wait();
}
// Only the ring kernels use it, and they run here with one thread per block, where the AND
// over the block is the thread's own predicate; under launch_threads it would be wrong.
static int __syncthreads_and(int predicate)
{
    if (block_barrier != nullptr)
        std::abort();
    return predicate;
}
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

// Every thread of every block on its own std::thread, block after block.
template <typename Kernel>
static void launch_threads(pymf_dim3 grid, pymf_dim3 block, Kernel kernel)
{
    for (unsigned bz = 0; bz < grid.z; ++bz)
        for (unsigned by = 0; by < grid.y; ++by)
            for (unsigned bx = 0; bx < grid.x; ++bx) {
                BlockBarrier barrier(block.x * block.y * block.z);
                std::vector<std::thread> threads;
                for (unsigned tz = 0; tz < block.z; ++tz)
                    for (unsigned ty = 0; ty < block.y; ++ty)
                        for (unsigned tx = 0; tx < block.x; ++tx)
                            threads.emplace_back([=, &barrier] {
                                gridDim = grid;
                                blockDim = block;
                                blockIdx = {bx, by, bz};
                                threadIdx = {tx, ty, tz};
                                block_barrier = &barrier;
                                kernel();
                            });
                for (auto &thread : threads)
                    thread.join();
            }
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
    extern "C" void shim_launch_factors_dense_##SUFFIX(                                          \
        unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x, unsigned block_y,   \
        const T *V, const T *W, const T *Ht, T *G, const long long *row_start,                   \
        const long long *col_start, int n_blocks, int part, long long n_cols, int rank,          \
        long long max_width, T beta, T coef)                                                     \
    {                                                                                            \
        launch_threads({grid_x, grid_y, grid_z}, {block_x, block_y, 1}, [=] {                    \
            psgld_factors_dense_##SUFFIX(V, W, Ht, G, row_start, col_start, n_blocks, part,      \
                                         n_cols, rank, max_width, beta, coef);                   \
        });                                                                                      \
    }                                                                                            \
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
