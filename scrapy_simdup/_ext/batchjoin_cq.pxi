# The quantised (cq) path: int32 log-odds, the candidate flip sets of _topflips.h, batch_flip_masks_cq.

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
    select kernel at larger ``h`` (much faster than VOSH there)."""
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
