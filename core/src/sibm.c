/* SIBM: stochastic variational inference for binary matrices, and batch VB. The maths,
 * the conventions and the determinism rules are in pymf/sibm.h. */
#include "pymf/sibm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "pymf/philox.h"

#define SIBM_MAX_ATTEMPTS 20000 /* rejection draws of a zero: acceptance >= 1% makes running
                                   out a 1e-87 event */
#define SIBM_MIN_ACCEPTANCE 0.01
#define SIBM_ONE_ATTEMPTS 32 /* S-Biased: rejection draws of a one within its row before the
                                exact walk of the row (attempt numbers share the zeros' field) */
#define SIBM_TILE 64 /* columns per task in batch VB's column stages */
/* below this many draws an update runs on one thread: a parallel region's fork and join
 * cost more than the work (and far more on a loaded machine); results do not change */
#define SIBM_PARALLEL_MIN 4096

struct pymf_sibm {
    pymf_sibm_matrix X;
    pymf_sibm_prior prior;
    pymf_sibm_config config;
    int D;
    /* q: natural parameters, in the caller's arrays (pymf_sibm_factors), and z's mean and
     * variance kept in step with z */
    double *u1, *u2, *v1, *v2, z[2];
    double mu_z, var_z;
    /* batch VB only: the factors' means and variances, kept in step with u and v during a
     * sweep (the O(L M D) loops read each many times); the stochastic updates compute them
     * from the natural parameters where they are read, the same quotients bit for bit, so
     * that a fit of a 10^5 x 10^5 matrix does not hold q twice */
    double *mu_u, *var_u, *mu_v, *var_v;
    int64_t *row_updates, *col_updates, t, batch;
    /* the sampling strategy's tables */
    int64_t *col_ones;          /* c1_j */
    double p_one;               /* probability of drawing from the ones */
    double *ones_row_cum;       /* BIASED: cumulative over rows of a_i * (sum of the row's b_j) */
    double *ones_row_bmax;      /* BIASED: the largest b_j among each row's ones */
    double *row_cum, *col_cum;  /* BIASED: cumulative weights of the zero proposal */
    /* BIASED: guide tables of the three cumulative tables (pymf_sibm's search_guided) */
    int64_t *ones_row_guide, *row_guide, *col_guide;
    int64_t n_row_buckets, n_col_buckets;
    double Z1, Z0;              /* BIASED: normalisers of the ones' and zeros' weights */
    double *p_row, *p_col;      /* marginal probabilities of a draw's row / column */
    /* scratch of one update, grown as needed */
    int64_t cap;
    int64_t *rows, *cols;
    double *x, *w_row, *w_col, *w_z, *es, *vs;
    int64_t *order_row, *order_col, *seg_row, *seg_col; /* segments: start offsets, + end */
    int64_t *sort_scratch;            /* the radix sort's second buffer of (key, draw) pairs */
    /* a factor stage's per-draw terms (ta, tb), then its segments' old moments (seg_old_m,
     * seg_old_v, written once ta and tb are summed): both live in sort_scratch, which only
     * group_by uses, before the stages; 32 bytes a draw fewer (3 MB at S = 10^5) */
    double *ta, *tb;
    int64_t *seg_of_row, *seg_of_col; /* each draw's segment (its row's, its column's) */
    int64_t n_seg_row, n_seg_col;
    double *seg_t1, *seg_t2, *seg_old_m, *seg_old_v;
    /* each row's (column's) step of this update: pow once per update, not once per stage */
    double *seg_rho_row, *seg_rho_col;
    /* the spread of each row's (column's) per-draw targets: sum over d of Var and |E|^2;
     * only the automatic batch size reads them, so a fixed size neither keeps nor fills
     * them (NULL) */
    double *row_var, *row_mean_sq, *col_var, *col_mean_sq;
    /* batch VB: E[s] and Var[s] of every entry */
    double *all_es, *all_vs;
};

/* ---- per-entry maths (shared by the stochastic and the batch updates) ---- */

/* lambda(xi) = tanh(xi/2) / (4 xi); its limit 1/8 - xi^2/96 near 0 */
static inline double jj_lambda(double xi)
{
    if (xi < 1e-4)
        return 0.125 - xi * xi / 96.0;
    return tanh(0.5 * xi) / (4.0 * xi);
}

static inline double log_sigmoid(double a)
{
    return a >= 0 ? -log1p(exp(-a)) : a - log1p(exp(a));
}

/* the bound's expectation at the optimal xi: log sigmoid(xi) - xi/2 + (x - 1/2) E[s] */
static inline double bound_at_optimum(double x, double es, double vs)
{
    const double xi = sqrt(vs + es * es);
    return log_sigmoid(xi) - 0.5 * xi + (x - 0.5) * es;
}

/* Var[u v] of independent Gaussians, as a sum of non-negative terms (no cancellation) */
static inline double product_var(double mu_a, double var_a, double mu_b, double var_b)
{
    return var_a * var_b + var_a * mu_b * mu_b + mu_a * mu_a * var_b;
}

/* a factor's mean and variance from its natural parameters (mean/var, 1/var) */
static inline double natural_mean(double eta1, double eta2) { return eta1 / eta2; }
static inline double natural_var(double eta2) { return 1.0 / eta2; }

static void entry_moments(const pymf_sibm *s, int64_t i, int64_t j, double *es, double *vs)
{
    const int D = s->D;
    const double *u1 = s->u1 + i * D, *u2 = s->u2 + i * D;
    const double *v1 = s->v1 + j * D, *v2 = s->v2 + j * D;
    double m = s->mu_z, v = s->var_z;
    for (int d = 0; d < D; ++d) {
        const double mu = natural_mean(u1[d], u2[d]), mv = natural_mean(v1[d], v2[d]);
        m += mu * mv;
        v += product_var(mu, natural_var(u2[d]), mv, natural_var(v2[d]));
    }
    *es = m;
    *vs = v;
}

/* the position of row i's first one at column j or after (row_ptr[i + 1] if none) */
static int64_t first_one_from(const pymf_sibm_matrix *X, int64_t i, int64_t j)
{
    int64_t lo = X->row_ptr[i], hi = X->row_ptr[i + 1];
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (X->col_idx[mid] < j)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static int is_one(const pymf_sibm_matrix *X, int64_t i, int64_t j)
{
    const int64_t e = first_one_from(X, i, j);
    return e < X->row_ptr[i + 1] && X->col_idx[e] == j;
}

/* x_ij of a walk along row i in increasing j: *next is the position of the row's first one
 * not yet passed, and moves past j when j is a one */
static inline double walk_row(const pymf_sibm_matrix *X, int64_t i, int64_t *next, int64_t j)
{
    if (*next < X->row_ptr[i + 1] && X->col_idx[*next] == j) {
        ++*next;
        return 1.0;
    }
    return 0.0;
}

/* A guide table cuts the search of a cumulative table of n entries: bucket b of
 * n_buckets covers the targets [b, b + 1) * total / n_buckets, and guide[b] is the first
 * index whose cum exceeds the bucket's start (guide[n_buckets] = n - 1). A target in bucket
 * k lies between the starts of buckets k - 2 and k + 2 even if its bucket is computed one
 * off by rounding, so the first index with cum > u is inside [guide[k - 2], guide[k + 2]]:
 * the same index as a binary search of the whole table (cum non-decreasing, u < cum[n - 1])
 * gives, in a few steps instead of ~14 at 10^4 rows (each drawn entry searches up to three
 * tables). */
#define SIBM_ENTRIES_PER_BUCKET 8

static int64_t guide_buckets(int64_t n)
{
    return n / SIBM_ENTRIES_PER_BUCKET + 1;
}

static inline double bucket_start(double total, int64_t b, int64_t n_buckets)
{
    return total * (double)b / (double)n_buckets;
}

static void build_guide(const double *cum, int64_t n, int64_t n_buckets, int64_t *guide)
{
    const double total = cum[n - 1];
    int64_t e = 0;
    for (int64_t b = 0; b < n_buckets; ++b) {
        const double start = bucket_start(total, b, n_buckets);
        while (e < n - 1 && !(cum[e] > start))
            ++e;
        guide[b] = e;
    }
    guide[n_buckets] = n - 1;
}

static int64_t search_guided(const double *cum, int64_t n, const int64_t *guide,
                             int64_t n_buckets, double u)
{
    const double q = u / cum[n - 1] * (double)n_buckets;
    int64_t k = 0;
    if (q >= (double)(n_buckets - 1))
        k = n_buckets - 1;
    else if (q > 0) /* false for NaN (an all-zero table): bucket 0 */
        k = (int64_t)q;
    int64_t lo = guide[k >= 2 ? k - 2 : 0], hi = guide[k + 2 <= n_buckets ? k + 2 : n_buckets];
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (cum[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* the row of the e-th one: the last i with row_ptr[i] <= e */
static int64_t row_of_one(const pymf_sibm_matrix *X, int64_t e)
{
    int64_t lo = 0, hi = X->n_rows - 1;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo + 1) / 2;
        if (X->row_ptr[mid] <= e)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static inline uint64_t word64(const uint32_t *w) { return ((uint64_t)w[0] << 32) | w[1]; }

/* an integer uniform in [0, n), bias n / 2^64 (Lemire's multiply-shift) */
static inline int64_t uniform_below(uint64_t r, int64_t n)
{
    return (int64_t)(((unsigned __int128)r * (uint64_t)n) >> 64);
}

static inline double unit53(uint64_t r) { return (double)(r >> 11) * 1.1102230246251565e-16; }

static double draw_probability(const pymf_sibm *s, int64_t i, int64_t j, int one)
{
    const pymf_sibm_matrix *X = &s->X;
    const double L = (double)X->n_rows, M = (double)X->n_cols;
    const double n1 = (double)X->n_ones, n0 = L * M - n1;
    switch (s->config.sampling) {
    case PYMF_SIBM_UNIFORM:
        return 1.0 / (L * M);
    case PYMF_SIBM_BALANCED:
        return one ? s->p_one / n1 : (1.0 - s->p_one) / n0;
    default: {
        const double r1 = (double)(X->row_ptr[i + 1] - X->row_ptr[i]);
        const double c1 = (double)s->col_ones[j];
        if (one)
            return s->p_one * (M - r1 + 1.0) * (L - c1 + 1.0) / s->Z1;
        return (1.0 - s->p_one) * (r1 + 1.0) * (c1 + 1.0) / s->Z0;
    }
    }
}

/* S-Biased: one of row i's ones with probability b_j / sum of the row's b_j, where
   b_j = L - c1_j + 1. By rejection from a uniform one of the row (accepted with probability
   b_j / max b_j over the row), and after SIBM_ONE_ATTEMPTS refusals by walking the row's
   cumulative weight: either way the exact distribution (a mixture of two exact draws), and
   no table of 8 bytes a one (on a sparse matrix every b_j is near L: one attempt). */
static int64_t biased_one_in_row(const pymf_sibm *s, const uint32_t key[2], uint32_t ctr[4],
                                 int64_t index, int64_t i)
{
    const pymf_sibm_matrix *X = &s->X;
    const int64_t first = X->row_ptr[i], count = X->row_ptr[i + 1] - first;
    const double Lp1 = (double)X->n_rows + 1.0;
    uint32_t w[4];
    for (uint32_t attempt = 1; attempt <= SIBM_ONE_ATTEMPTS + 1; ++attempt) {
        ctr[0] = ((uint32_t)((uint64_t)index >> 32) << 16) | attempt;
        pymf_philox4x32_10(ctr, key, w);
        if (attempt <= SIBM_ONE_ATTEMPTS) {
            const int64_t e = first + uniform_below(word64(w), count);
            if (unit53(word64(w + 2)) * s->ones_row_bmax[i] < Lp1 - (double)s->col_ones[X->col_idx[e]])
                return e;
            continue;
        }
        double total = 0.0;
        for (int64_t e = first; e < first + count; ++e)
            total += Lp1 - (double)s->col_ones[X->col_idx[e]];
        const double u = unit53(word64(w)) * total;
        double cum = 0.0;
        for (int64_t e = first; e < first + count; ++e) {
            cum += Lp1 - (double)s->col_ones[X->col_idx[e]];
            if (cum > u)
                return e;
        }
    }
    return first + count - 1; /* u < total up to rounding: the last one */
}

/* draw number `index` of update t: returns 0, or -1 when the zero's rejection ran out */
static int draw_entry(const pymf_sibm *s, uint32_t stream, int64_t t, int64_t index,
                      int64_t *row, int64_t *col, int *one)
{
    const pymf_sibm_matrix *X = &s->X;
    const uint32_t key[2] = {(uint32_t)s->config.seed, (uint32_t)(s->config.seed >> 32)};
    uint32_t ctr[4] = {(uint32_t)((uint64_t)index >> 32) << 16, (uint32_t)index, (uint32_t)t,
                       stream | ((uint32_t)((uint64_t)t >> 32) << 8)};
    uint32_t w[4];
    pymf_philox4x32_10(ctr, key, w);
    if (s->config.sampling == PYMF_SIBM_UNIFORM) {
        *row = uniform_below(word64(w), X->n_rows);
        *col = uniform_below(word64(w + 2), X->n_cols);
        *one = is_one(X, *row, *col);
        return 0;
    }
    if (pymf_uniform_open(w[0]) < s->p_one) {
        int64_t e;
        if (s->config.sampling == PYMF_SIBM_BALANCED) {
            e = uniform_below(word64(w + 2), X->n_ones);
            *row = row_of_one(X, e);
        } else {
            *row = search_guided(s->ones_row_cum, X->n_rows, s->ones_row_guide,
                                 s->n_row_buckets,
                                 unit53(word64(w + 2)) * s->ones_row_cum[X->n_rows - 1]);
            e = biased_one_in_row(s, key, ctr, index, *row);
        }
        *col = X->col_idx[e];
        *one = 1;
        return 0;
    }
    for (uint32_t attempt = 1; attempt <= SIBM_MAX_ATTEMPTS; ++attempt) {
        ctr[0] = ((uint32_t)((uint64_t)index >> 32) << 16) | attempt;
        pymf_philox4x32_10(ctr, key, w);
        int64_t i, j;
        if (s->config.sampling == PYMF_SIBM_BALANCED) {
            i = uniform_below(word64(w), X->n_rows);
            j = uniform_below(word64(w + 2), X->n_cols);
        } else {
            i = search_guided(s->row_cum, X->n_rows, s->row_guide, s->n_row_buckets,
                              unit53(word64(w)) * s->row_cum[X->n_rows - 1]);
            j = search_guided(s->col_cum, X->n_cols, s->col_guide, s->n_col_buckets,
                              unit53(word64(w + 2)) * s->col_cum[X->n_cols - 1]);
        }
        if (!is_one(X, i, j)) {
            *row = i;
            *col = j;
            *one = 0;
            return 0;
        }
    }
    return -1;
}

/* ---- create / destroy / state ---- */

static void free_scratch(pymf_sibm *s)
{
    free(s->rows); free(s->cols); free(s->x); free(s->w_row); free(s->w_col); free(s->w_z);
    free(s->es); free(s->vs); /* ta, tb, seg_old_m, seg_old_v: in sort_scratch */
    free(s->order_row); free(s->order_col); free(s->seg_row); free(s->seg_col);
    free(s->seg_of_row); free(s->seg_of_col);
    free(s->seg_t1); free(s->seg_t2);
    free(s->row_var); free(s->row_mean_sq); free(s->col_var); free(s->col_mean_sq);
    free(s->seg_rho_row); free(s->seg_rho_col); free(s->sort_scratch);
    s->rows = s->cols = s->order_row = s->order_col = s->seg_row = s->seg_col = NULL;
    s->sort_scratch = NULL;
    s->seg_of_row = s->seg_of_col = NULL;
    s->x = s->w_row = s->w_col = s->w_z = s->es = s->vs = s->ta = s->tb = NULL;
    s->seg_t1 = s->seg_t2 = s->seg_old_m = s->seg_old_v = s->seg_rho_row = s->seg_rho_col = NULL;
    s->row_var = s->row_mean_sq = s->col_var = s->col_mean_sq = NULL;
    s->cap = 0;
}

void pymf_sibm_release_scratch(pymf_sibm *s)
{
    free_scratch(s);
}

void pymf_sibm_destroy(pymf_sibm *s)
{
    if (s == NULL)
        return;
    free(s->mu_u); free(s->var_u); free(s->mu_v); free(s->var_v);
    free(s->row_updates); free(s->col_updates);
    free(s->col_ones); free(s->ones_row_cum); free(s->ones_row_bmax);
    free(s->row_cum); free(s->col_cum);
    free(s->ones_row_guide); free(s->row_guide); free(s->col_guide);
    free(s->p_row); free(s->p_col);
    free_scratch(s);
    free(s->all_es); free(s->all_vs);
    free(s);
}

static int reserve(pymf_sibm *s, int64_t n)
{
    if (n <= s->cap)
        return 0;
    free_scratch(s);
    const size_t c = (size_t)n;
    s->rows = malloc(c * sizeof(int64_t)); s->cols = malloc(c * sizeof(int64_t));
    s->x = malloc(c * sizeof(double)); s->w_row = malloc(c * sizeof(double));
    s->w_col = malloc(c * sizeof(double)); s->w_z = malloc(c * sizeof(double));
    s->es = malloc(c * sizeof(double)); s->vs = malloc(c * sizeof(double));
    s->order_row = malloc(c * 2 * sizeof(int64_t)); s->order_col = malloc(c * 2 * sizeof(int64_t));
    s->seg_row = malloc((c + 1) * sizeof(int64_t)); s->seg_col = malloc((c + 1) * sizeof(int64_t));
    s->seg_of_row = malloc(c * sizeof(int64_t)); s->seg_of_col = malloc(c * sizeof(int64_t));
    s->seg_t1 = malloc(c * sizeof(double)); s->seg_t2 = malloc(c * sizeof(double));
    const int spread = s->config.batch_size == 0;
    if (spread) {
        s->row_var = malloc(c * sizeof(double)); s->row_mean_sq = malloc(c * sizeof(double));
        s->col_var = malloc(c * sizeof(double)); s->col_mean_sq = malloc(c * sizeof(double));
    }
    s->seg_rho_row = malloc(c * sizeof(double)); s->seg_rho_col = malloc(c * sizeof(double));
    s->sort_scratch = malloc(c * 2 * sizeof(int64_t));
    if (!s->rows || !s->cols || !s->x || !s->w_row || !s->w_col || !s->w_z || !s->es || !s->vs ||
        !s->order_row || !s->order_col || !s->seg_row || !s->seg_col ||
        !s->seg_of_row || !s->seg_of_col || !s->seg_t1 || !s->seg_t2 ||
        (spread && (!s->row_var || !s->row_mean_sq || !s->col_var || !s->col_mean_sq)) ||
        !s->seg_rho_row || !s->seg_rho_col || !s->sort_scratch) {
        free_scratch(s);
        return -1;
    }
    /* n segments at most, and no more than n draws: the two halves of sort_scratch */
    s->ta = s->seg_old_m = (double *)s->sort_scratch;
    s->tb = s->seg_old_v = (double *)s->sort_scratch + c;
    s->cap = n;
    return 0;
}

/* batch VB: a factor's natural parameters and its cached mean and variance */
static void set_factor(double *eta1, double *eta2, double *mu, double *var, double t1, double t2)
{
    *eta1 = t1;
    *eta2 = t2;
    *mu = t1 / t2;
    *var = 1.0 / t2;
}

static pymf_status check_config(const pymf_sibm_prior *p, const pymf_sibm_config *c,
                                pymf_error *err)
{
    if (p->rank <= 0)
        return pymf_fail(err, PYMF_EINVAL, "rank must be positive, got %d", p->rank);
    const double vars[3] = {p->var_u, p->var_v, p->var_z};
    const double means[3] = {p->mean_u, p->mean_v, p->mean_z};
    const char *names[3] = {"u", "v", "z"};
    for (int k = 0; k < 3; ++k) {
        if (!(vars[k] > 0) || !isfinite(vars[k]))
            return pymf_fail(err, PYMF_EINVAL, "the prior variance of %s must be positive and "
                             "finite, got %g", names[k], vars[k]);
        if (!isfinite(means[k]))
            return pymf_fail(err, PYMF_EINVAL, "the prior mean of %s must be finite", names[k]);
    }
    if (c->sampling < PYMF_SIBM_UNIFORM || c->sampling > PYMF_SIBM_BIASED)
        return pymf_fail(err, PYMF_EINVAL, "unknown sampling strategy %d", (int)c->sampling);
    if (c->batch_size < 0)
        return pymf_fail(err, PYMF_EINVAL, "batch_size must be positive (or 0: automatic)");
    if (c->batch_size == 0 && (c->batch_min < 1 || c->batch_max < c->batch_min ||
                               c->batch_start < c->batch_min || c->batch_start > c->batch_max))
        return pymf_fail(err, PYMF_EINVAL, "the automatic batch size needs 1 <= batch_min <= "
                         "batch_start <= batch_max");
    if (!(c->theta_delta > 0) || !isfinite(c->theta_delta))
        return pymf_fail(err, PYMF_EINVAL, "theta_delta must be positive and finite, got %g",
                         c->theta_delta);
    if (!(c->tau0 >= 0) || !isfinite(c->tau0))
        return pymf_fail(err, PYMF_EINVAL, "tau0 must be >= 0, got %g", c->tau0);
    if (!(c->kappa > 0.5 && c->kappa <= 1.0))
        return pymf_fail(err, PYMF_EINVAL, "kappa must be in (0.5, 1], got %g", c->kappa);
    return PYMF_OK;
}

static pymf_status check_matrix(const pymf_sibm_matrix *X, pymf_error *err)
{
    if (X->n_rows <= 0 || X->n_cols <= 0)
        return pymf_fail(err, PYMF_EINVAL, "the matrix is empty (%lld x %lld)",
                         (long long)X->n_rows, (long long)X->n_cols);
    if (X->row_ptr[0] != 0 || X->row_ptr[X->n_rows] != X->n_ones)
        return pymf_fail(err, PYMF_EINVAL, "row offsets must run from 0 to the number of ones");
    for (int64_t i = 0; i < X->n_rows; ++i) {
        if (X->row_ptr[i + 1] < X->row_ptr[i])
            return pymf_fail(err, PYMF_EINVAL, "row offsets must not decrease (row %lld)",
                             (long long)i);
        for (int64_t e = X->row_ptr[i]; e < X->row_ptr[i + 1]; ++e) {
            const int64_t j = X->col_idx[e];
            if (j < 0 || j >= X->n_cols)
                return pymf_fail(err, PYMF_EINVAL, "column %lld of row %lld is outside "
                                 "[0, %lld)", (long long)j, (long long)i, (long long)X->n_cols);
            if (e > X->row_ptr[i] && j <= X->col_idx[e - 1])
                return pymf_fail(err, PYMF_EINVAL, "the ones of row %lld are not sorted and "
                                 "unique (column %lld)", (long long)i, (long long)j);
        }
    }
    return PYMF_OK;
}

/* the strategy's tables and the marginal probabilities of a draw's row and column */
static pymf_status build_tables(pymf_sibm *s, pymf_error *err)
{
    const pymf_sibm_matrix *X = &s->X;
    const int64_t L = X->n_rows, M = X->n_cols, n1 = X->n_ones;
    const double Ld = (double)L, Md = (double)M, n1d = (double)n1, n0d = Ld * Md - n1d;
    s->col_ones = calloc((size_t)M, sizeof(int64_t));
    s->p_row = malloc((size_t)L * sizeof(double));
    s->p_col = malloc((size_t)M * sizeof(double));
    if (!s->col_ones || !s->p_row || !s->p_col)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the sampling tables");
    for (int64_t e = 0; e < n1; ++e)
        s->col_ones[X->col_idx[e]]++;
    s->p_one = n1 == 0 ? 0.0 : (n0d <= 0 ? 1.0 : 0.5);
    const pymf_sibm_sampling sampling = s->config.sampling;
    if (sampling == PYMF_SIBM_UNIFORM) {
        for (int64_t i = 0; i < L; ++i)
            s->p_row[i] = 1.0 / Ld;
        for (int64_t j = 0; j < M; ++j)
            s->p_col[j] = 1.0 / Md;
        return PYMF_OK;
    }
    if (sampling == PYMF_SIBM_BALANCED) {
        if (s->p_one < 1.0 && n0d / (Ld * Md) < SIBM_MIN_ACCEPTANCE)
            return pymf_fail(err, PYMF_EINVAL, "the matrix is %.4g%% ones: too dense to draw "
                             "its zeros by rejection (at most 99%% ones)", 100 * n1d / (Ld * Md));
        for (int64_t i = 0; i < L; ++i) {
            const double r1 = (double)(X->row_ptr[i + 1] - X->row_ptr[i]);
            s->p_row[i] = (n1 ? s->p_one * r1 / n1d : 0.0) +
                          (n0d > 0 ? (1.0 - s->p_one) * (Md - r1) / n0d : 0.0);
        }
        for (int64_t j = 0; j < M; ++j) {
            const double c1 = (double)s->col_ones[j];
            s->p_col[j] = (n1 ? s->p_one * c1 / n1d : 0.0) +
                          (n0d > 0 ? (1.0 - s->p_one) * (Ld - c1) / n0d : 0.0);
        }
        return PYMF_OK;
    }
    /* BIASED: a one weighs a_i b_j = (r0_i + 1)(c0_j + 1), a zero g_i h_j = (r1_i + 1)(c1_j + 1) */
    s->ones_row_cum = malloc((size_t)L * sizeof(double));
    s->ones_row_bmax = malloc((size_t)L * sizeof(double));
    s->row_cum = malloc((size_t)L * sizeof(double));
    s->col_cum = malloc((size_t)M * sizeof(double));
    double *col_a = calloc((size_t)M, sizeof(double)), *col_g = calloc((size_t)M, sizeof(double));
    if (!s->ones_row_cum || !s->ones_row_bmax || !s->row_cum || !s->col_cum || !col_a || !col_g) {
        free(col_a); free(col_g);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the sampling tables");
    }
    double Z1 = 0.0, ones_gh = 0.0, G = 0.0, H = 0.0;
    for (int64_t i = 0; i < L; ++i) {
        const double r1 = (double)(X->row_ptr[i + 1] - X->row_ptr[i]);
        const double a = Md - r1 + 1.0, g = r1 + 1.0;
        G += g;
        s->row_cum[i] = G;
        double row_b = 0.0, row_bmax = 0.0;
        for (int64_t e = X->row_ptr[i]; e < X->row_ptr[i + 1]; ++e) {
            const int64_t j = X->col_idx[e];
            const double c1 = (double)s->col_ones[j], b = Ld - c1 + 1.0;
            row_b += b;
            row_bmax = b > row_bmax ? b : row_bmax;
            ones_gh += g * (c1 + 1.0);
            col_a[j] += a;
            col_g[j] += g;
        }
        Z1 += a * row_b;
        s->ones_row_cum[i] = Z1;
        s->ones_row_bmax[i] = row_bmax;
    }
    for (int64_t j = 0; j < M; ++j) {
        H += (double)s->col_ones[j] + 1.0;
        s->col_cum[j] = H;
    }
    s->n_row_buckets = guide_buckets(L);
    s->n_col_buckets = guide_buckets(M);
    s->ones_row_guide = malloc((size_t)(s->n_row_buckets + 1) * sizeof(int64_t));
    s->row_guide = malloc((size_t)(s->n_row_buckets + 1) * sizeof(int64_t));
    s->col_guide = malloc((size_t)(s->n_col_buckets + 1) * sizeof(int64_t));
    if (!s->ones_row_guide || !s->row_guide || !s->col_guide) {
        free(col_a); free(col_g);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the sampling tables");
    }
    build_guide(s->ones_row_cum, L, s->n_row_buckets, s->ones_row_guide);
    build_guide(s->row_cum, L, s->n_row_buckets, s->row_guide);
    build_guide(s->col_cum, M, s->n_col_buckets, s->col_guide);
    s->Z1 = Z1;
    s->Z0 = G * H - ones_gh;
    if (s->p_one < 1.0 && s->Z0 / (G * H) < SIBM_MIN_ACCEPTANCE) {
        free(col_a); free(col_g);
        return pymf_fail(err, PYMF_EINVAL, "the zeros carry %.3g%% of the S-Biased proposal's "
                         "weight: too few to draw them by rejection (at least 1%%)",
                         100 * s->Z0 / (G * H));
    }
    for (int64_t i = 0; i < L; ++i) {
        const double r1 = (double)(X->row_ptr[i + 1] - X->row_ptr[i]);
        double ones_b = 0.0, ones_h = 0.0;
        for (int64_t e = X->row_ptr[i]; e < X->row_ptr[i + 1]; ++e) {
            const double c1 = (double)s->col_ones[X->col_idx[e]];
            ones_b += Ld - c1 + 1.0;
            ones_h += c1 + 1.0;
        }
        s->p_row[i] = (n1 ? s->p_one * (Md - r1 + 1.0) * ones_b / Z1 : 0.0) +
                      (s->p_one < 1.0 ? (1.0 - s->p_one) * (r1 + 1.0) * (H - ones_h) / s->Z0 : 0.0);
    }
    for (int64_t j = 0; j < M; ++j) {
        const double c1 = (double)s->col_ones[j];
        s->p_col[j] = (n1 ? s->p_one * (Ld - c1 + 1.0) * col_a[j] / Z1 : 0.0) +
                      (s->p_one < 1.0 ? (1.0 - s->p_one) * (c1 + 1.0) * (G - col_g[j]) / s->Z0 : 0.0);
    }
    free(col_a); free(col_g);
    return PYMF_OK;
}

pymf_sibm *pymf_sibm_create(const pymf_sibm_matrix *matrix, const pymf_sibm_prior *prior,
                            const pymf_sibm_config *config, const pymf_sibm_factors *factors,
                            pymf_error *err)
{
    pymf_error_clear(err);
    if (check_config(prior, config, err) != PYMF_OK || check_matrix(matrix, err) != PYMF_OK)
        return NULL;
    pymf_sibm *s = calloc(1, sizeof *s);
    if (s == NULL) {
        pymf_fail(err, PYMF_ENOMEM, "out of memory for the SIBM state");
        return NULL;
    }
    s->X = *matrix;
    s->prior = *prior;
    s->config = *config;
    s->D = prior->rank;
    const size_t nu = (size_t)matrix->n_rows * (size_t)s->D, nv = (size_t)matrix->n_cols * (size_t)s->D;
    s->u1 = factors->u1; s->u2 = factors->u2; s->v1 = factors->v1; s->v2 = factors->v2;
    s->row_updates = calloc((size_t)matrix->n_rows, sizeof(int64_t));
    s->col_updates = calloc((size_t)matrix->n_cols, sizeof(int64_t));
    if (!s->row_updates || !s->col_updates) {
        pymf_sibm_destroy(s);
        pymf_fail(err, PYMF_ENOMEM, "out of memory for the SIBM state");
        return NULL;
    }
    if (build_tables(s, err) != PYMF_OK) {
        pymf_sibm_destroy(s);
        return NULL;
    }
    for (size_t k = 0; k < nu; ++k) {
        s->u1[k] = prior->mean_u / prior->var_u;
        s->u2[k] = 1.0 / prior->var_u;
    }
    for (size_t k = 0; k < nv; ++k) {
        s->v1[k] = prior->mean_v / prior->var_v;
        s->v2[k] = 1.0 / prior->var_v;
    }
    set_factor(&s->z[0], &s->z[1], &s->mu_z, &s->var_z, prior->mean_z / prior->var_z,
               1.0 / prior->var_z);
    s->batch = config->batch_size > 0 ? config->batch_size : config->batch_start;
    return s;
}

static pymf_status check_natural(const double *a, const double *b, size_t n, const char *name,
                                 pymf_error *err)
{
    for (size_t k = 0; k < n; ++k)
        if (!isfinite(a[k]) || !isfinite(b[k]) || !(b[k] > 0))
            return pymf_fail(err, PYMF_EINVAL, "%s: natural parameters must be finite with "
                             "1/var > 0 (entry %zu)", name, k);
    return PYMF_OK;
}

pymf_status pymf_sibm_set_state(pymf_sibm *s, const double *u1, const double *u2,
                                const double *v1, const double *v2, const double *z,
                                const int64_t *row_updates, const int64_t *col_updates,
                                int64_t t, int64_t batch, pymf_error *err)
{
    pymf_error_clear(err);
    const size_t nu = (size_t)s->X.n_rows * (size_t)s->D, nv = (size_t)s->X.n_cols * (size_t)s->D;
    if (check_natural(u1, u2, nu, "U", err) || check_natural(v1, v2, nv, "V", err) ||
        check_natural(z, z + 1, 1, "z", err))
        return err->status;
    if (t < 0 || batch < 1)
        return pymf_fail(err, PYMF_EINVAL, "the update counter must be >= 0 and the batch "
                         "size >= 1");
    for (int64_t i = 0; i < s->X.n_rows; ++i)
        if (row_updates[i] < 0 || row_updates[i] > t)
            return pymf_fail(err, PYMF_EINVAL, "row %lld's update count is outside [0, t]",
                             (long long)i);
    for (int64_t j = 0; j < s->X.n_cols; ++j)
        if (col_updates[j] < 0 || col_updates[j] > t)
            return pymf_fail(err, PYMF_EINVAL, "column %lld's update count is outside [0, t]",
                             (long long)j);
    /* the factors may already be in place: the caller wrote the chain's own arrays */
    if (u1 != s->u1) memcpy(s->u1, u1, nu * sizeof(double));
    if (u2 != s->u2) memcpy(s->u2, u2, nu * sizeof(double));
    if (v1 != s->v1) memcpy(s->v1, v1, nv * sizeof(double));
    if (v2 != s->v2) memcpy(s->v2, v2, nv * sizeof(double));
    set_factor(&s->z[0], &s->z[1], &s->mu_z, &s->var_z, z[0], z[1]);
    memcpy(s->row_updates, row_updates, (size_t)s->X.n_rows * sizeof(int64_t));
    memcpy(s->col_updates, col_updates, (size_t)s->X.n_cols * sizeof(int64_t));
    s->t = t;
    s->batch = s->config.batch_size > 0 ? s->config.batch_size : batch;
    return PYMF_OK;
}

void pymf_sibm_get_state(const pymf_sibm *s, double *u1, double *u2, double *v1, double *v2,
                         double *z, int64_t *row_updates, int64_t *col_updates, int64_t *t,
                         int64_t *batch)
{
    const size_t nu = (size_t)s->X.n_rows * (size_t)s->D, nv = (size_t)s->X.n_cols * (size_t)s->D;
    if (u1 && u1 != s->u1) memcpy(u1, s->u1, nu * sizeof(double));
    if (u2 && u2 != s->u2) memcpy(u2, s->u2, nu * sizeof(double));
    if (v1 && v1 != s->v1) memcpy(v1, s->v1, nv * sizeof(double));
    if (v2 && v2 != s->v2) memcpy(v2, s->v2, nv * sizeof(double));
    if (z) { z[0] = s->z[0]; z[1] = s->z[1]; }
    if (row_updates) memcpy(row_updates, s->row_updates, (size_t)s->X.n_rows * sizeof(int64_t));
    if (col_updates) memcpy(col_updates, s->col_updates, (size_t)s->X.n_cols * sizeof(int64_t));
    if (t) *t = s->t;
    if (batch) *batch = s->batch;
}

static int threads(const pymf_sibm *s)
{
    return s->config.n_threads > 0 ? s->config.n_threads : pymf_default_threads();
}

/* ---- the stochastic update ---- */

typedef struct {
    int64_t key, index;
} keyed;

/* order = draws sorted by (key, draw); seg = start offsets of runs of one key, plus the end.
 * An LSD radix sort on the key (keys are row or column indices, >= 0), 11 bits a pass: it is
 * stable and the pairs start in draw order, so equal keys stay in draw order, the same order
 * a comparison sort on (key, draw) gives, in O(n) instead of O(n log n) (this sort is serial,
 * and a comparison sort of two minibatches was 9 % of an update on one thread). */
#define SIBM_RADIX_BITS 11
static int64_t group_by(const int64_t *keys, int64_t n, int64_t *order_pairs,
                        int64_t *scratch_pairs, int64_t *seg, int64_t *seg_of)
{
    keyed *src = (keyed *)order_pairs, *dst = (keyed *)scratch_pairs;
    int64_t max_key = 0;
    for (int64_t k = 0; k < n; ++k) {
        src[k].key = keys[k];
        src[k].index = k;
        if (keys[k] > max_key)
            max_key = keys[k];
    }
    const int64_t radix = (int64_t)1 << SIBM_RADIX_BITS;
    int64_t count[((int64_t)1 << SIBM_RADIX_BITS) + 1];
    for (int shift = 0; shift == 0 || (max_key >> shift) > 0; shift += SIBM_RADIX_BITS) {
        memset(count, 0, sizeof(count));
        for (int64_t k = 0; k < n; ++k)
            count[((src[k].key >> shift) & (radix - 1)) + 1]++;
        for (int64_t r = 0; r < radix; ++r)
            count[r + 1] += count[r];
        for (int64_t k = 0; k < n; ++k)
            dst[count[(src[k].key >> shift) & (radix - 1)]++] = src[k];
        keyed *swap = src;
        src = dst;
        dst = swap;
    }
    if (src != (keyed *)order_pairs)
        memcpy(order_pairs, src, (size_t)n * sizeof(keyed));
    const keyed *pairs = (const keyed *)order_pairs;
    int64_t n_seg = 0;
    for (int64_t k = 0; k < n; ++k) {
        if (k == 0 || pairs[k].key != pairs[k - 1].key)
            seg[n_seg++] = k;
        seg_of[pairs[k].index] = n_seg - 1;
    }
    seg[n_seg] = n;
    return n_seg;
}

static inline double schedule(const pymf_sibm *s, int64_t n)
{
    return pow(s->config.tau0 + (double)n, -s->config.kappa);
}

/* One factor stage (u_d when rows, v_d otherwise) of an update from the scratch draws. */
static pymf_status factor_stage(pymf_sibm *s, int rows, int d, double rho, int nt, int64_t n,
                                pymf_error *err)
{
    const int D = s->D;
    const int64_t *own = rows ? s->rows : s->cols, *other = rows ? s->cols : s->rows;
    const double *weight = rows ? s->w_row : s->w_col;
    const keyed *order = (const keyed *)(rows ? s->order_row : s->order_col);
    const int64_t *seg = rows ? s->seg_row : s->seg_col;
    const int64_t n_seg = rows ? s->n_seg_row : s->n_seg_col;
    double *eta1 = rows ? s->u1 : s->v1, *eta2 = rows ? s->u2 : s->v2;
    const double *oth1 = rows ? s->v1 : s->u1, *oth2 = rows ? s->v2 : s->u2;
    const double *seg_rho = rows ? s->seg_rho_row : s->seg_rho_col;
    const double prior1 = rows ? s->prior.mean_u / s->prior.var_u : s->prior.mean_v / s->prior.var_v;
    const double prior2 = rows ? 1.0 / s->prior.var_u : 1.0 / s->prior.var_v;
    double *spread_var = rows ? s->row_var : s->col_var;
    double *spread_mean_sq = rows ? s->row_mean_sq : s->col_mean_sq;
    /* each draw's contribution at the current q, lambda from the current xi */
#pragma omp parallel for schedule(static) num_threads(nt) if(n >= SIBM_PARALLEL_MIN)
    for (int64_t k = 0; k < n; ++k) {
        const double lam = jj_lambda(sqrt(s->vs[k] + s->es[k] * s->es[k]));
        const int64_t a = own[k] * D + d, b = other[k] * D + d;
        const double m = natural_mean(oth1[b], oth2[b]), e2 = m * m + natural_var(oth2[b]);
        s->ta[k] = weight[k] * 2.0 * lam * e2;
        s->tb[k] = weight[k] * m * ((s->x[k] - 0.5) -
                                    2.0 * lam * (s->es[k] - natural_mean(eta1[a], eta2[a]) * m));
    }
    /* each row's (column's) target: the prior plus the mean of its draws', in draw order */
    int failed = 0;
#pragma omp parallel for schedule(dynamic, 64) num_threads(nt) if(n >= SIBM_PARALLEL_MIN) reduction(| : failed)
    for (int64_t g = 0; g < n_seg; ++g) {
        const int64_t lo = seg[g], hi = seg[g + 1];
        double sa = 0.0, sb = 0.0;
        for (int64_t q = lo; q < hi; ++q) {
            sa += s->ta[order[q].index];
            sb += s->tb[order[q].index];
        }
        const double cnt = (double)(hi - lo), t1 = prior1 + sb / cnt, t2 = prior2 + sa / cnt;
        s->seg_t1[g] = t1;
        s->seg_t2[g] = t2;
        if (!isfinite(t1) || !isfinite(t2) || !(t2 > 0))
            failed = 1;
        /* the spread of the per-draw targets, for the automatic batch size */
        if (spread_var != NULL && hi - lo >= 2) {
            double v1 = 0.0, v2 = 0.0;
            for (int64_t q = lo; q < hi; ++q) {
                const double e1 = prior1 + s->tb[order[q].index] - t1;
                const double e2 = prior2 + s->ta[order[q].index] - t2;
                v1 += e1 * e1;
                v2 += e2 * e2;
            }
            spread_var[g] += (v1 + v2) / (cnt - 1.0);
            spread_mean_sq[g] += t1 * t1 + t2 * t2;
        }
    }
    if (failed)
        return pymf_fail(err, PYMF_EDIVERGED, "a non-finite %s target in dimension %d",
                         rows ? "row" : "column", d);
#pragma omp parallel for schedule(static) num_threads(nt) if(n >= SIBM_PARALLEL_MIN)
    for (int64_t g = 0; g < n_seg; ++g) {
        const int64_t a = own[order[seg[g]].index] * D + d;
        const double r = seg_rho[g];
        s->seg_old_m[g] = natural_mean(eta1[a], eta2[a]);
        s->seg_old_v[g] = natural_var(eta2[a]);
        const double n1 = (1.0 - r) * eta1[a] + r * s->seg_t1[g];
        const double n2 = (1.0 - r) * eta2[a] + r * s->seg_t2[g];
        eta1[a] = n1;
        eta2[a] = n2;
        /* the targets are spent: the slots now hold the new mean and variance */
        s->seg_t1[g] = natural_mean(eta1[a], eta2[a]);
        s->seg_t2[g] = natural_var(eta2[a]);
    }
    /* E[s] and Var[s] of every draw follow its row's (column's) new factor; by draw, so
     * that each thread writes its own stretch of es and vs (by segment, the threads' draws
     * interleave and share cache lines) */
    const int64_t *seg_of = rows ? s->seg_of_row : s->seg_of_col;
#pragma omp parallel for schedule(static) num_threads(nt) if(n >= SIBM_PARALLEL_MIN)
    for (int64_t k = 0; k < n; ++k) {
        const int64_t g = seg_of[k], b = other[k] * D + d;
        const double m_old = s->seg_old_m[g], v_old = s->seg_old_v[g];
        const double m_new = s->seg_t1[g], v_new = s->seg_t2[g];
        const double mo = natural_mean(oth1[b], oth2[b]), vo = natural_var(oth2[b]);
        s->es[k] += (m_new - m_old) * mo;
        s->vs[k] += product_var(m_new, v_new, mo, vo) - product_var(m_old, v_old, mo, vo);
    }
    return PYMF_OK;
}

/* The stages z, u_1, v_1, ..., u_D, v_D from the n draws in the scratch arrays. */
static pymf_status update_scratch(pymf_sibm *s, int64_t n, double rho, pymf_error *err)
{
    const int nt = threads(s), D = s->D;
    s->n_seg_row = group_by(s->rows, n, s->order_row, s->sort_scratch, s->seg_row, s->seg_of_row);
    s->n_seg_col = group_by(s->cols, n, s->order_col, s->sort_scratch, s->seg_col, s->seg_of_col);
    const keyed *by_row = (const keyed *)s->order_row, *by_col = (const keyed *)s->order_col;
#pragma omp parallel for schedule(static) num_threads(nt) if(n >= SIBM_PARALLEL_MIN)
    for (int64_t k = 0; k < n; ++k)
        entry_moments(s, s->rows[k], s->cols[k], &s->es[k], &s->vs[k]);
    /* z sees every draw (summed in draw order) */
    double sa = 0.0, sb = 0.0;
    for (int64_t k = 0; k < n; ++k) {
        const double lam = jj_lambda(sqrt(s->vs[k] + s->es[k] * s->es[k]));
        sa += s->w_z[k] * 2.0 * lam;
        sb += s->w_z[k] * ((s->x[k] - 0.5) - 2.0 * lam * (s->es[k] - s->mu_z));
    }
    const double t1 = s->prior.mean_z / s->prior.var_z + sb / (double)n;
    const double t2 = 1.0 / s->prior.var_z + sa / (double)n;
    if (!isfinite(t1) || !isfinite(t2) || !(t2 > 0))
        return pymf_fail(err, PYMF_EDIVERGED, "a non-finite target for z");
    if (rho <= 0) {
        /* counted before the stages: a row's rho includes this update */
        for (int64_t g = 0; g < s->n_seg_row; ++g)
            s->row_updates[s->rows[by_row[s->seg_row[g]].index]]++;
        for (int64_t g = 0; g < s->n_seg_col; ++g)
            s->col_updates[s->cols[by_col[s->seg_col[g]].index]]++;
    }
    /* each row's and column's step, rho_t(i) from its own count (this update included) */
#pragma omp parallel for schedule(static) num_threads(nt) if(n >= SIBM_PARALLEL_MIN)
    for (int64_t g = 0; g < s->n_seg_row; ++g)
        s->seg_rho_row[g] = rho > 0 ? rho : schedule(s, s->row_updates[s->rows[by_row[s->seg_row[g]].index]]);
#pragma omp parallel for schedule(static) num_threads(nt) if(n >= SIBM_PARALLEL_MIN)
    for (int64_t g = 0; g < s->n_seg_col; ++g)
        s->seg_rho_col[g] = rho > 0 ? rho : schedule(s, s->col_updates[s->cols[by_col[s->seg_col[g]].index]]);
    const double rz = rho > 0 ? rho : schedule(s, s->t + 1);
    const double m_old = s->mu_z, v_old = s->var_z;
    set_factor(&s->z[0], &s->z[1], &s->mu_z, &s->var_z, (1.0 - rz) * s->z[0] + rz * t1,
               (1.0 - rz) * s->z[1] + rz * t2);
#pragma omp parallel for schedule(static) num_threads(nt) if(n >= SIBM_PARALLEL_MIN)
    for (int64_t k = 0; k < n; ++k) {
        s->es[k] += s->mu_z - m_old;
        s->vs[k] += s->var_z - v_old;
    }
    if (s->row_var != NULL) {
        memset(s->row_var, 0, (size_t)s->n_seg_row * sizeof(double));
        memset(s->row_mean_sq, 0, (size_t)s->n_seg_row * sizeof(double));
        memset(s->col_var, 0, (size_t)s->n_seg_col * sizeof(double));
        memset(s->col_mean_sq, 0, (size_t)s->n_seg_col * sizeof(double));
    }
    for (int d = 0; d < D; ++d) {
        pymf_status status = factor_stage(s, 1, d, rho, nt, n, err);
        if (status == PYMF_OK)
            status = factor_stage(s, 0, d, rho, nt, n, err);
        if (status != PYMF_OK)
            return status;
    }
    return PYMF_OK;
}

/* The automatic batch size after an update (pymf/sibm.h), from the spread statistics of
 * its rows and columns; rows first, then columns, each in key order. */
static int64_t next_batch(const pymf_sibm *s)
{
    const keyed *by_row = (const keyed *)s->order_row, *by_col = (const keyed *)s->order_col;
    double total = 0.0;
    int64_t used = 0;
    for (int side = 0; side < 2; ++side) {
        const int64_t n_seg = side == 0 ? s->n_seg_row : s->n_seg_col;
        const int64_t *seg = side == 0 ? s->seg_row : s->seg_col;
        const keyed *order = side == 0 ? by_row : by_col;
        const double *var = side == 0 ? s->row_var : s->col_var;
        const double *mean_sq = side == 0 ? s->row_mean_sq : s->col_mean_sq;
        const int64_t *counts = side == 0 ? s->row_updates : s->col_updates;
        for (int64_t g = 0; g < n_seg; ++g) {
            if (seg[g + 1] - seg[g] < 2 || !(mean_sq[g] > 0))
                continue;
            const int64_t key = side == 0 ? s->rows[order[seg[g]].index] : s->cols[order[seg[g]].index];
            /* the draws row i needs, n(i) = ratio; S p_row(i) of a minibatch's fall in it */
            const double p = side == 0 ? s->p_row[key] : s->p_col[key];
            total += var[g] / (s->config.theta_delta * schedule(s, counts[key]) * mean_sq[g]) / p;
            ++used;
        }
    }
    double next = used ? total / (double)used : 2.0 * (double)s->batch;
    /* one update's estimate is noisy: S moves at most by a factor of two per update */
    if (next > 2.0 * (double)s->batch)
        next = 2.0 * (double)s->batch;
    if (next < 0.5 * (double)s->batch)
        next = 0.5 * (double)s->batch;
    if (!(next >= (double)s->config.batch_min))
        next = (double)s->config.batch_min;
    if (next > (double)s->config.batch_max)
        next = (double)s->config.batch_max;
    return (int64_t)llround(next);
}

static pymf_status draw_into(const pymf_sibm *s, uint32_t stream, int64_t t, int64_t n,
                             int64_t *rows, int64_t *cols, double *x, double *w_row,
                             double *w_col, double *w_z, pymf_error *err)
{
    int failed = 0;
    const int nt = threads(s);
#pragma omp parallel for schedule(static) num_threads(nt) if(n >= SIBM_PARALLEL_MIN) reduction(| : failed)
    for (int64_t k = 0; k < n; ++k) {
        int64_t i = 0, j = 0;
        int one = 0;
        if (draw_entry(s, stream, t, k, &i, &j, &one) != 0) {
            failed = 1;
            continue;
        }
        const double p = draw_probability(s, i, j, one);
        if (rows) rows[k] = i;
        if (cols) cols[k] = j;
        if (x) x[k] = one;
        if (w_row) w_row[k] = s->p_row[i] / p;
        if (w_col) w_col[k] = s->p_col[j] / p;
        if (w_z) w_z[k] = 1.0 / p;
    }
    if (failed)
        return pymf_fail(err, PYMF_ENUMERIC, "update %lld: a zero could not be drawn in %d "
                         "rejection attempts", (long long)t, SIBM_MAX_ATTEMPTS);
    return PYMF_OK;
}

pymf_status pymf_sibm_draw(const pymf_sibm *s, uint32_t stream, int64_t t, int64_t n,
                           int64_t *rows, int64_t *cols, double *x, double *w_row,
                           double *w_col, double *w_z, pymf_error *err)
{
    pymf_error_clear(err);
    if (n < 0)
        return pymf_fail(err, PYMF_EINVAL, "the number of draws must be >= 0");
    return draw_into(s, stream, t, n, rows, cols, x, w_row, w_col, w_z, err);
}

pymf_status pymf_sibm_run(pymf_sibm *s, int64_t n_updates, int64_t *batch_sizes, pymf_error *err)
{
    pymf_error_clear(err);
    for (int64_t u = 0; u < n_updates; ++u) {
        const int64_t n = s->batch, t = s->t + 1;
        if (reserve(s, n) != 0)
            return pymf_fail(err, PYMF_ENOMEM, "out of memory for a minibatch of %lld draws",
                             (long long)n);
        pymf_status status = draw_into(s, PYMF_STREAM_SIBM_DRAW, t, n, s->rows, s->cols, s->x,
                                       s->w_row, s->w_col, s->w_z, err);
        if (status == PYMF_OK)
            status = update_scratch(s, n, 0.0, err);
        if (status != PYMF_OK) {
            if (status == PYMF_EDIVERGED) {
                err->iteration = t;
                pymf_fail(err, PYMF_EDIVERGED, "update %lld diverged: %s", (long long)t,
                          err->message);
            }
            return status;
        }
        if (batch_sizes)
            batch_sizes[u] = n;
        if (s->config.batch_size == 0)
            s->batch = next_batch(s);
        s->t = t;
    }
    return PYMF_OK;
}

pymf_status pymf_sibm_update_entries(pymf_sibm *s, int64_t n, const int64_t *rows,
                                     const int64_t *cols, const double *x, const double *w_row,
                                     const double *w_col, const double *w_z, double rho,
                                     pymf_error *err)
{
    pymf_error_clear(err);
    if (n <= 0)
        return pymf_fail(err, PYMF_EINVAL, "an update needs at least one entry");
    for (int64_t k = 0; k < n; ++k) {
        if (rows[k] < 0 || rows[k] >= s->X.n_rows || cols[k] < 0 || cols[k] >= s->X.n_cols)
            return pymf_fail(err, PYMF_EINVAL, "entry %lld is outside the matrix", (long long)k);
        if (!(w_row[k] > 0) || !(w_col[k] > 0) || !(w_z[k] > 0) || !isfinite(w_row[k]) ||
            !isfinite(w_col[k]) || !isfinite(w_z[k]))
            return pymf_fail(err, PYMF_EINVAL, "entry %lld: weights must be positive and finite",
                             (long long)k);
    }
    if (reserve(s, n) != 0)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for an update of %lld entries",
                         (long long)n);
    memcpy(s->rows, rows, (size_t)n * sizeof(int64_t));
    memcpy(s->cols, cols, (size_t)n * sizeof(int64_t));
    memcpy(s->x, x, (size_t)n * sizeof(double));
    memcpy(s->w_row, w_row, (size_t)n * sizeof(double));
    memcpy(s->w_col, w_col, (size_t)n * sizeof(double));
    memcpy(s->w_z, w_z, (size_t)n * sizeof(double));
    pymf_status status = update_scratch(s, n, rho, err);
    if (status == PYMF_OK && rho <= 0) {
        s->t += 1;
        if (s->config.batch_size == 0)
            s->batch = next_batch(s);
    }
    return status;
}

/* ---- batch VB ---- */


static pymf_status batch_sweep(pymf_sibm *s, int nt)
{
    const pymf_sibm_matrix *X = &s->X;
    const int64_t L = X->n_rows, M = X->n_cols;
    const int D = s->D;
    double *es = s->all_es, *vs = s->all_vs;
    /* fresh moments each sweep, so that rounding in the running updates never accumulates */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < M; ++j)
            entry_moments(s, i, j, &es[i * M + j], &vs[i * M + j]);
    /* z: row sums in parallel, then added in row order */
    double *row_a = s->seg_t1, *row_b = s->seg_t2; /* scratch of at least max(L, M) */
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < L; ++i) {
        double sa = 0.0, sb = 0.0;
        int64_t next = X->row_ptr[i];
        for (int64_t j = 0; j < M; ++j) {
            const double x = walk_row(X, i, &next, j);
            const double e = es[i * M + j], lam = jj_lambda(sqrt(vs[i * M + j] + e * e));
            sa += 2.0 * lam;
            sb += (x - 0.5) - 2.0 * lam * (e - s->mu_z);
        }
        row_a[i] = sa;
        row_b[i] = sb;
    }
    double sa = 0.0, sb = 0.0;
    for (int64_t i = 0; i < L; ++i) {
        sa += row_a[i];
        sb += row_b[i];
    }
    const double t1 = s->prior.mean_z / s->prior.var_z + sb, t2 = 1.0 / s->prior.var_z + sa;
    if (!isfinite(t1) || !isfinite(t2) || !(t2 > 0))
        return PYMF_EDIVERGED;
    const double mz_old = s->mu_z, vz_old = s->var_z;
    set_factor(&s->z[0], &s->z[1], &s->mu_z, &s->var_z, t1, t2);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < M; ++j) {
            es[i * M + j] += s->mu_z - mz_old;
            vs[i * M + j] += s->var_z - vz_old;
        }
    const double pu1 = s->prior.mean_u / s->prior.var_u, pu2 = 1.0 / s->prior.var_u;
    const double pv1 = s->prior.mean_v / s->prior.var_v, pv2 = 1.0 / s->prior.var_v;
    for (int d = 0; d < D; ++d) {
        int failed = 0;
        /* u_d: rows are independent given the rest, so each row updates and then moves its
         * own entries' moments */
#pragma omp parallel for schedule(static) num_threads(nt) reduction(| : failed)
        for (int64_t i = 0; i < L; ++i) {
            const int64_t a = i * D + d;
            double sa_i = 0.0, sb_i = 0.0;
            int64_t next = X->row_ptr[i];
            for (int64_t j = 0; j < M; ++j) {
                const double x = walk_row(X, i, &next, j);
                const double e = es[i * M + j], lam = jj_lambda(sqrt(vs[i * M + j] + e * e));
                const double m = s->mu_v[j * D + d], e2 = m * m + s->var_v[j * D + d];
                sa_i += 2.0 * lam * e2;
                sb_i += m * ((x - 0.5) - 2.0 * lam * (e - s->mu_u[a] * m));
            }
            const double n1 = pu1 + sb_i, n2 = pu2 + sa_i;
            if (!isfinite(n1) || !isfinite(n2) || !(n2 > 0)) {
                failed = 1;
                continue;
            }
            const double m_old = s->mu_u[a], v_old = s->var_u[a];
            set_factor(&s->u1[a], &s->u2[a], &s->mu_u[a], &s->var_u[a], n1, n2);
            for (int64_t j = 0; j < M; ++j) {
                const double mv = s->mu_v[j * D + d], vv = s->var_v[j * D + d];
                es[i * M + j] += (s->mu_u[a] - m_old) * mv;
                vs[i * M + j] += product_var(s->mu_u[a], s->var_u[a], mv, vv) -
                                 product_var(m_old, v_old, mv, vv);
            }
        }
        if (failed)
            return PYMF_EDIVERGED;
        /* v_d: tiles of columns; each column sums over the rows in row order */
        const int64_t n_tiles = (M + SIBM_TILE - 1) / SIBM_TILE;
#pragma omp parallel for schedule(dynamic, 1) num_threads(nt) reduction(| : failed)
        for (int64_t tile = 0; tile < n_tiles; ++tile) {
            const int64_t j0 = tile * SIBM_TILE, j1 = j0 + SIBM_TILE < M ? j0 + SIBM_TILE : M;
            double ta[SIBM_TILE] = {0}, tb[SIBM_TILE] = {0}, m_old[SIBM_TILE], v_old[SIBM_TILE];
            for (int64_t i = 0; i < L; ++i) {
                const double mu = s->mu_u[i * D + d], e2 = mu * mu + s->var_u[i * D + d];
                int64_t next = first_one_from(X, i, j0);
                for (int64_t j = j0; j < j1; ++j) {
                    const double x = walk_row(X, i, &next, j);
                    const double e = es[i * M + j], lam = jj_lambda(sqrt(vs[i * M + j] + e * e));
                    ta[j - j0] += 2.0 * lam * e2;
                    tb[j - j0] += mu * ((x - 0.5) - 2.0 * lam * (e - s->mu_v[j * D + d] * mu));
                }
            }
            for (int64_t j = j0; j < j1; ++j) {
                const int64_t b = j * D + d;
                const double n1 = pv1 + tb[j - j0], n2 = pv2 + ta[j - j0];
                m_old[j - j0] = s->mu_v[b];
                v_old[j - j0] = s->var_v[b];
                if (!isfinite(n1) || !isfinite(n2) || !(n2 > 0)) {
                    failed = 1;
                    continue;
                }
                set_factor(&s->v1[b], &s->v2[b], &s->mu_v[b], &s->var_v[b], n1, n2);
            }
            for (int64_t i = 0; i < L; ++i) {
                const double mu = s->mu_u[i * D + d], vu = s->var_u[i * D + d];
                for (int64_t j = j0; j < j1; ++j) {
                    const int64_t b = j * D + d;
                    es[i * M + j] += mu * (s->mu_v[b] - m_old[j - j0]);
                    vs[i * M + j] += product_var(mu, vu, s->mu_v[b], s->var_v[b]) -
                                     product_var(mu, vu, m_old[j - j0], v_old[j - j0]);
                }
            }
        }
        if (failed)
            return PYMF_EDIVERGED;
    }
    return PYMF_OK;
}

pymf_status pymf_sibm_batch_sweep(pymf_sibm *s, int64_t n_sweeps, pymf_error *err)
{
    pymf_error_clear(err);
    const int64_t L = s->X.n_rows, M = s->X.n_cols;
    if (s->all_es == NULL) {
        if ((double)L * (double)M * 16.0 > 9.0e18)
            return pymf_fail(err, PYMF_ENOMEM, "batch VB needs 16 L M bytes: too many");
        s->all_es = malloc((size_t)L * (size_t)M * sizeof(double));
        s->all_vs = malloc((size_t)L * (size_t)M * sizeof(double));
        if (s->all_es == NULL || s->all_vs == NULL) {
            free(s->all_es); free(s->all_vs);
            s->all_es = s->all_vs = NULL;
            return pymf_fail(err, PYMF_ENOMEM, "batch VB keeps E[s] and Var[s] of every entry: "
                             "%.3g GB for this %lld x %lld matrix could not be allocated",
                             16.0 * (double)L * (double)M / 1e9, (long long)L, (long long)M);
        }
    }
    const size_t nu = (size_t)L * (size_t)s->D, nv = (size_t)M * (size_t)s->D;
    if (s->mu_u == NULL) {
        s->mu_u = malloc(nu * sizeof(double)); s->var_u = malloc(nu * sizeof(double));
        s->mu_v = malloc(nv * sizeof(double)); s->var_v = malloc(nv * sizeof(double));
        if (!s->mu_u || !s->var_u || !s->mu_v || !s->var_v) {
            free(s->mu_u); free(s->var_u); free(s->mu_v); free(s->var_v);
            s->mu_u = s->var_u = s->mu_v = s->var_v = NULL;
            return pymf_fail(err, PYMF_ENOMEM, "out of memory for batch VB's factor moments");
        }
    }
    if (reserve(s, L > M ? L : M) != 0)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for batch VB's scratch");
    const int nt = threads(s);
    for (int64_t k = 0; k < n_sweeps; ++k) {
        /* the caches from the natural parameters, which set_state may have replaced */
        for (size_t a = 0; a < nu; ++a) {
            s->mu_u[a] = natural_mean(s->u1[a], s->u2[a]);
            s->var_u[a] = natural_var(s->u2[a]);
        }
        for (size_t b = 0; b < nv; ++b) {
            s->mu_v[b] = natural_mean(s->v1[b], s->v2[b]);
            s->var_v[b] = natural_var(s->v2[b]);
        }
        if (batch_sweep(s, nt) != PYMF_OK) {
            err->iteration = s->t + 1;
            return pymf_fail(err, PYMF_EDIVERGED, "batch VB sweep %lld diverged: a non-finite "
                             "target", (long long)(s->t + 1));
        }
        s->t += 1;
    }
    return PYMF_OK;
}

/* ---- the ELBO ---- */

static double kl_gaussian(double mu, double var, double mu0, double var0)
{
    const double dm = mu - mu0;
    return 0.5 * (log(var0 / var) + (var + dm * dm) / var0 - 1.0);
}

double pymf_sibm_kl(const pymf_sibm *s)
{
    const int64_t nu = s->X.n_rows * s->D, nv = s->X.n_cols * s->D;
    double kl = 0.0;
    for (int64_t k = 0; k < nu; ++k)
        kl += kl_gaussian(natural_mean(s->u1[k], s->u2[k]), natural_var(s->u2[k]),
                          s->prior.mean_u, s->prior.var_u);
    for (int64_t k = 0; k < nv; ++k)
        kl += kl_gaussian(natural_mean(s->v1[k], s->v2[k]), natural_var(s->v2[k]),
                          s->prior.mean_v, s->prior.var_v);
    return kl + kl_gaussian(s->mu_z, s->var_z, s->prior.mean_z, s->prior.var_z);
}

pymf_status pymf_sibm_elbo(const pymf_sibm *s, double *elbo, pymf_error *err)
{
    pymf_error_clear(err);
    const pymf_sibm_matrix *X = &s->X;
    const int64_t L = X->n_rows, M = X->n_cols;
    double *row_sum = malloc((size_t)L * sizeof(double));
    if (row_sum == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the ELBO");
    const int nt = threads(s);
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int64_t i = 0; i < L; ++i) {
        double sum = 0.0;
        int64_t next = X->row_ptr[i];
        for (int64_t j = 0; j < M; ++j) {
            const double x = walk_row(X, i, &next, j);
            double es, vs;
            entry_moments(s, i, j, &es, &vs);
            sum += bound_at_optimum(x, es, vs);
        }
        row_sum[i] = sum;
    }
    double total = 0.0;
    for (int64_t i = 0; i < L; ++i)
        total += row_sum[i];
    free(row_sum);
    *elbo = total - pymf_sibm_kl(s);
    return PYMF_OK;
}

pymf_status pymf_sibm_elbo_estimate(const pymf_sibm *s, int64_t t, int64_t n, double *elbo,
                                    pymf_error *err)
{
    pymf_error_clear(err);
    if (n <= 0)
        return pymf_fail(err, PYMF_EINVAL, "the ELBO estimate needs at least one draw");
    int64_t *rows = malloc((size_t)n * sizeof(int64_t)), *cols = malloc((size_t)n * sizeof(int64_t));
    double *x = malloc((size_t)n * sizeof(double)), *w = malloc((size_t)n * sizeof(double));
    if (!rows || !cols || !x || !w) {
        free(rows); free(cols); free(x); free(w);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the ELBO estimate");
    }
    pymf_status status = draw_into(s, PYMF_STREAM_SIBM_ELBO, t, n, rows, cols, x, NULL, NULL, w,
                                   err);
    if (status == PYMF_OK) {
        const int nt = threads(s);
#pragma omp parallel for schedule(static) num_threads(nt)
        for (int64_t k = 0; k < n; ++k) {
            double es, vs;
            entry_moments(s, rows[k], cols[k], &es, &vs);
            x[k] = w[k] * bound_at_optimum(x[k], es, vs);
        }
        double sum = 0.0;
        for (int64_t k = 0; k < n; ++k)
            sum += x[k];
        *elbo = sum / (double)n - pymf_sibm_kl(s);
    }
    free(rows); free(cols); free(x); free(w);
    return status;
}

void pymf_sibm_entry_moments(const pymf_sibm *s, int64_t n, const int64_t *rows,
                             const int64_t *cols, const double *x, double *mean, double *var,
                             double *f)
{
    for (int64_t k = 0; k < n; ++k) {
        double es, vs;
        entry_moments(s, rows[k], cols[k], &es, &vs);
        if (mean) mean[k] = es;
        if (var) var[k] = vs;
        if (f) f[k] = bound_at_optimum(x[k], es, vs);
    }
}
