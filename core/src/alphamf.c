/* Alpha-stable matrix factorisation, Metropolis and SG-MCMC within Gibbs: see pymf/alphamf.h. */
#include "pymf/alphamf.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pymf/linalg.h"
#include "pymf/philox.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

/* Below this many observed entries the Phi step runs on one thread: forking a team for a
 * part of a few thousand entries costs more than the step (on a busy 2-core machine, 14x
 * slower at 48 x 40). The results are the same either way. */
#define PHI_PARALLEL_ENTRIES 16384

struct pymf_alphamf {
    pymf_alphamf_model model;
    const pymf_blocked_data *data;
    pymf_hamcmc_mf *chain;
    int update_phi;
    int n_threads;
    int memory;       /* the chain's M (which Phi copy an iteration uses) */
    int n_copies;     /* 1 (PSGLD) or M (HAMCMC): see copy_of */
    int active;       /* the copy the gradient reads */
    double *phi;      /* n_copies planes of one per observed entry */
    int64_t *accepted_by_block; /* this iteration's accepted proposals, per block */
    int64_t accepted, proposed;
};

pymf_status pymf_alphamf_model_check(const pymf_alphamf_model *m, pymf_error *err)
{
    if (m->rank <= 0)
        return pymf_fail(err, PYMF_EINVAL, "the rank must be positive, got %d", m->rank);
    if (!(m->alpha > 0.0 && m->alpha <= 2.0))
        return pymf_fail(err, PYMF_EINVAL, "alpha must be in (0, 2], got %g", m->alpha);
    const double values[4] = {m->a_w, m->b_w, m->a_h, m->b_h};
    const char *names[4] = {"a_w", "b_w", "a_h", "b_h"};
    for (int i = 0; i < 4; ++i)
        if (!(values[i] > 0.0 && isfinite(values[i])))
            return pymf_fail(err, PYMF_EINVAL, "%s (generalised gamma prior) must be positive "
                             "and finite, got %g", names[i], values[i]);
    return PYMF_OK;
}

double pymf_positive_stable(double a, double u_angle, double e)
{
    if (a >= 1.0) /* alpha = 2: A = 1 (E[exp(-lambda A)] = exp(-lambda)) */
        return 1.0;
    const double left = sin(a * u_angle) / pow(sin(u_angle), 1.0 / a);
    return left * pow(sin((1.0 - a) * u_angle) / e, (1.0 - a) / a);
}

/* The three uniforms of entry e at iteration t: the proposal's angle and exponential, and
 * the acceptance's. */
static void entry_uniforms(uint64_t seed, uint64_t t, int64_t e, double u[3])
{
    const uint32_t ctr[4] = {(uint32_t)((uint64_t)e >> 32), (uint32_t)e, (uint32_t)t,
                             PYMF_STREAM_PHI | ((uint32_t)(t >> 32) << 8)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t bits[4];
    pymf_philox4x32_10(ctr, key, bits);
    for (int i = 0; i < 3; ++i)
        u[i] = pymf_uniform_open(bits[i]);
}

/* Phi = 2 A from the first two uniforms */
static double prior_phi(double alpha, const double u[2])
{
    return 2.0 * pymf_positive_stable(0.5 * alpha, M_PI * u[0], -log(u[1]));
}

pymf_status pymf_alphamf_draw_phi(double alpha, uint64_t seed, uint64_t t, int64_t n,
                                  double *out, pymf_error *err)
{
    if (!(alpha > 0.0 && alpha <= 2.0))
        return pymf_fail(err, PYMF_EINVAL, "alpha must be in (0, 2], got %g", alpha);
    for (int64_t e = 0; e < n; ++e) {
        double u[3];
        entry_uniforms(seed, t, e, u);
        out[e] = prior_phi(alpha, u);
    }
    return PYMF_OK;
}

/* The Phi copy of iteration t. HAMCMC's quasi-Newton iteration t moves theta_{t-M}: the
 * chain is M interleaved subchains (t mod M), and each keeps its own Phi, stepped given the
 * state its next step moves, so that each subchain is a Metropolis-within-Gibbs chain and
 * H_t (from the other subchains' pairs) does not depend, through a shared Phi, on the state
 * it moves. Up to 2M (Langevin steps from theta_{t-1}: one chain) every iteration uses copy
 * 0, which then stands for all copies. */
static int copy_of(const pymf_alphamf *s, int64_t t)
{
    if (s->n_copies == 1 || !pymf_hamcmc_mf_quasi_newton(s->chain, t))
        return 0;
    return (int)(t % s->memory);
}

static double floored_v(const double *w, const double *h, int K)
{
    const double v = pymf_dot(w, h, K);
    return v > PYMF_ALPHAMF_V_FLOOR ? v : PYMF_ALPHAMF_V_FLOOR;
}

/* d/dv log N(x; 0, phi v^(2/alpha)) = (x^2 / (phi v^(2/alpha)) - 1) / (alpha v) */
static double dloglik_dv(double x, double phi, double v, double alpha)
{
    return (x * x / (phi * pow(v, 2.0 / alpha)) - 1.0) / (alpha * v);
}

/* -d/dx log GG(x; a, b, p) = -(a - 1) / x + b p x^(p - 1) (a = 1: no 1/x term, finite at 0) */
static double gg_neg_dlog(double x, double a, double b, double p)
{
    return (a == 1.0 ? 0.0 : -(a - 1.0) / x) + b * p * pow(x, p - 1.0);
}

/* Runs the statement given for each observed entry of block (b, c), with e its index (Phi's
 * and the uniforms'), (i, j) its grid position and x its value: the dense and sparse
 * layouts share one body, compiled once per sparse entry format (blocks.h). The body must
 * not `break` (it would leave the format switch, not the loop). */
#define FOR_BLOCK_ENTRIES(data, b, c, ...)                                                     \
    do {                                                                                       \
        const pymf_grid *g_ = (data)->grid;                                                    \
        if ((data)->is_dense) {                                                                \
            const int64_t J_ = g_->n_cols;                                                     \
            for (int64_t i = g_->row_start[b]; i < g_->row_start[(b) + 1]; ++i)                \
                for (int64_t j = g_->col_start[c]; j < g_->col_start[(c) + 1]; ++j) {          \
                    const int64_t e = i * J_ + j;                                              \
                    const double x = (data)->V[e];                                             \
                    __VA_ARGS__                                                                       \
                }                                                                              \
        } else {                                                                               \
            const int64_t blk_ = (int64_t)(b) * g_->n_blocks + (c);                            \
            const int64_t e0_ = (data)->block_ptr[blk_], e1_ = (data)->block_ptr[blk_ + 1];    \
            PYMF_FOR_ENTRY_FORMAT((data)->format, F_,                                          \
                for (int64_t e = e0_; e < e1_; ++e) {                                          \
                    const int64_t i = pymf_entry_row_as((data), e, F_);                        \
                    const int64_t j = pymf_entry_col_as((data), e, F_);                        \
                    const double x = pymf_entry_value_as((data), e, F_);                       \
                    __VA_ARGS__                                                                \
                })                                                                             \
        }                                                                                      \
    } while (0)

/* pymf_block_potential_grad of the conditionally Gaussian model given Phi */
static int alphamf_block_grad(const void *ctx, const pymf_blocked_data *data, int b, int c,
                              double scale, const double *W, const double *Ht, double *gW,
                              double *gHt)
{
    const pymf_alphamf *s = ctx;
    const pymf_alphamf_model *m = &s->model;
    const pymf_grid *g = data->grid;
    const int K = m->rank;
    const double alpha = m->alpha, p = 2.0 / alpha;
    const int64_t w0 = g->row_start[b] * K, w1 = g->row_start[b + 1] * K;
    const int64_t h0 = g->col_start[c] * K, h1 = g->col_start[c + 1] * K;
    memset(gW + w0, 0, sizeof(double) * (size_t)(w1 - w0));
    memset(gHt + h0, 0, sizeof(double) * (size_t)(h1 - h0));
    if (scale > 0.0) {
        const double *phi = s->phi + (size_t)s->active * (size_t)data->n_observed;
        FOR_BLOCK_ENTRIES(data, b, c, {
            const double *w = W + i * K, *h = Ht + j * K;
            const double gv = scale * dloglik_dv(x, phi[e], floored_v(w, h, K), alpha);
            pymf_axpy2(K, gv, h, gW + i * K, w, gHt + j * K);
        });
    }
    for (int64_t d = w0; d < w1; ++d)
        gW[d] = gg_neg_dlog(W[d], m->a_w, m->b_w, p) - gW[d];
    for (int64_t d = h0; d < h1; ++d)
        gHt[d] = gg_neg_dlog(Ht[d], m->a_h, m->b_h, p) - gHt[d];
    return pymf_all_finite(gW + w0, w1 - w0) && pymf_all_finite(gHt + h0, h1 - h0);
}

void pymf_alphamf_destroy(pymf_alphamf *s)
{
    if (s == NULL)
        return;
    pymf_hamcmc_mf_destroy(s->chain);
    free(s->phi);
    free(s->accepted_by_block);
    free(s);
}

pymf_alphamf *pymf_alphamf_create(const pymf_alphamf_model *model, const pymf_blocked_data *data,
                                  const pymf_hamcmc_mf_config *config, int update_phi,
                                  pymf_error *err)
{
    if (pymf_alphamf_model_check(model, err) != PYMF_OK)
        return NULL;
    if (config->only_row_block >= 0) {
        pymf_fail(err, PYMF_EINVAL, "alpha-stable MF runs in shared memory (only_row_block = -1)");
        return NULL;
    }
    pymf_alphamf *s = calloc(1, sizeof(*s));
    if (s == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory");
        return NULL;
    }
    s->model = *model;
    s->data = data;
    s->update_phi = update_phi;
    s->n_threads = config->n_threads;
    s->memory = config->memory;
    s->n_copies = config->langevin_only || config->memory < 2 ? 1 : config->memory;
    s->phi = malloc(sizeof(double) * (size_t)s->n_copies *
                    (size_t)(data->n_observed > 0 ? data->n_observed : 1));
    s->accepted_by_block = calloc((size_t)data->grid->n_blocks, sizeof(int64_t));
    if (s->phi == NULL || s->accepted_by_block == NULL) {
        pymf_alphamf_destroy(s);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for Phi (%lld entries)",
                  (long long)data->n_observed);
        return NULL;
    }
    for (int64_t e = 0; e < s->n_copies * data->n_observed; ++e)
        s->phi[e] = 2.0;
    const pymf_hamcmc_potential potential = {alphamf_block_grad, s, model->rank, 1,
                                             model->tamed != 0};
    s->chain = pymf_hamcmc_mf_create_potential(&potential, data, config, err);
    if (s->chain == NULL) {
        pymf_alphamf_destroy(s);
        return NULL;
    }
    return s;
}

pymf_hamcmc_mf *pymf_alphamf_chain(pymf_alphamf *s) { return s->chain; }

/* copy 0 into the other copies (the start, and the Langevin iterations up to 2M) */
static void broadcast_copy0(pymf_alphamf *s)
{
    const size_t n = (size_t)s->data->n_observed;
    for (int k = 1; k < s->n_copies; ++k)
        memcpy(s->phi + (size_t)k * n, s->phi, sizeof(double) * n);
}

pymf_status pymf_alphamf_start(pymf_alphamf *s, const double *W, const double *Ht,
                               pymf_error *err)
{
    const pymf_status status = pymf_hamcmc_mf_start(s->chain, W, Ht, err);
    if (status != PYMF_OK)
        return status;
    pymf_hamcmc_mf_current(s->chain, &W, &Ht);
    const int K = s->model.rank, B = s->data->grid->n_blocks;
    const double power = 2.0 / s->model.alpha;
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < B; ++c)
            FOR_BLOCK_ENTRIES(s->data, b, c, {
                const double phi = x * x / pow(floored_v(W + i * K, Ht + j * K, K), power);
                s->phi[e] = phi > PYMF_ALPHAMF_PHI_START_FLOOR && isfinite(phi)
                                ? phi
                                : PYMF_ALPHAMF_PHI_START_FLOOR;
            });
    broadcast_copy0(s);
    s->active = 0;
    s->accepted = s->proposed = 0;
    return PYMF_OK;
}

/* One Metropolis step of every Phi in block (b, c) with the prior as proposal; returns the
 * number accepted. */
static int64_t phi_block(pymf_alphamf *s, int b, int c, uint64_t t, uint64_t seed,
                         const double *W, const double *Ht, double *phi)
{
    const int K = s->model.rank;
    const double alpha = s->model.alpha;
    int64_t accepted = 0;
    FOR_BLOCK_ENTRIES(s->data, b, c, {
        double u[3];
        entry_uniforms(seed, t, e, u);
        const double proposal = prior_phi(alpha, u);
        const double scale = pow(floored_v(W + i * K, Ht + j * K, K), 2.0 / alpha);
        /* log N(x; 0, phi' s) - log N(x; 0, phi s) */
        const double log_ratio = -0.5 * log(proposal / phi[e]) -
                                 0.5 * x * x / scale * (1.0 / proposal - 1.0 / phi[e]);
        if (log(u[2]) < log_ratio && proposal > 0.0 && isfinite(proposal)) {
            phi[e] = proposal;
            ++accepted;
        }
    });
    return accepted;
}

static int threads_of(const pymf_alphamf *s)
{
    return s->n_threads > 0 ? s->n_threads : pymf_default_threads();
}

pymf_status pymf_alphamf_phi_step(pymf_alphamf *s, int64_t t, int part, pymf_error *err)
{
    const int B = s->data->grid->n_blocks;
    if (part < 0 || part >= B)
        return pymf_fail(err, PYMF_EINVAL, "part must be in [0, %d), got %d", B, part);
    if (t < 1)
        return pymf_fail(err, PYMF_EINVAL, "iterations count from 1, got %lld", (long long)t);
    /* the state and the Phi copy of the chain's next iteration (copy_of) */
    const double *W, *Ht;
    pymf_hamcmc_mf_moved(s->chain, &W, &Ht);
    int64_t next;
    pymf_hamcmc_mf_get_state(s->chain, NULL, NULL, &next);
    ++next;
    const int k = copy_of(s, next);
    double *phi = s->phi + (size_t)k * (size_t)s->data->n_observed;
    const uint64_t seed = pymf_hamcmc_mf_noise_seed(s->chain);
    const int threads = threads_of(s);
    const int parallel = B > 1 && threads > 1 && s->data->n_observed >= PHI_PARALLEL_ENTRIES;
    (void)threads;
    (void)parallel;
#pragma omp parallel for num_threads(threads) schedule(static) if (parallel)
    for (int b = 0; b < B; ++b)
        s->accepted_by_block[b] =
            phi_block(s, b, pymf_part_column(B, part, b), (uint64_t)t, seed, W, Ht, phi);
    if (!pymf_hamcmc_mf_quasi_newton(s->chain, next))
        broadcast_copy0(s);
    for (int b = 0; b < B; ++b)
        s->accepted += s->accepted_by_block[b];
    s->proposed += pymf_part_size(s->data, part);
    return PYMF_OK;
}

pymf_status pymf_alphamf_run(pymf_alphamf *s, int64_t n_iter, const double *eps,
                             pymf_error *err)
{
    for (int64_t i = 0; i < n_iter; ++i) {
        int64_t t;
        pymf_hamcmc_mf_get_state(s->chain, NULL, NULL, &t);
        ++t;
        if (s->update_phi) {
            const pymf_status status =
                pymf_alphamf_phi_step(s, t, pymf_hamcmc_mf_part(s->chain, t), err);
            if (status != PYMF_OK)
                return status;
        }
        s->active = copy_of(s, t);
        const pymf_status status = pymf_hamcmc_mf_run(s->chain, 1, eps + i, err);
        if (status != PYMF_OK)
            return status;
    }
    return PYMF_OK;
}

int64_t pymf_alphamf_n_phi(const pymf_alphamf *s)
{
    return (int64_t)s->n_copies * s->data->n_observed;
}

int pymf_alphamf_phi_copies(const pymf_alphamf *s) { return s->n_copies; }

void pymf_alphamf_get_phi(const pymf_alphamf *s, double *out)
{
    memcpy(out, s->phi, sizeof(double) * (size_t)pymf_alphamf_n_phi(s));
}

pymf_status pymf_alphamf_set_phi(pymf_alphamf *s, const double *in, pymf_error *err)
{
    const int64_t n = pymf_alphamf_n_phi(s);
    for (int64_t e = 0; e < n; ++e)
        if (!(in[e] > 0.0 && isfinite(in[e])))
            return pymf_fail(err, PYMF_EINVAL, "Phi must be positive and finite; entry %lld "
                             "is %g", (long long)e, in[e]);
    memcpy(s->phi, in, sizeof(double) * (size_t)n);
    return PYMF_OK;
}

void pymf_alphamf_counts(const pymf_alphamf *s, int64_t *accepted, int64_t *proposed)
{
    *accepted = s->accepted;
    *proposed = s->proposed;
}

pymf_status pymf_alphamf_set_counts(pymf_alphamf *s, int64_t accepted, int64_t proposed,
                                    pymf_error *err)
{
    if (accepted < 0 || proposed < accepted)
        return pymf_fail(err, PYMF_EINVAL, "the saved Phi counts (%lld accepted of %lld) are "
                         "impossible", (long long)accepted, (long long)proposed);
    s->accepted = accepted;
    s->proposed = proposed;
    return PYMF_OK;
}

pymf_status pymf_alphamf_loglik(const pymf_alphamf *s, double *out, pymf_error *err)
{
    const double *W, *Ht;
    pymf_hamcmc_mf_current(s->chain, &W, &Ht);
    int64_t t;
    pymf_hamcmc_mf_get_state(s->chain, NULL, NULL, &t);
    /* the copy the current state's subchain last stepped (copy_of) */
    const double *phi = s->phi + (size_t)copy_of(s, t) * (size_t)s->data->n_observed;
    const int K = s->model.rank, B = s->data->grid->n_blocks;
    const double alpha = s->model.alpha, half_log_2pi = 0.9189385332046727;
    double total = 0.0; /* block by block in a fixed order: the same for any thread count */
    for (int b = 0; b < B; ++b)
        for (int c = 0; c < B; ++c)
            FOR_BLOCK_ENTRIES(s->data, b, c, {
                const double var = phi[e] * pow(floored_v(W + i * K, Ht + j * K, K), 2.0 / alpha);
                total += -half_log_2pi - 0.5 * log(var) - 0.5 * x * x / var;
            });
    *out = total; /* may be -inf or NaN: the caller names the iteration (as for Tweedie) */
    (void)err;
    return PYMF_OK;
}
