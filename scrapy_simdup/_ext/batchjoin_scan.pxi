# scan_chunk: every element probes its buckets in a sorted chunk (bucket_offsets, the pair buffer).

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
    uint8_t *a          # equal sketch bins (join_chunk with sketches)
    int64_t n
    int64_t cap


cdef inline void _init_buf(PairBuf *buf) noexcept nogil:
    buf.q = NULL
    buf.y = NULL
    buf.d = NULL
    buf.a = NULL
    buf.n = 0
    buf.cap = 0


cdef inline void _free_buf(PairBuf *buf) noexcept nogil:
    free(buf.q)
    free(buf.y)
    free(buf.d)
    free(buf.a)


cdef int _push(PairBuf *buf, int64_t q, int64_t y, uint8_t d, uint8_t a) noexcept nogil:
    cdef int64_t newcap
    cdef void *p1
    cdef void *p2
    cdef void *p3
    cdef void *p4
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
        p4 = realloc(buf.a, newcap * sizeof(uint8_t))
        if p4 == NULL:
            return -1
        buf.a = <uint8_t *>p4
        buf.cap = newcap
    buf.q[buf.n] = q
    buf.y[buf.n] = y
    buf.d[buf.n] = d
    buf.a[buf.n] = a
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
    _init_buf(&buf)
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
                        if _push(&buf, i, j, <uint8_t>dist, 0) != 0:
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
        _free_buf(&buf)
