/* The vector types and the scalar column kernel shared by the register-tiled dense kernels
 * (the block gradient, tweedie.c; the Fisher curvature, langevin.c), their panel and mu
 * tile sizes, and whether 8-wide tiles are built. Their per-width tiles are in dense_tiles.h. */
#ifndef PYMF_DENSE_VEC_H
#define PYMF_DENSE_VEC_H

#include <math.h>
#include <stddef.h>

#define GRAD_PANEL 32   /* rows and columns of a panel: its g_ij (a_ij) stay in a buffer in L1 */
#define MU_TILE_ROWS 4  /* rows of a mu tile; its columns are DENSE_MU_VECS vectors */

#if defined(__GNUC__)
#define KERNEL_INLINE static inline __attribute__((always_inline))
#else
#define KERNEL_INLINE static inline
#endif

/* Four or eight doubles as one value: GCC and Clang vector extensions, lowered to one
 * instruction per operation where the clone has registers that wide (two or four SSE2 ones
 * where not). Every operation is element by element, so a vector computes exactly what
 * four or eight scalar statements would. The _unaligned types read and write at any 8-byte
 * aligned address (through macros, not functions: no vector crosses a call, so there is no
 * vector calling convention to depend on). */
typedef double vec4 __attribute__((vector_size(32)));
typedef double vec4_unaligned __attribute__((vector_size(32), aligned(8), may_alias));
typedef double vec8 __attribute__((vector_size(64)));
typedef double vec8_unaligned __attribute__((vector_size(64), aligned(8), may_alias));
typedef long long lanes4 __attribute__((vector_size(32)));  /* a shuffle's lane numbers */
typedef long long lanes8 __attribute__((vector_size(64)));

/* 8-wide (AVX-512) and 4-wide AVX2 + FMA tiles where GCC builds clones for x86-64 (the
 * condition of PYMF_VECTOR_CLONES); the portable 4-wide tiles always */
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__) && defined(__x86_64__) && \
    !defined(PYMF_NO_CLONES)
#define PYMF_DENSE_W8
#include <immintrin.h> /* the tiles' FMA intrinsics (dense_width.h) */
#endif

/* out_r[k] += sum over s < n (ascending) of coef[r][s] * x_s[k], each term one fma, one
 * factor column k (the tails of K that no vector covers); the names as in dense_tiles.h */
KERNEL_INLINE void accumulate_column(int n_out, int k, int K, int n, const double *coefs,
                                     int coef_stride, int coef_step, const double *x,
                                     double *const out[], int fresh)
{
    for (int r = 0; r < n_out; ++r) {
        double acc = fresh ? 0.0 : out[r][k];
        for (int s = 0; s < n; ++s)
            acc = fma(coefs[r * coef_stride + s * coef_step], x[(size_t)s * (size_t)K + k], acc);
        out[r][k] = acc;
    }
}

#endif
