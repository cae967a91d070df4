#include "pymf/tweedie.h"
#include "pymf/nmf_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pymf/linalg.h"

pymf_status pymf_tweedie_check(const pymf_tweedie *lik, pymf_error *err)
{
    if (lik->rank <= 0)
        return pymf_fail(err, PYMF_EINVAL, "rank must be a positive integer, got %d", lik->rank);
    if (!isfinite(lik->beta))
        return pymf_fail(err, PYMF_EINVAL, "beta must be finite");
    if (!(lik->phi > 0.0) || !isfinite(lik->phi))
        return pymf_fail(err, PYMF_EINVAL, "phi (dispersion) must be a positive finite number");
    return PYMF_OK;
}

PYMF_VECTOR_CLONES
void pymf_tweedie_block_grad(const pymf_tweedie *lik, const pymf_blocked_data *data, int b,
                             int c, double scale, const double *W, const double *Ht, double *gW,
                             double *gHt)
{
    const pymf_grid *grid = data->grid;
    const int K = lik->rank;
    const double beta = lik->beta, coef = scale / lik->phi;
    if (data->is_dense) {
        const int64_t r0 = grid->row_start[b], r1 = grid->row_start[b + 1];
        const int64_t c0 = grid->col_start[c], c1 = grid->col_start[c + 1];
        const int64_t J = grid->n_cols;
        for (int64_t i = r0; i < r1; ++i) {
            const double *w = W + i * K;
            double *gw = gW + i * K;
            const double *v_row = data->V + i * J;
            for (int64_t j = c0; j < c1; ++j) {
                const double *h = Ht + j * K;
                const double mu = pymf_tweedie_floor_mu(pymf_dot(w, h, K), beta);
                const double g = coef * pymf_tweedie_dlogp_dmu_floored(v_row[j], mu, beta, 1.0);
                double *gh = gHt + j * K;
                pymf_axpy2(K, g, h, gw, w, gh);
            }
        }
        return;
    }
    const int64_t blk = (int64_t)b * grid->n_blocks + c;
    for (int64_t e = data->block_ptr[blk]; e < data->block_ptr[blk + 1]; ++e) {
        const double *w = W + (int64_t)data->rows[e] * K;
        const double *h = Ht + (int64_t)data->cols[e] * K;
        const double mu = pymf_tweedie_floor_mu(pymf_dot(w, h, K), beta);
        const double g = coef * pymf_tweedie_dlogp_dmu_floored(data->vals[e], mu, beta, 1.0);
        double *gw = gW + (int64_t)data->rows[e] * K;
        double *gh = gHt + (int64_t)data->cols[e] * K;
        pymf_axpy2(K, g, h, gw, w, gh);
    }
}

double pymf_tweedie_block_loglik(const pymf_tweedie *lik, const pymf_blocked_data *data, int b,
                                 int c, const double *W, const double *Ht)
{
    const pymf_grid *grid = data->grid;
    const int K = lik->rank;
    double total = 0.0;
    if (data->is_dense) {
        const int64_t J = grid->n_cols;
        for (int64_t i = grid->row_start[b]; i < grid->row_start[b + 1]; ++i)
            for (int64_t j = grid->col_start[c]; j < grid->col_start[c + 1]; ++j)
                total += pymf_beta_divergence(data->V[i * J + j], pymf_dot(W + i * K, Ht + j * K, K),
                                              lik->beta);
    } else {
        const int64_t blk = (int64_t)b * grid->n_blocks + c;
        for (int64_t e = data->block_ptr[blk]; e < data->block_ptr[blk + 1]; ++e)
            total += pymf_beta_divergence(
                data->vals[e],
                pymf_dot(W + (int64_t)data->rows[e] * K, Ht + (int64_t)data->cols[e] * K, K),
                lik->beta);
    }
    return -total / lik->phi;
}

pymf_status pymf_tweedie_loglik(const pymf_tweedie *lik, const pymf_blocked_data *data,
                                const double *W, const double *Ht, int n_threads, double *out,
                                pymf_error *err)
{
    const int B = data->grid->n_blocks;
    double *partial = malloc(sizeof(double) * (size_t)B);
    if (partial == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    const int threads = n_threads > 0 ? n_threads : pymf_default_threads();
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int b = 0; b < B; ++b) {
        double row_piece = 0.0;
        for (int c = 0; c < B; ++c)
            row_piece += pymf_tweedie_block_loglik(lik, data, b, c, W, Ht);
        partial[b] = row_piece;
    }
    double total = 0.0;
    for (int b = 0; b < B; ++b)
        total += partial[b];
    free(partial);
    *out = total;
    return PYMF_OK;
}

pymf_status pymf_tweedie_grad(const pymf_tweedie *lik, const pymf_blocked_data *data,
                              const double *W, const double *Ht, int n_threads, double *gW,
                              double *gHt, pymf_error *err)
{
    (void)err;
    const pymf_grid *grid = data->grid;
    const int B = grid->n_blocks, K = lik->rank;
    const int threads = n_threads > 0 ? n_threads : pymf_default_threads();
    (void)threads;
    memset(gW, 0, sizeof(double) * (size_t)(grid->n_rows * K));
    memset(gHt, 0, sizeof(double) * (size_t)(grid->n_cols * K));
    for (int part = 0; part < B; ++part) {
#pragma omp parallel for num_threads(threads) schedule(static)
        for (int b = 0; b < B; ++b)
            pymf_tweedie_block_grad(lik, data, b, pymf_part_column(B, part, b), 1.0, W, Ht, gW, gHt);
    }
    return PYMF_OK;
}

void pymf_predict_entries(const double *W, const double *Ht, int rank, int64_t n,
                          const int64_t *rows, const int64_t *cols, double *out)
{
    for (int64_t e = 0; e < n; ++e)
        out[e] = pymf_dot(W + rows[e] * rank, Ht + cols[e] * rank, rank);
}

pymf_status pymf_nmf_model_check(const pymf_nmf_model *model, pymf_error *err)
{
    const pymf_status status = pymf_tweedie_check(&model->likelihood, err);
    if (status != PYMF_OK)
        return status;
    if (!(model->lam_w > 0.0) || !(model->lam_h > 0.0) || !isfinite(model->lam_w) ||
        !isfinite(model->lam_h))
        return pymf_fail(err, PYMF_EINVAL,
                         "prior parameters lam_w and lam_h must be positive and finite");
    return PYMF_OK;
}
