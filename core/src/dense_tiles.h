/* The tiles shared by the register-tiled dense kernels, written once for any vector width:
 * mu = <w_i, h_j> of a panel (the block gradient's and the Fisher curvature's weights), and
 * out_r += sum_s coef[r][s] x_s (the gradient's gW and gHt products, tweedie_dense.h, and
 * the Fisher curvature's K x K products, fisher_dense.h). Included once per width (no
 * include guard, on purpose) by those headers, after dense_vec.h, with the parameters
 * tweedie_dense.h documents (DENSE_VEC, DENSE_VEC_UNALIGNED, DENSE_LANE_INDEX, DENSE_LANES,
 * DENSE_MU_VECS, DENSE_CHUNK_VECS, DENSE_NAME); defines K_CHUNK, VEC_AT and TILE_COLS,
 * which the including header undefines with its parameters. The lanes of a vector are different entries (mu) or
 * different output columns, never terms of one sum: every output element gets its terms,
 * each added by one fused multiply-add (C99 fma(), lane by lane: the product and the sum
 * rounded once, as pymf_dot_fused and pymf_axpy2_fused do), in the documented order
 * whatever the width and the tile shape, so every width gives the same bits. */

#define K_CHUNK (DENSE_CHUNK_VECS * DENSE_LANES) /* columns of a full tile */

/* acc[l] = fma(a, b[l], acc[l]) in every lane l (a macro, like VEC_AT: no vector crosses a
 * call): one vector FMA instruction where the instance has one (its intrinsic; GCC did not
 * turn a lane loop of fma() calls into one), else fma() lane by lane. Either rounds each
 * lane's a * b + c once: the same bits. */
#if defined(DENSE_FMA_INTRINSIC)
#define VEC_FMA(acc, a, b)                                                                  \
    ((acc) = (DENSE_VEC)DENSE_FMA_INTRINSIC(DENSE_SET1_INTRINSIC(a), (b), (acc)))
#else
#define VEC_FMA(acc, a, b)                                \
    do {                                                  \
        for (int l_ = 0; l_ < DENSE_LANES; ++l_)          \
            (acc)[l_] = fma((a), (b)[l_], (acc)[l_]);     \
    } while (0)
#endif
#define VEC_AT(p) (*(DENSE_VEC_UNALIGNED *)(p))
#define TILE_COLS (DENSE_MU_VECS * DENSE_LANES) /* columns of a mu tile (GRAD_PANEL's divisor) */

/* mu of one tile (MU_TILE_ROWS x TILE_COLS entries) into mu_out (row stride GRAD_PANEL);
 * ht holds the panel's columns of H transposed (ht[k * GRAD_PANEL + c], already offset to
 * the tile's first column). */
DENSE_INLINE void DENSE_NAME(mu_tile)(const double *const w[MU_TILE_ROWS], const double *ht,
                                       int K, double *mu_out)
{
    const int K4 = K - K % 4;
    DENSE_VEC part[4][MU_TILE_ROWS][DENSE_MU_VECS];
    for (int r = 0; r < 4; ++r) {
        DENSE_VEC acc[MU_TILE_ROWS][DENSE_MU_VECS];
        for (int a = 0; a < MU_TILE_ROWS; ++a)
            for (int q = 0; q < DENSE_MU_VECS; ++q)
                acc[a][q] = (DENSE_VEC){0.0};
        /* partial sum r: k = r, r + 4, ... below K4, then (r = 0 only) the tail */
#define MU_TERM(k)                                                                 \
    do {                                                                           \
        DENSE_VEC h[DENSE_MU_VECS];                                                \
        for (int q = 0; q < DENSE_MU_VECS; ++q)                                    \
            h[q] = VEC_AT(ht + (k) * GRAD_PANEL + DENSE_LANES * q);                \
        for (int a = 0; a < MU_TILE_ROWS; ++a)                                     \
            for (int q = 0; q < DENSE_MU_VECS; ++q)                                \
                VEC_FMA(acc[a][q], w[a][k], h[q]);                                 \
    } while (0)
        for (int k = r; k < K4; k += 4)
            MU_TERM(k);
        if (r == 0)
            for (int k = K4; k < K; ++k)
                MU_TERM(k);
#undef MU_TERM
        for (int a = 0; a < MU_TILE_ROWS; ++a)
            for (int q = 0; q < DENSE_MU_VECS; ++q)
                part[r][a][q] = acc[a][q];
    }
    for (int a = 0; a < MU_TILE_ROWS; ++a)
        for (int q = 0; q < DENSE_MU_VECS; ++q)
            VEC_AT(mu_out + a * GRAD_PANEL + DENSE_LANES * q) =
                (part[0][a][q] + part[1][a][q]) + (part[2][a][q] + part[3][a][q]);
}

/* H's panel (columns [j0, j0 + n) of H, rows of Ht) transposed into ht[k * GRAD_PANEL + c],
 * zero beyond its n columns (those mu are computed, never used) */
DENSE_INLINE void DENSE_NAME(transpose_panel)(const double *Ht, int64_t j0, int n, int K,
                                               double *ht)
{
    int k_done = 0;
    /* whole panels by DENSE_LANES x DENSE_LANES squares in registers (log2(DENSE_LANES)
     * rounds of two-vector shuffles: moves only, no arithmetic, so every width gives the
     * same ht) instead of DENSE_LANES^2 scalar loads and stores each; the scalar copy took
     * about a tenth of the AVX2 gradient's time on an AMD EPYC */
    if (n == GRAD_PANEL)
        for (; k_done + DENSE_LANES <= K; k_done += DENSE_LANES)
            for (int c0 = 0; c0 < GRAD_PANEL; c0 += DENSE_LANES) {
                DENSE_VEC v[DENSE_LANES];
                for (int i = 0; i < DENSE_LANES; ++i)
                    v[i] = VEC_AT(Ht + (j0 + c0 + i) * K + k_done);
                /* round d: rows i and i + d (i & d == 0) exchange their blocks of d lanes;
                 * lane e of the two rows side by side is e (first) or DENSE_LANES + e */
#define LO(e, d) (((e) % (2 * (d))) < (d) ? (e) : DENSE_LANES + (e) - (d))
#define HI(e, d) (((e) % (2 * (d))) < (d) ? (e) + (d) : DENSE_LANES + (e))
#if DENSE_LANES == 8
#define MASK(F, d) \
    ((DENSE_LANE_INDEX){F(0, d), F(1, d), F(2, d), F(3, d), F(4, d), F(5, d), F(6, d), F(7, d)})
#else
#define MASK(F, d) ((DENSE_LANE_INDEX){F(0, d), F(1, d), F(2, d), F(3, d)})
#endif
#define ROUND(d)                                                                     \
    for (int i = 0; i < DENSE_LANES; ++i)                                            \
        if (!(i & (d))) {                                                            \
            const DENSE_VEC lo = __builtin_shuffle(v[i], v[i + (d)], MASK(LO, d));   \
            v[i + (d)] = __builtin_shuffle(v[i], v[i + (d)], MASK(HI, d));           \
            v[i] = lo;                                                               \
        }
                ROUND(1)
                ROUND(2)
#if DENSE_LANES == 8
                ROUND(4)
#endif
#undef LO
#undef HI
#undef MASK
#undef ROUND
                for (int i = 0; i < DENSE_LANES; ++i)
                    VEC_AT(ht + (k_done + i) * GRAD_PANEL + c0) = v[i];
            }
    for (int k = k_done; k < K; ++k) {
        for (int c = 0; c < n; ++c)
            ht[k * GRAD_PANEL + c] = Ht[(j0 + c) * K + k];
        for (int c = n; c < GRAD_PANEL; ++c)
            ht[k * GRAD_PANEL + c] = 0.0;
    }
}

/* mu of the panel of rows [i0, i0 + m) x columns [j0, j0 + n) (m, n <= GRAD_PANEL) into
 * mu (row stride GRAD_PANEL, GRAD_PANEL rows), ht: H's panel (transpose_panel) */
DENSE_INLINE void DENSE_NAME(mu_panel)(const double *W, int64_t i0, int m, int n, int K,
                                        const double *ht, double *mu)
{
    const int n_tiles = (n + TILE_COLS - 1) / TILE_COLS;
    for (int a0 = 0; a0 < m; a0 += MU_TILE_ROWS) {
        /* a short last tile repeats its last row (computed, never stored) */
        const double *w[MU_TILE_ROWS];
        for (int a = 0; a < MU_TILE_ROWS; ++a)
            w[a] = W + (i0 + (a0 + a < m ? a0 + a : m - 1)) * K;
        /* mu into rows a0 .. a0 + MU_TILE_ROWS - 1 (all inside the buffer) */
        for (int tile = 0; tile < n_tiles; ++tile)
            DENSE_NAME(mu_tile)(w, ht + tile * TILE_COLS, K,
                                mu + a0 * GRAD_PANEL + tile * TILE_COLS);
    }
}

/* out_r[k0 .. k0 + DENSE_LANES n_vec) += sum over s < n (ascending) of coef[r][s] *
 * x_s[k0 ..), for n_out outputs r at once (coef[r][s] = coefs[r * coef_stride + s *
 * coef_step]); x_s is x + s * K. The gW product (outputs = rows, s = columns) and the gHt
 * product (outputs = columns, s = rows) are both this. */
DENSE_INLINE void DENSE_NAME(accumulate_tile)(int n_out, int n_vec, int k0, int K, int n,
                                               const double *coefs, int coef_stride,
                                               int coef_step, const double *x,
                                               double *const out[], int fresh)
{
    DENSE_VEC acc[4][4]; /* n_out <= 4 (the 4-wide tail of the 8-wide tiles too), n_vec <= 4 */
    for (int r = 0; r < n_out; ++r)
        for (int q = 0; q < n_vec; ++q)
            if (fresh)
                acc[r][q] = (DENSE_VEC){0.0};
            else
                acc[r][q] = VEC_AT(out[r] + k0 + DENSE_LANES * q);
    for (int s = 0; s < n; ++s) {
        const double *xs = x + (size_t)s * (size_t)K + k0;
        DENSE_VEC xv[4];
        for (int q = 0; q < n_vec; ++q)
            xv[q] = VEC_AT(xs + DENSE_LANES * q);
        for (int r = 0; r < n_out; ++r) {
            const double coef = coefs[r * coef_stride + s * coef_step];
            for (int q = 0; q < n_vec; ++q)
                VEC_FMA(acc[r][q], coef, xv[q]);
        }
    }
    for (int r = 0; r < n_out; ++r)
        for (int q = 0; q < n_vec; ++q)
            VEC_AT(out[r] + k0 + DENSE_LANES * q) = acc[r][q];
}

/* columns [k_from, K) of n_out (1 .. DENSE_OUTS) outputs: chunks of K_CHUNK, then the
 * whole vectors left in one tile (3, 2 or 1: each coefficient is loaded once for all of
 * them), then (8 lanes) a chunk of 4, then columns one by one; fresh: the outputs start
 * from 0.0 instead of their stored values (the first panel of a block whose gradient is
 * written, not added: 0.0 + x, exactly what zeroed memory gives) */
DENSE_INLINE void DENSE_NAME(accumulate_outputs)(int n_out, int k_from, int K, int n,
                                                  const double *coefs, int coef_stride,
                                                  int coef_step, const double *x,
                                                  double *const out[], int fresh)
{
    int k0 = k_from;
    for (; k0 + K_CHUNK <= K; k0 += K_CHUNK)
        DENSE_NAME(accumulate_tile)(n_out, DENSE_CHUNK_VECS, k0, K, n, coefs, coef_stride,
                                    coef_step, x, out, fresh);
    /* literal vector counts, so that the accumulators are registers */
#define WHOLE_VECTORS(n_vec)                                                                  \
    DENSE_NAME(accumulate_tile)(n_out, n_vec, k0, K, n, coefs, coef_stride, coef_step, x, out, \
                                fresh);                                                       \
    k0 += (n_vec) * DENSE_LANES;                                                              \
    break
    switch ((K - k0) / DENSE_LANES) {
    case 3: WHOLE_VECTORS(3);
    case 2: WHOLE_VECTORS(2);
    case 1: WHOLE_VECTORS(1);
    default: break;
    }
#undef WHOLE_VECTORS
#if DENSE_LANES > 4 /* the AVX2 + FMA instance's tile, inlined */
    for (; k0 + 4 <= K; k0 += 4)
        accumulate_tile_w4(n_out, 1, k0, K, n, coefs, coef_stride, coef_step, x, out, fresh);
#endif
    for (; k0 < K; ++k0)
        accumulate_column(n_out, k0, K, n, coefs, coef_stride, coef_step, x, out, fresh);
}
