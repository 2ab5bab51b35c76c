/* CRC-32 (zlib's: reflected polynomial 0xEDB88320, pre- and post-inverted),
 * the same value as zlib.crc32, about 4x faster on large buffers: the merge
 * checks every chunk of the collection it reads, 16 bytes a fingerprint.
 *
 * Large buffers are folded 64 bytes at a time with carry-less multiplies
 * (PCLMULQDQ; "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ
 * Instruction", Intel, 2009): four 128-bit accumulators, each multiplied
 * forward by x^512 mod P and XORed with the next block, then folded into one
 * by x^128 mod P. The constants are the bit-reflected residues x^e mod P
 * shifted left by one (e = 544, 480 for 512 bits; 160, 96 for 128 bits),
 * derived and checked against zlib in tests/test_checksum.py. The last
 * 16-byte accumulator and the tail go through a byte table: the raw
 * (uninverted) CRC of the accumulator equals that of everything it folded.
 * With AVX-512 VPCLMULQDQ the same runs on 512-bit registers (sixteen
 * accumulators). Without PCLMULQDQ (or below 64 bytes), the byte table alone.
 */
#ifndef SIMDUP_CRC32_H
#define SIMDUP_CRC32_H
#include <stddef.h>
#include <stdint.h>

static uint32_t simdup_crc32_table[256];
static int simdup_crc32_ready = 0;

static void simdup_crc32_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int j = 0; j < 8; j++) c = (c >> 1) ^ ((c & 1) ? 0xEDB88320u : 0);
        simdup_crc32_table[i] = c;
    }
    simdup_crc32_ready = 1;
}

/* raw CRC: register in, register out (no inversions) */
static inline uint32_t simdup_crc32_bytes(uint32_t reg, const uint8_t *p, size_t n) {
    while (n--) reg = simdup_crc32_table[(reg ^ *p++) & 0xFF] ^ (reg >> 8);
    return reg;
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(_M_X64))
#define SIMDUP_CRC32_X86 1
#include <immintrin.h>

__attribute__((target("pclmul,sse2")))
static inline __m128i simdup_crc32_fold(__m128i x, __m128i k, __m128i next) {
    return _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00),
                                       _mm_clmulepi64_si128(x, k, 0x11)), next);
}

/* x^128 mod P, reflected, << 1 (e = 160, 96): the 16-byte fold */
#define SIMDUP_CRC32_K128 _mm_set_epi64x(0x0ccaa009eLL, 0x1751997d0LL)

/* Both kernels end alike: the accumulator x, then p[0..n) folded in 16 bytes
 * at a time, then the byte table over the accumulator and the tail. */
__attribute__((target("pclmul,sse2")))
static inline uint32_t simdup_crc32_finish(__m128i x, const uint8_t *p, size_t n) {
    while (n >= 16) {
        x = simdup_crc32_fold(x, SIMDUP_CRC32_K128, _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    uint8_t acc[16];
    _mm_storeu_si128((__m128i *)acc, x);
    return simdup_crc32_bytes(simdup_crc32_bytes(0, acc, 16), p, n);
}

/* raw CRC of p[0..n) from register reg; n >= 64 */
__attribute__((target("pclmul,sse2")))
static uint32_t simdup_crc32_pclmul(uint32_t reg, const uint8_t *p, size_t n) {
    const __m128i k512 = _mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL);   /* (hi, lo) */
    const __m128i k128 = SIMDUP_CRC32_K128;
    __m128i x0 = _mm_loadu_si128((const __m128i *)p);
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 48));
    x0 = _mm_xor_si128(x0, _mm_cvtsi32_si128((int)reg));
    p += 64;
    n -= 64;
    while (n >= 64) {
        x0 = simdup_crc32_fold(x0, k512, _mm_loadu_si128((const __m128i *)p));
        x1 = simdup_crc32_fold(x1, k512, _mm_loadu_si128((const __m128i *)(p + 16)));
        x2 = simdup_crc32_fold(x2, k512, _mm_loadu_si128((const __m128i *)(p + 32)));
        x3 = simdup_crc32_fold(x3, k512, _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    x0 = simdup_crc32_fold(x0, k128, x1);
    x0 = simdup_crc32_fold(x0, k128, x2);
    x0 = simdup_crc32_fold(x0, k128, x3);
    return simdup_crc32_finish(x0, p, n);
}

/* The same with AVX-512 VPCLMULQDQ: four 512-bit accumulators (16 lanes of
 * 128 bits) folded by x^2048 mod P (e = 2080, 2016), 256 bytes a round, then
 * folded into one 512-bit value by x^512 and its four lanes by x^128. Needs
 * n >= 256. */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse2")))
static inline __m512i simdup_crc32_fold512(__m512i x, __m512i k, __m512i next) {
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), next, 0x96);
}

__attribute__((target("avx512f,vpclmulqdq,pclmul,sse2")))
static uint32_t simdup_crc32_vpclmul(uint32_t reg, const uint8_t *p, size_t n) {
    const __m512i k2048 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1322d1430LL, 0x11542778aLL));
    const __m512i k512 = _mm512_broadcast_i32x4(_mm_set_epi64x(0x1c6e41596LL, 0x154442bd4LL));
    const __m128i k128 = SIMDUP_CRC32_K128;
    __m512i z0 = _mm512_loadu_si512((const void *)p);
    __m512i z1 = _mm512_loadu_si512((const void *)(p + 64));
    __m512i z2 = _mm512_loadu_si512((const void *)(p + 128));
    __m512i z3 = _mm512_loadu_si512((const void *)(p + 192));
    z0 = _mm512_xor_si512(z0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)reg)));
    p += 256;
    n -= 256;
    while (n >= 256) {
        z0 = simdup_crc32_fold512(z0, k2048, _mm512_loadu_si512((const void *)p));
        z1 = simdup_crc32_fold512(z1, k2048, _mm512_loadu_si512((const void *)(p + 64)));
        z2 = simdup_crc32_fold512(z2, k2048, _mm512_loadu_si512((const void *)(p + 128)));
        z3 = simdup_crc32_fold512(z3, k2048, _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    z0 = simdup_crc32_fold512(z0, k512, z1);
    z0 = simdup_crc32_fold512(z0, k512, z2);
    z0 = simdup_crc32_fold512(z0, k512, z3);
    __m128i x = _mm512_extracti32x4_epi32(z0, 0);
    x = simdup_crc32_fold(x, k128, _mm512_extracti32x4_epi32(z0, 1));
    x = simdup_crc32_fold(x, k128, _mm512_extracti32x4_epi32(z0, 2));
    x = simdup_crc32_fold(x, k128, _mm512_extracti32x4_epi32(z0, 3));
    return simdup_crc32_finish(x, p, n);
}

/* 2: VPCLMULQDQ, 1: PCLMULQDQ, 0: none */
static int simdup_crc32_best(void) {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq"))
        return 2;
    return __builtin_cpu_supports("pclmul") ? 1 : 0;
}
#else
static int simdup_crc32_best(void) { return 0; }
static uint32_t simdup_crc32_pclmul(uint32_t reg, const uint8_t *p, size_t n) {
    return simdup_crc32_bytes(reg, p, n);
}
static uint32_t simdup_crc32_vpclmul(uint32_t reg, const uint8_t *p, size_t n) {
    return simdup_crc32_bytes(reg, p, n);
}
#endif

/* 2: 512-bit folding, 1: 128-bit folding, 0: the byte table; -1 until set */
static int simdup_crc32_level_now = -1;

static int simdup_crc32_select(int level) {
    if (!simdup_crc32_ready) simdup_crc32_init();
    int best = simdup_crc32_best();
    simdup_crc32_level_now = (level < 0 || level > best) ? best : level;
    return simdup_crc32_level_now;
}

/* zlib.crc32(p[0..n), crc) */
static uint32_t simdup_crc32(uint32_t crc, const uint8_t *p, size_t n) {
    if (simdup_crc32_level_now < 0) simdup_crc32_select(-1);
    uint32_t reg = ~crc;
    if (simdup_crc32_level_now >= 2 && n >= 256)
        reg = simdup_crc32_vpclmul(reg, p, n);
    else if (simdup_crc32_level_now >= 1 && n >= 64)
        reg = simdup_crc32_pclmul(reg, p, n);
    else
        reg = simdup_crc32_bytes(reg, p, n);
    return ~reg;
}

#endif
