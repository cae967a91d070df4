#include "pymf/blocks.h"

#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "pymf/rng.h"

static void cut_evenly(int64_t n, int pieces, int64_t *start)
{
    /* The first n % pieces pieces get one extra element. */
    const int64_t base = n / pieces, extra = n % pieces;
    start[0] = 0;
    for (int b = 0; b < pieces; ++b)
        start[b + 1] = start[b] + base + (b < extra ? 1 : 0);
}

void pymf_grid_free(pymf_grid *grid)
{
    if (grid == NULL)
        return;
    free(grid->row_start);
    free(grid->col_start);
    free(grid->row_of);
    free(grid->col_of);
    free(grid->row_pos);
    free(grid->col_pos);
    memset(grid, 0, sizeof(*grid));
}

pymf_status pymf_grid_init(pymf_grid *grid, int64_t n_rows, int64_t n_cols, int n_blocks,
                           int permute, unsigned long seed, pymf_error *err)
{
    memset(grid, 0, sizeof(*grid));
    pymf_gsl_quiet();
    if (n_rows <= 0 || n_cols <= 0)
        return pymf_fail(err, PYMF_EINVAL, "the matrix must have at least one row and one column");
    if (n_rows > INT32_MAX || n_cols > INT32_MAX)
        return pymf_fail(err, PYMF_EINVAL, "at most %d rows and columns are supported", INT32_MAX);
    if (n_blocks < 1)
        return pymf_fail(err, PYMF_EINVAL, "blocks must be >= 1, got %d", n_blocks);
    if (n_blocks > n_rows || n_blocks > n_cols)
        return pymf_fail(err, PYMF_EINVAL,
                         "blocks=%d is larger than the matrix (%lld x %lld): every row and "
                         "column piece needs at least one element",
                         n_blocks, (long long)n_rows, (long long)n_cols);
    grid->n_rows = n_rows;
    grid->n_cols = n_cols;
    grid->n_blocks = n_blocks;
    grid->row_start = malloc(sizeof(int64_t) * (size_t)(n_blocks + 1));
    grid->col_start = malloc(sizeof(int64_t) * (size_t)(n_blocks + 1));
    grid->row_of = malloc(sizeof(int64_t) * (size_t)n_rows);
    grid->col_of = malloc(sizeof(int64_t) * (size_t)n_cols);
    grid->row_pos = malloc(sizeof(int64_t) * (size_t)n_rows);
    grid->col_pos = malloc(sizeof(int64_t) * (size_t)n_cols);
    if (!grid->row_start || !grid->col_start || !grid->row_of || !grid->col_of ||
        !grid->row_pos || !grid->col_pos) {
        pymf_grid_free(grid);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory for the block grid");
    }
    cut_evenly(n_rows, n_blocks, grid->row_start);
    cut_evenly(n_cols, n_blocks, grid->col_start);
    for (int64_t i = 0; i < n_rows; ++i)
        grid->row_of[i] = i;
    for (int64_t j = 0; j < n_cols; ++j)
        grid->col_of[j] = j;
    if (permute) {
        gsl_rng *rng = gsl_rng_alloc(gsl_rng_mt19937);
        if (rng == NULL) {
            pymf_grid_free(grid);
            return pymf_fail(err, PYMF_ENOMEM, "out of memory for a GSL generator");
        }
        gsl_rng_set(rng, seed);
        gsl_ran_shuffle(rng, grid->row_of, (size_t)n_rows, sizeof(int64_t));
        gsl_ran_shuffle(rng, grid->col_of, (size_t)n_cols, sizeof(int64_t));
        gsl_rng_free(rng);
    }
    for (int64_t p = 0; p < n_rows; ++p)
        grid->row_pos[grid->row_of[p]] = p;
    for (int64_t p = 0; p < n_cols; ++p)
        grid->col_pos[grid->col_of[p]] = p;
    return PYMF_OK;
}

static int piece_of(const int64_t *start, int pieces, int64_t pos)
{
    int lo = 0, hi = pieces; /* start[lo] <= pos < start[hi] */
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (start[mid] <= pos)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void pymf_blocked_free(pymf_blocked_data *data)
{
    if (data == NULL)
        return;
    free(data->V);
    free(data->rows);
    free(data->cols);
    free(data->vals);
    free(data->block_ptr);
    memset(data, 0, sizeof(*data));
}

pymf_status pymf_blocked_from_dense(pymf_blocked_data *data, const pymf_grid *grid,
                                    const double *V, pymf_error *err)
{
    memset(data, 0, sizeof(*data));
    const int64_t I = grid->n_rows, J = grid->n_cols;
    data->grid = grid;
    data->is_dense = 1;
    data->n_observed = I * J;
    data->V = malloc(sizeof(double) * (size_t)(I * J));
    if (data->V == NULL)
        return pymf_fail(err, PYMF_ENOMEM, "out of memory copying a %lld x %lld matrix",
                         (long long)I, (long long)J);
    for (int64_t p = 0; p < I; ++p) {
        const double *src = V + grid->row_of[p] * J;
        double *dst = data->V + p * J;
        for (int64_t q = 0; q < J; ++q)
            dst[q] = src[grid->col_of[q]];
    }
    return PYMF_OK;
}

pymf_status pymf_blocked_from_sparse(pymf_blocked_data *data, const pymf_grid *grid,
                                     int64_t nnz, const int64_t *rows, const int64_t *cols,
                                     const double *vals, pymf_error *err)
{
    memset(data, 0, sizeof(*data));
    const int B = grid->n_blocks;
    data->grid = grid;
    data->is_dense = 0;
    data->nnz = nnz;
    data->n_observed = nnz;
    const size_t n = (size_t)(nnz > 0 ? nnz : 1);
    data->rows = malloc(sizeof(int32_t) * n);
    data->cols = malloc(sizeof(int32_t) * n);
    data->vals = malloc(sizeof(double) * n);
    data->block_ptr = calloc((size_t)B * B + 1, sizeof(int64_t));
    int64_t *block_of = malloc(sizeof(int64_t) * n);
    int64_t *order = malloc(sizeof(int64_t) * n);
    int64_t *row_count = calloc((size_t)grid->n_rows + 1, sizeof(int64_t));
    if (!data->rows || !data->cols || !data->vals || !data->block_ptr || !block_of || !order ||
        !row_count) {
        free(block_of);
        free(order);
        free(row_count);
        pymf_blocked_free(data);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory bucketing %lld entries", (long long)nnz);
    }
    /* Stable counting sorts by grid column, then grid row, then block: inside a block the
     * entries are in row-major grid order, exactly the order a dense block is visited in,
     * whatever the input order. (A sparse copy of a dense matrix then gives the very same
     * floating-point sums as the dense path; the MPI ring relies on it.) */
    int64_t *col_count = calloc((size_t)grid->n_cols + 1, sizeof(int64_t));
    int64_t *by_col = malloc(sizeof(int64_t) * n);
    if (col_count == NULL || by_col == NULL) {
        free(col_count);
        free(by_col);
        free(block_of);
        free(order);
        free(row_count);
        pymf_blocked_free(data);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory bucketing %lld entries", (long long)nnz);
    }
    for (int64_t e = 0; e < nnz; ++e)
        col_count[grid->col_pos[cols[e]] + 1]++;
    for (int64_t q = 0; q < grid->n_cols; ++q)
        col_count[q + 1] += col_count[q];
    for (int64_t e = 0; e < nnz; ++e)
        by_col[col_count[grid->col_pos[cols[e]]]++] = e;
    free(col_count);
    for (int64_t s = 0; s < nnz; ++s)
        row_count[grid->row_pos[rows[by_col[s]]] + 1]++;
    for (int64_t p = 0; p < grid->n_rows; ++p)
        row_count[p + 1] += row_count[p];
    int64_t *by_row = block_of; /* reuse as scratch */
    for (int64_t s = 0; s < nnz; ++s) {
        const int64_t e = by_col[s];
        by_row[row_count[grid->row_pos[rows[e]]]++] = e;
    }
    free(by_col);
    free(row_count);
    int64_t *counts = data->block_ptr;
    for (int64_t s = 0; s < nnz; ++s) {
        const int64_t e = by_row[s];
        const int b = piece_of(grid->row_start, B, grid->row_pos[rows[e]]);
        const int c = piece_of(grid->col_start, B, grid->col_pos[cols[e]]);
        order[s] = (int64_t)b * B + c; /* block id of the s-th entry in row order */
        counts[order[s] + 1]++;
    }
    for (int64_t blk = 0; blk < (int64_t)B * B; ++blk)
        counts[blk + 1] += counts[blk];
    int64_t *cursor = malloc(sizeof(int64_t) * ((size_t)B * B));
    if (cursor == NULL) {
        free(block_of);
        free(order);
        pymf_blocked_free(data);
        return pymf_fail(err, PYMF_ENOMEM, "out of memory bucketing entries");
    }
    memcpy(cursor, counts, sizeof(int64_t) * ((size_t)B * B));
    for (int64_t s = 0; s < nnz; ++s) {
        const int64_t e = by_row[s];
        const int64_t dst = cursor[order[s]]++;
        data->rows[dst] = (int32_t)grid->row_pos[rows[e]];
        data->cols[dst] = (int32_t)grid->col_pos[cols[e]];
        data->vals[dst] = vals[e];
    }
    free(cursor);
    free(block_of);
    free(order);
    return PYMF_OK;
}

int64_t pymf_block_size(const pymf_blocked_data *data, int b, int c)
{
    const pymf_grid *g = data->grid;
    if (data->is_dense)
        return (g->row_start[b + 1] - g->row_start[b]) * (g->col_start[c + 1] - g->col_start[c]);
    const int64_t blk = (int64_t)b * g->n_blocks + c;
    return data->block_ptr[blk + 1] - data->block_ptr[blk];
}

int64_t pymf_part_size(const pymf_blocked_data *data, int part)
{
    int64_t total = 0;
    const int B = data->grid->n_blocks;
    for (int b = 0; b < B; ++b)
        total += pymf_block_size(data, b, pymf_part_column(B, part, b));
    return total;
}

int pymf_choose_part(pymf_part_order order, int n_blocks, const int64_t *part_sizes,
                     int64_t n_observed, uint64_t stream_seed, int64_t t, gsl_rng *rng)
{
    if (order == PYMF_PARTS_CYCLIC)
        return (int)((t - 1) % n_blocks);
    gsl_rng_set(rng, pymf_stream_seed(stream_seed, (uint64_t)t));
    const double target = gsl_rng_uniform(rng) * (double)n_observed;
    double cumulative = 0.0;
    for (int p = 0; p < n_blocks; ++p) {
        cumulative += (double)part_sizes[p];
        if (target < cumulative)
            return p;
    }
    return n_blocks - 1;
}

pymf_status pymf_set_part_totals(int n_blocks, int64_t n_observed, const int64_t *part_sizes,
                                 int64_t *sizes, int64_t *total, pymf_error *err)
{
    int64_t sum = 0;
    for (int p = 0; p < n_blocks; ++p) {
        if (part_sizes[p] < 0)
            return pymf_fail(err, PYMF_EINVAL, "part sizes must be >= 0");
        sum += part_sizes[p];
    }
    if (n_observed <= 0 || sum != n_observed)
        return pymf_fail(err, PYMF_EINVAL, "the part sizes (sum %lld) must add up to N = %lld > 0",
                         (long long)sum, (long long)n_observed);
    memcpy(sizes, part_sizes, sizeof(int64_t) * (size_t)n_blocks);
    *total = n_observed;
    return PYMF_OK;
}
