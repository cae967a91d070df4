/* IBP linear-Gaussian latent features: collapsed Gibbs and the hybrid parallel sampler.
 * The maths and the order of the draws are in core/include/pymf/ibp.h. */
#include "pymf/ibp.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>
#include <gsl/gsl_sf_gamma.h>

#include "pymf/linalg.h"
#include "pymf/rng.h"

enum { STREAM_PROCESS = 1, STREAM_MASTER = 2, STREAM_IMPUTE = 3, STREAM_SPLIT_MERGE = 4 };

static const double TWO_PI = 6.283185307179586;

/* A collapsed block of features on n rows of data Y (see ibp.h): Z (n x cap), its counts,
 * M = (Z'Z + rI)^-1 (cap x cap), S = Z'Y and Abar = M S (cap x D), log|Z'Z + rI|. */
typedef struct {
    int K, cap, D;
    int64_t n;
    double *Z, *Y, *m, *M, *S, *Abar;
    double logdet;
    double *Mz, *mu, *w;  /* scratch: cap, D, D */
    int *order;           /* scratch: cap (a row's order of visiting the features) */
    int base, limit;      /* the chain's features outside the block (as far as they are
                             known) and the most the block may hold: a row whose new
                             features would take K above limit stops (ROW_FULL) */
    int reached;          /* after ROW_FULL: base + the count the row would have left */
} block;

/* what block_gibbs_row returns */
enum { ROW_OK = 1, ROW_NUMERIC = 0, ROW_NOMEM = -1, ROW_FULL = -2 };

typedef struct {
    int index;              /* p */
    int64_t row0, n_rows;   /* this process's rows, as rows of the object */
    gsl_rng *rng;
    int has_tail;           /* collapsed block on its rows in this iteration */
    block tail;             /* the tail (hybrid) or every feature (collapsed Gibbs) */
    double *e;              /* scratch: D */
    double *residuals;      /* hybrid: n_rows x D, y - z A of every row in the first stage */
    pymf_status status;     /* PYMF_EDIVERGED: the feature cap (the count in tail.reached) */
    int64_t bad_row;
} process;

struct pymf_ibp {
    pymf_ibp_prior prior;
    pymf_ibp_config config;
    int64_t N, row_offset, n_rows;
    int D;
    double *Y;              /* this object's rows x D: the data, held-out cells imputed */
    int64_t *missing;       /* indices into Y of the held-out cells */
    int64_t n_missing;
    int K, cap;             /* instantiated features (hybrid) */
    double *Z, *A, *pi, *A_norm2;
    double *pi_logit;       /* cap: log(pi_k) - log(1 - pi_k), set when an iteration begins */
    int *in_tail;           /* cap: the process whose tail holds feature k in the tail
                               stage (its owners all lie there), P if it is empty (part of
                               every tail), else -1 */
    double sigma_x, sigma_a, alpha;
    int64_t t;
    int active;
    int begun;
    process *procs;
    gsl_rng *master;
    int *new_counts;        /* P */
    double *stats;          /* n_local x stats_size of the current K */
    int64_t stats_cap;
    gsl_rng *sm_rng;        /* the split-merge moves' stream */
    block sm_block;         /* hybrid: every row, collapsed, for the split-merge moves */
    int64_t sm_counts[4];   /* splits proposed, accepted, merges proposed, accepted */
    /* what pymf_ibp_abort restores: the state as the iteration found it (Z: n_rows x
     * saved_K, packed; A: saved_K x D; pi; the held-out cells; the hyper-parameters; t;
     * the split-merge counts). in_iteration: begun and not yet ended (the hybrid's ends
     * with its split-merge moves, after the master). */
    double *saved_Z, *saved_A, *saved_pi, *saved_Ym;
    int64_t saved_size, saved_K_cap;
    int saved_K;
    double saved_hyper[3];
    int64_t saved_t;
    int64_t saved_sm[4];
    int in_iteration;
};

/* ---------- small dense linear algebra (K is tens at most) ---------- */

/* Lower Cholesky factor of the symmetric positive definite K x K matrix P in place (the
 * upper triangle is left alone); returns 0 if P is not positive definite. */
static int cholesky(double *P, int K, int ld)
{
    for (int j = 0; j < K; ++j) {
        double d = P[j * ld + j];
        for (int k = 0; k < j; ++k)
            d -= P[j * ld + k] * P[j * ld + k];
        if (!(d > 0.0))
            return 0;
        d = sqrt(d);
        P[j * ld + j] = d;
        for (int i = j + 1; i < K; ++i) {
            double v = P[i * ld + j];
            for (int k = 0; k < j; ++k)
                v -= P[i * ld + k] * P[j * ld + k];
            P[i * ld + j] = v / d;
        }
    }
    return 1;
}

/* Solve L x = b (forward) then L' x = x (back), b of n_rhs columns, row-major K x n_rhs. */
static void cholesky_solve(const double *L, int K, int ld, double *b, int n_rhs)
{
    for (int c = 0; c < n_rhs; ++c) {
        for (int i = 0; i < K; ++i) {
            double v = b[i * n_rhs + c];
            for (int k = 0; k < i; ++k)
                v -= L[i * ld + k] * b[k * n_rhs + c];
            b[i * n_rhs + c] = v / L[i * ld + i];
        }
        for (int i = K - 1; i >= 0; --i) {
            double v = b[i * n_rhs + c];
            for (int k = i + 1; k < K; ++k)
                v -= L[k * ld + i] * b[k * n_rhs + c];
            b[i * n_rhs + c] = v / L[i * ld + i];
        }
    }
}

/* out = (Z'Z + rI) of the rows of Z (n x ldz, first K columns) that skip (or NULL) does not
 * mark; only the ones are visited. */
static void gram_rows(const double *Z, int64_t n, int K, int ldz, double r,
                      const unsigned char *skip, double *out, int ld)
{
    for (int a = 0; a < K; ++a)
        for (int b = 0; b < K; ++b)
            out[a * ld + b] = a == b ? r : 0.0;
    for (int64_t i = 0; i < n; ++i) {
        if (skip != NULL && skip[i])
            continue;
        const double *z = Z + i * ldz;
        for (int a = 0; a < K; ++a) {
            if (z[a] == 0.0)
                continue;
            for (int b = 0; b < K; ++b)
                out[a * ld + b] += z[b];
        }
    }
}

static void gram(const double *Z, int64_t n, int K, int ldz, double r, double *out, int ld)
{
    gram_rows(Z, n, K, ldz, r, NULL, out, ld);
}

pymf_status pymf_ibp_rank_one(double *M, int K, const double *z, int sign, double *logdet_inv,
                              pymf_error *err)
{
    double *Mz = malloc(sizeof(double) * (size_t)(K > 0 ? K : 1));
    if (Mz == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory in a rank-one update");
    double q = 0.0;
    for (int a = 0; a < K; ++a) {
        Mz[a] = pymf_dot_sequential(M + (int64_t)a * K, z, K);
        q += z[a] * Mz[a];
    }
    const double denom = 1.0 + sign * q;
    if (!(denom > 0.0)) {
        free(Mz);
        return pymf_fail(err, PYMF_ENUMERIC, "rank-one downdate of a singular matrix (1 - z'Mz = %g)",
                         denom);
    }
    for (int a = 0; a < K; ++a)
        pymf_axpy(K, -sign * Mz[a] / denom, Mz, M + (int64_t)a * K);
    *logdet_inv += log(denom);
    free(Mz);
    return PYMF_OK;
}

pymf_status pymf_ibp_collapsed_loglik(const double *Z, const double *Y, int64_t N, int K, int D,
                                      double sigma_x, double sigma_a, double *out, pymf_error *err)
{
    const double sx2 = sigma_x * sigma_x, r = sx2 / (sigma_a * sigma_a);
    const int k1 = K > 0 ? K : 1;
    double *P = malloc(sizeof(double) * (size_t)k1 * k1);
    double *S = calloc((size_t)k1 * D, sizeof(double));
    double *T = malloc(sizeof(double) * (size_t)k1 * D);
    if (P == NULL || S == NULL || T == NULL) {
        free(P); free(S); free(T);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory in the collapsed likelihood");
    }
    gram(Z, N, K, K, r, P, K);
    double yy = 0.0;
    for (int64_t i = 0; i < N; ++i) {
        yy += pymf_dot_sequential(Y + i * D, Y + i * D, D);
        for (int a = 0; a < K; ++a)
            if (Z[i * K + a] != 0.0)
                pymf_axpy(D, 1.0, Y + i * D, S + (int64_t)a * D);
    }
    if (!cholesky(P, K, K)) {
        free(P); free(S); free(T);
        return pymf_fail(err, PYMF_ENUMERIC, "Z'Z + rI is not positive definite");
    }
    double logdet = 0.0;
    for (int a = 0; a < K; ++a)
        logdet += 2.0 * log(P[a * K + a]);
    memcpy(T, S, sizeof(double) * (size_t)K * D);
    cholesky_solve(P, K, K, T, D);
    double fit = 0.0;
    for (int64_t e = 0; e < (int64_t)K * D; ++e)
        fit += S[e] * T[e];
    *out = -0.5 * (double)N * D * log(TWO_PI) - (double)(N - K) * D * log(sigma_x) -
           (double)K * D * log(sigma_a) - 0.5 * D * logdet - (yy - fit) / (2.0 * sx2);
    free(P); free(S); free(T);
    return PYMF_OK;
}

/* ---------- the collapsed block ---------- */

static void block_free(block *b)
{
    free(b->Z); free(b->Y); free(b->m); free(b->M); free(b->S); free(b->Abar);
    free(b->Mz); free(b->mu); free(b->w); free(b->order);
    memset(b, 0, sizeof *b);
}

static int block_init(block *b, int64_t n, int D, int cap)
{
    memset(b, 0, sizeof *b);
    b->n = n;
    b->D = D;
    b->cap = cap;
    b->limit = INT_MAX;
    b->Z = calloc((size_t)(n > 0 ? n : 1) * cap, sizeof(double));
    b->Y = calloc((size_t)(n > 0 ? n : 1) * D, sizeof(double));
    b->m = calloc((size_t)cap, sizeof(double));
    b->M = calloc((size_t)cap * cap, sizeof(double));
    b->S = calloc((size_t)cap * D, sizeof(double));
    b->Abar = calloc((size_t)cap * D, sizeof(double));
    b->Mz = calloc((size_t)cap, sizeof(double));
    b->mu = calloc((size_t)D, sizeof(double));
    b->w = calloc((size_t)D, sizeof(double));
    b->order = calloc((size_t)cap, sizeof(int));
    return b->Z && b->Y && b->m && b->M && b->S && b->Abar && b->Mz && b->mu && b->w && b->order;
}

/* Room for `need` features (the strides change; contents are kept). */
static int block_reserve(block *b, int need)
{
    if (need <= b->cap)
        return 1;
    int cap = b->cap * 2;
    while (cap < need)
        cap *= 2;
    double *Z = calloc((size_t)(b->n > 0 ? b->n : 1) * cap, sizeof(double));
    double *M = calloc((size_t)cap * cap, sizeof(double));
    double *m = calloc((size_t)cap, sizeof(double));
    double *S = calloc((size_t)cap * b->D, sizeof(double));
    double *Abar = calloc((size_t)cap * b->D, sizeof(double));
    double *Mz = calloc((size_t)cap, sizeof(double));
    int *order = calloc((size_t)cap, sizeof(int));
    if (!(Z && M && m && S && Abar && Mz && order)) {
        free(Z); free(M); free(m); free(S); free(Abar); free(Mz); free(order);
        return 0;
    }
    for (int64_t i = 0; i < b->n; ++i)
        memcpy(Z + i * cap, b->Z + i * b->cap, sizeof(double) * (size_t)b->K);
    for (int a = 0; a < b->K; ++a)
        memcpy(M + (int64_t)a * cap, b->M + (int64_t)a * b->cap, sizeof(double) * (size_t)b->K);
    memcpy(m, b->m, sizeof(double) * (size_t)b->K);
    memcpy(S, b->S, sizeof(double) * (size_t)b->K * b->D);
    memcpy(Abar, b->Abar, sizeof(double) * (size_t)b->K * b->D);
    free(b->Z); free(b->M); free(b->m); free(b->S); free(b->Abar); free(b->Mz); free(b->order);
    b->Z = Z; b->M = M; b->m = m; b->S = S; b->Abar = Abar; b->Mz = Mz; b->order = order;
    b->cap = cap;
    return 1;
}

/* Removes feature k (its column of Z, row and column of M, rows of S and Abar). */
static void block_delete(block *b, int k)
{
    const int K = b->K, cap = b->cap, D = b->D;
    for (int64_t i = 0; i < b->n; ++i)
        memmove(b->Z + i * cap + k, b->Z + i * cap + k + 1, sizeof(double) * (size_t)(K - k - 1));
    for (int a = 0; a < K; ++a)
        memmove(b->M + (int64_t)a * cap + k, b->M + (int64_t)a * cap + k + 1,
                sizeof(double) * (size_t)(K - k - 1));
    memmove(b->M + (int64_t)k * cap, b->M + (int64_t)(k + 1) * cap,
            sizeof(double) * (size_t)(K - k - 1) * cap);
    memmove(b->m + k, b->m + k + 1, sizeof(double) * (size_t)(K - k - 1));
    memmove(b->S + (int64_t)k * D, b->S + (int64_t)(k + 1) * D, sizeof(double) * (size_t)(K - k - 1) * D);
    memmove(b->Abar + (int64_t)k * D, b->Abar + (int64_t)(k + 1) * D,
            sizeof(double) * (size_t)(K - k - 1) * D);
    b->K = K - 1;
}

/* M, Abar and logdet from P = Z'Z + rI (K x K, row-major, destroyed: its Cholesky factor
 * is left there) and the block's S; returns 0 if P is not positive definite. */
static int block_factor(block *b, double *L)
{
    const int K = b->K, cap = b->cap, D = b->D;
    if (!cholesky(L, K, K))
        return 0;
    b->logdet = 0.0;
    for (int a = 0; a < K; ++a)
        b->logdet += 2.0 * log(L[a * K + a]);
    /* M = P^-1 column by column, Abar = P^-1 S */
    double *col = b->Mz;
    for (int c = 0; c < K; ++c) {
        for (int a = 0; a < K; ++a)
            col[a] = a == c ? 1.0 : 0.0;
        cholesky_solve(L, K, K, col, 1);
        for (int a = 0; a < K; ++a)
            b->M[(int64_t)a * cap + c] = col[a];
    }
    memcpy(b->Abar, b->S, sizeof(double) * (size_t)K * D);
    cholesky_solve(L, K, K, b->Abar, D);
    return 1;
}

/* M, S, Abar, logdet and the counts recomputed from Z and the stored Y. */
static int block_refresh(block *b, double r)
{
    const int K = b->K, cap = b->cap, D = b->D;
    if (K == 0) {
        b->logdet = 0.0;
        return 1;
    }
    double *L = malloc(sizeof(double) * (size_t)K * K);
    if (L == NULL)
        return 0;
    gram(b->Z, b->n, K, cap, r, L, K);
    for (int a = 0; a < K; ++a)
        b->m[a] = L[a * K + a] - r;
    memset(b->S, 0, sizeof(double) * (size_t)K * D);
    for (int64_t i = 0; i < b->n; ++i) {
        const double *z = b->Z + i * cap;
        for (int a = 0; a < K; ++a)
            if (z[a] != 0.0)
                pymf_axpy(D, 1.0, b->Y + i * D, b->S + (int64_t)a * D);
    }
    const int ok = block_factor(b, L);
    free(L);
    return ok;
}

/* Mz = M z over the block's features; returns z'Mz. */
static double block_quad(block *b, const double *z)
{
    const int K = b->K, cap = b->cap;
    double q = 0.0;
    for (int a = 0; a < K; ++a) {
        double v = 0.0;
        for (int c = 0; c < K; ++c)
            if (z[c] != 0.0)
                v += b->M[(int64_t)a * cap + c];
        b->Mz[a] = v;
        q += z[a] * v;
    }
    return q;
}

/* mu = z' Abar */
static void block_mean(block *b, const double *z, double *mu)
{
    memset(mu, 0, sizeof(double) * (size_t)b->D);
    for (int a = 0; a < b->K; ++a)
        if (z[a] != 0.0)
            pymf_axpy(b->D, 1.0, b->Abar + (int64_t)a * b->D, mu);
}

/* Takes row i out (sign -1) or puts it in (+1) with its stored y: one rank-one change of
 * M, S, Abar, logdet and the counts. */
static int block_row(block *b, int64_t i, int sign)
{
    const int K = b->K, cap = b->cap, D = b->D;
    const double *z = b->Z + i * cap, *y = b->Y + i * D;
    int any = 0;
    for (int a = 0; a < K; ++a)
        any |= z[a] != 0.0;
    if (!any)
        return 1;
    const double q = block_quad(b, z);
    const double denom = 1.0 + sign * q;
    if (!(denom > 0.0))
        return 0;
    /* w = y - z'Abar (old Abar); Abar += sign-free form: Abar +- Mz/denom (y - z'Abar) */
    block_mean(b, z, b->w);
    for (int d = 0; d < D; ++d)
        b->w[d] = y[d] - b->w[d];
    for (int a = 0; a < K; ++a) {
        pymf_axpy(K, -sign * b->Mz[a] / denom, b->Mz, b->M + (int64_t)a * cap);
        pymf_axpy(D, sign * b->Mz[a] / denom, b->w, b->Abar + (int64_t)a * D);
        if (z[a] != 0.0) {
            pymf_axpy(D, (double)sign, y, b->S + (int64_t)a * D);
            b->m[a] += sign;
        }
    }
    b->logdet += log(denom);
    return 1;
}

/* ||y - mu||^2 */
static double squared_distance(const double *y, const double *mu, int D)
{
    double ss = 0.0;
    for (int d = 0; d < D; ++d) {
        const double e = y[d] - mu[d];
        ss += e * e;
    }
    return ss;
}

/* log N(y; mu, var I) given ss = ||y - mu||^2 */
static double gauss_logpdf_ss(double ss, int D, double var)
{
    return -0.5 * D * log(TWO_PI * var) - 0.5 * ss / var;
}

static double gauss_logpdf_iso(const double *y, const double *mu, int D, double var)
{
    return gauss_logpdf_ss(squared_distance(y, mu, D), D, var);
}

/* Appends an empty feature: its row and column of M are e / r (no row owns it). */
static int block_add_empty(block *b, double r)
{
    if (!block_reserve(b, b->K + 1))
        return 0;
    const int k = b->K, D = b->D;
    for (int64_t row = 0; row < b->n; ++row)
        b->Z[row * b->cap + k] = 0.0;
    for (int a = 0; a <= k; ++a) {
        b->M[(int64_t)a * b->cap + k] = 0.0;
        b->M[(int64_t)k * b->cap + a] = 0.0;
    }
    b->M[(int64_t)k * b->cap + k] = 1.0 / r;
    memset(b->S + (int64_t)k * D, 0, sizeof(double) * (size_t)D);
    memset(b->Abar + (int64_t)k * D, 0, sizeof(double) * (size_t)D);
    b->m[k] = 0.0;
    b->logdet += log(r);
    b->K = k + 1;
    return 1;
}

/* Row i, already taken out, gets the data y: Gibbs over the features other rows own,
 * the MH step on its singletons, then it is put back. N: rows of the whole matrix.
 * Returns ROW_OK, ROW_NUMERIC (a matrix not positive definite), ROW_NOMEM, or ROW_FULL when
 * the accepted outcome would hold more than b->limit features (decided after the MH step,
 * from what it accepted: no proposal is cut short, and no random number is drawn for it). */
static int block_gibbs_row(block *b, int64_t i, const double *y, double N, double alpha,
                           double sx2, double sa2, gsl_rng *rng)
{
    const int D = b->D;
    const double r = sx2 / sa2;
    memcpy(b->Y + i * D, y, sizeof(double) * (size_t)D);
    /* singletons: their rows and columns of M_-n are e_k / r; take them out */
    int k_old = 0;
    for (int a = b->K - 1; a >= 0; --a) {
        if (b->Z[i * b->cap + a] != 0.0 && b->m[a] <= 0.5) {
            block_delete(b, a);
            b->logdet -= log(r);
            ++k_old;
        }
    }
    const int K = b->K, cap = b->cap;
    double *z = b->Z + i * cap;
    double *mu = b->mu;
    block_mean(b, z, mu);
    double v = block_quad(b, z);
    const double *Mz = b->Mz;
    double *mu_flip = b->w;
    /* the current state's density changes only when a flip is taken: then it is l_flip */
    double l_cur = gauss_logpdf_iso(y, mu, D, sx2 * (1.0 + v) + k_old * sa2);
    /* The features in a uniformly random order, drawn for each row. Each flip leaves the
     * posterior over labelled Z invariant, but the singleton move below appends a row's new
     * features last, so the labels' order is not exchangeable given the class; a sweep in
     * label order then depends on it, and the chain left the posterior: about +1 % on
     * E[K+] of a 3 x 2 matrix against exact enumeration (z = +9.8 over 240,000 sweeps),
     * none in a random order (tests/test_ibp.py). The flips' updates do not depend on it. */
    int *order = b->order;
    for (int k = 0; k < K; ++k)
        order[k] = k;
    if (K > 1)  /* gsl_ran_shuffle reads past an empty array */
        gsl_ran_shuffle(rng, order, (size_t)K, sizeof(int));
    for (int j = 0; j < K; ++j) {
        const int k = order[j];
        const double mk = b->m[k];
        const int on = z[k] != 0.0;
        const double sgn = on ? -1.0 : 1.0;
        const double v_flip = v + 2.0 * sgn * Mz[k] + b->M[(int64_t)k * cap + k];
        for (int d = 0; d < D; ++d)
            mu_flip[d] = mu[d] + sgn * b->Abar[(int64_t)k * D + d];
        const double l_flip = gauss_logpdf_iso(y, mu_flip, D, sx2 * (1.0 + v_flip) + k_old * sa2);
        const double l1 = (on ? l_cur : l_flip) + log(mk / N);
        const double l0 = (on ? l_flip : l_cur) + log((N - mk) / N);
        const double p1 = 1.0 / (1.0 + exp(l0 - l1));
        const int want = gsl_rng_uniform(rng) < p1;
        if (want != on) {
            z[k] = want ? 1.0 : 0.0;
            memcpy(mu, mu_flip, sizeof(double) * (size_t)D);
            v = v_flip;
            l_cur = l_flip;
            /* Mz += sgn M[:, k] */
            for (int a = 0; a < K; ++a)
                b->Mz[a] += sgn * b->M[(int64_t)a * cap + k];
        }
    }
    /* new features: replace the k_old singletons by k_new ~ Poisson(alpha / N) */
    const unsigned int k_new = gsl_ran_poisson(rng, alpha / N);
    int k_final = k_old;
    /* k_new == k_old (no singleton and no birth: nearly every row, alpha / N being small)
     * gives log_ratio = 0 exactly, an acceptance that draws no uniform: nothing to compute */
    if ((int)k_new != k_old) {
        const double base = sx2 * (1.0 + v), ss = squared_distance(y, mu, D);
        const double log_ratio = gauss_logpdf_ss(ss, D, base + k_new * sa2) -
                                 gauss_logpdf_ss(ss, D, base + k_old * sa2);
        if (log_ratio >= 0.0 || gsl_rng_uniform(rng) < exp(log_ratio))
            k_final = (int)k_new;
    }
    if (K + k_final > b->limit) {
        b->reached = b->base + K + k_final;
        return ROW_FULL;
    }
    if (!block_reserve(b, K + k_final))
        return ROW_NOMEM;
    for (int c = 0; c < k_final; ++c) {
        block_add_empty(b, r);  /* room reserved above */
        b->Z[i * b->cap + b->K - 1] = 1.0;
    }
    return block_row(b, i, +1) ? ROW_OK : ROW_NUMERIC;
}

/* ---------- split-merge moves (collapsed over A; the maths in ibp.h) ---------- */

/* A compact copy of a block's M, S, Abar, counts and logdet: what a rejected proposal
 * restores (Z is restored by the proposal itself, which knows the rows it changed). */
typedef struct {
    int K, cap;
    double logdet;
    double *M, *S, *Abar, *m;
} block_copy;

static void block_copy_free(block_copy *c)
{
    free(c->M); free(c->S); free(c->Abar); free(c->m);
    memset(c, 0, sizeof *c);
}

static int block_save(const block *b, block_copy *c)
{
    const int K = b->K, D = b->D;
    if (K > c->cap) {
        block_copy_free(c);
        const int cap = K > 8 ? 2 * K : 8;
        c->M = malloc(sizeof(double) * (size_t)cap * cap);
        c->S = malloc(sizeof(double) * (size_t)cap * D);
        c->Abar = malloc(sizeof(double) * (size_t)cap * D);
        c->m = malloc(sizeof(double) * (size_t)cap);
        if (!(c->M && c->S && c->Abar && c->m)) {
            block_copy_free(c);
            return 0;
        }
        c->cap = cap;
    }
    c->K = K;
    c->logdet = b->logdet;
    for (int a = 0; a < K; ++a)
        memcpy(c->M + (int64_t)a * K, b->M + (int64_t)a * b->cap, sizeof(double) * (size_t)K);
    memcpy(c->S, b->S, sizeof(double) * (size_t)K * D);
    memcpy(c->Abar, b->Abar, sizeof(double) * (size_t)K * D);
    memcpy(c->m, b->m, sizeof(double) * (size_t)K);
    return 1;
}

/* b->cap >= c->K holds: a block only grows */
static void block_load(block *b, const block_copy *c)
{
    const int K = c->K, D = b->D;
    b->K = K;
    b->logdet = c->logdet;
    for (int a = 0; a < K; ++a)
        memcpy(b->M + (int64_t)a * b->cap, c->M + (int64_t)a * K, sizeof(double) * (size_t)K);
    memcpy(b->S, c->S, sizeof(double) * (size_t)K * D);
    memcpy(b->Abar, c->Abar, sizeof(double) * (size_t)K * D);
    memcpy(b->m, c->m, sizeof(double) * (size_t)K);
}

/* log p(Y | Z) up to a constant of Z: K D log(sigma_x / sigma_a) - D/2 log|Z'Z + rI|
 * + tr(S' M S) / (2 sigma_x^2). An empty feature adds D log(sigma_x / sigma_a) - D/2 log r
 * = 0, so a block may carry one. */
static double block_evidence(const block *b, double sx2, double sa2)
{
    double fit = 0.0;
    for (int a = 0; a < b->K; ++a)
        fit += pymf_dot_sequential(b->S + (int64_t)a * b->D, b->Abar + (int64_t)a * b->D, b->D);
    return 0.5 * b->K * b->D * log(sx2 / sa2) - 0.5 * b->D * b->logdet + 0.5 * fit / sx2;
}

/* log f(m) = log((N - m)! (m - 1)! / N!): a feature's factor in the IBP prior of Z */
static double log_feature_prior(double m, double N)
{
    return lgamma(N - m + 1.0) + lgamma(m) - lgamma(N + 1.0);
}

enum { OPTION_FIRST = 0, OPTION_SECOND = 1, OPTION_BOTH = 2 };

/* The sequential allocation of row n (taken out of the block) to features a and c (the
 * other features of the row as they are): the log probabilities of "a only", "c only"
 * and "both", each proportional to the predictive density of y_n times a weight from the
 * allocation so far (p_a = (m_a + 1/2) / (count + 1), likewise p_c, independent). The
 * three predictives come from the row without a and c: z0'M z0, M z0 and y - z0'Abar once,
 * then each option adds its columns (O(K^2 + nnz D) once and O(D) per option). */
static void allocation_logprobs(block *b, int64_t n, int a, int c, double ma, double mc,
                                double count, double sx2, double *logp)
{
    const int D = b->D, cap = b->cap;
    double *z = b->Z + n * cap;
    const double *y = b->Y + n * D;
    const double old_a = z[a], old_c = z[c];
    z[a] = z[c] = 0.0;
    const double q0 = block_quad(b, z);
    block_mean(b, z, b->mu);
    z[a] = old_a;
    z[c] = old_c;
    const double Maa = b->M[(int64_t)a * cap + a], Mcc = b->M[(int64_t)c * cap + c];
    const double Mac = b->M[(int64_t)a * cap + c];
    const double var[3] = {sx2 * (1.0 + q0 + 2.0 * b->Mz[a] + Maa),
                           sx2 * (1.0 + q0 + 2.0 * b->Mz[c] + Mcc),
                           sx2 * (1.0 + q0 + 2.0 * (b->Mz[a] + b->Mz[c]) + Maa + Mcc + 2.0 * Mac)};
    const double *Aa = b->Abar + (int64_t)a * D, *Ac = b->Abar + (int64_t)c * D;
    double ss[3] = {0.0, 0.0, 0.0};
    for (int d = 0; d < D; ++d) {
        const double e = y[d] - b->mu[d];
        ss[0] += (e - Aa[d]) * (e - Aa[d]);
        ss[1] += (e - Ac[d]) * (e - Ac[d]);
        ss[2] += (e - Aa[d] - Ac[d]) * (e - Aa[d] - Ac[d]);
    }
    const double pa = (ma + 0.5) / (count + 1.0), pc = (mc + 0.5) / (count + 1.0);
    const double w[3] = {pa * (1.0 - pc), (1.0 - pa) * pc, pa * pc};
    double top = -INFINITY;
    for (int o = 0; o < 3; ++o) {
        logp[o] = log(w[o]) - 0.5 * D * log(TWO_PI * var[o]) - 0.5 * ss[o] / var[o];
        if (logp[o] > top)
            top = logp[o];
    }
    double total = 0.0;
    for (int o = 0; o < 3; ++o)
        total += exp(logp[o] - top);
    const double norm = top + log(total);
    for (int o = 0; o < 3; ++o)
        logp[o] -= norm;
}

static int row_option(const double *z, int a, int c)
{
    return z[a] != 0.0 && z[c] != 0.0 ? OPTION_BOTH : (z[a] != 0.0 ? OPTION_FIRST : OPTION_SECOND);
}

/* Puts the anchors i (feature a) and j (feature c) and then rows[0..n_rows) back into a
 * block they were all taken out of, allocating each row to a, c or both: drawn from
 * allocation_logprobs (force == 0), or kept as Z has it (force == 1). Returns the log
 * probability of the allocation, or NAN if a rank-one update failed. */
static double allocate_rows(block *b, int64_t i, int64_t j, int a, int c, const int64_t *rows,
                            int64_t n_rows, int force, double sx2, gsl_rng *rng)
{
    if (!block_row(b, i, +1) || !block_row(b, j, +1))
        return NAN;
    double ma = 1.0, mc = 1.0, log_q = 0.0, logp[3];
    for (int64_t u = 0; u < n_rows; ++u) {
        const int64_t n = rows[u];
        double *z = b->Z + n * b->cap;
        allocation_logprobs(b, n, a, c, ma, mc, (double)(u + 2), sx2, logp);
        int o;
        if (force) {
            o = row_option(z, a, c);
        } else {
            const double x = gsl_rng_uniform(rng);
            o = x < exp(logp[0]) ? OPTION_FIRST
                : (x < exp(logp[0]) + exp(logp[1]) ? OPTION_SECOND : OPTION_BOTH);
            z[a] = o != OPTION_SECOND ? 1.0 : 0.0;
            z[c] = o != OPTION_FIRST ? 1.0 : 0.0;
        }
        log_q += logp[o];
        ma += z[a];
        mc += z[c];
        if (!block_row(b, n, +1))
            return NAN;
    }
    return log_q;
}

/* Scratch of the split-merge moves (sized for the block's rows and features). */
typedef struct {
    int64_t *rows;          /* the owners other than the anchors */
    unsigned char *bits;    /* their (z_a, z_c) before a merge, to undo it */
    unsigned char *taken;   /* per row of the block: 1 while a proposal holds it out */
    int *fi, *fj;           /* the anchors' features */
    double *gram;           /* Z'Z + rI of the rows in the block (features x features) */
    int features;           /* the features fi, fj and gram have room for */
    block_copy before, out, merged;
} sm_work;

static void sm_work_free(sm_work *w)
{
    free(w->rows); free(w->bits); free(w->taken); free(w->fi); free(w->fj); free(w->gram);
    block_copy_free(&w->before);
    block_copy_free(&w->out);
    block_copy_free(&w->merged);
}

/* Room in fi, fj and gram for `need` features, grown as the block's K grows. Sizing them
 * once for every feature the proposals could add (K + n_proposals) asked for (K + n)^2
 * doubles, 80 GB at split_merge=100000, and int overflowed near 2^31. Returns 0 when out
 * of memory. */
static int sm_work_reserve(sm_work *w, int need)
{
    if (need <= w->features)
        return 1;
    const int features = need > 2 * w->features ? need : 2 * w->features;
    int *fi = realloc(w->fi, sizeof(int) * (size_t)features);
    if (fi != NULL)
        w->fi = fi;
    int *fj = realloc(w->fj, sizeof(int) * (size_t)features);
    if (fj != NULL)
        w->fj = fj;
    double *gram = realloc(w->gram, sizeof(double) * (size_t)features * (size_t)features);
    if (gram != NULL)
        w->gram = gram;
    if (fi == NULL || fj == NULL || gram == NULL)
        return 0;
    w->features = features;
    return 1;
}

/* The rows other than i and j that own feature a or c (c < 0: a only), in row order. */
static int64_t owners(const block *b, int a, int c, int64_t i, int64_t j, int64_t *rows)
{
    int64_t n = 0;
    for (int64_t row = 0; row < b->n; ++row) {
        const double *z = b->Z + row * b->cap;
        if (row != i && row != j && (z[a] != 0.0 || (c >= 0 && z[c] != 0.0)))
            rows[n++] = row;
    }
    return n;
}

/* A uniformly random order of the rows (gsl_ran_shuffle reads past an empty array) */
static void shuffle_rows(gsl_rng *rng, int64_t *rows, int64_t n_rows)
{
    if (n_rows > 1)
        gsl_ran_shuffle(rng, rows, (size_t)n_rows, sizeof(int64_t));
}

/* S and the counts gain (sign +1) or lose (-1) row i's terms, as block_row changes them. */
static void block_row_sums(block *b, int64_t i, int sign)
{
    const double *z = b->Z + i * b->cap, *y = b->Y + i * b->D;
    for (int a = 0; a < b->K; ++a)
        if (z[a] != 0.0) {
            pymf_axpy(b->D, (double)sign, y, b->S + (int64_t)a * b->D);
            b->m[a] += sign;
        }
}

/* Takes the anchors i, j and w->rows[0..n_rows) out of (sign -1) or puts them into (+1) a
 * block that holds every other row. S and the counts change row by row in that order (the
 * same sums as a rank-one update per row); M, Abar and logdet are factorised afresh from
 * the Gram matrix of the rows then in the block. A proposal moves the hundreds of owners
 * of a feature at N = 1000: one O(N nnz K + K^3 + K^2 D) pass replaces a rank-one update
 * of M and Abar per row (O(K^2 + K D) each), the larger part of the moves' cost. */
static int move_rows(block *b, sm_work *w, int64_t i, int64_t j, int64_t n_rows, int sign,
                     double r)
{
    const unsigned char out = sign < 0;
    w->taken[i] = w->taken[j] = out;
    block_row_sums(b, i, sign);
    block_row_sums(b, j, sign);
    for (int64_t u = 0; u < n_rows; ++u) {
        w->taken[w->rows[u]] = out;
        block_row_sums(b, w->rows[u], sign);
    }
    gram_rows(b->Z, b->n, b->K, b->cap, r, w->taken, w->gram, b->K);
    return block_factor(b, w->gram);
}

static int metropolis(double log_ratio, gsl_rng *rng)
{
    return log_ratio >= 0.0 || gsl_rng_uniform(rng) < exp(log_ratio);
}

/* Split feature k (owned by both anchors) into k (i's) and a new feature (j's), the other
 * owners allocated sequentially in a random order. Returns 1 accepted, 0 rejected, -1 a
 * numerical failure (the block is then not usable). */
static int propose_split(block *b, sm_work *w, int64_t i, int64_t j, int k, double N,
                         double alpha, double sx2, double sa2, int flaw, gsl_rng *rng)
{
    const double r = sx2 / sa2;
    const double before = block_evidence(b, sx2, sa2), m_old = b->m[k];
    if (!block_save(b, &w->before))
        return -1;
    const int64_t n_rows = owners(b, k, -1, i, j, w->rows);
    shuffle_rows(rng, w->rows, n_rows);
    if (!move_rows(b, w, i, j, n_rows, -1, r) || !block_add_empty(b, r))
        return -1;
    /* allocate_rows puts the rows back one by one (each draw needs the rows before it) */
    w->taken[i] = w->taken[j] = 0;
    for (int64_t u = 0; u < n_rows; ++u)
        w->taken[w->rows[u]] = 0;
    const int c = b->K - 1;
    b->Z[j * b->cap + k] = 0.0;
    b->Z[j * b->cap + c] = 1.0;
    const double log_q = allocate_rows(b, i, j, k, c, w->rows, n_rows, 0, sx2, rng);
    if (isnan(log_q))
        return -1;
    const double log_prior = log(alpha) + log_feature_prior(b->m[k], N) +
                             log_feature_prior(b->m[c], N) - log_feature_prior(m_old, N);
    const double log_ratio = log_prior + block_evidence(b, sx2, sa2) - before -
                             (flaw ? 0.0 : log_q);
    if (metropolis(log_ratio, rng))
        return 1;
    for (int64_t row = 0; row < b->n; ++row) {
        double *z = b->Z + row * b->cap;
        if (z[c] != 0.0)
            z[k] = 1.0;
        z[c] = 0.0;
    }
    block_load(b, &w->before);
    return 0;
}

/* Z's columns k and l merged into k on the anchor j and the rows (i owns k already), the
 * rows' old (z_k, z_l) kept in w->bits; and back. */
static void merge_columns(block *b, sm_work *w, int64_t j, int k, int l, int64_t n_rows)
{
    for (int64_t u = 0; u < n_rows; ++u) {
        double *z = b->Z + w->rows[u] * b->cap;
        w->bits[u] = (unsigned char)((z[k] != 0.0) | ((z[l] != 0.0) << 1));
        z[k] = 1.0;
        z[l] = 0.0;
    }
    b->Z[j * b->cap + k] = 1.0;
    b->Z[j * b->cap + l] = 0.0;
}

static void unmerge_columns(block *b, const sm_work *w, int64_t j, int k, int l, int64_t n_rows)
{
    for (int64_t u = 0; u < n_rows; ++u) {
        double *z = b->Z + w->rows[u] * b->cap;
        z[k] = (double)(w->bits[u] & 1);
        z[l] = (double)((w->bits[u] >> 1) & 1);
    }
    b->Z[j * b->cap + k] = 0.0;
    b->Z[j * b->cap + l] = 1.0;
}

/* Merge features k (owned by i, not j) and l (owned by j, not i) into k, the owners of
 * either owning it. The reverse split's probability q of allocating the rows as they are
 * is computed by running its sequential allocation forced to the current Z. u is drawn
 * first: since log q <= 0, a merge the rest of the ratio already refuses needs no q (the
 * same decision, for a third of the work). */
static int propose_merge(block *b, sm_work *w, int64_t i, int64_t j, int k, int l, double N,
                         double alpha, double sx2, double sa2, int flaw, gsl_rng *rng)
{
    const double before = block_evidence(b, sx2, sa2), mk = b->m[k], ml = b->m[l];
    if (!block_save(b, &w->before))
        return -1;
    const int64_t n_rows = owners(b, k, l, i, j, w->rows);
    shuffle_rows(rng, w->rows, n_rows);
    const double log_u = log(gsl_rng_uniform(rng));
    const double r = sx2 / sa2;
    if (!move_rows(b, w, i, j, n_rows, -1, r) || !block_save(b, &w->out))
        return -1;
    /* merged: every owner of k or l owns k; l stays, empty, until the move is accepted */
    merge_columns(b, w, j, k, l, n_rows);
    if (!move_rows(b, w, i, j, n_rows, +1, r))
        return -1;
    const double log_prior = log_feature_prior(b->m[k], N) - log(alpha) -
                             log_feature_prior(mk, N) - log_feature_prior(ml, N);
    const double partial = log_prior + block_evidence(b, sx2, sa2) - before;
    if (!(log_u < partial)) {
        unmerge_columns(b, w, j, k, l, n_rows);
        block_load(b, &w->before);
        return 0;
    }
    if (!flaw) {
        if (!block_save(b, &w->merged))
            return -1;
        unmerge_columns(b, w, j, k, l, n_rows);
        block_load(b, &w->out);
        const double log_q = allocate_rows(b, i, j, k, l, w->rows, n_rows, 1, sx2, rng);
        if (isnan(log_q))
            return -1;
        if (!(log_u < partial + log_q)) {
            block_load(b, &w->before);  /* Z is as it was */
            return 0;
        }
        merge_columns(b, w, j, k, l, n_rows);
        block_load(b, &w->merged);
    }
    block_delete(b, l);
    b->logdet -= log(r);
    return 1;
}

/* n_proposals split-merge proposals on a block whose M, S, Abar and logdet are current
 * (every feature owned by some row). counts: split proposed, accepted, merge proposed,
 * accepted (added to). Returns 1, 0 on a numerical failure, -1 when out of memory. */
static int split_merge(block *b, int n_proposals, double N, double alpha, double sx2,
                       double sa2, int flaw, gsl_rng *rng, int64_t *counts)
{
    if (b->n < 2 || n_proposals < 1)
        return 1;
    sm_work w;
    memset(&w, 0, sizeof w);
    w.rows = malloc(sizeof(int64_t) * (size_t)b->n);
    w.bits = malloc((size_t)b->n);
    w.taken = calloc((size_t)b->n, 1);
    int ok = w.rows && w.bits && w.taken;
    int out_of_memory = !ok;
    for (int p = 0; ok && p < n_proposals; ++p) {
        /* a split adds one feature to the block's K */
        if (!sm_work_reserve(&w, b->K + 1)) {
            ok = 0;
            out_of_memory = 1;
            break;
        }
        const int64_t i = (int64_t)gsl_rng_uniform_int(rng, (unsigned long)b->n);
        int64_t j = (int64_t)gsl_rng_uniform_int(rng, (unsigned long)(b->n - 1));
        j += j >= i;
        int ni = 0, nj = 0;
        for (int a = 0; a < b->K; ++a) {
            if (b->Z[i * b->cap + a] != 0.0)
                w.fi[ni++] = a;
            if (b->Z[j * b->cap + a] != 0.0)
                w.fj[nj++] = a;
        }
        if (ni == 0 || nj == 0)
            continue;  /* no feature to split or merge: the chain stays */
        const int k = w.fi[gsl_rng_uniform_int(rng, (unsigned long)ni)];
        const int l = w.fj[gsl_rng_uniform_int(rng, (unsigned long)nj)];
        int outcome;
        if (k == l) {
            ++counts[0];
            outcome = propose_split(b, &w, i, j, k, N, alpha, sx2, sa2, flaw, rng);
            counts[1] += outcome == 1;
        } else if (b->Z[i * b->cap + l] == 0.0 && b->Z[j * b->cap + k] == 0.0) {
            ++counts[2];
            outcome = propose_merge(b, &w, i, j, k, l, N, alpha, sx2, sa2, flaw, rng);
            counts[3] += outcome == 1;
        } else {
            continue;  /* an anchor owns both: no split puts it there, so no merge either */
        }
        ok = outcome >= 0;
    }
    sm_work_free(&w);
    return out_of_memory ? -1 : ok;
}

/* ---------- the sampler ---------- */

static int64_t process_start(int64_t N, int P, int p) { return (int64_t)((N * (int64_t)p) / P); }

static void reseed(gsl_rng *rng, uint64_t seed, int stream, int process, int64_t t)
{
    const uint64_t stream_seed = pymf_mix64(seed ^ ((uint64_t)stream << 48) ^ (uint64_t)process);
    gsl_rng_set(rng, pymf_stream_seed(stream_seed, (uint64_t)t));
}

void pymf_ibp_destroy(pymf_ibp *s)
{
    if (s == NULL)
        return;
    if (s->procs != NULL)
        for (int q = 0; q < s->config.n_local; ++q) {
            block_free(&s->procs[q].tail);
            free(s->procs[q].e);
            free(s->procs[q].residuals);
            if (s->procs[q].rng != NULL)
                gsl_rng_free(s->procs[q].rng);
        }
    free(s->procs);
    if (s->master != NULL)
        gsl_rng_free(s->master);
    if (s->sm_rng != NULL)
        gsl_rng_free(s->sm_rng);
    block_free(&s->sm_block);
    free(s->Y); free(s->missing); free(s->Z); free(s->A); free(s->pi); free(s->A_norm2);
    free(s->in_tail); free(s->pi_logit);
    free(s->new_counts); free(s->stats);
    free(s->saved_Z); free(s->saved_A); free(s->saved_pi); free(s->saved_Ym);
    free(s);
}

void pymf_ibp_set_threads(pymf_ibp *s, int n_threads) { s->config.n_threads = n_threads; }

static int reserve_features(pymf_ibp *s, int need)
{
    if (need <= s->cap)
        return 1;
    int cap = s->cap > 0 ? s->cap : 8;
    while (cap < need)
        cap *= 2;
    double *Z = calloc((size_t)(s->n_rows > 0 ? s->n_rows : 1) * cap, sizeof(double));
    double *A = calloc((size_t)cap * s->D, sizeof(double));
    double *pi = calloc((size_t)cap, sizeof(double));
    double *A2 = calloc((size_t)cap, sizeof(double));
    int *in_tail = calloc((size_t)cap, sizeof(int));
    double *pi_logit = calloc((size_t)cap, sizeof(double));
    if (!(Z && A && pi && A2 && in_tail && pi_logit)) {
        free(Z); free(A); free(pi); free(A2); free(in_tail); free(pi_logit);
        return 0;
    }
    free(s->in_tail);
    s->in_tail = in_tail;
    free(s->pi_logit);
    s->pi_logit = pi_logit;
    for (int64_t i = 0; i < s->n_rows; ++i)
        memcpy(Z + i * cap, s->Z + i * s->cap, sizeof(double) * (size_t)s->K);
    memcpy(A, s->A, sizeof(double) * (size_t)s->K * s->D);
    memcpy(pi, s->pi, sizeof(double) * (size_t)s->K);
    memcpy(A2, s->A_norm2, sizeof(double) * (size_t)s->K);
    free(s->Z); free(s->A); free(s->pi); free(s->A_norm2);
    s->Z = Z; s->A = A; s->pi = pi; s->A_norm2 = A2;
    s->cap = cap;
    return 1;
}

pymf_ibp *pymf_ibp_create(const pymf_ibp_data *data, const pymf_ibp_prior *prior,
                          const pymf_ibp_config *config, pymf_error *err)
{
    pymf_gsl_quiet();
    const int P = config->n_processes;
    if (data->n_cols < 1 || data->n_total < 1)
        return pymf_fail(err, PYMF_EINVAL, "the data must have at least one row and column"), NULL;
    if (P < 1 || P > data->n_total)
        return pymf_fail(err, PYMF_EINVAL, "processes=%d must be in [1, N=%lld]", P,
                         (long long)data->n_total), NULL;
    if (config->collapsed && P != 1)
        return pymf_fail(err, PYMF_EINVAL, "collapsed Gibbs runs one process"), NULL;
    if (config->split_merge < 0)
        return pymf_fail(err, PYMF_EINVAL, "split_merge must be >= 0"), NULL;
    if (config->sub_iterations < 1)
        return pymf_fail(err, PYMF_EINVAL, "sub_iterations must be >= 1"), NULL;
    if (config->max_features < 1)
        return pymf_fail(err, PYMF_EINVAL, "max_features must be >= 1, got %d",
                         config->max_features), NULL;
    if (config->first_process < 0 || config->n_local < 1 || config->first_process + config->n_local > P)
        return pymf_fail(err, PYMF_EINVAL, "the local processes must lie in [0, %d)", P), NULL;
    const int64_t r0 = process_start(data->n_total, P, config->first_process);
    const int64_t r1 = process_start(data->n_total, P, config->first_process + config->n_local);
    if (data->row_offset != r0 || data->n_rows != r1 - r0)
        return pymf_fail(err, PYMF_EINVAL, "the local rows must be [%lld, %lld) for processes "
                         "%d..%d of %d", (long long)r0, (long long)r1, config->first_process,
                         config->first_process + config->n_local - 1, P), NULL;
    const double hp[6] = {prior->alpha_shape, prior->alpha_rate, prior->sx_shape, prior->sx_scale,
                          prior->sa_shape, prior->sa_scale};
    for (int h = 0; h < 6; ++h)
        if (!(hp[h] > 0.0) || !isfinite(hp[h]))
            return pymf_fail(err, PYMF_EINVAL, "the hyper-prior parameters must be positive and "
                             "finite"), NULL;
    const int D = data->n_cols;
    const int64_t n = data->n_rows;
    pymf_ibp *s = calloc(1, sizeof *s);
    if (s == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory"), NULL;
    s->prior = *prior;
    s->config = *config;
    s->N = data->n_total;
    s->row_offset = r0;
    s->n_rows = n;
    s->D = D;
    s->sigma_x = s->sigma_a = s->alpha = 1.0;
    s->Y = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1) * D);
    int64_t n_missing = 0;
    if (data->observed != NULL)
        for (int64_t e = 0; e < n * D; ++e)
            n_missing += data->observed[e] == 0;
    s->missing = malloc(sizeof(int64_t) * (size_t)(n_missing > 0 ? n_missing : 1));
    s->procs = calloc((size_t)config->n_local, sizeof(process));
    s->master = gsl_rng_alloc(gsl_rng_mt19937);
    s->sm_rng = gsl_rng_alloc(gsl_rng_mt19937);
    s->new_counts = calloc((size_t)P, sizeof(int));
    s->saved_Ym = malloc(sizeof(double) * (size_t)(n_missing > 0 ? n_missing : 1));
    if (!s->Y || !s->missing || !s->procs || !s->master || !s->sm_rng || !s->new_counts ||
        !s->saved_Ym ||
        !reserve_features(s, 8)) {
        pymf_ibp_destroy(s);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory"), NULL;
    }
    for (int64_t e = 0; e < n * D; ++e) {
        if (data->observed != NULL && data->observed[e] == 0) {
            s->missing[s->n_missing++] = e;
            s->Y[e] = 0.0;
            continue;
        }
        if (!isfinite(data->X[e])) {
            pymf_ibp_destroy(s);
            return pymf_fail(err, PYMF_EINVAL, "X[%lld, %lld] is not finite (and not held out)",
                             (long long)(r0 + e / D), (long long)(e % D)), NULL;
        }
        s->Y[e] = data->X[e];
    }
    for (int q = 0; q < config->n_local; ++q) {
        process *pr = &s->procs[q];
        pr->index = config->first_process + q;
        pr->row0 = process_start(s->N, P, pr->index) - r0;
        pr->n_rows = process_start(s->N, P, pr->index + 1) - r0 - pr->row0;
        pr->rng = gsl_rng_alloc(gsl_rng_mt19937);
        pr->e = calloc((size_t)D, sizeof(double));
        if (!config->collapsed)
            pr->residuals = malloc(sizeof(double) * (size_t)(pr->n_rows > 0 ? pr->n_rows : 1) * D);
        if (pr->rng == NULL || pr->e == NULL || (!config->collapsed && pr->residuals == NULL) ||
            !block_init(&pr->tail, pr->n_rows, D, 8)) {
            pymf_ibp_destroy(s);
            return pymf_fail(err, PYMF_ENOMEM, "out of memory"), NULL;
        }
        if (config->collapsed)
            pr->tail.limit = config->max_features;  /* the block holds every feature */
    }
    return s;
}

int pymf_ibp_n_features(const pymf_ibp *s)
{
    return s->config.collapsed ? s->procs[0].tail.K : s->K;
}

int64_t pymf_ibp_n_missing(const pymf_ibp *s) { return s->n_missing; }
int64_t pymf_ibp_iteration(const pymf_ibp *s) { return s->t; }
int pymf_ibp_active_process(const pymf_ibp *s) { return s->active; }

static void impute(pymf_ibp *s, process *pr, const double *A, const double *Z, int ldz)
{
    if (s->n_missing == 0)
        return;
    reseed(pr->rng, s->config.seed, STREAM_IMPUTE, pr->index, s->t + 1);
    const int D = s->D, K = pymf_ibp_n_features(s);
    const int64_t lo = pr->row0 * D, hi = (pr->row0 + pr->n_rows) * D;
    for (int64_t j = 0; j < s->n_missing; ++j) {
        const int64_t e = s->missing[j];
        if (e < lo || e >= hi)
            continue;
        const int64_t i = e / D;
        const int d = (int)(e % D);
        double mean = 0.0;
        for (int a = 0; a < K; ++a)
            if (Z[i * ldz + a] != 0.0)
                mean += A[(int64_t)a * D + d];
        s->Y[e] = mean + s->sigma_x * gsl_ran_gaussian(pr->rng, 1.0);
    }
}

pymf_status pymf_ibp_set_state(pymf_ibp *s, int K, const double *Z, const double *A,
                               const double *pi, const double *hyper, const double *Y_missing,
                               int64_t iteration, pymf_error *err)
{
    if (K < 0 || iteration < 0)
        return pymf_fail(err, PYMF_EINVAL, "K and the iteration must be >= 0");
    if (K > s->config.max_features)
        return pymf_fail(err, PYMF_EINVAL, "Z has %d features, more than the cap "
                         "MAX_FEATURES = %d", K, s->config.max_features);
    for (int h = 0; h < 3; ++h)
        if (!(hyper[h] > 0.0) || !isfinite(hyper[h]))
            return pymf_fail(err, PYMF_EINVAL, "sigma_x, sigma_a and alpha must be positive and finite");
    const int D = s->D;
    for (int64_t e = 0; e < s->N * (int64_t)K; ++e)
        if (Z[e] != 0.0 && Z[e] != 1.0)
            return pymf_fail(err, PYMF_EINVAL, "Z must hold 0 and 1 only");
    for (int64_t e = 0; e < (int64_t)K * D; ++e)
        if (!isfinite(A[e]))
            return pymf_fail(err, PYMF_EINVAL, "A must be finite");
    if (!s->config.collapsed)
        for (int a = 0; a < K; ++a)
            if (!(pi[a] >= 0.0 && pi[a] <= 1.0))
                return pymf_fail(err, PYMF_EINVAL, "pi must lie in [0, 1]");
    if (Y_missing != NULL)
        for (int64_t j = 0; j < s->n_missing; ++j)
            if (!isfinite(Y_missing[j]))
                return pymf_fail(err, PYMF_EINVAL, "the held-out cells' values must be finite");
    s->sigma_x = hyper[0];
    s->sigma_a = hyper[1];
    s->alpha = hyper[2];
    s->t = iteration;
    s->begun = 0;
    s->in_iteration = 0;
    if (!reserve_features(s, K))
        return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    memcpy(s->A, A, sizeof(double) * (size_t)K * D);
    for (int a = 0; a < K; ++a)
        s->A_norm2[a] = pymf_dot_sequential(A + (int64_t)a * D, A + (int64_t)a * D, D);
    Z += s->row_offset * K;  /* this object's rows */
    if (s->config.collapsed) {
        block *b = &s->procs[0].tail;
        if (!block_reserve(b, K))
            return pymf_fail(err, PYMF_ENOMEM, "out of memory");
        b->K = K;
        for (int64_t i = 0; i < s->n_rows; ++i)
            memcpy(b->Z + i * b->cap, Z + i * K, sizeof(double) * (size_t)K);
        s->K = 0;
    } else {
        s->K = K;
        for (int64_t i = 0; i < s->n_rows; ++i)
            memcpy(s->Z + i * s->cap, Z + i * K, sizeof(double) * (size_t)K);
        memcpy(s->pi, pi, sizeof(double) * (size_t)K);
    }
    if (Y_missing != NULL) {
        for (int64_t j = 0; j < s->n_missing; ++j)
            s->Y[s->missing[j]] = Y_missing[j];
    } else if (s->n_missing > 0) {
        /* the means z_n A_d: a start that uses no random numbers */
        for (int64_t j = 0; j < s->n_missing; ++j) {
            const int64_t i = s->missing[j] / D;
            const int d = (int)(s->missing[j] % D);
            double mean = 0.0;
            for (int a = 0; a < K; ++a)
                if (Z[i * K + a] != 0.0)
                    mean += A[(int64_t)a * D + d];
            s->Y[s->missing[j]] = mean;
        }
    }
    return PYMF_OK;
}

void pymf_ibp_get_state(const pymf_ibp *s, double *Z, double *A, double *pi, double *hyper,
                        double *Y_missing)
{
    const int K = pymf_ibp_n_features(s), D = s->D;
    const double *src = s->config.collapsed ? s->procs[0].tail.Z : s->Z;
    const int ld = s->config.collapsed ? s->procs[0].tail.cap : s->cap;
    for (int64_t i = 0; i < s->n_rows; ++i)
        memcpy(Z + i * K, src + i * ld, sizeof(double) * (size_t)K);
    memcpy(A, s->A, sizeof(double) * (size_t)K * D);
    for (int a = 0; a < K; ++a)
        pi[a] = s->config.collapsed ? NAN : s->pi[a];
    hyper[0] = s->sigma_x;
    hyper[1] = s->sigma_a;
    hyper[2] = s->alpha;
    for (int64_t j = 0; j < s->n_missing; ++j)
        Y_missing[j] = s->Y[s->missing[j]];
}

int pymf_ibp_collapsed_block(const pymf_ibp *s, double *M, double *logdet)
{
    const block *b = &s->procs[0].tail;
    for (int a = 0; a < b->K; ++a)
        memcpy(M + (int64_t)a * b->K, b->M + (int64_t)a * b->cap, sizeof(double) * (size_t)b->K);
    *logdet = b->logdet;
    return b->K;
}

/* The state the iteration begins from, for pymf_ibp_abort: one copy of Z, A and the
 * held-out cells per iteration (small beside the sweeps). */
static int save_state(pymf_ibp *s)
{
    const int collapsed = s->config.collapsed, D = s->D;
    const int K = collapsed ? s->procs[0].tail.K : s->K;
    const int ld = collapsed ? s->procs[0].tail.cap : s->cap;
    const double *Z = collapsed ? s->procs[0].tail.Z : s->Z;
    const int64_t size = s->n_rows * (int64_t)K;
    if (s->saved_Z == NULL || size > s->saved_size) {
        double *saved = malloc(sizeof(double) * (size_t)(2 * size + 1));
        if (saved == NULL)
            return 0;
        free(s->saved_Z);
        s->saved_Z = saved;
        s->saved_size = 2 * size + 1;
    }
    if (K > s->saved_K_cap || s->saved_A == NULL) {
        const int64_t cap = 2 * (int64_t)(K > 4 ? K : 4);
        double *A = malloc(sizeof(double) * (size_t)(cap * D));
        double *pi = malloc(sizeof(double) * (size_t)cap);
        if (A == NULL || pi == NULL) {
            free(A); free(pi);
            return 0;
        }
        free(s->saved_A); free(s->saved_pi);
        s->saved_A = A;
        s->saved_pi = pi;
        s->saved_K_cap = cap;
    }
    for (int64_t i = 0; i < s->n_rows; ++i)
        memcpy(s->saved_Z + i * K, Z + i * ld, sizeof(double) * (size_t)K);
    memcpy(s->saved_A, s->A, sizeof(double) * (size_t)K * D);
    memcpy(s->saved_pi, s->pi, sizeof(double) * (size_t)K);
    for (int64_t j = 0; j < s->n_missing; ++j)
        s->saved_Ym[j] = s->Y[s->missing[j]];
    s->saved_K = K;
    s->saved_hyper[0] = s->sigma_x;
    s->saved_hyper[1] = s->sigma_a;
    s->saved_hyper[2] = s->alpha;
    s->saved_t = s->t;
    memcpy(s->saved_sm, s->sm_counts, sizeof(s->sm_counts));
    return 1;
}

void pymf_ibp_abort(pymf_ibp *s)
{
    if (!s->begun && !s->in_iteration)
        return;
    const int K = s->saved_K, D = s->D;
    /* the buffers' caps only grow: room for K */
    if (s->config.collapsed) {
        block *b = &s->procs[0].tail;
        for (int64_t i = 0; i < s->n_rows; ++i)
            memcpy(b->Z + i * b->cap, s->saved_Z + i * K, sizeof(double) * (size_t)K);
        b->K = K;  /* M, S, Abar: refreshed from Z before their next use */
    } else {
        for (int64_t i = 0; i < s->n_rows; ++i)
            memcpy(s->Z + i * s->cap, s->saved_Z + i * K, sizeof(double) * (size_t)K);
        s->K = K;
        for (int q = 0; q < s->config.n_local; ++q) {
            s->procs[q].has_tail = 0;
            s->procs[q].tail.K = 0;
        }
    }
    memcpy(s->A, s->saved_A, sizeof(double) * (size_t)K * D);
    for (int a = 0; a < K; ++a)
        s->A_norm2[a] = pymf_dot_sequential(s->A + (int64_t)a * D, s->A + (int64_t)a * D, D);
    memcpy(s->pi, s->saved_pi, sizeof(double) * (size_t)K);
    for (int64_t j = 0; j < s->n_missing; ++j)
        s->Y[s->missing[j]] = s->saved_Ym[j];
    if (s->config.collapsed)
        memcpy(s->procs[0].tail.Y, s->Y, sizeof(double) * (size_t)s->n_rows * D);
    s->sigma_x = s->saved_hyper[0];
    s->sigma_a = s->saved_hyper[1];
    s->alpha = s->saved_hyper[2];
    s->t = s->saved_t;
    memcpy(s->sm_counts, s->saved_sm, sizeof(s->sm_counts));
    s->begun = 0;
    s->in_iteration = 0;
}

/* The stop at the feature cap: `count` features after a step of iteration t. */
static pymf_status over_cap(const pymf_ibp *s, int64_t t, int count, pymf_error *err)
{
    err->iteration = t;
    return pymf_fail(err, PYMF_EDIVERGED, "iteration %lld: the chain would hold %d features, "
                     "more than the cap MAX_FEATURES = %d (alpha = %g, N = %lld rows); kept "
                     "the state of iteration %lld. Give a smaller alpha, or let it be sampled "
                     "(sample_hyper=True)", (long long)t, count, s->config.max_features,
                     s->alpha, (long long)s->N, (long long)(t - 1));
}

pymf_status pymf_ibp_begin(pymf_ibp *s, pymf_error *err)
{
    const int64_t t = s->t + 1;
    if (!save_state(s))
        return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    reseed(s->master, s->config.seed, STREAM_MASTER, 0, t);
    s->active = (int)gsl_rng_uniform_int(s->master, (unsigned long)s->config.n_processes);
    for (int q = 0; q < s->config.n_local; ++q) {
        process *pr = &s->procs[q];
        reseed(pr->rng, s->config.seed, STREAM_PROCESS, pr->index, t);
        pr->status = PYMF_OK;
        pr->bad_row = -1;
        if (s->config.collapsed) {
            pr->has_tail = 1;
            continue;
        }
        pr->has_tail = pr->index == s->active || t <= s->config.warm_start;
        pr->tail.K = 0;
        memset(pr->tail.Z, 0, sizeof(double) * (size_t)(pr->n_rows > 0 ? pr->n_rows : 1) * pr->tail.cap);
    }
    for (int k = 0; k < s->K; ++k) {
        s->in_tail[k] = -1;
        /* the prior odds of every flip of this iteration (pi is fixed until the master) */
        s->pi_logit[k] = log(s->pi[k]) - log1p(-s->pi[k]);
    }
    s->begun = 1;
    s->in_iteration = 1;
    return PYMF_OK;
}

/* The instantiated features of row i given pi and A; e = y - z A - (tail mean) on entry and
 * exit; var: the predictive variance of one cell. counts (or NULL): the feature counts of
 * the process's rows; then only the features another row of the process owns are updated
 * (see instantiated_sweeps). */
static void flip_instantiated(pymf_ibp *s, process *pr, int64_t i, double *e, double var,
                              double *counts)
{
    const int D = s->D;
    double *z = s->Z + i * s->cap;
    for (int k = 0; k < s->K; ++k) {
        if (s->in_tail[k] >= 0)
            continue;
        if (counts != NULL && counts[k] - z[k] < 0.5)
            continue;
        const double *Ak = s->A + (int64_t)k * D;
        const double dot = pymf_dot_sequential(e, Ak, D);
        const int on = z[k] != 0.0;
        /* log p(z=1) - log p(z=0) of the likelihood: ||e0||^2 - ||e1||^2 over 2 var */
        const double dl = (on ? 2.0 * dot + s->A_norm2[k] : 2.0 * dot - s->A_norm2[k]) / (2.0 * var);
        const double logit = s->pi_logit[k] + dl;
        const double p1 = 1.0 / (1.0 + exp(-logit));
        const int want = gsl_rng_uniform(pr->rng) < p1;
        if (want != on) {
            z[k] = want ? 1.0 : 0.0;
            pymf_axpy(D, want ? -1.0 : 1.0, Ak, e);
            if (counts != NULL)
                counts[k] += want ? 1.0 : -1.0;
        }
    }
}

/* y_n - z_n A over the instantiated features (those in a tail excluded: zero there) */
static void residual(const pymf_ibp *s, int64_t i, double *e)
{
    const int D = s->D;
    memcpy(e, s->Y + i * D, sizeof(double) * (size_t)D);
    for (int k = 0; k < s->K; ++k)
        if (s->Z[i * s->cap + k] != 0.0)
            pymf_axpy(D, -1.0, s->A + (int64_t)k * D, e);
}

static pymf_status row_status(int row)
{
    return row == ROW_FULL ? PYMF_EDIVERGED : row == ROW_NOMEM ? PYMF_ENOMEM : PYMF_ENUMERIC;
}

/* Collapsed Gibbs: one sweep over the process's rows (every feature in its block). */
static void collapsed_sweep(pymf_ibp *s, process *pr)
{
    const int D = s->D;
    const double sx2 = s->sigma_x * s->sigma_x, sa2 = s->sigma_a * s->sigma_a;
    block *b = &pr->tail;
    /* every row's data, held-out cells as last imputed */
    memcpy(b->Y, s->Y + pr->row0 * D, sizeof(double) * (size_t)pr->n_rows * D);
    if (!block_refresh(b, sx2 / sa2)) {
        pr->status = PYMF_ENUMERIC;
        return;
    }
    for (int64_t j = 0; j < pr->n_rows; ++j) {
        const int row = block_row(b, j, -1)
                        ? block_gibbs_row(b, j, s->Y + (pr->row0 + j) * D, (double)s->N,
                                          s->alpha, sx2, sa2, pr->rng)
                        : ROW_NUMERIC;
        if (row != ROW_OK) {
            pr->status = row_status(row);
            pr->bad_row = s->row_offset + pr->row0 + j;
            return;
        }
    }
}

/* Hybrid, first stage: L sub-iterations over the process's rows given pi and A. Row n
 * updates z_nk only where another row of its own process owns feature k. Which features
 * those are depends only on the rows this update leaves alone (so it is a Gibbs step
 * whatever the other processes do meanwhile), and no feature can lose its last owner here:
 * features are born and die only in p' collapsed tail, where births and deaths balance.
 * Letting every row drop its own features given pi_k (the paper's step) while only p'
 * rows can gain new ones under-weights small features (the enumeration test measures it). */
static void instantiated_sweeps(pymf_ibp *s, process *pr)
{
    const double sx2 = s->sigma_x * s->sigma_x;
    double *counts = malloc(sizeof(double) * (size_t)(s->K > 0 ? s->K : 1));
    if (counts == NULL) {
        pr->status = PYMF_ENOMEM;
        return;
    }
    for (int k = 0; k < s->K; ++k)
        counts[k] = 0.0;
    for (int64_t i = pr->row0; i < pr->row0 + pr->n_rows; ++i)
        for (int k = 0; k < s->K; ++k)
            counts[k] += s->Z[i * s->cap + k];
    /* every row's residual once: the flips keep it current (one axpy of A_k per flip taken)
     * through the L sub-iterations, instead of recomputing y - z A before each row's turn */
    const int D = s->D;
    for (int64_t j = 0; j < pr->n_rows; ++j)
        residual(s, pr->row0 + j, pr->residuals + j * D);
    for (int l = 0; l < s->config.sub_iterations; ++l)
        for (int64_t j = 0; j < pr->n_rows; ++j)
            flip_instantiated(s, pr, pr->row0 + j, pr->residuals + j * D, sx2, counts);
    free(counts);
}

/* Hybrid, second stage (the processes with a tail): L sub-iterations of the collapsed tail
 * (the features no other process uses, and new ones), with the other instantiated features
 * updated given A under the tail's predictive. */
static void tail_sweeps(pymf_ibp *s, process *pr)
{
    const int D = s->D;
    const double sx2 = s->sigma_x * s->sigma_x, sa2 = s->sigma_a * s->sigma_a, r = sx2 / sa2;
    block *b = &pr->tail;
    for (int l = 0; l < s->config.sub_iterations; ++l) {
        if (!block_refresh(b, r)) {
            pr->status = PYMF_ENUMERIC;
            return;
        }
        for (int64_t j = 0; j < pr->n_rows; ++j) {
            const int64_t i = pr->row0 + j;
            double *e = pr->e;
            residual(s, i, e);
            if (!block_row(b, j, -1)) {
                pr->status = PYMF_ENUMERIC;
                pr->bad_row = s->row_offset + i;
                return;
            }
            block_mean(b, b->Z + j * b->cap, b->mu);
            const double v = block_quad(b, b->Z + j * b->cap);
            for (int d = 0; d < D; ++d)
                e[d] -= b->mu[d];
            flip_instantiated(s, pr, i, e, sx2 * (1.0 + v), NULL);
            for (int d = 0; d < D; ++d)
                e[d] += b->mu[d];
            const int row = block_gibbs_row(b, j, e, (double)s->N, s->alpha, sx2, sa2, pr->rng);
            if (row != ROW_OK) {
                pr->status = row_status(row);
                pr->bad_row = s->row_offset + i;
                return;
            }
        }
    }
}

/* Z'Z + r I, r = sigma_x^2 / sigma_a^2, met as not positive definite by `where` in
 * iteration t: with r tiny beside Z'Z's entries (up to N) two coinciding features make it
 * singular to double precision. A divergence: the run stops with the state of iteration
 * t - 1 (pymf_ibp_run aborts to it), naming r and the remedy. */
static pymf_status not_positive_definite(const pymf_ibp *s, int64_t t, const char *where,
                                         pymf_error *err)
{
    err->iteration = t;
    return pymf_fail(err, PYMF_EDIVERGED, "iteration %lld: %s met Z'Z + (sigma_x^2 / "
                     "sigma_a^2) I not positive definite in double precision (sigma_x = %g, "
                     "sigma_a = %g, their squared ratio %g); kept the state of iteration %lld. "
                     "Start from a larger sigma_x or a smaller sigma_a", (long long)t, where,
                     s->sigma_x, s->sigma_a, (s->sigma_x * s->sigma_x) / (s->sigma_a * s->sigma_a),
                     (long long)(t - 1));
}

static pymf_status process_status(pymf_ibp *s, pymf_error *err)
{
    for (int q = 0; q < s->config.n_local; ++q) {
        const process *pr = &s->procs[q];
        if (pr->status == PYMF_OK)
            continue;
        err->iteration = s->t + 1;
        if (pr->status == PYMF_EDIVERGED)
            return over_cap(s, s->t + 1, pr->tail.reached, err);
        if (pr->status == PYMF_ENOMEM)
            return pymf_fail(err, PYMF_ENOMEM, "iteration %lld: out of memory in the collapsed "
                             "update of row %lld", (long long)(s->t + 1),
                             (long long)pr->bad_row);
        /* a divergence (the state of the last iteration kept), not an internal error:
         * Z'Z + r I is singular to double precision where r is tiny and two features
         * coincide */
        return not_positive_definite(s, s->t + 1, "the collapsed update of a row", err);
    }
    return PYMF_OK;
}

/* Threads for `work` processes of work: never more threads than processes (an idle
 * OpenMP thread only costs its wake-up and barrier). */
static int n_threads(const pymf_ibp *s, int work)
{
    const int threads = s->config.n_threads > 0 ? s->config.n_threads : pymf_default_threads();
    return threads < work ? threads : (work > 0 ? work : 1);
}

/* moved: what split_merge returned (0 a numerical failure, -1 out of memory) */
static pymf_status split_merge_failed(const pymf_ibp *s, pymf_error *err, int64_t t, int moved)
{
    err->iteration = t;
    if (moved < 0)
        return pymf_fail(err, PYMF_ENOMEM, "iteration %lld: out of memory in the split-merge "
                         "moves", (long long)t);
    return not_positive_definite(s, t, "a split-merge proposal", err);
}

/* Collapsed Gibbs: the moves on the block of every feature (its M, S, Abar current). */
static pymf_status collapsed_split_merge(pymf_ibp *s, int64_t t, pymf_error *err)
{
    const double sx2 = s->sigma_x * s->sigma_x, sa2 = s->sigma_a * s->sigma_a;
    const int moved = split_merge(&s->procs[0].tail, s->config.split_merge, (double)s->N,
                                  s->alpha, sx2, sa2, s->config.split_merge_flaw, s->sm_rng,
                                  s->sm_counts);
    if (moved < 1)
        return split_merge_failed(s, err, t, moved);
    if (s->procs[0].tail.K > s->config.max_features)  /* splits add one feature each */
        return over_cap(s, t, s->procs[0].tail.K, err);
    return PYMF_OK;
}

pymf_status pymf_ibp_local_sweeps(pymf_ibp *s, pymf_error *err)
{
    if (!s->begun)
        return pymf_fail(err, PYMF_EINVAL, "local_sweeps before begin");
    const int n_local = s->config.n_local;
    if (s->config.collapsed) {
        collapsed_sweep(s, &s->procs[0]);
        pymf_status st = process_status(s, err);
        if (st != PYMF_OK || s->config.split_merge < 1)
            return st;
        /* the moves of this iteration, on the block the sweep left current */
        reseed(s->sm_rng, s->config.seed, STREAM_SPLIT_MERGE, 0, s->t + 1);
        return collapsed_split_merge(s, s->t + 1, err);
    }
    const int threads = n_threads(s, n_local);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int q = 0; q < n_local; ++q)
        instantiated_sweeps(s, &s->procs[q]);
    for (int q = 0; q < n_local; ++q)
        if (s->procs[q].status == PYMF_ENOMEM)
            return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    return PYMF_OK;
}

void pymf_ibp_local_counts(const pymf_ibp *s, double *counts_local)
{
    const int K = s->config.collapsed ? 0 : s->K;
    for (int q = 0; q < s->config.n_local; ++q) {
        const process *pr = &s->procs[q];
        double *c = counts_local + (int64_t)q * K;
        for (int k = 0; k < K; ++k)
            c[k] = 0.0;
        for (int64_t i = pr->row0; i < pr->row0 + pr->n_rows; ++i)
            for (int k = 0; k < K; ++k)
                c[k] += s->Z[i * s->cap + k];
    }
}

pymf_status pymf_ibp_tail_sweeps(pymf_ibp *s, const double *counts_all, pymf_error *err)
{
    if (!s->begun)
        return pymf_fail(err, PYMF_EINVAL, "tail_sweeps before begin");
    if (s->config.collapsed)
        return PYMF_OK;
    const int P = s->config.n_processes, K = s->K, D = s->D;
    /* A feature that no other process uses joins the tail of the process that owns it: its
     * A_k and pi_k are integrated out until the master draws them again. Collapsed updates
     * dissolve a feature fitted to its few owners' noise, which updates given A_k almost
     * never do (the over-splitting of the paper's own code). The set depends only on the
     * other processes' rows, which this stage does not change, so the stage is a Gibbs
     * step of the posterior with A_T and pi_T integrated out. */
    for (int k = 0; k < K; ++k) {
        double total = 0.0;
        for (int p = 0; p < P; ++p) {
            total += counts_all[(int64_t)p * K + k];
        }
        s->in_tail[k] = -1;
        if (total < 0.5) {
            /* empty: part of the collapsed tail (where new features come from), so frozen
             * here and dropped by the master; updating it given its pi_k and A_k would make
             * which features are collapsed depend on rows this stage changes */
            s->in_tail[k] = P;
            continue;
        }
        for (int p = 0; p < P; ++p) {
            const int active = p == s->active || s->t + 1 <= s->config.warm_start;
            if (active && total > 0.5 && counts_all[(int64_t)p * K + k] == total)
                s->in_tail[k] = p;
        }
    }
    /* The features outside every tail that some row keeps through this stage: outside the
     * warm start those a process other than p' owns (only p' rows change now); in it,
     * every process changes its rows, so none is sure to stay. A tail may hold at most the
     * cap less these: beyond it the chain surely holds more than the cap. */
    int n_outside = 0;
    if (s->t + 1 > s->config.warm_start)
        for (int k = 0; k < K; ++k)
            n_outside += s->in_tail[k] == -1;
    for (int q = 0; q < s->config.n_local; ++q) {
        process *pr = &s->procs[q];
        if (!pr->has_tail)
            continue;
        block *b = &pr->tail;
        b->base = n_outside;
        b->limit = s->config.max_features - n_outside;
        int n_moved = 0;
        for (int k = 0; k < K; ++k)
            n_moved += s->in_tail[k] == pr->index;
        if (!block_reserve(b, n_moved))
            return pymf_fail(err, PYMF_ENOMEM, "out of memory");
        memset(b->Z, 0, sizeof(double) * (size_t)(pr->n_rows > 0 ? pr->n_rows : 1) * b->cap);
        b->K = 0;
        for (int k = 0; k < K; ++k) {
            if (s->in_tail[k] != pr->index)
                continue;
            for (int64_t j = 0; j < pr->n_rows; ++j) {
                double *z = s->Z + (pr->row0 + j) * s->cap;
                b->Z[j * b->cap + b->K] = z[k];
                z[k] = 0.0;
            }
            ++b->K;
        }
        /* the tail's data: the residuals of the instantiated features left */
        for (int64_t j = 0; j < pr->n_rows; ++j)
            residual(s, pr->row0 + j, b->Y + j * D);
    }
    const int n_local = s->config.n_local;
    int n_tails = 0;
    for (int q = 0; q < n_local; ++q)
        n_tails += s->procs[q].has_tail;
    const int threads = n_threads(s, n_tails);
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads) if (threads > 1)
    for (int q = 0; q < n_local; ++q)
        if (s->procs[q].has_tail)
            tail_sweeps(s, &s->procs[q]);
    return process_status(s, err);
}

void pymf_ibp_new_features(const pymf_ibp *s, int *counts_local)
{
    for (int q = 0; q < s->config.n_local; ++q)
        counts_local[q] = (s->config.collapsed || !s->procs[q].has_tail) ? 0 : s->procs[q].tail.K;
}

int64_t pymf_ibp_stats_size(int K, int D)
{
    return (int64_t)K + (int64_t)K * K + (int64_t)K * D + 1;
}

/* The features of one row of process pr, as the global column indices of its ones. */
static int row_ones(const pymf_ibp *s, const process *pr, int64_t j, int offset, int *ones)
{
    int n = 0;
    const int64_t i = pr->row0 + j;
    if (!s->config.collapsed)
        for (int k = 0; k < s->K; ++k)
            if (s->Z[i * s->cap + k] != 0.0)
                ones[n++] = k;
    if (pr->has_tail)
        for (int k = 0; k < pr->tail.K; ++k)
            if (pr->tail.Z[j * pr->tail.cap + k] != 0.0)
                ones[n++] = offset + k;
    return n;
}

/* Hybrid, after the tail stage: a count the chain's features surely reach, from every
 * process's new (tail) feature count: the tails' features (disjoint, each owned by a row)
 * and, outside the warm start, the features a process other than p' owns (only p' rows
 * changed in the tail stage). Outside the warm start it is the chain's exact count. */
static int64_t features_at_least(const pymf_ibp *s, const int *new_features_all)
{
    int64_t lower = 0;
    for (int p = 0; p < s->config.n_processes; ++p)
        lower += new_features_all[p];
    if (s->t + 1 > s->config.warm_start)
        for (int k = 0; k < s->K; ++k)
            lower += s->in_tail[k] == -1;
    return lower;
}

pymf_status pymf_ibp_check_new_features(pymf_ibp *s, const int *new_features_all,
                                        pymf_error *err)
{
    if (s->config.collapsed)
        return PYMF_OK;  /* its sweep checks every row */
    const int64_t lower = features_at_least(s, new_features_all);
    if (lower <= s->config.max_features)
        return PYMF_OK;
    const pymf_status st = over_cap(s, s->t + 1, lower > INT_MAX ? INT_MAX : (int)lower, err);
    pymf_ibp_abort(s);
    return st;
}

pymf_status pymf_ibp_local_stats(pymf_ibp *s, const int *new_features_all, double *stats_local,
                                 pymf_error *err)
{
    const int P = s->config.n_processes, D = s->D;
    int Kt = s->K, offset_p[1024];
    int *offsets = P <= 1024 ? offset_p : malloc(sizeof(int) * (size_t)P);
    if (offsets == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    for (int p = 0; p < P; ++p) {
        offsets[p] = Kt;
        Kt += new_features_all[p];
    }
    if (s->config.collapsed)
        Kt = s->procs[0].tail.K;
    const int64_t size = pymf_ibp_stats_size(Kt, D);
    int *ones = malloc(sizeof(int) * (size_t)(Kt > 0 ? Kt : 1));
    if (ones == NULL) {
        if (offsets != offset_p)
            free(offsets);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    }
    for (int q = 0; q < s->config.n_local; ++q) {
        const process *pr = &s->procs[q];
        double *buf = stats_local + q * size;
        double *m = buf, *ZtZ = buf + Kt, *ZtY = ZtZ + (int64_t)Kt * Kt;
        memset(buf, 0, sizeof(double) * (size_t)size);
        const int offset = s->config.collapsed ? 0 : offsets[pr->index];
        for (int64_t j = 0; j < pr->n_rows; ++j) {
            const double *y = s->Y + (pr->row0 + j) * D;
            buf[size - 1] += pymf_dot_sequential(y, y, D);
            const int n = row_ones(s, pr, j, offset, ones);
            for (int u = 0; u < n; ++u) {
                m[ones[u]] += 1.0;
                for (int v = 0; v < n; ++v)
                    ZtZ[(int64_t)ones[u] * Kt + ones[v]] += 1.0;
                pymf_axpy(D, 1.0, y, ZtY + (int64_t)ones[u] * D);
            }
        }
    }
    free(ones);
    memcpy(s->new_counts, new_features_all, sizeof(int) * (size_t)P);
    if (offsets != offset_p)
        free(offsets);
    return PYMF_OK;
}

/* A | Z, Y ~ N(P^-1 Z'Y, sigma_X^2 P^-1) column by column, given the Cholesky factor L of
 * P = Z'Z + rI (K x K) and A = Z'Y on entry; noise: K x D scratch. */
static void draw_loadings(const double *L, double *A, double *noise, int K, int D,
                          double sigma_x, gsl_rng *rng)
{
    cholesky_solve(L, K, K, A, D);
    for (int64_t e = 0; e < (int64_t)K * D; ++e)
        noise[e] = gsl_ran_gaussian(rng, 1.0);
    /* L' x = eps gives x ~ N(0, P^-1) */
    for (int d = 0; d < D; ++d)
        for (int i = K - 1; i >= 0; --i) {
            double v = noise[(int64_t)i * D + d];
            for (int k = i + 1; k < K; ++k)
                v -= L[k * K + i] * noise[(int64_t)k * D + d];
            noise[(int64_t)i * D + d] = v / L[i * K + i];
        }
    for (int64_t e = 0; e < (int64_t)K * D; ++e)
        A[e] += sigma_x * noise[e];
}

static double harmonic(int64_t N)
{
    double h = 0.0;
    for (int64_t n = 1; n <= N; ++n)
        h += 1.0 / (double)n;
    return h;
}

pymf_status pymf_ibp_master(pymf_ibp *s, const double *stats, pymf_error *err)
{
    const int P = s->config.n_processes, D = s->D;
    const int64_t t = s->t + 1;
    int Kt = s->K;
    for (int p = 0; p < P; ++p)
        Kt += s->new_counts[p];
    if (s->config.collapsed)
        Kt = s->procs[0].tail.K;
    const int64_t size = pymf_ibp_stats_size(Kt, D);
    const double *m = stats, *ZtZ = stats + Kt, *ZtY = ZtZ + (int64_t)Kt * Kt;
    const double yy = stats[size - 1];
    int *keep = malloc(sizeof(int) * (size_t)(Kt > 0 ? Kt : 1));
    const int k1 = Kt > 0 ? Kt : 1;
    double *L = malloc(sizeof(double) * (size_t)k1 * k1);
    double *A = malloc(sizeof(double) * (size_t)k1 * D);
    double *pi = malloc(sizeof(double) * (size_t)k1);
    double *noise = malloc(sizeof(double) * (size_t)k1 * D);
    pymf_status status = PYMF_OK;
    if (!keep || !L || !A || !pi || !noise) {
        status = pymf_fail(err, PYMF_ENOMEM, "out of memory");
        goto done;
    }
    int K = 0;
    for (int a = 0; a < Kt; ++a)
        if (m[a] > 0.5)
            keep[K++] = a;
    if (K > s->config.max_features) {  /* the chain's exact count after the iteration */
        status = over_cap(s, t, K, err);
        pymf_ibp_abort(s);
        goto done;
    }
    const double sx2 = s->sigma_x * s->sigma_x, sa2 = s->sigma_a * s->sigma_a;
    const double r = sx2 / sa2;
    /* A | Z, Y ~ N(P^-1 Z'Y, sigma_X^2 P^-1) column by column, P = Z'Z + rI = L L' */
    for (int a = 0; a < K; ++a) {
        for (int c = 0; c < K; ++c)
            L[a * K + c] = ZtZ[(int64_t)keep[a] * Kt + keep[c]] + (a == c ? r : 0.0);
        memcpy(A + (int64_t)a * D, ZtY + (int64_t)keep[a] * D, sizeof(double) * (size_t)D);
    }
    if (!cholesky(L, K, K)) {
        err->iteration = t;
        status = pymf_fail(err, PYMF_EDIVERGED, "iteration %lld: Z'Z + rI is not positive "
                           "definite (sigma_x = %g, sigma_a = %g)", (long long)t, s->sigma_x,
                           s->sigma_a);
        goto done;
    }
    draw_loadings(L, A, noise, K, D, s->sigma_x, s->master);
    /* ||Y - Z A||^2 = y'y - 2 <A, Z'Y> + <A A', Z'Z> */
    double sse = yy, a2 = 0.0;
    for (int a = 0; a < K; ++a) {
        const double *Aa = A + (int64_t)a * D;
        sse -= 2.0 * pymf_dot_sequential(Aa, ZtY + (int64_t)keep[a] * D, D);
        a2 += pymf_dot_sequential(Aa, Aa, D);
        for (int c = 0; c < K; ++c) {
            const double zz = ZtZ[(int64_t)keep[a] * Kt + keep[c]];
            if (zz != 0.0)
                sse += zz * pymf_dot_sequential(Aa, A + (int64_t)c * D, D);
        }
    }
    if (sse < 0.0)
        sse = 0.0;
    double sigma_x = s->sigma_x, sigma_a = s->sigma_a, alpha = s->alpha;
    const pymf_ibp_prior *pr = &s->prior;
    if (pr->sample_sigma_x)
        sigma_x = sqrt(1.0 / gsl_ran_gamma(s->master, pr->sx_shape + 0.5 * (double)s->N * D,
                                           1.0 / (pr->sx_scale + 0.5 * sse)));
    if (pr->sample_sigma_a)
        sigma_a = sqrt(1.0 / gsl_ran_gamma(s->master, pr->sa_shape + 0.5 * (double)K * D,
                                           1.0 / (pr->sa_scale + 0.5 * a2)));
    if (pr->sample_alpha)
        alpha = gsl_ran_gamma(s->master, pr->alpha_shape + K,
                              1.0 / (pr->alpha_rate + harmonic(s->N)));
    for (int a = 0; a < K; ++a)
        pi[a] = gsl_ran_beta(s->master, m[keep[a]], 1.0 + (double)s->N - m[keep[a]]);
    int finite = isfinite(sigma_x) && sigma_x > 0.0 && isfinite(sigma_a) && sigma_a > 0.0 &&
                 isfinite(alpha) && alpha > 0.0;
    for (int64_t e = 0; e < (int64_t)K * D; ++e)
        finite &= isfinite(A[e]) != 0;
    if (!finite) {
        err->iteration = t;
        status = pymf_fail(err, PYMF_EDIVERGED, "iteration %lld: a non-finite draw of A, "
                           "sigma_x, sigma_a or alpha (sigma_x = %g, sigma_a = %g)",
                           (long long)t, sigma_x, sigma_a);
        goto done;
    }
    /* commit: merge the new features (process order), drop the empty ones */
    if (!reserve_features(s, K)) {
        status = pymf_fail(err, PYMF_ENOMEM, "out of memory");
        goto done;
    }
    if (s->config.collapsed) {
        block *b = &s->procs[0].tail;
        for (int a = Kt - 1; a >= 0; --a)
            if (!(m[a] > 0.5))
                block_delete(b, a);
    } else {
        int offsets[1025];
        int *offs = P < 1025 ? offsets : malloc(sizeof(int) * (size_t)(P + 1));
        if (offs == NULL) {
            status = pymf_fail(err, PYMF_ENOMEM, "out of memory");
            goto done;
        }
        offs[0] = s->K;
        for (int p = 0; p < P; ++p)
            offs[p + 1] = offs[p] + s->new_counts[p];
        double *row = noise;  /* K <= Kt: room for one row */
        for (int q = 0; q < s->config.n_local; ++q) {
            process *pc = &s->procs[q];
            const int off = offs[pc->index];
            for (int64_t j = 0; j < pc->n_rows; ++j) {
                double *z = s->Z + (pc->row0 + j) * s->cap;
                for (int a = 0; a < K; ++a) {
                    const int g = keep[a];
                    double v = 0.0;
                    if (g < s->K)
                        v = z[g];
                    else if (pc->has_tail && g >= off && g < off + pc->tail.K)
                        v = pc->tail.Z[j * pc->tail.cap + (g - off)];
                    row[a] = v;
                }
                memcpy(z, row, sizeof(double) * (size_t)K);
            }
            pc->has_tail = 0;
        }
        if (offs != offsets)
            free(offs);
        s->K = K;
        memcpy(s->pi, pi, sizeof(double) * (size_t)K);
    }
    memcpy(s->A, A, sizeof(double) * (size_t)K * D);
    for (int a = 0; a < K; ++a)
        s->A_norm2[a] = pymf_dot_sequential(A + (int64_t)a * D, A + (int64_t)a * D, D);
    s->sigma_x = sigma_x;
    s->sigma_a = sigma_a;
    s->alpha = alpha;
    {
        const double *Z = s->config.collapsed ? s->procs[0].tail.Z : s->Z;
        const int ldz = s->config.collapsed ? s->procs[0].tail.cap : s->cap;
        for (int q = 0; q < s->config.n_local; ++q)
            impute(s, &s->procs[q], s->A, Z, ldz);
        if (s->config.collapsed) {
            block *b = &s->procs[0].tail;
            memcpy(b->Y, s->Y, sizeof(double) * (size_t)s->n_rows * D);
        }
    }
    s->t = t;
    s->begun = 0;
    /* the hybrid's iteration ends with its split-merge moves */
    s->in_iteration = !s->config.collapsed && s->config.split_merge > 0;
done:
    free(keep); free(L); free(A); free(pi); free(noise);
    return status;
}

/* Hybrid: the moves on every row (Z_all, Y_all: N x K and N x D, or this object's own when
 * it holds every process), collapsed over A and pi; if one is accepted, A and pi are drawn
 * again from their full conditionals given the new Z (a partially collapsed step: a move
 * on p(Z | Y, hyper) followed by p(A, pi | Z, Y, hyper)), all from the split-merge stream. */
static pymf_status hybrid_split_merge(pymf_ibp *s, const double *Z_all, const double *Y_all,
                                      pymf_error *err)
{
    const int D = s->D, K = s->K;
    const int64_t N = s->N, t = s->t;
    const double sx2 = s->sigma_x * s->sigma_x, sa2 = s->sigma_a * s->sigma_a, r = sx2 / sa2;
    block *b = &s->sm_block;
    if (b->Z == NULL && !block_init(b, N, D, K + 8))
        return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    if (!block_reserve(b, K + 1))
        return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    b->K = K;
    for (int64_t i = 0; i < N; ++i) {
        const double *z = Z_all != NULL ? Z_all + i * K : s->Z + i * s->cap;
        memcpy(b->Z + i * b->cap, z, sizeof(double) * (size_t)K);
    }
    memcpy(b->Y, Y_all != NULL ? Y_all : s->Y, sizeof(double) * (size_t)N * D);
    if (!block_refresh(b, r))
        return split_merge_failed(s, err, t, 0);
    const int64_t accepted = s->sm_counts[1] + s->sm_counts[3];
    const int moved = split_merge(b, s->config.split_merge, (double)N, s->alpha, sx2, sa2,
                                  s->config.split_merge_flaw, s->sm_rng, s->sm_counts);
    if (moved < 1)
        return split_merge_failed(s, err, t, moved);
    if (b->K > s->config.max_features)  /* splits add one feature each */
        return over_cap(s, t, b->K, err);
    if (s->sm_counts[1] + s->sm_counts[3] == accepted)
        return PYMF_OK;
    const int Kn = b->K;
    const int k1 = Kn > 0 ? Kn : 1;
    double *L = malloc(sizeof(double) * (size_t)k1 * k1);
    double *A = calloc((size_t)k1 * D, sizeof(double));
    double *noise = malloc(sizeof(double) * (size_t)k1 * D);
    double *m = calloc((size_t)k1, sizeof(double));
    pymf_status status = PYMF_OK;
    if (!L || !A || !noise || !m || !reserve_features(s, Kn)) {
        status = pymf_fail(err, PYMF_ENOMEM, "out of memory");
        goto done;
    }
    gram(b->Z, N, Kn, b->cap, r, L, Kn);
    for (int64_t i = 0; i < N; ++i)
        for (int a = 0; a < Kn; ++a)
            if (b->Z[i * b->cap + a] != 0.0) {
                m[a] += 1.0;
                pymf_axpy(D, 1.0, b->Y + i * D, A + (int64_t)a * D);
            }
    if (!cholesky(L, Kn, Kn)) {
        status = split_merge_failed(s, err, t, 0);
        goto done;
    }
    draw_loadings(L, A, noise, Kn, D, s->sigma_x, s->sm_rng);
    for (int a = 0; a < Kn; ++a)
        s->pi[a] = gsl_ran_beta(s->sm_rng, m[a], 1.0 + (double)N - m[a]);
    for (int64_t i = 0; i < s->n_rows; ++i)
        memcpy(s->Z + i * s->cap, b->Z + (s->row_offset + i) * b->cap, sizeof(double) * (size_t)Kn);
    memcpy(s->A, A, sizeof(double) * (size_t)Kn * D);
    for (int a = 0; a < Kn; ++a)
        s->A_norm2[a] = pymf_dot_sequential(A + (int64_t)a * D, A + (int64_t)a * D, D);
    s->K = Kn;
done:
    free(L); free(A); free(noise); free(m);
    return status;
}

pymf_status pymf_ibp_split_merge(pymf_ibp *s, const double *Z_all, const double *Y_all,
                                 pymf_error *err)
{
    if (s->begun)
        return pymf_fail(err, PYMF_EINVAL, "split_merge inside an iteration");
    if (s->config.split_merge < 1)
        return PYMF_OK;
    if (!s->config.collapsed && s->config.n_local != s->config.n_processes &&
        (Z_all == NULL || Y_all == NULL))
        return pymf_fail(err, PYMF_EINVAL, "split_merge needs every row's Z and Y on an object "
                         "that holds some of the processes");
    reseed(s->sm_rng, s->config.seed, STREAM_SPLIT_MERGE, 0, s->t);
    if (!s->config.collapsed) {
        const pymf_status st = hybrid_split_merge(s, Z_all, Y_all, err);
        if (st == PYMF_OK)
            s->in_iteration = 0;  /* the iteration is complete */
        return st;
    }
    /* collapsed Gibbs between iterations (the tests' entry): on a fresh block */
    block *b = &s->procs[0].tail;
    memcpy(b->Y, s->Y, sizeof(double) * (size_t)s->n_rows * s->D);
    if (!block_refresh(b, (s->sigma_x * s->sigma_x) / (s->sigma_a * s->sigma_a)))
        return split_merge_failed(s, err, s->t, 0);
    return collapsed_split_merge(s, s->t, err);
}

void pymf_ibp_split_merge_counts(const pymf_ibp *s, int64_t *counts)
{
    memcpy(counts, s->sm_counts, sizeof(s->sm_counts));
}

void pymf_ibp_set_split_merge_counts(pymf_ibp *s, const int64_t *counts)
{
    memcpy(s->sm_counts, counts, sizeof(s->sm_counts));
}

/* One whole iteration on an object that holds every process. */
static pymf_status run_one(pymf_ibp *s, pymf_error *err)
{
    const int P = s->config.n_processes;
    pymf_status st = pymf_ibp_begin(s, err);
    if (st == PYMF_OK)
        st = pymf_ibp_local_sweeps(s, err);
    if (st != PYMF_OK)
        return st;
    if (!s->config.collapsed) {
        double *counts = malloc(sizeof(double) * (size_t)P * (s->K > 0 ? s->K : 1));
        if (counts == NULL)
            return pymf_fail(err, PYMF_ENOMEM, "out of memory");
        pymf_ibp_local_counts(s, counts);
        st = pymf_ibp_tail_sweeps(s, counts, err);
        free(counts);
        if (st != PYMF_OK)
            return st;
    }
    pymf_ibp_new_features(s, s->new_counts);
    int Kt = s->K;
    for (int p = 0; p < P; ++p)
        Kt += s->new_counts[p];
    if (s->config.collapsed)
        Kt = s->procs[0].tail.K;
    /* before the statistics' buffers ((P + 1) Kt^2 doubles) are sized for them */
    st = pymf_ibp_check_new_features(s, s->new_counts, err);
    if (st != PYMF_OK)
        return st;
    const int64_t size = pymf_ibp_stats_size(Kt, s->D);
    if ((int64_t)(P + 1) * size > s->stats_cap) {
        free(s->stats);
        s->stats_cap = 2 * (int64_t)(P + 1) * size;
        s->stats = malloc(sizeof(double) * (size_t)s->stats_cap);
        if (s->stats == NULL) {
            s->stats_cap = 0;
            return pymf_fail(err, PYMF_ENOMEM, "out of memory");
        }
    }
    int *counts = malloc(sizeof(int) * (size_t)P);
    if (counts == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory");
    memcpy(counts, s->new_counts, sizeof(int) * (size_t)P);
    st = pymf_ibp_local_stats(s, counts, s->stats + size, err);
    free(counts);
    if (st != PYMF_OK)
        return st;
    /* summed in process order: the same bits as an MPI job that sums them so */
    double *sum = s->stats;
    memset(sum, 0, sizeof(double) * (size_t)size);
    for (int p = 0; p < P; ++p)
        pymf_axpy((int)size, 1.0, s->stats + (int64_t)(p + 1) * size, sum);
    st = pymf_ibp_master(s, sum, err);
    if (st == PYMF_OK && !s->config.collapsed)
        st = pymf_ibp_split_merge(s, NULL, NULL, err);
    return st;
}

pymf_status pymf_ibp_run(pymf_ibp *s, int64_t n_iterations, pymf_error *err)
{
    if (s->config.n_local != s->config.n_processes)
        return pymf_fail(err, PYMF_EINVAL, "run needs every process in this object");
    for (int64_t it = 0; it < n_iterations; ++it) {
        const pymf_status st = run_one(s, err);
        if (st != PYMF_OK) {
            pymf_ibp_abort(s);  /* the state of the last iteration completed */
            return st;
        }
    }
    return PYMF_OK;
}
