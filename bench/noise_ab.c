/* Two versions of the Gaussian noise (core/src/philox.c) timed against each other in one
 * process, alternated round by round, so that the shared machine's changing speed falls on
 * both alike; and their outputs compared bit for bit. For kernel work on the noise:
 * `bench/psgld_synthetic.py --noise-only` times one build, and on this machine the same
 * build measures anywhere from 1.4 to 2.4 ns per Gaussian from one minute to the next.
 *
 * Build (A and B: two philox.c files, e.g. a checkout of main and a working tree; each is
 * compiled with the library's flags and its entry points renamed):
 *
 *   F="-std=c99 -O3 -fno-math-errno -fno-trapping-math -fopenmp -Icore/include"
 *   gcc $F -Dpymf_noise_rows=a_noise_rows -Dpymf_noise_row_list=a_noise_row_list \
 *       -Dpymf_philox_words=a_philox_words -c A/core/src/philox.c -o a.o
 *   gcc $F -Dpymf_noise_rows=b_noise_rows -Dpymf_noise_row_list=b_noise_row_list \
 *       -Dpymf_philox_words=b_philox_words -c B/core/src/philox.c -o b.o
 *   gcc -O2 bench/noise_ab.c a.o b.o -o noise_ab -fopenmp -lm
 *   ./noise_ab 16 32 && ./noise_ab 1024 32
 *
 * Arguments: rows per call and rank (16 rows of K = 32 is the call the Langevin samplers
 * make: core/src/langevin.c's tile of 512 doubles). Prints, for each version, the median and
 * the fastest of 15 rounds in ns per Gaussian (CPU time, one thread), the median of the
 * rounds' B/A ratios, and how many outputs differ (0 expected when B keeps A's bits).
 *
 * `./noise_ab pad` times version A alone: the noise of the same 2^20 rows in the samplers'
 * tiles of 512 doubles, asked for with the rank itself and with the rank rounded up to whole
 * groups of four (whose first rank entries of each row are the same Gaussians), for ranks
 * 3 to 100: the padded / direct time, median and range of 9 alternated rounds. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void a_noise_rows(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row,
                  uint32_t n_rows, int rank, double *out);
void b_noise_rows(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row,
                  uint32_t n_rows, int rank, double *out);

typedef void (*noise_fn)(uint64_t, uint32_t, uint64_t, uint32_t, uint32_t, int, double *);

#define ROUNDS 15

static double cpu_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

static int by_value(const void *x, const void *y)
{
    const double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* ns per Gaussian of `calls` calls, each for rows consecutive rows at a new iteration t */
static double ns_per_gaussian(noise_fn noise, int rows, int rank, int calls, double *out)
{
    const double started = cpu_seconds();
    for (int call = 0; call < calls; ++call)
        noise(1, 1, (uint64_t)call, (uint32_t)(call % 64) * (uint32_t)rows, (uint32_t)rows, rank,
              out);
    return (cpu_seconds() - started) / ((double)calls * rows * rank) * 1e9;
}

/* The same rows' noise asked for with rank K and with K rounded up to a multiple of 4 */
static int padding_table(void)
{
    static const int ranks[] = {3, 5, 6, 7, 10, 11, 13, 20, 50, 100};
    const long total_rows = 1L << 20;
    double *out = malloc(sizeof(double) * 512);
    if (out == NULL)
        return 2;
    for (size_t r = 0; r < sizeof ranks / sizeof ranks[0]; ++r) {
        const int K = ranks[r], padded = (K + 3) / 4 * 4;
        const int rows_direct = 512 / K, rows_padded = 512 / padded;
        double ratio[9];
        for (int round = 0; round < 9; ++round) {
            double started = cpu_seconds();
            for (long i = 0; i < total_rows; i += rows_direct)
                a_noise_rows(1, 1, 5, (uint32_t)(i & 0xFFFF), (uint32_t)rows_direct, K, out);
            const double direct = cpu_seconds() - started;
            started = cpu_seconds();
            for (long i = 0; i < total_rows; i += rows_padded)
                a_noise_rows(1, 1, 5, (uint32_t)(i & 0xFFFF), (uint32_t)rows_padded, padded, out);
            ratio[round] = (cpu_seconds() - started) / direct;
        }
        qsort(ratio, 9, sizeof(double), by_value);
        printf("rank %3d (padded to %3d): padded / direct %.3f (range %.3f-%.3f)\n", K, padded,
               ratio[4], ratio[0], ratio[8]);
    }
    free(out);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "pad") == 0)
        return padding_table();
    const int rows = argc > 1 ? atoi(argv[1]) : 16, rank = argc > 2 ? atoi(argv[2]) : 32;
    if (rows < 1 || rank < 1) {
        fprintf(stderr, "usage: %s [rows per call] [rank]\n", argv[0]);
        return 2;
    }
    /* about 3.3 million Gaussians a round */
    const int calls = 1 + (int)(3300000L / ((long)rows * rank));
    double *out_a = malloc(sizeof(double) * (size_t)rows * (size_t)rank);
    double *out_b = malloc(sizeof(double) * (size_t)rows * (size_t)rank);
    if (out_a == NULL || out_b == NULL)
        return 2;
    double time_a[ROUNDS], time_b[ROUNDS], ratio[ROUNDS];
    ns_per_gaussian(a_noise_rows, rows, rank, 1, out_a); /* warm up both */
    ns_per_gaussian(b_noise_rows, rows, rank, 1, out_b);
    for (int round = 0; round < ROUNDS; ++round) {
        time_a[round] = ns_per_gaussian(a_noise_rows, rows, rank, calls, out_a);
        time_b[round] = ns_per_gaussian(b_noise_rows, rows, rank, calls, out_b);
        ratio[round] = time_b[round] / time_a[round];
    }
    long differing = 0;
    for (int t = 0; t < 3; ++t) {
        a_noise_rows(7, 2, (uint64_t)t << 31, 1000u * (uint32_t)t, (uint32_t)rows, rank, out_a);
        b_noise_rows(7, 2, (uint64_t)t << 31, 1000u * (uint32_t)t, (uint32_t)rows, rank, out_b);
        for (long i = 0; i < (long)rows * rank; ++i)
            differing += memcmp(&out_a[i], &out_b[i], sizeof(double)) != 0;
    }
    qsort(time_a, ROUNDS, sizeof(double), by_value);
    qsort(time_b, ROUNDS, sizeof(double), by_value);
    qsort(ratio, ROUNDS, sizeof(double), by_value);
    printf("rows %d, rank %d: A median %.3f (fastest %.3f) ns, B median %.3f (fastest %.3f) ns "
           "per Gaussian; B/A median %.3f; %ld of %ld outputs differ\n",
           rows, rank, time_a[ROUNDS / 2], time_a[0], time_b[ROUNDS / 2], time_b[0],
           ratio[ROUNDS / 2], differing, 3L * rows * rank);
    free(out_a);
    free(out_b);
    return 0;
}
