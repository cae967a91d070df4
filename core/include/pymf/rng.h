/*
 * pymf/rng.h: seeding of the GSL streams.
 *
 * Draws that are not Langevin noise (SGLD minibatches, random part order, later the Gibbs
 * conjugate draws) come from GSL's mt19937. Rather than carrying a generator's state from
 * one iteration to the next, iteration t of a stream reseeds it with
 * pymf_stream_seed(stream_seed, t). The chain is then again a pure function of
 * (seed, t): checkpoints hold no generator state, MPI ranks agree without talking, and a
 * Python reference (pygsl's mt19937, set to the same number) reproduces the draws.
 */
#ifndef PYMF_RNG_H
#define PYMF_RNG_H

#include "pymf/common.h"

/* splitmix64 finaliser (Steele, Lea & Flood 2014): a bijective 64-bit mixer. */
static inline uint64_t pymf_mix64(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The 32-bit seed for iteration t of a stream; mt19937 uses 32 bits of its seed. */
static inline unsigned long pymf_stream_seed(uint64_t stream_seed, uint64_t t)
{
    return (unsigned long)(pymf_mix64(stream_seed ^ pymf_mix64(t)) >> 32);
}

#endif
