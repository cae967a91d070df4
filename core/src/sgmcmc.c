/* HAMCMC and its baselines (SGLD, preconditioned SGLD, SGRLD) on the linear-Gaussian
 * model: see pymf/sgmcmc.h for the maths. */
#include "pymf/sgmcmc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pymf/lbfgs.h"
#include "pymf/linalg.h"
#include "pymf/philox.h"

struct pymf_sgmcmc {
    pymf_linear_gaussian model;
    pymf_sgmcmc_config config;
    int64_t t;
    double *theta;        /* SGLD, PSGLD, SGRLD: the state; HAMCMC: the window theta_{t-M+1..t},
                             theta_u in slot u mod M (memory x D) */
    double *next;         /* the state being built */
    double *grad, *grad2; /* gradients of U_Omega */
    double *mean_lik;     /* PSGLD: mean per-datum likelihood gradient */
    double *V, *V_next;   /* PSGLD: the second-moment estimate, and its update */
    double *chol;         /* SGRLD: L */
    double *noise, *step; /* z, and the preconditioned drift */
    double *root_noise;   /* HAMCMC: S_t z */
    double *pair_s, *pair_y; /* HAMCMC: the memory - 1 latest pairs, oldest first */
    int n_pairs;          /* pairs held (fewer than memory - 1 in the first iterations) */
    double *work;         /* pymf_lbfgs_* scratch */
    int64_t *batch;
    uint32_t *batch_words;
    int64_t skipped_pairs;
};

void pymf_sgmcmc_destroy(pymf_sgmcmc *s)
{
    if (s == NULL)
        return;
    free(s->theta);
    free(s->next);
    free(s->grad);
    free(s->grad2);
    free(s->mean_lik);
    free(s->V);
    free(s->V_next);
    free(s->chol);
    free(s->noise);
    free(s->step);
    free(s->root_noise);
    free(s->pair_s);
    free(s->pair_y);
    free(s->work);
    free(s->batch);
    free(s->batch_words);
    free(s);
}

static int all_finite(int64_t n, const double *x)
{
    for (int64_t i = 0; i < n; ++i)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

pymf_sgmcmc *pymf_sgmcmc_create(const pymf_linear_gaussian *model, const pymf_sgmcmc_config *config,
                                pymf_error *err)
{
    const int D = model->dim;
    const int64_t N = model->n_data;
    if (D <= 0 || N <= 0) {
        pymf_fail(err, PYMF_EINVAL, "the linear-Gaussian model needs D >= 1 and N >= 1 (got D = %d, N = %lld)",
                  D, (long long)N);
        return NULL;
    }
    if (!(model->noise_var > 0.0 && isfinite(model->noise_var) && model->prior_var > 0.0 &&
          isfinite(model->prior_var))) {
        pymf_fail(err, PYMF_EINVAL, "noise_var and prior_var must be positive and finite");
        return NULL;
    }
    if (!all_finite(N * D, model->A) || !all_finite(N, model->x)) {
        pymf_fail(err, PYMF_EINVAL, "the design matrix A and the observations x must be finite");
        return NULL;
    }
    if (config->batch_size < 0) {
        pymf_fail(err, PYMF_EINVAL, "batch_size must be >= 0 (0: the full data)");
        return NULL;
    }
    const int M = config->kind == PYMF_SGMCMC_HAMCMC ? config->memory : 1;
    switch (config->kind) {
    case PYMF_SGMCMC_SGLD:
        break;
    case PYMF_SGMCMC_PSGLD:
        if (!(config->lambda > 0.0 && isfinite(config->lambda) && config->alpha >= 0.0 &&
              config->alpha < 1.0)) {
            pymf_fail(err, PYMF_EINVAL, "preconditioned SGLD needs lambda > 0 and alpha in [0, 1)");
            return NULL;
        }
        break;
    case PYMF_SGMCMC_SGRLD:
        if (config->metric_chol == NULL || !all_finite((int64_t)D * D, config->metric_chol)) {
            pymf_fail(err, PYMF_EINVAL, "SGRLD needs the finite Cholesky factor of its metric");
            return NULL;
        }
        break;
    case PYMF_SGMCMC_HAMCMC:
        if (config->memory < 2 || config->memory > 64) {
            pymf_fail(err, PYMF_EINVAL, "HAMCMC's memory M must be in [2, 64], got %d", config->memory);
            return NULL;
        }
        if (!(config->gamma > 0.0 && isfinite(config->gamma) && config->lambda >= 0.0 &&
              isfinite(config->lambda))) {
            pymf_fail(err, PYMF_EINVAL, "HAMCMC needs gamma > 0 and lambda >= 0, both finite");
            return NULL;
        }
        break;
    default:
        pymf_fail(err, PYMF_EINVAL, "unknown sampler kind %d", (int)config->kind);
        return NULL;
    }
    pymf_sgmcmc *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory");
        return NULL;
    }
    s->model = *model;
    s->config = *config;
    s->config.metric_chol = NULL;
    const int64_t batch = config->batch_size == 0 || config->batch_size >= N ? 0 : config->batch_size;
    s->config.batch_size = batch;
    const size_t d = (size_t)D;
    const int pairs = M - 1;
    s->theta = calloc((size_t)M * d, sizeof(double));
    s->next = calloc(d, sizeof(double));
    s->grad = calloc(d, sizeof(double));
    s->grad2 = calloc(d, sizeof(double));
    s->mean_lik = calloc(d, sizeof(double));
    s->V = calloc(d, sizeof(double));
    s->V_next = calloc(d, sizeof(double));
    s->noise = calloc(d, sizeof(double));
    s->step = calloc(d, sizeof(double));
    s->root_noise = calloc(d, sizeof(double));
    s->pair_s = calloc((size_t)(pairs > 0 ? pairs : 1) * d, sizeof(double));
    s->pair_y = calloc((size_t)(pairs > 0 ? pairs : 1) * d, sizeof(double));
    s->work = calloc((4 * (size_t)(pairs > 0 ? pairs : 1) + 2) * d, sizeof(double));
    s->batch = calloc((size_t)(batch > 0 ? batch : 1), sizeof(int64_t));
    s->batch_words = calloc((size_t)(batch > 0 ? (batch + 3) / 4 * 4 : 4), sizeof(uint32_t));
    if (config->kind == PYMF_SGMCMC_SGRLD) {
        s->chol = malloc(d * d * sizeof(double));
        if (s->chol != NULL)
            memcpy(s->chol, config->metric_chol, d * d * sizeof(double));
    }
    if (s->theta == NULL || s->next == NULL || s->grad == NULL || s->grad2 == NULL ||
        s->mean_lik == NULL || s->V == NULL || s->V_next == NULL || s->noise == NULL ||
        s->step == NULL || s->root_noise == NULL || s->pair_s == NULL || s->pair_y == NULL || s->work == NULL ||
        s->batch == NULL || s->batch_words == NULL ||
        (config->kind == PYMF_SGMCMC_SGRLD && s->chol == NULL)) {
        pymf_sgmcmc_destroy(s);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for a sampler of dimension %d", D);
        return NULL;
    }
    return s;
}

static int window(const pymf_sgmcmc *s)
{
    return s->config.kind == PYMF_SGMCMC_HAMCMC ? s->config.memory : 1;
}

/* theta_u: slot u mod M of the window */
static double *sample_at(const pymf_sgmcmc *s, int64_t u)
{
    return s->theta + (size_t)(u % window(s)) * (size_t)s->model.dim;
}

pymf_status pymf_sgmcmc_start(pymf_sgmcmc *s, const double *theta, pymf_error *err)
{
    const int D = s->model.dim;
    if (!all_finite(D, theta))
        return pymf_fail(err, PYMF_EINVAL, "the starting state contains NaN or inf");
    s->t = 0;
    memcpy(sample_at(s, 0), theta, (size_t)D * sizeof(double));
    s->n_pairs = 0;
    s->skipped_pairs = 0;
    memset(s->V, 0, (size_t)D * sizeof(double));
    return PYMF_OK;
}

void pymf_sgmcmc_state(const pymf_sgmcmc *s, double *theta, int64_t *t)
{
    if (theta != NULL)
        memcpy(theta, sample_at(s, s->t), (size_t)s->model.dim * sizeof(double));
    if (t != NULL)
        *t = s->t;
}

int64_t pymf_sgmcmc_skipped_pairs(const pymf_sgmcmc *s)
{
    return s->skipped_pairs;
}

void pymf_sgmcmc_saved_shape(const pymf_sgmcmc *s, pymf_sgmcmc_saved *saved)
{
    saved->dim = s->model.dim;
    saved->window_rows = window(s);
    saved->pair_rows = window(s) - 1;
}

static int same_shape(const pymf_sgmcmc *s, const pymf_sgmcmc_saved *saved)
{
    return saved->dim == s->model.dim && saved->window_rows == window(s) &&
           saved->pair_rows == window(s) - 1;
}

static pymf_status wrong_shape(const pymf_sgmcmc *s, const pymf_sgmcmc_saved *saved,
                               pymf_error *err)
{
    return pymf_fail(err, PYMF_EINVAL, "the saved chain state is of a sampler with D = %d, a "
                     "window of %d and %d pairs; this one has D = %d, %d and %d",
                     saved->dim, saved->window_rows, saved->pair_rows, s->model.dim, window(s),
                     window(s) - 1);
}

pymf_status pymf_sgmcmc_export(const pymf_sgmcmc *s, pymf_sgmcmc_saved *saved, pymf_error *err)
{
    if (!same_shape(s, saved))
        return wrong_shape(s, saved, err);
    const size_t d = (size_t)s->model.dim, rows = (size_t)window(s);
    saved->t = s->t;
    saved->n_pairs = s->n_pairs;
    saved->skipped_pairs = s->skipped_pairs;
    memcpy(saved->theta, s->theta, rows * d * sizeof(double));
    memcpy(saved->V, s->V, d * sizeof(double));
    if (rows > 1) {
        memcpy(saved->pair_s, s->pair_s, (rows - 1) * d * sizeof(double));
        memcpy(saved->pair_y, s->pair_y, (rows - 1) * d * sizeof(double));
    }
    return PYMF_OK;
}

pymf_status pymf_sgmcmc_import(pymf_sgmcmc *s, const pymf_sgmcmc_saved *saved, pymf_error *err)
{
    if (!same_shape(s, saved))
        return wrong_shape(s, saved, err);
    const int M = window(s);
    const size_t d = (size_t)s->model.dim, rows = (size_t)M;
    const int64_t t = saved->t;
    if (t < 0)
        return pymf_fail(err, PYMF_EINVAL, "the saved chain state has t = %lld < 0", (long long)t);
    /* HAMCMC makes one pair per iteration after the M-th and keeps the last M - 1, so t
     * decides n_pairs and bounds the pairs ever left out; the other samplers make none */
    const int64_t made = s->config.kind == PYMF_SGMCMC_HAMCMC && t > M ? t - M : 0;
    const int64_t held = made < M - 1 ? made : M - 1;
    if (saved->n_pairs != held)
        return pymf_fail(err, PYMF_EINVAL, "the saved chain state holds %lld memory pairs at "
                         "iteration %lld; this sampler would hold %lld",
                         (long long)saved->n_pairs, (long long)t, (long long)held);
    if (saved->skipped_pairs < 0 || saved->skipped_pairs > made)
        return pymf_fail(err, PYMF_EINVAL, "the saved chain state left out %lld memory pairs "
                         "of the %lld made by iteration %lld", (long long)saved->skipped_pairs,
                         (long long)made, (long long)t);
    const int64_t n_theta = (int64_t)(rows * d), n_pair = (int64_t)((rows - 1) * d);
    if (!all_finite(n_theta, saved->theta) || !all_finite((int64_t)d, saved->V) ||
        (n_pair > 0 && (!all_finite(n_pair, saved->pair_s) || !all_finite(n_pair, saved->pair_y))))
        return pymf_fail(err, PYMF_EINVAL, "the saved chain state contains NaN or inf");
    for (size_t k = 0; k < d; ++k)
        if (saved->V[k] < 0.0)
            return pymf_fail(err, PYMF_EINVAL, "the saved second-moment estimate V is negative "
                             "(V[%zu] = %g)", k, saved->V[k]);
    /* everything checked before anything is written: a refused state leaves the chain as
     * it was */
    s->t = t;
    s->n_pairs = (int)held;
    s->skipped_pairs = saved->skipped_pairs;
    memcpy(s->theta, saved->theta, rows * d * sizeof(double));
    memcpy(s->V, saved->V, d * sizeof(double));
    if (n_pair > 0) {
        memcpy(s->pair_s, saved->pair_s, (size_t)n_pair * sizeof(double));
        memcpy(s->pair_y, saved->pair_y, (size_t)n_pair * sizeof(double));
    }
    return PYMF_OK;
}

/* The minibatch of iteration t: batch_size positions from Philox words of counters
 * {g, 0, t, BATCH}, (w * N) >> 32 mapping a word to [0, N) (bias < N / 2^32). Returns the
 * index list, or NULL for the full data. */
static const int64_t *draw_batch(pymf_sgmcmc *s, int64_t t)
{
    const int64_t m = s->config.batch_size;
    if (m == 0)
        return NULL;
    const uint64_t N = (uint64_t)s->model.n_data;
    pymf_philox_words(s->config.seed, PYMF_STREAM_SGMCMC_BATCH, (uint64_t)t, 0,
                      (uint32_t)((m + 3) / 4), s->batch_words);
    for (int64_t i = 0; i < m; ++i)
        s->batch[i] = (int64_t)(((uint64_t)s->batch_words[i] * N) >> 32);
    return s->batch;
}

static void gradient(pymf_sgmcmc *s, const double *theta, const int64_t *batch, double *grad,
                     double *mean_lik)
{
    pymf_lg_grad_potential(&s->model, theta, batch, s->config.batch_size, grad, mean_lik);
}

/* HAMCMC's pair of iteration t (its state theta_t = next, its minibatch, theta_{t-M} = from,
 * grad U_Omega_t(from) = grad_from), appended after the oldest is dropped. */
static void add_pair(pymf_sgmcmc *s, const int64_t *batch, const double *from,
                     const double *grad_from)
{
    const int D = s->model.dim, capacity = s->config.memory - 1;
    const size_t d = (size_t)D;
    if (s->n_pairs == capacity) {
        memmove(s->pair_s, s->pair_s + d, (size_t)(capacity - 1) * d * sizeof(double));
        memmove(s->pair_y, s->pair_y + d, (size_t)(capacity - 1) * d * sizeof(double));
        --s->n_pairs;
    }
    double *ps = s->pair_s + (size_t)s->n_pairs * d, *py = s->pair_y + (size_t)s->n_pairs * d;
    gradient(s, s->next, batch, s->grad2, NULL);
    for (int k = 0; k < D; ++k) {
        ps[k] = s->next[k] - from[k];
        py[k] = s->grad2[k] - grad_from[k] + s->config.lambda * ps[k];
    }
    double sy;
    if (!pymf_lbfgs_pair_usable(D, ps, py, NULL, &sy))
        ++s->skipped_pairs;
    ++s->n_pairs;
}

pymf_status pymf_sgmcmc_run(pymf_sgmcmc *s, int64_t n_iter, const double *eps, double *samples,
                            pymf_error *err)
{
    const int D = s->model.dim, M = window(s);
    const size_t d = (size_t)D;
    const pymf_sgmcmc_kind kind = s->config.kind;
    for (int64_t i = 0; i < n_iter; ++i) {
        if (!(eps[i] > 0.0 && isfinite(eps[i])))
            return pymf_fail(err, PYMF_EINVAL, "step size at iteration %lld is %g; it must be "
                             "positive and finite", (long long)(s->t + i + 1), eps[i]);
    }
    for (int64_t i = 0; i < n_iter; ++i) {
        const int64_t t = s->t + 1;
        const double e = eps[i], root = sqrt(2.0 * e);
        const int64_t *batch = draw_batch(s, t);
        pymf_noise_row(s->config.seed, PYMF_STREAM_SGMCMC_NOISE, (uint64_t)t, 0, D, s->noise);
        /* HAMCMC moves theta_{t-M} (after the 2M SGLD steps that fill its memory); the
         * others move theta_{t-1} */
        const int quasi_newton = kind == PYMF_SGMCMC_HAMCMC && t > 2 * (int64_t)M;
        const double *from = sample_at(s, quasi_newton ? t - M : t - 1);
        gradient(s, from, batch, s->grad, kind == PYMF_SGMCMC_PSGLD ? s->mean_lik : NULL);
        if (quasi_newton) {
            const double gamma = s->config.scaled_gamma
                                     ? pymf_lbfgs_scaled_gamma(D, s->n_pairs, s->pair_s,
                                                               s->pair_y, s->config.gamma, NULL)
                                     : s->config.gamma;
            pymf_lbfgs_apply(D, s->n_pairs, s->pair_s, s->pair_y, gamma, s->grad, s->step,
                             s->work, NULL);
            pymf_lbfgs_sqrt_apply(D, s->n_pairs, s->pair_s, s->pair_y, gamma, s->noise,
                                  s->root_noise, s->work, NULL);
            for (int k = 0; k < D; ++k)
                s->next[k] = from[k] - e * s->step[k] + root * s->root_noise[k];
        } else if (kind == PYMF_SGMCMC_PSGLD) {
            const double alpha = t == 1 ? 0.0 : s->config.alpha; /* V starts at g * g */
            for (int k = 0; k < D; ++k) {
                const double g = s->mean_lik[k];
                s->V_next[k] = alpha * s->V[k] + (1.0 - alpha) * g * g;
                const double precond = 1.0 / (s->config.lambda + sqrt(s->V_next[k]));
                s->next[k] = from[k] - e * precond * s->grad[k] + root * sqrt(precond) * s->noise[k];
            }
        } else if (kind == PYMF_SGMCMC_SGRLD) {
            /* precond = L L^T: drift L (L^T grad), noise L z */
            for (int k = 0; k < D; ++k) {
                double v = 0.0;
                for (int j = k; j < D; ++j)
                    v += s->chol[(size_t)j * d + k] * s->grad[j];
                s->step[k] = v;
            }
            for (int k = 0; k < D; ++k) {
                const double *row = s->chol + (size_t)k * d;
                const double drift = pymf_dot_sequential(row, s->step, k + 1);
                const double noise = pymf_dot_sequential(row, s->noise, k + 1);
                s->next[k] = from[k] - e * drift + root * noise;
            }
        } else {
            /* SGLD, and HAMCMC's first 2M iterations, preconditioned by H^0 = gamma I: the
             * step size is in the units of H for the whole run */
            const double g = kind == PYMF_SGMCMC_HAMCMC ? s->config.gamma : 1.0;
            const double root_g = sqrt(g);
            for (int k = 0; k < D; ++k)
                s->next[k] = from[k] - e * g * s->grad[k] + root * root_g * s->noise[k];
        }
        if (!all_finite(D, s->next)) {
            if (err != NULL)
                err->iteration = t;
            return pymf_fail(err, PYMF_EDIVERGED, "the chain diverged at iteration %lld (step "
                             "size %g): the new state is not finite; the last finite state is "
                             "kept", (long long)t, e);
        }
        if (kind == PYMF_SGMCMC_HAMCMC && t > M) {
            /* the pair of iteration t: s_t = theta_t - theta_{t-M} on the minibatch of t;
             * in the quasi-Newton iterations grad U_Omega_t(theta_{t-M}) is already known */
            const double *older = sample_at(s, t - M);
            if (!quasi_newton)
                gradient(s, older, batch, s->grad, NULL);
            add_pair(s, batch, older, s->grad);
        }
        if (kind == PYMF_SGMCMC_PSGLD)
            memcpy(s->V, s->V_next, d * sizeof(double));
        memcpy(sample_at(s, t), s->next, d * sizeof(double)); /* replaces theta_{t-M} */
        s->t = t;
        if (samples != NULL)
            memcpy(samples + (size_t)i * d, s->next, d * sizeof(double));
    }
    return PYMF_OK;
}
