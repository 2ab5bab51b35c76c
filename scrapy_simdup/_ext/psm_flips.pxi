# Flip sets by VOSH: flip_masks_c, flip_masks_many_c, ranks_of.

def flip_masks_c(_Model model, W, int header_bits, int distance, long max_probes):
    """Header XOR masks in non-increasing p(S), mask 0 first (see index/memory.py)."""
    cdef double lw[MAX_T]
    cdef uint64_t mk[MAX_T]
    cdef const double *wp = NULL
    cdef const double[::1] wv
    if W is not None:
        wv = W
        wp = &wv[0]
    cdef long total = vosh_total(header_bits, distance)
    if max_probes < 0 or max_probes > total:
        max_probes = total
    cdef int keep = header_bits if max_probes >= header_bits else <int>max_probes
    if prepare(&model.m, wp, header_bits, keep, lw, mk) < 0:
        raise ValueError("W must be finite (no NaN or infinity)")
    cdef long cap = distance + max_probes + 2
    cdef vosh_node *heap = <vosh_node *>malloc(cap * sizeof(vosh_node))
    if heap == NULL:
        raise MemoryError()
    masks = np.empty(max_probes, dtype=np.uint64)
    flipped = np.empty(max_probes, dtype=np.uint8)
    cdef uint64_t[::1] mv = masks
    cdef uint8_t[::1] fv = flipped
    cdef vosh_gen g
    cdef long k = 0
    cdef int size, rc
    cdef uint64_t m
    try:
        vosh_init(&g, lw, mk, keep, distance, heap, cap)
        vosh_limit(&g, max_probes)      # at most max_probes sets are taken
        while k < max_probes:
            rc = vosh_next(&g, &m, &size)
            if rc <= 0:
                break
            mv[k] = m
            fv[k] = size
            k += 1
    finally:
        free(heap)
    return masks[:k], flipped[:k]


def flip_masks_many_c(_Model model, const double[:, ::1] W, int header_bits, int distance,
                      long max_probes):
    """``flip_masks_c`` for every row of ``W`` in one call: ``(masks, counts)``,
    the masks of row i being ``masks[sum(counts[:i]) : sum(counts[:i + 1])]``."""
    cdef Py_ssize_t n = W.shape[0], i
    if W.shape[1] != 64:
        raise ValueError(f"W must have shape (n, 64), got ({n}, {W.shape[1]})")
    cdef double lw[MAX_T]
    cdef uint64_t mk[MAX_T]
    cdef long total = vosh_total(header_bits, distance)
    if max_probes < 0 or max_probes > total:
        max_probes = total
    cdef int keep = header_bits if max_probes >= header_bits else <int>max_probes
    cdef long cap = distance + max_probes + 2
    masks = np.empty(n * max_probes, dtype=np.uint64)
    counts = np.zeros(n, dtype=np.int64)
    cdef uint64_t[::1] mv = masks
    cdef int64_t[::1] cv = counts
    cdef vosh_node *heap = <vosh_node *>malloc(cap * sizeof(vosh_node))
    if heap == NULL:
        raise MemoryError()
    cdef vosh_gen g
    cdef long k, at = 0
    cdef int size, rc
    cdef uint64_t m
    try:
        for i in range(n):
            if prepare(&model.m, &W[i, 0], header_bits, keep, lw, mk) < 0:
                raise ValueError("W must be finite (no NaN or infinity)")
            vosh_init(&g, lw, mk, keep, distance, heap, cap)
            vosh_limit(&g, max_probes)
            k = 0
            while k < max_probes:
                rc = vosh_next(&g, &m, &size)
                if rc <= 0:
                    break
                mv[at + k] = m
                k += 1
            cv[i] = k
            at += k
    finally:
        free(heap)
    return masks[:at], counts


def ranks_of(_Model model, const double[:, ::1] W, const uint64_t[::1] a,
             const uint64_t[::1] b, int t, int distance, long cap_rank):
    """For each pair, the 1-based probe number at which VOSH (on a's W, t
    header bits) reaches b's header, or -1 if it is not reached within
    cap_rank probes (or differs in more than `distance` header bits)."""
    cdef Py_ssize_t n = a.shape[0], i
    out = np.full(n, -1, dtype=np.int64)
    cdef int64_t[::1] ov = out
    cdef double lw[MAX_T]
    cdef uint64_t mk[MAX_T]
    cdef long total = vosh_total(t, distance)
    if cap_rank < 0 or cap_rank > total:
        cap_rank = total
    cdef long cap = distance + cap_rank + 2
    cdef vosh_node *heap = <vosh_node *>malloc(cap * sizeof(vosh_node))
    cdef vosh_gen g
    cdef uint64_t target, m, hmask = (~(<uint64_t>0)) << (64 - t)
    cdef long k
    cdef int size
    if heap == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(n):
                target = (a[i] ^ b[i]) & hmask
                if simdup_popcount64(target) > distance:
                    continue
                if prepare(&model.m, &W[i, 0], t, t, lw, mk) < 0:
                    continue
                vosh_init(&g, lw, mk, t, distance, heap, cap)
                vosh_limit(&g, cap_rank)
                k = 0
                while k < cap_rank and vosh_next(&g, &m, &size) > 0:
                    k += 1
                    if m == target:
                        ov[i] = k
                        break
    finally:
        free(heap)
    return out
