#include "pymf/sgd.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "pymf/linalg.h"
#include "pymf/rng.h"

struct pymf_sgd {
    pymf_nmf_model model;
    const pymf_blocked_data *data;
    pymf_sgd_config config;
    double *W, *Ht;
    double *W_backup, *Ht_backup; /* the state before the current iteration */
    double *inv_row_count, *inv_col_count; /* 1 / N_i, 1 / N_j (0 for empty rows/columns) */
    int64_t *block_offset;  /* start of block (b, c) in `order` */
    int64_t *order;         /* visiting order of the entries of each block */
    int64_t *part_sizes;
    gsl_rng **piece_rngs;   /* DSGD: one per row piece */
    int n_piece_rngs;       /* B; destroy must not read `data`, which may be freed first */
    gsl_rng *rng;           /* SGD minibatch and random part order */
    int64_t t;
};

void pymf_sgd_destroy(pymf_sgd *s)
{
    if (s == NULL)
        return;
    free(s->W);
    free(s->Ht);
    free(s->W_backup);
    free(s->Ht_backup);
    free(s->inv_row_count);
    free(s->inv_col_count);
    free(s->block_offset);
    free(s->order);
    free(s->part_sizes);
    if (s->piece_rngs != NULL)
        for (int b = 0; b < s->n_piece_rngs; ++b)
            if (s->piece_rngs[b] != NULL)
                gsl_rng_free(s->piece_rngs[b]);
    free(s->piece_rngs);
    if (s->rng != NULL)
        gsl_rng_free(s->rng);
    free(s);
}

/* (grid row, grid column, value) of entry e of block (b, c). */
static void block_entry(const pymf_blocked_data *d, int b, int c, int64_t e, int64_t *i,
                        int64_t *j, double *v)
{
    const pymf_grid *g = d->grid;
    if (d->is_dense) {
        const int64_t width = g->col_start[c + 1] - g->col_start[c];
        *i = g->row_start[b] + e / width;
        *j = g->col_start[c] + e % width;
        *v = d->V[*i * g->n_cols + *j];
    } else {
        const int64_t at = d->block_ptr[(int64_t)b * g->n_blocks + c] + e;
        *i = pymf_entry_row(d, at);
        *j = pymf_entry_col(d, at);
        *v = pymf_entry_value(d, at);
    }
}

pymf_sgd *pymf_sgd_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                          const pymf_sgd_config *config, pymf_error *err)
{
    pymf_gsl_quiet();
    if (pymf_tweedie_check(&model->likelihood, err) != PYMF_OK)
        return NULL;
    if (config->kind == PYMF_OPT_SGD && (config->batch_size <= 0 || data->n_observed > 0xFFFFFFFFll)) {
        pymf_fail(err, PYMF_EINVAL, "SGD needs batch_size > 0 and at most 2^32 - 1 entries");
        return NULL;
    }
    if (data->n_observed <= 0) {
        pymf_fail(err, PYMF_EINVAL, "the data has no observed entries");
        return NULL;
    }
    pymf_sgd *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory");
        return NULL;
    }
    s->model = *model;
    s->data = data;
    s->config = *config;
    const pymf_grid *g = data->grid;
    const int K = model->likelihood.rank, B = g->n_blocks;
    const size_t w_size = (size_t)(g->n_rows * K), h_size = (size_t)(g->n_cols * K);
    s->W = calloc(w_size, sizeof(double));
    s->Ht = calloc(h_size, sizeof(double));
    s->W_backup = calloc(w_size, sizeof(double));
    s->Ht_backup = calloc(h_size, sizeof(double));
    s->inv_row_count = calloc((size_t)g->n_rows, sizeof(double));
    s->inv_col_count = calloc((size_t)g->n_cols, sizeof(double));
    s->block_offset = calloc((size_t)B * B + 1, sizeof(int64_t));
    s->part_sizes = calloc((size_t)B, sizeof(int64_t));
    s->order = malloc(sizeof(int64_t) * (size_t)data->n_observed);
    s->piece_rngs = calloc((size_t)B, sizeof(gsl_rng *));
    s->n_piece_rngs = s->piece_rngs != NULL ? B : 0;
    s->rng = gsl_rng_alloc(gsl_rng_mt19937);
    int ok = s->W && s->Ht && s->W_backup && s->Ht_backup && s->inv_row_count &&
             s->inv_col_count && s->block_offset && s->part_sizes && s->order && s->piece_rngs &&
             s->rng;
    for (int b = 0; ok && b < B; ++b)
        ok = (s->piece_rngs[b] = gsl_rng_alloc(gsl_rng_mt19937)) != NULL;
    if (!ok) {
        pymf_sgd_destroy(s);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for the optimiser state");
        return NULL;
    }
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < B; ++c) {
            const int64_t blk = (int64_t)b * B + c;
            s->block_offset[blk + 1] = s->block_offset[blk] + pymf_block_size(data, b, c);
        }
    for (int p = 0; p < B; ++p)
        s->part_sizes[p] = pymf_part_size(data, p);
    /* entry counts of rows and columns weigh the prior over the entries */
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < B; ++c)
            for (int64_t e = 0; e < pymf_block_size(data, b, c); ++e) {
                int64_t i, j;
                double v;
                block_entry(data, b, c, e, &i, &j, &v);
                s->inv_row_count[i] += 1.0;
                s->inv_col_count[j] += 1.0;
            }
    for (int64_t i = 0; i < g->n_rows; ++i)
        s->inv_row_count[i] = s->inv_row_count[i] > 0 ? 1.0 / s->inv_row_count[i] : 0.0;
    for (int64_t j = 0; j < g->n_cols; ++j)
        s->inv_col_count[j] = s->inv_col_count[j] > 0 ? 1.0 / s->inv_col_count[j] : 0.0;
    return s;
}

pymf_status pymf_sgd_set_state(pymf_sgd *s, const double *W, const double *Ht,
                               int64_t t, pymf_error *err)
{
    const pymf_grid *g = s->data->grid;
    if (t < 0)
        return pymf_fail(err, PYMF_EINVAL, "the iteration counter must be >= 0");
    const pymf_status status = pymf_factors_load(s->W, s->Ht, W, Ht, g->n_rows, g->n_cols,
                                                 s->model.likelihood.rank, 0, err);
    if (status == PYMF_OK)
        s->t = t;
    return status;
}

void pymf_sgd_get_state(const pymf_sgd *s, double *W, double *Ht, int64_t *t)
{
    const pymf_grid *g = s->data->grid;
    pymf_factors_store(W, Ht, s->W, s->Ht, g->n_rows, g->n_cols, s->model.likelihood.rank);
    if (t != NULL)
        *t = s->t;
}

/* One per-entry move; returns 0 if a new value is not finite. */
static int sgd_entry(pymf_sgd *s, int64_t i, int64_t j, double v, double eps)
{
    const int K = s->model.likelihood.rank;
    const double beta = s->model.likelihood.beta, inv_phi = 1.0 / s->model.likelihood.phi;
    const int exponential = s->model.prior == PYMF_PRIOR_EXPONENTIAL;
    double *w = s->W + i * K, *h = s->Ht + j * K;
    const double mu = pymf_tweedie_floor_mu(pymf_dot(w, h, K), beta);
    const double g = pymf_tweedie_dlogp_dmu_floored(v, mu, beta, inv_phi);
    const double wgt_w = s->inv_row_count[i], wgt_h = s->inv_col_count[j];
    const double lam_w = s->model.lam_w, lam_h = s->model.lam_h;
    int finite = 1;
    for (int k = 0; k < K; ++k) {
        const double wk = w[k], hk = h[k];
        double nw = wk + eps * (g * hk + wgt_w * (exponential ? -lam_w : -lam_w * wk));
        double nh = hk + eps * (g * wk + wgt_h * (exponential ? -lam_h : -lam_h * hk));
        if (exponential) {
            nw = nw > 0.0 ? nw : 0.0;
            nh = nh > 0.0 ? nh : 0.0;
        }
        w[k] = nw;
        h[k] = nh;
        finite &= (isfinite(nw) && isfinite(nh)) ? 1 : 0;
    }
    return finite;
}

static void copy_rows(double *dst, const double *src, int64_t r0, int64_t r1, int K)
{
    memcpy(dst + r0 * K, src + r0 * K, sizeof(double) * (size_t)((r1 - r0) * K));
}

/* DSGD: the blocks of one part in parallel. */
static int dsgd_part(pymf_sgd *s, int part, double eps, int64_t t, int threads)
{
    const pymf_grid *g = s->data->grid;
    const int B = g->n_blocks, K = s->model.likelihood.rank;
    int finite = 1;
    (void)threads;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(& : finite)
    for (int b = 0; b < B; ++b) {
        const int c = pymf_part_column(B, part, b);
        copy_rows(s->W_backup, s->W, g->row_start[b], g->row_start[b + 1], K);
        copy_rows(s->Ht_backup, s->Ht, g->col_start[c], g->col_start[c + 1], K);
        const int64_t blk = (int64_t)b * B + c;
        int64_t *order = s->order + s->block_offset[blk];
        const int64_t n = s->block_offset[blk + 1] - s->block_offset[blk];
        for (int64_t e = 0; e < n; ++e)
            order[e] = e;
        gsl_rng_set(s->piece_rngs[b], pymf_stream_seed(pymf_mix64(s->config.schedule_seed + 1 + (uint64_t)b), (uint64_t)t));
        if (n > 1)
            gsl_ran_shuffle(s->piece_rngs[b], order, (size_t)n, sizeof(int64_t));
        for (int64_t e = 0; e < n; ++e) {
            int64_t i, j;
            double v;
            block_entry(s->data, b, c, order[e], &i, &j, &v);
            finite &= sgd_entry(s, i, j, v, eps);
        }
    }
    if (!finite)
        for (int b = 0; b < B; ++b) {
            const int c = pymf_part_column(B, part, b);
            copy_rows(s->W, s->W_backup, g->row_start[b], g->row_start[b + 1], K);
            copy_rows(s->Ht, s->Ht_backup, g->col_start[c], g->col_start[c + 1], K);
        }
    return finite;
}

/* SGD: batch_size entries with replacement, in draw order. */
static int sgd_batch(pymf_sgd *s, double eps, int64_t t)
{
    const pymf_grid *g = s->data->grid;
    const int K = s->model.likelihood.rank;
    const pymf_blocked_data *d = s->data;
    copy_rows(s->W_backup, s->W, 0, g->n_rows, K);
    copy_rows(s->Ht_backup, s->Ht, 0, g->n_cols, K);
    gsl_rng_set(s->rng, pymf_stream_seed(s->config.schedule_seed, (uint64_t)t));
    int finite = 1;
    for (int64_t m = 0; m < s->config.batch_size && finite; ++m) {
        const int64_t idx = (int64_t)gsl_rng_uniform_int(s->rng, (unsigned long)d->n_observed);
        int64_t i, j;
        double v;
        if (d->is_dense) {
            i = idx / g->n_cols;
            j = idx % g->n_cols;
            v = d->V[idx];
        } else {
            i = pymf_entry_row(d, idx);
            j = pymf_entry_col(d, idx);
            v = pymf_entry_value(d, idx);
        }
        finite &= sgd_entry(s, i, j, v, eps);
    }
    if (!finite) {
        copy_rows(s->W, s->W_backup, 0, g->n_rows, K);
        copy_rows(s->Ht, s->Ht_backup, 0, g->n_cols, K);
    }
    return finite;
}

pymf_status pymf_sgd_run(pymf_sgd *s, int64_t n_iter, const double *step_sizes, pymf_error *err)
{
    const int threads = s->config.n_threads > 0 ? s->config.n_threads : pymf_default_threads();
    const pymf_grid *g = s->data->grid;
    for (int64_t n = 0; n < n_iter; ++n) {
        const int64_t t = s->t + 1;
        const double eps = step_sizes[n];
        if (!(eps > 0.0) || !isfinite(eps))
            return pymf_fail(err, PYMF_EINVAL, "step size at iteration %lld is %g; it must be "
                             "positive and finite", (long long)t, eps);
        int finite;
        if (s->config.kind == PYMF_OPT_DSGD) {
            const int part = pymf_choose_part(s->config.part_order, g->n_blocks, s->part_sizes,
                                              s->data->n_observed, s->config.schedule_seed, t,
                                              s->rng);
            finite = dsgd_part(s, part, eps, t, threads);
        } else {
            finite = sgd_batch(s, eps, t);
        }
        if (!finite) {
            if (err != NULL)
                err->iteration = t;
            return pymf_fail(err, PYMF_EDIVERGED,
                             "the optimisation diverged at iteration %lld (a parameter became "
                             "infinite or NaN; try a smaller step size); the last finite state "
                             "is kept", (long long)t);
        }
        s->t = t;
    }
    return PYMF_OK;
}

pymf_status pymf_sgd_loglik(const pymf_sgd *s, double *out, pymf_error *err)
{
    return pymf_tweedie_loglik(&s->model.likelihood, s->data, s->W, s->Ht, s->config.n_threads,
                               out, err);
}
