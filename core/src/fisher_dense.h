/* PSGLD's Fisher curvature of a dense block (pymf_langevin_fisher_block), register-tiled,
 * written once for any vector width: langevin.c includes this file once per width (no
 * include guard, on purpose), after dense_vec.h, fisher_weights, fisher_coefs and
 * dense_width.h, which defines
 *   DENSE_VEC, DENSE_VEC_UNALIGNED, DENSE_LANE_INDEX, DENSE_LANES, DENSE_MU_VECS,
 *   DENSE_CHUNK_VECS, DENSE_NAME
 *                     as in tweedie_dense.h,
 *   DENSE_OUTS        rows k of a K x K matrix accumulated at once (<= 4),
 *   DENSE_ATTRIBUTES  the attributes of DENSE_NAME(dense_fisher_block) (its target),
 *   DENSE_INLINE      the helpers' (always inlined, the same target),
 * and gets DENSE_NAME(dense_fisher_block); the parameters are undefined at the end.
 *
 * Bit for bit the per-entry loop (fisher_entry: a_ij, then F_W[i][k][l] += (a_ij h_jk) h_jl
 * and F_H[j][k][l] += (a_ij w_ik) w_il, entries in row-major order). That loop is load/store
 * bound: each entry reads and writes two whole K x K matrices. Here each matrix is built
 * as a product instead, a tile of it held in registers while all its terms are added (and
 * mu comes from the block gradient's mu tiles, pymf_dot_fused's order with lanes over
 * entries):
 *   F_W[i] += sum_j (a_ij h_j) h_j^T   with j ascending (panels of columns in order),
 *   F_H[j] += sum_i (a_ij w_i) w_i^T   with i ascending (panels of rows in order),
 * each coefficient a_ij h_jk (a_ij w_ik) rounded once as before, then added by one fma
 * (the tiles' explicit fma(), as add_outer adds it). The lanes of a vector are columns l
 * of an output, never terms of one sum, so every element gets the same terms in the same
 * order as in the per-entry loop, at every width and in every clone. F_W and F_H are
 * different arrays, so computing one after the other never mattered. */

#include "dense_tiles.h" /* accumulate_outputs (the products), VEC_AT */

/* F[k][l] += sum over s < n (ascending) of coefs[s K + k] x_s[l] (x_s = x + s K) for the
 * upper triangle l >= k of one K x K matrix F, DENSE_OUTS rows k at a time. A group's
 * tiles start at the vector holding its first diagonal element: whole vectors below the
 * diagonal are skipped, the few lower elements left are computed and never read
 * (pymf_langevin_fisher_mirror overwrites the lower triangle), the upper triangle's bits are
 * those of the whole square. */
DENSE_INLINE void DENSE_NAME(fisher_upper)(int K, int n, const double *coefs, const double *x,
                                            double *F)
{
    double *out[DENSE_OUTS];
    int k0 = 0;
    for (; k0 + DENSE_OUTS <= K; k0 += DENSE_OUTS) {
        for (int r = 0; r < DENSE_OUTS; ++r)
            out[r] = F + (size_t)(k0 + r) * (size_t)K;
        DENSE_NAME(accumulate_outputs)(DENSE_OUTS, k0 - k0 % DENSE_LANES, K, n, coefs + k0, 1,
                                       K, x, out, 0);
    }
    for (; k0 < K; ++k0) {
        out[0] = F + (size_t)k0 * (size_t)K;
        DENSE_NAME(accumulate_outputs)(1, k0 - k0 % DENSE_LANES, K, n, coefs + k0, 1, K, x,
                                       out, 0);
    }
}

/* Block [r0, r1) x [c0, c1) (rows of W, rows of Ht) panel by panel, GRAD_PANEL x
 * GRAD_PANEL entries: the panel's weights a_ij into a buffer (mu tiles, then
 * fisher_weights), then each of its rows' F_W and each of its columns' F_H (NULL: not
 * wanted). Column panels outer, row panels inner, both ascending. Returns 0 (nothing done)
 * when the scratch cannot be had. */
DENSE_ATTRIBUTES
static int DENSE_NAME(dense_fisher_block)(int K, double beta, const double *W, const double *Ht,
                                          int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                                          double *fisher_W, double *fisher_Ht)
{
    const size_t KK = (size_t)K * (size_t)K;
    double *scratch = malloc(sizeof(double) * (size_t)(GRAD_PANEL + 2 * K) * GRAD_PANEL);
    if (scratch == NULL)
        return 0;
    double *a = scratch, *ht = a + GRAD_PANEL * GRAD_PANEL;
    double *coefs = ht + (size_t)K * GRAD_PANEL;
    for (int64_t j0 = c0; j0 < c1; j0 += GRAD_PANEL) {
        const int n = (int)(c1 - j0 < GRAD_PANEL ? c1 - j0 : GRAD_PANEL);
        DENSE_NAME(transpose_panel)(Ht, j0, n, K, ht);
        for (int64_t i0 = r0; i0 < r1; i0 += GRAD_PANEL) {
            const int m = (int)(r1 - i0 < GRAD_PANEL ? r1 - i0 : GRAD_PANEL);
            DENSE_NAME(mu_panel)(W, i0, m, n, K, ht, a);
            fisher_weights(a, m, n, beta);
            if (fisher_W != NULL)
                for (int r = 0; r < m; ++r) {
                    fisher_coefs(K, n, a + r * GRAD_PANEL, 1, Ht + j0 * K, coefs);
                    DENSE_NAME(fisher_upper)(K, n, coefs, Ht + j0 * K,
                                             fisher_W + (size_t)(i0 - r0 + r) * KK);
                }
            if (fisher_Ht != NULL)
                for (int c = 0; c < n; ++c) {
                    fisher_coefs(K, m, a + c, GRAD_PANEL, W + i0 * K, coefs);
                    DENSE_NAME(fisher_upper)(K, m, coefs, W + i0 * K,
                                             fisher_Ht + (size_t)(j0 - c0 + c) * KK);
                }
        }
    }
    free(scratch);
    return 1;
}

#include "dense_width_end.h"
