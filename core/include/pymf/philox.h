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

/* A 32-bit word to a uniform in the open interval (0, 1): (x + 1/2) / 2^32. */
PYMF_HD double pymf_uniform_open(uint32_t x)
{
    return ((double)x + 0.5) * 2.3283064365386963e-10;
}

/* Box-Muller: two uniforms in (0,1) to two independent standard Gaussians. The 32-bit
 * uniforms bound |z| below sqrt(-2 log(2^-33)) = 6.76, a truncation at probability
 * 1.4e-11 that no sampler here can notice. */
PYMF_HD void pymf_box_muller(uint32_t a, uint32_t b, double *z0, double *z1)
{
    const double two_pi = 6.283185307179586;
    const double radius = sqrt(-2.0 * log(pymf_uniform_open(a)));
    const double angle = two_pi * pymf_uniform_open(b);
    *z0 = radius * cos(angle);
    *z1 = radius * sin(angle);
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

#endif
