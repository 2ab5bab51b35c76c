/* Candidate search of the batch join (PSM batch mode), with SIMD kernels.
 *
 * simdup_next_candidate(y, low, i, n, h) returns the first e in [i, n) with
 * popcount(low[e] ^ y) <= h, or n. `low` holds the low 32 bits of the batch
 * elements probing one header bucket; `y` the low 32 bits of a chunk value.
 * Nearly every comparison fails (a random pair passes with probability
 * ~1e-6 at h = 3), so the kernels are a tight XOR-popcount-compare sweep
 * that stops only on a candidate.
 *
 * Three kernels, picked once at run time from what the CPU has (the module
 * is built for plain x86-64: the SIMD ones are compiled with per-function
 * target attributes, so the build needs no -m flags):
 *   2  AVX-512 with VPOPCNTDQ: 16 lanes, popcount in one instruction;
 *   1  AVX2: 8 lanes, popcount by nibble lookup (vpshufb);
 *   0  portable scalar.
 * simdup_join_select(level) forces a lower one (tests, benchmarks).
 */
#ifndef SIMDUP_JOINSCAN_H
#define SIMDUP_JOINSCAN_H
#include <stdint.h>

static inline int simdup_popcount32(uint32_t x) {
#if defined(__GNUC__) || defined(__clang__)
    return __builtin_popcount(x);
#else
    int c = 0;
    while (x) { x &= x - 1; c++; }
    return c;
#endif
}

static int64_t simdup_next_candidate_scalar(uint32_t y, const uint32_t *low,
                                            int64_t i, int64_t n, uint32_t h) {
    for (; i < n; i++)
        if ((uint32_t)simdup_popcount32(low[i] ^ y) <= h) return i;
    return n;
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(_M_X64))
#define SIMDUP_JOIN_X86 1
#include <immintrin.h>

__attribute__((target("avx512f,avx512vpopcntdq")))
static int64_t simdup_next_candidate_avx512(uint32_t y, const uint32_t *low,
                                            int64_t i, int64_t n, uint32_t h) {
    const __m512i vy = _mm512_set1_epi32((int)y);
    const __m512i vh = _mm512_set1_epi32((int)h);
    for (; i + 16 <= n; i += 16) {
        __m512i v = _mm512_loadu_si512((const void *)(low + i));
        __mmask16 k = _mm512_cmple_epu32_mask(_mm512_popcnt_epi32(_mm512_xor_si512(v, vy)), vh);
        if (k) return i + __builtin_ctz((unsigned)k);
    }
    if (i < n) {
        /* masked lanes are neither loaded (no fault past the end) nor compared */
        __mmask16 live = (__mmask16)((1u << (n - i)) - 1u);
        __m512i v = _mm512_maskz_loadu_epi32(live, (const void *)(low + i));
        __mmask16 k = _mm512_mask_cmple_epu32_mask(
            live, _mm512_popcnt_epi32(_mm512_xor_si512(v, vy)), vh);
        if (k) return i + __builtin_ctz((unsigned)k);
    }
    return n;
}

__attribute__((target("avx2")))
static int64_t simdup_next_candidate_avx2(uint32_t y, const uint32_t *low,
                                          int64_t i, int64_t n, uint32_t h) {
    const __m256i vy = _mm256_set1_epi32((int)y);
    /* c <= h as h + 1 > c (signed compare; counts are 0..32, h is small) */
    const __m256i vh1 = _mm256_set1_epi32(h < 64 ? (int)h + 1 : 65);
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                                         0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(low + i)), vy);
        __m256i c8 = _mm256_add_epi8(_mm256_shuffle_epi8(lut, _mm256_and_si256(v, nib)),
                                     _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib)));
        /* bytes -> 16-bit pair sums -> 32-bit lane sums */
        __m256i c32 = _mm256_madd_epi16(_mm256_maddubs_epi16(c8, ones8), ones16);
        int k = _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(vh1, c32)));
        if (k) return i + __builtin_ctz((unsigned)k);
    }
    return simdup_next_candidate_scalar(y, low, i, n, h);
}
#endif

typedef int64_t (*simdup_candidate_fn)(uint32_t, const uint32_t *, int64_t, int64_t, uint32_t);

static simdup_candidate_fn simdup_next_candidate = simdup_next_candidate_scalar;
static int simdup_join_level_now = -1;

/* The best kernel the CPU has. */
static int simdup_join_best_level(void) {
#ifdef SIMDUP_JOIN_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vpopcntdq"))
        return 2;
    if (__builtin_cpu_supports("avx2"))
        return 1;
#endif
    return 0;
}

/* Use kernel `level` (-1: the best available). Returns the level in use:
 * a level the CPU lacks falls back to the best one below it. */
static int simdup_join_select(int level) {
    int best = simdup_join_best_level();
    if (level < 0 || level > best) level = best;
#ifdef SIMDUP_JOIN_X86
    if (level == 2) simdup_next_candidate = simdup_next_candidate_avx512;
    else if (level == 1) simdup_next_candidate = simdup_next_candidate_avx2;
    else
#endif
    simdup_next_candidate = simdup_next_candidate_scalar;
    simdup_join_level_now = level;
    return level;
}

#endif
