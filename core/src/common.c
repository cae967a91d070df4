#include "pymf/common.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <gsl/gsl_errno.h>
#include <gsl/gsl_version.h>
#ifdef _OPENMP
#include <omp.h>
#endif

pymf_status pymf_fail(pymf_error *err, pymf_status status, const char *fmt, ...)
{
    if (err != NULL) {
        va_list args;
        va_start(args, fmt);
        vsnprintf(err->message, PYMF_ERRMSG_LEN, fmt, args);
        va_end(args);
        err->status = status;
    }
    return status;
}

void pymf_error_clear(pymf_error *err)
{
    if (err != NULL) {
        err->status = PYMF_OK;
        err->iteration = 0;
        err->message[0] = '\0';
    }
}

int pymf_default_threads(void)
{
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

void pymf_set_default_threads(int n_threads)
{
#ifdef _OPENMP
    omp_set_num_threads(n_threads > 0 ? n_threads : 1);
#else
    (void)n_threads;
#endif
}

int pymf_openmp_enabled(void)
{
#ifdef _OPENMP
    return 1;
#else
    return 0;
#endif
}

void pymf_gsl_quiet(void) { gsl_set_error_handler_off(); }

const char *pymf_gsl_version(void) { return gsl_version; }

static pymf_status check_factor(const double *X, int64_t n, int non_negative, const char *name,
                                pymf_error *err)
{
    for (int64_t e = 0; e < n; ++e) {
        if (!isfinite(X[e]))
            return pymf_fail(err, PYMF_EINVAL, "the initial %s has a non-finite entry", name);
        if (non_negative && X[e] < 0.0)
            return pymf_fail(err, PYMF_EINVAL, "the initial %s must be non-negative", name);
    }
    return PYMF_OK;
}

pymf_status pymf_factors_load(double *W_dst, double *Ht_dst, const double *W, const double *Ht,
                              int64_t n_rows, int64_t n_cols, int rank, int non_negative,
                              pymf_error *err)
{
    if (check_factor(W, n_rows * rank, non_negative, "W", err) != PYMF_OK ||
        check_factor(Ht, n_cols * rank, non_negative, "H", err) != PYMF_OK)
        return err != NULL ? err->status : PYMF_EINVAL;
    memcpy(W_dst, W, sizeof(double) * (size_t)(n_rows * rank));
    memcpy(Ht_dst, Ht, sizeof(double) * (size_t)(n_cols * rank));
    return PYMF_OK;
}

void pymf_factors_store(double *W_dst, double *Ht_dst, const double *W, const double *Ht,
                        int64_t n_rows, int64_t n_cols, int rank)
{
    if (W_dst != NULL)
        memcpy(W_dst, W, sizeof(double) * (size_t)(n_rows * rank));
    if (Ht_dst != NULL)
        memcpy(Ht_dst, Ht, sizeof(double) * (size_t)(n_cols * rank));
}
