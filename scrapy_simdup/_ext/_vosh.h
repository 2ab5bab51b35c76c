/* Volatility Ordered Set Heap (Sood & Loguinov, CIKM 2011, Algorithm 2)
 * plus the run-time max-heap M that merges the h VOSH trees.
 *
 * Bits are referred to by *rank*: rank 0 is the most volatile header bit.
 * A node is a set S of ranks (sorted ascending) of size 1..h; its key is
 * sum_{i in S} lw[i] with lw[i] = log(p_i / (1 - p_i)), which orders sets
 * exactly as p(S) = prod_{i in S} p_i prod_{j not in S} (1 - p_j) does
 * (the common factor prod_j (1 - p_j) cancels). lw must be non-increasing.
 *
 * vosh_next() yields the empty set first (the query's own header), then the
 * non-empty sets of size <= h over t ranks in non-increasing p(S), each once.
 * Heap capacity: h + 2 * (number of sets popped) nodes suffices.
 * Pure C, no Python objects, usable without the GIL.
 */
#ifndef SIMDUP_VOSH_H
#define SIMDUP_VOSH_H
#include <stdint.h>
#include <string.h>

/* Flip sets hold at most 8 header bits (one byte per element in a node).
 * A search at a larger distance h still accepts every entry within h; it
 * only never flips more than 8 header bits, which the volatility order
 * reaches after hundreds of thousands of sets: beyond any probe budget. */
#define VOSH_MAX_H 8

/* A node is 16 bytes: its key and its elements packed one per byte,
 * element i (rank + 1) in byte 7 - i, 0 = absent. Equal keys are ordered
 * by smaller size first, then lexicographically (deterministic order). */
typedef struct {
    double key;
    uint64_t e;
} vosh_node;

typedef struct {
    const double *lw;        /* [t] log-odds by rank, non-increasing */
    const uint64_t *mask;    /* [t] 64-bit mask of the bit with that rank */
    int t, h;
    int started;
    int sorted;              /* 1: sorted-array queue (small frontiers) */
    vosh_node *heap;         /* caller-owned storage */
    long n, cap;
    long lo;                 /* sorted queue: nodes [lo, n) are live */
    long budget;             /* sets the caller will still take; -1: all */
} vosh_gen;

static inline int vosh_size(uint64_t e) {
    /* elements fill bytes 7, 6, ... and each is nonzero: the size is where
     * the lowest nonzero byte sits */
#if defined(__GNUC__) || defined(__clang__)
    return e ? 8 - (__builtin_ctzll(e) >> 3) : 0;
#else
    int s = 0;
    while (s < VOSH_MAX_H && ((e >> (56 - 8 * s)) & 0xff)) s++;
    return s;
#endif
}

static inline int vosh_less(const vosh_node *a, const vosh_node *b) {
    /* is a after b? max-heap on key */
    if (a->key != b->key) return a->key < b->key;
    int sa = vosh_size(a->e), sb = vosh_size(b->e);
    if (sa != sb) return sa > sb;
    return a->e > b->e;
}

static inline int vosh_push(vosh_gen *g, const vosh_node *x) {
    vosh_node *h = g->heap;
    if (g->sorted && g->budget >= 0 && g->n - g->lo >= g->budget) {
        /* full: a node behind `budget` others is never taken. Drop the
         * worst, or x itself if it is no better. */
        /* (budget > 0 here means the queue is not empty) */
        if (g->budget == 0 || !vosh_less(&h[g->lo], x)) return 0;
        g->lo++;
    }
    if (g->n >= g->cap) return -1;
    long i = g->n++;
    if (g->sorted) {
        /* ascending priority, the next set last: one unpredictable branch
         * per insert instead of one per heap level (faster for small k) */
        while (i > g->lo && vosh_less(x, &h[i - 1])) {
            h[i] = h[i - 1];
            i--;
        }
        h[i] = *x;
        return 0;
    }
    while (i > 0) {
        long p = (i - 1) >> 1;
        if (!vosh_less(&h[p], x)) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = *x;
    return 0;
}

static inline void vosh_pop(vosh_gen *g, vosh_node *out) {
    vosh_node *h = g->heap;
    if (g->sorted) {
        *out = h[--g->n];
        return;
    }
    *out = h[0];
    long n = --g->n;
    if (n == 0) return;
    vosh_node last = h[n];
    long i = 0;
    for (;;) {
        long c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && vosh_less(&h[c], &h[c + 1])) c++;
        if (!vosh_less(&last, &h[c])) break;
        h[i] = h[c];
        i = c;
    }
    h[i] = last;
}

#define VOSH_GET(e, i) ((int)(((e) >> (56 - 8 * (i))) & 0xff) - 1)
#define VOSH_INC(i) ((uint64_t)1 << (56 - 8 * (i)))

/* Returns 0 on success, -1 if the heap storage is too small for the roots.
 * The queue M is a binary max-heap; with cap <= VOSH_SORTED_CAP nodes it is
 * a sorted array instead (same order, cheaper for the few probes an online
 * query makes). */
#define VOSH_SORTED_CAP 96
static inline int vosh_init(vosh_gen *g, const double *lw, const uint64_t *mask,
                            int t, int h, vosh_node *heap, long cap) {
    g->sorted = cap <= VOSH_SORTED_CAP;
    g->lw = lw; g->mask = mask; g->t = t;
    g->h = h < t ? h : t;
    if (g->h > VOSH_MAX_H) g->h = VOSH_MAX_H;
    g->heap = heap; g->cap = cap; g->n = 0; g->started = 0;
    g->lo = 0; g->budget = -1;
    vosh_node r;
    r.key = 0.0;
    r.e = 0;
    for (int s = 1; s <= g->h; s++) {
        r.key += lw[s - 1];
        r.e |= (uint64_t)s << (56 - 8 * (s - 1));   /* element s-1 = rank s-1 */
        if (vosh_push(g, &r)) return -1;
    }
    return 0;
}

/* The caller takes at most `k` more non-empty sets: the queue then keeps
 * only the k best nodes, as a sorted array when k <= VOSH_SORTED_BUDGET
 * (shorter inserts, no heap: faster up to about that budget), and
 * vosh_next stops after k sets. The sets and
 * their order are unchanged. Call it right after vosh_init (before or
 * after the empty set), while the queue holds only the roots. */
#define VOSH_SORTED_BUDGET 1024
static inline void vosh_limit(vosh_gen *g, long k) {
    g->budget = k < 0 ? -1 : k;
    if (!g->sorted && k >= 0 && k <= VOSH_SORTED_BUDGET && g->n <= VOSH_MAX_H) {
        /* a bounded queue is cheaper as a sorted array than as a heap (at
         * most k live nodes): push what the heap holds (the roots) again,
         * into the sorted array */
        vosh_node roots[VOSH_MAX_H];
        long n = g->n;
        memcpy(roots, g->heap, (size_t)n * sizeof(vosh_node));
        g->sorted = 1;
        g->n = 0;
        for (long i = 0; i < n; i++) vosh_push(g, &roots[i]);
    }
    if (g->sorted && k >= 0 && g->n - g->lo > k) g->lo = g->n - k;
}

/* Next flip set: writes its header XOR mask and size. Returns 1, or 0 when
 * all sets are exhausted, or -1 when the heap storage ran out. */
static inline int vosh_next(vosh_gen *g, uint64_t *mask_out, int *size_out) {
    if (!g->started) {
        g->started = 1;
        *mask_out = 0; *size_out = 0;
        return 1;
    }
    if (g->n == g->lo || g->budget == 0) return 0;
    vosh_node s;
    vosh_pop(g, &s);
    if (g->budget > 0) g->budget--;
    int el[VOSH_MAX_H];
    int k = 0;
    uint64_t m = 0;
    while (k < VOSH_MAX_H) {
        int r = VOSH_GET(s.e, k);
        if (r < 0) break;
        el[k++] = r;
        m |= g->mask[r];
    }
    *mask_out = m; *size_out = k;
    /* left child: increment the last element */
    if (el[k - 1] < g->t - 1) {
        vosh_node c;
        c.e = s.e + VOSH_INC(k - 1);
        c.key = s.key + g->lw[el[k - 1] + 1] - g->lw[el[k - 1]];
        if (vosh_push(g, &c)) return -1;
    }
    /* right child: scan gaps right to left; the first gap != 1 decides */
    for (int j = k - 2; j >= 0; j--) {
        int gap = el[j + 1] - el[j];
        if (gap == 1) continue;
        if (gap == 2) {
            vosh_node c;
            c.e = s.e + VOSH_INC(j);
            c.key = s.key + g->lw[el[j] + 1] - g->lw[el[j]];
            if (vosh_push(g, &c)) return -1;
        }
        break;
    }
    return 1;
}

/* Number of sets vosh_next yields: sizes 1..min(h, t, VOSH_MAX_H) over t
 * elements, plus the empty set. */
static inline long vosh_total(int t, int h) {
    long total = 1, c = 1;
    for (int i = 1; i <= h && i <= t && i <= VOSH_MAX_H; i++) {
        c = c * (t - i + 1) / i;
        total += c;
    }
    return total;
}

#endif
