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

/* Observed data in grid order. Dense: V is n_rows x n_cols, row-major, every entry observed.
 * Sparse: the entries of block (b, c) are [block_ptr[b*B + c], block_ptr[b*B + c + 1]),
 * sorted by row then column inside a block; rows/cols are grid positions. */
typedef struct {
    const pymf_grid *grid;
    int is_dense;
    double *V;
    int64_t nnz;
    int32_t *rows;
    int32_t *cols;
    double *vals;
    int64_t *block_ptr;
    int64_t n_observed; /* N: n_rows * n_cols (dense) or nnz (sparse) */
} pymf_blocked_data;

/* permute = 0: contiguous pieces; permute = 1: rows and columns shuffled by a GSL mt19937
 * stream seeded with `seed` (gsl_ran_shuffle of the rows, then of the columns). */
pymf_status pymf_grid_init(pymf_grid *grid, int64_t n_rows, int64_t n_cols, int n_blocks,
                           int permute, unsigned long seed, pymf_error *err);
void pymf_grid_free(pymf_grid *grid);

/* Copies V (original order, row-major) into grid order. */
pymf_status pymf_blocked_from_dense(pymf_blocked_data *data, const pymf_grid *grid,
                                    const double *V, pymf_error *err);
/* Buckets the entries (original indices, already validated: in range, no duplicates). */
pymf_status pymf_blocked_from_sparse(pymf_blocked_data *data, const pymf_grid *grid,
                                     int64_t nnz, const int64_t *rows, const int64_t *cols,
                                     const double *vals, pymf_error *err);
void pymf_blocked_free(pymf_blocked_data *data);

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
