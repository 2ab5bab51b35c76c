/* Weighted simhash accumulation W[j] = sum_i w_i * (+1 if bit j of h_i else -1).
 *
 * Three kernels, picked once at run time from what the CPU has (the module is
 * built for plain x86-64; the SIMD ones carry per-function target attributes,
 * so the build needs no -m flags):
 *   2  AVX-512F: one byte of a hash is the blend mask of 8 weight lanes;
 *   1  AVX2: one nibble picks a sign mask that flips 4 lanes of +w;
 *   0  portable scalar (a +-1 row per byte).
 * All three add the same values (+w or -w, exact) to each W[j] in the same
 * order, feature after feature, so W is bit-identical whichever runs.
 * simdup_simhash_select(level) forces a lower one (tests, benchmarks).
 */
#ifndef SIMDUP_SIMHASH_KERNEL_H
#define SIMDUP_SIMHASH_KERNEL_H
#include <stdint.h>
#include <stddef.h>
#include <string.h>

/* SIGN_ROWS[b][k] = +1.0 if bit k of byte b is set else -1.0 */
static double simdup_sign_rows[256][8];
/* SIGN_FLIP[q][k] = -0.0 (the sign bit) where bit k of nibble q is clear */
static double simdup_sign_flip[16][4];

static void simdup_simhash_tables(void) {
    for (int b = 0; b < 256; b++)
        for (int k = 0; k < 8; k++)
            simdup_sign_rows[b][k] = ((b >> k) & 1) ? 1.0 : -1.0;
    for (int q = 0; q < 16; q++)
        for (int k = 0; k < 4; k++)
            simdup_sign_flip[q][k] = ((q >> k) & 1) ? 0.0 : -0.0;
}

static void simdup_accumulate_scalar(const uint64_t *hashes, const double *weights,
                                     ptrdiff_t n, double *W) {
    for (int k = 0; k < 64; k++) W[k] = 0.0;
    for (ptrdiff_t i = 0; i < n; i++) {
        uint64_t h = hashes[i];
        double w = weights[i];
        for (int b = 0; b < 8; b++) {
            const double *row = simdup_sign_rows[(h >> (8 * b)) & 0xFF];
            for (int k = 0; k < 8; k++) W[8 * b + k] += w * row[k];
        }
    }
}

/* GCC and clang on x86-64 (not clang-cl: __builtin_cpu_supports needs libgcc or
 * compiler-rt's CPU model) */
#if defined(__x86_64__) && defined(__GNUC__)
#define SIMDUP_SIMHASH_X86 1
#include <immintrin.h>

__attribute__((target("avx512f")))
static void simdup_accumulate_avx512(const uint64_t *hashes, const double *weights,
                                     ptrdiff_t n, double *W) {
    __m512d acc[8];
    for (int b = 0; b < 8; b++) acc[b] = _mm512_setzero_pd();
    for (ptrdiff_t i = 0; i < n; i++) {
        uint64_t h = hashes[i];
        __m512d pos = _mm512_set1_pd(weights[i]);
        __m512d neg = _mm512_mul_pd(pos, _mm512_set1_pd(-1.0));  /* w * -1, as the scalar row */
        for (int b = 0; b < 8; b++) {
            __mmask8 m = (__mmask8)(h >> (8 * b));
            acc[b] = _mm512_add_pd(acc[b], _mm512_mask_blend_pd(m, neg, pos));
        }
    }
    for (int b = 0; b < 8; b++) _mm512_storeu_pd(W + 8 * b, acc[b]);
}

/* Two passes of 32 bits: 8 accumulators and the weight fit in the 16 ymm
 * registers (16 accumulators would spill). */
__attribute__((target("avx2")))
static void simdup_accumulate_avx2(const uint64_t *hashes, const double *weights,
                                   ptrdiff_t n, double *W) {
    for (int half = 0; half < 2; half++) {
        __m256d acc[8];
        for (int q = 0; q < 8; q++) acc[q] = _mm256_setzero_pd();
        int shift = 32 * half;
        for (ptrdiff_t i = 0; i < n; i++) {
            uint32_t h = (uint32_t)(hashes[i] >> shift);
            __m256d pos = _mm256_set1_pd(weights[i]);
            for (int q = 0; q < 8; q++) {
                __m256d flip = _mm256_loadu_pd(simdup_sign_flip[(h >> (4 * q)) & 0xF]);
                acc[q] = _mm256_add_pd(acc[q], _mm256_xor_pd(pos, flip));
            }
        }
        for (int q = 0; q < 8; q++) _mm256_storeu_pd(W + shift + 4 * q, acc[q]);
    }
}
#endif

typedef void (*simdup_accumulate_fn)(const uint64_t *, const double *, ptrdiff_t, double *);

static simdup_accumulate_fn simdup_accumulate = simdup_accumulate_scalar;
static int simdup_simhash_level_now = -1;

static int simdup_simhash_best_level(void) {
#ifdef SIMDUP_SIMHASH_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2")) return 1;
#endif
    return 0;
}

/* Use kernel `level` (-1: the best available); returns the level in use. */
static int simdup_simhash_select(int level) {
    int best = simdup_simhash_best_level();
    if (level < 0 || level > best) level = best;
    simdup_accumulate = simdup_accumulate_scalar;
#ifdef SIMDUP_SIMHASH_X86
    if (level == 2) simdup_accumulate = simdup_accumulate_avx512;
    else if (level == 1) simdup_accumulate = simdup_accumulate_avx2;
#endif
    simdup_simhash_level_now = level;
    return level;
}

#endif
