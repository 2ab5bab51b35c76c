# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled batch scan for PSM batch mode (the offline merge).

In batch mode a chunk of the collection ``H`` arrives already *sorted* (every
batch is sorted before it is appended), so its ``t``-bit header buckets are
contiguous ranges: the bucket table is a ``2^t + 1`` offset array built in
one linear pass (:func:`bucket_offsets`), no hashing. The batch ``Q`` brings
its probe headers precomputed once per merge (the flip sets the VOSH order
gives for each element, as the paper advises: "pre-process Q by identifying
the volatile bits"), so the scan of every chunk is a tight loop:

    for each active x in Q, for each probe mask f of x (f = 0 first):
        for y in bucket((x ^ f) >> (64 - t)):
            if popcount(x ^ y) <= h: report (x, y)

Within a bucket reached with ``i`` header bits flipped, ``popcount(x ^ y) <= h``
is the paper's test "at most ``h - i`` differing bits in the other ``64 - t``".
``first_only`` is PSM-F: an element is reported once and then deactivated
(``active[i] = 0``), so later chunks skip it. The pure NumPy reference is
``tests/reference_batch.py``.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t, int32_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memset

import numpy as np

cdef extern from "_murmur3.h" nogil:
    int simdup_popcount64(uint64_t x)

cdef extern from *:
    void __builtin_prefetch(const void *addr) nogil
    int ctz32 "__builtin_ctz" (unsigned int x) nogil

cdef extern from "_joinscan.h" nogil:
    ctypedef int64_t (*simdup_block_fn)(const uint32_t *y, int ny, const uint32_t *low,
                                        int64_t i, int64_t n, uint32_t h, uint32_t *masks)
    simdup_block_fn simdup_next_block
    int simdup_block_width
    int simdup_block_slots
    int simdup_join_select(int level)
    int simdup_join_level()

# The index module's VOSH generator (pure C header, shared, not re-implemented).
cdef extern from "_vosh.h" nogil:
    ctypedef struct vosh_node:
        pass
    ctypedef struct vosh_gen:
        pass
    int vosh_init(vosh_gen *g, const double *lw, const uint64_t *mask,
                  int t, int h, vosh_node *heap, long cap)
    int vosh_next(vosh_gen *g, uint64_t *mask_out, int *size_out)
    void vosh_limit(vosh_gen *g, long k)
    long vosh_total(int t, int h)

# The fast paths for flip sets from a fixed candidate list: ranked at h <= 3,
# selected (any order) up to 8 flips.
cdef extern from "_topflips.h" nogil:
    enum:
        TOPFLIPS_MAX_H
        TOPFLIPS_MAX_CAND
        TOPFLIPS_MAX_T
    ctypedef struct topflips_plan:
        int n
        int k
        int32_t idx[TOPFLIPS_MAX_H][TOPFLIPS_MAX_CAND]
        uint64_t present[TOPFLIPS_MAX_H]
    int topflips_avx512(const topflips_plan *P, const int32_t *lwq, const uint32_t *bits,
                        uint32_t *out)
    int topflips_row16_avx512(const topflips_plan *P, const uint8_t *cq_row,
                              const int32_t *qtable, int t, uint32_t *out)
    int topflips_use_level(int level)
    int topflips_level()
    enum:
        TOPFLIPS_SEL_MAX_H
        TOPFLIPS_SEL_MAX_CAND
    ctypedef struct topflips_sel_plan:
        int n
        int k
        int h
        int nv
        const int32_t *idx
        const uint16_t *present
    int topflips_select_row16_avx512(const topflips_sel_plan *P, const uint8_t *cq_row,
                                     const int32_t *qtable, int t, int32_t *u, uint32_t *m,
                                     uint32_t *out)
    int topflips_select_arrays_avx512(const topflips_sel_plan *P, const int32_t *lwq,
                                      const uint32_t *bits, int32_t *u, uint32_t *m,
                                      uint32_t *out)


ctypedef fused mask_t:
    uint16_t
    uint32_t
    uint64_t


cdef inline void _store_masks(mask_t[:, ::1] mv, Py_ssize_t i, const uint32_t *out32, int got,
                              int t) noexcept nogil:
    """Row ``i`` of the masks from the top 32 bits of each flip set's mask."""
    cdef int c
    for c in range(got):
        if mask_t is uint16_t:     # the header bits alone (t <= 16)
            mv[i, c] = <uint16_t>(out32[c] >> (32 - t))
        elif mask_t is uint32_t:
            mv[i, c] = out32[c]
        else:
            mv[i, c] = (<uint64_t>out32[c]) << 32


cdef inline void _rank_bits(const uint8_t[:, :] cq, Py_ssize_t row, const uint16_t[::1] level,
                            const int32_t[::1] table, int t, uint16_t *keys, int32_t *lwq,
                            uint32_t *bits32, double *srt, uint64_t *bit) noexcept nogil:
    """The header bits of ``cq`` row ``row`` by rank: their log-odds and bits
    into ``lwq``/``bits32`` (int32, top 32 bits of the mask) or, with
    ``lwq`` NULL, into ``srt``/``bit`` (VOSH's doubles and 64-bit masks).
    ``keys[t..32)`` must hold 0xFFFF (padding, never counted).

    The order (log-odds descending, ties by column) is computed without
    comparing doubles: ``level[c]`` is the dense rank of ``table[c]`` (0 =
    largest), so the key ``level << 5 | column`` is unique per bit and its
    rank, a branch-free count of smaller keys, is the bit's place (the same
    order as the insertion sort of the ``lw`` path, at a fraction of its
    mispredicted branches)."""
    cdef int r, c, j
    cdef uint16_t kr
    cdef int tpad = (t + 7) & ~7          # the count sweeps blocks of 8 keys
    for r in range(t):
        keys[r] = <uint16_t>((level[cq[row, r]] << 5) | r)
    for r in range(t):
        kr = keys[r]
        j = 0
        for c in range(tpad):
            j += keys[c] < kr
        if lwq != NULL:
            lwq[j] = table[cq[row, r]]
            bits32[j] = (<uint32_t>1) << (31 - r)
        else:
            srt[j] = <double>table[cq[row, r]]     # exact: integers
            bit[j] = (<uint64_t>1) << (63 - r)


cdef int _flip_masks_rows(const double[:, ::1] lw, const uint8_t[:, :] cq,
                          const int32_t[::1] table, const uint16_t[::1] level, bint use_cq,
                          const int64_t[::1] rows, bint use_rows, int t, int h, int k,
                          mask_t[:, ::1] mv, int32_t[::1] nv,
                          const topflips_plan *plan,
                          const topflips_sel_plan *sel) noexcept nogil:
    """VOSH over every row; the row's log-odds come from ``lw`` or from
    ``table[cq]`` (:func:`quantized_log_odds` units). With a ``plan`` (the
    ``cq`` path only), the sets come from the candidate ranking of
    ``_topflips.h`` instead: the same sets in the same order; with a ``sel``
    plan, from its select kernel: the same sets in candidate order. ``uint32``
    masks keep the top 32 bits (``t <= 32``: all a flip set touches). With
    ``use_rows``, output row ``i`` is ``cq`` row ``rows[i]``. Returns -1 if
    the heap storage is too small, -2 if memory runs out. The bits are
    ordered by log-odds, descending, ties by column (:func:`_rank_bits`)."""
    cdef Py_ssize_t m = mv.shape[0]
    cdef long cap = h + 2 * (k + 2) + 2
    cdef vosh_node *heap = <vosh_node *>malloc(cap * sizeof(vosh_node))
    if heap == NULL:
        return -2
    cdef double srt[32]
    cdef uint64_t bit[32]
    cdef vosh_gen g
    cdef Py_ssize_t i
    cdef int r, j, size, got, bad = 0
    cdef double v
    cdef uint64_t mk
    cdef uint16_t keys[32]
    cdef Py_ssize_t row
    cdef int32_t lwq[32]
    cdef uint32_t bits32[32]
    cdef uint32_t out32[TOPFLIPS_MAX_CAND]
    cdef bint fast = plan != NULL or sel != NULL
    # the candidate kernels' output; the select kernel's also holds scratch
    # for the costs and masks of every candidate
    cdef uint32_t *buf = out32
    cdef int32_t *su = NULL
    cdef uint32_t *sm = NULL
    if sel != NULL:
        su = <int32_t *>malloc(sel.nv * 16 * sizeof(int32_t))
        sm = <uint32_t *>malloc(sel.nv * 16 * sizeof(uint32_t))
        buf = <uint32_t *>malloc(sel.nv * 16 * sizeof(uint32_t))
        if su == NULL or sm == NULL or buf == NULL:
            free(su); free(sm); free(buf); free(heap)
            return -2
    for r in range(32):
        lwq[r] = 0
        bits32[r] = 0
        keys[r] = 0xFFFF            # padding: never smaller than a key
    # the whole element in registers: t <= 16 and 16 contiguous bytes a row
    cdef bint row16 = fast and t <= 16 and cq.shape[1] >= 16 and cq.strides[1] == 1
    for i in range(m):
        if use_cq:
            row = rows[i] if use_rows else i
            if use_rows and i + 8 < m:
                # gathered rows are cache misses: ask for one 8 elements ahead
                __builtin_prefetch(&cq[rows[i + 8], 0])
            if fast:
                # the candidate kernels: their sets into `buf`
                if row16:       # the bit order in registers, from the row itself
                    if sel != NULL:
                        got = topflips_select_row16_avx512(sel, &cq[row, 0], &table[0], t,
                                                           su, sm, buf)
                    else:
                        got = topflips_row16_avx512(plan, &cq[row, 0], &table[0], t, buf)
                else:
                    _rank_bits(cq, row, level, table, t, keys, lwq, bits32, NULL, NULL)
                    if sel != NULL:
                        got = topflips_select_arrays_avx512(sel, lwq, bits32, su, sm, buf)
                    else:
                        got = topflips_avx512(plan, lwq, bits32, buf)
                _store_masks(mv, i, buf, got, t)
                nv[i] = got
                continue
            _rank_bits(cq, row, level, table, t, keys, NULL, NULL, srt, bit)
        else:
            for r in range(t):          # stable insertion sort, descending
                v = lw[i, r]
                mk = (<uint64_t>1) << (63 - r)
                j = r
                while j > 0 and srt[j - 1] < v:
                    srt[j] = srt[j - 1]
                    bit[j] = bit[j - 1]
                    j -= 1
                srt[j] = v
                bit[j] = mk
        if vosh_init(&g, srt, bit, t, h, heap, cap) != 0:
            bad = -1
            break
        got = 0
        vosh_next(&g, &mk, &size)   # the empty set
        vosh_limit(&g, k)
        while got < k and vosh_next(&g, &mk, &size) > 0:
            if mask_t is uint16_t:     # the header bits alone (t <= 16)
                mv[i, got] = <uint16_t>(mk >> (64 - t))
            elif mask_t is uint32_t:
                mv[i, got] = <uint32_t>(mk >> 32)
            else:
                mv[i, got] = mk
            got += 1
        nv[i] = got
    free(heap)
    free(su)
    free(sm)
    if sel != NULL:
        free(buf)
    return bad


def _check_flip_args(int t, int h, int k):
    if t < 1 or t > 32:
        raise ValueError(f"t must be in 1..32, got {t}")
    if h < 0 or h > 16:   # _index.MAX_DISTANCE
        raise ValueError(f"h must be in 0..16, got {h}")
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    return min(k, vosh_total(t, h) - 1)


def flip_set_count(int t, int h):
    """Non-empty flip sets VOSH can give with ``t`` header bits at distance ``h``."""
    _check_flip_args(t, h, 0)
    return vosh_total(t, h) - 1


def batch_flip_masks(const double[:, ::1] lw, int h, int k):
    """The ``k`` most likely header flip sets of every row, by VOSH.

    ``lw[i, c]`` is the log-odds ``log(p / (1 - p))`` that bit ``63 - c`` of
    element ``i`` flips (``c < t = lw.shape[1]``). Returns ``(masks uint64
    (m, k), nprobes int32 (m,))``: the non-empty flip sets in non-increasing
    ``p(S)`` (the empty set, the element's own header, is not listed).
    """
    cdef int t = <int>lw.shape[1]
    k = _check_flip_args(t, h, k)
    cdef Py_ssize_t m = lw.shape[0]
    masks = np.zeros((m, k), dtype=np.uint64)
    nprobes = np.zeros(m, dtype=np.int32)
    if k == 0 or m == 0:
        return masks, nprobes
    cdef uint64_t[:, ::1] mv = masks
    cdef int32_t[::1] nv = nprobes
    cdef uint8_t[:, :] no_cq = np.zeros((1, 1), dtype=np.uint8)
    cdef int32_t[::1] no_table = np.zeros(1, dtype=np.int32)
    cdef uint16_t[::1] no_level = np.zeros(1, dtype=np.uint16)
    cdef int64_t[::1] no_rows = np.zeros(1, dtype=np.int64)
    cdef int rc
    with nogil:
        rc = _flip_masks_rows(lw, no_cq, no_table, no_level, False, no_rows, False,
                              t, h, k, mv, nv, NULL, NULL)
    if rc != 0:
        raise MemoryError("batch_flip_masks: out of memory")
    return masks, nprobes


# The cq path sums log-odds as int32 in units of 2^-16, clipped to [-128, 0]
# (a flip probability of 1e-56 is as good as never): every set's key is then
# exact, whichever VOSH path reached it, so equal keys are ties broken the
# same way (smaller set, then lexicographic) by VOSH, by the candidate
# ranking of _topflips.h and by a brute-force reference.
LOG_ODDS_UNIT = 2.0 ** -16
LOG_ODDS_FLOOR = -128.0


def quantized_log_odds(table):
    """``table`` (log-odds, float) as the int32 units the ``cq`` path sums."""
    table = np.asarray(table, dtype=np.float64)
    return np.round(np.clip(table, LOG_ODDS_FLOOR, 0.0) / LOG_ODDS_UNIT).astype(np.int32)


def _dominators(S):
    """How many non-empty sets are ahead of the rank set ``S`` (sorted) for
    every non-increasing log-odds <= 0: the sets ``T`` of at most ``len(S)``
    ranks, ``T != S``, whose sorted ranks are each <= the matching one of
    ``S``'s largest ``len(T)`` (see _topflips.h)."""
    q = len(S)
    total = 0
    for p in range(1, q + 1):
        u = S[q - p:]
        # increasing sequences t_1 < ... < t_p with t_i <= u_i, by dynamic
        # programming over the last value: ways[v] = sequences ending at v
        ways = [1] * (u[0] + 1)
        for i in range(1, p):
            acc, nxt = 0, []
            for v in range(u[i] + 1):
                nxt.append(acc)                 # sequences ending below v
                if v < len(ways):
                    acc += ways[v]
            ways = nxt
        total += sum(ways) - (1 if p == q else 0)
    return total


_CANDIDATES = {}


def _vosh_children(S, t):
    """The VOSH tree's children of rank set ``S`` (each set has one parent)."""
    q = len(S)
    out = []
    # (no negative indices: the module is compiled with wraparound=False)
    if S[q - 1] < t - 1:                     # left: the last element + 1
        out.append(S[:q - 1] + (S[q - 1] + 1,))
    for j in range(q - 2, -1, -1):           # right: the first gap != 1 decides
        gap = S[j + 1] - S[j]
        if gap == 1:
            continue
        if gap == 2:
            out.append(S[:j] + (S[j] + 1,) + S[j + 1:])
        break
    return out


def flip_candidates(int t, int h, int k):
    """The sets that can be among the ``k`` most likely non-empty flip sets of
    ``t`` header bits at distance ``h`` (for any log-odds), as rank tuples in
    (size, lexicographic) order: those with fewer than ``k`` sets always
    ahead of them. Found by walking the VOSH tree from its roots: a child
    has its parent and all the parent's sets ahead of it, so no child of a
    set left out can be a candidate."""
    key = (t, h, k)
    if key not in _CANDIDATES:
        found = []
        todo = [tuple(range(size)) for size in range(1, min(h, t, 8) + 1)]
        while todo:
            S = todo.pop()
            if _dominators(S) < k:
                found.append(S)
                todo.extend(_vosh_children(S, t))
        _CANDIDATES[key] = tuple(sorted(found, key=lambda S: (len(S), S)))
    return _CANDIDATES[key]


_SEL_PLANS = {}


def _sel_plan_arrays(int t, int h, int k):
    """``(n, nv, idx int32 (h, nv * 16), present uint16 (h, nv))`` for the
    select kernel, or None when it does not apply (t > 32, more than
    TOPFLIPS_SEL_MAX_CAND candidates, or too many sets to walk)."""
    h = min(h, t, TOPFLIPS_SEL_MAX_H)
    key = (t, h, k)
    if key in _SEL_PLANS:
        return _SEL_PLANS[key]
    plan = None
    # the walk visits about twice the candidates, and there are at least k
    if t <= TOPFLIPS_MAX_T and h >= 1 and 1 <= k <= TOPFLIPS_SEL_MAX_CAND // 2:
        cands = flip_candidates(t, h, k)
        if len(cands) <= TOPFLIPS_SEL_MAX_CAND:
            nv = (len(cands) + 15) // 16
            idx = np.zeros((h, nv * 16), dtype=np.int32)
            present = np.zeros((h, nv * 16), dtype=bool)
            for c, S in enumerate(cands):
                idx[:len(S), c] = S
                present[:len(S), c] = True
            bits = np.packbits(present.reshape(h, nv, 16), axis=2, bitorder="little")
            plan = (len(cands), nv, np.ascontiguousarray(idx),
                    np.ascontiguousarray(bits.view("<u2").reshape(h, nv)))
    _SEL_PLANS[key] = plan
    return plan


cdef void _fill_sel_plan(topflips_sel_plan *sel, arrays, int h, int k):
    cdef const int32_t[:, ::1] idx = arrays[2]
    cdef const uint16_t[:, ::1] present = arrays[3]
    sel.n = arrays[0]
    sel.nv = arrays[1]
    sel.h = idx.shape[0]
    sel.k = min(k, sel.n)
    sel.idx = &idx[0, 0]
    sel.present = &present[0, 0]


cdef bint _fill_plan(topflips_plan *plan, int t, int h, int k):
    """The candidate plan for (t, h, k), or False when the fast path does not
    apply (more than 3 flips, t > 32, or too many candidates)."""
    # (there are at least k candidates: k > TOPFLIPS_MAX_CAND never fits)
    if h < 1 or h > TOPFLIPS_MAX_H or t > TOPFLIPS_MAX_T or k < 1 or k > TOPFLIPS_MAX_CAND:
        return False
    cands = flip_candidates(t, h, k)
    if len(cands) > TOPFLIPS_MAX_CAND:
        return False
    memset(plan, 0, sizeof(topflips_plan))
    plan.n = len(cands)
    plan.k = min(k, plan.n)
    cdef int c, e
    for c, S in enumerate(cands):
        for e in range(len(S)):
            plan.idx[e][c] = S[e]
            plan.present[e] |= (<uint64_t>1) << c
    return True


def flip_kernel(int level=-1):
    """Pick how the ``cq`` path finds flip sets: 1 the candidate kernels of
    ``_topflips.h`` where they apply (the ranking at ``h <= 3``, the select
    kernel for unordered sets up to 8 flips; AVX-512F), 0 VOSH always, -1 the
    best this CPU has. Returns the level in use. For tests and benchmarks;
    both give the same sets."""
    return topflips_use_level(level)


def batch_flip_masks_cq(const uint8_t[:, :] cq, const double[::1] table, int t, int h, int k,
                        bint high32=False, rows=None, bint header16=False, bint ordered=True):
    """:func:`batch_flip_masks` with the log-odds of bit ``63 - c`` of element
    ``i`` given as ``table[cq[i, c]]`` (the batch files' quantised weights and
    the volatility model tabulated per code), for ``c < t``. ``high32``: the
    masks as ``uint32`` (their top 32 bits, the only ones a flip set of
    ``t <= 32`` header bits touches): half the memory of a batch's masks.
    ``header16``: ``uint16`` masks of the header bits alone, ``mask >> (64 -
    t)`` (``t <= 16``): a quarter of the memory. ``rows``: int64 row numbers
    of ``cq``, the output's row ``i`` being the masks of ``cq[rows[i]]`` (no
    gathered copy of ``cq``). The log-odds are summed as
    :func:`quantized_log_odds` integers, which clips them to [-128, 0]: a
    bit is taken as never more likely to flip than not (p <= 0.5), and
    anything below e^-128 as equally unlikely (the calibrated tables lie
    within). At ``h <= 3`` the sets come from the candidate ranking when the
    CPU has it (:func:`flip_kernel`). ``ordered=False`` lets each row's sets
    come in any order (the probe table does not care), which allows the
    select kernel at larger ``h`` (about 6x VOSH's speed at ``h = 9``)."""
    if table.shape[0] != 256:
        raise ValueError("table must have 256 entries")
    if np.isnan(np.asarray(table)).any():
        raise ValueError("table has NaN log-odds")
    if cq.shape[1] < t:
        raise ValueError(f"cq has {cq.shape[1]} columns, t = {t}")
    k = _check_flip_args(t, h, k)
    cdef Py_ssize_t m = cq.shape[0]
    cdef int64_t[::1] row_v = np.zeros(1, dtype=np.int64)
    cdef bint use_rows = rows is not None
    if use_rows:
        rows = np.asarray(rows)
        if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
            raise ValueError("rows must be a 1-D array of integers")
        row_v = np.ascontiguousarray(rows, dtype=np.int64)
        if row_v.shape[0] and (np.min(row_v) < 0 or np.max(row_v) >= m):
            raise ValueError(f"rows must be in 0..{m - 1}")
        m = row_v.shape[0]
    if header16 and t > 16:
        raise ValueError(f"header16 masks need t <= 16, got {t}")
    masks = np.zeros((m, k), dtype=np.uint16 if header16 else
                     np.uint32 if high32 else np.uint64)
    nprobes = np.zeros(m, dtype=np.int32)
    if k == 0 or m == 0:
        return masks, nprobes
    cdef uint64_t[:, ::1] mv
    cdef uint32_t[:, ::1] mv32
    cdef uint16_t[:, ::1] mv16
    cdef int32_t[::1] nv = nprobes
    cdef double[:, ::1] no_lw = np.zeros((1, 1))
    # dense rank of each code's log-odds, largest first (equal values, equal rank)
    cdef int32_t[::1] qtable = quantized_log_odds(table)
    distinct = np.unique(np.asarray(qtable))[::-1]
    cdef uint16_t[::1] level = np.searchsorted(-distinct, -np.asarray(qtable)).astype(np.uint16)
    cdef topflips_plan plan
    cdef topflips_plan *plan_p = NULL
    cdef topflips_sel_plan sel
    cdef topflips_sel_plan *sel_p = NULL
    if topflips_level() > 0:
        if _fill_plan(&plan, t, h, k):
            plan_p = &plan
        elif not ordered:
            arrays = _sel_plan_arrays(t, h, k)
            if arrays is not None:
                _fill_sel_plan(&sel, arrays, h, k)
                sel_p = &sel
    cdef int rc
    if header16:
        mv16 = masks
        with nogil:
            rc = _flip_masks_rows(no_lw, cq, qtable, level, True, row_v, use_rows,
                                  t, h, k, mv16, nv, plan_p, sel_p)
    elif high32:
        mv32 = masks
        with nogil:
            rc = _flip_masks_rows(no_lw, cq, qtable, level, True, row_v, use_rows,
                                  t, h, k, mv32, nv, plan_p, sel_p)
    else:
        mv = masks
        with nogil:
            rc = _flip_masks_rows(no_lw, cq, qtable, level, True, row_v, use_rows,
                                  t, h, k, mv, nv, plan_p, sel_p)
    if rc != 0:
        raise MemoryError("batch_flip_masks_cq: out of memory")
    return masks, nprobes


def bucket_offsets(const uint64_t[::1] sorted_values, int t):
    """Offsets of the ``2^t`` header buckets of a sorted array: bucket ``b`` is
    ``sorted_values[off[b]:off[b+1]]``; returns int64 ``(2^t + 1,)``."""
    if t < 1 or t > 32:
        raise ValueError(f"t must be in 1..32, got {t}")
    cdef int64_t nb = (<int64_t>1) << t
    offsets = np.empty(nb + 1, dtype=np.int64)
    cdef int64_t[::1] off = offsets
    cdef int64_t n = sorted_values.shape[0]
    cdef int64_t i = 0, b
    cdef int shift = 64 - t
    with nogil:
        for b in range(nb):
            off[b] = i
            while i < n and <int64_t>(sorted_values[i] >> shift) == b:
                i += 1
        off[nb] = n
    if i != n:
        raise ValueError("sorted_values is not sorted")
    return offsets


cdef struct PairBuf:
    int64_t *q
    int64_t *y
    uint8_t *d
    int64_t n
    int64_t cap


cdef int _push(PairBuf *buf, int64_t q, int64_t y, uint8_t d) noexcept nogil:
    cdef int64_t newcap
    cdef void *p1
    cdef void *p2
    cdef void *p3
    if buf.n == buf.cap:
        newcap = buf.cap * 2 if buf.cap else 1024
        p1 = realloc(buf.q, newcap * sizeof(int64_t))
        if p1 == NULL:
            return -1
        buf.q = <int64_t *>p1
        p2 = realloc(buf.y, newcap * sizeof(int64_t))
        if p2 == NULL:
            return -1
        buf.y = <int64_t *>p2
        p3 = realloc(buf.d, newcap * sizeof(uint8_t))
        if p3 == NULL:
            return -1
        buf.d = <uint8_t *>p3
        buf.cap = newcap
    buf.q[buf.n] = q
    buf.y[buf.n] = y
    buf.d[buf.n] = d
    buf.n += 1
    return 0


def scan_chunk(const uint64_t[::1] chunk, const int64_t[::1] offsets, int t,
               const uint64_t[::1] q_values, const uint64_t[:, ::1] probes,
               const int32_t[::1] nprobes, int h, uint8_t[::1] active,
               bint first_only):
    """Match every active ``q_values[i]`` against one sorted chunk.

    ``probes[i, :nprobes[i]]`` are the header flip masks of element ``i`` (bits
    already in the top ``t`` positions; the zero mask, the element's own
    bucket, is always probed first and must not be listed). Returns
    ``(qi int64, yi int64, distance uint8)``: ``yi`` indexes ``chunk``.
    With ``first_only`` each element reports at most one match and is then
    cleared in ``active``.
    """
    cdef int64_t m = q_values.shape[0]
    if probes.shape[0] != m or nprobes.shape[0] != m or active.shape[0] != m:
        raise ValueError("q_values, probes, nprobes and active must have the same length")
    if offsets.shape[0] != ((<int64_t>1) << t) + 1:
        raise ValueError("offsets does not match t")
    if h < 0 or h > 64:
        raise ValueError(f"h must be in 0..64, got {h}")
    cdef int64_t kmax = probes.shape[1]
    cdef int shift = 64 - t
    cdef PairBuf buf
    buf.q = NULL
    buf.y = NULL
    buf.d = NULL
    buf.n = 0
    buf.cap = 0
    cdef int64_t i, j, lo, hi
    cdef int p, np_i, dist, failed = 0
    cdef uint64_t x, mask, y
    cdef bint found
    with nogil:
        for i in range(m):
            if not active[i]:
                continue
            x = q_values[i]
            np_i = nprobes[i]
            if np_i > kmax:
                np_i = <int>kmax
            found = False
            for p in range(-1, np_i):
                mask = 0 if p < 0 else probes[i, p]
                lo = offsets[(x ^ mask) >> shift]
                hi = offsets[((x ^ mask) >> shift) + 1]
                for j in range(lo, hi):
                    y = chunk[j]
                    dist = simdup_popcount64(x ^ y)
                    if dist <= h:
                        if _push(&buf, i, j, <uint8_t>dist) != 0:
                            failed = 1
                            break
                        found = True
                        if first_only:
                            break
                if failed or (found and first_only):
                    break
            if failed:
                break
            if found and first_only:
                active[i] = 0
    try:
        if failed:
            raise MemoryError("scan_chunk: out of memory for the result pairs")
        qi = np.empty(buf.n, dtype=np.int64)
        yi = np.empty(buf.n, dtype=np.int64)
        dd = np.empty(buf.n, dtype=np.uint8)
        if buf.n:
            qi[:] = <int64_t[:buf.n]>buf.q
            yi[:] = <int64_t[:buf.n]>buf.y
            dd[:] = <uint8_t[:buf.n]>buf.d
        return qi, yi, dd
    finally:
        free(buf.q)
        free(buf.y)
        free(buf.d)


def probe_table(const uint64_t[::1] q_values, const mask_t[:, ::1] masks,
                const int32_t[::1] nprobes, int t, int runs=1):
    """Invert the probes of a batch: for every header ``b``, the elements that probe it.

    Returns ``(offsets int64 (2^t * runs + 1,), low uint32 (total,), idx
    uint32 (total,))``. With ``runs = 1`` the elements probing header ``b``
    are ``idx[offsets[b]:offsets[b + 1]]``; with ``runs = R`` they come in
    ``R`` runs by the number ``s`` of header bits their probe flipped, run
    ``(b, s)`` being ``idx[offsets[b * R + s]:offsets[b * R + s + 1]]`` (the
    last run: ``R - 1`` flips or more). ``low`` holds the low 32 bits of
    the elements' values, side by side (each element probes its own header
    plus ``nprobes[i]`` flipped ones). ``masks``: uint64 XOR masks, uint32
    ones holding their top 32 bits (``batch_flip_masks_cq(high32=True)``),
    or uint16 ones holding the header bits alone (``header16=True``). Built
    once per batch by a counting sort, so that matching a sorted chunk is a
    merge of two header-ordered streams instead of ``m * k`` random bucket
    visits; the low bits, a dense array, are what the join sweeps. The runs
    let the join ask less of an entry whose probe already used up ``s`` of
    the distance in the header (:func:`join_chunk`).
    """
    cdef Py_ssize_t m = q_values.shape[0]
    if masks.shape[0] != m or nprobes.shape[0] != m:
        raise ValueError("q_values, masks and nprobes must have the same length")
    if t < 1 or t > 32:
        raise ValueError(f"t must be in 1..32, got {t}")
    if runs < 1 or runs > 65:
        raise ValueError(f"runs must be in 1..65, got {runs}")
    if m >= 0xFFFFFFFF:
        raise ValueError("a batch holds at most 2^32 - 1 elements")
    cdef int64_t nb = (<int64_t>1) << t
    cdef int64_t R = runs
    cdef int shift = 64 - t
    cdef Py_ssize_t kmax = masks.shape[1]
    offsets = np.zeros(nb * R + 1, dtype=np.int64)
    cdef int64_t[::1] off = offsets
    cdef Py_ssize_t i
    cdef int p, np_i, flips
    cdef uint64_t x, mk
    cdef uint32_t xl
    cdef int64_t total = 0, b, f, key
    # uint32 masks are the top 32 bits: (x ^ (f << 32)) >> shift == (x >> shift) ^ (f >> (32 - t));
    # uint16 ones the header bits alone
    cdef int fshift = 0 if mask_t is uint16_t else (shift - 32) if mask_t is uint32_t else shift
    if mask_t is uint16_t and t > 16:
        raise ValueError(f"uint16 (header) masks need t <= 16, got {t}")
    # p = -1 is the element's own header (no flips), then its flipped ones
    with nogil:
        for i in range(m):
            x = q_values[i]
            np_i = nprobes[i] if nprobes[i] < kmax else <int>kmax
            for p in range(-1, np_i):
                mk = 0 if p < 0 else <uint64_t>masks[i, p] >> fshift
                flips = simdup_popcount64(mk)
                key = <int64_t>((x >> shift) ^ mk) * R + (flips if flips < R else R - 1)
                off[key + 1] += 1
            total += np_i + 1
        for b in range(nb * R):
            off[b + 1] += off[b]
    low = np.empty(total, dtype=np.uint32)
    idx = np.empty(total, dtype=np.uint32)
    cdef uint32_t[::1] lv = low
    cdef uint32_t[::1] iv = idx
    fill = offsets[:nb * R].copy()
    cdef int64_t[::1] fv = fill
    with nogil:
        for i in range(m):
            x = q_values[i]
            xl = <uint32_t>x
            np_i = nprobes[i] if nprobes[i] < kmax else <int>kmax
            for p in range(-1, np_i):
                mk = 0 if p < 0 else <uint64_t>masks[i, p] >> fshift
                flips = simdup_popcount64(mk)
                key = <int64_t>((x >> shift) ^ mk) * R + (flips if flips < R else R - 1)
                f = fv[key]
                lv[f] = xl
                iv[f] = <uint32_t>i
                fv[key] = f + 1
    return offsets, low, idx


def compact_probe_table(int64_t[::1] offsets, uint32_t[::1] low, uint32_t[::1] idx,
                        const uint8_t[::1] active):
    """Drop inactive elements from a probe table in place (order kept).

    Returns the new number of entries; ``low``/``idx`` beyond it are garbage.
    """
    cdef int64_t nb = offsets.shape[0] - 1
    cdef int64_t n_active = active.shape[0]
    cdef int64_t b, j, w = 0, start
    cdef uint32_t qi
    cdef int bad = 0
    if low.shape[0] != idx.shape[0] or low.shape[0] < offsets[nb]:
        raise ValueError("the probe table is shorter than its offsets say")
    with nogil:
        start = 0
        for b in range(nb):
            for j in range(start, offsets[b + 1]):
                qi = idx[j]
                if qi >= n_active:
                    bad = 1
                    break
                if active[qi]:
                    low[w] = low[j]
                    idx[w] = qi
                    w += 1
            if bad:
                break
            start = offsets[b + 1]
            offsets[b + 1] = w
    if bad:
        raise ValueError("the probe table names an element beyond `active`")
    return w


def join_kernel_level():
    """The join kernel in use (picking the best one on first use)."""
    return simdup_join_level()


def join_kernel(int level=-1):
    """Pick the join's candidate kernel: 2 AVX-512 (VPOPCNTDQ), 1 AVX2, 0 scalar,
    -1 the best this CPU has. Returns the level in use (a level the CPU lacks
    falls back to the best one below it). For tests and benchmarks; every
    kernel gives the same results."""
    return simdup_join_select(level)


# candidates are checked in batches of CAND_BATCH: each needs three random
# reads (its element number, `active`, its full value), and prefetching them
# for a whole batch overlaps the cache misses instead of paying them in turn
cdef enum:
    CAND_BATCH = 64


cdef int _check_candidates(int64_t nc, const int64_t *ce, const int64_t *cj,
                           const uint32_t[::1] idx, const uint64_t[::1] q_values,
                           const uint64_t[::1] chunk, uint8_t[::1] active, int h,
                           bint first_only, PairBuf *buf) noexcept nogil:
    """Check candidates ``(probe entry ce[c], chunk entry cj[c])`` in order;
    matches go to ``buf``. Returns 0, 1 (out of memory) or 2 (bad element)."""
    cdef uint32_t qs[CAND_BATCH]
    cdef int64_t c, n_active = active.shape[0]
    cdef uint32_t qi
    cdef int dist
    for c in range(nc):
        __builtin_prefetch(&idx[ce[c]])
    for c in range(nc):
        qs[c] = idx[ce[c]]
        if qs[c] < n_active:
            __builtin_prefetch(&q_values[qs[c]])
            __builtin_prefetch(&active[qs[c]])
    for c in range(nc):
        qi = qs[c]
        if qi >= n_active:
            return 2
        if not active[qi]:
            continue
        dist = simdup_popcount64(q_values[qi] ^ chunk[cj[c]])
        if dist <= h:
            if _push(buf, qi, cj[c], <uint8_t>dist) != 0:
                return 1
            if first_only:
                active[qi] = 0
    return 0


def join_chunk(const uint64_t[::1] chunk, const int64_t[::1] chunk_offsets,
               const int64_t[::1] probe_offsets, const uint32_t[::1] low,
               const uint32_t[::1] idx, const uint64_t[::1] q_values, int h,
               uint8_t[::1] active, bint first_only):
    """Match a batch against one sorted chunk by walking both header-ordered tables.

    Same result set as :func:`scan_chunk` with the same probes (within one
    chunk; with ``first_only`` the one reported match of an element may
    differ). A chunk entry ``y`` is a candidate when the low 32 bits differ
    in at most ``h`` positions (a lower bound of the distance; ``h - r`` in
    run ``r`` of a table built with runs, whose probe flipped ``r`` header
    bits), found by a SIMD sweep of ``low`` (:func:`join_kernel`); only then
    is the element's full value read. ``probe_offsets`` comes from
    :func:`probe_table` (its number of runs per bucket is read from its
    length). Returns ``(qi int64, yi int64, distance uint8)``.
    """
    cdef int64_t nb = chunk_offsets.shape[0] - 1
    if nb < 1 or (probe_offsets.shape[0] - 1) % nb:
        raise ValueError("chunk and probe tables use different header lengths")
    cdef int64_t R = (probe_offsets.shape[0] - 1) // nb
    if low.shape[0] != idx.shape[0] or low.shape[0] < probe_offsets[nb * R]:
        raise ValueError("the probe table is shorter than its offsets say")
    if active.shape[0] != q_values.shape[0]:
        raise ValueError("active and q_values differ in length")
    if h < 0 or h > 64:
        raise ValueError(f"h must be in 0..64, got {h}")
    simdup_join_level()
    # one kernel for the whole chunk, even if join_kernel() is called meanwhile
    cdef simdup_block_fn next_block = simdup_next_block
    cdef int64_t width = simdup_block_width
    cdef int64_t slots = simdup_block_slots
    cdef PairBuf buf
    buf.q = NULL
    buf.y = NULL
    buf.d = NULL
    buf.n = 0
    buf.cap = 0
    cdef int64_t b, lo, hi, j0, e0, plo, phi, r
    cdef int hr
    cdef uint32_t ys[8]
    cdef uint32_t masks[8]
    cdef uint32_t mk
    cdef int s, ny, failed = 0
    cdef int64_t ce[CAND_BATCH]
    cdef int64_t cj[CAND_BATCH]
    cdef int64_t nc = 0
    cdef const uint32_t *lp = &low[0] if low.shape[0] else NULL
    with nogil:
        for b in range(nb):
            lo = chunk_offsets[b]
            hi = chunk_offsets[b + 1]
            if lo == hi or probe_offsets[b * R] == probe_offsets[b * R + R]:
                continue
            # chunk values outer, `slots` at a time; a SIMD sweep of the bucket's
            # probe entries inner, run by run (run r: the probe flipped r
            # header bits, so the low bits may differ in at most h - r);
            # candidates are queued for _check_candidates
            j0 = lo
            while j0 < hi:
                ny = <int>(hi - j0) if hi - j0 < slots else <int>slots
                for s in range(ny):
                    ys[s] = <uint32_t>chunk[j0 + s]
                for r in range(R):
                    hr = h - <int>r if R > 1 else h
                    if hr < 0:
                        break
                    plo = probe_offsets[b * R + r]
                    phi = probe_offsets[b * R + r + 1]
                    if plo == phi:
                        continue
                    e0 = next_block(ys, ny, lp, plo, phi, <uint32_t>hr, masks)
                    while e0 < phi:
                        for s in range(ny):
                            mk = masks[s]
                            while mk:
                                if nc == CAND_BATCH:
                                    failed = _check_candidates(nc, ce, cj, idx, q_values, chunk,
                                                               active, h, first_only, &buf)
                                    nc = 0
                                    if failed:
                                        break
                                ce[nc] = e0 + ctz32(mk)
                                cj[nc] = j0 + s
                                nc += 1
                                mk &= mk - 1
                            if failed:
                                break
                        if failed:
                            break
                        e0 = next_block(ys, ny, lp, e0 + width, phi, <uint32_t>hr, masks)
                    if failed:
                        break
                if failed:
                    break
                j0 += ny
            if failed:
                break
        if not failed and nc:
            failed = _check_candidates(nc, ce, cj, idx, q_values, chunk, active, h,
                                       first_only, &buf)
    try:
        if failed == 2:
            raise ValueError("the probe table names an element beyond `active`")
        if failed:
            raise MemoryError("join_chunk: out of memory for the result pairs")
        qa = np.empty(buf.n, dtype=np.int64)
        ya = np.empty(buf.n, dtype=np.int64)
        da = np.empty(buf.n, dtype=np.uint8)
        if buf.n:
            qa[:] = <int64_t[:buf.n]>buf.q
            ya[:] = <int64_t[:buf.n]>buf.y
            da[:] = <uint8_t[:buf.n]>buf.d
        return qa, ya, da
    finally:
        free(buf.q)
        free(buf.y)
        free(buf.d)
