// The kernels that synchronise threads, run under ThreadSanitizer (tests/test_cuda.py builds
// this with -fsanitize=thread): the dense factor kernel with a std::thread per CUDA thread
// over its shared-memory tiles, and the dense ring kernel with a std::thread per block
// waiting on its neighbour's counter. A missing __syncthreads or a read of an H block before
// its neighbour published it is a data race that TSan reports, even where the numbers happen
// to come out right. Exits 0 after printing a checksum; TSan's reports fail the test.
#include "cuda_shim.cpp"

#include <cmath>
#include <cstdio>

int main()
{
    const int B = 3, K = 21; // rank 21: two tiles of k and a ragged last group of four
    const long long I = 37, J = 35;
    const long long row_start[] = {0, 13, 25, 37}, col_start[] = {0, 12, 24, 35};
    std::vector<double> V(I * J), W(I * K), Ht(J * K);
    for (long long x = 0; x < I * J; ++x)
        V[x] = 0.5 + (double)(x % 7);
    for (long long x = 0; x < I * K; ++x)
        W[x] = 0.1 + 0.01 * (double)(x % 13);
    for (long long x = 0; x < J * K; ++x)
        Ht[x] = 0.2 + 0.01 * (double)(x % 11);

    // the dense factor kernel, part 1, 16 x 16 threads per tile
    const long long max_width = 12, max_height = 13;
    std::vector<double> G(I * max_width, 0.0);
    launch_threads({1, 1, (unsigned)B}, {16, 16, 1}, [&] {
        psgld_factors_dense_f64(V.data(), W.data(), Ht.data(), G.data(), row_start, col_start,
                                B, 1, J, K, max_width, 1.0, 0.5);
    });

    // the ring kernel, 9 iterations (every part three times) in one launch
    const int n_iter = 9;
    std::vector<double> coef(B, 1.0), eps(n_iter, 1e-4);
    std::vector<int> progress(B, 0), diverged(n_iter, 0);
    int stalled = 0;
    // PSGLD's per-row step factors from iteration 5 on (read-only, shared by every block)
    std::vector<double> step_W(I * K), step_Ht(J * K);
    for (long long x = 0; x < I * K; ++x)
        step_W[x] = 0.2 + 0.05 * (double)(x % 9);
    for (long long x = 0; x < J * K; ++x)
        step_Ht[x] = 0.3 + 0.05 * (double)(x % 7);
    const size_t shared_bytes = (2 * max_height * (K + 1) + max_width * (K + 1) + max_height * max_width)
                                * sizeof(double);
    launch_concurrent_blocks(B, shared_bytes, -1, [&] {
        psgld_ring_dense_f64(V.data(), J, W.data(), Ht.data(), row_start, col_start, B, K,
                             max_height, max_width, 1.0, coef.data(), eps.data(), n_iter, 0,
                             1.0, 1.0, 1, 12345, progress.data(), 1000000000LL, diverged.data(),
                             &stalled, step_W.data(), step_Ht.data(), 5);
    });

    double checksum = 0.0;
    for (double g : G)
        checksum += g;
    for (double w : W)
        checksum += w;
    for (double h : Ht)
        checksum += h;
    std::printf("checksum %.17g stalled %d\n", checksum, stalled);
    return std::isfinite(checksum) && stalled == 0 ? 0 : 1;
}
