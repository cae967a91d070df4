/* The dense block gradient's register tiles, written once for any vector width: tweedie.c
 * includes this file once per width (no include guard, on purpose), with
 *   DENSE_VEC            a vector of DENSE_LANES doubles (GCC vector extensions),
 *   DENSE_VEC_UNALIGNED  the same at any 8-byte aligned address,
 *   DENSE_LANES          4 or 8,
 *   DENSE_MU_VECS        vectors in a row of a mu tile (MU_TILE_ROWS rows),
 *   DENSE_OUTS           gW / gHt outputs (rows, columns) accumulated at once (<= 4),
 *   DENSE_NAME(x)        x with the width's suffix (mu_tile -> mu_tile_w8),
 *   DENSE_ATTRIBUTES     the attributes of DENSE_NAME(dense_block_grad) (clones, target),
 * and gets DENSE_NAME(dense_block_grad); the parameters are undefined at the end. The
 * lanes of a vector are always different entries (mu) or different factor columns k (gW,
 * gHt), never terms of one sum, so every width and tile shape adds each output's terms in
 * the order of the header comment of tweedie.c and gives the same bits. A scalar times a
 * vector is GCC's exact broadcast of the scalar. */

#define TILE_COLS (DENSE_MU_VECS * DENSE_LANES) /* columns of a mu tile (GRAD_PANEL's divisor) */
#define K_CHUNK (4 * DENSE_LANES)               /* factor columns of a gW / gHt tile: 4 vectors */
#define VEC_AT(p) (*(DENSE_VEC_UNALIGNED *)(p))

/* mu of one tile (MU_TILE_ROWS x TILE_COLS entries) into mu_out (row stride GRAD_PANEL);
 * ht holds the panel's columns of H transposed (ht[k * GRAD_PANEL + c], already offset to
 * the tile's first column). */
KERNEL_INLINE void DENSE_NAME(mu_tile)(const double *const w[MU_TILE_ROWS], const double *ht,
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
                acc[a][q] += w[a][k] * h[q];                                       \
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

/* out_r[k0 .. k0 + DENSE_LANES n_vec) += sum over s < n (ascending) of coef[r][s] *
 * x_s[k0 ..), for n_out outputs r at once (coef[r][s] = coefs[r * coef_stride + s *
 * coef_step]); x_s is x + s * K. The gW product (outputs = rows, s = columns) and the gHt
 * product (outputs = columns, s = rows) are both this. */
KERNEL_INLINE void DENSE_NAME(accumulate_tile)(int n_out, int n_vec, int k0, int K, int n,
                                               const double *coefs, int coef_stride,
                                               int coef_step, const double *x,
                                               double *const out[], int fresh)
{
    DENSE_VEC acc[4][4];  /* n_out <= 4 (the 4-wide tail of the 8-wide tiles too), n_vec <= 4 */
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
                acc[r][q] += coef * xv[q];
        }
    }
    for (int r = 0; r < n_out; ++r)
        for (int q = 0; q < n_vec; ++q)
            VEC_AT(out[r] + k0 + DENSE_LANES * q) = acc[r][q];
}

/* all K columns of n_out (1 .. DENSE_OUTS) outputs: chunks of K_CHUNK, then of DENSE_LANES, then
 * (8 lanes) of 4, then 1; fresh: the outputs start from 0.0 instead of their stored values
 * (the first panel of a block whose gradient is written, not added: 0.0 + x, exactly what
 * zeroed memory gives) */
KERNEL_INLINE void DENSE_NAME(accumulate_outputs)(int n_out, int K, int n, const double *coefs,
                                                  int coef_stride, int coef_step,
                                                  const double *x, double *const out[],
                                                  int fresh)
{
    int k0 = 0;
    for (; k0 + K_CHUNK <= K; k0 += K_CHUNK)
        DENSE_NAME(accumulate_tile)(n_out, 4, k0, K, n, coefs, coef_stride, coef_step, x, out,
                                    fresh);
    for (; k0 + DENSE_LANES <= K; k0 += DENSE_LANES)
        DENSE_NAME(accumulate_tile)(n_out, 1, k0, K, n, coefs, coef_stride, coef_step, x, out,
                                    fresh);
#if DENSE_LANES > 4
    for (; k0 + 4 <= K; k0 += 4)
        accumulate_tile_w4(n_out, 1, k0, K, n, coefs, coef_stride, coef_step, x, out, fresh);
#endif
    for (; k0 < K; ++k0)
        accumulate_column(n_out, k0, K, n, coefs, coef_stride, coef_step, x, out, fresh);
}

/* The gradient of the panel of rows [i0, i0 + m) x columns [j0, j0 + n) (m, n <=
 * GRAD_PANEL); ht and g are GRAD_PANEL-wide scratch (K and GRAD_PANEL rows). */
KERNEL_INLINE void DENSE_NAME(dense_panel_grad)(const pymf_tweedie *lik, const double *V,
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
    /* H's panel transposed, zero beyond its n columns (those mu are computed, never used) */
    int k_done = 0;
#if DENSE_LANES == 8
    /* whole panels by 8 x 8 squares in registers (three rounds of two-vector shuffles:
     * moves only, no arithmetic) instead of 64 scalar loads and stores each */
    if (n == GRAD_PANEL)
        for (; k_done + 8 <= K; k_done += 8)
            for (int c0 = 0; c0 < GRAD_PANEL; c0 += 8) {
                DENSE_VEC v[8];
                for (int i = 0; i < 8; ++i)
                    v[i] = VEC_AT(Ht + (j0 + c0 + i) * K + k_done);
                /* round d: rows i and i + d (i & d == 0) exchange their blocks of d lanes */
#define LO(e, d) (((e) % (2 * (d))) < (d) ? (e) : 8 + (e) - (d))
#define HI(e, d) (((e) % (2 * (d))) < (d) ? (e) + (d) : 8 + (e))
#define MASK(F, d) ((lanes8){F(0, d), F(1, d), F(2, d), F(3, d), F(4, d), F(5, d), F(6, d), F(7, d)})
#define ROUND(d)                                                                     \
    for (int i = 0; i < 8; ++i)                                                      \
        if (!(i & (d))) {                                                            \
            const DENSE_VEC lo = __builtin_shuffle(v[i], v[i + (d)], MASK(LO, d));   \
            v[i + (d)] = __builtin_shuffle(v[i], v[i + (d)], MASK(HI, d));           \
            v[i] = lo;                                                               \
        }
                ROUND(1)
                ROUND(2)
                ROUND(4)
#undef LO
#undef HI
#undef MASK
#undef ROUND
                for (int i = 0; i < 8; ++i)
                    VEC_AT(ht + (k_done + i) * GRAD_PANEL + c0) = v[i];
            }
#endif
    for (int k = k_done; k < K; ++k) {
        for (int c = 0; c < n; ++c)
            ht[k * GRAD_PANEL + c] = Ht[(j0 + c) * K + k];
        for (int c = n; c < GRAD_PANEL; ++c)
            ht[k * GRAD_PANEL + c] = 0.0;
    }
    const int n_tiles = (n + TILE_COLS - 1) / TILE_COLS;
    for (int a0 = 0; a0 < m; a0 += MU_TILE_ROWS) {
        /* a short last tile repeats its last row (computed, never stored) */
        const double *w[MU_TILE_ROWS];
        for (int a = 0; a < MU_TILE_ROWS; ++a)
            w[a] = W + (i0 + (a0 + a < m ? a0 + a : m - 1)) * K;
        /* mu into g's rows a0 .. a0 + MU_TILE_ROWS - 1 (all inside the buffer) */
        for (int tile = 0; tile < n_tiles; ++tile)
            DENSE_NAME(mu_tile)(w, ht + tile * TILE_COLS, K, g + a0 * GRAD_PANEL + tile * TILE_COLS);
    }
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
        DENSE_NAME(accumulate_outputs)(DENSE_OUTS, K, n, g + a * GRAD_PANEL, GRAD_PANEL, 1,
                                       Ht + j0 * K, out, fresh_rows);
    }
    for (; a < m; ++a) {
        OUTPUTS(1, gW + (i0 + a) * K);
        DENSE_NAME(accumulate_outputs)(1, K, n, g + a * GRAD_PANEL, GRAD_PANEL, 1, Ht + j0 * K,
                                       out, fresh_rows);
    }
    /* gh_j += sum_i g_ij w_i (i ascending), the same by columns */
    int c = 0;
    for (; c + DENSE_OUTS <= n; c += DENSE_OUTS) {
        OUTPUTS(DENSE_OUTS, gHt + (j0 + c) * K);
        DENSE_NAME(accumulate_outputs)(DENSE_OUTS, K, m, g + c, 1, GRAD_PANEL, W + i0 * K, out,
                                       fresh_cols);
    }
    for (; c < n; ++c) {
        OUTPUTS(1, gHt + (j0 + c) * K);
        DENSE_NAME(accumulate_outputs)(1, K, m, g + c, 1, GRAD_PANEL, W + i0 * K, out,
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

#undef TILE_COLS
#undef K_CHUNK
#undef VEC_AT
#undef DENSE_VEC
#undef DENSE_VEC_UNALIGNED
#undef DENSE_LANES
#undef DENSE_MU_VECS
#undef DENSE_OUTS
#undef DENSE_NAME
#undef DENSE_ATTRIBUTES
