/* The dense block gradient's register tiles, written once for any vector width: tweedie.c
 * includes this file once per instance (no include guard, on purpose), after
 * dense_width.h, which defines
 *   DENSE_VEC            a vector of DENSE_LANES doubles (GCC vector extensions),
 *   DENSE_VEC_UNALIGNED  the same at any 8-byte aligned address,
 *   DENSE_LANE_INDEX     a vector of DENSE_LANES lane numbers (a shuffle's mask),
 *   DENSE_LANES          4 or 8,
 *   DENSE_MU_VECS        vectors in a row of a mu tile (MU_TILE_ROWS rows),
 *   DENSE_OUTS           gW / gHt outputs (rows, columns) accumulated at once (<= 4),
 *   DENSE_CHUNK_VECS     vectors of factor columns in one such accumulation (<= 4),
 *   DENSE_NAME(x)        x with the width's suffix (mu_tile -> mu_tile_w8),
 *   DENSE_ATTRIBUTES     the attributes of DENSE_NAME(dense_block_grad) (its target),
 *   DENSE_INLINE         the helpers' (always inlined, the same target),
 * and gets DENSE_NAME(dense_block_grad); the parameters are undefined at the end. The
 * lanes of a vector are always different entries (mu) or different factor columns k (gW,
 * gHt), never terms of one sum, so every width and tile shape adds each output's terms in
 * the order of the header comment of tweedie.c, each by one fma, and gives the same bits.
 * A scalar times a vector is an exact broadcast of the scalar (VEC_FMA, dense_tiles.h). */

#include "dense_tiles.h" /* mu_panel, accumulate_outputs (the gW and gHt products), VEC_AT */

/* The gradient of the panel of rows [i0, i0 + m) x columns [j0, j0 + n) (m, n <=
 * GRAD_PANEL); ht and g are GRAD_PANEL-wide scratch (K and GRAD_PANEL rows). */
DENSE_INLINE void DENSE_NAME(dense_panel_grad)(const pymf_tweedie *lik, const double *V,
                                                int64_t J, int64_t i0, int m, int64_t j0, int n,
                                                double coef, const double *W, const double *Ht,
                                                double *gW, double *gHt, double *ht, double *g,
                                                int fresh_rows, int fresh_cols)
{
    const int K = lik->rank;
    /* V's panel comes from memory (a part's blocks are scattered over V): ask for its rows
     * now, so that they arrive while mu is computed */
    for (int a = 0; a < m; ++a)
        for (int c = 0; c < n; c += 8)
            __builtin_prefetch(V + (i0 + a) * J + j0 + c, 0, 3);
    /* H's panel transposed, then mu of the panel into g */
    DENSE_NAME(transpose_panel)(Ht, j0, n, K, ht);
    DENSE_NAME(mu_panel)(W, i0, m, n, K, ht, g);
    grad_of_mu_any_beta(g, V + i0 * J + j0, J, m, n, lik->beta, coef);
    /* gw_i += sum_j g_ij h_j (j ascending), DENSE_OUTS rows at a time, then one by one
     * (literal counts, so that the accumulators are registers) */
#define OUTPUTS(n_out, first)                                                       \
    double *out[DENSE_OUTS];                                                        \
    for (int r = 0; r < (n_out); ++r)                                               \
        out[r] = (first) + r * K
    int a = 0;
    for (; a + DENSE_OUTS <= m; a += DENSE_OUTS) {
        OUTPUTS(DENSE_OUTS, gW + (i0 + a) * K);
        DENSE_NAME(accumulate_outputs)(DENSE_OUTS, 0, K, n, g + a * GRAD_PANEL, GRAD_PANEL, 1,
                                       Ht + j0 * K, out, fresh_rows);
    }
    for (; a < m; ++a) {
        OUTPUTS(1, gW + (i0 + a) * K);
        DENSE_NAME(accumulate_outputs)(1, 0, K, n, g + a * GRAD_PANEL, GRAD_PANEL, 1, Ht + j0 * K,
                                       out, fresh_rows);
    }
    /* gh_j += sum_i g_ij w_i (i ascending), the same by columns */
    int c = 0;
    for (; c + DENSE_OUTS <= n; c += DENSE_OUTS) {
        OUTPUTS(DENSE_OUTS, gHt + (j0 + c) * K);
        DENSE_NAME(accumulate_outputs)(DENSE_OUTS, 0, K, m, g + c, 1, GRAD_PANEL, W + i0 * K, out,
                                       fresh_cols);
    }
    for (; c < n; ++c) {
        OUTPUTS(1, gHt + (j0 + c) * K);
        DENSE_NAME(accumulate_outputs)(1, 0, K, m, g + c, 1, GRAD_PANEL, W + i0 * K, out,
                                       fresh_cols);
    }
#undef OUTPUTS
}

/* Block [r0, r1) x [c0, c1) of dense V (J columns) panel by panel: column panels outer and
 * row panels inner, both ascending, which keeps every gw_i's sum over j and every gh_j's
 * sum over i in ascending order. overwrite: the block's rows of gW and gHt are written
 * (their first panel starts from 0.0) rather than added to. Returns 0 (nothing done) when
 * the scratch cannot be had. */
DENSE_ATTRIBUTES
static int DENSE_NAME(dense_block_grad)(const pymf_tweedie *lik, const double *V, int64_t J,
                                        int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                        double coef, const double *W, const double *Ht,
                                        double *gW, double *gHt, int overwrite)
{
    double *scratch = malloc(sizeof(double) * (size_t)(lik->rank + GRAD_PANEL) * GRAD_PANEL);
    if (scratch == NULL)
        return 0;
    double *ht = scratch, *g = scratch + (size_t)lik->rank * GRAD_PANEL;
    for (int64_t j0 = c0; j0 < c1; j0 += GRAD_PANEL) {
        const int n = (int)(c1 - j0 < GRAD_PANEL ? c1 - j0 : GRAD_PANEL);
        for (int64_t i0 = r0; i0 < r1; i0 += GRAD_PANEL) {
            const int m = (int)(r1 - i0 < GRAD_PANEL ? r1 - i0 : GRAD_PANEL);
            DENSE_NAME(dense_panel_grad)(lik, V, J, i0, m, j0, n, coef, W, Ht, gW, gHt, ht, g,
                                         overwrite && j0 == c0, overwrite && i0 == r0);
        }
    }
    free(scratch);
    return 1;
}

#include "dense_width_end.h"
