/* BPMF, the DSGLD driver (pymf/bpmf.h): the schedule of orthogonal block groups, the bias
 * correctors, the Gibbs step of the precisions between rounds, and the rounds of several
 * chains in shared memory (their blocks' steps are bpmf_block.c's). */
#include "pymf/bpmf.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "bpmf_internal.h"
#include "pymf/rng.h"

/* ------------------------------------------------------------------ schedule and correctors */

int pymf_bpmf_group_block(const pymf_bpmf_data *d, int group, int slot)
{
    const int P = d->n_row_blocks, Q = d->n_col_blocks;
    if (P <= Q)
        return slot * Q + (slot + group) % Q;
    return ((slot + group) % P) * Q + slot;
}

pymf_status pymf_bpmf_bias_correctors(const pymf_bpmf_data *d, int64_t m, double *h_user,
                                      double *h_item, pymf_error *err)
{
    const int P = d->n_row_blocks, Q = d->n_col_blocks;
    const double visit_rate = 1.0 / pymf_bpmf_n_groups(d);
    int64_t *count_user = calloc((size_t)d->n_users, sizeof *count_user);
    int64_t *count_item = calloc((size_t)d->n_items, sizeof *count_item);
    if (count_user == NULL || count_item == NULL) {
        free(count_user);
        free(count_item);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the bias correctors of %lld users "
                         "and %lld items", (long long)d->n_users, (long long)d->n_items);
    }
    memset(h_user, 0, (size_t)d->n_users * sizeof *h_user);
    memset(h_item, 0, (size_t)d->n_items * sizeof *h_item);
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
    double *step_user, *step_item; /* per-row step factors, or NULL */
    double *tau_reference;         /* per chain (pymf_dsgld_set_tau_reference), or NULL */
    int64_t row_steps_from;        /* the first round that uses them */
    uint64_t *noise_seeds, *hyper_seeds;
    pymf_dsgld_block *blocks;
    pymf_dsgld_scratch **scratch;  /* n_chains x group_size */
    pymf_error *task_errors;
    int64_t round;
    /* Each chain's sum of squared training residuals and the round it belongs to (-1: none):
     * the hyper step computes it for tau's draw, and the trace point and kept draw at that
     * round (the hyper step's cadence by default) read it instead of another pass over the
     * ratings each. Any change of the state leaves it behind (a new round or set_state). */
    double *rss;
    int64_t *rss_round;
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
    free(d->step_user);
    free(d->step_item);
    free(d->tau_reference);
    free(d->noise_seeds);
    free(d->hyper_seeds);
    free(d->blocks);
    free(d->task_errors);
    free(d->rss);
    free(d->rss_round);
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
    d->chain_doubles = (size_t)((L + M) * D + L + M + PYMF_BPMF_N_PRECISIONS(D));
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
    d->rss = calloc((size_t)C, sizeof *d->rss);
    d->rss_round = malloc((size_t)C * sizeof *d->rss_round);
    if (d->state == NULL || d->backup == NULL || d->params == NULL || d->h_user == NULL ||
        d->h_item == NULL || d->noise_seeds == NULL || d->hyper_seeds == NULL ||
        d->blocks == NULL || d->scratch == NULL || d->task_errors == NULL || d->rss == NULL ||
        d->rss_round == NULL) {
        pymf_dsgld_destroy(d);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for %d DSGLD chains", C);
        return NULL;
    }
    for (int c = 0; c < C; ++c) {
        params_view(&d->params[c], d->state + (size_t)c * d->chain_doubles, D, L, M);
        d->rss_round[c] = -1;
    }
    memcpy(d->noise_seeds, noise_seeds, (size_t)C * sizeof(uint64_t));
    memcpy(d->hyper_seeds, hyper_seeds, (size_t)C * sizeof(uint64_t));
    if (pymf_bpmf_bias_correctors(data, config->batch_size, d->h_user, d->h_item, err) != PYMF_OK) {
        pymf_dsgld_destroy(d);
        return NULL;
    }
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
    for (int c = 0; c < C; ++c) {
        for (int k = 0; k < 2 * D + 2; ++k)
            d->params[c].lambdas[k] = 1.0;
        d->params[c].lambdas[PYMF_BPMF_TAU(D)] = model->tau;
    }
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
    if (pymf_bpmf_check_finite(U, V, a, b, lambdas, L, M, D, PYMF_BPMF_N_PRECISIONS(D), err) != PYMF_OK)
        return err->status;
    for (int k = 0; k < PYMF_BPMF_N_PRECISIONS(D); ++k)
        if (!(lambdas[k] > 0.0))
            return pymf_fail(err, PYMF_EINVAL, "precisions must be positive");
    pymf_bpmf_params *p = &d->params[chain];
    memcpy(p->U, U, (size_t)(L * D) * sizeof(double));
    memcpy(p->V, V, (size_t)(M * D) * sizeof(double));
    for (int64_t i = 0; i < L; ++i)
        p->a[i] = d->model.use_bias ? a[i] : 0.0;
    for (int64_t j = 0; j < M; ++j)
        p->b[j] = d->model.use_bias ? b[j] : 0.0;
    memcpy(p->lambdas, lambdas, (size_t)PYMF_BPMF_N_PRECISIONS(D) * sizeof(double));
    if (!d->model.sample_tau)  /* a fixed tau is the model's */
        p->lambdas[PYMF_BPMF_TAU(D)] = d->model.tau;
    d->round = round;
    for (int c = 0; c < d->config.n_chains; ++c)  /* d->round is every chain's */
        d->rss_round[c] = -1;
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
        memcpy(lambdas, p->lambdas, (size_t)PYMF_BPMF_N_PRECISIONS(D) * sizeof(double));
    if (round != NULL)
        *round = d->round;
}

/* The hyper step of one chain given its sum of squared training residuals rss (read only
 * when the model samples tau). */
static pymf_status hyper_step_given(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                                    pymf_bpmf_params *p, const double *h_user,
                                    const double *h_item, uint64_t hyper_seed, int64_t round,
                                    double rss, pymf_error *err)
{
    pymf_gsl_quiet();
    const int D = model->rank;
    if (model->sample_tau && !isfinite(rss))
        return pymf_fail(err, PYMF_EDIVERGED, "round %lld: the training residuals' sum of "
                         "squares is %g, so tau cannot be drawn", (long long)round, rss);
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
    pymf_bpmf_draw_precisions(model, data->n_users, data->n_items, p, rng);
    /* rss may be computed before the rows without ratings are drawn: they have no
     * residuals, and the precisions are in none */
    if (model->sample_tau)
        pymf_bpmf_draw_tau(model, data->nnz, rss, p, rng);
    gsl_rng_free(rng);
    return PYMF_OK;
}

static pymf_status residuals_out_of_memory(pymf_error *err)
{
    return pymf_fail(err, PYMF_ENOMEM, "out of memory for the residuals of tau's draw");
}

pymf_status pymf_dsgld_hyper_step(const pymf_bpmf_model *model, const pymf_bpmf_data *data,
                                  pymf_bpmf_params *p, const double *h_user, const double *h_item,
                                  uint64_t hyper_seed, int64_t round, int n_threads,
                                  pymf_error *err)
{
    double rss = 0.0;
    if (model->sample_tau && !pymf_bpmf_sq_errors(model, data, p, 1, &rss, n_threads))
        return residuals_out_of_memory(err);
    return hyper_step_given(model, data, p, h_user, h_item, hyper_seed, round, rss, err);
}

pymf_status pymf_dsgld_sq_errors(pymf_dsgld *d, int first, int n_chains, double *out,
                                 pymf_error *err)
{
    if (first < 0 || n_chains < 0 || first + n_chains > d->config.n_chains)
        return pymf_fail(err, PYMF_EINVAL, "chains %d..%d out of range", first,
                         first + n_chains - 1);
    const int n_threads = d->config.n_threads > 0 ? d->config.n_threads : pymf_default_threads();
    /* the chains whose sums are not current: one run of them, from the first to the last */
    int lo = first + n_chains, hi = first - 1;
    for (int c = first; c < first + n_chains; ++c)
        if (d->rss_round[c] != d->round) {
            lo = c < lo ? c : lo;
            hi = c;
        }
    if (lo <= hi) {
        if (!pymf_bpmf_sq_errors(&d->model, d->data, &d->params[lo], hi - lo + 1, d->rss + lo,
                                 n_threads))
            return residuals_out_of_memory(err);
        for (int c = lo; c <= hi; ++c)
            d->rss_round[c] = d->round;
    }
    memmove(out, d->rss + first, (size_t)n_chains * sizeof *out); /* out may be d->rss */
    return PYMF_OK;
}

pymf_status pymf_dsgld_set_row_steps(pymf_dsgld *d, const double *step_user,
                                     const double *step_item, const double *noise_user,
                                     const double *noise_item, int64_t from_round,
                                     pymf_error *err)
{
    const int64_t L = d->data->n_users, M = d->data->n_items;
    const int64_t w = d->model.rank + 1;
    free(d->step_user);
    free(d->step_item);
    d->step_user = d->step_item = NULL;
    if (step_user == NULL || step_item == NULL || noise_user == NULL || noise_item == NULL)
        return PYMF_OK;
    for (int64_t i = 0; i < (L + M) * w; ++i) {
        const double c = i < L * w ? step_user[i] : step_item[i - L * w];
        const double n = i < L * w ? noise_user[i] : noise_item[i - L * w];
        /* a factor above 1 would leave the stability bound the global step was chosen for;
         * noise above the step's would sample a tempered posterior */
        if (!(c > 0.0 && c <= 1.0 && n >= 0.0 && n <= c))
            return pymf_fail(err, PYMF_EINVAL, "row step factor %g / noise factor %g of %s %lld "
                             "is not in (0, 1] / [0, step factor]", c, n,
                             i < L * w ? "user" : "item",
                             (long long)(i < L * w ? i / w : (i - L * w) / w));
    }
    d->step_user = malloc((size_t)(L > 0 ? 2 * L * w : 1) * sizeof(double));
    d->step_item = malloc((size_t)(M > 0 ? 2 * M * w : 1) * sizeof(double));
    if (d->step_user == NULL || d->step_item == NULL) {
        free(d->step_user);
        free(d->step_item);
        d->step_user = d->step_item = NULL;
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the row step factors");
    }
    /* each row: its step factors, then the square roots of its noise factors */
    for (int side = 0; side < 2; ++side) {
        const int64_t n = side == 0 ? L : M;
        const double *src = side == 0 ? step_user : step_item;
        const double *noise = side == 0 ? noise_user : noise_item;
        double *dst = side == 0 ? d->step_user : d->step_item;
        for (int64_t i = 0; i < n; ++i)
            for (int64_t k = 0; k < w; ++k) {
                dst[2 * w * i + k] = src[w * i + k];
                dst[2 * w * i + w + k] = sqrt(noise[w * i + k]);
            }
    }
    d->row_steps_from = from_round;
    return PYMF_OK;
}

pymf_status pymf_dsgld_set_tau_reference(pymf_dsgld *d, const double *tau_reference,
                                         pymf_error *err)
{
    const int C = d->config.n_chains;
    if (tau_reference == NULL) {
        free(d->tau_reference);
        d->tau_reference = NULL;
        return PYMF_OK;
    }
    for (int c = 0; c < C; ++c)
        if (!(tau_reference[c] > 0.0) || !isfinite(tau_reference[c]))
            return pymf_fail(err, PYMF_EINVAL, "tau reference %g of chain %d is not positive",
                             tau_reference[c], c);
    if (d->tau_reference == NULL) {
        d->tau_reference = malloc((size_t)C * sizeof(double));
        if (d->tau_reference == NULL)
            return pymf_fail(err, PYMF_ENOMEM, "no memory for %d tau references", C);
    }
    memcpy(d->tau_reference, tau_reference, (size_t)C * sizeof(double));
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
            /* a copy of the block: the row factors apply from row_steps_from on */
            pymf_dsgld_block blk_round = d->blocks[s];
            if (d->step_user == NULL || round < d->row_steps_from) {
                blk_round.step_user = NULL;
                blk_round.step_item = NULL;
            } else {
                blk_round.step_user = d->step_user + 2 * (D + 1) * blk_round.user_offset;
                blk_round.step_item = d->step_item + 2 * (D + 1) * blk_round.item_offset;
            }
            const pymf_dsgld_block *blk = &blk_round;
            pymf_bpmf_params *p = &d->params[c];
            const pymf_dsgld_stepper st = {d->noise_seeds[c], d->config.batch_size,
                                           d->config.add_noise, d->config.noise_correction,
                                           d->tau_reference ? d->tau_reference[c] : 0.0};
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
        d->round = round;
        if (d->config.hyper_every > 0 && round % d->config.hyper_every == 0) {
            /* every chain's residuals in one pass (the state before the draws: see
             * hyper_step_given), kept for the trace */
            pymf_status status = d->model.sample_tau ? pymf_dsgld_sq_errors(d, 0, C, d->rss, err)
                                                     : PYMF_OK;
            for (int c = 0; c < C && status == PYMF_OK; ++c)
                status = hyper_step_given(&d->model, d->data, &d->params[c], d->h_user,
                                          d->h_item, d->hyper_seeds[c], round, d->rss[c], err);
            if (status != PYMF_OK) {
                /* as a failing round: every chain back to its state before this round */
                memcpy(d->state, d->backup, (size_t)C * d->chain_doubles * sizeof(double));
                d->round = round - 1;
                for (int c = 0; c < C; ++c)
                    d->rss_round[c] = -1;
                err->iteration = round;
                return status;
            }
        }
    }
    return PYMF_OK;
}
