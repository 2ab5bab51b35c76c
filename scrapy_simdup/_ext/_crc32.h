/* CRC-32 (the zlib / IEEE 802.3 one, reflected polynomial 0xEDB88320),
 * folding 64 bytes at a time with carry-less multiplication (PCLMULQDQ),
 * as in Intel's "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction" (2009); bytes short of a 16-byte block go through
 * a table. The checks of every merge read each collection run once, and
 * zlib 1.2's table-driven CRC-32 ran at a third of the memory's speed.
 *
 * simdup_crc32_level(): 1 when the folding kernel runs on this CPU, else 0
 * (the caller then uses zlib). simdup_crc32_update(crc, buf, len) continues
 * a CRC like zlib's crc32(crc, buf, len): pre- and post-inverted. */
#ifndef SIMDUP_CRC32_H
#define SIMDUP_CRC32_H

#include <stddef.h>
#include <stdint.h>

static uint32_t simdup_crc32_table[256];

/* Fills the byte table; called once, when the module is imported. */
static void simdup_crc32_init_table(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
        simdup_crc32_table[i] = c;
    }
}

/* on the inverted register, as inside zlib */
static uint32_t simdup_crc32_bytes(uint32_t c, const unsigned char *buf, size_t len) {
    while (len--) c = simdup_crc32_table[(c ^ *buf++) & 0xFF] ^ (c >> 8);
    return c;
}

#if defined(__x86_64__) && defined(__GNUC__)
#define SIMDUP_CRC32_X86 1
#include <immintrin.h>

/* Folds len bytes (a multiple of 16, at least 64) into the inverted
 * register c; returns the inverted register. */
__attribute__((target("pclmul,sse4.1")))
static uint32_t simdup_crc32_fold(uint32_t c, const unsigned char *buf, size_t len) {
    /* the bit-reflected constants of the paper for this polynomial:
     * x^(4*128+32), x^(4*128-32) mod P; x^(128+32), x^(128-32); x^64;
     * P and mu for the Barrett reduction */
    const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596LL, 0x0154442bd4LL);
    const __m128i k3k4 = _mm_set_epi64x(0x00ccaa009eLL, 0x01751997d0LL);
    const __m128i k5k0 = _mm_set_epi64x(0, 0x0163cd6124LL);
    const __m128i poly = _mm_set_epi64x(0x01f7011641LL, 0x01db710641LL);
    const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
    __m128i x0, x1, x2, x3, x4, x5, x6, x7, x8, y5, y6, y7, y8;

    x1 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
    x2 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
    x3 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
    x4 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)c));
    x0 = k1k2;
    buf += 64;
    len -= 64;

    /* four 128-bit lanes, each folded 512 bits forward */
    while (len >= 64) {
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x6 = _mm_clmulepi64_si128(x2, x0, 0x00);
        x7 = _mm_clmulepi64_si128(x3, x0, 0x00);
        x8 = _mm_clmulepi64_si128(x4, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x2 = _mm_clmulepi64_si128(x2, x0, 0x11);
        x3 = _mm_clmulepi64_si128(x3, x0, 0x11);
        x4 = _mm_clmulepi64_si128(x4, x0, 0x11);
        y5 = _mm_loadu_si128((const __m128i *)(buf + 0x00));
        y6 = _mm_loadu_si128((const __m128i *)(buf + 0x10));
        y7 = _mm_loadu_si128((const __m128i *)(buf + 0x20));
        y8 = _mm_loadu_si128((const __m128i *)(buf + 0x30));
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x5), y5);
        x2 = _mm_xor_si128(_mm_xor_si128(x2, x6), y6);
        x3 = _mm_xor_si128(_mm_xor_si128(x3, x7), y7);
        x4 = _mm_xor_si128(_mm_xor_si128(x4, x8), y8);
        buf += 64;
        len -= 64;
    }

    /* the four lanes into one, 128 bits forward at a time */
    x0 = k3k4;
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x3), x5);
    x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
    x1 = _mm_xor_si128(_mm_xor_si128(x1, x4), x5);

    while (len >= 16) {
        x2 = _mm_loadu_si128((const __m128i *)buf);
        x5 = _mm_clmulepi64_si128(x1, x0, 0x00);
        x1 = _mm_clmulepi64_si128(x1, x0, 0x11);
        x1 = _mm_xor_si128(_mm_xor_si128(x1, x2), x5);
        buf += 16;
        len -= 16;
    }

    /* 128 bits to 64 */
    x2 = _mm_clmulepi64_si128(x1, x0, 0x10);
    x1 = _mm_srli_si128(x1, 8);
    x1 = _mm_xor_si128(x1, x2);
    x0 = k5k0;
    x2 = _mm_srli_si128(x1, 4);
    x1 = _mm_and_si128(x1, low32);
    x1 = _mm_clmulepi64_si128(x1, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);

    /* Barrett reduction to 32 bits */
    x0 = poly;
    x2 = _mm_and_si128(x1, low32);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x10);
    x2 = _mm_and_si128(x2, low32);
    x2 = _mm_clmulepi64_si128(x2, x0, 0x00);
    x1 = _mm_xor_si128(x1, x2);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}
#endif

static int simdup_crc32_level(void) {
#ifdef SIMDUP_CRC32_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1")) return 1;
#endif
    return 0;
}

/* Only when simdup_crc32_level() is 1, after simdup_crc32_init_table(). */
static uint32_t simdup_crc32_update(uint32_t crc, const unsigned char *buf, size_t len) {
    uint32_t c = ~crc;
#ifdef SIMDUP_CRC32_X86
    if (len >= 64) {
        size_t bulk = len & ~(size_t)15;
        c = simdup_crc32_fold(c, buf, bulk);
        buf += bulk;
        len -= bulk;
    }
#endif
    return ~simdup_crc32_bytes(c, buf, len);
}

#endif
