#include "pymf/langevin.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "pymf/linalg.h"
#include "pymf/philox.h"
#include "pymf/rng.h"

#include "dense_vec.h"

/* doubles of Langevin noise generated per call of pymf_noise_rows */
#define PYMF_NOISE_TILE 512

struct pymf_langevin {
    pymf_nmf_model model;
    const pymf_blocked_data *data;
    pymf_langevin_config config;
    double *W, *Ht;           /* current state */
    /* the state being built. An iteration first writes the likelihood gradient here and
     * then moves each coordinate in place (langevin_rows): no separate gradient arrays,
     * which at 10M ratings and K = 50 saved a third of the factors' memory */
    double *W_next, *Ht_next;
    int64_t t;
    gsl_rng *rng;             /* reseeded at every iteration, see rng.h */
    int64_t *batch;           /* SGLD minibatch */
    int64_t *part_sizes;      /* |Pi_p| */
    int64_t n_observed;       /* N (of the whole data set in a distributed run) */
    double step_scale;        /* phi / phi_ref with scale_step_by_phi, else 1 */
    /* per-coordinate step factors c and their square roots (pymf_langevin_set_row_steps),
     * used from iteration row_steps_from on; NULL: none */
    double *row_step_W, *row_step_Ht, *row_sd_W, *row_sd_Ht;
    int64_t row_steps_from;
};

void pymf_langevin_destroy(pymf_langevin *s)
{
    if (s == NULL)
        return;
    free(s->W);
    free(s->Ht);
    free(s->W_next);
    free(s->Ht_next);
    free(s->batch);
    free(s->part_sizes);
    free(s->row_step_W);
    free(s->row_step_Ht);
    free(s->row_sd_W);
    free(s->row_sd_Ht);
    if (s->rng != NULL)
        gsl_rng_free(s->rng);
    free(s);
}

pymf_langevin *pymf_langevin_create(const pymf_nmf_model *model, const pymf_blocked_data *data,
                                    const pymf_langevin_config *config, pymf_error *err)
{
    pymf_gsl_quiet();
    if (pymf_nmf_model_check(model, err) != PYMF_OK)
        return NULL;
    if (config->kind == PYMF_SGLD) {
        if (config->batch_size <= 0) {
            pymf_fail(err, PYMF_EINVAL, "SGLD batch_size must be positive");
            return NULL;
        }
        if (data->n_observed > 0xFFFFFFFFll) {
            pymf_fail(err, PYMF_EINVAL, "SGLD draws entries with a 32-bit generator: at most "
                                        "2^32 - 1 observed entries, got %lld",
                      (long long)data->n_observed);
            return NULL;
        }
    }
    if (data->n_observed <= 0) {
        pymf_fail(err, PYMF_EINVAL, "the data has no observed entries");
        return NULL;
    }
    if (config->phi_every < 0 ||
        (config->phi_every > 0 &&
         (model->likelihood.beta != 2.0 || !(config->phi_shape > 0.0) ||
          !(config->phi_rate > 0.0) || !isfinite(config->phi_shape) ||
          !isfinite(config->phi_rate))) ||
        (config->scale_step_by_phi && !(config->phi_ref > 0.0 && isfinite(config->phi_ref)))) {
        pymf_fail(err, PYMF_EINVAL, "a sampled phi needs beta = 2, phi_every >= 1 and a positive, "
                                    "finite inverse-gamma shape and rate");
        return NULL;
    }
    pymf_langevin *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory");
        return NULL;
    }
    s->model = *model;
    s->data = data;
    s->config = *config;
    s->step_scale = config->scale_step_by_phi ? model->likelihood.phi / config->phi_ref : 1.0;
    const pymf_grid *g = data->grid;
    const int K = model->likelihood.rank, B = g->n_blocks;
    const size_t w_size = (size_t)(g->n_rows * K), h_size = (size_t)(g->n_cols * K);
    s->W = calloc(w_size, sizeof(double));
    s->Ht = calloc(h_size, sizeof(double));
    s->W_next = calloc(w_size, sizeof(double));
    s->Ht_next = calloc(h_size, sizeof(double));
    s->part_sizes = calloc((size_t)B, sizeof(int64_t));
    s->rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (config->kind == PYMF_SGLD)
        s->batch = malloc(sizeof(int64_t) * (size_t)config->batch_size);
    if (!s->W || !s->Ht || !s->W_next || !s->Ht_next || !s->part_sizes ||
        !s->rng || (config->kind == PYMF_SGLD && !s->batch)) {
        pymf_langevin_destroy(s);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for the sampler state");
        return NULL;
    }
    for (int p = 0; p < B; ++p)
        s->part_sizes[p] = pymf_part_size(data, p);
    s->n_observed = data->n_observed;
    if (config->only_row_block >= B || (config->only_row_block >= 0 && config->kind != PYMF_PSGLD)) {
        pymf_langevin_destroy(s);
        pymf_fail(err, PYMF_EINVAL, "only_row_block must be a row piece (< B) of a PSGLD chain");
        return NULL;
    }
    return s;
}

pymf_status pymf_langevin_set_totals(pymf_langevin *s, int64_t n_observed,
                                     const int64_t *part_sizes, pymf_error *err)
{
    return pymf_set_part_totals(s->data->grid->n_blocks, n_observed, part_sizes, s->part_sizes,
                                &s->n_observed, err);
}

void pymf_langevin_get_cols(const pymf_langevin *s, int64_t c0, int64_t c1, double *out)
{
    const int K = s->model.likelihood.rank;
    memcpy(out, s->Ht + c0 * K, sizeof(double) * (size_t)((c1 - c0) * K));
}

void pymf_langevin_set_cols(pymf_langevin *s, int64_t c0, int64_t c1, const double *in)
{
    const int K = s->model.likelihood.rank;
    memcpy(s->Ht + c0 * K, in, sizeof(double) * (size_t)((c1 - c0) * K));
}

double *pymf_langevin_cols(pymf_langevin *s, int64_t c0) { return s->Ht + c0 * s->model.likelihood.rank; }

pymf_status pymf_langevin_set_state(pymf_langevin *s, const double *W, const double *Ht,
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

void pymf_langevin_get_state(const pymf_langevin *s, double *W, double *Ht, int64_t *t)
{
    const pymf_grid *g = s->data->grid;
    pymf_factors_store(W, Ht, s->W, s->Ht, g->n_rows, g->n_cols, s->model.likelihood.rank);
    if (t != NULL)
        *t = s->t;
}

void pymf_langevin_set_threads(pymf_langevin *s, int n_threads) { s->config.n_threads = n_threads; }

int pymf_langevin_part(const pymf_langevin *s, int64_t t)
{
    return pymf_choose_part(s->config.part_order, s->data->grid->n_blocks, s->part_sizes,
                            s->n_observed, s->config.schedule_seed, t, s->rng);
}

/* The moves of `count` coordinates (langevin_rows' arithmetic; factor and factor_sd NULL
 * for the plain move). Returns 0 if any new value is not finite. */
static inline int move_coordinates(const double *restrict c, double *restrict n,
                                   const double *restrict z, const double *restrict f,
                                   const double *restrict f_sd, int64_t count, double eps,
                                   double lam, double noise_sd, int exponential)
{
    int finite = 1;
    if (f != NULL) {
        /* a constant diagonal preconditioner: mirroring stays exact, as each coordinate's
         * reflection at 0 is its own */
        for (int64_t e = 0; e < count; ++e) {
            const double prior_grad = exponential ? -lam : -lam * c[e];
            double x = c[e] + eps * f[e] * (n[e] + prior_grad) + noise_sd * f_sd[e] * z[e];
            x = exponential ? fabs(x) : x;
            n[e] = x;
            finite &= isfinite(x) ? 1 : 0;
        }
        return finite;
    }
    for (int64_t e = 0; e < count; ++e) {
        /* exponential prior: d/dx log(lam e^{-lam x}) = -lam on x >= 0;
         * Gaussian prior N(0, 1/lam): -lam x */
        const double prior_grad = exponential ? -lam : -lam * c[e];
        double x = c[e] + eps * (n[e] + prior_grad) + noise_sd * z[e];
        x = exponential ? fabs(x) : x;
        n[e] = x;
        finite &= isfinite(x) ? 1 : 0;
    }
    return finite;
}

/* The Langevin move of rows [r0, r1) of one factor matrix (row-major, K columns), in place:
 * next holds the likelihood gradient on entry and, on return,
 * next = cur + eps * (grad + prior gradient) + sqrt(2 eps) z, mirrored for the exponential
 * prior (each coordinate reads its gradient before it is overwritten, so the arithmetic is
 * that of separate arrays). With step factors (factor, factor_sd = sqrt(factor), indexed as
 * cur; NULL: none) coordinate e moves by eps c_e (grad + prior gradient) +
 * sqrt(2 eps) sqrt(c_e) z: the same noise z, so a factor of 1 is the plain move. Returns 0
 * if any new value is not finite. */
PYMF_VECTOR_CLONES
static int langevin_rows(const pymf_langevin *s, const double *cur, double *next, int64_t r0,
                         int64_t r1, double eps, double lam, uint32_t stream, int64_t t,
                         const double *factor, const double *factor_sd)
{
    const int K = s->model.likelihood.rank;
    const double noise_sd = sqrt(2.0 * eps);
    const int exponential = s->model.prior == PYMF_PRIOR_EXPONENTIAL;
    int finite = 1;
    /* rows of whole groups of four, of which the first K are read (philox.h) */
    const int noise_width = pymf_noise_width(K);
    /* the noise of a tile of rows at a time, so that it is generated in vector loops */
    double tile[PYMF_NOISE_TILE];
    const int64_t tile_rows = noise_width <= PYMF_NOISE_TILE ? PYMF_NOISE_TILE / noise_width : 1;
    double *noise = noise_width <= PYMF_NOISE_TILE
        ? tile : malloc(sizeof(double) * (size_t)noise_width);
    if (noise == NULL)
        return 0;
    for (int64_t i0 = r0; i0 < r1; i0 += tile_rows) {
        const int64_t i1 = i0 + tile_rows < r1 ? i0 + tile_rows : r1;
        pymf_noise_rows(s->config.noise_seed, stream, (uint64_t)t, (uint32_t)i0,
                        (uint32_t)(i1 - i0), noise_width, noise);
        const int64_t offset = i0 * K;
        const double *f = factor != NULL ? factor + offset : NULL;
        const double *f_sd = factor != NULL ? factor_sd + offset : NULL;
        if (noise_width == K) {
            /* the tile's rows are contiguous in every array: one loop over their entries */
            finite &= move_coordinates(cur + offset, next + offset, noise, f, f_sd,
                                       (i1 - i0) * K, eps, lam, noise_sd, exponential);
            continue;
        }
        for (int64_t r = 0; r < i1 - i0; ++r)
            finite &= move_coordinates(cur + offset + r * K, next + offset + r * K,
                                       noise + r * noise_width, f ? f + r * K : NULL,
                                       f_sd ? f_sd + r * K : NULL, K, eps, lam, noise_sd,
                                       exponential);
    }
    if (noise != tile)
        free(noise);
    return finite;
}

/* PSGLD: block (b, c) of the chosen part, gradient and move fused so that the block's
 * factors stay in cache. */
static int psgld_block(pymf_langevin *s, int b, int c, double scale, double eps, int64_t t)
{
    const pymf_grid *g = s->data->grid;
    const int K = s->model.likelihood.rank;
    const int64_t r0 = g->row_start[b], r1 = g->row_start[b + 1];
    const int64_t c0 = g->col_start[c], c1 = g->col_start[c + 1];
    if (scale > 0.0) {
        pymf_tweedie_block_grad_set(&s->model.likelihood, s->data, b, c, scale, s->W, s->Ht,
                                    s->W_next, s->Ht_next);
    } else {
        memset(s->W_next + r0 * K, 0, sizeof(double) * (size_t)((r1 - r0) * K));
        memset(s->Ht_next + c0 * K, 0, sizeof(double) * (size_t)((c1 - c0) * K));
    }
    const int bounded = s->row_step_W != NULL && t >= s->row_steps_from;
    int finite = langevin_rows(s, s->W, s->W_next, r0, r1, eps, s->model.lam_w,
                               PYMF_STREAM_W, t, bounded ? s->row_step_W : NULL,
                               bounded ? s->row_sd_W : NULL);
    finite &= langevin_rows(s, s->Ht, s->Ht_next, c0, c1, eps, s->model.lam_h,
                            PYMF_STREAM_H, t, bounded ? s->row_step_Ht : NULL,
                            bounded ? s->row_sd_Ht : NULL);
    return finite;
}

pymf_status pymf_sgld_minibatch(uint64_t schedule_seed, int64_t t, int64_t n_observed,
                                int64_t batch_size, int64_t *out, pymf_error *err)
{
    if (n_observed <= 0 || n_observed > 0xFFFFFFFFll)
        return pymf_fail(err, PYMF_EINVAL, "n_observed must be in [1, 2^32 - 1]");
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (rng == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for a GSL generator");
    gsl_rng_set(rng, pymf_stream_seed(schedule_seed, (uint64_t)t));
    for (int64_t m = 0; m < batch_size; ++m)
        out[m] = (int64_t)gsl_rng_uniform_int(rng, (unsigned long)n_observed);
    gsl_rng_free(rng);
    return PYMF_OK;
}

/* SGLD: accumulate the minibatch gradient in draw order (the same sum for any thread count). */
static void sgld_gradient(pymf_langevin *s, int64_t t)
{
    const pymf_blocked_data *d = s->data;
    const pymf_grid *g = d->grid;
    const int K = s->model.likelihood.rank;
    const double beta = s->model.likelihood.beta;
    const double coef = (double)d->n_observed / (double)s->config.batch_size / s->model.likelihood.phi;
    gsl_rng_set(s->rng, pymf_stream_seed(s->config.schedule_seed, (uint64_t)t));
    for (int64_t m = 0; m < s->config.batch_size; ++m)
        s->batch[m] = (int64_t)gsl_rng_uniform_int(s->rng, (unsigned long)d->n_observed);
    memset(s->W_next, 0, sizeof(double) * (size_t)(g->n_rows * K));
    memset(s->Ht_next, 0, sizeof(double) * (size_t)(g->n_cols * K));
    for (int64_t m = 0; m < s->config.batch_size; ++m) {
        int64_t i, j;
        double v;
        if (d->is_dense) {
            i = s->batch[m] / g->n_cols;
            j = s->batch[m] % g->n_cols;
            v = d->V[s->batch[m]];
        } else {
            i = pymf_entry_row(d, s->batch[m]);
            j = pymf_entry_col(d, s->batch[m]);
            v = pymf_entry_value(d, s->batch[m]);
        }
        const double *w = s->W + i * K, *h = s->Ht + j * K;
        const double mu = pymf_tweedie_floor_mu(pymf_dot(w, h, K), beta);
        const double grad = coef * pymf_tweedie_dlogp_dmu_floored(v, mu, beta, 1.0);
        double *gw = s->W_next + i * K, *gh = s->Ht_next + j * K;
        pymf_axpy2(K, grad, h, gw, w, gh);
    }
}

pymf_status pymf_langevin_run(pymf_langevin *s, int64_t n_iter, const double *step_sizes,
                              pymf_error *err)
{
    const pymf_grid *g = s->data->grid;
    const int B = g->n_blocks;
    const int threads = s->config.n_threads > 0 ? s->config.n_threads : pymf_default_threads();
    (void)threads;
    for (int64_t n = 0; n < n_iter; ++n) {
        const int64_t t = s->t + 1;
        const double eps = step_sizes[n] * s->step_scale;
        if (!(eps > 0.0) || !isfinite(eps))
            return pymf_fail(err, PYMF_EINVAL, "step size at iteration %lld is %g; it must be "
                             "positive and finite", (long long)t, eps);
        int finite = 1;
        if (s->config.kind == PYMF_PSGLD) {
            const int part = pymf_langevin_part(s, t);
            const int64_t part_size = s->part_sizes[part];
            const double scale = part_size > 0 ? (double)s->n_observed / (double)part_size : 0.0;
            const int only = s->config.only_row_block;
            if (only >= 0) {
                finite = psgld_block(s, only, pymf_part_column(B, part, only), scale, eps, t);
            } else {
#pragma omp parallel for num_threads(threads) schedule(static) reduction(& : finite)
                for (int b = 0; b < B; ++b)
                    finite &= psgld_block(s, b, pymf_part_column(B, part, b), scale, eps, t);
            }
        } else {
            if (s->config.kind == PYMF_LD)
                pymf_tweedie_grad(&s->model.likelihood, s->data, s->W, s->Ht, threads,
                                  s->W_next, s->Ht_next, err);
            else
                sgld_gradient(s, t);
            const int bounded = s->row_step_W != NULL && t >= s->row_steps_from;
#pragma omp parallel for num_threads(threads) schedule(static) reduction(& : finite)
            for (int b = 0; b < B; ++b) {
                finite &= langevin_rows(s, s->W, s->W_next, g->row_start[b],
                                        g->row_start[b + 1], eps, s->model.lam_w, PYMF_STREAM_W, t,
                                        bounded ? s->row_step_W : NULL,
                                        bounded ? s->row_sd_W : NULL);
                finite &= langevin_rows(s, s->Ht, s->Ht_next, g->col_start[b],
                                        g->col_start[b + 1], eps, s->model.lam_h, PYMF_STREAM_H, t,
                                        bounded ? s->row_step_Ht : NULL,
                                        bounded ? s->row_sd_Ht : NULL);
            }
        }
        if (!finite) {
            if (err != NULL)
                err->iteration = t;
            return pymf_fail(err, PYMF_EDIVERGED,
                             "the chain diverged at iteration %lld (a parameter became infinite "
                             "or NaN; try a smaller step size); the last finite state is kept",
                             (long long)t);
        }
        double *swap = s->W;
        s->W = s->W_next;
        s->W_next = swap;
        swap = s->Ht;
        s->Ht = s->Ht_next;
        s->Ht_next = swap;
        s->t = t;
        if (s->config.phi_every > 0 && s->config.only_row_block < 0 &&
            t % s->config.phi_every == 0) {
            double half_rss = 0.0;
            pymf_status status = pymf_langevin_half_rss(s, &half_rss, err);
            if (status == PYMF_OK)
                status = pymf_langevin_draw_phi(s, half_rss, t, err);
            if (status != PYMF_OK)
                return status;
        }
    }
    return PYMF_OK;
}

pymf_status pymf_langevin_loglik(const pymf_langevin *s, double *out, pymf_error *err)
{
    return pymf_tweedie_loglik(&s->model.likelihood, s->data, s->W, s->Ht, s->config.n_threads,
                               out, err);
}

/* ---- the sampled dispersion (beta = 2) ---- */

pymf_status pymf_langevin_half_rss(const pymf_langevin *s, double *out, pymf_error *err)
{
    /* the log-likelihood at phi = 1 is -sum d_2 exactly (a negation is exact), in the
     * row-piece order of pymf_tweedie_loglik */
    pymf_tweedie unit = s->model.likelihood;
    unit.phi = 1.0;
    double loglik = 0.0;
    const pymf_status status = pymf_tweedie_loglik(&unit, s->data, s->W, s->Ht,
                                                   s->config.n_threads, &loglik, err);
    *out = -loglik;
    return status;
}

pymf_status pymf_langevin_draw_phi(pymf_langevin *s, double half_rss_total, int64_t t,
                                   pymf_error *err)
{
    if (s->config.phi_every <= 0)
        return pymf_fail(err, PYMF_EINVAL, "this chain's phi is fixed, not sampled");
    if (!(half_rss_total >= 0.0) || !isfinite(half_rss_total)) {
        if (err != NULL)
            err->iteration = t;
        return pymf_fail(err, PYMF_EDIVERGED, "the chain diverged at iteration %lld: the residual "
                         "sum of squares for the phi draw is %g", (long long)t, 2.0 * half_rss_total);
    }
    /* conjugacy: p(phi | W, H, V) ~ phi^-(a + N/2 + 1) exp(-(b + RSS/2) / phi), and
     * 1 / Gamma(shape, scale = 1/rate) is InvGamma(shape, rate) */
    const double shape = s->config.phi_shape + 0.5 * (double)s->n_observed;
    const double rate = s->config.phi_rate + half_rss_total;
    gsl_rng_set(s->rng, pymf_stream_seed(s->config.phi_seed, (uint64_t)t));
    const double phi = 1.0 / gsl_ran_gamma(s->rng, shape, 1.0 / rate);
    return pymf_langevin_set_phi(s, phi, err);
}

double pymf_langevin_phi(const pymf_langevin *s) { return s->model.likelihood.phi; }

pymf_status pymf_langevin_set_phi(pymf_langevin *s, double phi, pymf_error *err)
{
    if (!(phi > 0.0) || !isfinite(phi))
        return pymf_fail(err, PYMF_EINVAL, "phi must be positive and finite, got %g", phi);
    s->model.likelihood.phi = phi;
    s->step_scale = s->config.scale_step_by_phi ? phi / s->config.phi_ref : 1.0;
    return PYMF_OK;
}

/* ---- per-coordinate step factors (PSGLD's per-row bound) ---- */

static void free_row_steps(pymf_langevin *s)
{
    free(s->row_step_W);
    free(s->row_step_Ht);
    free(s->row_sd_W);
    free(s->row_sd_Ht);
    s->row_step_W = s->row_step_Ht = s->row_sd_W = s->row_sd_Ht = NULL;
}

pymf_status pymf_langevin_set_row_steps(pymf_langevin *s, const double *step_W,
                                        const double *step_Ht, int64_t from_t, pymf_error *err)
{
    if (step_W == NULL && step_Ht == NULL) {
        free_row_steps(s);
        return PYMF_OK;
    }
    if (step_W == NULL || step_Ht == NULL || from_t < 1)
        return pymf_fail(err, PYMF_EINVAL, "row steps need factors for W and H and a first "
                                           "iteration >= 1");
    const pymf_grid *g = s->data->grid;
    const int K = s->model.likelihood.rank;
    const size_t w_size = (size_t)(g->n_rows * K), h_size = (size_t)(g->n_cols * K);
    for (size_t e = 0; e < w_size + h_size; ++e) {
        const double c = e < w_size ? step_W[e] : step_Ht[e - w_size];
        if (!(c > 0.0 && c <= 1.0))
            return pymf_fail(err, PYMF_EINVAL, "a step factor must be in (0, 1], got %g", c);
    }
    double *fw = malloc(sizeof(double) * w_size), *fh = malloc(sizeof(double) * h_size);
    double *sw = malloc(sizeof(double) * w_size), *sh = malloc(sizeof(double) * h_size);
    if (!fw || !fh || !sw || !sh) {
        free(fw);
        free(fh);
        free(sw);
        free(sh);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the row step factors");
    }
    for (size_t e = 0; e < w_size; ++e) {
        fw[e] = step_W[e];
        sw[e] = sqrt(step_W[e]);
    }
    for (size_t e = 0; e < h_size; ++e) {
        fh[e] = step_Ht[e];
        sh[e] = sqrt(step_Ht[e]);
    }
    free_row_steps(s);
    s->row_step_W = fw;
    s->row_step_Ht = fh;
    s->row_sd_W = sw;
    s->row_sd_Ht = sh;
    s->row_steps_from = from_t;
    return PYMF_OK;
}

/* weight * x x^T added to the K x K block out. Only the upper triangle is kept (the lower
 * one is overwritten once at the end by pymf_langevin_fisher_mirror), but the whole square
 * is computed: rows of equal length K vectorise, the triangle's shrinking rows do not, and
 * the upper triangle's values (and bits) are the same either way. Each term (weight x_k)
 * x_l is added by one fma, as the dense tiles add it (dense_tiles.h, which this shares
 * with the block gradient). */
static inline void add_outer(int K, double weight, const double *x, double *out)
{
    for (int k = 0; k < K; ++k) {
        const double wx = weight * x[k];
        double *row = out + (int64_t)k * K;
        for (int l = 0; l < K; ++l)
            row[l] = fma(wx, x[l], row[l]);
    }
}

/* Tweedie's Fisher information of mu at phi = 1, 1 / Var(v) = mu^(beta - 2), at mu =
 * floor(dot), dot = <w_i, h_j> (pymf_dot_fused, the block gradient's mu): the weight a_ij
 * of entry (i, j)'s curvature */
KERNEL_INLINE double fisher_weight(double dot, double beta)
{
    const double mu = pymf_tweedie_floor_mu(dot, beta);
    /* the common betas without pow(): a division is correctly rounded and far cheaper */
    return beta == 2.0 ? 1.0
           : beta == 1.0 ? 1.0 / mu
           : beta == 0.0 ? 1.0 / (mu * mu) : pow(mu, beta - 2.0);
}

/* one entry's terms, added in place (the sparse path's order, and the dense one's when
 * its panel scratch cannot be had) */
static inline void fisher_entry(int K, double beta, const double *w, const double *h, double *fw,
                                double *fh)
{
    const double weight = fisher_weight(pymf_dot_fused(w, h, K), beta);
    if (fw != NULL)
        add_outer(K, weight, h, fw);
    if (fh != NULL)
        add_outer(K, weight, w, fh);
}

/* fisher_weight in place over the m x n entries of a panel (rows GRAD_PANEL apart), called
 * with a literal beta for the common likelihoods, so that the branches on beta fold away
 * and the divisions vectorise (each still correctly rounded: the same bits) */
KERNEL_INLINE void fisher_weights_of(double *a, int m, int n, double beta)
{
    for (int r = 0; r < m; ++r) {
        double *restrict row = a + r * GRAD_PANEL;
        for (int c = 0; c < n; ++c)
            row[c] = fisher_weight(row[c], beta);
    }
}

KERNEL_INLINE void fisher_weights(double *a, int m, int n, double beta)
{
    if (beta == 1.0)
        fisher_weights_of(a, m, n, 1.0);
    else if (beta == 2.0)
        fisher_weights_of(a, m, n, 2.0);
    else if (beta == 0.0)
        fisher_weights_of(a, m, n, 0.0);
    else
        fisher_weights_of(a, m, n, beta);
}

/* coefs[s K + k] = a_s x_s[k] for s < n (a_s = a[s * a_step], x_s = x + s K): the
 * coefficients a_ij h_jk (a_ij w_ik) of the dense Fisher products, each the product
 * add_outer rounds (weight * x[k]) */
KERNEL_INLINE void fisher_coefs(int K, int n, const double *a, int a_step, const double *x,
                                double *restrict coefs)
{
    for (int s = 0; s < n; ++s) {
        /* row pointers, not s * K + k: with int indices GCC vectorised over s (scatters) */
        const double a_s = a[s * a_step];
        const double *restrict x_s = x + (size_t)s * (size_t)K;
        double *restrict c_s = coefs + (size_t)s * (size_t)K;
        for (int k = 0; k < K; ++k)
            c_s[k] = a_s * x_s[k];
    }
}

/* The dense path's register tiles (fisher_dense.h) at each width (dense_width.h), where
 * GCC builds clones: 4-wide tiles lowered to SSE2 pairs (the baseline, or a build without
 * clones) ran 2.4x slower than the per-entry loop, so only AVX2 with FMA and AVX-512 get
 * tiles */
#if defined(PYMF_DENSE_W8)
#define DENSE_LANES 4
#include "dense_width.h"
#include "fisher_dense.h"

#define DENSE_LANES 8
#include "dense_width.h"
#include "fisher_dense.h"
#endif

/* The widest tiles this CPU has; 0 (nothing done): the per-entry loop */
static int dense_fisher_block(int K, double beta, const double *W, const double *Ht, int64_t r0,
                              int64_t r1, int64_t c0, int64_t c1, double *fisher_W,
                              double *fisher_Ht)
{
#if defined(PYMF_DENSE_W8)
    if (__builtin_cpu_supports("x86-64-v4"))
        return dense_fisher_block_w8(K, beta, W, Ht, r0, r1, c0, c1, fisher_W, fisher_Ht);
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return dense_fisher_block_w4(K, beta, W, Ht, r0, r1, c0, c1, fisher_W, fisher_Ht);
#endif
    (void)K, (void)beta, (void)W, (void)Ht, (void)r0, (void)r1, (void)c0, (void)c1;
    (void)fisher_W, (void)fisher_Ht;
    return 0;
}

void pymf_langevin_fisher_mirror(int K, int64_t n, double *fisher)
{
    for (int64_t i = 0; i < n; ++i) {
        double *m = fisher + i * K * K;
        for (int k = 0; k < K; ++k)
            for (int l = 0; l < k; ++l)
                m[(int64_t)k * K + l] = m[(int64_t)l * K + k];
    }
}

/* cloned for AVX-512 / AVX2 / baseline: the sparse path's outer products are its whole
 * cost (the dense path has its own tiles) */
PYMF_VECTOR_CLONES
pymf_status pymf_langevin_fisher_block(const pymf_langevin *s, int b, int c, double *fisher_W,
                                       double *fisher_Ht, pymf_error *err)
{
    const pymf_blocked_data *d = s->data;
    const pymf_grid *g = d->grid;
    const int K = s->model.likelihood.rank, B = g->n_blocks;
    const double beta = s->model.likelihood.beta;
    if (b < 0 || b >= B || c < 0 || c >= B)
        return pymf_fail(err, PYMF_EINVAL, "block (%d, %d) is not on the %d x %d grid", b, c, B, B);
    const int64_t r0 = g->row_start[b], c0 = g->col_start[c];
    const int64_t KK = (int64_t)K * K;
    if (d->is_dense && dense_fisher_block(K, beta, s->W, s->Ht, r0, g->row_start[b + 1], c0,
                                          g->col_start[c + 1], fisher_W, fisher_Ht))
        return PYMF_OK;
    if (d->is_dense) {
        /* no tiles for this CPU, or no memory for their scratch: the dense layout's block
         * row by row, the sparse layout's order (the same bits) */
        for (int64_t i = r0; i < g->row_start[b + 1]; ++i)
            for (int64_t j = c0; j < g->col_start[c + 1]; ++j)
                fisher_entry(K, beta, s->W + i * K, s->Ht + j * K,
                             fisher_W ? fisher_W + (i - r0) * KK : NULL,
                             fisher_Ht ? fisher_Ht + (j - c0) * KK : NULL);
    } else {
        const int64_t blk = (int64_t)b * B + c;
        const int64_t e0 = d->block_ptr[blk], e1 = d->block_ptr[blk + 1];
        PYMF_FOR_ENTRY_FORMAT(d->format, F,
            for (int64_t e = e0; e < e1; ++e) {
                const int64_t i = pymf_entry_row_as(d, e, F), j = pymf_entry_col_as(d, e, F);
                fisher_entry(K, beta, s->W + i * K, s->Ht + j * K,
                             fisher_W ? fisher_W + (i - r0) * KK : NULL,
                             fisher_Ht ? fisher_Ht + (j - c0) * KK : NULL);
            })
    }
    return PYMF_OK;
}
