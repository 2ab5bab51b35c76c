/* The k most likely header flip sets from a fixed list of candidates, in
 * SIMD: the batch scan's fast paths beside VOSH (_vosh.h). At h <= 3 every
 * candidate is ranked (the same sets in the same order as VOSH); up to 8
 * flips a select kernel finds the same sets in the list's order (below).
 *
 * Why a candidate list: with log-odds lw[r] <= 0 non-increasing in the rank
 * r, a set T is ahead of a set S in the VOSH order (larger key, then smaller
 * size, then lexicographically smaller) for *every* such lw when T has no
 * more elements than S and T's sorted elements are each <= the matching one
 * of S's largest |T| elements. A set with k or more such sets ahead of it is
 * never among the first k, so the first k sets are always among the
 * "candidates", the sets with fewer than k; and every set ahead of one of
 * the first k is itself a candidate, so a set's rank among the candidates is
 * its rank among all sets. The list depends only on (t, h, k) (34 sets for
 * t = 15, h = 3, k = 16) and is built once, in (size, lexicographic) order,
 * by the caller (batchjoin.flip_candidates).
 *
 * Per element, the candidates' keys are summed from lw held in registers
 * (two-table permutes), made unique as key * 64 + (63 - candidate number) (the
 * VOSH tie-break: the list is in that order), and each is ranked by counting
 * the larger ones; those ranked below k are written at their rank. Keys are
 * int32 log-odds in units of 2^-16 clipped to [-128, 0] by the caller
 * (batchjoin.quantized_log_odds; the kernels do not check), so
 * 3 * 128 * 2^16 * 64 < 2^31: exact sums, no overflow.
 * VOSH is given the same integers (as doubles, exact), so both orders agree.
 *
 * AVX-512F only (a branch-free count over 16 lanes per compare); without it
 * the caller runs VOSH. Pure C, no Python objects, usable without the GIL.
 */
#ifndef SIMDUP_TOPFLIPS_H
#define SIMDUP_TOPFLIPS_H
#include <stdint.h>

#define TOPFLIPS_MAX_H 3
#define TOPFLIPS_MAX_CAND 64
#define TOPFLIPS_MAX_T 32

typedef struct {
    int n;                                   /* candidates (<= TOPFLIPS_MAX_CAND) */
    int k;                                   /* sets wanted (<= n) */
    int32_t idx[TOPFLIPS_MAX_H][TOPFLIPS_MAX_CAND];   /* ranks of each candidate's elements */
    uint64_t present[TOPFLIPS_MAX_H];        /* bit c: candidate c has element e */
} topflips_plan;

/* ---------------------------------------------------------------------------
 * The same candidates at larger distances (up to 8 flips, up to
 * TOPFLIPS_SEL_MAX_CAND of them: 528 for t = 15, h = 9, k = 168), where
 * ranking every pair would cost too much: the k-th smallest cost u = -key is
 * found by a binary search on u (counting candidates at or under a value),
 * and the sets below it, then the first ones equal to it in the list's
 * (size, lexicographic) order, are written out. The same sets as VOSH's
 * first k (ties broken alike), but in candidate order, not VOSH's.
 * ------------------------------------------------------------------------- */
#define TOPFLIPS_SEL_MAX_H 8
#define TOPFLIPS_SEL_MAX_CAND 2048

typedef struct {
    int n, k, h;
    int nv;                  /* candidate vectors of 16 lanes: ceil(n / 16) */
    const int32_t *idx;      /* [h][nv * 16]: rank of element e of each candidate */
    const uint16_t *present; /* [h][nv]: lanes whose candidate has element e */
} topflips_sel_plan;

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(_M_X64))
#define TOPFLIPS_X86 1
#include <immintrin.h>

/* The candidate ranking, given each rank's log-odds and bit in registers
 * (lanes 0..15 in *_lo, 16..31 in *_hi; ranks past t: any value). nv, the
 * candidates' vectors, is a constant in each copy (topflips_rank_avx512),
 * so the per-vector arrays stay in registers. */
__attribute__((target("avx512f"), always_inline))
static inline int topflips_rank_nv(const topflips_plan *P, __m512i lw_lo, __m512i lw_hi,
                                   __m512i bt_lo, __m512i bt_hi, uint32_t *out, const int nv) {
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i pri[4], msk[4], cnt[4];
    int32_t pr[TOPFLIPS_MAX_CAND];
    for (int v = 0; v < nv; v++) {
        __mmask16 m1 = (__mmask16)(P->present[1] >> (16 * v));
        __mmask16 m2 = (__mmask16)(P->present[2] >> (16 * v));
        __mmask16 valid = (__mmask16)(P->present[0] >> (16 * v));
        __m512i i0 = _mm512_loadu_si512((const void *)(P->idx[0] + 16 * v));
        __m512i i1 = _mm512_loadu_si512((const void *)(P->idx[1] + 16 * v));
        __m512i i2 = _mm512_loadu_si512((const void *)(P->idx[2] + 16 * v));
        __m512i key = _mm512_add_epi32(
            _mm512_permutex2var_epi32(lw_lo, i0, lw_hi),
            _mm512_add_epi32(_mm512_maskz_permutex2var_epi32(m1, lw_lo, i1, lw_hi),
                             _mm512_maskz_permutex2var_epi32(m2, lw_lo, i2, lw_hi)));
        /* key * 64 + (63 - c); lanes past the list: the smallest int32 */
        __m512i tie = _mm512_sub_epi32(_mm512_set1_epi32(63 - 16 * v), lane);
        pri[v] = _mm512_mask_mov_epi32(_mm512_set1_epi32(INT32_MIN), valid,
                                       _mm512_add_epi32(_mm512_slli_epi32(key, 6), tie));
        msk[v] = _mm512_or_si512(
            _mm512_permutex2var_epi32(bt_lo, i0, bt_hi),
            _mm512_or_si512(_mm512_maskz_permutex2var_epi32(m1, bt_lo, i1, bt_hi),
                            _mm512_maskz_permutex2var_epi32(m2, bt_lo, i2, bt_hi)));
        cnt[v] = _mm512_setzero_si512();
        _mm512_storeu_si512((void *)(pr + 16 * v), pri[v]);
    }
    const __m512i one = _mm512_set1_epi32(1);
    /* rank of candidate c: how many candidates have a larger priority */
    for (int j = 0; j < P->n; j++) {
        __m512i b = _mm512_set1_epi32(pr[j]);
        for (int v = 0; v < nv; v++)
            cnt[v] = _mm512_mask_add_epi32(cnt[v], _mm512_cmpgt_epi32_mask(b, pri[v]), cnt[v], one);
    }
    const __m512i vk = _mm512_set1_epi32(P->k);
    for (int v = 0; v < nv; v++) {
        __mmask16 sel = _mm512_cmplt_epi32_mask(cnt[v], vk) &
                        (__mmask16)(P->present[0] >> (16 * v));
        /* each selected candidate's mask to its rank (a scatter: a compress
         * to memory read back lane by lane stalls store forwarding) */
        _mm512_mask_i32scatter_epi32((void *)out, sel, cnt[v], msk[v], 4);
    }
    return P->k;
}

__attribute__((target("avx512f")))
static int topflips_rank_avx512(const topflips_plan *P, __m512i lw_lo, __m512i lw_hi,
                                __m512i bt_lo, __m512i bt_hi, uint32_t *out) {
    switch ((P->n + 15) >> 4) {
    case 1: return topflips_rank_nv(P, lw_lo, lw_hi, bt_lo, bt_hi, out, 1);
    case 2: return topflips_rank_nv(P, lw_lo, lw_hi, bt_lo, bt_hi, out, 2);
    case 3: return topflips_rank_nv(P, lw_lo, lw_hi, bt_lo, bt_hi, out, 3);
    default: return topflips_rank_nv(P, lw_lo, lw_hi, bt_lo, bt_hi, out, 4);
    }
}

/* lwq[r], bits[r]: the log-odds (int32 units) and header-bit mask (top 32
 * bits of the 64-bit mask) of rank r, r < 32 (unused ranks: any value).
 * Writes the masks of the plan's k first sets to out[0..k) in order.
 * Returns k. */
__attribute__((target("avx512f")))
static int topflips_avx512(const topflips_plan *P, const int32_t *lwq, const uint32_t *bits,
                           uint32_t *out) {
    return topflips_rank_avx512(P, _mm512_loadu_si512((const void *)lwq),
                                _mm512_loadu_si512((const void *)(lwq + 16)),
                                _mm512_loadu_si512((const void *)bits),
                                _mm512_loadu_si512((const void *)(bits + 16)), out);
}

/* Ascending sort of 16 int32 lanes: a bitonic network, 10 stages of
 * compare-exchange with lane i ^ j (the upper lane of a pair in an
 * ascending block keeps the max: the mask). Generated, not hand-written. */
#define TOPFLIPS_STAGE(v, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15, m) \
    do {                                                                                        \
        __m512i p_ = _mm512_permutexvar_epi32(                                                  \
            _mm512_setr_epi32(a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14,   \
                              a15), v);                                                         \
        v = _mm512_mask_blend_epi32((__mmask16)(m), _mm512_min_epi32(v, p_),                    \
                                    _mm512_max_epi32(v, p_));                                   \
    } while (0)

__attribute__((target("avx512f")))
static inline __m512i topflips_sort16(__m512i v) {
    TOPFLIPS_STAGE(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14, 0x6666);
    TOPFLIPS_STAGE(v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, 0x3C3C);
    TOPFLIPS_STAGE(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14, 0x5A5A);
    TOPFLIPS_STAGE(v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11, 0x0FF0);
    TOPFLIPS_STAGE(v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, 0x33CC);
    TOPFLIPS_STAGE(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14, 0x55AA);
    TOPFLIPS_STAGE(v, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 0xFF00);
    TOPFLIPS_STAGE(v, 4, 5, 6, 7, 0, 1, 2, 3, 12, 13, 14, 15, 8, 9, 10, 11, 0xF0F0);
    TOPFLIPS_STAGE(v, 2, 3, 0, 1, 6, 7, 4, 5, 10, 11, 8, 9, 14, 15, 12, 13, 0xCCCC);
    TOPFLIPS_STAGE(v, 1, 0, 3, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 14, 0xAAAA);
    return v;
}

/* The header bits of one element with t <= 16, ranked in one register from
 * its quantised weights: a sort of (-log-odds) << 5 | column (larger
 * log-odds first, ties by column, as the VOSH path orders them). Gives each
 * rank's log-odds and bit, lane by lane. qtable: the int32 log-odds of the
 * 256 codes, each in [-2^23, 0] (the plan's units). Reads 16 bytes of the
 * row. */
__attribute__((target("avx512f")))
static inline void topflips_order16(const uint8_t *cq_row, const int32_t *qtable, int t,
                                    __m512i *lw_out, __m512i *bt_out) {
    /* the 16 codes as lanes, their log-odds gathered (needs 16 bytes of the row) */
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i code = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)cq_row));
    __m512i lwc = _mm512_i32gather_epi32(code, (const void *)qtable, 4);
    __m512i key = _mm512_or_si512(_mm512_slli_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), lwc), 5),
                                  lane);
    key = _mm512_mask_mov_epi32(_mm512_set1_epi32(INT32_MAX), (__mmask16)((1u << t) - 1u), key);
    __m512i s = topflips_sort16(key);
    __m512i col = _mm512_and_si512(s, _mm512_set1_epi32(31));
    *lw_out = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_srai_epi32(s, 5));
    *bt_out = _mm512_sllv_epi32(_mm512_set1_epi32(1), _mm512_sub_epi32(_mm512_set1_epi32(31), col));
}

__attribute__((target("avx512f")))
static int topflips_row16_avx512(const topflips_plan *P, const uint8_t *cq_row,
                                 const int32_t *qtable, int t, uint32_t *out) {
    __m512i lw, bt;
    topflips_order16(cq_row, qtable, t, &lw, &bt);
    return topflips_rank_avx512(P, lw, lw, bt, bt, out);
}

/* u: scratch of nv * 16 int32, m: scratch of nv * 16 uint32. Writes k masks
 * to out (k <= n). Returns k. */
__attribute__((target("avx512f")))
static int topflips_select_avx512(const topflips_sel_plan *P, __m512i lw_lo, __m512i lw_hi,
                                  __m512i bt_lo, __m512i bt_hi, int32_t *u, uint32_t *m,
                                  uint32_t *out) {
    const int nv = P->nv, stride = nv * 16;
    const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int32_t umax = 0, umin = INT32_MAX;
    for (int v = 0; v < nv; v++) {
        __m512i key = _mm512_setzero_si512(), bits = _mm512_setzero_si512();
        for (int e = 0; e < P->h; e++) {
            __mmask16 pm = (__mmask16)P->present[e * nv + v];
            if (!pm) continue;
            __m512i i = _mm512_loadu_si512((const void *)(P->idx + e * stride + 16 * v));
            key = _mm512_add_epi32(key, _mm512_maskz_permutex2var_epi32(pm, lw_lo, i, lw_hi));
            bits = _mm512_or_si512(bits, _mm512_maskz_permutex2var_epi32(pm, bt_lo, i, bt_hi));
        }
        /* cost u = -key >= 0; lanes past the list never selected */
        __mmask16 valid = _mm512_cmplt_epi32_mask(_mm512_add_epi32(lane, _mm512_set1_epi32(16 * v)),
                                                  _mm512_set1_epi32(P->n));
        __m512i uv = _mm512_mask_mov_epi32(_mm512_set1_epi32(INT32_MAX), valid,
                                           _mm512_sub_epi32(_mm512_setzero_si512(), key));
        int32_t top = _mm512_mask_reduce_max_epi32(valid, uv);
        int32_t bottom = _mm512_mask_reduce_min_epi32(valid, uv);
        if (top > umax) umax = top;
        if (bottom < umin) umin = bottom;
        _mm512_storeu_si512((void *)(u + 16 * v), uv);
        _mm512_storeu_si512((void *)(m + 16 * v), bits);
    }
    /* tau: the smallest cost with at least k candidates at or under it */
    int32_t lo = umin, hi = umax;
    const __m512i one = _mm512_set1_epi32(1);
    while (lo < hi) {
        int32_t mid = lo + ((hi - lo) >> 1);
        __m512i vm = _mm512_set1_epi32(mid);
        __m512i cnt = _mm512_setzero_si512();     /* per-lane counts, summed once */
        for (int v = 0; v < nv; v++)
            cnt = _mm512_mask_add_epi32(cnt, _mm512_cmple_epi32_mask(
                _mm512_loadu_si512((const void *)(u + 16 * v)), vm), cnt, one);
        if (_mm512_reduce_add_epi32(cnt) >= P->k) hi = mid; else lo = mid + 1;
    }
    const __m512i vt = _mm512_set1_epi32(lo);
    int got = 0;
    for (int v = 0; v < nv; v++) {      /* every set cheaper than tau */
        __mmask16 sel = _mm512_cmplt_epi32_mask(_mm512_loadu_si512((const void *)(u + 16 * v)), vt);
        _mm512_mask_compressstoreu_epi32((void *)(out + got), sel,
                                         _mm512_loadu_si512((const void *)(m + 16 * v)));
        got += __builtin_popcount((unsigned)sel);
    }
    for (int v = 0; v < nv && got < P->k; v++) {   /* then ties at tau, in list order */
        unsigned eq = (unsigned)_mm512_cmpeq_epi32_mask(_mm512_loadu_si512((const void *)(u + 16 * v)), vt);
        int need = P->k - got, have = __builtin_popcount(eq);
        if (have > need) {                          /* keep the first `need` lanes */
            for (int drop = have - need; drop > 0; drop--) eq &= ~(1u << (31 - __builtin_clz(eq)));
        }
        _mm512_mask_compressstoreu_epi32((void *)(out + got), (__mmask16)eq,
                                         _mm512_loadu_si512((const void *)(m + 16 * v)));
        got += __builtin_popcount(eq);
    }
    return got;
}

/* One element for the select kernel, t <= 16 (as topflips_row16_avx512). */
__attribute__((target("avx512f")))
static int topflips_select_row16_avx512(const topflips_sel_plan *P, const uint8_t *cq_row,
                                        const int32_t *qtable, int t, int32_t *u, uint32_t *m,
                                        uint32_t *out) {
    __m512i lw, bt;
    topflips_order16(cq_row, qtable, t, &lw, &bt);
    return topflips_select_avx512(P, lw, lw, bt, bt, u, m, out);
}

/* The select kernel from rank arrays (any t <= 32). */
__attribute__((target("avx512f")))
static int topflips_select_arrays_avx512(const topflips_sel_plan *P, const int32_t *lwq,
                                         const uint32_t *bits, int32_t *u, uint32_t *m,
                                         uint32_t *out) {
    return topflips_select_avx512(P, _mm512_loadu_si512((const void *)lwq),
                                  _mm512_loadu_si512((const void *)(lwq + 16)),
                                  _mm512_loadu_si512((const void *)bits),
                                  _mm512_loadu_si512((const void *)(bits + 16)), u, m, out);
}

static int topflips_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? 1 : 0;
}
#else
/* No SIMD kernel on this target: the level stays 0 (VOSH) and these are
 * never called; they exist so that the callers compile. */
static int topflips_avx512(const topflips_plan *P, const int32_t *lwq, const uint32_t *bits,
                           uint32_t *out) {
    (void)P; (void)lwq; (void)bits; (void)out;
    return 0;
}
static int topflips_row16_avx512(const topflips_plan *P, const uint8_t *cq_row,
                                 const int32_t *qtable, int t, uint32_t *out) {
    (void)P; (void)cq_row; (void)qtable; (void)t; (void)out;
    return 0;
}
static int topflips_select_row16_avx512(const topflips_sel_plan *P, const uint8_t *cq_row,
                                        const int32_t *qtable, int t, int32_t *u, uint32_t *m,
                                        uint32_t *out) {
    (void)P; (void)cq_row; (void)qtable; (void)t; (void)u; (void)m; (void)out;
    return 0;
}
static int topflips_select_arrays_avx512(const topflips_sel_plan *P, const int32_t *lwq,
                                         const uint32_t *bits, int32_t *u, uint32_t *m,
                                         uint32_t *out) {
    (void)P; (void)lwq; (void)bits; (void)u; (void)m; (void)out;
    return 0;
}
static int topflips_available(void) { return 0; }
#endif

/* 1: the candidate kernels in use, 0: VOSH; -1 until first use. */
static int topflips_level_now = -1;

/* Use the candidate kernels (1) if the CPU can, or VOSH (0); -1: the best. */
static int topflips_use_level(int level) {
    int best = topflips_available();
    topflips_level_now = (level < 0 || level > best) ? best : level;
    return topflips_level_now;
}

static int topflips_level(void) {
    if (topflips_level_now < 0) topflips_use_level(-1);
    return topflips_level_now;
}

#endif
