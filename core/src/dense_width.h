/* One instance's parameters for the dense tiles (dense_tiles.h) and the kernels that
 * include them (tweedie_dense.h, fisher_dense.h). No include guard, on purpose: define
 * DENSE_LANES (4 or 8; with 4, DENSE_PORTABLE for the instance without FMA instructions),
 * include this file, then the kernel header, which undefines them all at its end
 * (dense_width_end.h).
 *   4 lanes, AVX2 + FMA  mu tiles of 4 x 8 entries (8 of AVX2's 16 registers), four
 *            outputs (rows of gW, columns of gHt, rows of a K x K Fisher matrix) at a time
 *            over chunks of 8 columns: 8 accumulators; each vector FMA one
 *            _mm256_fmadd_pd. Two outputs over chunks of 16 columns, the same 8
 *            accumulators, ran the PSGLD gradient 1.2x slower on an AMD EPYC (Zen 3): GCC
 *            reloaded each chunk's 4 vectors for each output instead of keeping them, and
 *            four outputs over 12 columns (15 registers) spilled;
 *   4 lanes, portable (DENSE_PORTABLE)  mu tiles as AVX2's, two outputs over chunks of 16
 *            columns, for a CPU without FMA (or a build without clones): each lane's fma() a
 *            call to glibc's exact software fma, or an instruction where the build's flags
 *            allow one;
 *   8 lanes  x86-64-v4 (AVX-512), which the 4-wide tiles left half used on an Intel Xeon:
 *            mu tiles of 4 x 32 entries (16 of AVX-512's 32 registers), chunks of 32
 *            columns, four outputs at a time: 16 accumulators; each vector FMA one
 *            _mm512_fmadd_pd.
 * Every instance gives the same bits: an FMA instruction and fma() both round a * b + c
 * once. DENSE_INLINE carries the instance's target to its always-inlined helpers, so that
 * they may use its intrinsics; the AVX2 instance names its extensions (avx2, fma) rather
 * than an arch, so that the x86-64-v4 instance may inline its helpers (the 4-wide tail). */
#if DENSE_LANES == 4 && defined(DENSE_PORTABLE)
#define DENSE_VEC vec4
#define DENSE_VEC_UNALIGNED vec4_unaligned
#define DENSE_LANE_INDEX lanes4
#define DENSE_MU_VECS 2
#define DENSE_OUTS 2
#define DENSE_CHUNK_VECS 4
#define DENSE_NAME(x) x##_w4p
#define DENSE_ATTRIBUTES
#define DENSE_INLINE KERNEL_INLINE
#elif DENSE_LANES == 4
#if !defined(PYMF_DENSE_W8)
#error "the AVX2 + FMA tiles need GCC's x86-64 clones (PYMF_DENSE_W8)"
#endif
#define DENSE_VEC vec4
#define DENSE_VEC_UNALIGNED vec4_unaligned
#define DENSE_LANE_INDEX lanes4
#define DENSE_MU_VECS 2
#define DENSE_OUTS 4
#define DENSE_CHUNK_VECS 2
#define DENSE_NAME(x) x##_w4
#define DENSE_ATTRIBUTES __attribute__((target("avx2,fma")))
#define DENSE_INLINE KERNEL_INLINE __attribute__((target("avx2,fma")))
#define DENSE_FMA_INTRINSIC _mm256_fmadd_pd
#define DENSE_SET1_INTRINSIC _mm256_set1_pd
#elif DENSE_LANES == 8
#define DENSE_VEC vec8
#define DENSE_VEC_UNALIGNED vec8_unaligned
#define DENSE_LANE_INDEX lanes8
#define DENSE_MU_VECS 4
#define DENSE_OUTS 4
#define DENSE_CHUNK_VECS 4
#define DENSE_NAME(x) x##_w8
#define DENSE_ATTRIBUTES __attribute__((target("arch=x86-64-v4")))
#define DENSE_INLINE KERNEL_INLINE __attribute__((target("arch=x86-64-v4")))
#define DENSE_FMA_INTRINSIC _mm512_fmadd_pd
#define DENSE_SET1_INTRINSIC _mm512_set1_pd
#else
#error "DENSE_LANES must be 4 or 8"
#endif
