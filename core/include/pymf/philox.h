/*
 * pymf/philox.h: Philox4x32-10 (Salmon et al., SC'11) and the Gaussian noise of the
 * Langevin samplers, compiled by both the C compiler and nvcc (PYMF_HD).
 *
 * Why a counter-based generator: the noise of entry (row, k) of W or H at iteration t is a
 * pure function of (seed, stream, t, row, k). No generator state has to be carried between
 * threads, around an MPI ring or into a checkpoint, and the chain does not depend on which
 * thread or rank computes which block. The iteration counter is the whole RNG state.
 *
 * Counter layout of one Philox call (4 x 32 bits):
 *   ctr[0] = k / 4 (group of four factor columns), ctr[1] = row,
 *   ctr[2] = low 32 bits of t, ctr[3] = stream tag | high bits of t << 8
 * key = the two 32-bit halves of the 64-bit noise seed.
 * One call yields four Gaussians (two Box-Muller pairs): slots k % 4 = 0..3.
 */
#ifndef PYMF_PHILOX_H
#define PYMF_PHILOX_H

#include "pymf/common.h"

#ifndef __CUDACC__
#include <math.h>
#include <string.h>
#endif

/* Streams: which parameter matrix a noise draw belongs to. */
#define PYMF_STREAM_W 1u
#define PYMF_STREAM_H 2u

#define PYMF_PHILOX_M0 0xD2511F53u
#define PYMF_PHILOX_M1 0xCD9E8D57u
#define PYMF_PHILOX_W0 0x9E3779B9u
#define PYMF_PHILOX_W1 0xBB67AE85u

PYMF_HD void pymf_philox4x32_10(const uint32_t ctr_in[4], const uint32_t key_in[2],
                                uint32_t out[4])
{
    uint32_t c0 = ctr_in[0], c1 = ctr_in[1], c2 = ctr_in[2], c3 = ctr_in[3];
    uint32_t k0 = key_in[0], k1 = key_in[1];
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k0 += PYMF_PHILOX_W0;
            k1 += PYMF_PHILOX_W1;
        }
        const uint64_t p0 = (uint64_t)PYMF_PHILOX_M0 * (uint64_t)c0;
        const uint64_t p1 = (uint64_t)PYMF_PHILOX_M1 * (uint64_t)c2;
        const uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        const uint32_t n1 = (uint32_t)p1;
        const uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        const uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

/* A 32-bit word to a uniform in the open interval (0, 1): (x + 1/2) / 2^32. x + 1/2 is
 * computed as the signed word x - 2^31 (its top bit flipped) plus 2^31 + 1/2: the same
 * exact value, but a signed 32-bit conversion is one vector instruction on every x86 level
 * (an unsigned one is not before AVX-512, where the compiler adds a compare and a fix-up). */
PYMF_HD double pymf_uniform_open(uint32_t x)
{
    return ((double)(int32_t)(x ^ 0x80000000u) + 2147483648.5) * 2.3283064365386963e-10;
}

/* -2 log(u) for u in (0, 1), the square of Box-Muller's radius, with |relative error|
 * < 5e-14 (bench/box_muller_fits.py; bounded in tests/test_rng.py against a long double
 * reference), branch-free and without division (a vector division runs on the same slow
 * divider unit as the radius's sqrt). u = m 2^e with m in [1, 2); the top four bits of m's
 * mantissa pick one of 16 intervals [1 + i/16, 1 + (i+1)/16) and its point c_i (1 for
 * i = 0, 2 for i = 15, the middle otherwise), whose 1/c_i (rounded; PYMF_LOG_INVERSE_C) and
 * -2 log(1/c_i rounded) (PYMF_LOG_MINUS_2_LOG_C) are looked up: r = m (1/c_i) - 1 has
 * |r| <= 1/16, and
 * -2 log u = (e (-2 log 2) + T_i) - 2 log1p(r), -2 log1p(r) = -2 r + r^2 + r^3 P(r), P the
 * degree-5 near-minimax fit of -2 (log1p(r) - r + r^2/2) / r^3 on [-1/32, 1/16] (the factor
 * -2 is exact in every coefficient), by Estrin's scheme (a shorter dependency chain).
 * Near u = 1 (e = -1, i = 15) r = m / 2 - 1 is exact and e (-2 log 2) + T_15 = 0 exactly,
 * so the result keeps its relative accuracy where log u is near 0 (with the fma below too:
 * -1 (-2 log 2) is exact). The CPU's lane loops look the constants up with one vector
 * permutation each (core/src/philox.c); any lookup gives the same bits.
 *
 * Every product-and-sum here and in the angle's polynomials (pymf_box_muller_rotate) is one
 * explicit C99 fma(): one rounding instead of two, and one operation instead of two on the
 * CPU's vector floating-point port, which bounds the noise's speed (AVX-512 Xeons run
 * 512-bit arithmetic on one port). An explicit fma() is correctly rounded on every machine
 * (an FMA instruction in the x86-64-v3 / v4 clones and _mm512_fmadd_pd / _mm256_fmadd_pd in
 * core/src/philox.c's vector code, glibc's exact software fma in the baseline clone, CUDA's
 * fma on a GPU), so all of them give the same bits, as pymf/linalg.h's fused dot products
 * do; floating-point contraction stays off in the C build (-std=c99), so the compiler fuses
 * nothing else. The products left unfused are exact (2 r, the angle's scalings by powers of
 * 2) or feed no sum (r^2, r^4, t^2 and the radius times sin and cos), so nvcc's contraction
 * of a * b + c cannot change them either. */
#define PYMF_LOG_INVERSE_C                                                                     \
    {1.0, 0.9142857142857143, 0.8648648648648649, 0.8205128205128205, 0.7804878048780488,     \
     0.7441860465116279, 0.7111111111111111, 0.6808510638297872, 0.6530612244897959,          \
     0.6274509803921569, 0.6037735849056604, 0.5818181818181818, 0.5614035087719298,          \
     0.5423728813559322, 0.5245901639344263, 0.5}
#define PYMF_LOG_MINUS_2_LOG_C                                                                 \
    {0.0, -0.17922431737937433, -0.29036401968899567, -0.39565148665983985,                   \
     -0.4956723278091624, -0.5909284257876718, -0.6818531739411864, -0.7688233978206641,      \
     -0.8521687906218003, -0.9321794598491985, -1.0091120215047906, -1.0831945648654888,      \
     -1.1546307300696472, -1.2236030822119859, -1.2902759227471694, -1.3862943611198906}
#if defined(__CUDACC__)
/* device code reads __constant__ memory, nvcc's host pass the host copy */
__constant__ double pymf_log_inverse_c_device[16] = PYMF_LOG_INVERSE_C;
__constant__ double pymf_log_minus_2_log_c_device[16] = PYMF_LOG_MINUS_2_LOG_C;
#endif
static const double pymf_log_inverse_c[16] = PYMF_LOG_INVERSE_C;
static const double pymf_log_minus_2_log_c[16] = PYMF_LOG_MINUS_2_LOG_C;

/* which of the 16 intervals u's mantissa lies in */
PYMF_HD unsigned pymf_log_interval(double u)
{
    uint64_t bits;
    memcpy(&bits, &u, sizeof bits);
    return (unsigned)(bits >> 48) & 15u;
}

/* -2 log u from the looked-up constants of u's interval */
PYMF_HD double pymf_minus_2_log_reduced(double u, double inverse_c, double minus_2_log_c)
{
    uint64_t bits;
    memcpy(&bits, &u, sizeof bits);
    /* the biased exponent as a double without an integer conversion (which SSE2 cannot do
     * on 64-bit lanes): the bits of 2^52 + e, minus 2^52 */
    const uint64_t exponent_bits = 0x4330000000000000ull | (bits >> 52);
    double exponent;
    memcpy(&exponent, &exponent_bits, sizeof exponent);
    exponent -= 4503599627370496.0 + 1023.0;
    bits = (bits & 0x000FFFFFFFFFFFFFull) | 0x3FF0000000000000ull;
    double m;
    memcpy(&m, &bits, sizeof m);
    /* every product-and-sum one fma (the comment on the constants above says why) */
    const double r = fma(m, inverse_c, -1.0), r2 = r * r;
    const double p = fma(fma(0.22535547070136794, r, -0.2852807523429813), r2 * r2,
                         fma(fma(0.33336853848956083, r, -0.40000097204103835), r2,
                             fma(0.49999998770775955, r, -0.6666666663370293)));
    const double minus_2_log1p_r = fma(fma(p, r, 1.0), r2, -2.0 * r);
    return fma(exponent, -1.3862943611198906, minus_2_log_c) + minus_2_log1p_r;
}

PYMF_HD double pymf_minus_2_log_unit(double u)
{
    const unsigned i = pymf_log_interval(u);
#if defined(__CUDA_ARCH__)
    return pymf_minus_2_log_reduced(u, pymf_log_inverse_c_device[i],
                                    pymf_log_minus_2_log_c_device[i]);
#else
    return pymf_minus_2_log_reduced(u, pymf_log_inverse_c[i], pymf_log_minus_2_log_c[i]);
#endif
}

/* Box-Muller: two 32-bit words to two independent standard Gaussians, in two steps (the
 * squared radius L = -2 log u from word a, then the pair from L and the angle of word b)
 * that the CPU's lane loops run as separate passes where the CPU lacks AVX-512 (with it,
 * one register-resident loop: core/src/philox.c), each short enough for out-of-order
 * execution to overlap the lanes' long dependency chains (polynomials, sqrt). The only
 * operation on the slow divider unit is the radius's sqrt, which overlaps the polynomials'
 * fused multiply-adds.
 *
 * The angle 2 pi u_b is cut exactly into n quarter turns and a remainder: t = 4 u_b - n in
 * [-1/2, 1/2] (4 u_b is exact, adding 2^52 + 2^51 rounds it to its nearest integer n and
 * leaves n in the sum's low mantissa bits, t is exact). sin(pi t / 2) = t S(t^2) and
 * cos(pi t / 2) = 1 + t^2 C(t^2) are near-minimax polynomials to t^11 and t^10 (absolute
 * errors 4e-15 and 6e-14, bench/box_muller_fits.py), evaluated by Horner's rule with each
 * step, and 1 + t^2 C, one fma (see the log above); with R = sqrt(L), b = R cos(pi t / 2)
 * and a = R sin(pi t / 2), the pair (R cos, R sin)(2 pi u_b) is (b, a), (-a, b), (-b, -a)
 * or (a, -b) for n mod 4 = 0 .. 3: odd n flip the sign of t (so of a) and swap the two,
 * n mod 4 = 2, 3 flip the sign of R (so of both); sign flips are exact bit operations, the
 * swap is a pair of selects (vector blends).
 *
 * Each Gaussian of a pair is within 2.5e-13 times the pair's radius of the exact transform
 * of the same words (tests/test_rng.py; before this transform 1e-14, a difference no
 * sampler can notice: 2.5e-13 relative is 1e-3 of float32's resolution). The 32-bit
 * uniforms bound |z| below sqrt(-2 log(2^-33)) = 6.76, a truncation at probability 1.4e-11
 * that no sampler here can notice. */
PYMF_HD double pymf_box_muller_square_radius(uint32_t a)
{
    return pymf_minus_2_log_unit(pymf_uniform_open(a));
}

/* x with its sign bit flipped where bit 63 of flip is set */
PYMF_HD double pymf_flip_sign(double x, uint64_t flip)
{
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    bits ^= flip & 0x8000000000000000ull;
    memcpy(&x, &bits, sizeof x);
    return x;
}

/* the pair from the squared radius L (of word a) and word b */
PYMF_HD void pymf_box_muller_rotate(double square_radius, uint32_t b, double *z0, double *z1)
{
    /* 4 u_b: pymf_uniform_open's sum scaled by 2^-30 rather than 2^-32 (the same value as
     * 4.0 * pymf_uniform_open(b), in one multiplication) */
    const double quarters =
        ((double)(int32_t)(b ^ 0x80000000u) + 2147483648.5) * 9.313225746154785e-10;
    const double shifted = quarters + 6755399441055744.0; /* 2^52 + 2^51 */
    const double t = quarters - (shifted - 6755399441055744.0), t2 = t * t;
    uint64_t n;
    memcpy(&n, &shifted, sizeof n);
    /* Horner, each step one fma (the comment on the log's constants says why) */
    double s = -3.556381664733624e-06;
    s = fma(s, t2, 0.00016042926595779118);
    s = fma(s, t2, -0.0046817525926455324);
    s = fma(s, t2, 0.07969262615597134);
    s = fma(s, t2, -0.645964097504324);
    s = fma(s, t2, 1.570796326794892);
    double c = -2.4857074310015385e-05;
    c = fma(c, t2, 0.0009191659062464877);
    c = fma(c, t2, -0.02086346903304004);
    c = fma(c, t2, 0.25366950726448945);
    c = fma(c, t2, -1.2337005501249476);
    const double radius = pymf_flip_sign(sqrt(square_radius), n << 62); /* n mod 4 = 2, 3 */
    const double along_sin = radius * (s * pymf_flip_sign(t, n << 63)); /* odd n */
    const double along_cos = radius * fma(c, t2, 1.0);
    /* odd n swap the two: a bit mask rather than a select, which SSE2 (no 64-bit compare)
     * would not vectorise */
    const uint64_t odd = 0 - (n & 1);
    uint64_t sin_bits, cos_bits;
    memcpy(&sin_bits, &along_sin, sizeof sin_bits);
    memcpy(&cos_bits, &along_cos, sizeof cos_bits);
    const uint64_t first = (sin_bits & odd) | (cos_bits & ~odd);
    const uint64_t second = (cos_bits & odd) | (sin_bits & ~odd);
    memcpy(z0, &first, sizeof first);
    memcpy(z1, &second, sizeof second);
}

PYMF_HD void pymf_box_muller(uint32_t a, uint32_t b, double *z0, double *z1)
{
    pymf_box_muller_rotate(pymf_box_muller_square_radius(a), b, z0, z1);
}

/* Four standard Gaussians for (seed, stream, t, row, k_group). */
PYMF_HD void pymf_noise_gauss4(uint64_t seed, uint32_t stream, uint64_t t, uint32_t row,
                               uint32_t k_group, double out[4])
{
    const uint32_t ctr[4] = {k_group, row, (uint32_t)t,
                             stream | ((uint32_t)(t >> 32) << 8)};
    const uint32_t key[2] = {(uint32_t)seed, (uint32_t)(seed >> 32)};
    uint32_t bits[4];
    pymf_philox4x32_10(ctr, key, bits);
    pymf_box_muller(bits[0], bits[1], &out[0], &out[1]);
    pymf_box_muller(bits[2], bits[3], &out[2], &out[3]);
}

/* The Gaussians of one whole row of K factor entries, slot k = 4 * group + lane. */
PYMF_HD void pymf_noise_row(uint64_t seed, uint32_t stream, uint64_t t, uint32_t row,
                            int rank, double *out)
{
    int k = 0;
    for (uint32_t group = 0; k < rank; ++group) {
        double four[4];
        pymf_noise_gauss4(seed, stream, t, row, group, four);
        for (int lane = 0; lane < 4 && k < rank; ++lane, ++k)
            out[k] = four[lane];
    }
}

#ifndef __CUDACC__
/* The Gaussians of rows first_row .. first_row + n_rows - 1 (each of `rank` entries, row-major
 * into out), equal bit for bit to pymf_noise_row row by row; computed many Philox counters
 * at a time in plain loops that the compiler vectorises. */
void pymf_noise_rows(uint64_t seed, uint32_t stream, uint64_t t, uint32_t first_row,
                     uint32_t n_rows, int rank, double *out);
/* The row width to ask pymf_noise_rows / pymf_noise_row_list for when `rank` entries of each
 * row are wanted: rank rounded up to a multiple of 4. A row's Gaussians come four per Philox
 * counter, so its first rank entries are the same whatever width is asked for, and whole
 * groups of four are written straight into out, where any other width makes the generator
 * copy each row out of a scratch block (1.1-2.3x the time at rank 3-50, bench/noise_ab.c
 * pad). The caller reads row r's entries at out + r * pymf_noise_width(rank). */
static inline int pymf_noise_width(int rank) { return (rank + 3) / 4 * 4; }
/* The same for a list of (not necessarily contiguous) rows: out row r = pymf_noise_row of
 * rows[r]. */
void pymf_noise_row_list(uint64_t seed, uint32_t stream, uint64_t t, const uint32_t *rows,
                         uint32_t n_rows, int rank, double *out);
/* Raw Philox output for counters {g, row, t, stream} with g = 0 .. n_groups - 1: out[4 g + i]
 * is word i of counter g (4 n_groups words), computed many counters at a time. */
void pymf_philox_words(uint64_t seed, uint32_t stream, uint64_t t, uint32_t row,
                       uint32_t n_groups, uint32_t *out);
#endif

#endif
