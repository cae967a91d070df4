#include "pymf/common.h"

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
