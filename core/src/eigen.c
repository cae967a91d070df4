#include "pymf/eigen.h"

#include <float.h>
#include <math.h>

#include "pymf/linalg.h"

/* The number of eigenvalues below x of the symmetric tridiagonal matrix with diagonal
 * alpha and squared off-diagonal beta_squared: the sign changes of its leading minors
 * q_i = det(T_i - x I) (Sturm), from the three-term recurrence q_i = (alpha_i - x) q_(i-1) -
 * beta_(i-1)^2 q_(i-2). It has no divisions, whose latency, one per row in a chain, made the
 * pivot form d_i = q_i / q_(i-1) (LAPACK's dstebz) the larger part of the time. A minor
 * that is exactly 0 becomes -2^-60 q_(i-1), the pivot form's tiny negative pivot (where
 * beta is 0 too, a zero left as it is would zero every later minor and lose their signs);
 * a pair of minors leaving [2^-500, 2^500] is rescaled by an exact power of two, which
 * keeps their signs and ratio (the caller scales T to entries of at most about n). */
static int count_below(int n, const double *alpha, const double *beta_squared, double x)
{
    double before = 1.0, minor = alpha[0] - x;
    int count = 0;
    for (int i = 0;; ++i) {
        if (minor == 0.0)
            minor = -0x1p-60 * before;
        count += (minor < 0.0) != (before < 0.0);
        if (i + 1 == n)
            return count;
        const double next = (alpha[i + 1] - x) * minor - beta_squared[i] * before;
        before = minor;
        minor = next;
        const double size = fabs(minor) > fabs(before) ? fabs(minor) : fabs(before);
        if (size > 0x1p500) {
            minor *= 0x1p-500;
            before *= 0x1p-500;
        } else if (size < 0x1p-500) {
            minor *= 0x1p500;
            before *= 0x1p500;
        }
    }
}

double pymf_largest_eigenvalue(int n, const double *A, double *work)
{
    /* the largest absolute entry (not the row sums, which can overflow for finite
     * entries): every |eigenvalue| is at most n times it */
    double scale = 0.0;
    for (int64_t e = 0; e < (int64_t)n * n; ++e) {
        const double size = fabs(A[e]);
        if (!(size <= DBL_MAX))
            return NAN;
        scale = size > scale ? size : scale;
    }
    if (n == 1 || scale == 0.0)
        return A[0];
    /* everything in units of a power of two at or above the largest entry (exact): the
     * entries are at most 1 and the eigenvalues at most n, so the squares below and
     * count_below's minors (rescaled as they go) stay in range */
    int exponent;
    frexp(scale, &exponent);
    const double inverse = ldexp(1.0, -exponent);
    double *M = work, *v = work + (int64_t)n * n, *w = v + n, *alpha = w + n,
           *beta_squared = alpha + n;
    for (int64_t e = 0; e < (int64_t)n * n; ++e)
        M[e] = A[e] * inverse;
    /* Householder tridiagonalisation (LAPACK's dsytd2, without the vectors): step k
     * reflects column k below the diagonal onto its first entry, applying
     * H = I - tau v v^T to the trailing square from both sides as the rank-2 update
     * M -= v w^T + w v^T, w = p - (tau / 2)(v . p) v, p = tau M v. Both triangles are
     * updated, twice the arithmetic of one, so that p's products run along contiguous rows;
     * with one triangle (dsytd2 keeps one, through dsymv and dsyr2) half of them would
     * walk a column, n doubles apart */
    for (int k = 0; k + 2 < n; ++k) {
        const int m = n - k - 1;
        double *trailing = M + (int64_t)(k + 1) * n + (k + 1);
        double norm_squared = 0.0;
        for (int i = 0; i < m; ++i) {
            v[i] = M[(int64_t)(k + 1 + i) * n + k];
            norm_squared += v[i] * v[i];
        }
        alpha[k] = M[(int64_t)k * n + k];
        if (norm_squared == 0.0) {
            beta_squared[k] = 0.0;
            continue;
        }
        const double norm = sqrt(norm_squared);
        const double reflected = v[0] > 0.0 ? -norm : norm; /* no cancellation in v[0] */
        beta_squared[k] = norm_squared;
        v[0] -= reflected;
        const double tau = 2.0 / pymf_dot(v, v, m);
        for (int i = 0; i < m; ++i)
            w[i] = tau * pymf_dot(trailing + (int64_t)i * n, v, m);
        const double half_k = 0.5 * tau * pymf_dot(v, w, m);
        for (int i = 0; i < m; ++i)
            w[i] -= half_k * v[i];
        for (int i = 0; i < m; ++i) {
            double *row = trailing + (int64_t)i * n;
            for (int j = 0; j < m; ++j)
                row[j] -= v[i] * w[j] + w[i] * v[j];
        }
    }
    alpha[n - 2] = M[(int64_t)(n - 2) * n + (n - 2)];
    alpha[n - 1] = M[(int64_t)(n - 1) * n + (n - 1)];
    beta_squared[n - 2] = M[(int64_t)(n - 1) * n + (n - 2)] * M[(int64_t)(n - 1) * n + (n - 2)];
    /* bisection between Gershgorin's bounds of the tridiagonal matrix: hi keeps all n
     * eigenvalues below it, lo at most n - 1 */
    double lo = DBL_MAX, hi = -DBL_MAX;
    for (int i = 0; i < n; ++i) {
        const double left = i > 0 ? sqrt(beta_squared[i - 1]) : 0.0;
        const double right = i + 1 < n ? sqrt(beta_squared[i]) : 0.0;
        lo = fmin(lo, alpha[i] - left - right);
        hi = fmax(hi, alpha[i] + left + right);
    }
    const double margin = 4.0 * DBL_EPSILON * fmax(fabs(lo), fabs(hi)) + DBL_MIN;
    lo -= margin;
    hi += margin;
    for (int step = 0; step < 200; ++step) {
        const double mid = 0.5 * (lo + hi);
        if (!(mid > lo && mid < hi) || hi - lo <= 2.0 * DBL_EPSILON * fmax(fabs(lo), fabs(hi)))
            break;
        if (count_below(n, alpha, beta_squared, mid) == n)
            hi = mid;
        else
            lo = mid;
    }
    return ldexp(0.5 * (lo + hi), exponent);
}
