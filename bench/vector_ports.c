/* How many 512-bit instructions of each kind this core retires per nanosecond: twelve
 * independent chains of one instruction in registers, so throughput, not latency, is
 * timed. Which ports the noise's instructions share (core/src/philox.c) decides what bounds
 * it, and a shared virtual machine does not say which Xeon it is. Two instructions per
 * cycle at the clock for the floating-point and multiply rows, one for the shuffle and
 * shift rows, means two ports for the first kind and one for the second.
 *
 *   gcc -O2 -mavx512f bench/vector_ports.c -o vector_ports && ./vector_ports
 *
 * CPU time; the machine's other work slows every row alike, so compare rows of one run. */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define CHAIN_STEPS 50000000L

static double cpu_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

#define TWELVE(OP)                                                                            \
    x0 = OP(x0); x1 = OP(x1); x2 = OP(x2); x3 = OP(x3); x4 = OP(x4); x5 = OP(x5);              \
    x6 = OP(x6); x7 = OP(x7); x8 = OP(x8); x9 = OP(x9); x10 = OP(x10); x11 = OP(x11);

/* The asm statement keeps the twelve results alive without a store in the loop. */
#define RATE(name, type, SET, OP)                                                             \
    do {                                                                                      \
        type x0 = SET(1), x1 = SET(2), x2 = SET(3), x3 = SET(4), x4 = SET(5), x5 = SET(6);    \
        type x6 = SET(7), x7 = SET(8), x8 = SET(9), x9 = SET(10), x10 = SET(11), x11 = SET(12); \
        const double started = cpu_seconds();                                                 \
        for (long step = 0; step < CHAIN_STEPS; ++step) {                                     \
            TWELVE(OP)                                                                        \
        }                                                                                     \
        const double seconds = cpu_seconds() - started;                                       \
        __asm__ volatile("" ::"v"(x0), "v"(x1), "v"(x2), "v"(x3), "v"(x4), "v"(x5), "v"(x6),  \
                         "v"(x7), "v"(x8), "v"(x9), "v"(x10), "v"(x11));                      \
        printf("%-28s %5.2f per ns\n", name, 12.0 * CHAIN_STEPS / seconds * 1e-9);            \
    } while (0)

int main(void)
{
    const __m512i m = _mm512_set1_epi32(12345), k = _mm512_set1_epi32(77);
    const __m512d f = _mm512_set1_pd(0.99999999), c = _mm512_set1_pd(1e-9);
#define SET_I(v) _mm512_set1_epi32(v)
#define SET_D(v) _mm512_set1_pd(1.0 + (v))
#define FMADD(x) _mm512_fmadd_pd(x, f, c)
#define MULPD(x) _mm512_mul_pd(x, f)
#define MULUDQ(x) _mm512_mul_epu32(x, m)
#define TERNLOG(x) _mm512_ternarylogic_epi32(x, m, k, 0x96)
#define ADDD(x) _mm512_add_epi32(x, m)
#define SHUFD(x) _mm512_shuffle_epi32(x, (_MM_PERM_ENUM)0xB1)
#define SRLQ(x) _mm512_srli_epi64(x, 1)
#define SQRTPD(x) _mm512_sqrt_pd(x)
    RATE("vfmadd (fma)", __m512d, SET_D, FMADD);
    RATE("vmulpd", __m512d, SET_D, MULPD);
    RATE("vpmuludq (Philox multiply)", __m512i, SET_I, MULUDQ);
    RATE("vpternlogd (three-way xor)", __m512i, SET_I, TERNLOG);
    RATE("vpaddd", __m512i, SET_I, ADDD);
    RATE("vpshufd (32-bit swap)", __m512i, SET_I, SHUFD);
    RATE("vpsrlq (64-bit shift)", __m512i, SET_I, SRLQ);
    RATE("vsqrtpd", __m512d, SET_D, SQRTPD);
    return 0;
}
