/* BPMF, the DSGLD kernel (pymf/bpmf.h): the steps of one block in one round, shared by
 * the chains in shared memory (bpmf_dsgld.c) and the MPI workers (pymf.bpmf.mpi). */
#include "pymf/bpmf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pymf/linalg.h"
#include "pymf/philox.h"

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
    int noise_width;            /* pymf_noise_width(width): of each row, width are read */
    double *noise_block;        /* their Gaussians, touched rows x noise_width */
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
    s->noise_width = pymf_noise_width(s->width);
    s->noise_block = malloc((size_t)((most + 1) * s->noise_width) * sizeof(double));
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
        const double r =
            blk->ratings[e] - model->mean_rating - pymf_dot_sequential(u, v, D) - a[i] - b[j];
        pymf_axpy2(D, r, v, gu, u, gv);
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
                                  int64_t m, const double *lambdas)
{
    /* N_s / (v(s) m), times the chain's current tau from the Gaussian likelihood */
    return pymf_bpmf_current_tau(model, lambdas) * (double)blk->n_entries /
           (blk->visit_rate * (double)m);
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
    const double scale = lik_scale_of(model, blk, st->batch_size, lambdas);
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

/* How many touched rows ahead the moves prefetch a row's factors, likelihood sums and (with
 * the per-row bound) step factors. */
#define PREFETCH_AHEAD 8

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

/* The same with a step eps c_k and noise variance 2 eps n_k (over hbar) per coordinate: c
 * holds (c_1..c_D, c_bias, sqrt(n_1)..sqrt(n_D), sqrt(n_bias)) (the square roots stored, so
 * a step takes none). */
static int move_row_scaled(int D, int use_bias, double eps, double noise_sd, const double *c,
                           const double *g, const double *z, double *x, double *bias)
{
    int finite = 1;
    const double *root = c + D + 1;
    for (int k = 0; k < D; ++k) {
        x[k] += eps * c[k] * g[k] + noise_sd * root[k] * z[k];
        finite &= isfinite(x[k]);
    }
    if (use_bias) {
        *bias += eps * c[D] * g[D] + noise_sd * root[D] * z[D];
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
    eps = pymf_dsgld_tau_scaled_step(model, st, lambdas, eps);
    const double scale = lik_scale_of(model, blk, st->batch_size, lambdas);
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
                                    (uint64_t)step, s->noise_ids, (uint32_t)n_touched,
                                    s->noise_width, s->noise_block);
            }
            const double *factors_side = side == 0 ? blk->step_user : blk->step_item;
            const double *rows_side = side == 0 ? U : V;
            const double *sums_side = side == 0 ? s->grad_u : s->grad_v;
            for (int64_t n = 0; n < n_touched; ++n) {
                const int64_t r = touched[n];
#if defined(__GNUC__)
                if (n + PREFETCH_AHEAD < n_touched) {
                    /* the touched rows are scattered over the stripe and miss the caches:
                     * fetch a later row's factors, likelihood sums and step factors (2 (D + 1)
                     * doubles) ahead of use (prefetches change no result) */
                    const int64_t ahead = touched[n + PREFETCH_AHEAD];
                    __builtin_prefetch(rows_side + ahead * D);
                    __builtin_prefetch(rows_side + ahead * D + D - 1);
                    __builtin_prefetch(sums_side + ahead * width);
                    __builtin_prefetch(sums_side + ahead * width + width - 1);
                    if (factors_side != NULL)
                        for (int c = 0; c < 2 * width; c += 8)
                            __builtin_prefetch(factors_side + ahead * 2 * width + c);
                }
#endif
                const double *z_row = st->add_noise ? s->noise_block + n * s->noise_width : z;
                /* a row's own steps eps c_rk, one per coordinate (a constant diagonal
                 * preconditioner: drift eps c_rk g_k and noise 2 eps c_rk keep the posterior
                 * stationary); without factors the chain is computed exactly as before */
                const double *factors = side == 0 ? blk->step_user : blk->step_item;
                if (side == 0) {
                    row_estimate(D, model->use_bias, scale, blk->h_user[r], lambdas, lambdas[2 * D],
                                 U + r * D, a[r], s->grad_u + r * width, g);
                    const double sd = st->noise_correction ? noise_sd / sqrt(blk->h_user[r]) : noise_sd;
                    finite &= factors != NULL
                        ? move_row_scaled(D, model->use_bias, eps, sd, factors + r * 2 * width, g, z_row,
                                          U + r * D, a + r)
                        : move_row(D, model->use_bias, eps, sd, g, z_row, U + r * D, a + r);
                } else {
                    row_estimate(D, model->use_bias, scale, blk->h_item[r], lambdas + D,
                                 lambdas[2 * D + 1], V + r * D, b[r], s->grad_v + r * width, g);
                    const double sd = st->noise_correction ? noise_sd / sqrt(blk->h_item[r]) : noise_sd;
                    finite &= factors != NULL
                        ? move_row_scaled(D, model->use_bias, eps, sd, factors + r * 2 * width, g, z_row,
                                          V + r * D, b + r)
                        : move_row(D, model->use_bias, eps, sd, g, z_row, V + r * D, b + r);
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
