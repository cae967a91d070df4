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

/* ---- The dense block gradient, register-tiled ----
 *
 * Bit for bit the per-entry loop of the sparse path (mu_ij = pymf_dot_fused(w_i, h_j), g_ij,
 * then gw_i = fma(g_ij, h_j, gw_i) and gh_j = fma(g_ij, w_i, gh_j), pymf_axpy2_fused, entries
 * in row-major order), which the golden chains and the CUDA kernels pin, computed as three
 * small matrix products over panels of GRAD_PANEL x GRAD_PANEL entries:
 *   mu    tiles of MU_TILE_ROWS rows x two vectors of columns, each entry's K-sum kept in
 *         pymf_dot_fused's order (four partial sums over k mod 4, the k >= 4 floor(K/4) tail
 *         in the first, added as (s0 + s1) + (s2 + s3)): the vector lanes run over entries,
 *         never over k, so no sum is reassociated;
 *   gW    gw_i += sum_j g_ij h_j with j ascending (panels of columns in order);
 *   gHt   gh_j += sum_i g_ij w_i with i ascending (panels of rows in order).
 * Each output value sees the same terms in the same order as in the per-entry loop, each
 * added by one fused multiply-add; the two products write different arrays, so
 * interleaving them never mattered. The FMAs are explicit C99 fma() calls (contraction
 * stays off: -std=c99), correctly rounded wherever they run: one instruction in the
 * x86-64-v3 clone and in the x86-64-v4 version with 8-wide tiles, glibc's fma in the
 * baseline clone, so every build gives the same bits (the kernels are written once, in
 * tweedie_dense.h and dense_tiles.h, for any number of lanes). Why fused: an FMA does a
 * multiply-add in one instruction where separate ones take two, which the gradient's
 * products are bound by (docs/speed.md, "FMA, explicitly"). */
#include "dense_vec.h" /* GRAD_PANEL, MU_TILE_ROWS */

/* g = coef * d/dmu log p(v | floor(mu)) in place over the m x n entries of a panel (g's
 * rows GRAD_PANEL apart, v's rows J apart). Called with a literal beta for the common
 * likelihoods, so that the branches on beta fold away and the loop vectorises; the formula
 * is the one of tweedie.h either way. */
KERNEL_INLINE void grad_of_mu(double *g, const double *v, int64_t J, int m, int n, double beta,
                              double coef)
{
    for (int a = 0; a < m; ++a) {
        double *restrict g_row = g + a * GRAD_PANEL;
        const double *restrict v_row = v + a * J;
        for (int c = 0; c < n; ++c)
            g_row[c] = coef * pymf_tweedie_dlogp_dmu_floored(
                                  v_row[c], pymf_tweedie_floor_mu(g_row[c], beta), beta, 1.0);
    }
}

KERNEL_INLINE void grad_of_mu_any_beta(double *g, const double *v, int64_t J, int m, int n,
                                       double beta, double coef)
{
    if (beta == 1.0)
        grad_of_mu(g, v, J, m, n, 1.0, coef);
    else if (beta == 2.0)
        grad_of_mu(g, v, J, m, n, 2.0, coef);
    else if (beta == 0.0)
        grad_of_mu(g, v, J, m, n, 0.0, coef);
    else
        grad_of_mu(g, v, J, m, n, beta, coef);
}

/* the tiles of each instance (dense_width.h) */
#define DENSE_LANES 4
#define DENSE_PORTABLE
#include "dense_width.h"
#include "tweedie_dense.h"

#if defined(PYMF_DENSE_W8)
#define DENSE_LANES 4
#include "dense_width.h"
#include "tweedie_dense.h"

#define DENSE_LANES 8
#include "dense_width.h"
#include "tweedie_dense.h"
#endif

/* The widest tiles this CPU has: AVX-512, AVX2 with FMA, else the portable ones (each of
 * their FMAs a call to glibc's fma: slow, the same bits) */
static int dense_block_grad(const pymf_tweedie *lik, const double *V, int64_t J, int64_t r0,
                            int64_t r1, int64_t c0, int64_t c1, double coef, const double *W,
                            const double *Ht, double *gW, double *gHt, int overwrite)
{
#if defined(PYMF_DENSE_W8)
    if (__builtin_cpu_supports("x86-64-v4"))
        return dense_block_grad_w8(lik, V, J, r0, r1, c0, c1, coef, W, Ht, gW, gHt, overwrite);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return dense_block_grad_w4(lik, V, J, r0, r1, c0, c1, coef, W, Ht, gW, gHt, overwrite);
#endif
    return dense_block_grad_w4p(lik, V, J, r0, r1, c0, c1, coef, W, Ht, gW, gHt, overwrite);
}

/* pymf_tweedie_block_grad (overwrite = 0) and pymf_tweedie_block_grad_set (overwrite = 1) */
PYMF_VECTOR_CLONES
static void block_grad(const pymf_tweedie *lik, const pymf_blocked_data *data, int b, int c,
                       double scale, const double *W, const double *Ht, double *gW,
                       double *gHt, int overwrite)
{
    const pymf_grid *grid = data->grid;
    const int K = lik->rank;
    const double beta = lik->beta, coef = scale / lik->phi;
    const int64_t r0 = grid->row_start[b], r1 = grid->row_start[b + 1];
    const int64_t c0 = grid->col_start[c], c1 = grid->col_start[c + 1];
    if (data->is_dense && dense_block_grad(lik, data->V, grid->n_cols, r0, r1, c0, c1, coef, W,
                                           Ht, gW, gHt, overwrite))
        return;
    if (overwrite) {
        memset(gW + r0 * K, 0, sizeof(double) * (size_t)((r1 - r0) * K));
        memset(gHt + c0 * K, 0, sizeof(double) * (size_t)((c1 - c0) * K));
    }
    if (data->is_dense) {
        /* no memory for the panel scratch (a few KB): the per-entry loop, the same bits */
        const int64_t J = grid->n_cols;
        for (int64_t i = r0; i < r1; ++i) {
            const double *w = W + i * K;
            double *gw = gW + i * K;
            const double *v_row = data->V + i * J;
            for (int64_t j = c0; j < c1; ++j) {
                const double *h = Ht + j * K;
                const double mu = pymf_tweedie_floor_mu(pymf_dot_fused(w, h, K), beta);
                const double g = coef * pymf_tweedie_dlogp_dmu_floored(v_row[j], mu, beta, 1.0);
                double *gh = gHt + j * K;
                pymf_axpy2_fused(K, g, h, gw, w, gh);
            }
        }
        return;
    }
    const int64_t blk = (int64_t)b * grid->n_blocks + c;
    const int64_t e0 = data->block_ptr[blk], e1 = data->block_ptr[blk + 1];
    /* one loop per entry format: no format test per entry */
    PYMF_FOR_ENTRY_FORMAT(data->format, F,
        for (int64_t e = e0; e < e1; ++e) {
            const int64_t i = pymf_entry_row_as(data, e, F), j = pymf_entry_col_as(data, e, F);
            const double *w = W + i * K;
            const double *h = Ht + j * K;
            const double mu = pymf_tweedie_floor_mu(pymf_dot_fused(w, h, K), beta);
            const double g = coef * pymf_tweedie_dlogp_dmu_floored(
                                        pymf_entry_value_as(data, e, F), mu, beta, 1.0);
            pymf_axpy2_fused(K, g, h, gW + i * K, w, gHt + j * K);
        })
}

void pymf_tweedie_block_grad(const pymf_tweedie *lik, const pymf_blocked_data *data, int b,
                             int c, double scale, const double *W, const double *Ht, double *gW,
                             double *gHt)
{
    block_grad(lik, data, b, c, scale, W, Ht, gW, gHt, 0);
}

void pymf_tweedie_block_grad_set(const pymf_tweedie *lik, const pymf_blocked_data *data, int b,
                                 int c, double scale, const double *W, const double *Ht,
                                 double *gW, double *gHt)
{
    block_grad(lik, data, b, c, scale, W, Ht, gW, gHt, 1);
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
        const int64_t e0 = data->block_ptr[blk], e1 = data->block_ptr[blk + 1];
        PYMF_FOR_ENTRY_FORMAT(data->format, F,
            for (int64_t e = e0; e < e1; ++e)
                total += pymf_beta_divergence(
                    pymf_entry_value_as(data, e, F),
                    pymf_dot(W + pymf_entry_row_as(data, e, F) * K,
                             Ht + pymf_entry_col_as(data, e, F) * K, K),
                    lik->beta);)
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
