/* posix_memalign and madvise, which -std=c99 alone does not declare */
#define _DEFAULT_SOURCE
#include "pymf/blocks.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <gsl/gsl_randist.h>
#include <gsl/gsl_rng.h>

#include "pymf/rng.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

static void cut_evenly(int64_t n, int pieces, int64_t *start)
{
    /* The first n % pieces pieces get one extra element. */
    const int64_t base = n / pieces, extra = n % pieces;
    start[0] = 0;
    for (int b = 0; b < pieces; ++b)
        start[b + 1] = start[b] + base + (b < extra ? 1 : 0);
}

/* Room for n doubles of a dense matrix, freed by free(). A block of it is read row by row,
 * each row a whole row of V (J doubles) after the last: with 4 KB pages every row of a
 * block at J = 1,024 lies on a page of its own, and reading a block misses the TLB once per
 * row. Where Linux has transparent huge pages on request (madvise), a matrix of 2 MB or more
 * asks for 2 MB pages, which hold 256 such rows; elsewhere, or when refused, the pages stay
 * as they were. Where the values lie changes no computed value. */
static double *alloc_dense(size_t n)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const size_t huge = (size_t)2 << 20, bytes = n * sizeof(double);
    if (bytes >= huge) {
        /* whole huge pages, so that the request covers this matrix and nothing else */
        const size_t rounded = (bytes + huge - 1) / huge * huge;
        void *p = NULL;
        if (posix_memalign(&p, huge, rounded) != 0)
            return NULL;
        (void)madvise(p, rounded, MADV_HUGEPAGE);
        return p;
    }
#endif
    return malloc(n * sizeof(double));
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

void pymf_blocked_free(pymf_blocked_data *data)
{
    if (data == NULL)
        return;
    free(data->V);
    free(data->index);
    free(data->row_idx);
    free(data->col_idx);
    free(data->vals_f32);
    free(data->vals_f64);
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
    data->V = alloc_dense((size_t)(I * J));
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

/* One entry of a row, keyed by its grid column, while the row is put in grid order. */
typedef struct {
    int32_t col;
    double val;
} row_entry;

/* Sorts one row's entries by grid column (distinct, 0 <= col < 2^col_bits), so any correct
 * sort gives the same order. Why not qsort: with permuted columns every row needs a sort,
 * and qsort's indirect comparisons took most of the layout's time (1.5 s of 1.7 s at 10M
 * ratings). Short rows get an insertion sort; longer ones a least-significant-digit radix
 * sort on 8-bit digits of the column (two passes for up to 65,536 columns), through
 * `scratch` (as long as the row). */
static void sort_row_by_grid_col(row_entry *row, row_entry *scratch, int64_t n, int col_bits)
{
    if (n <= 32) {
        for (int64_t k = 1; k < n; ++k) {
            const row_entry x = row[k];
            int64_t m = k;
            for (; m > 0 && row[m - 1].col > x.col; --m)
                row[m] = row[m - 1];
            row[m] = x;
        }
        return;
    }
    row_entry *from = row, *to = scratch;
    for (int shift = 0; shift < col_bits; shift += 8) {
        int64_t start[257] = {0};
        for (int64_t k = 0; k < n; ++k)
            start[(((uint32_t)from[k].col >> shift) & 0xFF) + 1]++;
        for (int d = 0; d < 256; ++d)
            start[d + 1] += start[d];
        for (int64_t k = 0; k < n; ++k)
            to[start[((uint32_t)from[k].col >> shift) & 0xFF]++] = from[k];
        row_entry *swap = from;
        from = to;
        to = swap;
    }
    if (from != row)
        memcpy(row, from, sizeof(row_entry) * (size_t)n);
}

static int rows_nondecreasing(int64_t nnz, const int64_t *rows)
{
    for (int64_t e = 1; e < nnz; ++e)
        if (rows[e] < rows[e - 1])
            return 0;
    return 1;
}

/* The bits that hold 0 .. x (x >= 0): 0 for x = 0. */
static int bits_for(int64_t x)
{
    int bits = 0;
    while (bits < 63 && (x >> bits) != 0)
        ++bits;
    return bits;
}

/* 1 when every value survives a round trip through float, so storing floats loses nothing.
 * The range test comes first: converting a double beyond FLT_MAX to float is undefined. */
static int all_float_exact(int64_t nnz, const double *vals)
{
    for (int64_t e = 0; e < nnz; ++e) {
        const double v = vals[e];
        if (!(fabs(v) <= FLT_MAX) || (double)(float)v != v)
            return 0;
    }
    return 1;
}

pymf_status pymf_blocked_from_sparse(pymf_blocked_data *data, const pymf_grid *grid,
                                     int64_t nnz, const int64_t *rows, const int64_t *cols,
                                     const double *vals, int formats, pymf_error *err)
{
    memset(data, 0, sizeof(*data));
    const int B = grid->n_blocks;
    const int64_t I = grid->n_rows, J = grid->n_cols;
    data->grid = grid;
    data->is_dense = 0;
    data->nnz = nnz;
    data->n_observed = nnz;
    const size_t n = (size_t)(nnz > 0 ? nnz : 1);
    pymf_status status = PYMF_ENOMEM; /* until the layout is written */
    /* The layout: block by block; inside a block, row-major grid order (grid row, then grid
     * column), exactly the order a dense block is visited in, whatever the input order (a
     * sparse copy of a dense matrix then gives the very same floating-point sums as the dense
     * path; the MPI ring relies on it). It is built straight into the output, walking the grid
     * rows in order and each row's entries in grid-column order, so the only scratch besides
     * O(I + J + B^2) counters is one row's entries, twice (the sort's scratch) -- and, for
     * input not sorted by row (Ratings always is), an index of the entries by row (8 bytes an
     * entry). */
    /* The format is chosen before the layout is allocated, so the set-up never holds two. */
    const int row_bits = bits_for(I - 1), col_bits = bits_for(J - 1);
    data->format = ((formats & PYMF_ENTRY_PACKED) && row_bits + col_bits <= 32
                        ? PYMF_ENTRY_PACKED : 0) |
                   ((formats & PYMF_ENTRY_FLOAT) && all_float_exact(nnz, vals)
                        ? PYMF_ENTRY_FLOAT : 0);
    data->col_bits = col_bits;
    const int packed = data->format & PYMF_ENTRY_PACKED, single = data->format & PYMF_ENTRY_FLOAT;
    int layout_ok;
    if (packed) {
        data->index = malloc(sizeof(uint32_t) * n);
        layout_ok = data->index != NULL;
    } else {
        data->row_idx = malloc(sizeof(int32_t) * n);
        data->col_idx = malloc(sizeof(int32_t) * n);
        layout_ok = data->row_idx != NULL && data->col_idx != NULL;
    }
    if (single) {
        data->vals_f32 = malloc(sizeof(float) * n);
        layout_ok &= data->vals_f32 != NULL;
    } else {
        data->vals_f64 = malloc(sizeof(double) * n);
        layout_ok &= data->vals_f64 != NULL;
    }
    data->block_ptr = calloc((size_t)B * B + 1, sizeof(int64_t));
    int32_t *piece_of_row = malloc(sizeof(int32_t) * (size_t)I);
    int32_t *piece_of_col = malloc(sizeof(int32_t) * (size_t)J);
    int64_t *row_ptr = calloc((size_t)I + 1, sizeof(int64_t)); /* by original row */
    int64_t *cursor = malloc(sizeof(int64_t) * ((size_t)B * B));
    const int sorted = rows_nondecreasing(nnz, rows);
    int64_t *by_row = sorted ? NULL : malloc(sizeof(int64_t) * n);
    row_entry *row = NULL;
    if (!layout_ok || !data->block_ptr || !piece_of_row ||
        !piece_of_col || !row_ptr || !cursor || (!sorted && !by_row))
        goto cleanup;
    for (int b = 0; b < B; ++b) {
        for (int64_t p = grid->row_start[b]; p < grid->row_start[b + 1]; ++p)
            piece_of_row[p] = b;
        for (int64_t q = grid->col_start[b]; q < grid->col_start[b + 1]; ++q)
            piece_of_col[q] = b;
    }
    int64_t *counts = data->block_ptr;
    for (int64_t e = 0; e < nnz; ++e) {
        row_ptr[rows[e] + 1]++;
        counts[(int64_t)piece_of_row[grid->row_pos[rows[e]]] * B +
               piece_of_col[grid->col_pos[cols[e]]] + 1]++;
    }
    int64_t longest = 0;
    for (int64_t r = 0; r < I; ++r) {
        longest = row_ptr[r + 1] > longest ? row_ptr[r + 1] : longest;
        row_ptr[r + 1] += row_ptr[r];
    }
    for (int64_t blk = 0; blk < (int64_t)B * B; ++blk)
        counts[blk + 1] += counts[blk];
    memcpy(cursor, counts, sizeof(int64_t) * ((size_t)B * B));
    if (!sorted) { /* a stable counting sort by row: by_row lists the entries row by row */
        int64_t *next = malloc(sizeof(int64_t) * (size_t)I);
        if (next == NULL)
            goto cleanup;
        memcpy(next, row_ptr, sizeof(int64_t) * (size_t)I);
        for (int64_t e = 0; e < nnz; ++e)
            by_row[next[rows[e]]++] = e;
        free(next);
    }
    row = malloc(sizeof(row_entry) * 2 * (size_t)(longest > 0 ? longest : 1));
    if (row == NULL)
        goto cleanup;
    row_entry *row_scratch = row + (longest > 0 ? longest : 1);
    for (int64_t p = 0; p < I; ++p) {
        const int64_t r = grid->row_of[p], first = row_ptr[r], length = row_ptr[r + 1] - first;
        int in_order = 1;
        for (int64_t k = 0; k < length; ++k) {
            const int64_t e = sorted ? first + k : by_row[first + k];
            row[k].col = (int32_t)grid->col_pos[cols[e]];
            row[k].val = vals[e];
            in_order &= k == 0 || row[k].col > row[k - 1].col;
        }
        if (!in_order) /* grid columns are distinct in a row: the order is total */
            sort_row_by_grid_col(row, row_scratch, length, col_bits);
        int64_t *cursor_of_piece = cursor + (int64_t)piece_of_row[p] * B;
        for (int64_t k = 0; k < length; ++k) {
            const int64_t dst = cursor_of_piece[piece_of_col[row[k].col]]++;
            if (packed)
                data->index[dst] = (uint32_t)(((uint64_t)p << col_bits) | (uint64_t)row[k].col);
            else {
                data->row_idx[dst] = (int32_t)p;
                data->col_idx[dst] = row[k].col;
            }
            if (single)
                data->vals_f32[dst] = (float)row[k].val;
            else
                data->vals_f64[dst] = row[k].val;
        }
    }
    status = PYMF_OK;
cleanup:
    free(row);
    free(by_row);
    free(cursor);
    free(row_ptr);
    free(piece_of_col);
    free(piece_of_row);
    if (status != PYMF_OK) {
        pymf_blocked_free(data);
        return pymf_fail(err, status, "out of memory bucketing %lld entries", (long long)nnz);
    }
    return PYMF_OK;
}

void pymf_blocked_entries(const pymf_blocked_data *data, int32_t *rows, int32_t *cols,
                          double *vals)
{
    for (int64_t e = 0; e < data->nnz; ++e) {
        rows[e] = (int32_t)pymf_entry_row(data, e);
        cols[e] = (int32_t)pymf_entry_col(data, e);
        vals[e] = pymf_entry_value(data, e);
    }
}

void pymf_blocked_line_counts(const pymf_blocked_data *data, int64_t *row_counts,
                              int64_t *col_counts)
{
    memset(row_counts, 0, sizeof(int64_t) * (size_t)data->grid->n_rows);
    memset(col_counts, 0, sizeof(int64_t) * (size_t)data->grid->n_cols);
    for (int64_t e = 0; e < data->nnz; ++e) {
        row_counts[pymf_entry_row(data, e)]++;
        col_counts[pymf_entry_col(data, e)]++;
    }
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
