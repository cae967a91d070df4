#include "pymf/bpmf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "pymf/philox.h"
#include "pymf/rng.h"

/* ------------------------------------------------------------------ model and data */

pymf_status pymf_bpmf_check(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                            pymf_error *err)
{
    if (model->rank < 1)
        return pymf_fail(err, PYMF_EINVAL, "rank must be >= 1, got %d", model->rank);
    if (!(model->tau > 0.0) || !isfinite(model->tau))
        return pymf_fail(err, PYMF_EINVAL, "tau must be positive and finite, got %g", model->tau);
    if (!isfinite(model->mean_rating))
        return pymf_fail(err, PYMF_EINVAL, "the mean rating must be finite");
    if (!(model->alpha0 > 0.0) || !isfinite(model->alpha0) || !(model->beta0 > 0.0) ||
        !isfinite(model->beta0))
        return pymf_fail(err, PYMF_EINVAL, "alpha0 and beta0 must be positive and finite, got %g, %g",
                         model->alpha0, model->beta0);
    if (d == NULL)
        return PYMF_OK;
    const int P = d->n_row_blocks, Q = d->n_col_blocks;
    if (P < 1 || Q < 1)
        return pymf_fail(err, PYMF_EINVAL, "the block grid must be at least 1 x 1, got %d x %d", P, Q);
    if (d->n_users < P || d->n_items < Q)
        return pymf_fail(err, PYMF_EINVAL,
                         "a %d x %d block grid needs at least %d users and %d items, got %lld x %lld",
                         P, Q, P, Q, (long long)d->n_users, (long long)d->n_items);
    if (d->row_start[0] != 0 || d->row_start[P] != d->n_users || d->col_start[0] != 0 ||
        d->col_start[Q] != d->n_items || d->block_ptr[0] != 0 || d->block_ptr[P * Q] != d->nnz)
        return pymf_fail(err, PYMF_EINVAL, "inconsistent block layout");
    for (int s = 0; s < P * Q; ++s) {
        const int p = s / Q, q = s % Q;
        const int64_t lo = d->block_ptr[s], hi = d->block_ptr[s + 1];
        if (hi < lo || hi - lo >= ((int64_t)1 << 32))
            return pymf_fail(err, PYMF_EINVAL, "block %d has %lld entries (at most 2^32 - 1)", s,
                             (long long)(hi - lo));
        for (int64_t e = lo; e < hi; ++e) {
            if (d->users[e] < d->row_start[p] || d->users[e] >= d->row_start[p + 1] ||
                d->items[e] < d->col_start[q] || d->items[e] >= d->col_start[q + 1])
                return pymf_fail(err, PYMF_EINVAL, "entry %lld lies outside its block %d",
                                 (long long)e, s);
            if (!isfinite(d->ratings[e]))
                return pymf_fail(err, PYMF_EINVAL, "rating %lld is not finite", (long long)e);
        }
    }
    return PYMF_OK;
}

pymf_status pymf_bpmf_check_finite(const double *U, const double *V, const double *a,
                                   const double *b, const double *hyper, int64_t n_users,
                                   int64_t n_items, int rank, int64_t n_hyper, pymf_error *err)
{
    const struct { const double *src; int64_t n; const char *name; } parts[5] = {
        {U, n_users * rank, "U"}, {V, n_items * rank, "V"}, {a, n_users, "a"},
        {b, n_items, "b"}, {hyper, n_hyper, "hyper-parameter"}};
    for (int k = 0; k < 5; ++k)
        for (int64_t e = 0; e < parts[k].n; ++e)
            if (!isfinite(parts[k].src[e]))
                return pymf_fail(err, PYMF_EINVAL, "a BPMF state is not finite: %s[%lld] = %g",
                                 parts[k].name, (long long)e, parts[k].src[e]);
    return PYMF_OK;
}

int pymf_bpmf_group_block(const pymf_bpmf_data *d, int group, int slot)
{
    const int P = d->n_row_blocks, Q = d->n_col_blocks;
    if (P <= Q)
        return slot * Q + (slot + group) % Q;
    return ((slot + group) % P) * Q + slot;
}

void pymf_bpmf_bias_correctors(const pymf_bpmf_data *d, int64_t m, double *h_user,
                               double *h_item)
{
    const int P = d->n_row_blocks, Q = d->n_col_blocks;
    const double visit_rate = 1.0 / pymf_bpmf_n_groups(d);
    int64_t *count_user = calloc((size_t)d->n_users, sizeof *count_user);
    int64_t *count_item = calloc((size_t)d->n_items, sizeof *count_item);
    memset(h_user, 0, (size_t)d->n_users * sizeof *h_user);
    memset(h_item, 0, (size_t)d->n_items * sizeof *h_item);
    if (count_user == NULL || count_item == NULL) {
        free(count_user);
        free(count_item);
        return;
    }
    for (int s = 0; s < P * Q; ++s) {
        const int p = s / Q, q = s % Q;
        const int64_t n_s = d->block_ptr[s + 1] - d->block_ptr[s];
        if (n_s == 0)
            continue;
        for (int64_t e = d->block_ptr[s]; e < d->block_ptr[s + 1]; ++e) {
            ++count_user[d->users[e]];
            ++count_item[d->items[e]];
        }
        /* 1 - (1 - N_i/N_s)^m: the chance that a minibatch of m draws with replacement
         * contains user i (exp/log1p keeps it accurate when N_i/N_s is tiny) */
        for (int64_t i = d->row_start[p]; i < d->row_start[p + 1]; ++i)
            if (count_user[i] > 0) {
                const double share = (double)count_user[i] / (double)n_s;
                h_user[i] += visit_rate * -expm1((double)m * log1p(-share));
                count_user[i] = 0;
            }
        for (int64_t j = d->col_start[q]; j < d->col_start[q + 1]; ++j)
            if (count_item[j] > 0) {
                const double share = (double)count_item[j] / (double)n_s;
                h_item[j] += visit_rate * -expm1((double)m * log1p(-share));
                count_item[j] = 0;
            }
    }
    free(count_user);
    free(count_item);
}

static inline double dot(const double *x, const double *y, int n)
{
    double s = 0.0;
    for (int k = 0; k < n; ++k)
        s += x[k] * y[k];
    return s;
}

void pymf_bpmf_predict(const pymf_bpmf_model *model, const pymf_bpmf_params *p, int64_t n,
                       const int32_t *users, const int32_t *items, double *out)
{
    const int D = model->rank;
    for (int64_t e = 0; e < n; ++e) {
        const int64_t i = users[e], j = items[e];
        out[e] = model->mean_rating + dot(p->U + i * D, p->V + j * D, D) + p->a[i] + p->b[j];
    }
}

double pymf_bpmf_sq_error(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                          const pymf_bpmf_params *p, int n_threads)
{
    const int n_blocks = d->n_row_blocks * d->n_col_blocks;
    const int D = model->rank;
    double *partial = malloc((size_t)n_blocks * sizeof *partial);
    if (partial == NULL)
        return NAN;
    if (n_threads <= 0)
        n_threads = pymf_default_threads();
    /* one partial sum per block, added in block order: the same bits for any thread count */
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int s = 0; s < n_blocks; ++s) {
        double sum = 0.0;
        for (int64_t e = d->block_ptr[s]; e < d->block_ptr[s + 1]; ++e) {
            const int64_t i = d->users[e], j = d->items[e];
            const double r = d->ratings[e] - model->mean_rating -
                             dot(p->U + i * D, p->V + j * D, D) - p->a[i] - p->b[j];
            sum += r * r;
        }
        partial[s] = sum;
    }
    double total = 0.0;
    for (int s = 0; s < n_blocks; ++s)
        total += partial[s];
    free(partial);
    return total;
}

double pymf_bpmf_log_posterior(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                               const pymf_bpmf_params *p, double *gU, double *gV, double *ga,
                               double *gb)
{
    const int D = model->rank;
    const double *lam_u = p->lambdas, *lam_v = p->lambdas + D;
    const double lam_a = p->lambdas[2 * D], lam_b = p->lambdas[2 * D + 1];
    double lp = 0.0;
    if (gU != NULL)
        for (int64_t i = 0; i < d->n_users; ++i)
            for (int k = 0; k < D; ++k)
                gU[i * D + k] = -lam_u[k] * p->U[i * D + k];
    if (gV != NULL)
        for (int64_t j = 0; j < d->n_items; ++j)
            for (int k = 0; k < D; ++k)
                gV[j * D + k] = -lam_v[k] * p->V[j * D + k];
    if (ga != NULL)
        for (int64_t i = 0; i < d->n_users; ++i)
            ga[i] = model->use_bias ? -lam_a * p->a[i] : 0.0;
    if (gb != NULL)
        for (int64_t j = 0; j < d->n_items; ++j)
            gb[j] = model->use_bias ? -lam_b * p->b[j] : 0.0;
    for (int64_t i = 0; i < d->n_users; ++i) {
        for (int k = 0; k < D; ++k)
            lp -= 0.5 * lam_u[k] * p->U[i * D + k] * p->U[i * D + k];
        if (model->use_bias)
            lp -= 0.5 * lam_a * p->a[i] * p->a[i];
    }
    for (int64_t j = 0; j < d->n_items; ++j) {
        for (int k = 0; k < D; ++k)
            lp -= 0.5 * lam_v[k] * p->V[j * D + k] * p->V[j * D + k];
        if (model->use_bias)
            lp -= 0.5 * lam_b * p->b[j] * p->b[j];
    }
    for (int64_t e = 0; e < d->nnz; ++e) {
        const int64_t i = d->users[e], j = d->items[e];
        const double *u = p->U + i * D, *v = p->V + j * D;
        const double r = d->ratings[e] - model->mean_rating - dot(u, v, D) - p->a[i] - p->b[j];
        lp -= 0.5 * model->tau * r * r;
        const double w = model->tau * r;
        for (int k = 0; k < D; ++k) {
            if (gU != NULL)
                gU[i * D + k] += w * v[k];
            if (gV != NULL)
                gV[j * D + k] += w * u[k];
        }
        if (model->use_bias) {
            if (ga != NULL)
                ga[i] += w;
            if (gb != NULL)
                gb[j] += w;
        }
    }
    return lp;
}

static void draw_precisions(const pymf_bpmf_model *model, int64_t n_users, int64_t n_items,
                            pymf_bpmf_params *p, gsl_rng *rng)
{
    const int D = model->rank;
    for (int k = 0; k < D; ++k) {
        double su = 0.0, sv = 0.0;
        for (int64_t i = 0; i < n_users; ++i)
            su += p->U[i * D + k] * p->U[i * D + k];
        for (int64_t j = 0; j < n_items; ++j)
            sv += p->V[j * D + k] * p->V[j * D + k];
        /* GSL's gamma takes a scale: 1 / rate */
        p->lambdas[k] = gsl_ran_gamma(rng, model->alpha0 + 0.5 * (double)n_users,
                                      1.0 / (model->beta0 + 0.5 * su));
        p->lambdas[D + k] = gsl_ran_gamma(rng, model->alpha0 + 0.5 * (double)n_items,
                                          1.0 / (model->beta0 + 0.5 * sv));
    }
    if (model->use_bias) {
        double sa = 0.0, sb = 0.0;
        for (int64_t i = 0; i < n_users; ++i)
            sa += p->a[i] * p->a[i];
        for (int64_t j = 0; j < n_items; ++j)
            sb += p->b[j] * p->b[j];
        p->lambdas[2 * D] = gsl_ran_gamma(rng, model->alpha0 + 0.5 * (double)n_users,
                                          1.0 / (model->beta0 + 0.5 * sa));
        p->lambdas[2 * D + 1] = gsl_ran_gamma(rng, model->alpha0 + 0.5 * (double)n_items,
                                              1.0 / (model->beta0 + 0.5 * sb));
    }
}

pymf_status pymf_bpmf_sample_precisions(const pymf_bpmf_model *model, int64_t n_users,
                                        int64_t n_items, pymf_bpmf_params *p,
                                        unsigned long seed, pymf_error *err)
{
    pymf_gsl_quiet();
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (rng == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "could not allocate a GSL generator");
    gsl_rng_set(rng, seed);
    draw_precisions(model, n_users, n_items, p, rng);
    gsl_rng_free(rng);
    return PYMF_OK;
}

/* ------------------------------------------------------------------ one block's steps */

struct pymf_dsgld_scratch {
    int width;                  /* D + 1: the factor row and its bias */
    int64_t max_users, max_items, batch;
    double *grad_u, *grad_v;    /* likelihood sums, stripe-local rows x width */
    uint64_t *stamp_u, *stamp_v;
    uint64_t tick;              /* a row's gradient is live when its stamp equals tick */
    int64_t *touched_u, *touched_v;
    int64_t *draws;
    double *noise;              /* width doubles */
    uint32_t *noise_ids;        /* counter rows of the touched rows of one side */
    double *noise_block;        /* their Gaussians, touched rows x width */
    uint32_t *batch_words;      /* Philox words of the minibatch draws, 4 per counter */
};

void pymf_dsgld_scratch_destroy(pymf_dsgld_scratch *s)
{
    if (s == NULL)
        return;
    free(s->grad_u);
    free(s->grad_v);
    free(s->stamp_u);
    free(s->stamp_v);
    free(s->touched_u);
    free(s->touched_v);
    free(s->draws);
    free(s->noise);
    free(s->noise_ids);
    free(s->noise_block);
    free(s->batch_words);
    free(s);
}

pymf_dsgld_scratch *pymf_dsgld_scratch_create(int rank, int64_t max_stripe_users,
                                              int64_t max_stripe_items, int64_t batch_size)
{
    pymf_dsgld_scratch *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->width = rank + 1;
    s->max_users = max_stripe_users;
    s->max_items = max_stripe_items;
    s->batch = batch_size;
    const int64_t tu = batch_size < max_stripe_users ? batch_size : max_stripe_users;
    const int64_t tv = batch_size < max_stripe_items ? batch_size : max_stripe_items;
    s->grad_u = malloc((size_t)(max_stripe_users * s->width + 1) * sizeof(double));
    s->grad_v = malloc((size_t)(max_stripe_items * s->width + 1) * sizeof(double));
    s->stamp_u = calloc((size_t)max_stripe_users + 1, sizeof(uint64_t));
    s->stamp_v = calloc((size_t)max_stripe_items + 1, sizeof(uint64_t));
    s->touched_u = malloc((size_t)(tu + 1) * sizeof(int64_t));
    s->touched_v = malloc((size_t)(tv + 1) * sizeof(int64_t));
    s->draws = malloc((size_t)(batch_size + 4) * sizeof(int64_t));
    s->noise = malloc((size_t)(s->width + 4) * sizeof(double));
    const int64_t most = tu > tv ? tu : tv;
    s->noise_ids = malloc((size_t)(most + 1) * sizeof(uint32_t));
    s->noise_block = malloc((size_t)((most + 1) * s->width) * sizeof(double));
    s->batch_words = malloc((size_t)(4 * ((batch_size + 3) / 4)) * sizeof(uint32_t));
    if (s->grad_u == NULL || s->grad_v == NULL || s->stamp_u == NULL || s->stamp_v == NULL ||
        s->touched_u == NULL || s->touched_v == NULL || s->draws == NULL || s->noise == NULL ||
        s->noise_ids == NULL || s->noise_block == NULL || s->batch_words == NULL) {
        pymf_dsgld_scratch_destroy(s);
        return NULL;
    }
    return s;
}

static pymf_status check_fits(const pymf_bpmf_model *model, const pymf_dsgld_block *blk,
                              const pymf_dsgld_stepper *st, const pymf_dsgld_scratch *s,
                              pymf_error *err)
{
    if (s->width != model->rank + 1 || blk->n_stripe_users > s->max_users ||
        blk->n_stripe_items > s->max_items || st->batch_size > s->batch || st->batch_size < 1)
        return pymf_fail(err, PYMF_EINVAL, "DSGLD scratch space does not fit block %d",
                         blk->block_id);
    return PYMF_OK;
}

/* Draws the minibatch of `step` (m entry positions in the block, with replacement) and sums
 * tau-free likelihood gradients e_n (v_j, 1) per user and e_n (u_i, 1) per item, all at the
 * current state. Returns the touched rows in s->touched_*. */
static void accumulate(const pymf_bpmf_model *model, const pymf_dsgld_block *blk,
                       const pymf_dsgld_stepper *st, const double *U, const double *V,
                       const double *a, const double *b, int64_t step, pymf_dsgld_scratch *s,
                       int64_t *n_touched_u, int64_t *n_touched_v)
{
    const int D = model->rank, width = s->width;
    const int64_t m = st->batch_size;
    const uint64_t n = (uint64_t)blk->n_entries;
    /* m entry positions from Philox words of counters {g, block, step, BATCH}: (w * n) >> 32
     * maps a 32-bit word to [0, n) (bias < n / 2^32, negligible) */
    const uint32_t n_groups = (uint32_t)((m + 3) / 4);
    uint32_t *words = s->batch_words;
    pymf_philox_words(st->noise_seed, PYMF_STREAM_BPMF_BATCH, (uint64_t)step,
                      (uint32_t)blk->block_id, n_groups, words);
    for (int64_t t = 0; t < m; ++t)
        s->draws[t] = (int64_t)(((uint64_t)words[t] * n) >> 32);
    ++s->tick;
    int64_t tu = 0, tv = 0;
    for (int64_t t = 0; t < m; ++t) {
#if defined(__GNUC__)
        /* the draws are random positions in the block: fetch the entries of draw t + 16 and
         * the factor rows of draw t + 4 ahead of use (prefetches change no result) */
        if (t + 16 < m) {
            const int64_t ahead = s->draws[t + 16];
            __builtin_prefetch(blk->users + ahead);
            __builtin_prefetch(blk->items + ahead);
            __builtin_prefetch(blk->ratings + ahead);
        }
        if (t + 4 < m) {
            const int64_t ahead = s->draws[t + 4];
            __builtin_prefetch(U + (blk->users[ahead] - blk->user_offset) * D);
            __builtin_prefetch(V + (blk->items[ahead] - blk->item_offset) * D);
        }
#endif
        const int64_t e = s->draws[t];
        const int64_t i = blk->users[e] - blk->user_offset, j = blk->items[e] - blk->item_offset;
        double *gu = s->grad_u + i * width, *gv = s->grad_v + j * width;
        if (s->stamp_u[i] != s->tick) {
            s->stamp_u[i] = s->tick;
            memset(gu, 0, (size_t)width * sizeof *gu);
            s->touched_u[tu++] = i;
        }
        if (s->stamp_v[j] != s->tick) {
            s->stamp_v[j] = s->tick;
            memset(gv, 0, (size_t)width * sizeof *gv);
            s->touched_v[tv++] = j;
        }
        const double *u = U + i * D, *v = V + j * D;
        const double r = blk->ratings[e] - model->mean_rating - dot(u, v, D) - a[i] - b[j];
        for (int k = 0; k < D; ++k) {
            gu[k] += r * v[k];
            gv[k] += r * u[k];
        }
        gu[D] += r;
        gv[D] += r;
    }
    *n_touched_u = tu;
    *n_touched_v = tv;
}

/* The estimator for one touched row: x = (factor row, bias), sum = its likelihood sum. */
static inline void row_estimate(int D, int use_bias, double lik_scale, double corrector,
                                const double *lam, double lam_bias, const double *x,
                                double bias, const double *sum, double *g)
{
    for (int k = 0; k < D; ++k)
        g[k] = lik_scale * sum[k] - lam[k] * x[k] / corrector;
    g[D] = use_bias ? lik_scale * sum[D] - lam_bias * bias / corrector : 0.0;
}

static inline double lik_scale_of(const pymf_bpmf_model *model, const pymf_dsgld_block *blk,
                                  int64_t m)
{
    /* N_s / (v(s) m), times tau from the Gaussian likelihood */
    return model->tau * (double)blk->n_entries / (blk->visit_rate * (double)m);
}

pymf_status pymf_dsgld_block_gradient(const pymf_bpmf_model *model, const pymf_dsgld_block *blk,
                                      const pymf_dsgld_stepper *st, const double *U,
                                      const double *V, const double *a, const double *b,
                                      const double *lambdas, int64_t step,
                                      pymf_dsgld_scratch *s, double *gU, double *gV,
                                      double *ga, double *gb, pymf_error *err)
{
    if (check_fits(model, blk, st, s, err) != PYMF_OK)
        return err->status;
    const int D = model->rank, width = s->width;
    memset(gU, 0, (size_t)(blk->n_stripe_users * D) * sizeof *gU);
    memset(gV, 0, (size_t)(blk->n_stripe_items * D) * sizeof *gV);
    memset(ga, 0, (size_t)blk->n_stripe_users * sizeof *ga);
    memset(gb, 0, (size_t)blk->n_stripe_items * sizeof *gb);
    if (blk->n_entries == 0)
        return PYMF_OK;
    int64_t tu, tv;
    accumulate(model, blk, st, U, V, a, b, step, s, &tu, &tv);
    const double scale = lik_scale_of(model, blk, st->batch_size);
    double *g = s->noise;  /* width doubles of room */
    for (int64_t n = 0; n < tu; ++n) {
        const int64_t i = s->touched_u[n];
        row_estimate(D, model->use_bias, scale, blk->h_user[i], lambdas, lambdas[2 * D],
                     U + i * D, a[i], s->grad_u + i * width, g);
        memcpy(gU + i * D, g, (size_t)D * sizeof *g);
        ga[i] = g[D];
    }
    for (int64_t n = 0; n < tv; ++n) {
        const int64_t j = s->touched_v[n];
        row_estimate(D, model->use_bias, scale, blk->h_item[j], lambdas + D, lambdas[2 * D + 1],
                     V + j * D, b[j], s->grad_v + j * width, g);
        memcpy(gV + j * D, g, (size_t)D * sizeof *g);
        gb[j] = g[D];
    }
    return PYMF_OK;
}

/* x += eps g + sqrt(2 eps) z for one row (and its bias); 0 if a value is not finite. */
static int move_row(int D, int use_bias, double eps, double noise_sd, const double *g,
                    const double *z, double *x, double *bias)
{
    int finite = 1;
    for (int k = 0; k < D; ++k) {
        x[k] += eps * g[k] + noise_sd * z[k];
        finite &= isfinite(x[k]);
    }
    if (use_bias) {
        *bias += eps * g[D] + noise_sd * z[D];
        finite &= isfinite(*bias);
    }
    return finite;
}

pymf_status pymf_dsgld_block_steps(const pymf_bpmf_model *model, const pymf_dsgld_block *blk,
                                   const pymf_dsgld_stepper *st, double *U, double *V,
                                   double *a, double *b, const double *lambdas,
                                   int64_t first_step, int n_steps, double eps,
                                   pymf_dsgld_scratch *s, pymf_error *err)
{
    if (check_fits(model, blk, st, s, err) != PYMF_OK)
        return err->status;
    if (blk->n_entries == 0)
        return PYMF_OK;
    const int D = model->rank, width = s->width;
    const double scale = lik_scale_of(model, blk, st->batch_size);
    const double noise_sd = st->add_noise ? sqrt(2.0 * eps) : 0.0;
    /* Noise of a touched row: N(0, 2 eps / hbar) with the correction, N(0, 2 eps) without.
     * Why: a row is moved only in the fraction hbar of the steps that touch it, so over
     * many steps it receives hbar * 2 eps of noise variance per step on average, against the
     * full drift eps * grad (the corrector makes the drift unbiased). Langevin dynamics with
     * drift eps grad and diffusion 2 eps hbar samples p^(1/hbar), a tempered posterior;
     * dividing the variance by hbar restores 2 eps per step in expectation. */
    double g[width], z[width];
    memset(z, 0, sizeof z);
    for (int l = 0; l < n_steps; ++l) {
        const int64_t step = first_step + l;
        int64_t tu, tv;
        /* all gradients at the state before the step, then all moves */
        accumulate(model, blk, st, U, V, a, b, step, s, &tu, &tv);
        /* an estimate needs only its own row and the likelihood sums, which were all taken
         * at the old state: moving the users first does not change the items' estimates */
        int finite = 1;
        for (int side = 0; side < 2; ++side) {
            const int64_t n_touched = side == 0 ? tu : tv;
            const int64_t *touched = side == 0 ? s->touched_u : s->touched_v;
            const int64_t offset = side == 0 ? blk->user_offset : blk->item_offset;
            if (st->add_noise) {
                /* the Gaussians of all touched rows at once: Philox vectorises over them */
                for (int64_t n = 0; n < n_touched; ++n)
                    s->noise_ids[n] = (uint32_t)(offset + touched[n]);
                pymf_noise_row_list(st->noise_seed, side == 0 ? PYMF_STREAM_BPMF_U : PYMF_STREAM_BPMF_V,
                                    (uint64_t)step, s->noise_ids, (uint32_t)n_touched, width,
                                    s->noise_block);
            }
            for (int64_t n = 0; n < n_touched; ++n) {
                const int64_t r = touched[n];
                const double *z_row = st->add_noise ? s->noise_block + n * width : z;
                if (side == 0) {
                    row_estimate(D, model->use_bias, scale, blk->h_user[r], lambdas, lambdas[2 * D],
                                 U + r * D, a[r], s->grad_u + r * width, g);
                    const double sd = st->noise_correction ? noise_sd / sqrt(blk->h_user[r]) : noise_sd;
                    finite &= move_row(D, model->use_bias, eps, sd, g, z_row, U + r * D, a + r);
                } else {
                    row_estimate(D, model->use_bias, scale, blk->h_item[r], lambdas + D,
                                 lambdas[2 * D + 1], V + r * D, b[r], s->grad_v + r * width, g);
                    const double sd = st->noise_correction ? noise_sd / sqrt(blk->h_item[r]) : noise_sd;
                    finite &= move_row(D, model->use_bias, eps, sd, g, z_row, V + r * D, b + r);
                }
            }
        }
        if (!finite) {
            pymf_fail(err, PYMF_EDIVERGED,
                      "DSGLD diverged at step %lld on block %d (step size %g): a factor became "
                      "non-finite; try a smaller step size",
                      (long long)step, blk->block_id, eps);
            err->iteration = step;
            return PYMF_EDIVERGED;
        }
    }
    return PYMF_OK;
}

/* ------------------------------------------------------------------ chains in shared memory */

struct pymf_dsgld {
    pymf_bpmf_model model;
    const pymf_bpmf_data *data;
    pymf_dsgld_config config;
    int n_blocks, group_size, n_groups;
    size_t chain_doubles;      /* U, V, a, b, lambdas */
    double *state;             /* n_chains x chain_doubles */
    double *backup;            /* the state before the current round */
    pymf_bpmf_params *params;  /* views into state */
    double *h_user, *h_item;
    uint64_t *noise_seeds, *hyper_seeds;
    pymf_dsgld_block *blocks;
    pymf_dsgld_scratch **scratch;  /* n_chains x group_size */
    pymf_error *task_errors;
    int64_t round;
};

void pymf_dsgld_destroy(pymf_dsgld *d)
{
    if (d == NULL)
        return;
    if (d->scratch != NULL)
        for (int t = 0; t < d->config.n_chains * d->group_size; ++t)
            pymf_dsgld_scratch_destroy(d->scratch[t]);
    free(d->scratch);
    free(d->state);
    free(d->backup);
    free(d->params);
    free(d->h_user);
    free(d->h_item);
    free(d->noise_seeds);
    free(d->hyper_seeds);
    free(d->blocks);
    free(d->task_errors);
    free(d);
}

static void params_view(pymf_bpmf_params *p, double *base, int D, int64_t L, int64_t M)
{
    p->U = base;
    p->V = p->U + L * D;
    p->a = p->V + M * D;
    p->b = p->a + L;
    p->lambdas = p->b + M;
}

pymf_dsgld *pymf_dsgld_create(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                              const pymf_dsgld_config *config, const uint64_t *noise_seeds,
                              const uint64_t *hyper_seeds, pymf_error *err)
{
    pymf_gsl_quiet();
    if (pymf_bpmf_check(model, data, err) != PYMF_OK)
        return NULL;
    if (config->n_chains < 1 || config->batch_size < 1 || config->round_length < 1 ||
        config->hyper_every < 0) {
        pymf_fail(err, PYMF_EINVAL,
                  "DSGLD needs chains >= 1, batch_size >= 1, round_length >= 1 and "
                  "hyper_every >= 0 (got %d, %lld, %d, %d)",
                  config->n_chains, (long long)config->batch_size, config->round_length,
                  config->hyper_every);
        return NULL;
    }
    pymf_dsgld *d = calloc(1, sizeof *d);
    if (d == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory");
        return NULL;
    }
    d->model = *model;
    d->data = data;
    d->config = *config;
    const int D = model->rank, C = config->n_chains;
    const int64_t L = data->n_users, M = data->n_items;
    d->n_blocks = data->n_row_blocks * data->n_col_blocks;
    d->group_size = pymf_bpmf_group_size(data);
    d->n_groups = pymf_bpmf_n_groups(data);
    d->chain_doubles = (size_t)((L + M) * D + L + M + 2 * D + 2);
    d->state = calloc((size_t)C * d->chain_doubles, sizeof(double));
    d->backup = calloc((size_t)C * d->chain_doubles, sizeof(double));
    d->params = calloc((size_t)C, sizeof *d->params);
    d->h_user = malloc((size_t)L * sizeof(double));
    d->h_item = malloc((size_t)M * sizeof(double));
    d->noise_seeds = malloc((size_t)C * sizeof(uint64_t));
    d->hyper_seeds = malloc((size_t)C * sizeof(uint64_t));
    d->blocks = calloc((size_t)d->n_blocks, sizeof *d->blocks);
    d->scratch = calloc((size_t)C * d->group_size, sizeof *d->scratch);
    d->task_errors = calloc((size_t)C * d->group_size, sizeof *d->task_errors);
    if (d->state == NULL || d->backup == NULL || d->params == NULL || d->h_user == NULL ||
        d->h_item == NULL || d->noise_seeds == NULL || d->hyper_seeds == NULL ||
        d->blocks == NULL || d->scratch == NULL || d->task_errors == NULL) {
        pymf_dsgld_destroy(d);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for %d DSGLD chains", C);
        return NULL;
    }
    for (int c = 0; c < C; ++c)
        params_view(&d->params[c], d->state + (size_t)c * d->chain_doubles, D, L, M);
    memcpy(d->noise_seeds, noise_seeds, (size_t)C * sizeof(uint64_t));
    memcpy(d->hyper_seeds, hyper_seeds, (size_t)C * sizeof(uint64_t));
    pymf_bpmf_bias_correctors(data, config->batch_size, d->h_user, d->h_item);
    int64_t max_users = 0, max_items = 0;
    const int Q = data->n_col_blocks;
    for (int s = 0; s < d->n_blocks; ++s) {
        const int p = s / Q, q = s % Q;
        pymf_dsgld_block *blk = &d->blocks[s];
        blk->block_id = s;
        blk->n_entries = data->block_ptr[s + 1] - data->block_ptr[s];
        blk->users = data->users + data->block_ptr[s];
        blk->items = data->items + data->block_ptr[s];
        blk->ratings = data->ratings + data->block_ptr[s];
        blk->user_offset = data->row_start[p];
        blk->n_stripe_users = data->row_start[p + 1] - data->row_start[p];
        blk->item_offset = data->col_start[q];
        blk->n_stripe_items = data->col_start[q + 1] - data->col_start[q];
        blk->h_user = d->h_user + blk->user_offset;
        blk->h_item = d->h_item + blk->item_offset;
        blk->visit_rate = 1.0 / d->n_groups;
        if (blk->n_stripe_users > max_users)
            max_users = blk->n_stripe_users;
        if (blk->n_stripe_items > max_items)
            max_items = blk->n_stripe_items;
    }
    for (int t = 0; t < C * d->group_size; ++t) {
        d->scratch[t] = pymf_dsgld_scratch_create(D, max_users, max_items, config->batch_size);
        if (d->scratch[t] == NULL) {
            pymf_dsgld_destroy(d);
            pymf_fail(err, PYMF_ENOMEM, "out of memory for DSGLD scratch space");
            return NULL;
        }
    }
    for (int c = 0; c < C; ++c)
        for (int k = 0; k < 2 * D + 2; ++k)
            d->params[c].lambdas[k] = 1.0;
    return d;
}

void pymf_dsgld_set_threads(pymf_dsgld *d, int n_threads) { d->config.n_threads = n_threads; }

const pymf_bpmf_params *pymf_dsgld_params(const pymf_dsgld *d, int chain)
{
    return &d->params[chain];
}

pymf_status pymf_dsgld_set_state(pymf_dsgld *d, int chain, const double *U, const double *V,
                                 const double *a, const double *b, const double *lambdas,
                                 int64_t round, pymf_error *err)
{
    const int D = d->model.rank;
    const int64_t L = d->data->n_users, M = d->data->n_items;
    if (chain < 0 || chain >= d->config.n_chains)
        return pymf_fail(err, PYMF_EINVAL, "chain %d out of range", chain);
    if (round < 0)
        return pymf_fail(err, PYMF_EINVAL, "the round must be >= 0");
    if (pymf_bpmf_check_finite(U, V, a, b, lambdas, L, M, D, 2 * D + 2, err) != PYMF_OK)
        return err->status;
    for (int k = 0; k < 2 * D + 2; ++k)
        if (!(lambdas[k] > 0.0))
            return pymf_fail(err, PYMF_EINVAL, "precisions must be positive");
    pymf_bpmf_params *p = &d->params[chain];
    memcpy(p->U, U, (size_t)(L * D) * sizeof(double));
    memcpy(p->V, V, (size_t)(M * D) * sizeof(double));
    for (int64_t i = 0; i < L; ++i)
        p->a[i] = d->model.use_bias ? a[i] : 0.0;
    for (int64_t j = 0; j < M; ++j)
        p->b[j] = d->model.use_bias ? b[j] : 0.0;
    memcpy(p->lambdas, lambdas, (size_t)(2 * D + 2) * sizeof(double));
    d->round = round;
    return PYMF_OK;
}

void pymf_dsgld_get_state(const pymf_dsgld *d, int chain, double *U, double *V, double *a,
                          double *b, double *lambdas, int64_t *round)
{
    const int D = d->model.rank;
    const int64_t L = d->data->n_users, M = d->data->n_items;
    const pymf_bpmf_params *p = &d->params[chain];
    if (U != NULL)
        memcpy(U, p->U, (size_t)(L * D) * sizeof(double));
    if (V != NULL)
        memcpy(V, p->V, (size_t)(M * D) * sizeof(double));
    if (a != NULL)
        memcpy(a, p->a, (size_t)L * sizeof(double));
    if (b != NULL)
        memcpy(b, p->b, (size_t)M * sizeof(double));
    if (lambdas != NULL)
        memcpy(lambdas, p->lambdas, (size_t)(2 * D + 2) * sizeof(double));
    if (round != NULL)
        *round = d->round;
}

pymf_status pymf_dsgld_hyper_step(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                                  pymf_bpmf_params *p, const double *h_user, const double *h_item,
                                  uint64_t hyper_seed, int64_t round, pymf_error *err)
{
    pymf_gsl_quiet();
    const int D = model->rank;
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (rng == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "could not allocate a GSL generator");
    gsl_rng_set(rng, pymf_stream_seed(hyper_seed, (uint64_t)round));
    /* Rows without ratings are never in a minibatch; given the precisions their conditional
     * is their prior, drawn exactly here. */
    for (int64_t i = 0; i < data->n_users; ++i)
        if (h_user[i] == 0.0) {
            for (int k = 0; k < D; ++k)
                p->U[i * D + k] = gsl_ran_gaussian(rng, 1.0 / sqrt(p->lambdas[k]));
            if (model->use_bias)
                p->a[i] = gsl_ran_gaussian(rng, 1.0 / sqrt(p->lambdas[2 * D]));
        }
    for (int64_t j = 0; j < data->n_items; ++j)
        if (h_item[j] == 0.0) {
            for (int k = 0; k < D; ++k)
                p->V[j * D + k] = gsl_ran_gaussian(rng, 1.0 / sqrt(p->lambdas[D + k]));
            if (model->use_bias)
                p->b[j] = gsl_ran_gaussian(rng, 1.0 / sqrt(p->lambdas[2 * D + 1]));
        }
    draw_precisions(model, data->n_users, data->n_items, p, rng);
    gsl_rng_free(rng);
    return PYMF_OK;
}

pymf_status pymf_dsgld_run(pymf_dsgld *d, int64_t n_rounds, const double *eps, pymf_error *err)
{
    const int C = d->config.n_chains, G = d->group_size, D = d->model.rank;
    const int n_tasks = C * G;
    const int n_threads = d->config.n_threads > 0 ? d->config.n_threads : pymf_default_threads();
    for (int64_t r = 0; r < n_rounds; ++r) {
        if (!(eps[r] > 0.0) || !isfinite(eps[r]))
            return pymf_fail(err, PYMF_EINVAL, "step size %g at round %lld is not positive",
                             eps[r], (long long)(d->round + 1));
    }
    for (int64_t r = 0; r < n_rounds; ++r) {
        const int64_t round = d->round + 1;
        const int64_t first_step = (round - 1) * d->config.round_length + 1;
        memcpy(d->backup, d->state, (size_t)C * d->chain_doubles * sizeof(double));
        const double step_size = eps[r];
        /* Tasks are (chain, block of the chain's group): they touch disjoint rows, so they
         * run in any order on any thread with the same result. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
        for (int task = 0; task < n_tasks; ++task) {
            const int c = task / G, slot = task % G;
            const int s = pymf_bpmf_group_block(d->data, pymf_bpmf_chain_group(d->data, c, round), slot);
            const pymf_dsgld_block *blk = &d->blocks[s];
            pymf_bpmf_params *p = &d->params[c];
            const pymf_dsgld_stepper st = {d->noise_seeds[c], d->config.batch_size,
                                           d->config.add_noise, d->config.noise_correction};
            pymf_error_clear(&d->task_errors[task]);
            pymf_dsgld_block_steps(&d->model, blk, &st, p->U + blk->user_offset * D,
                                   p->V + blk->item_offset * D, p->a + blk->user_offset,
                                   p->b + blk->item_offset, p->lambdas, first_step,
                                   d->config.round_length, step_size, d->scratch[task],
                                   &d->task_errors[task]);
        }
        for (int task = 0; task < n_tasks; ++task)
            if (d->task_errors[task].status != PYMF_OK) {
                memcpy(d->state, d->backup, (size_t)C * d->chain_doubles * sizeof(double));
                *err = d->task_errors[task];
                if (err->status == PYMF_EDIVERGED) {
                    char detail[PYMF_ERRMSG_LEN];
                    memcpy(detail, err->message, sizeof detail);
                    snprintf(err->message, sizeof err->message,
                             "round %lld of chain %d: %.150s (the chains keep their state after round %lld)",
                             (long long)round, task / G, detail, (long long)(round - 1));
                    err->iteration = round;
                }
                return err->status;
            }
        if (d->config.hyper_every > 0 && round % d->config.hyper_every == 0)
            for (int c = 0; c < C; ++c) {
                const pymf_status status = pymf_dsgld_hyper_step(
                    &d->model, d->data, &d->params[c], d->h_user, d->h_item, d->hyper_seeds[c],
                    round, err);
                if (status != PYMF_OK)
                    return status;
            }
        d->round = round;
    }
    return PYMF_OK;
}
