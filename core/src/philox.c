#include "pymf/philox.h"

#include <string.h>

/* Lanes of Philox counters processed together: the round loop is outside, the lane loop
 * inside, so each round is a vector multiply-xor over the lanes. 256 rather than 64: the
 * Box-Muller passes over the lanes (CPUs without AVX-512) run longer between loop set-ups
 * (measured a few per cent faster); the scratch arrays of noise_rows stay within 32 KB of
 * stack. */
#define PYMF_NOISE_LANES 256

/* The portable form: any compiler, any machine. */
static void philox_lanes_portable(int n, uint32_t *c0, uint32_t *c1, uint32_t *c2,
                                  uint32_t *c3, uint32_t k0, uint32_t k1)
{
    for (int round = 0; round < 10; ++round) {
        for (int l = 0; l < n; ++l) {
            const uint64_t p0 = (uint64_t)PYMF_PHILOX_M0 * (uint64_t)c0[l];
            const uint64_t p1 = (uint64_t)PYMF_PHILOX_M1 * (uint64_t)c2[l];
            const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1[l] ^ k0;
            const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3[l] ^ k1;
            c0[l] = n0;
            c1[l] = (uint32_t)p1;
            c2[l] = n2;
            c3[l] = (uint32_t)p0;
        }
        k0 += PYMF_PHILOX_W0;
        k1 += PYMF_PHILOX_W1;
    }
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(PYMF_NO_CLONES)
/* The same rounds with the four words of 8 (AVX2) or 16 (AVX-512) counters in registers
 * through all ten rounds, two vectors of counters at a time so that one vector's
 * multiplies (latency 5) overlap the other's. x86 multiplies 32 x 32 -> 64 bits only in
 * the even 32-bit lanes (vpmuludq), so each product is taken twice, for the even lanes and
 * for the odd ones moved down, and the high and low halves are put back in place. The
 * moves are 32-bit lane swaps within each 64-bit lane (vpshufd, imm 0xB1) rather than
 * 64-bit shifts: on Intel cores the vector shifts share port 0 with the multiplies, the
 * shuffles run on port 5. With AVX-512 a masked swap does the move and the blend in one
 * instruction, and one three-way xor (vpternlogd) replaces two. Integer arithmetic: the
 * words are those of philox_lanes_portable exactly. */
#include <immintrin.h>

#define PHILOX_SWAP_HALVES 0xB1 /* 32-bit lanes (1, 0, 3, 2): the halves of each 64 bits */

/* AVX2: hi, lo = the high and low words of M * x, lane by lane */
#define PHILOX_MULHILO_256(x, M, hi, lo)                                                      \
    do {                                                                                      \
        const __m256i even_ = _mm256_mul_epu32(x, M);                                        \
        const __m256i odd_ = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), M);                  \
        hi = _mm256_blend_epi32(_mm256_shuffle_epi32(even_, PHILOX_SWAP_HALVES), odd_, 0xAA); \
        lo = _mm256_blend_epi32(even_, _mm256_shuffle_epi32(odd_, PHILOX_SWAP_HALVES), 0xAA); \
    } while (0)

/* AVX-512: the even lanes of hi are even_'s high words swapped down (odd lanes: odd_'s high
 * words, in place); the odd lanes of lo are odd_'s low words swapped up */
#define PHILOX_MULHILO_512(x, M, hi, lo)                                                      \
    do {                                                                                      \
        const __m512i even_ = _mm512_mul_epu32(x, M);                                        \
        const __m512i odd_ =                                                                  \
            _mm512_mul_epu32(_mm512_shuffle_epi32(x, (_MM_PERM_ENUM)PHILOX_SWAP_HALVES), M); \
        hi = _mm512_mask_shuffle_epi32(odd_, (__mmask16)0x5555, even_,                       \
                                       (_MM_PERM_ENUM)PHILOX_SWAP_HALVES);                    \
        lo = _mm512_mask_shuffle_epi32(even_, (__mmask16)0xAAAA, odd_,                       \
                                       (_MM_PERM_ENUM)PHILOX_SWAP_HALVES);                    \
    } while (0)

#define PHILOX_XOR3_256(x, y, z) _mm256_xor_si256(_mm256_xor_si256(x, y), z)
/* 0x96: the truth table of x ^ y ^ z */
#define PHILOX_XOR3_512(x, y, z) _mm512_ternarylogic_epi32(x, y, z, 0x96)

/* One round on the words (a, b, c, d) of one vector of counters. */
#define PHILOX_ROUND(width, a, b, c, d, m0, m1, key0v, key1v)                                 \
    do {                                                                                      \
        __m##width##i hi0_, lo0_, hi1_, lo1_;                                                 \
        PHILOX_MULHILO_##width(a, m0, hi0_, lo0_);                                            \
        PHILOX_MULHILO_##width(c, m1, hi1_, lo1_);                                            \
        a = PHILOX_XOR3_##width(hi1_, b, key0v);                                              \
        b = lo1_;                                                                             \
        c = PHILOX_XOR3_##width(hi0_, d, key1v);                                              \
        d = lo0_;                                                                             \
    } while (0)

/* Philox's ten rounds: `rounds` (one PHILOX_ROUND per vector of counters in flight) run
 * with the round's key in key0v / key1v, the key bumped by the Weyl constants after each */
#define PHILOX_TEN_ROUNDS(width, prefix, rounds)                                              \
    do {                                                                                      \
        uint32_t key0 = k0, key1 = k1;                                                        \
        for (int round = 0; round < 10; ++round) {                                            \
            const __m##width##i key0v = prefix##_set1_epi32((int)key0);                      \
            const __m##width##i key1v = prefix##_set1_epi32((int)key1);                      \
            rounds;                                                                           \
            key0 += PYMF_PHILOX_W0;                                                           \
            key1 += PYMF_PHILOX_W1;                                                           \
        }                                                                                     \
    } while (0)

/* Rounds over `vectors` (1 or 2) vectors of counters at l, l + lanes, ... */
#define PHILOX_ROUNDS(width, prefix, lanes)                                                    \
    {                                                                                         \
        const __m##width##i m0 = prefix##_set1_epi32((int)PYMF_PHILOX_M0);                  \
        const __m##width##i m1 = prefix##_set1_epi32((int)PYMF_PHILOX_M1);                  \
        for (; l + 2 * (lanes) <= n; l += 2 * (lanes)) {                                     \
            __m##width##i a = prefix##_loadu_si##width((const void *)(c0 + l));              \
            __m##width##i b = prefix##_loadu_si##width((const void *)(c1 + l));              \
            __m##width##i c = prefix##_loadu_si##width((const void *)(c2 + l));              \
            __m##width##i d = prefix##_loadu_si##width((const void *)(c3 + l));              \
            __m##width##i e = prefix##_loadu_si##width((const void *)(c0 + l + (lanes)));    \
            __m##width##i f = prefix##_loadu_si##width((const void *)(c1 + l + (lanes)));    \
            __m##width##i g = prefix##_loadu_si##width((const void *)(c2 + l + (lanes)));    \
            __m##width##i h = prefix##_loadu_si##width((const void *)(c3 + l + (lanes)));    \
            PHILOX_TEN_ROUNDS(width, prefix,                                                  \
                              PHILOX_ROUND(width, a, b, c, d, m0, m1, key0v, key1v);          \
                              PHILOX_ROUND(width, e, f, g, h, m0, m1, key0v, key1v));         \
            prefix##_storeu_si##width((void *)(c0 + l), a);                                  \
            prefix##_storeu_si##width((void *)(c1 + l), b);                                  \
            prefix##_storeu_si##width((void *)(c2 + l), c);                                  \
            prefix##_storeu_si##width((void *)(c3 + l), d);                                  \
            prefix##_storeu_si##width((void *)(c0 + l + (lanes)), e);                        \
            prefix##_storeu_si##width((void *)(c1 + l + (lanes)), f);                        \
            prefix##_storeu_si##width((void *)(c2 + l + (lanes)), g);                        \
            prefix##_storeu_si##width((void *)(c3 + l + (lanes)), h);                        \
        }                                                                                     \
        for (; l + (lanes) <= n; l += (lanes)) {                                             \
            __m##width##i a = prefix##_loadu_si##width((const void *)(c0 + l));              \
            __m##width##i b = prefix##_loadu_si##width((const void *)(c1 + l));              \
            __m##width##i c = prefix##_loadu_si##width((const void *)(c2 + l));              \
            __m##width##i d = prefix##_loadu_si##width((const void *)(c3 + l));              \
            PHILOX_TEN_ROUNDS(width, prefix,                                                  \
                              PHILOX_ROUND(width, a, b, c, d, m0, m1, key0v, key1v));         \
            prefix##_storeu_si##width((void *)(c0 + l), a);                                  \
            prefix##_storeu_si##width((void *)(c1 + l), b);                                  \
            prefix##_storeu_si##width((void *)(c2 + l), c);                                  \
            prefix##_storeu_si##width((void *)(c3 + l), d);                                  \
        }                                                                                     \
    }

__attribute__((target("avx2"))) static int philox_lanes_avx2(int n, uint32_t *c0, uint32_t *c1,
                                                             uint32_t *c2, uint32_t *c3,
                                                             uint32_t k0, uint32_t k1)
{
    int l = 0;
    PHILOX_ROUNDS(256, _mm256, 8)
    return l;
}

__attribute__((target("avx512f"))) static int philox_lanes_avx512(int n, uint32_t *c0,
                                                                  uint32_t *c1, uint32_t *c2,
                                                                  uint32_t *c3, uint32_t k0,
                                                                  uint32_t k1)
{
    int l = 0;
    PHILOX_ROUNDS(512, _mm512, 16)
    return l;
}
#endif

/* Philox4x32-10 of n counters (c0[l], c1[l], c2[l], c3[l]) in place under key (k0, k1):
 * the widest vector form the CPU has for whole groups of lanes, the portable loop for the
 * rest. */
static void philox_lanes(int n, uint32_t *c0, uint32_t *c1, uint32_t *c2, uint32_t *c3,
                         uint32_t k0, uint32_t k1)
{
    int done = 0;
#if defined(__GNUC__) && defined(__x86_64__) && !defined(PYMF_NO_CLONES)
    if (__builtin_cpu_supports("avx512f"))
        done = philox_lanes_avx512(n, c0, c1, c2, c3, k0, k1);
    else if (__builtin_cpu_supports("avx2"))
        done = philox_lanes_avx2(n, c0, c1, c2, c3, k0, k1);
#endif
    philox_lanes_portable(n - done, c0 + done, c1 + done, c2 + done, c3 + done, k0, k1);
}

/* inverse_c[l], minus_2_log_c[l]: the log's constants for the uniform of word a[l]
 * (pymf_minus_2_log_unit's lookup) on CPUs without AVX-512 F and BW (with them
 * noise_lanes_avx512 looks them up in registers); the AVX2 clone of noise_rows loads the
 * entries with gathers */
static inline void log_constants(int n, const uint32_t *restrict a, double *restrict inverse_c,
                                 double *restrict minus_2_log_c)
{
    for (int l = 0; l < n; ++l) {
        const unsigned i = pymf_log_interval(pymf_uniform_open(a[l]));
        inverse_c[l] = pymf_log_inverse_c[i];
        minus_2_log_c[l] = pymf_log_minus_2_log_c[i];
    }
}

/* Box-Muller over lanes (CPUs without AVX-512; noise_lanes_avx512 below keeps the whole
 * transform in registers): z0[l], z1[l] from the words a[l], b[l], pymf_box_muller's steps
 * as passes over the lanes (the same operations, so the same bits); inverse_c,
 * minus_2_log_c and square_radius are scratch. restrict: without it the compiler checks for
 * overlap and falls back to slower code. */
static inline void box_muller_lanes(int n, const uint32_t *restrict a, const uint32_t *restrict b,
                                    double *restrict inverse_c, double *restrict minus_2_log_c,
                                    double *restrict square_radius, double *restrict z0,
                                    double *restrict z1)
{
    log_constants(n, a, inverse_c, minus_2_log_c);
    for (int l = 0; l < n; ++l)
        square_radius[l] =
            pymf_minus_2_log_reduced(pymf_uniform_open(a[l]), inverse_c[l], minus_2_log_c[l]);
    for (int l = 0; l < n; ++l)
        pymf_box_muller_rotate(square_radius[l], b[l], &z0[l], &z1[l]);
}

#if defined(__GNUC__) && defined(__x86_64__) && !defined(PYMF_NO_CLONES)
/* The whole transform of 16 counters in registers (noise_lanes_avx512). With 512-bit
 * vectors this Xeon runs floating-point arithmetic, integer multiplies and shifts on one
 * port only (p0; measured: one 8-lane vmulpd, vpmuludq or vpsrlq per cycle), while
 * shuffles, blends and bitwise logic also run on a second one (p5). So the steps that
 * pymf_box_muller does exactly in floating point or with shifts are done here, where an
 * equally exact bit operation exists, on the second port:
 * - u = (a + 1/2) 2^-32: the double 2^52 + a is the word under the exponent bits of 2^52
 *   (one interleave), minus 2^52 - 1/2 is a + 1/2 (exact); the scaling by 2^-32 is a
 *   subtraction of 32 from the exponent field (exact: u is normal). Its exponent as a double
 *   is vgetexppd (exact), its interval is byte 6 moved down by vpshufb.
 * - the angle's quarter turns: with x = b + 2^29 (32 bits), n mod 4 is x's bits 30-31 and
 *   t = 4 u_b - n = (f + 1/2) 2^-30 - 1/2, f = x mod 2^30 (pymf_box_muller_rotate's
 *   t, exactly); t for odd n (sign flipped) is the same with f replaced by 2^30 - 1 - f, a
 *   bit complement. 2 f + 1 (or its complement) under 2^52's exponent bits, minus 2^52 +
 *   2^30, is 2 t 2^30 exactly, scaled into t through the exponent field.
 * Every rounded operation (the fused multiply-adds, products and sums of the log and of
 * the sin and cos polynomials, sqrt) is one of pymf_minus_2_log_reduced's and
 * pymf_box_muller_rotate's in their order, with their constants: each of their fma() calls
 * is one _mm512_fmadd_pd (a - c as a + (-c): the same rounding of the same exact value),
 * each of their products and sums one mul / add intrinsic (-std=c99 contracts nothing),
 * and a correctly rounded operation gives the same bits in a vector lane as in a scalar
 * register; the replaced steps are exact in both forms. So the bits are pymf_box_muller's
 * (bench/noise_words_exhaustive.c compares them on every 32-bit word as a and as b;
 * tests/test_kernels.py, test_rng.py and the goldens on Philox's words). */

/* The log's two 16-entry tables, each in two registers: one vpermt2pd per lookup, which
 * reads only the low four bits of each 64-bit index (a gather of the same entries
 * measured several times slower on an Intel core). */
typedef struct {
    __m512d inverse_lo, inverse_hi, log_lo, log_hi;
} log_tables_avx512;

#define EXPONENT_FIELD(e) ((long long)(e) << 52)

/* The rounded arithmetic that the AVX-512 and AVX2 transforms share, written once for both
 * widths (W = 512 or 256) so that they cannot drift apart: every product, sum and fma of
 * pymf_minus_2_log_reduced and pymf_box_muller_rotate, in their order, with their
 * constants. */
#define BM_SET(W, x) _mm##W##_set1_pd(x)
#define BM_FMA(W, a, b, c) _mm##W##_fmadd_pd(a, b, c)
#define BM_MUL(W, a, b) _mm##W##_mul_pd(a, b)

/* square_radius = -2 log u from m (u's mantissa as a double in [1, 2)), its interval's
 * constants and u's exponent as a double */
#define BM_SQUARE_RADIUS(W, m, inverse_c, minus_2_log_c, exponent, square_radius)           \
    do {                                                                                     \
        const __m##W##d r_ = BM_FMA(W, m, inverse_c, BM_SET(W, -1.0));                     \
        const __m##W##d r2_ = BM_MUL(W, r_, r_);                                             \
        const __m##W##d p_ = BM_FMA(                                                         \
            W,                                                                               \
            BM_FMA(W, BM_SET(W, 0.22535547070136794), r_, BM_SET(W, -0.2852807523429813)),   \
            BM_MUL(W, r2_, r2_),                                                             \
            BM_FMA(W,                                                                        \
                   BM_FMA(W, BM_SET(W, 0.33336853848956083), r_,                             \
                          BM_SET(W, -0.40000097204103835)),                                  \
                   r2_,                                                                      \
                   BM_FMA(W, BM_SET(W, 0.49999998770775955), r_,                             \
                          BM_SET(W, -0.6666666663370293))));                                 \
        const __m##W##d minus_2_log1p_r_ = BM_FMA(W, BM_FMA(W, p_, r_, BM_SET(W, 1.0)), r2_, \
                                                  BM_MUL(W, BM_SET(W, -2.0), r_));           \
        square_radius = _mm##W##_add_pd(                                                     \
            BM_FMA(W, exponent, BM_SET(W, -1.3862943611198906), minus_2_log_c),              \
            minus_2_log1p_r_);                                                               \
    } while (0)

#define BM_SET_I64(W, x) BM_SET_I64_##W(x)
#define BM_SET_I64_512(x) _mm512_set1_epi64(x)
#define BM_SET_I64_256(x) _mm256_set1_epi64x(x)

/* signed_t = t with odd n's sign flip, from angle_bits = 2^52 + 2 f + 1 (box_muller_avx512's
 * comment), t2 = t^2, then the polynomials of t2 (BM_SIN_COS) */
#define BM_ANGLE(W, angle_bits, signed_t, t2, s, c)                                          \
    do {                                                                                     \
        const __m##W##d twice_t_scaled_ =                                                    \
            _mm##W##_sub_pd(_mm##W##_castsi##W##_pd(angle_bits),                             \
                            BM_SET(W, 4503599627370496.0 + 1073741824.0));                   \
        signed_t = _mm##W##_castsi##W##_pd(_mm##W##_sub_epi64(                               \
            _mm##W##_castpd_si##W(twice_t_scaled_), BM_SET_I64(W, EXPONENT_FIELD(31))));     \
        t2 = BM_MUL(W, signed_t, signed_t);                                                  \
        BM_SIN_COS(W, t2, s, c);                                                             \
    } while (0)

/* s and c, the sin and cos polynomials of t2 (Horner, each step one fma) */
#define BM_SIN_COS(W, t2, s, c)                                                              \
    do {                                                                                     \
        s = BM_SET(W, -3.556381664733624e-06);                                               \
        s = BM_FMA(W, s, t2, BM_SET(W, 0.00016042926595779118));                             \
        s = BM_FMA(W, s, t2, BM_SET(W, -0.0046817525926455324));                             \
        s = BM_FMA(W, s, t2, BM_SET(W, 0.07969262615597134));                                \
        s = BM_FMA(W, s, t2, BM_SET(W, -0.645964097504324));                                 \
        s = BM_FMA(W, s, t2, BM_SET(W, 1.570796326794892));                                  \
        c = BM_SET(W, -2.4857074310015385e-05);                                              \
        c = BM_FMA(W, c, t2, BM_SET(W, 0.0009191659062464877));                              \
        c = BM_FMA(W, c, t2, BM_SET(W, -0.02086346903304004));                               \
        c = BM_FMA(W, c, t2, BM_SET(W, 0.25366950726448945));                                \
        c = BM_FMA(W, c, t2, BM_SET(W, -1.2337005501249476));                                \
    } while (0)

/* z0, z1 of pymf_box_muller for 8 word pairs: with_exponent_a holds 2^52 + a's bits,
 * angle_bits 2^52 + 2 f + 1 (f above, complemented for odd n), n_bits n's bit 1 in bit 63
 * and its bit 0 in bit 62 */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
box_muller_avx512(__m512i with_exponent_a, __m512i angle_bits, __m512i n_bits,
                  const log_tables_avx512 *tables, __m512d *z0, __m512d *z1)
{
    const __m512d one = _mm512_set1_pd(1.0);
    /* pymf_minus_2_log_reduced(pymf_uniform_open(a), looked-up constants) */
    const __m512d a_half = _mm512_sub_pd(_mm512_castsi512_pd(with_exponent_a),
                                         _mm512_set1_pd(4503599627370496.0 - 0.5));
    const __m512i bits =
        _mm512_sub_epi64(_mm512_castpd_si512(a_half), _mm512_set1_epi64(EXPONENT_FIELD(32)));
    /* byte 6 of each 64-bit lane (bits 48-55) to its byte 0, the lookup's index (vpshufb
     * indexes bytes within 128 bits: 6 for even lanes, 14 for odd ones) */
    const __m512i interval = _mm512_shuffle_epi8(
        bits, _mm512_set_epi64(0x0E0E0E0E0E0E0E0Ell, 0x0606060606060606ll, 0x0E0E0E0E0E0E0E0Ell,
                               0x0606060606060606ll, 0x0E0E0E0E0E0E0E0Ell, 0x0606060606060606ll,
                               0x0E0E0E0E0E0E0E0Ell, 0x0606060606060606ll));
    const __m512d inverse_c = _mm512_permutex2var_pd(tables->inverse_lo, interval,
                                                     tables->inverse_hi);
    const __m512d minus_2_log_c = _mm512_permutex2var_pd(tables->log_lo, interval,
                                                         tables->log_hi);
    const __m512d exponent = _mm512_getexp_pd(_mm512_castsi512_pd(bits));
    /* 0xEA: the truth table of (x & y) | z */
    const __m512d m = _mm512_castsi512_pd(_mm512_ternarylogic_epi64(
        bits, _mm512_set1_epi64(0x000FFFFFFFFFFFFFll), _mm512_set1_epi64(0x3FF0000000000000ll),
        0xEA));
    __m512d square_radius;
    BM_SQUARE_RADIUS(512, m, inverse_c, minus_2_log_c, exponent, square_radius);
    /* pymf_box_muller_rotate(square_radius, b): t with odd n's sign flip already in it */
    __m512d signed_t, t2, s, c;
    BM_ANGLE(512, angle_bits, signed_t, t2, s, c);
    /* pymf_flip_sign(sqrt, n << 62): 0x78 is the truth table of x ^ (y & z) */
    const __m512d radius = _mm512_castsi512_pd(_mm512_ternarylogic_epi64(
        _mm512_castpd_si512(_mm512_sqrt_pd(square_radius)), n_bits,
        _mm512_set1_epi64((long long)0x8000000000000000ull), 0x78));
    const __m512d along_sin = _mm512_mul_pd(radius, _mm512_mul_pd(s, signed_t));
    const __m512d along_cos = _mm512_mul_pd(radius, _mm512_fmadd_pd(c, t2, one));
    const __mmask8 odd = _mm512_test_epi64_mask(n_bits, _mm512_set1_epi64(1ll << 62));
    *z0 = _mm512_mask_blend_pd(odd, along_cos, along_sin);
    *z1 = _mm512_mask_blend_pd(odd, along_sin, along_cos);
}

/* The four Gaussians of 8 lanes from their z0 .. z3 vectors, lane l's four together (the
 * layout of noise_rows' output): lanes 0-1 and 2-3 (8 doubles each) to out + first_offset
 * and 16 doubles further, lanes 4-5 and 6-7 to out + second_offset and 16 further */
__attribute__((target("avx512f"), always_inline)) static inline void
store_interleaved_avx512(__m512d z0, __m512d z1, __m512d z2, __m512d z3, double *out,
                         int first_offset, int second_offset)
{
    const __m512i pairs_low = _mm512_set_epi64(11, 3, 10, 2, 9, 1, 8, 0);
    const __m512i pairs_high = _mm512_set_epi64(15, 7, 14, 6, 13, 5, 12, 4);
    const __m512i quads_low = _mm512_set_epi64(11, 10, 3, 2, 9, 8, 1, 0);
    const __m512i quads_high = _mm512_set_epi64(15, 14, 7, 6, 13, 12, 5, 4);
    const __m512d z01_low = _mm512_permutex2var_pd(z0, pairs_low, z1);  /* lanes 0-3 */
    const __m512d z23_low = _mm512_permutex2var_pd(z2, pairs_low, z3);
    const __m512d z01_high = _mm512_permutex2var_pd(z0, pairs_high, z1); /* lanes 4-7 */
    const __m512d z23_high = _mm512_permutex2var_pd(z2, pairs_high, z3);
    _mm512_storeu_pd(out + first_offset, _mm512_permutex2var_pd(z01_low, quads_low, z23_low));
    _mm512_storeu_pd(out + first_offset + 16,
                     _mm512_permutex2var_pd(z01_low, quads_high, z23_low));
    _mm512_storeu_pd(out + second_offset,
                     _mm512_permutex2var_pd(z01_high, quads_low, z23_high));
    _mm512_storeu_pd(out + second_offset + 16,
                     _mm512_permutex2var_pd(z01_high, quads_high, z23_high));
}

/* Both Box-Muller pairs of 16 counters' words a, b (pymf_box_muller(a, b)): the angle's
 * integer steps on all 16 words at once, then the two halves of 8 lanes that 32-bit
 * interleaves make: counters 0, 1, 4, 5, 8, 9, 12, 13 (low) and the others (high) */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
box_muller16_avx512(__m512i a, __m512i b, const log_tables_avx512 *tables, __m512d z_low[2],
                    __m512d z_high[2])
{
    const __m512i exponent_of_2_52 = _mm512_set1_epi32(0x43300000);
    const __m512i x = _mm512_add_epi32(b, _mm512_set1_epi32(1 << 29));
    /* 2 f + 1 with odd n's complement: bits 1-30 are x's bits 0-29 (x << 1) xor odd n's
     * all-ones, bit 31 (x's bit 30 xor itself) 0, bit 0 1; 0x7D: the truth table of
     * z ? x ^ y : 1 */
    const __m512i shifted = _mm512_slli_epi32(x, 1);
    const __m512i angle = _mm512_ternarylogic_epi32(shifted, _mm512_srai_epi32(shifted, 31),
                                                    _mm512_set1_epi32((int)0xFFFFFFFEu), 0x7D);
    box_muller_avx512(_mm512_unpacklo_epi32(a, exponent_of_2_52),
                      _mm512_unpacklo_epi32(angle, exponent_of_2_52),
                      _mm512_unpacklo_epi32(x, x), tables, &z_low[0], &z_low[1]);
    box_muller_avx512(_mm512_unpackhi_epi32(a, exponent_of_2_52),
                      _mm512_unpackhi_epi32(angle, exponent_of_2_52),
                      _mm512_unpackhi_epi32(x, x), tables, &z_high[0], &z_high[1]);
}

/* Philox's ten rounds on one vector of counters (a, b, t_lo, tag) into words[0 .. 3] (in
 * scope: a, b, t_lo, tag, k0, k1, words) */
#define PHILOX_WORDS(width, prefix)                                                          \
    do {                                                                                     \
        const __m##width##i m0 = prefix##_set1_epi32((int)PYMF_PHILOX_M0);                  \
        const __m##width##i m1 = prefix##_set1_epi32((int)PYMF_PHILOX_M1);                  \
        __m##width##i c = prefix##_set1_epi32((int)t_lo), d = prefix##_set1_epi32((int)tag); \
        PHILOX_TEN_ROUNDS(width, prefix,                                                     \
                          PHILOX_ROUND(width, a, b, c, d, m0, m1, key0v, key1v));            \
        words[0] = a;                                                                        \
        words[1] = b;                                                                        \
        words[2] = c;                                                                        \
        words[3] = d;                                                                        \
    } while (0)

/* Philox's ten rounds on 16 counters (a, b, t_lo, tag): words[0 .. 3] */
__attribute__((target("avx512f"), always_inline)) static inline void
philox16_avx512(__m512i a, __m512i b, uint32_t t_lo, uint32_t tag, uint32_t k0, uint32_t k1,
                __m512i words[4])
{
    PHILOX_WORDS(512, _mm512);
}

/* Both Box-Muller pairs of 16 counters' words: 64 doubles into out in counter order */
__attribute__((target("avx512f,avx512bw"), always_inline)) static inline void
gaussians16_avx512(const __m512i words[4], const log_tables_avx512 *tables, double *out)
{
    __m512d first_low[2], first_high[2], second_low[2], second_high[2];
    box_muller16_avx512(words[0], words[1], tables, first_low, first_high);
    box_muller16_avx512(words[2], words[3], tables, second_low, second_high);
    /* low half: counters 0-1, 4-5, 8-9, 12-13 at out + 0, 16, 32, 48; high: 2-3, ... */
    store_interleaved_avx512(first_low[0], first_low[1], second_low[0], second_low[1], out, 0,
                             32);
    store_interleaved_avx512(first_high[0], first_high[1], second_high[0], second_high[1], out,
                             8, 40);
}

/* Where noise_lanes_avx512 takes its counters' words 0 and 1 from: lane arrays (c0 != NULL,
 * noise_rows' general path), or computed from each counter's index q (first + lane) when the
 * output is whole groups of consecutive rows and the group count is 2^group_bits: word 0 is
 * the group, q mod 2^group_bits, and word 1 the row, first_row + (q >> group_bits), which
 * are what the lane arrays would hold. The samplers ask for a few hundred counters per call
 * (a tile of 16 rows at K = 32), and there filling the lane arrays cost about as much as a
 * fifth of the noise itself. */
typedef struct {
    const uint32_t *c0, *c1;
    uint32_t first_row;
    int group_bits;
} noise_counters;

/* Words 0 and 1 of counters first .. first + 15 (those below n; from arrays, zeros in the
 * lanes past n: their Gaussians are never stored) */
__attribute__((target("avx512f"), always_inline)) static inline void
counters16_avx512(const noise_counters *counters, uint32_t first, uint32_t n, __m512i *c0v,
                  __m512i *c1v)
{
    if (counters->c0 == NULL) {
        const __m512i q = _mm512_add_epi32(
            _mm512_set1_epi32((int)first),
            _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0));
        *c0v = _mm512_and_si512(q, _mm512_set1_epi32((int)((1u << counters->group_bits) - 1u)));
        *c1v = _mm512_add_epi32(_mm512_srli_epi32(q, (unsigned)counters->group_bits),
                                _mm512_set1_epi32((int)counters->first_row));
    } else if (first + 16 <= n) {
        *c0v = _mm512_loadu_si512((const void *)(counters->c0 + first));
        *c1v = _mm512_loadu_si512((const void *)(counters->c1 + first));
    } else {
        const __mmask16 below_n = (__mmask16)((1u << (n - first)) - 1u);
        *c0v = _mm512_maskz_loadu_epi32(below_n, counters->c0 + first);
        *c1v = _mm512_maskz_loadu_epi32(below_n, counters->c1 + first);
    }
}

/* The loop of noise_lanes_avx512 and noise_lanes_avx2 (in scope: counters, n, t_lo, tag, k0,
 * k1, out), for `lanes` counters a vector: each pass runs Philox for the next counters
 * (counters_of, philox_of) before Box-Muller of the current ones (gaussians_into(words,
 * dst), 4 lanes doubles), the last n % lanes through a local block of which only theirs are
 * copied */
#define NOISE_PIPELINE(vec, lanes, counters_of, philox_of, gaussians_into)                  \
    do {                                                                                     \
        vec words[4], c0v, c1v;                                                              \
        counters_of(counters, 0, n, &c0v, &c1v);                                             \
        philox_of(c0v, c1v, t_lo, tag, k0, k1, words);                                       \
        for (uint32_t l = 0; l < n; l += (lanes)) {                                          \
            vec next[4] = {words[0], words[1], words[2], words[3]}; /* unused on the last */ \
            if (n - l > (lanes)) {                                                           \
                counters_of(counters, l + (lanes), n, &c0v, &c1v);                           \
                philox_of(c0v, c1v, t_lo, tag, k0, k1, next);                                \
            }                                                                                \
            if (n - l >= (lanes)) {                                                          \
                gaussians_into(words, out + 4 * (size_t)l);                                  \
            } else {                                                                         \
                double block[4 * (lanes)];                                                   \
                gaussians_into(words, block);                                                \
                memcpy(out + 4 * (size_t)l, block, sizeof(double) * 4 * (size_t)(n - l));    \
            }                                                                                \
            for (int i = 0; i < 4; ++i)                                                      \
                words[i] = next[i];                                                          \
        }                                                                                    \
    } while (0)

/* The noise of n counters (words 0 and 1 from `counters`, t_lo, tag) under key (k0, k1):
 * out[4 l + i] is Gaussian i of counter l, as box_muller_lanes of philox_lanes' words would
 * give. Each pass of the loop runs Philox for the next 16 counters before Box-Muller for
 * the current ones: the two are independent, so the out-of-order core overlaps Philox's
 * latency-bound rounds with the polynomials (about 7 % faster than Philox and Box-Muller of
 * the same 16 in turn: median ratio of 9 alternated pairs, on a loaded machine). The last
 * n % 16 counters go through a local block, of which only theirs are copied. */
__attribute__((target("avx512f,avx512bw"))) static void
noise_lanes_avx512(const noise_counters *counters, uint32_t n, uint32_t t_lo, uint32_t tag,
                   uint32_t k0, uint32_t k1, double *out)
{
    const log_tables_avx512 tables = {
        _mm512_loadu_pd(pymf_log_inverse_c), _mm512_loadu_pd(pymf_log_inverse_c + 8),
        _mm512_loadu_pd(pymf_log_minus_2_log_c), _mm512_loadu_pd(pymf_log_minus_2_log_c + 8)};
#define GAUSSIANS16(words, dst) gaussians16_avx512(words, &tables, dst)
    NOISE_PIPELINE(__m512i, 16, counters16_avx512, philox16_avx512, GAUSSIANS16);
#undef GAUSSIANS16
}

/* AVX2 + FMA (CPUs without AVX-512, such as AMD's Zen 2 and 3): noise_lanes_avx512's whole
 * transform on 8 counters at a time, in 4-lane registers. Where the passes of
 * box_muller_lanes stored and reloaded every intermediate and looked the log's constants up
 * one lane at a time (4.8-5.6 ns per Gaussian on an AMD EPYC, against 1.9-2.0 for the
 * AVX-512 function on an Intel Xeon), this keeps them in registers. What AVX-512 does in
 * one instruction takes a few here: the two 16-entry lookups are gathers (AVX2 has no
 * two-table permute), the exponent is pymf_minus_2_log_reduced's own 2^52 trick (no
 * vgetexppd), the three-input bit selects are and/or/xor, the swap of odd quarter turns a
 * blend on the sign bit. Every rounded operation is pymf_box_muller's, in its order, each
 * fma() one _mm256_fmadd_pd, and the replaced steps are the exact integer and bit
 * operations that box_muller_avx512's comment derives: the same bits
 * (bench/noise_words_exhaustive.c checks every word on this path too). */
#define AVX2_INLINE __attribute__((target("avx2,fma"), always_inline)) static inline

/* z0, z1 of pymf_box_muller for 4 word pairs (box_muller_avx512's arguments, 4 lanes) */
AVX2_INLINE void box_muller_avx2(__m256i with_exponent_a, __m256i angle_bits, __m256i n_bits,
                                 __m256d *z0, __m256d *z1)
{
    const __m256d one = _mm256_set1_pd(1.0);
    const __m256d a_half = _mm256_sub_pd(_mm256_castsi256_pd(with_exponent_a),
                                         _mm256_set1_pd(4503599627370496.0 - 0.5));
    const __m256i bits = _mm256_sub_epi64(_mm256_castpd_si256(a_half),
                                          _mm256_set1_epi64x(EXPONENT_FIELD(32)));
    const __m256i interval = _mm256_and_si256(_mm256_srli_epi64(bits, 48),
                                              _mm256_set1_epi64x(15));
    const __m256d inverse_c = _mm256_i64gather_pd(pymf_log_inverse_c, interval, 8);
    const __m256d minus_2_log_c = _mm256_i64gather_pd(pymf_log_minus_2_log_c, interval, 8);
    const __m256d exponent = _mm256_sub_pd(
        _mm256_castsi256_pd(_mm256_or_si256(_mm256_srli_epi64(bits, 52),
                                            _mm256_set1_epi64x(0x4330000000000000ll))),
        _mm256_set1_pd(4503599627370496.0 + 1023.0));
    const __m256d m = _mm256_castsi256_pd(
        _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi64x(0x000FFFFFFFFFFFFFll)),
                        _mm256_set1_epi64x(0x3FF0000000000000ll)));
    __m256d square_radius;
    BM_SQUARE_RADIUS(256, m, inverse_c, minus_2_log_c, exponent, square_radius);
    __m256d signed_t, t2, s, c;
    BM_ANGLE(256, angle_bits, signed_t, t2, s, c);
    /* pymf_flip_sign(sqrt, n << 62): n's bit 1 is bit 63 of n_bits */
    const __m256d radius = _mm256_castsi256_pd(_mm256_xor_si256(
        _mm256_castpd_si256(_mm256_sqrt_pd(square_radius)),
        _mm256_and_si256(n_bits, _mm256_set1_epi64x((long long)0x8000000000000000ull))));
    const __m256d along_sin = _mm256_mul_pd(radius, _mm256_mul_pd(s, signed_t));
    const __m256d along_cos = _mm256_mul_pd(radius, _mm256_fmadd_pd(c, t2, one));
    /* odd n (n_bits' bit 62) moved to the sign bit, which vblendvpd reads */
    const __m256d odd = _mm256_castsi256_pd(_mm256_slli_epi64(n_bits, 1));
    *z0 = _mm256_blendv_pd(along_cos, along_sin, odd);
    *z1 = _mm256_blendv_pd(along_sin, along_cos, odd);
}

/* Both Box-Muller pairs of 8 counters' words a, b: counters 0, 1, 4, 5 (low) and 2, 3, 6, 7
 * (high), as 32-bit interleaves within each 128-bit half make them (box_muller16_avx512's
 * steps) */
AVX2_INLINE void box_muller8_avx2(__m256i a, __m256i b, __m256d z_low[2], __m256d z_high[2])
{
    const __m256i exponent_of_2_52 = _mm256_set1_epi32(0x43300000);
    const __m256i x = _mm256_add_epi32(b, _mm256_set1_epi32(1 << 29));
    /* 2 f + 1 with odd n's complement: bits 1-31 (x << 1) xor its sign spread, bit 0 one */
    const __m256i shifted = _mm256_slli_epi32(x, 1);
    const __m256i angle = _mm256_or_si256(
        _mm256_and_si256(_mm256_xor_si256(shifted, _mm256_srai_epi32(shifted, 31)),
                         _mm256_set1_epi32((int)0xFFFFFFFEu)),
        _mm256_set1_epi32(1));
    box_muller_avx2(_mm256_unpacklo_epi32(a, exponent_of_2_52),
                    _mm256_unpacklo_epi32(angle, exponent_of_2_52),
                    _mm256_unpacklo_epi32(x, x), &z_low[0], &z_low[1]);
    box_muller_avx2(_mm256_unpackhi_epi32(a, exponent_of_2_52),
                    _mm256_unpackhi_epi32(angle, exponent_of_2_52),
                    _mm256_unpackhi_epi32(x, x), &z_high[0], &z_high[1]);
}

/* The four Gaussians of 4 counters (their z0 .. z3 vectors, one counter per lane) as four
 * runs of 4 at out + offsets[0 .. 1] and 4 further (a 4 x 4 transpose) */
AVX2_INLINE void store_interleaved_avx2(__m256d z0, __m256d z1, __m256d z2, __m256d z3,
                                        double *out, int first_offset, int second_offset)
{
    const __m256d t0 = _mm256_unpacklo_pd(z0, z1), t1 = _mm256_unpackhi_pd(z0, z1);
    const __m256d t2 = _mm256_unpacklo_pd(z2, z3), t3 = _mm256_unpackhi_pd(z2, z3);
    _mm256_storeu_pd(out + first_offset, _mm256_permute2f128_pd(t0, t2, 0x20));
    _mm256_storeu_pd(out + first_offset + 4, _mm256_permute2f128_pd(t1, t3, 0x20));
    _mm256_storeu_pd(out + second_offset, _mm256_permute2f128_pd(t0, t2, 0x31));
    _mm256_storeu_pd(out + second_offset + 4, _mm256_permute2f128_pd(t1, t3, 0x31));
}

/* Philox's ten rounds on 8 counters (a, b, t_lo, tag): words[0 .. 3] */
AVX2_INLINE void philox8_avx2(__m256i a, __m256i b, uint32_t t_lo, uint32_t tag, uint32_t k0,
                              uint32_t k1, __m256i words[4])
{
    PHILOX_WORDS(256, _mm256);
}

/* Both Box-Muller pairs of 8 counters' words: 32 doubles into out in counter order */
AVX2_INLINE void gaussians8_avx2(const __m256i words[4], double *out)
{
    __m256d first_low[2], first_high[2], second_low[2], second_high[2];
    box_muller8_avx2(words[0], words[1], first_low, first_high);
    box_muller8_avx2(words[2], words[3], second_low, second_high);
    /* low: counters 0, 1, 4, 5 at out + 0, 4, 16, 20; high: 2, 3, 6, 7 at 8, 12, 24, 28 */
    store_interleaved_avx2(first_low[0], first_low[1], second_low[0], second_low[1], out, 0,
                           16);
    store_interleaved_avx2(first_high[0], first_high[1], second_high[0], second_high[1], out,
                           8, 24);
}

/* Words 0 and 1 of counters first .. first + 7 (counters16_avx512's, 8 lanes; zeros past
 * n, whose Gaussians are never stored) */
AVX2_INLINE void counters8_avx2(const noise_counters *counters, uint32_t first, uint32_t n,
                                __m256i *c0v, __m256i *c1v)
{
    if (counters->c0 == NULL) {
        const __m256i q = _mm256_add_epi32(_mm256_set1_epi32((int)first),
                                           _mm256_set_epi32(7, 6, 5, 4, 3, 2, 1, 0));
        *c0v = _mm256_and_si256(q, _mm256_set1_epi32((int)((1u << counters->group_bits) - 1u)));
        *c1v = _mm256_add_epi32(_mm256_srl_epi32(q, _mm_cvtsi32_si128(counters->group_bits)),
                                _mm256_set1_epi32((int)counters->first_row));
    } else if (first + 8 <= n) {
        *c0v = _mm256_loadu_si256((const __m256i *)(counters->c0 + first));
        *c1v = _mm256_loadu_si256((const __m256i *)(counters->c1 + first));
    } else {
        uint32_t a[8] = {0}, b[8] = {0};
        for (uint32_t l = 0; l < n - first; ++l) {
            a[l] = counters->c0[first + l];
            b[l] = counters->c1[first + l];
        }
        *c0v = _mm256_loadu_si256((const __m256i *)a);
        *c1v = _mm256_loadu_si256((const __m256i *)b);
    }
}

/* noise_lanes_avx512 on AVX2 + FMA: n counters, out[4 l + i] Gaussian i of counter l; Philox
 * of the next 8 counters issued before Box-Muller of the current 8, as there */
__attribute__((target("avx2,fma"))) static void
noise_lanes_avx2(const noise_counters *counters, uint32_t n, uint32_t t_lo, uint32_t tag,
                 uint32_t k0, uint32_t k1, double *out)
{
    NOISE_PIPELINE(__m256i, 8, counters8_avx2, philox8_avx2, gaussians8_avx2);
}
#endif

/* Row r of the output holds the noise of counter row ids[r] (ids != NULL) or first_row + r. */
PYMF_VECTOR_CLONES
static void noise_rows(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row,
                       const uint32_t *ids, uint32_t n_rows, int rank, double *out)
{
    const uint32_t groups = (uint32_t)((rank + 3) / 4);
    const uint32_t total = groups * n_rows;
    const uint32_t t_lo = (uint32_t)t, tag = stream | ((uint32_t)(t >> 32) << 8);
    const uint32_t key0 = (uint32_t)seed, key1 = (uint32_t)(seed >> 32);
    uint32_t c0[PYMF_NOISE_LANES], c1[PYMF_NOISE_LANES], c2[PYMF_NOISE_LANES], c3[PYMF_NOISE_LANES];
    double z[4][PYMF_NOISE_LANES], square_radius[PYMF_NOISE_LANES];
    double inverse_c[PYMF_NOISE_LANES], minus_2_log_c[PYMF_NOISE_LANES];
    double four_slots[4 * PYMF_NOISE_LANES];
    /* the whole transform in registers: AVX-512, 16 counters at a time, or AVX2 + FMA, 8 */
    int fused = 0, fused_avx2 = 0;
#if defined(__GNUC__) && defined(__x86_64__) && !defined(PYMF_NO_CLONES)
    fused = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
    fused_avx2 = !fused && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    /* whole rows: lane l of a chunk is slots 4g .. 4g + 3 of one row, and when rank is a
     * multiple of 4 the chunk's output is one contiguous run of out */
    const int whole_groups = rank % 4 == 0;
#if defined(__GNUC__) && defined(__x86_64__) && !defined(PYMF_NO_CLONES)
    /* consecutive rows of a power-of-two count of whole groups (K = 4, 8, 16, 32, 64, ...):
     * every counter from its index in registers, the whole output in one call */
    if ((fused || fused_avx2) && whole_groups && ids == NULL && (groups & (groups - 1)) == 0) {
        const noise_counters counters = {NULL, NULL, first_row, __builtin_ctz(groups)};
        if (fused)
            noise_lanes_avx512(&counters, total, t_lo, tag, key0, key1, out);
        else
            noise_lanes_avx2(&counters, total, t_lo, tag, key0, key1, out);
        return;
    }
#endif
    /* lane l of the current chunk is group lane_group[l] of output row lane_row[l]: counted
     * for the first chunk's lanes (no per-lane division: the samplers ask for a few hundred
     * counters per call), then every lane moves on by PYMF_NOISE_LANES entries from one
     * chunk to the next (a vector loop) */
    uint32_t lane_group[PYMF_NOISE_LANES], lane_row[PYMF_NOISE_LANES];
    const uint32_t first_lanes = total < PYMF_NOISE_LANES ? total : PYMF_NOISE_LANES;
    for (uint32_t l = 0, g = 0, r = 0; l < first_lanes; ++l) {
        lane_group[l] = g;
        lane_row[l] = r;
        if (++g == groups) {
            g = 0;
            ++r;
        }
    }
    const uint32_t step_group = PYMF_NOISE_LANES % groups, step_row = PYMF_NOISE_LANES / groups;
    uint32_t row = 0, group = 0;  /* output row and group of the chunk's first lane */
    for (uint32_t start = 0; start < total; start += PYMF_NOISE_LANES) {
        const int n = (int)(total - start < PYMF_NOISE_LANES ? total - start : PYMF_NOISE_LANES);
        if (ids != NULL)
            for (int l = 0; l < n; ++l)
                c1[l] = ids[lane_row[l]];
        else
            for (int l = 0; l < n; ++l)
                c1[l] = first_row + lane_row[l];
        for (int l = 0; l < n; ++l) {
            c0[l] = lane_group[l];
            const uint32_t next = lane_group[l] + step_group;
            const uint32_t wrap = next >= groups;
            lane_group[l] = wrap ? next - groups : next;
            lane_row[l] += step_row + wrap;
        }
        /* the chunk's Gaussians in counter order: straight into out for whole groups,
         * else into four_slots for the scatter below */
        double *dst = whole_groups ? out + 4 * (size_t)start : four_slots;
        if (fused || fused_avx2) {
#if defined(__GNUC__) && defined(__x86_64__) && !defined(PYMF_NO_CLONES)
            const noise_counters counters = {c0, c1, 0, 0};
            if (fused)
                noise_lanes_avx512(&counters, (uint32_t)n, t_lo, tag, key0, key1, dst);
            else
                noise_lanes_avx2(&counters, (uint32_t)n, t_lo, tag, key0, key1, dst);
#endif
        } else {
            for (int l = 0; l < n; ++l) {
                c2[l] = t_lo;
                c3[l] = tag;
            }
            philox_lanes(n, c0, c1, c2, c3, key0, key1);
            box_muller_lanes(n, c0, c1, inverse_c, minus_2_log_c, square_radius, z[0], z[1]);
            box_muller_lanes(n, c2, c3, inverse_c, minus_2_log_c, square_radius, z[2], z[3]);
            for (int l = 0; l < n; ++l)
                for (int slot = 0; slot < 4; ++slot)
                    dst[4 * l + slot] = z[slot][l];
        }
        if (whole_groups)
            continue;
        /* scatter: lane l holds slots 4g..4g+3 of its row, so a row's lanes in this chunk
         * hold a contiguous run of its entries, of which those >= rank (the last group's
         * tail) are dropped: one copy per row, not a test per slot (which took most of
         * this function's time at DSGLD's widths of 11) */
        for (int l = 0; l < n;) {
            const int lanes = (int)(groups - group) < n - l ? (int)(groups - group) : n - l;
            const int base = 4 * (int)group;
            const int entries = 4 * lanes < rank - base ? 4 * lanes : rank - base;
            double *restrict row_out = out + (size_t)row * (size_t)rank + base;
            const double *restrict slots = four_slots + 4 * l;
            for (int e = 0; e < entries; ++e)
                row_out[e] = slots[e];
            l += lanes;
            group += (uint32_t)lanes;
            if (group == groups) {
                group = 0;
                ++row;
            }
        }
    }
}

void pymf_noise_rows(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row,
                     uint32_t n_rows, int rank, double *out)
{
    noise_rows(seed, stream, t, first_row, NULL, n_rows, rank, out);
}

void pymf_noise_row_list(uint64_t seed, uint32_t stream, uint64_t t, const uint32_t *rows,
                         uint32_t n_rows, int rank, double *out)
{
    noise_rows(seed, stream, t, 0, rows, n_rows, rank, out);
}

PYMF_VECTOR_CLONES
void pymf_philox_words(uint64_t seed, uint32_t stream, uint64_t t, uint32_t row,
                       uint32_t n_groups, uint32_t *out)
{
    const uint32_t t_lo = (uint32_t)t, tag = stream | ((uint32_t)(t >> 32) << 8);
    uint32_t c0[PYMF_NOISE_LANES], c1[PYMF_NOISE_LANES], c2[PYMF_NOISE_LANES], c3[PYMF_NOISE_LANES];
    for (uint32_t start = 0; start < n_groups; start += PYMF_NOISE_LANES) {
        const int n = (int)(n_groups - start < PYMF_NOISE_LANES ? n_groups - start : PYMF_NOISE_LANES);
        for (int l = 0; l < n; ++l) {
            c0[l] = start + (uint32_t)l;
            c1[l] = row;
            c2[l] = t_lo;
            c3[l] = tag;
        }
        philox_lanes(n, c0, c1, c2, c3, (uint32_t)seed, (uint32_t)(seed >> 32));
        for (int l = 0; l < n; ++l) {
            uint32_t *dst = out + 4 * (size_t)(start + (uint32_t)l);
            dst[0] = c0[l];
            dst[1] = c1[l];
            dst[2] = c2[l];
            dst[3] = c3[l];
        }
    }
}
