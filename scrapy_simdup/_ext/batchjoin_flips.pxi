# Flip sets of every row of a batch: the row loop (VOSH or the _topflips.h kernels) and batch_flip_masks.

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
    if h < 0 or h > MAX_DISTANCE:
        raise ValueError(f"h must be in 0..{MAX_DISTANCE}, got {h}")
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
