/*
 * pymf/linalg.h: the small dense linear algebra of the C core, one copy of each loop:
 * dot products and axpy (y += alpha x) over short contiguous vectors (a factor row, a
 * parameter vector). All PYMF_HD: static inline in C, and the CUDA kernels compile them too.
 *
 * The summation order of a dot product is part of every chain's bits (floating-point
 * addition is not associative, and tests/test_golden.py pins the chains), so there are three:
 *   pymf_dot             four partial sums over k mod 4, added as (s0 + s1) + (s2 + s3):
 *                        mu = <w, h> of the Tweedie log-likelihood and predictions, SGLD's
 *                        and SGD's per-entry moves, the alpha-stable model.
 *   pymf_dot_fused       pymf_dot's order with every term a fused multiply-add (C99 fma:
 *                        one rounding per term): the Tweedie block gradient (PSGLD, LD,
 *                        HAMCMC-MF), its dense tiles, the Fisher curvature that shares
 *                        them, and the CUDA kernels.
 *   pymf_dot_sequential  one running sum, k ascending: BPMF (predictions, residuals, the
 *                        DSGLD minibatch gradient), the linear-Gaussian model, L-BFGS.
 * Moving a caller from one to another changes its chains. The axpy forms only add element
 * by element, so they have no order to keep; -std=c99 keeps a * x + y from being contracted
 * into an FMA, so pymf_axpy2 rounds twice per element and pymf_axpy2_fused (explicit fma())
 * once. An explicit fma() is correctly rounded on every machine (an FMA instruction where
 * the clone has one, glibc's exact software fma where not, CUDA's fma on a GPU), so the
 * fused forms give the same bits in every build, as the unfused ones do.
 */
#ifndef PYMF_LINALG_H
#define PYMF_LINALG_H

#include "pymf/common.h"

#ifndef __CUDACC__
#include <math.h>
#endif

/* <a, b> with four partial sums in a fixed order: the result is the same whichever thread
 * computes it, and the compiler can keep the sums in registers. */
PYMF_HD double pymf_dot(const double *a, const double *b, int n)
{
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int k = 0;
    for (; k + 4 <= n; k += 4) {
        s0 += a[k] * b[k];
        s1 += a[k + 1] * b[k + 1];
        s2 += a[k + 2] * b[k + 2];
        s3 += a[k + 3] * b[k + 3];
    }
    for (; k < n; ++k)
        s0 += a[k] * b[k];
    return (s0 + s1) + (s2 + s3);
}

/* pymf_dot's order, each term added by one fused multiply-add (a product and a sum,
 * rounded once): pymf_dot_fused in double precision, pymf_dot_float_fused in single (the
 * float32 GPU chains), both from this one body. */
#define PYMF_DEFINE_DOT_FUSED(name, real, fused_multiply_add)                                 \
    PYMF_HD real name(const real *a, const real *b, int n)                                     \
    {                                                                                          \
        real s0 = 0, s1 = 0, s2 = 0, s3 = 0;                                                   \
        int k = 0;                                                                             \
        for (; k + 4 <= n; k += 4) {                                                           \
            s0 = fused_multiply_add(a[k], b[k], s0);                                           \
            s1 = fused_multiply_add(a[k + 1], b[k + 1], s1);                                   \
            s2 = fused_multiply_add(a[k + 2], b[k + 2], s2);                                   \
            s3 = fused_multiply_add(a[k + 3], b[k + 3], s3);                                   \
        }                                                                                      \
        for (; k < n; ++k)                                                                     \
            s0 = fused_multiply_add(a[k], b[k], s0);                                           \
        return (s0 + s1) + (s2 + s3);                                                          \
    }

PYMF_DEFINE_DOT_FUSED(pymf_dot_fused, double, fma)
PYMF_DEFINE_DOT_FUSED(pymf_dot_float_fused, float, fmaf)

/* <a, b> as one running sum, k ascending (not pymf_dot: see the top of this file). */
PYMF_HD double pymf_dot_sequential(const double *a, const double *b, int n)
{
    double s = 0.0;
    for (int k = 0; k < n; ++k)
        s += a[k] * b[k];
    return s;
}

/* y += alpha x */
PYMF_HD void pymf_axpy(int n, double alpha, const double *x, double *y)
{
    for (int k = 0; k < n; ++k)
        y[k] += alpha * x[k];
}

/* y1 += alpha x1 and y2 += alpha x2 in one pass (the two sides of a rank-one gradient
 * term, e.g. g_w += g h and g_h += g w for one entry). */
PYMF_HD void pymf_axpy2(int n, double alpha, const double *x1, double *y1, const double *x2,
                        double *y2)
{
    for (int k = 0; k < n; ++k) {
        y1[k] += alpha * x1[k];
        y2[k] += alpha * x2[k];
    }
}

/* pymf_axpy2 with each element's update one fma (alpha x + y rounded once): the Tweedie
 * block gradient's per-entry terms, g_w = fma(g, h, g_w) and g_h = fma(g, w, g_h). */
PYMF_HD void pymf_axpy2_fused(int n, double alpha, const double *x1, double *y1,
                              const double *x2, double *y2)
{
    for (int k = 0; k < n; ++k) {
        y1[k] = fma(alpha, x1[k], y1[k]);
        y2[k] = fma(alpha, x2[k], y2[k]);
    }
}

/* Whether x[0 .. n-1] are all finite (every element looked at: the loop vectorises). */
PYMF_HD int pymf_all_finite(const double *x, int64_t n)
{
    int finite = 1;
    for (int64_t i = 0; i < n; ++i)
        finite &= isfinite(x[i]) ? 1 : 0;
    return finite;
}

#endif
