/* Candidate search of the batch join (PSM batch mode), with SIMD kernels.
 *
 * simdup_next_block(y, ny, low, i, n, h, masks) sweeps low[i..n) against up
 * to simdup_block_slots values y[0..ny) at once (8 with AVX-512, else 4: one
 * load of `low` serves all of them) and
 * returns the start e0 of the first block of simdup_block_width entries that
 * holds a candidate, a `low[e]` with popcount(low[e] ^ y[s]) <= h; masks[s]
 * has bit l set when low[e0 + l] is one for y[s]. Returns n if none is
 * left; the next sweep starts at e0 + simdup_block_width. `low` holds the
 * low 32 bits of the batch elements probing one header bucket; `y` those of
 * chunk values in that bucket. Nearly every comparison fails (a random pair
 * passes with probability ~1e-6 at h = 3), so the kernels are a tight
 * XOR-popcount-compare sweep that stops only on a candidate.
 *
 * Three kernels, picked once at run time from what the CPU has (the module
 * is built for plain x86-64: the SIMD ones are compiled with per-function
 * target attributes, so the build needs no -m flags):
 *   2  AVX-512 with VPOPCNTDQ and BW: blocks of 16, popcount in one instruction,
 *      the eight values' counts folded by min into one compare;
 *   1  AVX2: blocks of 8, popcount by nibble lookup (vpshufb);
 *   0  portable scalar, blocks of 32.
 * simdup_join_select(level) forces a lower one (tests, benchmarks).
 *
 * simdup_next_block64(y, ny, v, i, n, h, masks) is the same sweep (the same
 * blocks, slots and masks) over full 64-bit values: at a wide radius the low
 * bits pass almost every entry, so the join gathers a bucket's full values
 * once and sweeps them for the exact distance instead.
 *
 * simdup_collect_pair64(y, yp, ny, v, vp, i, n, h, limit, width, ce, cs,
 * cap, count) sweeps the gathered values with the pair rule too (the other keys
 * yp and vp: the two distances add up to at most limit): at a wide radius
 * most pairs within h on one key fail the rule, and each candidate costs far
 * more than a comparison. It writes each candidate's entry and slot to
 * ce[]/cs[] (not its distance: few candidates match, and the check
 * computes it for those) in the order of the kernel's blocks
 * (block by block, slot by slot, lane by lane: the order of the low-bit
 * sweep), until n or until less than a block's worth of room (width * ny)
 * is left of `cap`, and returns the start of the next block to sweep (and
 * sets *count). AVX-512 has a kernel of its own (blocks of 16); the others
 * use the scalar pair sweep simdup_next_pair64_scalar in blocks of `width`,
 * the block width of the kernel the join started with (passed, not read
 * from simdup_block_width, which a call of join_kernel() may change).
 */
#ifndef SIMDUP_JOINSCAN_H
#define SIMDUP_JOINSCAN_H
#include <stdint.h>
#include "_popcount.h"

/* entries a sweep's block holds (<= 32) and chunk values one sweep compares
 * at most (the kernel's slots, <= 8): set with the kernel */
static int simdup_block_width = 32;
static int simdup_block_slots = 4;

/* The chunk value of slot s: slots past ny repeat y[0], so that every
 * kernel compares all its slots without a branch... */
static inline uint32_t simdup_slot(const uint32_t *y, int ny, int s) {
    return y[s < ny ? s : 0];
}

/* ...and their candidates are cleared here. Returns whether any is left. */
static inline uint32_t simdup_keep_slots(uint32_t *masks, int ny, uint32_t m0, uint32_t m1,
                                         uint32_t m2, uint32_t m3) {
    masks[0] = m0;
    masks[1] = ny > 1 ? m1 : 0;
    masks[2] = ny > 2 ? m2 : 0;
    masks[3] = ny > 3 ? m3 : 0;
    return masks[0] | masks[1] | masks[2] | masks[3];
}

static int64_t simdup_next_block_scalar(const uint32_t *y, int ny, const uint32_t *low,
                                        int64_t i, int64_t n, uint32_t h, uint32_t *masks) {
    for (; i < n; i += 32) {
        int w = n - i < 32 ? (int)(n - i) : 32;
        uint32_t m0 = 0, m1 = 0, m2 = 0, m3 = 0;
        uint32_t y0 = simdup_slot(y, ny, 0), y1 = simdup_slot(y, ny, 1),
                 y2 = simdup_slot(y, ny, 2), y3 = simdup_slot(y, ny, 3);
        for (int l = 0; l < w; l++) {
            uint32_t v = low[i + l];
            m0 |= (uint32_t)((uint32_t)simdup_popcount32(v ^ y0) <= h) << l;
            m1 |= (uint32_t)((uint32_t)simdup_popcount32(v ^ y1) <= h) << l;
            m2 |= (uint32_t)((uint32_t)simdup_popcount32(v ^ y2) <= h) << l;
            m3 |= (uint32_t)((uint32_t)simdup_popcount32(v ^ y3) <= h) << l;
        }
        if (simdup_keep_slots(masks, ny, m0, m1, m2, m3)) return i;
    }
    return n;
}

static inline uint64_t simdup_slot64(const uint64_t *y, int ny, int s) {
    return y[s < ny ? s : 0];
}

static int64_t simdup_next_block64_scalar(const uint64_t *y, int ny, const uint64_t *v,
                                          int64_t i, int64_t n, uint32_t h, uint32_t *masks) {
    for (; i < n; i += 32) {
        int w = n - i < 32 ? (int)(n - i) : 32;
        uint32_t m0 = 0, m1 = 0, m2 = 0, m3 = 0;
        uint64_t y0 = simdup_slot64(y, ny, 0), y1 = simdup_slot64(y, ny, 1),
                 y2 = simdup_slot64(y, ny, 2), y3 = simdup_slot64(y, ny, 3);
        for (int l = 0; l < w; l++) {
            uint64_t x = v[i + l];
            m0 |= (uint32_t)((uint32_t)simdup_popcount64(x ^ y0) <= h) << l;
            m1 |= (uint32_t)((uint32_t)simdup_popcount64(x ^ y1) <= h) << l;
            m2 |= (uint32_t)((uint32_t)simdup_popcount64(x ^ y2) <= h) << l;
            m3 |= (uint32_t)((uint32_t)simdup_popcount64(x ^ y3) <= h) << l;
        }
        if (simdup_keep_slots(masks, ny, m0, m1, m2, m3)) return i;
    }
    return n;
}

/* The 64-bit sweep with the pair rule: an entry is a candidate for y[s]
 * when popcount(v ^ y[s]) <= h and, with the entry's and y[s]'s other keys
 * (vp, yp), popcount(v ^ y[s]) + popcount(vp ^ yp[s]) <= limit. */
static int64_t simdup_next_pair64_scalar(const uint64_t *y, const uint64_t *yp, int ny,
                                         const uint64_t *v, const uint64_t *vp, int64_t i,
                                         int64_t n, uint32_t h, uint32_t limit, int width,
                                         uint32_t *masks) {
    /* (in the blocks of the join's kernel: the candidates come in the same order) */
    for (; i < n; i += width) {
        int w = n - i < width ? (int)(n - i) : width;
        uint32_t any = 0;
        for (int s = 0; s < ny; s++) {
            uint32_t m = 0;
            for (int l = 0; l < w; l++) {
                uint32_t d = (uint32_t)simdup_popcount64(v[i + l] ^ y[s]);
                m |= (uint32_t)(d <= h && d + (uint32_t)simdup_popcount64(vp[i + l] ^ yp[s])
                                <= limit) << l;
            }
            masks[s] = m;
            any |= m;
        }
        if (any) return i;
    }
    return n;
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(_M_X64))
#define SIMDUP_JOIN_X86 1
#include <immintrin.h>

__attribute__((target("avx512f,avx512vpopcntdq")))
static int64_t simdup_next_block_avx512(const uint32_t *y, int ny, const uint32_t *low,
                                        int64_t i, int64_t n, uint32_t h, uint32_t *masks) {
    /* eight chunk values a sweep (slots past ny repeat y[0] and are cleared) */
    const __m512i vh = _mm512_set1_epi32((int)h);
    __m512i vy[8];
    for (int s = 0; s < 8; s++) vy[s] = _mm512_set1_epi32((int)simdup_slot(y, ny, s));
    __mmask16 live = 0xFFFF;
    for (; i < n; i += 16) {
        __m512i v;
        if (n - i >= 16) {
            v = _mm512_loadu_si512((const void *)(low + i));
        } else {
            /* masked lanes are neither loaded (no fault past the end) nor compared */
            live = (__mmask16)((1u << (n - i)) - 1u);
            v = _mm512_maskz_loadu_epi32(live, (const void *)(low + i));
        }
        __m512i c[8];
        for (int s = 0; s < 8; s++) c[s] = _mm512_popcnt_epi32(_mm512_xor_si512(v, vy[s]));
        /* one compare for all eight values: candidates are rare */
        __m512i lo = _mm512_min_epu32(
            _mm512_min_epu32(_mm512_min_epu32(c[0], c[1]), _mm512_min_epu32(c[2], c[3])),
            _mm512_min_epu32(_mm512_min_epu32(c[4], c[5]), _mm512_min_epu32(c[6], c[7])));
        if (_mm512_mask_cmple_epu32_mask(live, lo, vh)) {
            uint32_t any = 0;
            for (int s = 0; s < 8; s++) {
                masks[s] = s < ny ? (uint32_t)_mm512_mask_cmple_epu32_mask(live, c[s], vh) : 0;
                any |= masks[s];
            }
            if (any) return i;
        }
    }
    return n;
}

/* popcount of each 32-bit lane of v, compared with h: a lane mask (8 bits) */
__attribute__((target("avx2")))
static inline int simdup_avx2_within(__m256i v, __m256i vh1) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                                         0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
    __m256i c8 = _mm256_add_epi8(_mm256_shuffle_epi8(lut, _mm256_and_si256(v, nib)),
                                 _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib)));
    /* bytes -> 16-bit pair sums -> 32-bit lane sums */
    __m256i c32 = _mm256_madd_epi16(_mm256_maddubs_epi16(c8, _mm256_set1_epi8(1)),
                                    _mm256_set1_epi16(1));
    /* c <= h as h + 1 > c (signed compare; counts are 0..32) */
    return _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpgt_epi32(vh1, c32)));
}

__attribute__((target("avx2")))
static int64_t simdup_next_block_avx2(const uint32_t *y, int ny, const uint32_t *low,
                                      int64_t i, int64_t n, uint32_t h, uint32_t *masks) {
    const __m256i vh1 = _mm256_set1_epi32(h < 64 ? (int)h + 1 : 65);
    __m256i vy[4];
    for (int s = 0; s < 4; s++) vy[s] = _mm256_set1_epi32((int)simdup_slot(y, ny, s));
    for (; i + 8 <= n; i += 8) {
        __m256i v = _mm256_loadu_si256((const __m256i *)(low + i));
        uint32_t any = 0;
        for (int s = 0; s < ny; s++) {
            masks[s] = (uint32_t)simdup_avx2_within(_mm256_xor_si256(v, vy[s]), vh1);
            any |= masks[s];
        }
        if (any) return i;
    }
    return simdup_next_block_scalar(y, ny, low, i, n, h, masks);
}

/* v[i..i+16) as two vectors of eight 64-bit lanes; lanes at n or past it
 * read as zero and are left out of the masks live0 and live1. */
__attribute__((target("avx512f")))
static inline void simdup_load16_avx512(const uint64_t *v, int64_t i, int64_t n, __m512i *a,
                                        __m512i *b, __mmask8 *live0, __mmask8 *live1) {
    if (n - i >= 16) {
        *live0 = *live1 = 0xFF;
        *a = _mm512_loadu_si512((const void *)(v + i));
        *b = _mm512_loadu_si512((const void *)(v + i + 8));
        return;
    }
    int rest = (int)(n - i);
    *live0 = (__mmask8)(rest >= 8 ? 0xFF : (1u << rest) - 1u);
    *live1 = (__mmask8)(rest > 8 ? (1u << (rest - 8)) - 1u : 0);
    *a = _mm512_maskz_loadu_epi64(*live0, (const void *)(v + i));
    *b = _mm512_maskz_loadu_epi64(*live1, (const void *)(v + i + 8));
}

__attribute__((target("avx512f,avx512vpopcntdq")))
static int64_t simdup_next_block64_avx512(const uint64_t *y, int ny, const uint64_t *v,
                                          int64_t i, int64_t n, uint32_t h, uint32_t *masks) {
    /* blocks of 16 as the 32-bit sweep: two vectors of eight 64-bit lanes */
    const __m512i vh = _mm512_set1_epi64((long long)h);
    __m512i vy[8];
    for (int s = 0; s < 8; s++) vy[s] = _mm512_set1_epi64((long long)simdup_slot64(y, ny, s));
    __mmask8 live0, live1;
    for (; i < n; i += 16) {
        __m512i v0, v1;
        simdup_load16_avx512(v, i, n, &v0, &v1, &live0, &live1);
        __m512i c0[8], c1[8];
        for (int s = 0; s < 8; s++) {
            c0[s] = _mm512_popcnt_epi64(_mm512_xor_si512(v0, vy[s]));
            c1[s] = _mm512_popcnt_epi64(_mm512_xor_si512(v1, vy[s]));
        }
        /* the smallest count of each lane over the eight values */
        __m512i min0 = _mm512_min_epu64(
            _mm512_min_epu64(_mm512_min_epu64(c0[0], c0[1]), _mm512_min_epu64(c0[2], c0[3])),
            _mm512_min_epu64(_mm512_min_epu64(c0[4], c0[5]), _mm512_min_epu64(c0[6], c0[7])));
        __m512i min1 = _mm512_min_epu64(
            _mm512_min_epu64(_mm512_min_epu64(c1[0], c1[1]), _mm512_min_epu64(c1[2], c1[3])),
            _mm512_min_epu64(_mm512_min_epu64(c1[4], c1[5]), _mm512_min_epu64(c1[6], c1[7])));
        if (_mm512_mask_cmple_epu64_mask(live0, min0, vh) |
                _mm512_mask_cmple_epu64_mask(live1, min1, vh)) {
            uint32_t any = 0;
            for (int s = 0; s < 8; s++) {
                masks[s] = s < ny
                    ? (uint32_t)_mm512_mask_cmple_epu64_mask(live0, c0[s], vh)
                      | ((uint32_t)_mm512_mask_cmple_epu64_mask(live1, c1[s], vh) << 8)
                    : 0;
                any |= masks[s];
            }
            if (any) return i;
        }
    }
    return n;
}

/* simdup_collect_pair64 for AVX-512: the eight slots unrolled and without a
 * branch each (at h = 22 one pair in about a hundred is within h on the key,
 * so a branch per slot is mispredicted often); their masks are joined into
 * two words, whose set bits are the block's candidates. The rule d <= h and
 * d + d' <= limit is tested as d + max(d', limit - h) <= limit. */
__attribute__((target("avx512f,avx512bw,avx512vpopcntdq")))
static int64_t simdup_collect_pair64_avx512(const uint64_t *y, const uint64_t *yp, int ny,
                                            const uint64_t *v, const uint64_t *vp, int64_t i,
                                            int64_t n, uint32_t h, uint32_t limit, int width,
                                            int64_t *ce, uint8_t *cs, int cap, int *count) {
    __m512i vy[8], vyp[8];
    for (int s = 0; s < 8; s++) {
        vy[s] = _mm512_set1_epi64((long long)simdup_slot64(y, ny, s));
        vyp[s] = _mm512_set1_epi64((long long)simdup_slot64(yp, ny, s));
    }
    /* slot s's 16 lanes are bits 16s.. of two words (s < 4, s >= 4); the
     * slots past ny compare y[0] again and are cleared from the words */
    uint64_t slots_lo = 0, slots_hi = 0;
    for (int s = 0; s < ny && s < 8; s++) {
        if (s < 4) slots_lo |= (uint64_t)0xFFFF << (16 * s);
        else slots_hi |= (uint64_t)0xFFFF << (16 * (s - 4));
    }
    /* the counts of a block's two vectors packed into one of sixteen 32-bit
     * lanes (entry i + l in lane l), so that the rule costs one max, one add
     * and one compare a slot */
    const __m512i pack = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14,
                                           16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i vl32 = _mm512_set1_epi32((int)limit);
    /* (limit < h: d + d' <= limit implies d <= h) */
    const __m512i vgap32 = _mm512_set1_epi32((int)(limit >= h ? limit - h : 0));
    int w = 0;
    __mmask8 live0, live1;
    for (; i < n && cap - w >= 16 * ny; i += 16) {
        __m512i v0, v1, p0, p1;
        simdup_load16_avx512(v, i, n, &v0, &v1, &live0, &live1);
        simdup_load16_avx512(vp, i, n, &p0, &p1, &live0, &live1);
        __mmask16 k[8];
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            __m512i d = _mm512_permutex2var_epi32(
                _mm512_popcnt_epi64(_mm512_xor_si512(v0, vy[s])), pack,
                _mm512_popcnt_epi64(_mm512_xor_si512(v1, vy[s])));
            __m512i e = _mm512_permutex2var_epi32(
                _mm512_popcnt_epi64(_mm512_xor_si512(p0, vyp[s])), pack,
                _mm512_popcnt_epi64(_mm512_xor_si512(p1, vyp[s])));
            k[s] = _mm512_cmple_epu32_mask(_mm512_add_epi32(d, _mm512_max_epu32(e, vgap32)),
                                           vl32);
        }
        /* lanes past n (the last block) are cleared with the slots past ny */
        const uint64_t live = (uint64_t)(live0 | ((unsigned)live1 << 8)) * 0x0001000100010001ULL;
        uint64_t word[2];       /* (two words: slots 0-3, 4-7) */
        word[0] = _cvtmask64_u64(_mm512_kunpackd(_mm512_kunpackw(k[3], k[2]),
                                                 _mm512_kunpackw(k[1], k[0])))
                  & slots_lo & live;
        word[1] = _cvtmask64_u64(_mm512_kunpackd(_mm512_kunpackw(k[7], k[6]),
                                                 _mm512_kunpackw(k[5], k[4])))
                  & slots_hi & live;
        /* the candidates in slot-then-lane order: a loop a word, no branch per slot */
        for (uint64_t mk = word[0]; mk; mk &= mk - 1) {
            int b = __builtin_ctzll(mk);
            ce[w] = i + (b & 15);
            cs[w++] = (uint8_t)(b >> 4);
        }
        for (uint64_t mk = word[1]; mk; mk &= mk - 1) {
            int b = __builtin_ctzll(mk);
            ce[w] = i + (b & 15);
            cs[w++] = (uint8_t)(4 + (b >> 4));
        }
    }
    *count = w;
    return i < n ? i : n;
}

/* popcount of each 64-bit lane of v, compared with h: a lane mask (4 bits) */
__attribute__((target("avx2")))
static inline int simdup_avx2_within64(__m256i v, __m256i vh1) {
    const __m256i nib = _mm256_set1_epi8(0x0f);
    const __m256i lut = _mm256_setr_epi8(0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4,
                                         0, 1, 1, 2, 1, 2, 2, 3, 1, 2, 2, 3, 2, 3, 3, 4);
    __m256i c8 = _mm256_add_epi8(_mm256_shuffle_epi8(lut, _mm256_and_si256(v, nib)),
                                 _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), nib)));
    /* the bytes of each 64-bit lane summed */
    __m256i c64 = _mm256_sad_epu8(c8, _mm256_setzero_si256());
    return _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpgt_epi64(vh1, c64)));
}

__attribute__((target("avx2")))
static int64_t simdup_next_block64_avx2(const uint64_t *y, int ny, const uint64_t *v,
                                        int64_t i, int64_t n, uint32_t h, uint32_t *masks) {
    /* blocks of 8 as the 32-bit sweep: two vectors of four 64-bit lanes */
    const __m256i vh1 = _mm256_set1_epi64x((long long)h + 1);     /* h <= 64 */
    __m256i vy[4];
    for (int s = 0; s < 4; s++) vy[s] = _mm256_set1_epi64x((long long)simdup_slot64(y, ny, s));
    for (; i + 8 <= n; i += 8) {
        __m256i v0 = _mm256_loadu_si256((const __m256i *)(v + i));
        __m256i v1 = _mm256_loadu_si256((const __m256i *)(v + i + 4));
        uint32_t any = 0;
        for (int s = 0; s < ny; s++) {
            masks[s] = (uint32_t)simdup_avx2_within64(_mm256_xor_si256(v0, vy[s]), vh1)
                       | ((uint32_t)simdup_avx2_within64(_mm256_xor_si256(v1, vy[s]), vh1) << 4);
            any |= masks[s];
        }
        if (any) return i;
    }
    return simdup_next_block64_scalar(y, ny, v, i, n, h, masks);
}
#endif

typedef int64_t (*simdup_block64_fn)(const uint64_t *, int, const uint64_t *, int64_t, int64_t,
                                     uint32_t, uint32_t *);
static simdup_block64_fn simdup_next_block64 = simdup_next_block64_scalar;

/* simdup_collect_pair64 over simdup_next_pair64_scalar's blocks */
static int64_t simdup_collect_pair64_blocks(const uint64_t *y, const uint64_t *yp, int ny,
                                            const uint64_t *v, const uint64_t *vp, int64_t i,
                                            int64_t n, uint32_t h, uint32_t limit, int width,
                                            int64_t *ce, uint8_t *cs, int cap, int *count) {
    uint32_t masks[8];
    int w = 0;
    while (i < n && cap - w >= width * ny) {
        i = simdup_next_pair64_scalar(y, yp, ny, v, vp, i, n, h, limit, width, masks);
        if (i >= n) break;
        for (int s = 0; s < ny; s++) {
            uint32_t mk = masks[s];
            while (mk) {
                ce[w] = i + __builtin_ctz(mk);
                cs[w] = (uint8_t)s;
                w++;
                mk &= mk - 1;
            }
        }
        i += width;
    }
    *count = w;
    return i < n ? i : n;
}

typedef int64_t (*simdup_collect64_fn)(const uint64_t *, const uint64_t *, int, const uint64_t *,
                                       const uint64_t *, int64_t, int64_t, uint32_t, uint32_t,
                                       int, int64_t *, uint8_t *, int, int *);
static simdup_collect64_fn simdup_collect_pair64 = simdup_collect_pair64_blocks;

typedef int64_t (*simdup_block_fn)(const uint32_t *, int, const uint32_t *, int64_t, int64_t,
                                   uint32_t, uint32_t *);

static simdup_block_fn simdup_next_block = simdup_next_block_scalar;
static int simdup_join_level_now = -1;

/* The best kernel the CPU has. */
static int simdup_join_best_level(void) {
#ifdef SIMDUP_JOIN_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vpopcntdq"))
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
    simdup_next_block = simdup_next_block_scalar;
    simdup_next_block64 = simdup_next_block64_scalar;
    simdup_collect_pair64 = simdup_collect_pair64_blocks;
    simdup_block_width = 32;
    simdup_block_slots = 4;
#ifdef SIMDUP_JOIN_X86
    if (level == 2) {
        simdup_next_block = simdup_next_block_avx512;
        simdup_next_block64 = simdup_next_block64_avx512;
        simdup_collect_pair64 = simdup_collect_pair64_avx512;
        simdup_block_width = 16;
        simdup_block_slots = 8;
    } else if (level == 1) {
        simdup_next_block = simdup_next_block_avx2;
        simdup_next_block64 = simdup_next_block64_avx2;
        simdup_block_width = 8;
    }
#endif
    simdup_join_level_now = level;
    return level;
}

/* The kernel in use, picking the best one on first use. */
static int simdup_join_level(void) {
    if (simdup_join_level_now < 0) simdup_join_select(-1);
    return simdup_join_level_now;
}

#endif
