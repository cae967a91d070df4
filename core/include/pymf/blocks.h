/*
 * pymf/blocks.h: the B x B block grid of parallel SGLD (PSGLD paper, section 3) and the
 * observed data laid out block by block.
 *
 * Rows and columns are each cut into B contiguous pieces of near-equal size, optionally
 * after a seeded random permutation (which balances the number of observed entries per
 * block on sparse data). All samplers work in "grid order": row position p of the grid is
 * original row grid->row_of[p]. A part p is the B blocks {(b, (b + p) mod B)}: no two of
 * them share a row piece or a column piece, so their updates commute and run in parallel.
 */
#ifndef PYMF_BLOCKS_H
#define PYMF_BLOCKS_H

#include "pymf/common.h"

#include <gsl/gsl_rng.h>

typedef struct {
    int64_t n_rows, n_cols;
    int n_blocks;
    int64_t *row_start; /* n_blocks + 1 boundaries of the row pieces, in grid order */
    int64_t *col_start;
    int64_t *row_of;    /* grid position -> original row */
    int64_t *col_of;
    int64_t *row_pos;   /* original row -> grid position */
    int64_t *col_pos;
} pymf_grid;

/* How a sparse layout stores its entries (bit flags of pymf_blocked_data.format). Each
 * choice is made only where it loses nothing, so every sampler reads the same numbers and
 * computes the same bits whichever format it gets:
 * - PYMF_ENTRY_PACKED: bits(n_rows - 1) + bits(n_cols - 1) <= 32, so one uint32_t holds
 *   (grid row << col_bits) | grid column; otherwise two int32 arrays.
 * - PYMF_ENTRY_FLOAT: every value is exactly a float ((double)(float)v == v: integer
 *   ratings, counts below 2^24, halves), so the values are floats, read back as the same
 *   doubles; otherwise doubles.
 * The index is over the whole data set, not per block: SGLD, SGD and Gibbs read entries
 * at random across it. */
enum { PYMF_ENTRY_PACKED = 1, PYMF_ENTRY_FLOAT = 2 };

/* Observed data in grid order. Dense: V is n_rows x n_cols, row-major, every entry observed.
 * Sparse: the entries of block (b, c) are [block_ptr[b*B + c], block_ptr[b*B + c + 1]),
 * sorted by row then column inside a block; rows and columns are grid positions, read
 * through pymf_entry_row / pymf_entry_col / pymf_entry_value (the arrays depend on format:
 * 4 to 16 bytes an entry). */
typedef struct {
    const pymf_grid *grid;
    int is_dense;
    double *V;
    int64_t nnz;
    int format;          /* sparse: PYMF_ENTRY_* bits */
    int col_bits;        /* PYMF_ENTRY_PACKED: the column's bits in index[] */
    uint32_t *index;     /* PYMF_ENTRY_PACKED: (row << col_bits) | col */
    int32_t *row_idx;    /* otherwise: the grid row ... */
    int32_t *col_idx;    /* ... and the grid column */
    float *vals_f32;     /* PYMF_ENTRY_FLOAT */
    double *vals_f64;    /* otherwise */
    int64_t *block_ptr;
    int64_t n_observed; /* N: n_rows * n_cols (dense) or nnz (sparse) */
} pymf_blocked_data;

/* Entry e of sparse data, for a format known at the call. Hot loops over a block pass a
 * constant format (PYMF_FOR_ENTRY_FORMAT below) so that, inlined, each is one load and no
 * branch; random reads (SGLD's and SGD's minibatches, Gibbs) use the plain forms. The shift
 * and mask are done in 64 bits: col_bits can be 32 (a single row). */
static inline int64_t pymf_entry_row_as(const pymf_blocked_data *d, int64_t e, int format)
{
    return (format & PYMF_ENTRY_PACKED) ? (int64_t)((uint64_t)d->index[e] >> d->col_bits)
                                        : (int64_t)d->row_idx[e];
}

static inline int64_t pymf_entry_col_as(const pymf_blocked_data *d, int64_t e, int format)
{
    return (format & PYMF_ENTRY_PACKED)
               ? (int64_t)((uint64_t)d->index[e] & (((uint64_t)1 << d->col_bits) - 1))
               : (int64_t)d->col_idx[e];
}

static inline double pymf_entry_value_as(const pymf_blocked_data *d, int64_t e, int format)
{
    return (format & PYMF_ENTRY_FLOAT) ? (double)d->vals_f32[e] : d->vals_f64[e];
}

static inline int64_t pymf_entry_row(const pymf_blocked_data *d, int64_t e)
{
    return pymf_entry_row_as(d, e, d->format);
}

static inline int64_t pymf_entry_col(const pymf_blocked_data *d, int64_t e)
{
    return pymf_entry_col_as(d, e, d->format);
}

static inline double pymf_entry_value(const pymf_blocked_data *d, int64_t e)
{
    return pymf_entry_value_as(d, e, d->format);
}

/* Runs the statements once, with `F` a constant equal to `format`: a loop written inside
 * is compiled once per format, so its body tests no format per entry. The statements must
 * not `break` out of their loop's enclosing switch: a `break` outside a loop of their own
 * leaves the switch. */
#define PYMF_FOR_ENTRY_FORMAT(format, F, ...)                                                   \
    switch (format) {                                                                          \
    case PYMF_ENTRY_PACKED | PYMF_ENTRY_FLOAT: {                                               \
        const int F = PYMF_ENTRY_PACKED | PYMF_ENTRY_FLOAT;                                    \
        __VA_ARGS__                                                                            \
    } break;                                                                                   \
    case PYMF_ENTRY_PACKED: {                                                                  \
        const int F = PYMF_ENTRY_PACKED;                                                       \
        __VA_ARGS__                                                                            \
    } break;                                                                                   \
    case PYMF_ENTRY_FLOAT: {                                                                   \
        const int F = PYMF_ENTRY_FLOAT;                                                        \
        __VA_ARGS__                                                                            \
    } break;                                                                                   \
    default: {                                                                                 \
        const int F = 0;                                                                       \
        __VA_ARGS__                                                                            \
    } break;                                                                                   \
    }

/* permute = 0: contiguous pieces; permute = 1: rows and columns shuffled by a GSL mt19937
 * stream seeded with `seed` (gsl_ran_shuffle of the rows, then of the columns). */
pymf_status pymf_grid_init(pymf_grid *grid, int64_t n_rows, int64_t n_cols, int n_blocks,
                           int permute, unsigned long seed, pymf_error *err);
void pymf_grid_free(pymf_grid *grid);

/* Copies V (original order, row-major) into grid order. */
pymf_status pymf_blocked_from_dense(pymf_blocked_data *data, const pymf_grid *grid,
                                    const double *V, pymf_error *err);
/* Lays out the entries (original indices, already validated: in range, no duplicates), in
 * the most compact lossless format, chosen before anything is allocated. `formats` is the
 * PYMF_ENTRY_* bits it may use, each only where lossless: PYMF_ENTRY_PACKED |
 * PYMF_ENTRY_FLOAT for runs; tests pass less to run the same data in a wider format. */
pymf_status pymf_blocked_from_sparse(pymf_blocked_data *data, const pymf_grid *grid,
                                     int64_t nnz, const int64_t *rows, const int64_t *cols,
                                     const double *vals, int formats, pymf_error *err);
void pymf_blocked_free(pymf_blocked_data *data);

/* Sparse data: every entry decoded, in layout order (each array nnz long). */
void pymf_blocked_entries(const pymf_blocked_data *data, int32_t *rows, int32_t *cols,
                          double *vals);
/* Sparse data: the number of entries in each grid row (n_rows) and grid column (n_cols). */
void pymf_blocked_line_counts(const pymf_blocked_data *data, int64_t *row_counts,
                              int64_t *col_counts);

/* Number of observed entries in block (b, c) and in part p. */
int64_t pymf_block_size(const pymf_blocked_data *data, int b, int c);
int64_t pymf_part_size(const pymf_blocked_data *data, int part);
typedef enum { PYMF_PARTS_CYCLIC = 0, PYMF_PARTS_RANDOM = 1 } pymf_part_order;

/* The part used at iteration t (1-based): cyclic (t - 1) mod B, or random with probability
 * |Pi_p| / N, drawn from `rng` (a GSL mt19937) reseeded with pymf_stream_seed(stream_seed, t).
 * part_sizes holds |Pi_p| for the B parts and n_observed is N. */
int pymf_choose_part(pymf_part_order order, int n_blocks, const int64_t *part_sizes,
                     int64_t n_observed, uint64_t stream_seed, int64_t t, gsl_rng *rng);

/* Distributed runs, whose data holds one row piece: checks that part_sizes (n_blocks
 * entries, each >= 0) add up to n_observed > 0, then copies them into sizes and *total
 * (nothing is written when they are refused). */
pymf_status pymf_set_part_totals(int n_blocks, int64_t n_observed, const int64_t *part_sizes,
                                 int64_t *sizes, int64_t *total, pymf_error *err);

/* Column piece that row piece b works on in part p. */
static inline int pymf_part_column(int n_blocks, int part, int b) { return (b + part) % n_blocks; }

#endif
