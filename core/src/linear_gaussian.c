/* The linear-Gaussian model: see pymf/linear_gaussian.h. */
#include "pymf/linear_gaussian.h"

#include <string.h>

#include "pymf/linalg.h"

void pymf_lg_grad_potential(const pymf_linear_gaussian *m, const double *theta, const int64_t *idx,
                            int64_t n_idx, double *grad, double *mean_lik)
{
    const int D = m->dim;
    const int64_t n = idx == NULL ? m->n_data : n_idx;
    /* the likelihood part: sum over the entries of a_n (x_n - a_n . theta) / noise_var */
    double *lik = mean_lik != NULL ? mean_lik : grad;
    memset(lik, 0, (size_t)D * sizeof(double));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t row = idx == NULL ? i : idx[i];
        const double *a = m->A + row * D;
        const double r = (m->x[row] - pymf_dot_sequential(a, theta, D)) / m->noise_var;
        pymf_axpy(D, r, a, lik);
    }
    const double scale = n > 0 ? (double)m->n_data / (double)n : 0.0;
    for (int d = 0; d < D; ++d) {
        const double sum = lik[d];
        grad[d] = theta[d] / m->prior_var - scale * sum;
        if (mean_lik != NULL)
            mean_lik[d] = n > 0 ? sum / (double)n : 0.0;
    }
}
