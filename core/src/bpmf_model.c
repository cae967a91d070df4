/* BPMF, the model (pymf/bpmf.h): checks of the model, the data and a state; predictions,
 * squared residuals, the log posterior given the precisions and its gradient; the
 * conjugate Gibbs draw of the precisions. */
#include "pymf/bpmf.h"

#include <math.h>
#include <stdlib.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "bpmf_internal.h"
#include "pymf/eigen.h"
#include "pymf/linalg.h"

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

void pymf_bpmf_predict(const pymf_bpmf_model *model, const pymf_bpmf_params *p, int64_t n,
                       const int32_t *users, const int32_t *items, double *out, int n_threads)
{
    const int D = model->rank;
    if (n_threads <= 0)
        n_threads = pymf_default_threads();
    /* each output on its own (the same bits for any thread count); threads only where
     * there are enough pairs to pay for waking them (a test set of 10^6 pairs: 25 ms on one
     * thread, its rows' reads missing the caches) */
#pragma omp parallel for schedule(static) num_threads(n_threads) if (n >= 65536)
    for (int64_t e = 0; e < n; ++e) {
        const int64_t i = users[e], j = items[e];
        out[e] = model->mean_rating + pymf_dot_sequential(p->U + i * D, p->V + j * D, D) +
                 p->a[i] + p->b[j];
    }
}

/* The residual r - (rbar + u.v + a + b) of one training rating, as every sum here forms it */
static inline double rating_residual(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                     const pymf_bpmf_params *p, int64_t e)
{
    const int D = model->rank;
    const int64_t i = d->users[e], j = d->items[e];
    return d->ratings[e] - model->mean_rating -
           pymf_dot_sequential(p->U + i * D, p->V + j * D, D) - p->a[i] - p->b[j];
}

/* The residuals of ratings e .. e + 3, each formed exactly as rating_residual forms it (the
 * same bits). One rating's running sum is a chain of dependent additions, whose latency,
 * not the loads, bounded the passes over all ratings; four sums side by side overlap. */
static inline void rating_residuals4(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                     const pymf_bpmf_params *p, int64_t e, double out[4])
{
    const int D = model->rank;
    const double *u[4], *v[4];
    double dots[4] = {0.0, 0.0, 0.0, 0.0};
    for (int r = 0; r < 4; ++r) {
        u[r] = p->U + (int64_t)d->users[e + r] * D;
        v[r] = p->V + (int64_t)d->items[e + r] * D;
    }
    for (int k = 0; k < D; ++k)
        for (int r = 0; r < 4; ++r)
            dots[r] += u[r][k] * v[r][k];
    for (int r = 0; r < 4; ++r)
        out[r] = d->ratings[e + r] - model->mean_rating - dots[r] - p->a[d->users[e + r]] -
                 p->b[d->items[e + r]];
}

int pymf_bpmf_sq_errors(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                        const pymf_bpmf_params *p, int n_sets, double *out, int n_threads)
{
    const int n_blocks = d->n_row_blocks * d->n_col_blocks;
    const int n_tasks = n_sets * n_blocks;
    double *partial = malloc((size_t)(n_tasks > 0 ? n_tasks : 1) * sizeof *partial);
    if (partial == NULL) {
        for (int c = 0; c < n_sets; ++c)
            out[c] = NAN;
        return 0;
    }
    if (n_threads <= 0)
        n_threads = pymf_default_threads();
    /* one partial sum per (set, block), each set's added in block order: the same bits for
     * any thread count and however many sets share the pass (the sets' blocks together
     * balance the threads better than one set's few blocks; DSGLD's 4 x 2 grid has 8) */
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int task = 0; task < n_tasks; ++task) {
        const int c = task / n_blocks, s = task % n_blocks;
        const int64_t end = d->block_ptr[s + 1];
        double sum = 0.0;
        int64_t e = d->block_ptr[s];
        /* four ratings at a time (rating_residuals4; eight in AVX-512 lanes, a transpose
         * of their products, measured no faster than one at a time) */
        for (; e + 4 <= end; e += 4) {
            double r[4];
            rating_residuals4(model, d, &p[c], e, r);
            for (int q = 0; q < 4; ++q)
                sum += r[q] * r[q];
        }
        for (; e < end; ++e) {
            const double r = rating_residual(model, d, &p[c], e);
            sum += r * r;
        }
        partial[task] = sum;
    }
    for (int c = 0; c < n_sets; ++c) {
        double total = 0.0;
        for (int s = 0; s < n_blocks; ++s)
            total += partial[c * n_blocks + s];
        out[c] = total;
    }
    free(partial);
    return 1;
}

double pymf_bpmf_sq_error(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                          const pymf_bpmf_params *p, int n_threads)
{
    double out;
    pymf_bpmf_sq_errors(model, d, p, 1, &out, n_threads);
    return out;
}

/* A row's Gram matrix is summed from panels of its ratings' x = (other side's factors,
 * last) gathered into a buffer, GRAM_PANEL rows of GRAM_STRIDE(E) doubles (E = D + 1 values,
 * then zeros to a whole number of GRAM_LANES-double vectors), into an accumulator of E x stride
 * doubles held in registers a tile at a time. */
#define GRAM_PANEL 128
/* 4 doubles, one AVX2 register: 8-wide vectors spilled their accumulators on a CPU without
 * AVX-512 (an AMD EPYC: 6x slower than the scalar code); the AVX-512 clone runs the same
 * 4-wide tiles */
#define GRAM_LANES 4
#define GRAM_STRIDE(E) (((E) + GRAM_LANES - 1) / GRAM_LANES * GRAM_LANES)

typedef double gram_vec __attribute__((vector_size(8 * GRAM_LANES)));
typedef double gram_vec_unaligned __attribute__((vector_size(8 * GRAM_LANES), aligned(8),
                                                 may_alias));
#define GRAM_AT(p) (*(gram_vec_unaligned *)(p))

/* rows k0 .. k0 + 3 and vectors q0 .. q0 + NQ - 1 of the accumulator G (row stride `stride`)
 * += sum over s < n (ascending) of X[s][k] X[s][l]: each product rounded, then added (no
 * fused multiply-add: -std=c99 turns contraction off, and the vector lanes are different
 * columns l, never terms of one sum), so every element gets the bits of adding x_k x_l
 * rating by rating. Always inlined with a literal NQ (at most 2), so the 4 NQ accumulators
 * are registers (with x's NQ vectors and a broadcast, 11 of AVX2's 16). */
static inline __attribute__((always_inline)) void gram_tile(int NQ, int k0, int q0, int stride,
                                                            int n, const double *X, double *G)
{
    gram_vec acc[4][2];
    for (int r = 0; r < 4; ++r)
        for (int q = 0; q < NQ; ++q)
            acc[r][q] = GRAM_AT(G + (k0 + r) * stride + GRAM_LANES * (q0 + q));
    for (int s = 0; s < n; ++s) {
        const double *x = X + (size_t)s * (size_t)stride;
        gram_vec xv[2];
        for (int q = 0; q < NQ; ++q)
            xv[q] = GRAM_AT(x + GRAM_LANES * (q0 + q));
        for (int r = 0; r < 4; ++r) {
            const double x_k = x[k0 + r];
            const gram_vec xk = {x_k, x_k, x_k, x_k};
            for (int q = 0; q < NQ; ++q)
                acc[r][q] = acc[r][q] + xk * xv[q];
        }
    }
    for (int r = 0; r < 4; ++r)
        for (int q = 0; q < NQ; ++q)
            GRAM_AT(G + (k0 + r) * stride + GRAM_LANES * (q0 + q)) = acc[r][q];
}

/* G += sum over the panel's n rows x_s of x_s x_s^T, for the elements l >= k of G's first E
 * rows (and some left of the diagonal in its vectors, and rows up to a multiple of 4 from
 * the padding's zeros: computed, never read). G has stride^2 doubles. */
PYMF_VECTOR_CLONES
static void gram_panel(int E, int stride, int n, const double *X, double *G)
{
    const int n_vec = stride / GRAM_LANES;
    for (int k0 = 0; k0 < E; k0 += 4) {
        int q0 = k0 / GRAM_LANES;
        for (; q0 + 2 <= n_vec; q0 += 2)
            gram_tile(2, k0, q0, stride, n, X, G);
        if (q0 < n_vec)
            gram_tile(1, k0, q0, stride, n, X, G);
    }
}

/* H (E x E) = the sum over the listed ratings (ascending) of x x^T, x = (the other side's
 * factor row others[t], last): the bits of adding each rating's terms in turn. With diag
 * (not NULL): diag = H's diagonal and, in H's place, its correlation matrix R[a][b] =
 * (H[a][b] r_a) r_b, r = 1 / sqrt(diag) where diag > 0, else 0: NumPy's H * r[:, None] *
 * r[None, :], rounded as it rounds, both triangles (which may differ in the last bit). X and
 * G are the caller's buffers (GRAM_PANEL x stride doubles, zero in the columns from E on,
 * and stride x stride doubles). */
static void row_gram_of(int D, double last, const double *factors, const int32_t *others,
                        int64_t n, double *X, double *G, double *H, double *diag)
{
    const int E = D + 1, stride = GRAM_STRIDE(E);
    for (int k = 0; k < stride * stride; ++k)
        G[k] = 0.0;
    for (int64_t t0 = 0; t0 < n; t0 += GRAM_PANEL) {
        const int m = (int)(n - t0 < GRAM_PANEL ? n - t0 : GRAM_PANEL);
        for (int s = 0; s < m; ++s) {
            double *x = X + (size_t)s * (size_t)stride;
            const double *f = factors + (int64_t)others[t0 + s] * D;
            for (int k = 0; k < D; ++k)
                x[k] = f[k];
            x[D] = last; /* x[E .. stride) stay the zeros the buffer was allocated with */
        }
        gram_panel(E, stride, m, X, G);
    }
    if (diag == NULL) {
        for (int k = 0; k < E; ++k)
            for (int l = k; l < E; ++l)
                H[k * E + l] = H[l * E + k] = G[k * stride + l];
        return;
    }
    double *inv_root = X; /* E <= GRAM_PANEL stride: the panel is done with */
    for (int k = 0; k < E; ++k) {
        const double h = G[k * stride + k];
        diag[k] = h;
        inv_root[k] = h > 0.0 ? 1.0 / sqrt(h) : 0.0;
    }
    for (int a = 0; a < E; ++a)
        for (int b = 0; b < E; ++b) {
            const double h = a <= b ? G[a * stride + b] : G[b * stride + a];
            H[a * E + b] = (h * inv_root[a]) * inv_root[b];
        }
}

/* Blocks are stored row stripe by row stripe (block p Q + q), so the ratings of the users of
 * stripe p lie in blocks (p, 0), ..., (p, Q - 1) in that order, and those of the items of
 * stripe q in blocks (0, q), ..., (P - 1, q): a task per stripe that visits these blocks in
 * turn visits its rows' ratings in the layout's order, and no two tasks write the same row.
 * Tasks 0..P-1 are the users' stripes, P..P+Q-1 the items'. */
typedef struct {
    int users_side;
    int64_t first, end;              /* the stripe's rows */
    int first_block, block_step, n_blocks;  /* its blocks: first_block + o block_step */
} stripe_task;

static stripe_task stripe_task_of(const pymf_bpmf_data *d, int task)
{
    const int P = d->n_row_blocks, Q = d->n_col_blocks;
    stripe_task t;
    t.users_side = task < P;
    const int stripe = t.users_side ? task : task - P;
    t.first = t.users_side ? d->row_start[stripe] : d->col_start[stripe];
    t.end = t.users_side ? d->row_start[stripe + 1] : d->col_start[stripe + 1];
    t.first_block = t.users_side ? stripe * Q : stripe;
    t.block_step = t.users_side ? 1 : Q;
    t.n_blocks = t.users_side ? Q : P;
    return t;
}

/* Rating e's row on the stripe's side, and the other side's factor row it pairs with */
static inline int64_t stripe_row(const stripe_task *st, const pymf_bpmf_data *d, int64_t e)
{
    return st->users_side ? d->users[e] : d->items[e];
}

static inline const double *stripe_other(const stripe_task *st, const pymf_bpmf_data *d,
                                         const pymf_bpmf_params *p, int D, int64_t e)
{
    return st->users_side ? p->V + (int64_t)d->items[e] * D : p->U + (int64_t)d->users[e] * D;
}

/* fn(stripe, ctx) for every stripe task on n_threads OpenMP threads (<= 0: the default),
 * one task at a time per thread: the same bits for any thread count where each task writes
 * only its own rows */
typedef void (*stripe_fn)(const stripe_task *st, void *ctx);

static void for_each_stripe(const pymf_bpmf_data *d, int n_threads, stripe_fn fn, void *ctx)
{
    const int n_tasks = d->n_row_blocks + d->n_col_blocks;
    if (n_threads <= 0)
        n_threads = pymf_default_threads();
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int task = 0; task < n_tasks; ++task) {
        const stripe_task st = stripe_task_of(d, task);
        fn(&st, ctx);
    }
}

typedef struct {
    const pymf_bpmf_model *model;
    const pymf_bpmf_data *d;
    const pymf_bpmf_params *p;
    double *own[2], *own_bias[2]; /* [0] items' side, [1] users' (row_gram: H_item, H_user;
                                   * own_bias: the diagonals of row_correlations, or NULL) */
    int out_of_memory;            /* row_gram: a stripe could not list its ratings by row */
} stripe_context;

/* A stripe's ratings listed by row: row i (of the stripe) pairs with the other side's rows
 * others[i ? start[i - 1] : 0 .. start[i]), in the layout's order. Adding each rating's
 * terms to its row's matrix as the blocks list them touches a different row's (D + 1)^2
 * doubles at random for every rating, which misses the cache and is bound by its loads and
 * stores; so the ratings are first listed by row (a counting sort over the stripe's blocks
 * in turn, stable, so each row's list keeps the layout's order) and each row's matrix is
 * then summed whole, in register tiles (row_gram_of): the same additions in the same order,
 * so the same bits. 4 bytes a rating and 8 a row; 0 where they cannot be had. */
typedef struct {
    int64_t *start;
    int32_t *others;
} row_lists;

static int list_stripe_rows(const stripe_task *st, const pymf_bpmf_data *d, row_lists *lists)
{
    const int64_t n_rows = st->end - st->first;
    const int32_t *other_of = st->users_side ? d->items : d->users;
    int64_t n_ratings = 0;
    for (int o = 0; o < st->n_blocks; ++o) {
        const int s = st->first_block + o * st->block_step;
        n_ratings += d->block_ptr[s + 1] - d->block_ptr[s];
    }
    int64_t *start = calloc((size_t)n_rows + 1, sizeof *start);
    int32_t *others = malloc((size_t)(n_ratings > 0 ? n_ratings : 1) * sizeof *others);
    if (start == NULL || others == NULL) {
        free(start);
        free(others);
        return 0;
    }
    for (int o = 0; o < st->n_blocks; ++o) {
        const int s = st->first_block + o * st->block_step;
        for (int64_t e = d->block_ptr[s]; e < d->block_ptr[s + 1]; ++e)
            ++start[stripe_row(st, d, e) - st->first + 1];
    }
    for (int64_t i = 0; i < n_rows; ++i)
        start[i + 1] += start[i];
    /* start[i] serves as row i's cursor while filling; afterwards it is row i + 1's start */
    for (int o = 0; o < st->n_blocks; ++o) {
        const int s = st->first_block + o * st->block_step;
        for (int64_t e = d->block_ptr[s]; e < d->block_ptr[s + 1]; ++e)
            others[start[stripe_row(st, d, e) - st->first]++] = other_of[e];
    }
    lists->start = start;
    lists->others = others;
    return 1;
}

static void free_row_lists(row_lists *lists)
{
    free(lists->start);
    free(lists->others);
    lists->start = NULL;
    lists->others = NULL;
}

/* row_gram_of's two buffers: GRAM_PANEL x stride doubles (zero in the columns from E on)
 * and stride x stride; NULL if out of memory */
static double *gram_buffers(int E)
{
    const int stride = GRAM_STRIDE(E);
    return calloc((size_t)stride * (GRAM_PANEL + (size_t)stride), sizeof(double));
}

/* Each row of the stripe summed whole from its list (row_gram_of, buffers from
 * gram_buffers): its Gram matrix into H + (first + i) E^2, or with diag its diagonal into
 * diag + (first + i) E and its correlation matrix into H, which then advances by h_step
 * doubles a row (E^2 to keep every row's, 0 to reuse one matrix); with rho also the
 * matrix's largest eigenvalue into rho[first + i] (work: PYMF_LARGEST_EIGENVALUE_WORK(E)) */
static void sum_stripe_rows(int D, double last, const double *other_factors,
                            const stripe_task *st, const row_lists *lists, double *buffers,
                            double *H, size_t h_step, double *diag, double *rho, double *work)
{
    const int E = D + 1, stride = GRAM_STRIDE(E);
    for (int64_t i = 0; i < st->end - st->first; ++i) {
        const int64_t from = i ? lists->start[i - 1] : 0, row = st->first + i;
        double *Hi = H + (size_t)row * h_step;
        row_gram_of(D, last, other_factors, lists->others + from, lists->start[i] - from,
                    buffers, buffers + (size_t)GRAM_PANEL * (size_t)stride, Hi,
                    diag == NULL ? NULL : diag + row * E);
        if (rho != NULL)
            rho[row] = pymf_largest_eigenvalue(E, Hi, work);
    }
}

/* one stripe's Gram matrices (pymf_bpmf_row_gram) or diagonals and correlation matrices
 * (pymf_bpmf_row_correlations) */
static void row_gram_stripe(const stripe_task *st, void *ctx)
{
    stripe_context *c = ctx;
    const int E = c->model->rank + 1;
    row_lists lists;
    double *buffers = gram_buffers(E);
    if (buffers == NULL || !list_stripe_rows(st, c->d, &lists)) {
        free(buffers);
#pragma omp atomic write
        c->out_of_memory = 1;
        return;
    }
    sum_stripe_rows(c->model->rank, c->model->use_bias ? 1.0 : 0.0,
                    st->users_side ? c->p->V : c->p->U, st, &lists, buffers,
                    c->own[st->users_side], (size_t)E * (size_t)E,
                    c->own_bias[st->users_side], NULL, NULL);
    free_row_lists(&lists);
    free(buffers);
}

int pymf_bpmf_row_gram(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                       const pymf_bpmf_params *p, double *H_user, double *H_item,
                       int n_threads)
{
    stripe_context c = {model, d, p, {H_item, H_user}, {NULL, NULL}, 0};
    for_each_stripe(d, n_threads, row_gram_stripe, &c);
    return !c.out_of_memory;
}

int pymf_bpmf_row_correlations(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                               const pymf_bpmf_params *p, double *diag_user, double *R_user,
                               double *diag_item, double *R_item, int n_threads)
{
    stripe_context c = {model, d, p, {R_item, R_user}, {diag_item, diag_user}, 0};
    for_each_stripe(d, n_threads, row_gram_stripe, &c);
    return !c.out_of_memory;
}

int pymf_bpmf_row_curvatures(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                             const pymf_bpmf_params *p, int n_sets, double *diag_user,
                             double *rho_user, double *diag_item, double *rho_item,
                             int n_threads)
{
    const int n_stripes = d->n_row_blocks + d->n_col_blocks;
    const int D = model->rank, E = D + 1;
    const double last = model->use_bias ? 1.0 : 0.0;
    row_lists *lists = calloc((size_t)(n_stripes > 0 ? n_stripes : 1), sizeof *lists);
    if (lists == NULL)
        return 0;
    if (n_threads <= 0)
        n_threads = pymf_default_threads();
    int out_of_memory = 0;
    /* every stripe's lists once, for all the sets */
#pragma omp parallel for schedule(dynamic, 1) num_threads(n_threads)
    for (int task = 0; task < n_stripes; ++task) {
        const stripe_task st = stripe_task_of(d, task);
        if (!list_stripe_rows(&st, d, &lists[task])) {
#pragma omp atomic write
            out_of_memory = 1;
        }
    }
    if (!out_of_memory) {
        /* then a task per (set, stripe), each writing its own rows of its own set */
#pragma omp parallel num_threads(n_threads)
        {
            double *buffers = gram_buffers(E);
            double *R = malloc((size_t)E * (size_t)E * sizeof *R);
            double *work = malloc((size_t)PYMF_LARGEST_EIGENVALUE_WORK(E) * sizeof *work);
            const int ok = buffers != NULL && R != NULL && work != NULL;
            if (!ok) {
#pragma omp atomic write
                out_of_memory = 1;
            }
#pragma omp for schedule(dynamic, 1)
            for (int job = 0; job < n_sets * n_stripes; ++job) {
                if (!ok)
                    continue;
                const int set = job / n_stripes, task = job % n_stripes;
                const stripe_task st = stripe_task_of(d, task);
                const int64_t n_rows_side = st.users_side ? d->n_users : d->n_items;
                sum_stripe_rows(D, last, st.users_side ? p[set].V : p[set].U, &st,
                                &lists[task], buffers, R, 0,
                                (st.users_side ? diag_user : diag_item) +
                                    (size_t)set * (size_t)n_rows_side * (size_t)E,
                                (st.users_side ? rho_user : rho_item) +
                                    (size_t)set * (size_t)n_rows_side,
                                work);
            }
            free(buffers);
            free(R);
            free(work);
        }
    }
    for (int task = 0; task < n_stripes; ++task)
        free_row_lists(&lists[task]);
    free(lists);
    return !out_of_memory;
}

double pymf_bpmf_log_posterior(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                               const pymf_bpmf_params *p, double *gU, double *gV, double *ga,
                               double *gb)
{
    const int D = model->rank;
    const double *lam_u = p->lambdas, *lam_v = p->lambdas + D;
    const double lam_a = p->lambdas[2 * D], lam_b = p->lambdas[2 * D + 1];
    const double tau = pymf_bpmf_current_tau(model, p->lambdas);
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
        const double r = rating_residual(model, d, p, e);
        lp -= 0.5 * tau * r * r;
        const double w = tau * r;
        if (gU != NULL)
            pymf_axpy(D, w, v, gU + i * D);
        if (gV != NULL)
            pymf_axpy(D, w, u, gV + j * D);
        if (model->use_bias) {
            if (ga != NULL)
                ga[i] += w;
            if (gb != NULL)
                gb[j] += w;
        }
    }
    return lp;
}

/* one stripe's rows of the gradient (pymf_bpmf_log_posterior_gradient) */
static void gradient_stripe(const stripe_task *st, void *ctx)
{
    const stripe_context *c = ctx;
    const pymf_bpmf_params *p = c->p;
    const int D = c->model->rank, users_side = st->users_side;
    const double tau = pymf_bpmf_current_tau(c->model, p->lambdas);
    const double *lam = users_side ? p->lambdas : p->lambdas + D;
    const double lam_bias = p->lambdas[users_side ? 2 * D : 2 * D + 1];
    const double *own = users_side ? p->U : p->V;
    const double *own_bias = users_side ? p->a : p->b;
    double *g = c->own[users_side], *g_bias = c->own_bias[users_side];
    for (int64_t i = st->first; i < st->end; ++i) {
        for (int k = 0; k < D; ++k)
            g[i * D + k] = -lam[k] * own[i * D + k];
        g_bias[i] = c->model->use_bias ? -lam_bias * own_bias[i] : 0.0;
    }
    for (int o = 0; o < st->n_blocks; ++o) {
        const int s = st->first_block + o * st->block_step;
        const int64_t block_end = c->d->block_ptr[s + 1];
        int64_t e = c->d->block_ptr[s];
        /* four ratings at a time (rating_residuals4); where all four are one row's (the
         * users' stripes list a user's ratings together), their terms are added to the
         * row's gradient in order in registers, not through memory four times */
        for (; e + 4 <= block_end; e += 4) {
            double w[4];
            int64_t rows[4];
            const double *other[4];
            rating_residuals4(c->model, c->d, p, e, w);
            for (int r = 0; r < 4; ++r) {
                w[r] *= tau;
                rows[r] = stripe_row(st, c->d, e + r);
                other[r] = stripe_other(st, c->d, p, D, e + r);
            }
            if (rows[0] == rows[1] && rows[1] == rows[2] && rows[2] == rows[3]) {
                double *gi = g + rows[0] * D;
                for (int k = 0; k < D; ++k) {
                    double t = gi[k];
                    t += w[0] * other[0][k];
                    t += w[1] * other[1][k];
                    t += w[2] * other[2][k];
                    t += w[3] * other[3][k];
                    gi[k] = t;
                }
                if (c->model->use_bias)
                    g_bias[rows[0]] = g_bias[rows[0]] + w[0] + w[1] + w[2] + w[3];
            } else {
                for (int r = 0; r < 4; ++r) {
                    pymf_axpy(D, w[r], other[r], g + rows[r] * D);
                    if (c->model->use_bias)
                        g_bias[rows[r]] += w[r];
                }
            }
        }
        for (; e < block_end; ++e) {
            const double w = tau * rating_residual(c->model, c->d, p, e);
            const int64_t i = stripe_row(st, c->d, e);
            pymf_axpy(D, w, stripe_other(st, c->d, p, D, e), g + i * D);
            if (c->model->use_bias)
                g_bias[i] += w;
        }
    }
}

void pymf_bpmf_log_posterior_gradient(const pymf_bpmf_model *model, const pymf_bpmf_data *d,
                                      const pymf_bpmf_params *p, double *gU, double *gV,
                                      double *ga, double *gb, int n_threads)
{
    /* A stripe's rows get their prior term, then their ratings' terms in the layout's
     * order, which is the order of pymf_bpmf_log_posterior's one pass over all blocks: the
     * same bits for any thread count. Both of a rating's stripes form its residual: a
     * buffer of them (8 bytes a rating) measured no faster at 10^7 ratings on 2 threads
     * (0.21 against 0.19 s; the one-pass function's 0.25-0.27 s). What did pay was letting
     * the residuals' dependent additions overlap (gradient_stripe, four ratings at a time);
     * prefetching the other side's rows eight ratings ahead measured no faster, so the
     * rows' loads are not what waits. */
    stripe_context c = {model, d, p, {gV, gU}, {gb, ga}};
    for_each_stripe(d, n_threads, gradient_stripe, &c);
}

void pymf_bpmf_draw_precisions(const pymf_bpmf_model *model, int64_t n_users, int64_t n_items,
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

void pymf_bpmf_draw_tau(const pymf_bpmf_model *model, int64_t n_ratings, double sq_error,
                        pymf_bpmf_params *p, gsl_rng *rng)
{
    if (!model->sample_tau)
        return;
    p->lambdas[PYMF_BPMF_TAU(model->rank)] = gsl_ran_gamma(
        rng, model->alpha0 + 0.5 * (double)n_ratings, 1.0 / (model->beta0 + 0.5 * sq_error));
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
    pymf_bpmf_draw_precisions(model, n_users, n_items, p, rng);
    gsl_rng_free(rng);
    return PYMF_OK;
}
