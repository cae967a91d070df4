/* SIBM's fit run by the C core alone, with no interpreter in the process: what a batch
 * executable linking libpymfcore holds for a fit (bench/sibm_large.py --c drives it).
 *
 *   sibm_large_c DIR UPDATES THREADS
 *
 * DIR holds what bench/sibm_large.py's preparing step wrote with the same code as pymf.fit
 * (pymf.sibm.fitting.prepare_chain): settings.txt (18 numbers, one a line: n_rows n_cols
 * n_ones rank, the prior's six numbers, sampling, batch_size, batch_start, batch_min,
 * batch_max, theta_delta, tau0, kappa), seed.txt (the draws' 64-bit seed), row_ptr.bin and
 * col_idx.bin (int64) and q0.bin (the starting natural parameters u1, u2, v1, v2 then z's
 * two, float64). It runs UPDATES
 * updates from that state, so its q equals pymf.fit's after as many updates, bit for bit
 * (the bench checks it on a small matrix), writes q.bin (u1, u2, v1, v2) and prints one
 * JSON line: the peak resident memory (VmHWM), the index's bytes, the seconds and entries
 * of the updates. */
#define _POSIX_C_SOURCE 199309L
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pymf/sibm.h"

static int read_exact(const char *dir, const char *name, void *into, size_t bytes)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fh = fopen(path, "rb");
    if (fh == NULL) {
        fprintf(stderr, "sibm_large_c: cannot open %s\n", path);
        return 0;
    }
    /* read in pieces straight into the destination: no staging buffer adds to the peak */
    size_t done = 0;
    while (done < bytes) {
        const size_t got = fread((char *)into + done, 1, bytes - done, fh);
        if (got == 0)
            break;
        done += got;
    }
    const int ok = done == bytes && fgetc(fh) == EOF;
    fclose(fh);
    if (!ok)
        fprintf(stderr, "sibm_large_c: %s does not hold %zu bytes\n", path, bytes);
    return ok;
}

static int write_all(const char *dir, const char *name, const double *const *parts,
                     const size_t *counts, int n_parts)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fh = fopen(path, "wb");
    int ok = fh != NULL;
    for (int i = 0; ok && i < n_parts; ++i)
        ok = fwrite(parts[i], sizeof(double), counts[i], fh) == counts[i];
    if (fh != NULL && fclose(fh) != 0)
        ok = 0;
    if (!ok)
        fprintf(stderr, "sibm_large_c: cannot write %s\n", path);
    return ok;
}

/* A field of /proc/self/status in KiB (-1 where there is none). */
static long status_kib(const char *field)
{
    FILE *fh = fopen("/proc/self/status", "r");
    if (fh == NULL)
        return -1;
    char line[256];
    long value = -1;
    const size_t n = strlen(field);
    while (fgets(line, sizeof line, fh) != NULL)
        if (strncmp(line, field, n) == 0 && line[n] == ':') {
            value = strtol(line + n + 1, NULL, 10);
            break;
        }
    fclose(fh);
    return value;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s DIR UPDATES THREADS\n", argv[0]);
        return 2;
    }
    const char *dir = argv[1];
    const int64_t n_updates = strtoll(argv[2], NULL, 10);
    const int n_threads = atoi(argv[3]);
    double v[20];
    char path[4096];
    snprintf(path, sizeof path, "%s/settings.txt", dir);
    FILE *fh = fopen(path, "r");
    int n_read = 0;
    if (fh != NULL) {
        while (n_read < 19 && fscanf(fh, "%lf", &v[n_read]) == 1)
            ++n_read;
        fclose(fh);
    }
    /* the draw seed is a full 64-bit integer, which a double cannot hold: its own line */
    uint64_t seed = 0;
    snprintf(path, sizeof path, "%s/seed.txt", dir);
    fh = fopen(path, "r");
    int seed_ok = fh != NULL && fscanf(fh, "%llu", (unsigned long long *)&seed) == 1;
    if (fh != NULL)
        fclose(fh);
    if (n_read != 18 || !seed_ok || n_updates < 1) {
        fprintf(stderr, "sibm_large_c: %s/settings.txt needs 18 numbers and seed.txt one "
                        "(got %d, %d), UPDATES >= 1\n", dir, n_read, seed_ok);
        return 2;
    }
    const int64_t L = (int64_t)v[0], M = (int64_t)v[1], n_ones = (int64_t)v[2];
    const int D = (int)v[3];
    const pymf_sibm_prior prior = {D, v[4], v[5], v[6], v[7], v[8], v[9]};
    const pymf_sibm_config config = {(pymf_sibm_sampling)(int)v[10], (int64_t)v[11],
                                     (int64_t)v[12], (int64_t)v[13], (int64_t)v[14],
                                     v[15], v[16], v[17], seed, n_threads};
    int64_t *row_ptr = malloc((size_t)(L + 1) * sizeof *row_ptr);
    int64_t *col_idx = malloc((size_t)(n_ones > 0 ? n_ones : 1) * sizeof *col_idx);
    double *u1 = malloc((size_t)(L * D) * sizeof(double)), *u2 = malloc((size_t)(L * D) * sizeof(double));
    double *v1 = malloc((size_t)(M * D) * sizeof(double)), *v2 = malloc((size_t)(M * D) * sizeof(double));
    int64_t *row_updates = calloc((size_t)L, sizeof(int64_t));
    int64_t *col_updates = calloc((size_t)M, sizeof(int64_t));
    if (!row_ptr || !col_idx || !u1 || !u2 || !v1 || !v2 || !row_updates || !col_updates) {
        fprintf(stderr, "sibm_large_c: out of memory\n");
        return 1;
    }
    if (!read_exact(dir, "row_ptr.bin", row_ptr, (size_t)(L + 1) * sizeof *row_ptr)
        || !read_exact(dir, "col_idx.bin", col_idx, (size_t)n_ones * sizeof *col_idx))
        return 1;
    const pymf_sibm_matrix matrix = {L, M, n_ones, row_ptr, col_idx};
    const pymf_sibm_factors factors = {u1, u2, v1, v2};
    pymf_error err;
    pymf_error_clear(&err);
    pymf_sibm *s = pymf_sibm_create(&matrix, &prior, &config, &factors, &err);
    if (s == NULL) {
        fprintf(stderr, "sibm_large_c: %s\n", err.message);
        return 1;
    }
    /* the starting q straight into the object's own arrays (set_state then copies nothing),
     * and z, and the batch size the object chose, as pymf.fit's start does */
    snprintf(path, sizeof path, "%s/q0.bin", dir);
    fh = fopen(path, "rb");
    double z[2];
    int ok = fh != NULL;
    double *const parts[4] = {u1, u2, v1, v2};
    const size_t counts[4] = {(size_t)(L * D), (size_t)(L * D), (size_t)(M * D), (size_t)(M * D)};
    for (int i = 0; ok && i < 4; ++i)
        ok = fread(parts[i], sizeof(double), counts[i], fh) == counts[i];
    ok = ok && fread(z, sizeof(double), 2, fh) == 2;
    if (fh != NULL)
        fclose(fh);
    if (!ok) {
        fprintf(stderr, "sibm_large_c: %s does not hold the starting q\n", path);
        return 1;
    }
    int64_t t0, batch;
    pymf_sibm_get_state(s, NULL, NULL, NULL, NULL, NULL, NULL, NULL, &t0, &batch);
    if (pymf_sibm_set_state(s, u1, u2, v1, v2, z, row_updates, col_updates, 0, batch, &err)
        != PYMF_OK) {
        fprintf(stderr, "sibm_large_c: %s\n", err.message);
        return 1;
    }
    /* the object keeps its own counters: these zeros are not needed any more */
    free(row_updates);
    free(col_updates);
    row_updates = col_updates = NULL;
    int64_t *sizes = malloc((size_t)n_updates * sizeof *sizes);
    if (sizes == NULL)
        return 1;
    const double started = seconds_now();
    if (pymf_sibm_run(s, n_updates, sizes, &err) != PYMF_OK) {
        fprintf(stderr, "sibm_large_c: %s\n", err.message);
        return 1;
    }
    const double seconds = seconds_now() - started;
    double entries = 0.0;
    for (int64_t i = 0; i < n_updates; ++i)
        entries += (double)sizes[i];
    const long peak_kib = status_kib("VmHWM");
    pymf_sibm_release_scratch(s);
    if (!write_all(dir, "q.bin", (const double *const *)parts, counts, 4))
        return 1;
    printf("{\"peak_rss_bytes\": %ld, \"index_bytes\": %lld, \"q_bytes\": %lld, "
           "\"fit_seconds\": %.6f, \"entries\": %.0f, \"entries_per_s\": %.1f, "
           "\"threads\": %d}\n",
           peak_kib * 1024L, (long long)((L + 1 + n_ones) * (int64_t)sizeof(int64_t)),
           (long long)(2 * (L + M) * D * (int64_t)sizeof(double)), seconds, entries,
           entries / seconds, n_threads > 0 ? n_threads : pymf_default_threads());
    pymf_sibm_destroy(s);
    free(sizes);
    free(row_ptr);
    free(col_idx);
    free(u1);
    free(u2);
    free(v1);
    free(v2);
    free(row_updates);
    free(col_updates);
    return 0;
}
