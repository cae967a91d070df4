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
 * Bit for bit the per-entry loop of the sparse path (mu_ij = pymf_dot(w_i, h_j), g_ij, then
 * gw_i += g_ij h_j and gh_j += g_ij w_i, entries in row-major order), which the golden chains
 * and the CUDA kernels pin, computed as three small matrix products over panels of
 * GRAD_PANEL x GRAD_PANEL entries:
 *   mu    tiles of MU_TILE_ROWS x MU_TILE_COLS entries at once, each entry's K-sum kept in
 *         pymf_dot's order (four partial sums over k mod 4, the k >= 4 floor(K/4) tail in the
 *         first, added as (s0 + s1) + (s2 + s3)): the vector lanes run over entries, never
 *         over k, so no sum is reassociated;
 *   gW    gw_i += sum_j g_ij h_j with j ascending (panels of columns in order);
 *   gHt   gh_j += sum_i g_ij w_i with i ascending (panels of rows in order).
 * Each output value sees the same additions in the same order as in the per-entry loop;
 * the two products write different arrays, so interleaving them never mattered. Multiplies
 * and adds stay separate (no FMA: -std=c99 turns contraction off), so the AVX2 and baseline
 * clones give the same bits too. */
#define GRAD_PANEL 32    /* rows and columns of a panel: its g_ij stay in a buffer in L1 */
#define MU_TILE_ROWS 4   /* a mu tile: 4 rows x 8 columns, 8 four-wide accumulators */
#define MU_TILE_COLS 8
#define GRAD_K_CHUNK 16  /* factor columns of a gW / gHt accumulator tile (4 vectors) */

#if defined(__GNUC__)
#define KERNEL_INLINE static inline __attribute__((always_inline))
#else
#define KERNEL_INLINE static inline
#endif

/* Four doubles as one value: GCC and Clang vector extensions, lowered to one AVX2 or two
 * SSE2 instructions per operation. Every operation is element by element, so a vector
 * computes exactly what four scalar statements would. vec4_at reads and writes four
 * doubles at any 8-byte aligned address (macros, not functions: no vector crosses a call,
 * so there is no vector calling convention to depend on). */
typedef double vec4 __attribute__((vector_size(32)));
typedef double vec4_unaligned __attribute__((vector_size(32), aligned(8), may_alias));
#define vec4_at(p) (*(vec4_unaligned *)(p))
#define vec4_broadcast(x) ((vec4){(x), (x), (x), (x)})

/* mu of one tile into mu_out (row stride GRAD_PANEL); ht holds the panel's columns of H
 * transposed (ht[k * GRAD_PANEL + c], already offset to the tile's first column). */
KERNEL_INLINE void mu_tile(const double *const w[MU_TILE_ROWS], const double *ht, int K,
                           double *mu_out)
{
    const int K4 = K - K % 4;
    vec4 part[4][MU_TILE_ROWS][2];
    for (int r = 0; r < 4; ++r) {
        vec4 acc[MU_TILE_ROWS][2];
        for (int a = 0; a < MU_TILE_ROWS; ++a)
            acc[a][0] = acc[a][1] = vec4_broadcast(0.0);
        /* partial sum r: k = r, r + 4, ... below K4, then (r = 0 only) the tail */
        for (int k = r; k < K4; k += 4) {
            const vec4 h0 = vec4_at(ht + k * GRAD_PANEL), h1 = vec4_at(ht + k * GRAD_PANEL + 4);
            for (int a = 0; a < MU_TILE_ROWS; ++a) {
                const vec4 wk = vec4_broadcast(w[a][k]);
                acc[a][0] += wk * h0;
                acc[a][1] += wk * h1;
            }
        }
        if (r == 0)
            for (int k = K4; k < K; ++k) {
                const vec4 h0 = vec4_at(ht + k * GRAD_PANEL), h1 = vec4_at(ht + k * GRAD_PANEL + 4);
                for (int a = 0; a < MU_TILE_ROWS; ++a) {
                    const vec4 wk = vec4_broadcast(w[a][k]);
                    acc[a][0] += wk * h0;
                    acc[a][1] += wk * h1;
                }
            }
        for (int a = 0; a < MU_TILE_ROWS; ++a) {
            part[r][a][0] = acc[a][0];
            part[r][a][1] = acc[a][1];
        }
    }
    for (int a = 0; a < MU_TILE_ROWS; ++a)
        for (int half = 0; half < 2; ++half)
            vec4_at(mu_out + a * GRAD_PANEL + 4 * half) =
                (part[0][a][half] + part[1][a][half]) + (part[2][a][half] + part[3][a][half]);
}

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

/* out_r[k0 .. k0 + 4 n_vec) += sum over s < n (ascending) of coef[r][s] * x_s[k0 ..), for
 * n_out outputs r at once (coef[r][s] = coefs[r * coef_stride + s * coef_step]); x_s is
 * x + s * K. The gW product (outputs = rows, s = columns) and the gHt product
 * (outputs = columns, s = rows) are both this. */
KERNEL_INLINE void accumulate_tile(int n_out, int n_vec, int k0, int K, int n,
                                   const double *coefs, int coef_stride, int coef_step,
                                   const double *x, double *const out[], int fresh)
{
    vec4 acc[2][GRAD_K_CHUNK / 4];
    for (int r = 0; r < n_out; ++r)
        for (int q = 0; q < n_vec; ++q)
            if (fresh)
                acc[r][q] = vec4_broadcast(0.0);
            else
                acc[r][q] = vec4_at(out[r] + k0 + 4 * q);
    for (int s = 0; s < n; ++s) {
        const double *xs = x + (size_t)s * (size_t)K + k0;
        vec4 xv[GRAD_K_CHUNK / 4];
        for (int q = 0; q < n_vec; ++q)
            xv[q] = vec4_at(xs + 4 * q);
        for (int r = 0; r < n_out; ++r) {
            const vec4 coef = vec4_broadcast(coefs[r * coef_stride + s * coef_step]);
            for (int q = 0; q < n_vec; ++q)
                acc[r][q] += coef * xv[q];
        }
    }
    for (int r = 0; r < n_out; ++r)
        for (int q = 0; q < n_vec; ++q)
            vec4_at(out[r] + k0 + 4 * q) = acc[r][q];
}

/* the same for one factor column k */
KERNEL_INLINE void accumulate_column(int n_out, int k, int K, int n, const double *coefs,
                                     int coef_stride, int coef_step, const double *x,
                                     double *const out[], int fresh)
{
    for (int r = 0; r < n_out; ++r) {
        double acc = fresh ? 0.0 : out[r][k];
        for (int s = 0; s < n; ++s)
            acc += coefs[r * coef_stride + s * coef_step] * x[(size_t)s * (size_t)K + k];
        out[r][k] = acc;
    }
}

/* all K columns of n_out (1 or 2) outputs: chunks of GRAD_K_CHUNK, then of 4, then 1 */
/* all K columns of n_out (1 or 2) outputs: chunks of GRAD_K_CHUNK, then of 4, then 1;
 * fresh: the outputs start from 0.0 instead of their stored values (the first panel of a
 * block whose gradient is written, not added: 0.0 + x, exactly what zeroed memory gives) */
KERNEL_INLINE void accumulate_outputs(int n_out, int K, int n, const double *coefs,
                                      int coef_stride, int coef_step, const double *x,
                                      double *const out[], int fresh)
{
    int k0 = 0;
    for (; k0 + GRAD_K_CHUNK <= K; k0 += GRAD_K_CHUNK)
        accumulate_tile(n_out, GRAD_K_CHUNK / 4, k0, K, n, coefs, coef_stride, coef_step, x,
                        out, fresh);
    for (; k0 + 4 <= K; k0 += 4)
        accumulate_tile(n_out, 1, k0, K, n, coefs, coef_stride, coef_step, x, out, fresh);
    for (; k0 < K; ++k0)
        accumulate_column(n_out, k0, K, n, coefs, coef_stride, coef_step, x, out, fresh);
}

/* The gradient of the panel of rows [i0, i0 + m) x columns [j0, j0 + n) (m, n <=
 * GRAD_PANEL); ht and g are GRAD_PANEL-wide scratch (K and GRAD_PANEL rows). */
KERNEL_INLINE void dense_panel_grad(const pymf_tweedie *lik, const double *V, int64_t J, int64_t i0,
                             int m, int64_t j0, int n, double coef, const double *W,
                             const double *Ht, double *gW, double *gHt, double *ht, double *g,
                             int fresh_rows, int fresh_cols)
{
    const int K = lik->rank;
    /* V's panel comes from memory (a part's blocks are scattered over V): ask for its rows
     * now, so that they arrive while mu is computed */
    for (int a = 0; a < m; ++a)
        for (int c = 0; c < n; c += 8)
            __builtin_prefetch(V + (i0 + a) * J + j0 + c, 0, 3);
    /* H's panel transposed, zero beyond its n columns (those mu are computed, never used) */
    for (int k = 0; k < K; ++k) {
        for (int c = 0; c < n; ++c)
            ht[k * GRAD_PANEL + c] = Ht[(j0 + c) * K + k];
        for (int c = n; c < GRAD_PANEL; ++c)
            ht[k * GRAD_PANEL + c] = 0.0;
    }
    const int n_tiles = (n + MU_TILE_COLS - 1) / MU_TILE_COLS;
    for (int a0 = 0; a0 < m; a0 += MU_TILE_ROWS) {
        /* a short last tile repeats its last row (computed, never stored) */
        const double *w[MU_TILE_ROWS];
        for (int a = 0; a < MU_TILE_ROWS; ++a)
            w[a] = W + (i0 + (a0 + a < m ? a0 + a : m - 1)) * K;
        /* mu into g's rows a0 .. a0 + 3 (all inside the buffer: a0 + 3 < GRAD_PANEL) */
        for (int tile = 0; tile < n_tiles; ++tile)
            mu_tile(w, ht + tile * MU_TILE_COLS, K, g + a0 * GRAD_PANEL + tile * MU_TILE_COLS);
    }
    grad_of_mu_any_beta(g, V + i0 * J + j0, J, m, n, lik->beta, coef);
    /* gw_i += sum_j g_ij h_j (j ascending), two rows at a time */
    int a = 0;
    for (; a + 2 <= m; a += 2) {
        double *const out[2] = {gW + (i0 + a) * K, gW + (i0 + a + 1) * K};
        accumulate_outputs(2, K, n, g + a * GRAD_PANEL, GRAD_PANEL, 1, Ht + j0 * K, out,
                           fresh_rows);
    }
    if (a < m) {
        double *const out[1] = {gW + (i0 + a) * K};
        accumulate_outputs(1, K, n, g + a * GRAD_PANEL, GRAD_PANEL, 1, Ht + j0 * K, out,
                           fresh_rows);
    }
    /* gh_j += sum_i g_ij w_i (i ascending), two columns at a time */
    int c = 0;
    for (; c + 2 <= n; c += 2) {
        double *const out[2] = {gHt + (j0 + c) * K, gHt + (j0 + c + 1) * K};
        accumulate_outputs(2, K, m, g + c, 1, GRAD_PANEL, W + i0 * K, out, fresh_cols);
    }
    if (c < n) {
        double *const out[1] = {gHt + (j0 + c) * K};
        accumulate_outputs(1, K, m, g + c, 1, GRAD_PANEL, W + i0 * K, out, fresh_cols);
    }
}

/* Block [r0, r1) x [c0, c1) of dense V (J columns) panel by panel: column panels outer and
 * row panels inner, both ascending, which keeps every gw_i's sum over j and every gh_j's
 * sum over i in ascending order. overwrite: the block's rows of gW and gHt are written
 * (their first panel starts from 0.0) rather than added to. Returns 0 (nothing done) when
 * the scratch cannot be had. */
PYMF_AVX2_CLONES
static int dense_block_grad(const pymf_tweedie *lik, const double *V, int64_t J, int64_t r0,
                            int64_t r1, int64_t c0, int64_t c1, double coef, const double *W,
                            const double *Ht, double *gW, double *gHt, int overwrite)
{
    double *scratch = malloc(sizeof(double) * (size_t)(lik->rank + GRAD_PANEL) * GRAD_PANEL);
    if (scratch == NULL)
        return 0;
    double *ht = scratch, *g = scratch + (size_t)lik->rank * GRAD_PANEL;
    for (int64_t j0 = c0; j0 < c1; j0 += GRAD_PANEL) {
        const int n = (int)(c1 - j0 < GRAD_PANEL ? c1 - j0 : GRAD_PANEL);
        for (int64_t i0 = r0; i0 < r1; i0 += GRAD_PANEL) {
            const int m = (int)(r1 - i0 < GRAD_PANEL ? r1 - i0 : GRAD_PANEL);
            dense_panel_grad(lik, V, J, i0, m, j0, n, coef, W, Ht, gW, gHt, ht, g,
                             overwrite && j0 == c0, overwrite && i0 == r0);
        }
    }
    free(scratch);
    return 1;
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
