/* L-BFGS products: see pymf/lbfgs.h. */
#include "pymf/lbfgs.h"

#include <math.h>
#include <string.h>

int pymf_lbfgs_apply(int D, int n_pairs, const double *S, const double *Y, double gamma,
                     const double *g, double *out, double *work, const pymf_lbfgs_inner *inner)
{
    double *alpha = work;       /* n_pairs */
    double *rho = work + n_pairs; /* n_pairs; 0 marks a pair left out */
    int used = 0;
    for (int i = 0; i < n_pairs; ++i) {
        double sy;
        const int usable =
            pymf_lbfgs_pair_usable(D, S + (size_t)i * D, Y + (size_t)i * D, inner, &sy);
        rho[i] = usable ? 1.0 / sy : 0.0;
        used += rho[i] > 0.0;
    }
    memcpy(out, g, (size_t)D * sizeof(double));
    for (int i = n_pairs - 1; i >= 0; --i) {
        if (rho[i] == 0.0)
            continue;
        alpha[i] = rho[i] * pymf_lbfgs_dot(inner, S + (size_t)i * D, out, D);
        pymf_axpy(D, -alpha[i], Y + (size_t)i * D, out);
    }
    for (int d = 0; d < D; ++d)
        out[d] *= gamma;
    for (int i = 0; i < n_pairs; ++i) {
        if (rho[i] == 0.0)
            continue;
        const double beta = rho[i] * pymf_lbfgs_dot(inner, Y + (size_t)i * D, out, D);
        pymf_axpy(D, alpha[i] - beta, S + (size_t)i * D, out);
    }
    return used;
}

int pymf_lbfgs_sqrt_apply(int D, int n_pairs, const double *S, const double *Y, double gamma,
                          const double *z, double *out, double *work,
                          const pymf_lbfgs_inner *inner)
{
    /* H^m = (I - p q^T) H^(m-1) (I - q p^T) and B^m = (H^m)^-1 = C^m (C^m)^T with
     * C^m = (I - u v^T) C^(m-1), from H^0 = gamma I, C^0 = I / sqrt(gamma):
     *   b = B^(m-1) s, sigma = s^T b,
     *   p = s / (s^T y), q = sqrt(s^T y / sigma) b + y,
     *   v = s / sigma,   u = sqrt(sigma / s^T y) y + b,
     * so S^m = (I - p q^T) S^(m-1), S^0 = sqrt(gamma) I, satisfies S S^T = H. */
    double *P = work, *Q = work + (size_t)n_pairs * D;
    double *Uv = work + 2 * (size_t)n_pairs * D, *Vv = work + 3 * (size_t)n_pairs * D;
    double *b = work + 4 * (size_t)n_pairs * D;
    const double root_gamma = sqrt(gamma);
    int used = 0; /* pairs kept so far: the rows 0 .. used - 1 of P, Q, Uv, Vv */
    for (int i = 0; i < n_pairs; ++i) {
        const double *s = S + (size_t)i * D, *y = Y + (size_t)i * D;
        double sy;
        if (!pymf_lbfgs_pair_usable(D, s, y, inner, &sy))
            continue;
        /* b = C C^T s: C^T = (1/sqrt(gamma)) (I - v_1 u_1^T) ... (I - v_k u_k^T) */
        memcpy(b, s, (size_t)D * sizeof(double));
        for (int j = used - 1; j >= 0; --j)
            pymf_axpy(D, -pymf_lbfgs_dot(inner, Uv + (size_t)j * D, b, D), Vv + (size_t)j * D, b);
        for (int d = 0; d < D; ++d)
            b[d] /= gamma; /* 1/sqrt(gamma) from C^T and from C */
        for (int j = 0; j < used; ++j)
            pymf_axpy(D, -pymf_lbfgs_dot(inner, Vv + (size_t)j * D, b, D), Uv + (size_t)j * D, b);
        const double sigma = pymf_lbfgs_dot(inner, s, b, D);
        double *p = P + (size_t)used * D, *q = Q + (size_t)used * D;
        double *u = Uv + (size_t)used * D, *v = Vv + (size_t)used * D;
        const double c_q = sqrt(sy / sigma), c_u = sqrt(sigma / sy);
        for (int d = 0; d < D; ++d) {
            p[d] = s[d] / sy;
            q[d] = c_q * b[d] + y[d];
            v[d] = s[d] / sigma;
            u[d] = c_u * y[d] + b[d];
        }
        ++used;
    }
    /* out = (I - p_k q_k^T) ... (I - p_1 q_1^T) sqrt(gamma) z */
    for (int d = 0; d < D; ++d)
        out[d] = root_gamma * z[d];
    for (int j = 0; j < used; ++j)
        pymf_axpy(D, -pymf_lbfgs_dot(inner, Q + (size_t)j * D, out, D), P + (size_t)j * D, out);
    return used;
}

double pymf_lbfgs_scaled_gamma(int D, int n_pairs, const double *S, const double *Y,
                               double fallback, const pymf_lbfgs_inner *inner)
{
    for (int i = n_pairs - 1; i >= 0; --i) {
        const double *s = S + (size_t)i * D, *y = Y + (size_t)i * D;
        double sy;
        if (pymf_lbfgs_pair_usable(D, s, y, inner, &sy)) {
            /* s^T y > 0 makes y nonzero, so y^T y > 0; a product that still overflows or
             * underflows to a non-positive scale falls back rather than break H */
            const double scale = sy / pymf_lbfgs_dot(inner, y, y, D);
            return isfinite(scale) && scale > 0.0 ? scale : fallback;
        }
    }
    return fallback;
}

/* <a, b> = a^T G b for coefficient vectors over a basis with Gram matrix G (n x n). */
static double gram_dot(const double *a, const double *b, int n, const void *context)
{
    const double *gram = context;
    double total = 0.0;
    for (int i = 0; i < n; ++i)
        total += a[i] * pymf_dot_sequential(gram + (size_t)i * n, b, n);
    return total;
}

int pymf_lbfgs_gram_products(int m, const double *gram, double gamma, int scaled_gamma,
                             double *step, double *noise, int *usable, double *gamma_used,
                             double *work)
{
    const int n = 2 * m + 2;
    const pymf_lbfgs_inner inner = {gram_dot, gram};
    /* the basis vectors as coefficients: s_i = e_i, y_i = e_{m+i}, g = e_{2m}, z = e_{2m+1} */
    double *unit = work; /* (2m + 2) x n: rows e_0 .. e_{2m+1} */
    double *scratch = work + (size_t)(2 * m + 3) * n;
    memset(unit, 0, sizeof(double) * (size_t)(2 * m + 2) * n);
    for (int i = 0; i < n; ++i)
        unit[(size_t)i * n + i] = 1.0;
    const double *S = unit, *Y = unit + (size_t)m * n;
    const double *g = unit + (size_t)(2 * m) * n, *z = unit + (size_t)(2 * m + 1) * n;
    if (usable != NULL)
        for (int i = 0; i < m; ++i) {
            double sy;
            usable[i] = pymf_lbfgs_pair_usable(n, S + (size_t)i * n, Y + (size_t)i * n, &inner, &sy);
        }
    if (scaled_gamma)
        gamma = pymf_lbfgs_scaled_gamma(n, m, S, Y, gamma, &inner);
    if (gamma_used != NULL)
        *gamma_used = gamma;
    pymf_lbfgs_apply(n, m, S, Y, gamma, g, step, scratch, &inner);
    return pymf_lbfgs_sqrt_apply(n, m, S, Y, gamma, z, noise, scratch, &inner);
}
