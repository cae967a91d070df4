/*
 * pymf/common.h: things every part of the C core shares.
 *
 * - PYMF_HD marks per-entry maths that the C compiler and nvcc both compile, so that
 *   the CPU and the GPU paths have exactly one copy of each formula.
 * - Every entry point returns a pymf_status and, on failure, fills a pymf_error that the
 *   Cython boundary turns into the matching Python exception. There are no globals.
 */
#ifndef PYMF_COMMON_H
#define PYMF_COMMON_H

#include <stdint.h>

#if defined(__CUDACC__)
#define PYMF_HD __host__ __device__ __forceinline__
#else
#define PYMF_HD static inline
#endif

/* Hot loops are compiled three times, for AVX-512 (x86-64-v4), AVX2 with FMA (x86-64-v3)
 * and the x86-64 baseline, and the loader picks one at run time (GCC function
 * multi-versioning): speed without -march=native. All clones compute the same bits, because
 * nothing is reassociated and the compiler contracts nothing into FMA (-std=c99 turns
 * contraction off); the fused multiply-adds that the Tweedie gradient uses are explicit
 * fma() calls, correctly rounded in every clone (an instruction in x86-64-v3 and v4, glibc's
 * fma in the baseline one). */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && defined(__x86_64__) && \
    !defined(PYMF_NO_CLONES)
#define PYMF_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define PYMF_VECTOR_CLONES
#endif

typedef enum {
    PYMF_OK = 0,
    PYMF_EINVAL = 1,     /* bad argument: ValueError in Python */
    PYMF_ENOMEM = 2,     /* allocation failed: MemoryError */
    PYMF_EDIVERGED = 3,  /* a non-finite value appeared: pymf.DivergenceError */
    PYMF_ENUMERIC = 4    /* a numerical library (GSL) failed: RuntimeError */
} pymf_status;

#define PYMF_ERRMSG_LEN 256

typedef struct {
    pymf_status status;
    int64_t iteration;            /* for PYMF_EDIVERGED: the 1-based iteration that diverged */
    char message[PYMF_ERRMSG_LEN];
} pymf_error;

#ifndef __CUDACC__
/* Fills err (if not NULL) and returns status, so call sites read `return pymf_fail(...)`. */
pymf_status pymf_fail(pymf_error *err, pymf_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void pymf_error_clear(pymf_error *err);
/* Number of OpenMP threads a parallel region will use when n_threads <= 0 is passed. */
int pymf_default_threads(void);
/* Sets that number for the calling thread (OpenMP's nthreads-var): a process forked after
 * its parent ran OpenMP threads sets 1, since libgomp cannot start a thread team there. */
void pymf_set_default_threads(int n_threads);
/* GSL aborts the process on error by default; the core turns that off once per process
 * through this call, made from every create function (idempotent, thread-safe enough:
 * it only ever stores the same pointer). */
void pymf_gsl_quiet(void);
const char *pymf_gsl_version(void);
/* Copies a chain's starting state (W: n_rows x K, Ht: n_cols x K) into its buffers after
 * checking that every value is finite (and >= 0 when non_negative), so all samplers and
 * optimisers reject the same bad starts with the same messages. */
pymf_status pymf_factors_load(double *W_dst, double *Ht_dst, const double *W, const double *Ht,
                              int64_t n_rows, int64_t n_cols, int rank, int non_negative,
                              pymf_error *err);
/* Copies the state out; either destination may be NULL. */
void pymf_factors_store(double *W_dst, double *Ht_dst, const double *W, const double *Ht,
                        int64_t n_rows, int64_t n_cols, int rank);
int pymf_openmp_enabled(void);
#endif

#endif
