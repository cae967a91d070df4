/* HAMCMC for Tweedie matrix factorisation on the PSGLD block grid: see pymf/hamcmc_mf.h. */
#include "pymf/hamcmc_mf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_rng.h>

#include "pymf/lbfgs.h"
#include "pymf/linalg.h"
#include "pymf/philox.h"

/* coordinates per tile of the Gram accumulation: the basis vectors' tiles stay in cache */
#define GRAM_TILE 512
/* An iteration forks threads three times; below this much work ((observed entries + rows +
 * columns) x K) it runs on one thread, where the fork/join would cost more than the work.
 * The results are the same either way. */
#define PARALLEL_WORK 65536

/* what went wrong in a block (the first failing block, in block order, is reported) */
enum { BLOCK_OK = 0, BLOCK_GRAD_FROM = 1, BLOCK_STATE = 2, BLOCK_GRAD_NEW = 3 };

struct pymf_hamcmc_mf {
    pymf_nmf_model model;           /* the Tweedie model (has_model), else unused */
    int has_model;
    pymf_hamcmc_potential potential; /* grad U by block: the Tweedie model's, or the caller's */
    int K;                          /* rank */
    const pymf_blocked_data *data;
    pymf_hamcmc_mf_config config;
    int M, n_planes, n_max; /* memory, 3M - 2 stored planes, 2M basis vectors at most */
    int64_t w_len, h_len;   /* I K and J K */
    int64_t t, skipped_pairs;
    double *W_store, *H_store; /* n_planes planes each: window, s pairs, y pairs */
    /* scratch in grid order, each block writing only its rows */
    double *gW, *gH;   /* grad U_t at the state being moved */
    double *zW, *zH;   /* the noise */
    double *nW, *nH;   /* the new state */
    double *yW, *yH;   /* grad U_t(theta_{t-M}), then y_t */
    double *g2W, *g2H; /* grad U_t(theta_t) */
    double *partials;  /* B x n_max^2: the blocks' Gram matrices */
    double *gram;      /* n_max^2 */
    double *coef_step, *coef_noise, *work;
    int *usable;
    int *status; /* per block */
    int64_t *part_sizes, n_observed;
    gsl_rng *rng;
};

void pymf_hamcmc_mf_destroy(pymf_hamcmc_mf *s)
{
    if (s == NULL)
        return;
    double *arrays[] = {s->W_store, s->H_store, s->gW, s->gH, s->zW, s->zH, s->nW, s->nH,
                        s->yW, s->yH, s->g2W, s->g2H, s->partials, s->gram, s->coef_step,
                        s->coef_noise, s->work};
    for (size_t i = 0; i < sizeof(arrays) / sizeof(arrays[0]); ++i)
        free(arrays[i]);
    free(s->usable);
    free(s->status);
    free(s->part_sizes);
    if (s->rng != NULL)
        gsl_rng_free(s->rng);
    free(s);
}

/* grad U of the Tweedie model over one block: the prior's gradient minus scale times the
 * likelihood's (the pymf_hamcmc_potential of pymf_hamcmc_mf_create) */
static int tweedie_block_grad(const void *ctx, const pymf_blocked_data *data, int b, int c,
                              double scale, const double *W, const double *Ht, double *gW,
                              double *gHt);

pymf_hamcmc_mf *pymf_hamcmc_mf_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                                      const pymf_hamcmc_mf_config *config, pymf_error *err)
{
    pymf_gsl_quiet();
    if (pymf_nmf_model_check(model, err) != PYMF_OK)
        return NULL;
    const pymf_hamcmc_potential potential = {tweedie_block_grad, NULL, model->likelihood.rank,
                                             model->prior == PYMF_PRIOR_EXPONENTIAL, 0};
    pymf_hamcmc_mf *s = pymf_hamcmc_mf_create_potential(&potential, data, config, err);
    if (s != NULL) {
        s->model = *model;
        s->has_model = 1;
        s->potential.ctx = &s->model;
    }
    return s;
}

pymf_hamcmc_mf *pymf_hamcmc_mf_create_potential(const pymf_hamcmc_potential *potential,
                                                const pymf_blocked_data *data,
                                                const pymf_hamcmc_mf_config *config,
                                                pymf_error *err)
{
    pymf_gsl_quiet();
    if (potential->grad == NULL || potential->rank <= 0) {
        pymf_fail(err, PYMF_EINVAL, "the potential needs a gradient function and a rank > 0, "
                  "got rank %d", potential->rank);
        return NULL;
    }
    if (config->memory < 2 || config->memory > 64) {
        pymf_fail(err, PYMF_EINVAL, "HAMCMC needs a memory M in [2, 64] (the pairs skip theta_{t-M}), got %d",
                  config->memory);
        return NULL;
    }
    if (!(config->gamma > 0.0 && isfinite(config->gamma))) {
        pymf_fail(err, PYMF_EINVAL, "gamma (H^0 = gamma I) must be positive and finite, got %g",
                  config->gamma);
        return NULL;
    }
    if (!(config->lambda >= 0.0 && isfinite(config->lambda))) {
        pymf_fail(err, PYMF_EINVAL, "lambda (y += lambda s) must be >= 0 and finite, got %g",
                  config->lambda);
        return NULL;
    }
    if (data->n_observed <= 0) {
        pymf_fail(err, PYMF_EINVAL, "the data has no observed entries");
        return NULL;
    }
    const int B = data->grid->n_blocks;
    if (config->only_row_block >= B) {
        pymf_fail(err, PYMF_EINVAL, "only_row_block must be a row piece (< B), got %d",
                  config->only_row_block);
        return NULL;
    }
    pymf_hamcmc_mf *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory");
        return NULL;
    }
    s->potential = *potential;
    s->K = potential->rank;
    s->data = data;
    s->config = *config;
    const int K = s->K, M = config->memory;
    s->M = M;
    s->n_planes = 3 * M - 2;
    s->n_max = 2 * M;
    s->w_len = data->grid->n_rows * K;
    s->h_len = data->grid->n_cols * K;
    const size_t w = (size_t)s->w_len, h = (size_t)s->h_len, nn = (size_t)s->n_max * s->n_max;
    s->W_store = calloc((size_t)s->n_planes * w, sizeof(double));
    s->H_store = calloc((size_t)s->n_planes * h, sizeof(double));
    double **side_w[] = {&s->gW, &s->zW, &s->nW, &s->yW, &s->g2W};
    double **side_h[] = {&s->gH, &s->zH, &s->nH, &s->yH, &s->g2H};
    int ok = s->W_store != NULL && s->H_store != NULL;
    for (int i = 0; i < 5; ++i) {
        *side_w[i] = calloc(w, sizeof(double));
        *side_h[i] = calloc(h, sizeof(double));
        ok = ok && *side_w[i] != NULL && *side_h[i] != NULL;
    }
    s->partials = calloc((size_t)B * nn, sizeof(double));
    s->gram = calloc(nn, sizeof(double));
    s->coef_step = calloc((size_t)s->n_max, sizeof(double));
    s->coef_noise = calloc((size_t)s->n_max, sizeof(double));
    s->work = calloc((size_t)pymf_lbfgs_gram_work(M - 1), sizeof(double));
    s->usable = calloc((size_t)M, sizeof(int));
    s->status = calloc((size_t)B, sizeof(int));
    s->part_sizes = calloc((size_t)B, sizeof(int64_t));
    s->rng = gsl_rng_alloc(gsl_rng_mt19937);
    ok = ok && s->partials && s->gram && s->coef_step && s->coef_noise && s->work && s->usable &&
         s->status && s->part_sizes && s->rng;
    if (!ok) {
        pymf_hamcmc_mf_destroy(s);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for the HAMCMC state (%d planes of %lld + %lld values)",
                  s->n_planes, (long long)w, (long long)h);
        return NULL;
    }
    for (int p = 0; p < B; ++p)
        s->part_sizes[p] = pymf_part_size(data, p);
    s->n_observed = data->n_observed;
    return s;
}

pymf_status pymf_hamcmc_mf_set_totals(pymf_hamcmc_mf *s, int64_t n_observed,
                                      const int64_t *part_sizes, pymf_error *err)
{
    return pymf_set_part_totals(s->data->grid->n_blocks, n_observed, part_sizes, s->part_sizes,
                                &s->n_observed, err);
}

static double *W_plane(const pymf_hamcmc_mf *s, int q) { return s->W_store + (size_t)q * s->w_len; }
static double *H_plane(const pymf_hamcmc_mf *s, int q) { return s->H_store + (size_t)q * s->h_len; }
/* the window slot of theta_u, and the s / y planes of the pair of iteration tau */
static int window_slot(const pymf_hamcmc_mf *s, int64_t u) { return (int)(u % s->M); }
static int s_plane(const pymf_hamcmc_mf *s, int64_t tau) { return s->M + (int)(tau % (s->M - 1)); }
static int y_plane(const pymf_hamcmc_mf *s, int64_t tau) { return 2 * s->M - 1 + (int)(tau % (s->M - 1)); }

pymf_status pymf_hamcmc_mf_start(pymf_hamcmc_mf *s, const double *W, const double *Ht,
                                 pymf_error *err)
{
    const pymf_grid *g = s->data->grid;
    const int K = s->K;
    const int non_negative = s->potential.non_negative;
    /* checked into the scratch first: a refused start leaves the chain as it was */
    const pymf_status status = pymf_factors_load(s->nW, s->nH, W, Ht, g->n_rows, g->n_cols, K,
                                                 non_negative, err);
    if (status != PYMF_OK)
        return status;
    memset(s->W_store, 0, sizeof(double) * (size_t)s->n_planes * (size_t)s->w_len);
    memset(s->H_store, 0, sizeof(double) * (size_t)s->n_planes * (size_t)s->h_len);
    memcpy(W_plane(s, 0), s->nW, sizeof(double) * (size_t)s->w_len);
    memcpy(H_plane(s, 0), s->nH, sizeof(double) * (size_t)s->h_len);
    s->t = 0;
    s->skipped_pairs = 0;
    return PYMF_OK;
}

void pymf_hamcmc_mf_get_state(const pymf_hamcmc_mf *s, double *W, double *Ht, int64_t *t)
{
    const int slot = window_slot(s, s->t);
    if (W != NULL)
        memcpy(W, W_plane(s, slot), sizeof(double) * (size_t)s->w_len);
    if (Ht != NULL)
        memcpy(Ht, H_plane(s, slot), sizeof(double) * (size_t)s->h_len);
    if (t != NULL)
        *t = s->t;
}

void pymf_hamcmc_mf_current(const pymf_hamcmc_mf *s, const double **W, const double **Ht)
{
    const int slot = window_slot(s, s->t);
    *W = W_plane(s, slot);
    *Ht = H_plane(s, slot);
}

uint64_t pymf_hamcmc_mf_noise_seed(const pymf_hamcmc_mf *s) { return s->config.noise_seed; }

void pymf_hamcmc_mf_set_threads(pymf_hamcmc_mf *s, int n_threads) { s->config.n_threads = n_threads; }

int64_t pymf_hamcmc_mf_skipped_pairs(const pymf_hamcmc_mf *s) { return s->skipped_pairs; }

int pymf_hamcmc_mf_part(const pymf_hamcmc_mf *s, int64_t t)
{
    return pymf_choose_part(s->config.part_order, s->data->grid->n_blocks, s->part_sizes,
                            s->n_observed, s->config.schedule_seed, t, s->rng);
}

/* ---------------------------------------------------------------- one block's work ---- */

typedef struct {
    int b, c;               /* row piece, column piece */
    int64_t w0, w1, h0, h1; /* its coordinates in W's and H^T's planes */
} block_span;

static block_span span_of(const pymf_hamcmc_mf *s, int b, int part)
{
    const pymf_grid *g = s->data->grid;
    const int K = s->K;
    const int c = pymf_part_column(g->n_blocks, part, b);
    const block_span span = {b, c, g->row_start[b] * K, g->row_start[b + 1] * K,
                             g->col_start[c] * K, g->col_start[c + 1] * K};
    return span;
}

static double part_scale(const pymf_hamcmc_mf *s, int part)
{
    const int64_t size = s->part_sizes[part];
    return size > 0 ? (double)s->n_observed / (double)size : 0.0;
}

/* grad U over the block's coordinates at (W, Ht) (full grid-order arrays, only the block's
 * rows read) into (gW, gHt) (only the block's rows written), by the potential. Returns
 * whether every value is finite. */
static int block_grad_potential(const pymf_hamcmc_mf *s, const block_span *span, double scale,
                                const double *W, const double *Ht, double *gW, double *gHt)
{
    return s->potential.grad(s->potential.ctx, s->data, span->b, span->c, scale, W, Ht, gW,
                             gHt);
}

static int tweedie_block_grad(const void *ctx, const pymf_blocked_data *data, int b, int c,
                              double scale, const double *W, const double *Ht, double *gW,
                              double *gHt)
{
    const pymf_nmf_model *model = ctx;
    const pymf_grid *g = data->grid;
    const int K = model->likelihood.rank;
    const int64_t w0 = g->row_start[b] * K, w1 = g->row_start[b + 1] * K;
    const int64_t h0 = g->col_start[c] * K, h1 = g->col_start[c + 1] * K;
    if (scale > 0.0) {
        pymf_tweedie_block_grad_set(&model->likelihood, data, b, c, scale, W, Ht, gW, gHt);
    } else {
        memset(gW + w0, 0, sizeof(double) * (size_t)(w1 - w0));
        memset(gHt + h0, 0, sizeof(double) * (size_t)(h1 - h0));
    }
    const int exponential = model->prior == PYMF_PRIOR_EXPONENTIAL;
    /* -d/dx log p(x): lam for the exponential prior (x >= 0), lam x for N(0, 1/lam) */
    const double lam_w = model->lam_w, lam_h = model->lam_h;
    for (int64_t d = w0; d < w1; ++d)
        gW[d] = (exponential ? lam_w : lam_w * W[d]) - gW[d];
    for (int64_t d = h0; d < h1; ++d)
        gHt[d] = (exponential ? lam_h : lam_h * Ht[d]) - gHt[d];
    return pymf_all_finite(gW + w0, w1 - w0) && pymf_all_finite(gHt + h0, h1 - h0);
}

/* The basis of iteration t's products over this block: the m pairs t-M+1 .. t-1 (s, then
 * y, oldest first), the gradient and the noise; W segments in wv, H^T segments in hv. */
static int basis(const pymf_hamcmc_mf *s, int64_t t, const double *gW, const double *gH,
                 const double *zW, const double *zH, const double **wv, const double **hv)
{
    const int m = s->M - 1;
    for (int i = 0; i < m; ++i) {
        const int64_t tau = t - m + i;
        wv[i] = W_plane(s, s_plane(s, tau));
        hv[i] = H_plane(s, s_plane(s, tau));
        wv[m + i] = W_plane(s, y_plane(s, tau));
        hv[m + i] = H_plane(s, y_plane(s, tau));
    }
    wv[2 * m] = gW;
    hv[2 * m] = gH;
    wv[2 * m + 1] = zW;
    hv[2 * m + 1] = zH;
    return 2 * m + 2;
}

/* G[i][j] += sum over coordinates [d0, d1) of v_i v_j (j >= i), one running sum each in
 * coordinate order (tiles only reorder the loops, not any sum). The pairs (i, j) are taken
 * four at a time and their four sums advanced together: each is still one sum in
 * coordinate order (the same bits as one pair at a time), but a single running sum waits
 * on its previous add every coordinate, and four independent ones keep the adder busy
 * (the Gram matrix was a quarter of an M = 2 iteration on MovieLens-100K). */
static void gram_accumulate(int n, const double **v, int64_t d0, int64_t d1, double *G)
{
    for (int64_t a = d0; a < d1; a += GRAM_TILE) {
        const int64_t b = a + GRAM_TILE < d1 ? a + GRAM_TILE : d1;
        int i = 0, j = 0; /* the next pair, in the order (0, 0), (0, 1), .., (1, 1), .. */
        while (i < n) {
            int pi[4], pj[4], k = 0;
            for (; k < 4 && i < n; ++k) {
                pi[k] = i;
                pj[k] = j;
                if (++j == n)
                    j = ++i;
            }
            if (k == 4) {
                const double *x0 = v[pi[0]], *x1 = v[pi[1]], *x2 = v[pi[2]], *x3 = v[pi[3]];
                const double *y0 = v[pj[0]], *y1 = v[pj[1]], *y2 = v[pj[2]], *y3 = v[pj[3]];
                double s0 = G[pi[0] * n + pj[0]], s1 = G[pi[1] * n + pj[1]];
                double s2 = G[pi[2] * n + pj[2]], s3 = G[pi[3] * n + pj[3]];
                for (int64_t d = a; d < b; ++d) {
                    s0 += x0[d] * y0[d];
                    s1 += x1[d] * y1[d];
                    s2 += x2[d] * y2[d];
                    s3 += x3[d] * y3[d];
                }
                G[pi[0] * n + pj[0]] = s0;
                G[pi[1] * n + pj[1]] = s1;
                G[pi[2] * n + pj[2]] = s2;
                G[pi[3] * n + pj[3]] = s3;
                continue;
            }
            for (int q = 0; q < k; ++q) {
                const double *x = v[pi[q]], *y = v[pj[q]];
                double sum = G[pi[q] * n + pj[q]];
                for (int64_t d = a; d < b; ++d)
                    sum += x[d] * y[d];
                G[pi[q] * n + pj[q]] = sum;
            }
        }
    }
}

/* The block's Gram matrix (n x n, packed with row stride n) of the basis of iteration t:
 * one running sum over its W coordinates, then its H^T coordinates. */
static void block_gram(const pymf_hamcmc_mf *s, const block_span *span, int64_t t, double *G)
{
    const double *wv[2 * 64], *hv[2 * 64];
    const int n = basis(s, t, s->gW, s->gH, s->zW, s->zH, wv, hv);
    memset(G, 0, sizeof(double) * (size_t)n * n);
    gram_accumulate(n, wv, span->w0, span->w1, G);
    gram_accumulate(n, hv, span->h0, span->h1, G);
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < i; ++j)
            G[i * n + j] = G[j * n + i];
}

/* quasi-Newton from iteration 2M + 1, unless the chain is plain (SGLD's) Langevin */
static int quasi_newton(const pymf_hamcmc_mf *s, int64_t t)
{
    return !s->config.langevin_only && t > 2 * (int64_t)s->M;
}

/* Phase one of iteration t in block b: the gradient at the state being moved, the noise and
 * (quasi-Newton iterations) the block's Gram matrix into partial (n_max^2 doubles). */
static int begin_block(pymf_hamcmc_mf *s, int b, int part, int64_t t, double *partial)
{
    const block_span span = span_of(s, b, part);
    const int K = s->K;
    const int from = window_slot(s, quasi_newton(s, t) ? t - s->M : t - 1);
    const int finite = block_grad_potential(s, &span, part_scale(s, part), W_plane(s, from),
                                            H_plane(s, from), s->gW, s->gH);
    pymf_noise_rows(s->config.noise_seed, PYMF_STREAM_W, (uint64_t)t, (uint32_t)(span.w0 / K),
                    (uint32_t)((span.w1 - span.w0) / K), K, s->zW + span.w0);
    pymf_noise_rows(s->config.noise_seed, PYMF_STREAM_H, (uint64_t)t, (uint32_t)(span.h0 / K),
                    (uint32_t)((span.h1 - span.h0) / K), K, s->zH + span.h0);
    memset(partial, 0, sizeof(double) * (size_t)s->n_max * s->n_max);
    if (finite && quasi_newton(s, t))
        block_gram(s, &span, t, partial);
    return finite ? BLOCK_OK : BLOCK_GRAD_FROM;
}

/* G = sum of the blocks' matrices in block order, from 0.0 (so a -0.0 anywhere gives the
 * same bits whichever way the partial matrices travelled). */
static void reduce_gram(const pymf_hamcmc_mf *s, const double *partials, double *G)
{
    const int B = s->data->grid->n_blocks;
    const size_t nn = (size_t)s->n_max * s->n_max;
    for (size_t k = 0; k < nn; ++k) {
        double sum = 0.0;
        for (int b = 0; b < B; ++b)
            sum += partials[(size_t)b * nn + k];
        G[k] = sum;
    }
}

/* A tamed chain leaves out the pairs with s^T y < lambda s^T s (pymf_hamcmc_potential) by
 * zeroing their s^T y in the reduced Gram matrix G (n x n), which the L-BFGS products then
 * skip as they skip any pair with s^T y <= 0. A plain chain's G is left as it is. */
static void drop_concave_pairs(const pymf_hamcmc_mf *s, double *G)
{
    if (!s->potential.tamed)
        return;
    const int m = s->M - 1, n = s->n_max;
    for (int i = 0; i < m; ++i)
        if (G[i * n + m + i] < s->config.lambda * G[i * n + i])
            G[i * n + m + i] = G[(m + i) * n + i] = 0.0;
}

/* The coefficients of H_t grad and S_t z over the basis, from the reduced Gram matrix;
 * counts the pairs left out at their first use. */
static void coefficients(pymf_hamcmc_mf *s, int64_t t)
{
    const int m = s->M - 1;
    drop_concave_pairs(s, s->gram);
    pymf_lbfgs_gram_products(m, s->gram, s->config.gamma, s->config.scaled_gamma,
                             s->coef_step, s->coef_noise, s->usable, NULL, s->work);
    /* at 2M + 1 every pair in memory is used for the first time, later only the newest */
    const int first = t == 2 * (int64_t)s->M + 1 ? 0 : m - 1;
    for (int i = first; i < m; ++i)
        s->skipped_pairs += !s->usable[i];
}

/* A drift move delta of a tamed chain: delta / (1 + |delta|), below 1 in size and
 * delta - O(delta^2) where delta is small (pymf_hamcmc_potential). A non-finite delta stays
 * non-finite, so a diverging gradient is still reported, not hidden. */
static double tame(double delta)
{
    return delta / (1.0 + fabs(delta));
}

/* The new state of one side's coordinates [d0, d1): quasi-Newton (n basis vectors v) or a
 * gamma-preconditioned Langevin step from `from` (its drift tamed where the potential asks),
 * mirrored for the exponential prior. The plain expressions are kept as they were: the
 * Tweedie chains' bits do not change. */
static int new_coordinates(const pymf_hamcmc_mf *s, int64_t t, double eps, const double *from,
                           const double *grad, const double *z, const double **v, int n,
                           int64_t d0, int64_t d1, double *next)
{
    const int mirror = s->potential.non_negative, tamed = s->potential.tamed;
    const double root = sqrt(2.0 * eps), gamma = s->config.gamma, root_gamma = sqrt(gamma);
    const int qn = quasi_newton(s, t);
    int finite = 1;
    for (int64_t d = d0; d < d1; ++d) {
        double x;
        if (qn) {
            double step = 0.0, noise = 0.0;
            for (int i = 0; i < n; ++i) {
                step += s->coef_step[i] * v[i][d];
                noise += s->coef_noise[i] * v[i][d];
            }
            x = tamed ? from[d] - tame(eps * step) + root * noise
                      : from[d] - eps * step + root * noise;
        } else {
            x = tamed ? from[d] - tame(eps * gamma * grad[d]) + root * root_gamma * z[d]
                      : from[d] - eps * gamma * grad[d] + root * root_gamma * z[d];
        }
        x = mirror ? fabs(x) : x;
        next[d] = x;
        finite &= isfinite(x) ? 1 : 0;
    }
    return finite;
}

/* Phase two of iteration t in block b: the new state and (t > M) y_t, into scratch only. */
static int finish_block(pymf_hamcmc_mf *s, int b, int part, int64_t t, double eps)
{
    const block_span span = span_of(s, b, part);
    const int qn = quasi_newton(s, t);
    const int from = window_slot(s, qn ? t - s->M : t - 1);
    const double *wv[2 * 64], *hv[2 * 64];
    const int n = basis(s, t, s->gW, s->gH, s->zW, s->zH, wv, hv);
    int finite = new_coordinates(s, t, eps, W_plane(s, from), s->gW, s->zW, wv, n, span.w0,
                                 span.w1, s->nW);
    finite &= new_coordinates(s, t, eps, H_plane(s, from), s->gH, s->zH, hv, n, span.h0,
                              span.h1, s->nH);
    if (!finite)
        return BLOCK_STATE;
    if (t <= s->M || s->config.langevin_only) /* no pair to form */
        return BLOCK_OK;
    /* y_t = grad U_t(theta_t) - grad U_t(theta_{t-M}) + lambda s_t, on this part */
    const double scale = part_scale(s, part), lambda = s->config.lambda;
    const int older = window_slot(s, t - s->M);
    const double *oW = W_plane(s, older), *oH = H_plane(s, older);
    if (qn) { /* theta_{t-M} is the state moved: its gradient is known */
        memcpy(s->yW + span.w0, s->gW + span.w0, sizeof(double) * (size_t)(span.w1 - span.w0));
        memcpy(s->yH + span.h0, s->gH + span.h0, sizeof(double) * (size_t)(span.h1 - span.h0));
    } else if (!block_grad_potential(s, &span, scale, oW, oH, s->yW, s->yH)) {
        return BLOCK_GRAD_NEW;
    }
    if (!block_grad_potential(s, &span, scale, s->nW, s->nH, s->g2W, s->g2H))
        return BLOCK_GRAD_NEW;
    for (int64_t d = span.w0; d < span.w1; ++d)
        s->yW[d] = s->g2W[d] - s->yW[d] + lambda * (s->nW[d] - oW[d]);
    for (int64_t d = span.h0; d < span.h1; ++d)
        s->yH[d] = s->g2H[d] - s->yH[d] + lambda * (s->nH[d] - oH[d]);
    return pymf_all_finite(s->yW + span.w0, span.w1 - span.w0) &&
                   pymf_all_finite(s->yH + span.h0, span.h1 - span.h0)
               ? BLOCK_OK
               : BLOCK_GRAD_NEW;
}

/* Phase three: the block's pair and new state replace the oldest ones (all blocks finite). */
static void commit_block(pymf_hamcmc_mf *s, int b, int part, int64_t t)
{
    const block_span span = span_of(s, b, part);
    const int slot = window_slot(s, t); /* theta_{t-M}'s */
    double *oW = W_plane(s, slot), *oH = H_plane(s, slot);
    if (t > s->M && !s->config.langevin_only) {
        double *sW = W_plane(s, s_plane(s, t)), *sH = H_plane(s, s_plane(s, t));
        for (int64_t d = span.w0; d < span.w1; ++d)
            sW[d] = s->nW[d] - oW[d];
        for (int64_t d = span.h0; d < span.h1; ++d)
            sH[d] = s->nH[d] - oH[d];
        memcpy(W_plane(s, y_plane(s, t)) + span.w0, s->yW + span.w0,
               sizeof(double) * (size_t)(span.w1 - span.w0));
        memcpy(H_plane(s, y_plane(s, t)) + span.h0, s->yH + span.h0,
               sizeof(double) * (size_t)(span.h1 - span.h0));
    }
    memcpy(oW + span.w0, s->nW + span.w0, sizeof(double) * (size_t)(span.w1 - span.w0));
    memcpy(oH + span.h0, s->nH + span.h0, sizeof(double) * (size_t)(span.h1 - span.h0));
}

static pymf_status block_failure(const pymf_hamcmc_mf *s, int64_t t, double eps, int code,
                                 pymf_error *err)
{
    if (err != NULL)
        err->iteration = t;
    (void)s;
    if (code == BLOCK_GRAD_FROM)
        return pymf_fail(err, PYMF_EDIVERGED, "the chain diverged at iteration %lld: the "
                         "gradient of U at the state being moved is not finite (extreme data, "
                         "priors or step size?); the last finite state is kept", (long long)t);
    if (code == BLOCK_GRAD_NEW)
        return pymf_fail(err, PYMF_EDIVERGED, "the chain diverged at iteration %lld: the "
                         "gradient of U at the new state is not finite (step size %g too "
                         "large?); the last finite state is kept", (long long)t, eps);
    return pymf_fail(err, PYMF_EDIVERGED, "the chain diverged at iteration %lld (step size %g): "
                     "the new state is not finite; the last finite state is kept",
                     (long long)t, eps);
}

static int first_failure(const int *status, int n)
{
    for (int b = 0; b < n; ++b)
        if (status[b] != BLOCK_OK)
            return status[b];
    return BLOCK_OK;
}

static pymf_status check_step(int64_t t, double eps, pymf_error *err)
{
    if (!(eps > 0.0) || !isfinite(eps))
        return pymf_fail(err, PYMF_EINVAL, "step size at iteration %lld is %g; it must be "
                         "positive and finite", (long long)t, eps);
    return PYMF_OK;
}

pymf_status pymf_hamcmc_mf_run(pymf_hamcmc_mf *s, int64_t n_iter, const double *eps,
                               pymf_error *err)
{
    if (s->config.only_row_block >= 0)
        return pymf_fail(err, PYMF_EINVAL, "a distributed chain runs by begin / finish");
    for (int64_t i = 0; i < n_iter; ++i)
        if (check_step(s->t + i + 1, eps[i], err) != PYMF_OK)
            return PYMF_EINVAL;
    const int B = s->data->grid->n_blocks;
    const size_t nn = (size_t)s->n_max * s->n_max;
    const int threads = s->config.n_threads > 0 ? s->config.n_threads : pymf_default_threads();
    const pymf_grid *g = s->data->grid;
    const int parallel = B > 1 && threads > 1 &&
                         (s->data->n_observed + g->n_rows + g->n_cols) * s->K >=
                             PARALLEL_WORK;
    (void)threads;
    (void)parallel;
    for (int64_t i = 0; i < n_iter; ++i) {
        const int64_t t = s->t + 1;
        const int part = pymf_hamcmc_mf_part(s, t);
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
        for (int b = 0; b < B; ++b)
            s->status[b] = begin_block(s, b, part, t, s->partials + (size_t)b * nn);
        int failure = first_failure(s->status, B);
        if (failure != BLOCK_OK)
            return block_failure(s, t, eps[i], failure, err);
        if (quasi_newton(s, t)) {
            reduce_gram(s, s->partials, s->gram);
            coefficients(s, t);
        }
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
        for (int b = 0; b < B; ++b)
            s->status[b] = finish_block(s, b, part, t, eps[i]);
        failure = first_failure(s->status, B);
        if (failure != BLOCK_OK)
            return block_failure(s, t, eps[i], failure, err);
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
        for (int b = 0; b < B; ++b)
            commit_block(s, b, part, t);
        s->t = t;
    }
    return PYMF_OK;
}

int pymf_hamcmc_mf_gram_len(const pymf_hamcmc_mf *s) { return s->n_max * s->n_max; }

int pymf_hamcmc_mf_quasi_newton(const pymf_hamcmc_mf *s, int64_t t) { return quasi_newton(s, t); }

void pymf_hamcmc_mf_moved(const pymf_hamcmc_mf *s, const double **W, const double **Ht)
{
    const int64_t next = s->t + 1;
    const int slot = window_slot(s, quasi_newton(s, next) ? next - s->M : s->t);
    *W = W_plane(s, slot);
    *Ht = H_plane(s, slot);
}

pymf_status pymf_hamcmc_mf_begin(pymf_hamcmc_mf *s, double *partial, pymf_error *err)
{
    const int b = s->config.only_row_block;
    if (b < 0)
        return pymf_fail(err, PYMF_EINVAL, "begin / finish are for a distributed chain");
    const int64_t t = s->t + 1;
    const int failure = begin_block(s, b, pymf_hamcmc_mf_part(s, t), t, partial);
    return failure == BLOCK_OK ? PYMF_OK : block_failure(s, t, 0.0, failure, err);
}

pymf_status pymf_hamcmc_mf_finish(pymf_hamcmc_mf *s, double eps, const double *partials,
                                  pymf_error *err)
{
    const int b = s->config.only_row_block;
    const int64_t t = s->t + 1;
    if (b < 0)
        return pymf_fail(err, PYMF_EINVAL, "begin / finish are for a distributed chain");
    if (check_step(t, eps, err) != PYMF_OK)
        return PYMF_EINVAL;
    const int part = pymf_hamcmc_mf_part(s, t);
    if (quasi_newton(s, t)) {
        reduce_gram(s, partials, s->gram);
        coefficients(s, t);
    }
    const int failure = finish_block(s, b, part, t, eps);
    if (failure != BLOCK_OK)
        return block_failure(s, t, eps, failure, err);
    commit_block(s, b, part, t);
    s->t = t;
    return PYMF_OK;
}

int64_t pymf_hamcmc_mf_piece_len(const pymf_hamcmc_mf *s, int c)
{
    const pymf_grid *g = s->data->grid;
    return (int64_t)s->n_planes * (g->col_start[c + 1] - g->col_start[c]) * s->K;
}

void pymf_hamcmc_mf_get_piece(const pymf_hamcmc_mf *s, int c, double *out)
{
    const pymf_grid *g = s->data->grid;
    const int K = s->K;
    const size_t len = (size_t)((g->col_start[c + 1] - g->col_start[c]) * K);
    for (int q = 0; q < s->n_planes; ++q)
        memcpy(out + (size_t)q * len, H_plane(s, q) + g->col_start[c] * K, sizeof(double) * len);
}

void pymf_hamcmc_mf_set_piece(pymf_hamcmc_mf *s, int c, const double *in)
{
    const pymf_grid *g = s->data->grid;
    const int K = s->K;
    const size_t len = (size_t)((g->col_start[c + 1] - g->col_start[c]) * K);
    for (int q = 0; q < s->n_planes; ++q)
        memcpy(H_plane(s, q) + g->col_start[c] * K, in + (size_t)q * len, sizeof(double) * len);
}

void pymf_hamcmc_mf_set_cols(pymf_hamcmc_mf *s, int64_t c0, int64_t c1, const double *in)
{
    const int K = s->K;
    memcpy(H_plane(s, window_slot(s, s->t)) + c0 * K, in, sizeof(double) * (size_t)((c1 - c0) * K));
}

pymf_status pymf_hamcmc_mf_loglik(const pymf_hamcmc_mf *s, double *out, pymf_error *err)
{
    const int slot = window_slot(s, s->t);
    if (!s->has_model)
        return pymf_fail(err, PYMF_EINVAL, "the chain's potential is not a Tweedie model: its "
                         "family computes the log-likelihood");
    return pymf_tweedie_loglik(&s->model.likelihood, s->data, W_plane(s, slot), H_plane(s, slot),
                               s->config.n_threads, out, err);
}

pymf_status pymf_hamcmc_mf_grad_potential(pymf_hamcmc_mf *s, const double *W, const double *Ht,
                                          int part, double *gW, double *gHt, pymf_error *err)
{
    const int B = s->data->grid->n_blocks;
    if (part < 0 || part >= B)
        return pymf_fail(err, PYMF_EINVAL, "part must be in [0, %d), got %d", B, part);
    for (int b = 0; b < B; ++b) {
        const block_span span = span_of(s, b, part);
        block_grad_potential(s, &span, part_scale(s, part), W, Ht, gW, gHt);
    }
    return PYMF_OK;
}

pymf_status pymf_hamcmc_mf_products(pymf_hamcmc_mf *s, const double *gW, const double *gHt,
                                    const double *zW, const double *zHt, double *hgW,
                                    double *hgHt, double *szW, double *szHt, int *used,
                                    pymf_error *err)
{
    const int64_t t = s->t + 1;
    if (!quasi_newton(s, t))
        return pymf_fail(err, PYMF_EINVAL, "the memory is full only after iteration 2M = %d",
                         2 * s->M);
    const int B = s->data->grid->n_blocks, part = pymf_hamcmc_mf_part(s, t);
    const size_t nn = (size_t)s->n_max * s->n_max;
    const double *wv[2 * 64], *hv[2 * 64];
    const int n = basis(s, t, gW, gHt, zW, zHt, wv, hv);
    for (int b = 0; b < B; ++b) {
        const block_span span = span_of(s, b, part);
        double *G = s->partials + (size_t)b * nn;
        memset(G, 0, sizeof(double) * nn);
        gram_accumulate(n, wv, span.w0, span.w1, G);
        gram_accumulate(n, hv, span.h0, span.h1, G);
        for (int i = 0; i < n; ++i)
            for (int j = 0; j < i; ++j)
                G[i * n + j] = G[j * n + i];
    }
    reduce_gram(s, s->partials, s->gram);
    drop_concave_pairs(s, s->gram);
    *used = pymf_lbfgs_gram_products(s->M - 1, s->gram, s->config.gamma,
                                     s->config.scaled_gamma, s->coef_step, s->coef_noise,
                                     s->usable, NULL, s->work);
    for (int64_t d = 0; d < s->w_len; ++d) {
        double step = 0.0, noise = 0.0;
        for (int i = 0; i < n; ++i) {
            step += s->coef_step[i] * wv[i][d];
            noise += s->coef_noise[i] * wv[i][d];
        }
        hgW[d] = step;
        szW[d] = noise;
    }
    for (int64_t d = 0; d < s->h_len; ++d) {
        double step = 0.0, noise = 0.0;
        for (int i = 0; i < n; ++i) {
            step += s->coef_step[i] * hv[i][d];
            noise += s->coef_noise[i] * hv[i][d];
        }
        hgHt[d] = step;
        szHt[d] = noise;
    }
    return PYMF_OK;
}

int pymf_hamcmc_mf_planes(const pymf_hamcmc_mf *s) { return s->n_planes; }

void pymf_hamcmc_mf_export(const pymf_hamcmc_mf *s, double *W_planes, double *Ht_planes,
                           int64_t *t, int64_t *skipped_pairs)
{
    memcpy(W_planes, s->W_store, sizeof(double) * (size_t)s->n_planes * (size_t)s->w_len);
    memcpy(Ht_planes, s->H_store, sizeof(double) * (size_t)s->n_planes * (size_t)s->h_len);
    *t = s->t;
    *skipped_pairs = s->skipped_pairs;
}

pymf_status pymf_hamcmc_mf_import(pymf_hamcmc_mf *s, const double *W_planes,
                                  const double *Ht_planes, int64_t t, int64_t skipped_pairs,
                                  pymf_error *err)
{
    if (t < 0)
        return pymf_fail(err, PYMF_EINVAL, "the saved chain state has t = %lld < 0", (long long)t);
    if (skipped_pairs < 0 || skipped_pairs > t)
        return pymf_fail(err, PYMF_EINVAL, "the saved chain state left out %lld memory pairs by "
                         "iteration %lld", (long long)skipped_pairs, (long long)t);
    const int64_t nw = (int64_t)s->n_planes * s->w_len, nh = (int64_t)s->n_planes * s->h_len;
    if (!pymf_all_finite(W_planes, nw) || !pymf_all_finite(Ht_planes, nh))
        return pymf_fail(err, PYMF_EINVAL, "the saved chain state contains NaN or inf");
    if (s->potential.non_negative) {
        for (int64_t d = 0; d < (int64_t)s->M * s->w_len; ++d)
            if (W_planes[d] < 0.0)
                return pymf_fail(err, PYMF_EINVAL, "the saved window of W is negative: the "
                                 "model is non-negative");
        for (int64_t d = 0; d < (int64_t)s->M * s->h_len; ++d)
            if (Ht_planes[d] < 0.0)
                return pymf_fail(err, PYMF_EINVAL, "the saved window of H is negative: the "
                                 "model is non-negative");
    }
    memcpy(s->W_store, W_planes, sizeof(double) * (size_t)nw);
    memcpy(s->H_store, Ht_planes, sizeof(double) * (size_t)nh);
    s->t = t;
    s->skipped_pairs = skipped_pairs;
    return PYMF_OK;
}
