/* One vector width's parameters for the dense tiles (dense_tiles.h) and the kernels that
 * include them (tweedie_dense.h, fisher_dense.h). No include guard, on purpose: define
 * DENSE_LANES (4 or 8), include this file, then the kernel header, which undefines them
 * all at its end (dense_width_end.h).
 *   4 lanes  the AVX2 and baseline clones: mu tiles of 4 x 8 entries (8 of AVX2's 16
 *            registers), two outputs (rows of gW, columns of gHt, rows of a K x K Fisher
 *            matrix) at a time: 8 accumulators;
 *   8 lanes  x86-64-v4 (AVX-512), which the 4-wide tiles left half used on an Intel Xeon:
 *            mu tiles of 4 x 32 entries (16 of AVX-512's 32 registers), chunks of 32
 *            columns, four outputs at a time: 16 accumulators.
 * Every width gives the same bits. */
#if DENSE_LANES == 4
#define DENSE_VEC vec4
#define DENSE_VEC_UNALIGNED vec4_unaligned
#define DENSE_MU_VECS 2
#define DENSE_OUTS 2
#define DENSE_NAME(x) x##_w4
#define DENSE_ATTRIBUTES PYMF_AVX2_CLONES
#elif DENSE_LANES == 8
#define DENSE_VEC vec8
#define DENSE_VEC_UNALIGNED vec8_unaligned
#define DENSE_MU_VECS 4
#define DENSE_OUTS 4
#define DENSE_NAME(x) x##_w8
#define DENSE_ATTRIBUTES __attribute__((target("arch=x86-64-v4")))
#else
#error "DENSE_LANES must be 4 or 8"
#endif
