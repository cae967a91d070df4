#include "pymf/gibbs_nmf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "pymf/linalg.h"
#include "pymf/rng.h"

enum { STREAM_MULTINOMIAL = 1, STREAM_W = 2, STREAM_H = 3 };

struct pymf_gibbs_nmf {
    pymf_nmf_model model;
    const pymf_blocked_data *data;
    pymf_gibbs_config config;
    double *W, *Ht, *W_next, *Ht_next;
    double *stat_w;        /* S_W, I x K */
    double *stat_h_piece;  /* S_H per row piece, B x J x K */
    double *rate_w;        /* sparse: I x K, sums of h over the observed columns of each row */
    double *rate_h;        /* sparse: J x K, sums of the new w over the observed rows */
    double *sum_h, *sum_w; /* dense: K, sums over all columns / rows (the same for every row) */
    int64_t *bad_entry;    /* B: first entry (i * J + j, grid order) of a row piece with
                              v > 0 but W H = 0 or infinite; -1 if none */
    double *probs;         /* B x K scratch */
    unsigned int *counts;  /* B x K scratch */
    gsl_rng **rngs;        /* one per piece */
    int n_rngs;            /* B; destroy must not read `data`, which may already be freed */
    int64_t t;
};

void pymf_gibbs_nmf_destroy(pymf_gibbs_nmf *g)
{
    if (g == NULL)
        return;
    free(g->W);
    free(g->Ht);
    free(g->W_next);
    free(g->Ht_next);
    free(g->stat_w);
    free(g->stat_h_piece);
    free(g->rate_w);
    free(g->rate_h);
    free(g->sum_h);
    free(g->sum_w);
    free(g->bad_entry);
    free(g->probs);
    free(g->counts);
    if (g->rngs != NULL)
        for (int b = 0; b < g->n_rngs; ++b)
            if (g->rngs[b] != NULL)
                gsl_rng_free(g->rngs[b]);
    free(g->rngs);
    free(g);
}

static double entry_value(const pymf_blocked_data *d, int b, int c, int64_t e, int64_t *i, int64_t *j)
{
    const pymf_grid *g = d->grid;
    if (d->is_dense) {
        const int64_t width = g->col_start[c + 1] - g->col_start[c];
        *i = g->row_start[b] + e / width;
        *j = g->col_start[c] + e % width;
        return d->V[*i * g->n_cols + *j];
    }
    const int64_t at = d->block_ptr[(int64_t)b * g->n_blocks + c] + e;
    *i = pymf_entry_row(d, at);
    *j = pymf_entry_col(d, at);
    return pymf_entry_value(d, at);
}

pymf_gibbs_nmf *pymf_gibbs_nmf_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                                      const pymf_gibbs_config *config, pymf_error *err)
{
    pymf_gsl_quiet();
    if (pymf_tweedie_check(&model->likelihood, err) != PYMF_OK)
        return NULL;
    if (model->likelihood.beta != 1.0 || model->likelihood.phi != 1.0 ||
        model->prior != PYMF_PRIOR_EXPONENTIAL) {
        pymf_fail(err, PYMF_EINVAL, "the Gibbs sampler is for Poisson NMF: beta=1, phi=1 and "
                                    "exponential priors");
        return NULL;
    }
    if (!(model->lam_w > 0.0) || !(model->lam_h > 0.0) || !isfinite(model->lam_w) ||
        !isfinite(model->lam_h)) {
        pymf_fail(err, PYMF_EINVAL, "prior parameters lam_w and lam_h must be positive and finite");
        return NULL;
    }
    const pymf_grid *grid = data->grid;
    const int B = grid->n_blocks;
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < B; ++c)
            for (int64_t e = 0; e < pymf_block_size(data, b, c); ++e) {
                int64_t i, j;
                const double v = entry_value(data, b, c, e, &i, &j);
                const char *problem = NULL;
                if (isnan(v))
                    problem = "is NaN";
                else if (v < 0.0)
                    problem = "is negative";
                else if (v > 4294967295.0)
                    problem = "is larger than 2^32 - 1 (the multinomial draws count in 32 bits)";
                else if (v != floor(v))
                    problem = "is not an integer";
                if (problem != NULL) {
                    pymf_fail(err, PYMF_EINVAL, "the Gibbs sampler needs non-negative integer "
                              "counts: v = %.17g at row %lld, column %lld %s", v,
                              (long long)grid->row_of[i], (long long)grid->col_of[j], problem);
                    return NULL;
                }
            }
    pymf_gibbs_nmf *g = calloc(1, sizeof(*g));
    if (g == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory");
        return NULL;
    }
    g->model = *model;
    g->data = data;
    g->config = *config;
    const int K = model->likelihood.rank;
    const size_t I = (size_t)grid->n_rows, J = (size_t)grid->n_cols;
    g->W = calloc(I * K, sizeof(double));
    g->Ht = calloc(J * K, sizeof(double));
    g->W_next = calloc(I * K, sizeof(double));
    g->Ht_next = calloc(J * K, sizeof(double));
    g->stat_w = calloc(I * K, sizeof(double));
    g->stat_h_piece = calloc((size_t)B * J * K, sizeof(double));
    if (!data->is_dense) {
        g->rate_w = calloc(I * K, sizeof(double));
        g->rate_h = calloc(J * K, sizeof(double));
    }
    g->sum_h = calloc((size_t)K, sizeof(double));
    g->sum_w = calloc((size_t)K, sizeof(double));
    g->bad_entry = calloc((size_t)B, sizeof(int64_t));
    g->probs = calloc((size_t)B * K, sizeof(double));
    g->counts = calloc((size_t)B * K, sizeof(unsigned int));
    g->rngs = calloc((size_t)B, sizeof(gsl_rng *));
    g->n_rngs = g->rngs != NULL ? B : 0;
    int ok = g->W && g->Ht && g->W_next && g->Ht_next && g->stat_w && g->stat_h_piece &&
             (data->is_dense || (g->rate_w && g->rate_h)) && g->sum_h && g->sum_w &&
             g->bad_entry && g->probs && g->counts && g->rngs;
    for (int b = 0; ok && b < B; ++b)
        ok = (g->rngs[b] = gsl_rng_alloc(gsl_rng_mt19937)) != NULL;
    if (!ok) {
        pymf_gibbs_nmf_destroy(g);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for the Gibbs sampler");
        return NULL;
    }
    return g;
}

pymf_status pymf_gibbs_nmf_set_state(pymf_gibbs_nmf *g, const double *W, const double *Ht,
                                     int64_t t, pymf_error *err)
{
    const pymf_grid *grid = g->data->grid;
    if (t < 0)
        return pymf_fail(err, PYMF_EINVAL, "the iteration counter must be >= 0");
    const pymf_status status = pymf_factors_load(g->W, g->Ht, W, Ht, grid->n_rows, grid->n_cols,
                                                 g->model.likelihood.rank, 1, err);
    if (status == PYMF_OK)
        g->t = t;
    return status;
}

void pymf_gibbs_nmf_get_state(const pymf_gibbs_nmf *g, double *W, double *Ht, int64_t *t)
{
    const pymf_grid *grid = g->data->grid;
    pymf_factors_store(W, Ht, g->W, g->Ht, grid->n_rows, grid->n_cols, g->model.likelihood.rank);
    if (t != NULL)
        *t = g->t;
}

void pymf_gibbs_nmf_set_threads(pymf_gibbs_nmf *g, int n_threads)
{
    g->config.n_threads = n_threads;
}

/* The generator of (stream, piece) at sweep t; the streams of different pieces and steps
 * are seeded independently of the thread that runs them. */
static void reseed(gsl_rng *rng, uint64_t seed, int stream, int piece, int64_t t)
{
    const uint64_t stream_seed = pymf_mix64(seed ^ ((uint64_t)stream << 48) ^ (uint64_t)piece);
    gsl_rng_set(rng, pymf_stream_seed(stream_seed, (uint64_t)t));
}

/* Sums over all rows of X (n x K, row order): the dense Gamma rates. Summed from row 0 up,
 * the same order as the per-entry sums of fully observed sparse data. */
static void sum_rows(const double *X, int64_t n, int K, double *out)
{
    memset(out, 0, sizeof(double) * (size_t)K);
    for (int64_t r = 0; r < n; ++r)
        for (int k = 0; k < K; ++k)
            out[k] += X[r * K + k];
}

/* Step 1 for row piece b: multinomials of its entries; S_W rows of the piece and this
 * piece's own copy of S_H; for sparse data also the Gamma rates of W (sums of h over the
 * observed columns). An entry with v > 0 whose w_i. h_.j sum is 0 or infinite is recorded
 * in bad_entry[b] and the sweep is abandoned by the caller. */
static void allocate_counts(pymf_gibbs_nmf *g, int b, int64_t t)
{
    const pymf_blocked_data *d = g->data;
    const pymf_grid *grid = d->grid;
    const int B = grid->n_blocks, K = g->model.likelihood.rank;
    const int64_t r0 = grid->row_start[b], r1 = grid->row_start[b + 1];
    double *stat_h = g->stat_h_piece + (size_t)b * grid->n_cols * K;
    double *probs = g->probs + (size_t)b * K;
    unsigned int *counts = g->counts + (size_t)b * K;
    memset(g->stat_w + r0 * K, 0, sizeof(double) * (size_t)((r1 - r0) * K));
    memset(stat_h, 0, sizeof(double) * (size_t)(grid->n_cols * K));
    if (!d->is_dense)
        memset(g->rate_w + r0 * K, 0, sizeof(double) * (size_t)((r1 - r0) * K));
    g->bad_entry[b] = -1;
    reseed(g->rngs[b], g->config.seed, STREAM_MULTINOMIAL, b, t);
    for (int c = 0; c < B; ++c)
        for (int64_t e = 0; e < pymf_block_size(d, b, c); ++e) {
            int64_t i, j;
            const double v = entry_value(d, b, c, e, &i, &j);
            const double *w = g->W + i * K, *h = g->Ht + j * K;
            if (!d->is_dense) {
                double *rate = g->rate_w + i * K;
                for (int k = 0; k < K; ++k)
                    rate[k] += h[k];
            }
            if (v <= 0.0)
                continue;
            double mu = 0.0;
            for (int k = 0; k < K; ++k) {
                probs[k] = w[k] * h[k];
                mu += probs[k];
            }
            if (!(mu > 0.0) || !isfinite(mu)) {
                g->bad_entry[b] = i * grid->n_cols + j;
                return;
            }
            gsl_ran_multinomial(g->rngs[b], (size_t)K, (unsigned int)v, probs, counts);
            double *sw = g->stat_w + i * K, *sh = stat_h + j * K;
            for (int k = 0; k < K; ++k) {
                sw[k] += counts[k];
                sh[k] += counts[k];
            }
        }
}

/* Step 3's rates for column piece c on sparse data: sums of the new w over the observed
 * rows (row pieces in order, rows ascending inside each block). */
static void column_rates(pymf_gibbs_nmf *g, int c)
{
    const pymf_blocked_data *d = g->data;
    const pymf_grid *grid = d->grid;
    const int B = grid->n_blocks, K = g->model.likelihood.rank;
    const int64_t c0 = grid->col_start[c], c1 = grid->col_start[c + 1];
    memset(g->rate_h + c0 * K, 0, sizeof(double) * (size_t)((c1 - c0) * K));
    for (int b = 0; b < B; ++b)
        for (int64_t e = 0; e < pymf_block_size(d, b, c); ++e) {
            int64_t i, j;
            entry_value(d, b, c, e, &i, &j);
            const double *w = g->W_next + i * K;
            double *rate = g->rate_h + j * K;
            for (int k = 0; k < K; ++k)
                rate[k] += w[k];
        }
}

pymf_status pymf_gibbs_nmf_run(pymf_gibbs_nmf *g, int64_t n_sweeps, pymf_error *err)
{
    const pymf_blocked_data *d = g->data;
    const pymf_grid *grid = d->grid;
    const int B = grid->n_blocks, K = g->model.likelihood.rank;
    const int dense = d->is_dense;
    int threads = g->config.n_threads > 0 ? g->config.n_threads : pymf_default_threads();
    if (threads > B)
        threads = B; /* one piece is the unit of work: more threads would only wait */
    const size_t J = (size_t)grid->n_cols;
    (void)threads;
    for (int64_t n = 0; n < n_sweeps; ++n) {
        const int64_t t = g->t + 1;
        int finite = 1, counts_ok = 1;
        if (dense)
            sum_rows(g->Ht, grid->n_cols, K, g->sum_h);
#pragma omp parallel num_threads(threads)
        {
            /* S | W, H, row pieces in parallel */
#pragma omp for schedule(static) reduction(& : counts_ok)
            for (int b = 0; b < B; ++b) {
                allocate_counts(g, b, t);
                counts_ok &= g->bad_entry[b] < 0 ? 1 : 0;
            }
            /* W | S, H, row pieces in parallel (skipped when a multinomial was impossible) */
#pragma omp for schedule(static) reduction(& : finite)
            for (int b = 0; b < B; ++b) {
                if (!counts_ok)
                    continue;
                reseed(g->rngs[b], g->config.seed, STREAM_W, b, t);
                for (int64_t i = grid->row_start[b]; i < grid->row_start[b + 1]; ++i)
                    for (int k = 0; k < K; ++k) {
                        const double shape = 1.0 + g->stat_w[i * K + k];
                        const double rate = g->model.lam_w +
                                            (dense ? g->sum_h[k] : g->rate_w[i * K + k]);
                        const double x = gsl_ran_gamma(g->rngs[b], shape, 1.0 / rate);
                        g->W_next[i * K + k] = x;
                        finite &= isfinite(x) ? 1 : 0;
                    }
            }
#pragma omp single
            if (counts_ok && dense)
                sum_rows(g->W_next, grid->n_rows, K, g->sum_w);
            /* H | S, new W, column pieces in parallel; S_H summed over row pieces in order */
#pragma omp for schedule(static) reduction(& : finite)
            for (int c = 0; c < B; ++c) {
                if (!counts_ok)
                    continue;
                if (!dense)
                    column_rates(g, c);
                reseed(g->rngs[c], g->config.seed, STREAM_H, c, t);
                for (int64_t j = grid->col_start[c]; j < grid->col_start[c + 1]; ++j)
                    for (int k = 0; k < K; ++k) {
                        double stat = 0.0;
                        for (int b = 0; b < B; ++b)
                            stat += g->stat_h_piece[(size_t)b * J * K + (size_t)j * K + k];
                        const double rate = g->model.lam_h +
                                            (dense ? g->sum_w[k] : g->rate_h[j * K + k]);
                        const double x = gsl_ran_gamma(g->rngs[c], 1.0 + stat, 1.0 / rate);
                        g->Ht_next[j * K + k] = x;
                        finite &= isfinite(x) ? 1 : 0;
                    }
            }
        }
        if (!counts_ok) {
            int b = 0;
            while (g->bad_entry[b] < 0)
                ++b;
            const int64_t i = g->bad_entry[b] / grid->n_cols, j = g->bad_entry[b] % grid->n_cols;
            const double *w = g->W + i * K, *h = g->Ht + j * K;
            const double mu = pymf_dot_sequential(w, h, K);
            return pymf_fail(err, PYMF_EINVAL, "sweep %lld: (W H) = %g at row %lld, column %lld, "
                             "where the count is positive (impossible under the Poisson model); "
                             "start from W, H with 0 < (W H) < inf wherever v > 0. The state is "
                             "unchanged", (long long)t, mu, (long long)grid->row_of[i],
                             (long long)grid->col_of[j]);
        }
        if (!finite) {
            if (err != NULL)
                err->iteration = t;
            return pymf_fail(err, PYMF_EDIVERGED, "the Gibbs sampler drew a non-finite value at "
                             "sweep %lld; the last finite state is kept", (long long)t);
        }
        double *swap = g->W;
        g->W = g->W_next;
        g->W_next = swap;
        swap = g->Ht;
        g->Ht = g->Ht_next;
        g->Ht_next = swap;
        g->t = t;
    }
    return PYMF_OK;
}

pymf_status pymf_gibbs_nmf_loglik(const pymf_gibbs_nmf *g, double *out, pymf_error *err)
{
    return pymf_tweedie_loglik(&g->model.likelihood, g->data, g->W, g->Ht, g->config.n_threads,
                               out, err);
}
