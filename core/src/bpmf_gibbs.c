#include "pymf/bpmf_gibbs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_blas.h>
#include <gsl/gsl_linalg.h>
#include <gsl/gsl_matrix.h>
#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "pymf/linalg.h"
#include "pymf/philox.h"
#include "pymf/rng.h"

#include "dense_vec.h" /* vec4, vec4_unaligned */

struct pymf_bpmf_gibbs {
    pymf_bpmf_model model;
    const pymf_bpmf_rows *rows;
    pymf_bpmf_gibbs_config config;
    int64_t hyper_size;
    double *U, *V, *a, *b, *hyper;
    double *saved; /* the state before the current sweep: restored if the sweep diverges */
    double *row_sq; /* per-user squared residual sums (tau's draw), added in user order */
    int64_t state_size;
    pymf_bpmf_params params;
    int64_t sweep;
};

int64_t pymf_bpmf_gibbs_hyper_size(int rank, int hyperprior)
{
    const int64_t D = rank;
    /* ... lam_a, lam_b, tau: the last three in both */
    return hyperprior == PYMF_BPMF_HYPER_WISHART ? 2 * D + 2 * D * D + 3 : 2 * D + 3;
}

void pymf_bpmf_gibbs_destroy(pymf_bpmf_gibbs *g)
{
    if (g == NULL)
        return;
    free(g->U);
    free(g->V);
    free(g->a);
    free(g->b);
    free(g->hyper);
    free(g->saved);
    free(g->row_sq);
    free(g);
}

pymf_bpmf_gibbs *pymf_bpmf_gibbs_create(const pymf_bpmf_model *model, const pymf_bpmf_rows *rows,
                                        const pymf_bpmf_gibbs_config *config, pymf_error *err)
{
    pymf_gsl_quiet();
    if (pymf_bpmf_check(model, NULL, err) != PYMF_OK)
        return NULL;
    const int D = model->rank;
    if (config->hyperprior != PYMF_BPMF_HYPER_GAMMA && config->hyperprior != PYMF_BPMF_HYPER_WISHART) {
        pymf_fail(err, PYMF_EINVAL, "unknown hyperprior %d", config->hyperprior);
        return NULL;
    }
    if (config->hyperprior == PYMF_BPMF_HYPER_WISHART &&
        (!(config->nw_beta0 > 0.0 && isfinite(config->nw_beta0)) ||
         !(config->nw_nu0 > D - 1 && isfinite(config->nw_nu0)) ||
         !(config->nw_w0 > 0.0 && isfinite(config->nw_w0)))) {
        pymf_fail(err, PYMF_EINVAL,
                  "Normal-Wishart hyperprior needs finite beta0 > 0, nu0 > rank - 1 and w0 > 0 "
                  "(got %g, %g, %g)", config->nw_beta0, config->nw_nu0, config->nw_w0);
        return NULL;
    }
    if (rows->n_users < 1 || rows->n_items < 1) {
        pymf_fail(err, PYMF_EINVAL, "BPMF needs at least one user and one item");
        return NULL;
    }
    for (int64_t i = 0; i < rows->n_users; ++i)
        for (int64_t e = rows->user_ptr[i]; e < rows->user_ptr[i + 1]; ++e)
            if (rows->user_items[e] < 0 || rows->user_items[e] >= rows->n_items ||
                !isfinite(rows->user_ratings[e])) {
                pymf_fail(err, PYMF_EINVAL, "bad rating %lld of user %lld", (long long)e,
                          (long long)i);
                return NULL;
            }
    pymf_bpmf_gibbs *g = calloc(1, sizeof *g);
    if (g == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory");
        return NULL;
    }
    g->model = *model;
    g->rows = rows;
    g->config = *config;
    g->hyper_size = pymf_bpmf_gibbs_hyper_size(D, config->hyperprior);
    g->U = calloc((size_t)(rows->n_users * D), sizeof(double));
    g->V = calloc((size_t)(rows->n_items * D), sizeof(double));
    g->a = calloc((size_t)rows->n_users, sizeof(double));
    g->b = calloc((size_t)rows->n_items, sizeof(double));
    g->hyper = calloc((size_t)g->hyper_size, sizeof(double));
    g->state_size = (rows->n_users + rows->n_items) * (D + 1) + g->hyper_size;
    g->saved = calloc((size_t)g->state_size, sizeof(double));
    g->row_sq = calloc((size_t)rows->n_users, sizeof(double));
    if (g->U == NULL || g->V == NULL || g->a == NULL || g->b == NULL || g->hyper == NULL ||
        g->saved == NULL || g->row_sq == NULL) {
        pymf_bpmf_gibbs_destroy(g);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for the BPMF Gibbs state");
        return NULL;
    }
    g->params.U = g->U;
    g->params.V = g->V;
    g->params.a = g->a;
    g->params.b = g->b;
    g->params.lambdas = g->hyper;
    return g;
}

void pymf_bpmf_gibbs_set_threads(pymf_bpmf_gibbs *g, int n_threads) { g->config.n_threads = n_threads; }

const pymf_bpmf_params *pymf_bpmf_gibbs_params(const pymf_bpmf_gibbs *g) { return &g->params; }

pymf_status pymf_bpmf_gibbs_set_state(pymf_bpmf_gibbs *g, const double *U, const double *V,
                                      const double *a, const double *b, const double *hyper,
                                      int64_t sweep, pymf_error *err)
{
    const int D = g->model.rank;
    const int64_t L = g->rows->n_users, M = g->rows->n_items;
    if (pymf_bpmf_check_finite(U, V, a, b, hyper, L, M, D, g->hyper_size, err) != PYMF_OK)
        return err->status;
    if (sweep < 0)
        return pymf_fail(err, PYMF_EINVAL, "the sweep must be >= 0");
    memcpy(g->U, U, (size_t)(L * D) * sizeof(double));
    memcpy(g->V, V, (size_t)(M * D) * sizeof(double));
    for (int64_t i = 0; i < L; ++i)
        g->a[i] = g->model.use_bias ? a[i] : 0.0;
    for (int64_t j = 0; j < M; ++j)
        g->b[j] = g->model.use_bias ? b[j] : 0.0;
    if (!(hyper[g->hyper_size - 1] > 0.0))
        return pymf_fail(err, PYMF_EINVAL, "tau (the last hyper-parameter) must be positive");
    memcpy(g->hyper, hyper, (size_t)g->hyper_size * sizeof(double));
    if (!g->model.sample_tau)  /* a fixed tau is the model's */
        g->hyper[g->hyper_size - 1] = g->model.tau;
    g->sweep = sweep;
    return PYMF_OK;
}

void pymf_bpmf_gibbs_get_state(const pymf_bpmf_gibbs *g, double *U, double *V, double *a,
                               double *b, double *hyper, int64_t *sweep)
{
    const int D = g->model.rank;
    const int64_t L = g->rows->n_users, M = g->rows->n_items;
    if (U != NULL)
        memcpy(U, g->U, (size_t)(L * D) * sizeof(double));
    if (V != NULL)
        memcpy(V, g->V, (size_t)(M * D) * sizeof(double));
    if (a != NULL)
        memcpy(a, g->a, (size_t)L * sizeof(double));
    if (b != NULL)
        memcpy(b, g->b, (size_t)M * sizeof(double));
    if (hyper != NULL)
        memcpy(hyper, g->hyper, (size_t)g->hyper_size * sizeof(double));
    if (sweep != NULL)
        *sweep = g->sweep;
}

static double gamma_precision(gsl_rng *rng, const pymf_bpmf_model *m, int64_t n, double sum_sq)
{
    return gsl_ran_gamma(rng, m->alpha0 + 0.5 * (double)n, 1.0 / (m->beta0 + 0.5 * sum_sq));
}

/* Normal-Wishart posterior draw of (mu, Lambda) given the n rows of X (n x D):
 * beta* = beta0 + n, nu* = nu0 + n, mu* = n xbar / (beta0 + n),
 * W*^-1 = W0^-1 + n S + beta0 n / (beta0 + n) xbar xbar^T (prior mean 0). */
static pymf_status draw_normal_wishart(gsl_rng *rng, const pymf_bpmf_gibbs_config *c, int D,
                                       int64_t n, const double *X, double *mu, double *Lambda,
                                       pymf_error *err)
{
    gsl_matrix *A = gsl_matrix_calloc((size_t)D, (size_t)D);
    gsl_matrix *result = gsl_matrix_alloc((size_t)D, (size_t)D);
    gsl_matrix *work = gsl_matrix_alloc((size_t)D, (size_t)D);
    double *xbar = calloc((size_t)D, sizeof *xbar);
    double *z = calloc((size_t)D, sizeof *z);
    pymf_status status = PYMF_OK;
    if (A == NULL || result == NULL || work == NULL || xbar == NULL || z == NULL) {
        status = pymf_fail(err, PYMF_ENOMEM, "out of memory in the Normal-Wishart draw");
        goto done;
    }
    for (int64_t i = 0; i < n; ++i)
        for (int k = 0; k < D; ++k)
            xbar[k] += X[i * D + k];
    for (int k = 0; k < D; ++k)
        xbar[k] /= (double)n;
    /* n S = sum (x - xbar)(x - xbar)^T */
    for (int64_t i = 0; i < n; ++i)
        for (int k = 0; k < D; ++k) {
            const double dk = X[i * D + k] - xbar[k];
            for (int l = 0; l <= k; ++l)
                gsl_matrix_set(A, k, l, gsl_matrix_get(A, k, l) + dk * (X[i * D + l] - xbar[l]));
        }
    const double shrink = c->nw_beta0 * (double)n / (c->nw_beta0 + (double)n);
    for (int k = 0; k < D; ++k)
        for (int l = 0; l <= k; ++l) {
            double v = gsl_matrix_get(A, k, l) + shrink * xbar[k] * xbar[l];
            if (k == l)
                v += 1.0 / c->nw_w0;
            gsl_matrix_set(A, k, l, v);
            gsl_matrix_set(A, l, k, v);
        }
    /* W* = A^-1, then its Cholesky factor for gsl_ran_wishart */
    if (gsl_linalg_cholesky_decomp1(A) != 0 || gsl_linalg_cholesky_invert(A) != 0 ||
        gsl_linalg_cholesky_decomp1(A) != 0) {
        status = pymf_fail(err, PYMF_ENUMERIC, "the Normal-Wishart scale matrix is not positive definite");
        goto done;
    }
    for (int k = 0; k < D; ++k)
        for (int l = k + 1; l < D; ++l)
            gsl_matrix_set(A, k, l, 0.0);
    if (gsl_ran_wishart(rng, c->nw_nu0 + (double)n, A, result, work) != 0) {
        status = pymf_fail(err, PYMF_ENUMERIC, "GSL's Wishart draw failed");
        goto done;
    }
    for (int k = 0; k < D; ++k)
        for (int l = 0; l < D; ++l)
            Lambda[k * D + l] = gsl_matrix_get(result, k, l);
    /* mu ~ N(mu*, (beta* Lambda)^-1): mu* + L^-T z with L L^T = beta* Lambda */
    const double beta_star = c->nw_beta0 + (double)n;
    for (int k = 0; k < D; ++k)
        for (int l = 0; l < D; ++l)
            gsl_matrix_set(work, k, l, beta_star * Lambda[k * D + l]);
    if (gsl_linalg_cholesky_decomp1(work) != 0) {
        status = pymf_fail(err, PYMF_ENUMERIC, "a Wishart draw is not positive definite");
        goto done;
    }
    for (int k = 0; k < D; ++k)
        z[k] = gsl_ran_gaussian(rng, 1.0);
    gsl_vector_view zv = gsl_vector_view_array(z, (size_t)D);
    gsl_blas_dtrsv(CblasLower, CblasTrans, CblasNonUnit, work, &zv.vector);
    for (int k = 0; k < D; ++k)
        mu[k] = (double)n * xbar[k] / beta_star + z[k];
done:
    gsl_matrix_free(A);
    gsl_matrix_free(result);
    gsl_matrix_free(work);
    free(xbar);
    free(z);
    return status;
}

/* Draws the hyper-parameters of one side (users: side 0, items: side 1) given its rows. */
static pymf_status draw_side_hyper(pymf_bpmf_gibbs *g, int side, gsl_rng *rng, pymf_error *err)
{
    const int D = g->model.rank;
    const int64_t n = side == 0 ? g->rows->n_users : g->rows->n_items;
    const double *X = side == 0 ? g->U : g->V, *bias = side == 0 ? g->a : g->b;
    double *hyper = g->hyper;
    double *lam_bias = &hyper[g->hyper_size - 3 + side];
    if (g->config.hyperprior == PYMF_BPMF_HYPER_WISHART) {
        double *mu = hyper + (int64_t)side * (D + D * D);
        const pymf_status status = draw_normal_wishart(rng, &g->config, D, n, X, mu, mu + D, err);
        if (status != PYMF_OK)
            return status;
    } else {
        for (int k = 0; k < D; ++k) {
            double s = 0.0;
            for (int64_t i = 0; i < n; ++i)
                s += X[i * D + k] * X[i * D + k];
            hyper[side * D + k] = gamma_precision(rng, &g->model, n, s);
        }
    }
    if (g->model.use_bias) {
        double s = 0.0;
        for (int64_t i = 0; i < n; ++i)
            s += bias[i] * bias[i];
        *lam_bias = gamma_precision(rng, &g->model, n, s);
    }
    return PYMF_OK;
}

/* ratings of a row gathered at a time by add_row_terms */
#define GIBBS_CHUNK 128
#define GIBBS_AT(p) (*(vec4_unaligned *)(p))

/* One tile of add_row_terms' accumulation: rows k0 .. k0 + 3 of the padded matrix Pp (row
 * stride wp) and its n_vec (1 or 2, a literal, so that the accumulators are registers)
 * vectors of 4 columns from column 4 q0, over the n gathered ratings in order. */
#define GIBBS_TILE(n_vec)                                                                  \
    do {                                                                                   \
        vec4 acc[4][n_vec];                                                                \
        for (int a = 0; a < 4; ++a)                                                        \
            for (int q = 0; q < (n_vec); ++q)                                              \
                acc[a][q] = GIBBS_AT(Pp + (k0 + a) * wp + 4 * (q0 + q));                  \
        for (int u = 0; u < n; ++u) {                                                      \
            vec4 fv[n_vec];                                                                \
            for (int q = 0; q < (n_vec); ++q)                                              \
                fv[q] = GIBBS_AT(fbuf + u * wp + 4 * (q0 + q));                            \
            for (int a = 0; a < 4; ++a) {                                                  \
                const double tf = tfbuf[u * wp + k0 + a];                                  \
                for (int q = 0; q < (n_vec); ++q)                                          \
                    acc[a][q] = acc[a][q] + tf * fv[q];                                    \
            }                                                                              \
        }                                                                                  \
        for (int a = 0; a < 4; ++a)                                                        \
            for (int q = 0; q < (n_vec); ++q)                                              \
                GIBBS_AT(Pp + (k0 + a) * wp + 4 * (q0 + q)) = acc[a][q];                  \
    } while (0)

/* Adds the likelihood terms of ratings e0 .. e1 - 1 of one row to its prior precision and
 * shift: Pp[k][l] += (tau f_k) f_l and hp[k] += (tau t) f_k, f = (the other side's factor
 * row, 1 with biases), t = the rating less the mean and the other side's bias. Each
 * element gets its terms in the ratings' order, each product rounded and then added, as the
 * per-rating loop did, so the bits are the same: the vectors' lanes are different columns
 * l, never terms of one sum. Register tiles of 4 rows k by up to 2 vectors of 4 columns
 * run over GIBBS_CHUNK gathered ratings at a time, where the loop updated every element
 * of the lower triangle once per rating through memory. Pp: wp x wp (wp = w rounded up
 * to 4), row stride wp; only its lower triangle (l <= k < w) is meaningful, the rest is
 * scratch. fbuf and tfbuf: GIBBS_CHUNK x wp, their columns w .. wp - 1 zero (set once:
 * only the first w of a row are written). */
PYMF_VECTOR_CLONES
static void add_row_terms(int D, int bias, int wp, int64_t e0, int64_t e1,
                          const int32_t *restrict other, const double *restrict ratings,
                          double mean, const double *restrict F, const double *restrict Fb,
                          double tau, double *restrict Pp, double *restrict hp,
                          double *restrict fbuf, double *restrict tfbuf)
{
    const int w = D + bias;
    for (int64_t c0 = e0; c0 < e1; c0 += GIBBS_CHUNK) {
        const int n = (int)(e1 - c0 < GIBBS_CHUNK ? e1 - c0 : GIBBS_CHUNK);
        for (int u = 0; u < n; ++u) {
            const int64_t e = c0 + u, j = other[e];
            double *f = fbuf + u * wp, *tf = tfbuf + u * wp;
            for (int k = 0; k < D; ++k)
                f[k] = F[j * D + k];
            if (bias)
                f[D] = 1.0;
            const double target = ratings[e] - mean - Fb[j];
            for (int k = 0; k < w; ++k) {
                hp[k] += tau * target * f[k];
                tf[k] = tau * f[k];
            }
        }
        /* rows k0 .. k0 + 3 need the columns l <= k0 + 3: vectors 0 .. k0 / 4 */
        for (int k0 = 0; k0 < w; k0 += 4) {
            const int n_vecs = k0 / 4 + 1;
            int q0 = 0;
            for (; q0 + 2 <= n_vecs; q0 += 2)
                GIBBS_TILE(2);
            if (q0 < n_vecs)
                GIBBS_TILE(1);
        }
    }
}

/* Draws every row of one side given the other side and the hyper-parameters: row x_i =
 * (u_i, a_i) ~ N(P^-1 h, P^-1), P = P0 + tau sum f f^T, h = P0 m0 + tau sum (r - rbar - c_j) f,
 * with f = (v_j, 1) and c_j = b_j. Returns the number of rows whose precision was not
 * positive definite (0 when all went well). */
static int64_t draw_side_rows(pymf_bpmf_gibbs *g, int side)
{
    const pymf_bpmf_model *m = &g->model;
    const int D = m->rank, bias = m->use_bias, w = D + bias;
    const pymf_bpmf_rows *R = g->rows;
    const int64_t n = side == 0 ? R->n_users : R->n_items;
    const int64_t *ptr = side == 0 ? R->user_ptr : R->item_ptr;
    const int32_t *other = side == 0 ? R->user_items : R->item_users;
    const double *ratings = side == 0 ? R->user_ratings : R->item_ratings;
    double *X = side == 0 ? g->U : g->V, *Xb = side == 0 ? g->a : g->b;
    const double *F = side == 0 ? g->V : g->U, *Fb = side == 0 ? g->b : g->a;
    const int wishart = g->config.hyperprior == PYMF_BPMF_HYPER_WISHART;
    const double *hyper = g->hyper;
    const double lam_bias = hyper[g->hyper_size - 3 + side];
    const double tau = hyper[g->hyper_size - 1];
    const double *mu = wishart ? hyper + (int64_t)side * (D + D * D) : NULL;
    const double *Lambda = wishart ? mu + D : NULL;
    const double *lam_diag = wishart ? NULL : hyper + (int64_t)side * D;
    const uint32_t stream = side == 0 ? PYMF_STREAM_BPMF_GIBBS_U : PYMF_STREAM_BPMF_GIBBS_V;
    const uint64_t t = (uint64_t)g->sweep + 1;
    const int n_threads = g->config.n_threads > 0 ? g->config.n_threads : pymf_default_threads();
    int64_t failures = 0;
#pragma omp parallel num_threads(n_threads) reduction(+ : failures)
    {
        gsl_matrix *P = gsl_matrix_alloc((size_t)w, (size_t)w);
        double *h = malloc((size_t)(2 * w + 4) * sizeof *h);
        double *f = h + w;
        /* add_row_terms' padded matrix and gathered ratings */
        const int wp = (w + 3) / 4 * 4;
        double *Pp = calloc((size_t)wp * (size_t)(wp + 2 * GIBBS_CHUNK), sizeof(double));
        double *fbuf = Pp != NULL ? Pp + (size_t)wp * wp : NULL;
        double *tfbuf = Pp != NULL ? fbuf + (size_t)GIBBS_CHUNK * wp : NULL;
        if (P == NULL || h == NULL || Pp == NULL) {
            failures += 1;
        } else {
#pragma omp for schedule(dynamic, 32)
            for (int64_t i = 0; i < n; ++i) {
                /* prior precision P0 and P0 m0 */
                gsl_matrix_set_zero(P);
                for (int k = 0; k < D; ++k) {
                    double p0m0 = 0.0;
                    for (int l = 0; l < D; ++l) {
                        const double p0 = wishart ? Lambda[k * D + l] : (k == l ? lam_diag[k] : 0.0);
                        gsl_matrix_set(P, k, l, p0);
                        if (wishart)
                            p0m0 += p0 * mu[l];
                    }
                    h[k] = p0m0;
                }
                if (bias) {
                    gsl_matrix_set(P, D, D, lam_bias);
                    h[D] = 0.0;
                }
                /* the prior's lower triangle into Pp, the row's terms added, back into P
                 * (whose upper triangle keeps the prior, as before). Zeros first: Pp's
                 * scratch part is computed too, and uninitialised memory could hold
                 * denormals, which are slow to add to. */
                memset(Pp, 0, sizeof(double) * (size_t)wp * wp);
                for (int k = 0; k < w; ++k)
                    memcpy(Pp + k * wp, P->data + k * P->tda, sizeof(double) * (size_t)(k + 1));
                add_row_terms(D, bias, wp, ptr[i], ptr[i + 1], other, ratings, m->mean_rating,
                              F, Fb, tau, Pp, h, fbuf, tfbuf);
                for (int k = 0; k < w; ++k)
                    memcpy(P->data + k * P->tda, Pp + k * wp, sizeof(double) * (size_t)(k + 1));
                /* x = L^-T (L^-1 h + z): mean P^-1 h plus noise of covariance P^-1 */
                if (gsl_linalg_cholesky_decomp1(P) != 0) {
                    failures += 1;
                    continue;
                }
                gsl_vector_view hv = gsl_vector_view_array(h, (size_t)w);
                gsl_blas_dtrsv(CblasLower, CblasNoTrans, CblasNonUnit, P, &hv.vector);
                pymf_noise_row(g->config.noise_seed, stream, t, (uint32_t)i, w, f);
                for (int k = 0; k < w; ++k)
                    h[k] += f[k];
                gsl_blas_dtrsv(CblasLower, CblasTrans, CblasNonUnit, P, &hv.vector);
                for (int k = 0; k < D; ++k)
                    X[i * D + k] = h[k];
                if (bias)
                    Xb[i] = h[D];
            }
        }
        gsl_matrix_free(P);
        free(h);
        free(Pp);
    }
    return failures;
}

/* The sum of squared training residuals: one partial sum per user (any thread), added in
 * user order, so any thread count gives the same bits. */
static double sq_residuals(pymf_bpmf_gibbs *g)
{
    const pymf_bpmf_model *m = &g->model;
    const int D = m->rank;
    const pymf_bpmf_rows *R = g->rows;
    const int n_threads = g->config.n_threads > 0 ? g->config.n_threads : pymf_default_threads();
#pragma omp parallel for schedule(dynamic, 64) num_threads(n_threads)
    for (int64_t i = 0; i < R->n_users; ++i) {
        double sum = 0.0;
        for (int64_t e = R->user_ptr[i]; e < R->user_ptr[i + 1]; ++e) {
            const int64_t j = R->user_items[e];
            const double r = R->user_ratings[e] - m->mean_rating - g->a[i] - g->b[j] -
                             pymf_dot_sequential(g->U + i * D, g->V + j * D, D);
            sum += r * r;
        }
        g->row_sq[i] = sum;
    }
    double total = 0.0;
    for (int64_t i = 0; i < R->n_users; ++i)
        total += g->row_sq[i];
    return total;
}

/* Visits the parts of the state (U, V, a, b, hyper): copies them to g->saved (restore =
 * 0) or back (restore = 1), or (check = 1) only returns whether every value is finite. */
static int state_visit(pymf_bpmf_gibbs *g, int restore, int check)
{
    const int64_t D = g->model.rank, L = g->rows->n_users, M = g->rows->n_items;
    double *parts[5] = {g->U, g->V, g->a, g->b, g->hyper};
    const int64_t sizes[5] = {L * D, M * D, L, M, g->hyper_size};
    double *at = g->saved;
    for (int p = 0; p < 5; ++p) {
        if (check) {
            for (int64_t i = 0; i < sizes[p]; ++i)
                if (!isfinite(parts[p][i]))
                    return 0;
        } else if (restore) {
            memcpy(parts[p], at, (size_t)sizes[p] * sizeof(double));
        } else {
            memcpy(at, parts[p], (size_t)sizes[p] * sizeof(double));
        }
        at += sizes[p];
    }
    return 1;
}

pymf_status pymf_bpmf_gibbs_run(pymf_bpmf_gibbs *g, int64_t n_sweeps, pymf_error *err)
{
    gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
    if (rng == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "could not allocate a GSL generator");
    pymf_status status = PYMF_OK;
    state_visit(g, 0, 0);
    for (int64_t s = 0; s < n_sweeps && status == PYMF_OK; ++s) {
        gsl_rng_set(rng, pymf_stream_seed(g->config.hyper_seed, (uint64_t)g->sweep + 1));
        for (int side = 0; side < 2 && status == PYMF_OK; ++side) {
            status = draw_side_hyper(g, side, rng, err);
            if (status == PYMF_OK && draw_side_rows(g, side) != 0) {
                status = pymf_fail(err, PYMF_EDIVERGED,
                                   "BPMF Gibbs sweep %lld: a conditional precision is not "
                                   "positive definite (non-finite state?)",
                                   (long long)g->sweep + 1);
                if (err != NULL)
                    err->iteration = g->sweep + 1;
            }
        }
        /* tau | U, V, a, b: the last draw of the sweep (its statistic needs both sides) */
        if (status == PYMF_OK && g->model.sample_tau)
            g->hyper[g->hyper_size - 1] = gamma_precision(rng, &g->model, g->rows->nnz,
                                                          sq_residuals(g));
        /* keep the state of this sweep if it is finite (it becomes the one to fall back
         * to), else put the previous one back: a diverging chain keeps its last finite state */
        if (status == PYMF_OK && !state_visit(g, 0, 1)) {
            status = pymf_fail(err, PYMF_EDIVERGED,
                               "BPMF Gibbs diverged at sweep %lld: a parameter became infinite "
                               "or NaN (extreme ratings or hyperparameters?); the last finite "
                               "state is kept", (long long)g->sweep + 1);
            if (err != NULL)
                err->iteration = g->sweep + 1;
        }
        if (status == PYMF_OK) {
            state_visit(g, 0, 0);
            ++g->sweep;
        } else {
            state_visit(g, 1, 0);
        }
    }
    gsl_rng_free(rng);
    return status;
}
