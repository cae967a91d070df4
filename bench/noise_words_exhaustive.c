/* The fused noise transforms (core/src/philox.c: box_muller16_avx512 where the CPU has
 * AVX-512 F and BW, else box_muller8_avx2 where it has AVX2 and FMA) against the per-entry
 * one (pymf_box_muller, philox.h) on every 32-bit word: the fused code replaces exact
 * floating-point steps by integer and bit operations, and the words that exercise their
 * edges (a = 0, b next to a multiple of 2^30, ...) are too rare among Philox's outputs for
 * the tests to meet. The transform of a pair is the radius from word a times the angle's
 * sin and cos from word b, so two sweeps cover every case of each: all words as a (b a
 * mix of a) and all words as b (a a mix of b). About two minutes a sweep on one core.
 *
 *   gcc -std=c99 -O3 -fno-math-errno -fno-trapping-math -Icore/include \
 *       bench/noise_words_exhaustive.c -o noise_words_exhaustive -lm
 *   ./noise_words_exhaustive a && ./noise_words_exhaustive b
 *
 * Prints the count of differing pairs (and the first few); exits 1 if there is any, 2
 * where the CPU has neither (no fused path runs there). */
#include "../core/src/philox.c"

#include <stdio.h>

#if defined(__GNUC__) && defined(__x86_64__) && !defined(PYMF_NO_CLONES)
/* differing + the lanes whose fused pair z[half][0 or 1][j] is not pymf_box_muller of their
 * words a[lane], b[lane], lane = lanes[half][j] (per_half outputs a half); prints the first
 * few */
static long count_differing(const uint32_t *a, const uint32_t *b, const int lanes[2][8],
                            int per_half, double z[2][2][8], long differing)
{
    for (int half = 0; half < 2; ++half)
        for (int j = 0; j < per_half; ++j) {
            const int lane = lanes[half][j];
            double z0, z1;
            pymf_box_muller(a[lane], b[lane], &z0, &z1);
            if (memcmp(&z0, &z[half][0][j], sizeof z0) != 0 ||
                memcmp(&z1, &z[half][1][j], sizeof z1) != 0) {
                if (differing < 5)
                    printf("differs: a = %u, b = %u\n", a[lane], b[lane]);
                ++differing;
            }
        }
    return differing;
}

/* word a (or b) of pair i of the sweep from `first`: the word itself, the other a mix */
static void sweep_words(uint64_t first, int n, int sweep_b, uint32_t *a, uint32_t *b)
{
    for (int i = 0; i < n; ++i) {
        const uint32_t word = (uint32_t)(first + (uint64_t)i);
        const uint32_t mix = word * 2654435761u ^ (word >> 7);
        a[i] = sweep_b ? mix : word;
        b[i] = sweep_b ? word : mix;
    }
}

__attribute__((target("avx512f,avx512bw"))) static long differing_pairs(int sweep_b)
{
    const log_tables_avx512 tables = {
        _mm512_loadu_pd(pymf_log_inverse_c), _mm512_loadu_pd(pymf_log_inverse_c + 8),
        _mm512_loadu_pd(pymf_log_minus_2_log_c), _mm512_loadu_pd(pymf_log_minus_2_log_c + 8)};
    /* box_muller16_avx512's halves: lanes of these counters, in this order */
    static const int lanes[2][8] = {{0, 1, 4, 5, 8, 9, 12, 13}, {2, 3, 6, 7, 10, 11, 14, 15}};
    long differing = 0;
    for (uint64_t first = 0; first < (1ull << 32); first += 16) {
        uint32_t a[16], b[16];
        sweep_words(first, 16, sweep_b, a, b);
        __m512d low[2], high[2];
        box_muller16_avx512(_mm512_loadu_si512(a), _mm512_loadu_si512(b), &tables, low, high);
        double z[2][2][8];
        _mm512_storeu_pd(z[0][0], low[0]);
        _mm512_storeu_pd(z[0][1], low[1]);
        _mm512_storeu_pd(z[1][0], high[0]);
        _mm512_storeu_pd(z[1][1], high[1]);
        differing = count_differing(a, b, lanes, 8, z, differing);
    }
    return differing;
}

/* the same on box_muller8_avx2: 8 words at a time, halves of counters 0, 1, 4, 5 and
 * 2, 3, 6, 7 */
__attribute__((target("avx2,fma"))) static long differing_pairs_avx2(int sweep_b)
{
    static const int lanes[2][8] = {{0, 1, 4, 5}, {2, 3, 6, 7}};
    long differing = 0;
    for (uint64_t first = 0; first < (1ull << 32); first += 8) {
        uint32_t a[8], b[8];
        sweep_words(first, 8, sweep_b, a, b);
        __m256d low[2], high[2];
        box_muller8_avx2(_mm256_loadu_si256((const __m256i *)a),
                         _mm256_loadu_si256((const __m256i *)b), low, high);
        double z[2][2][8];
        _mm256_storeu_pd(z[0][0], low[0]);
        _mm256_storeu_pd(z[0][1], low[1]);
        _mm256_storeu_pd(z[1][0], high[0]);
        _mm256_storeu_pd(z[1][1], high[1]);
        differing = count_differing(a, b, lanes, 4, z, differing);
    }
    return differing;
}
#endif

int main(int argc, char **argv)
{
    if (argc != 2 || (argv[1][0] != 'a' && argv[1][0] != 'b')) {
        fprintf(stderr, "usage: %s a|b (every word as word a, or as word b)\n", argv[0]);
        return 2;
    }
#if defined(__GNUC__) && defined(__x86_64__) && !defined(PYMF_NO_CLONES)
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw")) {
        const long differing = differing_pairs(argv[1][0] == 'b');
        printf("every word as %c: %ld pairs differ (AVX-512)\n", argv[1][0], differing);
        return differing != 0;
    }
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        const long differing = differing_pairs_avx2(argv[1][0] == 'b');
        printf("every word as %c: %ld pairs differ (AVX2)\n", argv[1][0], differing);
        return differing != 0;
    }
#endif
    fprintf(stderr, "neither AVX-512F/BW nor AVX2 + FMA here: nothing to compare\n");
    return 2;
}
