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

/* log(u) for u in (0, 1], branch-free (selects only) so that loops over it vectorise, with
 * |relative error| < 1e-15: u = m 2^e with m in [sqrt(1/2), sqrt(2)), then
 * log m = 2 atanh(s), s = (m - 1)/(m + 1), |s| <= 0.1716, by its series to s^17. */
PYMF_HD double pymf_log_unit(double u)
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
    /* arithmetic rather than branches: 0 or 1 */
    const double halve = (double)(m > 1.4142135623730951);
    m *= 1.0 - 0.5 * halve;
    exponent += halve;
    const double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double series = 1.0 / 17.0;
    series = series * s2 + 1.0 / 15.0;
    series = series * s2 + 1.0 / 13.0;
    series = series * s2 + 1.0 / 11.0;
    series = series * s2 + 1.0 / 9.0;
    series = series * s2 + 1.0 / 7.0;
    series = series * s2 + 1.0 / 5.0;
    series = series * s2 + 1.0 / 3.0;
    series = series * s2 + 1.0;
    return 2.0 * s * series + exponent * 0.6931471805599453;
}

/* sin and cos of 2 pi u for u in [0, 1), branch-free, |error| < 1e-15: the angle is cut
 * exactly into quarter turns n and a remainder r in [-pi/4, pi/4] (q - n is exact), and
 * Taylor series of sin r (to r^15) and cos r (to r^16) are rotated by n quarter turns. */
PYMF_HD void pymf_sincos_2pi(double u, double *sin_out, double *cos_out)
{
    const double quarters = 4.0 * u;
    const int n = (int)(quarters + 0.5);
    const double r = (quarters - (double)n) * 1.5707963267948966, r2 = r * r;
    double sin_r = -1.0 / 1307674368000.0;
    sin_r = sin_r * r2 + 1.0 / 6227020800.0;
    sin_r = sin_r * r2 - 1.0 / 39916800.0;
    sin_r = sin_r * r2 + 1.0 / 362880.0;
    sin_r = sin_r * r2 - 1.0 / 5040.0;
    sin_r = sin_r * r2 + 1.0 / 120.0;
    sin_r = sin_r * r2 - 1.0 / 6.0;
    sin_r = (sin_r * r2) * r + r;
    double cos_r = 1.0 / 20922789888000.0;
    cos_r = cos_r * r2 - 1.0 / 87178291200.0;
    cos_r = cos_r * r2 + 1.0 / 479001600.0;
    cos_r = cos_r * r2 - 1.0 / 3628800.0;
    cos_r = cos_r * r2 + 1.0 / 40320.0;
    cos_r = cos_r * r2 - 1.0 / 720.0;
    cos_r = cos_r * r2 + 1.0 / 24.0;
    cos_r = cos_r * r2 - 0.5;
    cos_r = cos_r * r2 + 1.0;
    /* rotate by n quarter turns: selects (vector blends; the same values as the products
     * by 0 and 1 they replace, since r = +0 gives sin r = +0) and exact sign factors */
    const int swap = n & 1;
    const double sin_sign = 1.0 - (double)(n & 2);
    const double cos_sign = 1.0 - (double)((n + 1) & 2);
    *sin_out = sin_sign * (swap ? cos_r : sin_r);
    *cos_out = cos_sign * (swap ? sin_r : cos_r);
}

/* Box-Muller: two 32-bit words to two independent standard Gaussians, in two steps (the
 * radius from word a, then the rotation by the angle of word b) that the CPU's lane loops
 * run as separate passes, each short enough for out-of-order execution to overlap the
 * lanes' long dependency chains (division, series, sqrt). The 32-bit
 * uniforms bound |z| below sqrt(-2 log(2^-33)) = 6.76, a truncation at probability
 * 1.4e-11 that no sampler here can notice. */
PYMF_HD double pymf_box_muller_radius(uint32_t a)
{
    return sqrt(-2.0 * pymf_log_unit(pymf_uniform_open(a)));
}

/* the pair from the radius (of word a) and word b */
PYMF_HD void pymf_box_muller_rotate(double radius, uint32_t b, double *z0, double *z1)
{
    double sin_angle, cos_angle;
    pymf_sincos_2pi(pymf_uniform_open(b), &sin_angle, &cos_angle);
    *z0 = radius * cos_angle;
    *z1 = radius * sin_angle;
}

PYMF_HD void pymf_box_muller(uint32_t a, uint32_t b, double *z0, double *z1)
{
    pymf_box_muller_rotate(pymf_box_muller_radius(a), b, z0, z1);
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
