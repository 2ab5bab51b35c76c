# The probe table and join_chunk: a batch and a sorted chunk merged as two header-ordered streams.

def probe_table(const uint64_t[::1] q_values, const mask_t[:, ::1] masks,
                const int32_t[::1] nprobes, int t, int runs=1, bint low_bits=True):
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
    the distance in the header (:func:`join_chunk`). ``low_bits=False``
    leaves ``low`` empty: the join then gathers every bucket's full values
    (:func:`gathers_always` says when it would anyway).
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
    low = np.empty(total if low_bits else 0, dtype=np.uint32)
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
                if low_bits:
                    lv[f] = xl
                iv[f] = <uint32_t>i
                fv[key] = f + 1
    return offsets, low, idx


def compact_probe_table(int64_t[::1] offsets, uint32_t[::1] low, uint32_t[::1] idx,
                        const uint8_t[::1] active):
    """Drop inactive elements from a probe table in place (order kept).

    Returns the new number of entries; ``low``/``idx`` beyond it are garbage
    (``low`` may be empty: a table built without its low bits).
    """
    cdef int64_t nb = offsets.shape[0] - 1
    cdef int64_t n_active = active.shape[0]
    cdef int64_t b, j, w = 0, start
    cdef uint32_t qi
    cdef int bad = 0
    cdef bint has_low = low.shape[0] > 0
    if (has_low and low.shape[0] != idx.shape[0]) or idx.shape[0] < offsets[nb]:
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
                    if has_low:
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
    """Pick the join's candidate kernel: 2 AVX-512 (VPOPCNTDQ, BW), 1 AVX2, 0 scalar,
    -1 the best this CPU has. Returns the level in use (a level the CPU lacks
    falls back to the best one below it). For tests and benchmarks; every
    kernel gives the same pairs (with ``first_only`` the one match kept for
    an element can differ: the kernels sweep blocks of different widths)."""
    return simdup_join_select(level)


# P(popcount(a ^ b) <= k) for random 32-bit a and b, k = 0..64: the share of
# a bucket's entries the low-bit sweep passes at threshold k
cdef double _LOW_PASS[65]
_cdf = 0.0
for _k in range(65):
    _cdf += (math.comb(32, _k) if _k <= 32 else 0) / 2.0 ** 32
    _LOW_PASS[_k] = min(_cdf, 1.0)
del _cdf, _k

# a bucket's full values are gathered (one read an entry) when the low-bit
# sweep would pass, per entry, at least GATHER_AT candidates (each a read of
# the element's full value, its number and its active flag) plus
# GATHER_PAIR_AT per chunk value of the bucket (the 64-bit sweep costs more
# per pair than the 32-bit one: large buckets need a higher pass rate)
cdef double GATHER_AT = 0.25
cdef double GATHER_PAIR_AT = 0.002
cdef int _gather_mode = -1


def gathers_always(int h, int runs):
    """Whether :func:`join_chunk` (in the default mode) gathers the full values
    of every bucket at radius ``h`` with a probe table of ``runs`` runs: even
    the run of the most flips then passes too many entries on the low bits,
    so a probe table for it needs no low bits (``probe_table(low_bits=False)``)."""
    cdef int r
    if _gather_mode == 0 or h < 0 or h > 64 or runs < 1 or runs > h + 1:
        return False
    for r in range(runs):
        # one chunk value in the bucket is the worst case of the rule in join_chunk
        if _LOW_PASS[h - r] < GATHER_AT + GATHER_PAIR_AT:
            return False
    return True


def join_gather(int mode=-1):
    """Set when :func:`join_chunk` gathers a bucket's full values by default:
    -1 when it pays, 0 never, 1 always (but a probe table without its low
    bits is always gathered). Returns the mode set. For tests and
    benchmarks; every mode gives the same results."""
    global _gather_mode
    if mode < -1 or mode > 1:
        raise ValueError(f"gather mode must be -1, 0 or 1, got {mode}")
    _gather_mode = mode
    return mode


def sweep_candidates(const uint64_t[::1] ys, const uint64_t[::1] values, int h, bint full):
    """The candidates the join's sweep finds: ``(entry, chunk value)`` for
    every ``values[entry]`` within ``h`` of ``ys[j]`` on the low 32 bits
    (``full``: on all 64, the gathered sweep), the chunk values taken as
    the join takes them (``slots`` at a time). For tests: the kernels'
    exact candidate sets."""
    if h < 0 or h > 64:
        raise ValueError(f"h must be in 0..64, got {h}")
    simdup_join_level()
    cdef int64_t n = values.shape[0], ny_total = ys.shape[0], width = simdup_block_width
    cdef int64_t slots = simdup_block_slots, j0, e0
    cdef int ny, s
    cdef uint32_t masks[8]
    cdef uint32_t y32[8]
    cdef uint64_t y64[8]
    cdef uint32_t mk
    low = np.ascontiguousarray(np.asarray(values) & np.uint64(0xFFFFFFFF), dtype=np.uint32)
    cdef const uint32_t[::1] lv = low
    cdef const uint32_t *lp = &lv[0] if n else NULL
    cdef const uint64_t *vp = &values[0] if n else NULL
    found = []
    j0 = 0
    while j0 < ny_total:
        ny = <int>min(slots, ny_total - j0)
        for s in range(ny):
            y32[s] = <uint32_t>ys[j0 + s]
            y64[s] = ys[j0 + s]
        e0 = simdup_next_block64(y64, ny, vp, 0, n, h, masks) if full else \
            simdup_next_block(y32, ny, lp, 0, n, h, masks)
        while e0 < n:
            for s in range(ny):
                mk = masks[s]
                while mk:
                    found.append((e0 + ctz32(mk), j0 + s))
                    mk &= mk - 1
            e0 = simdup_next_block64(y64, ny, vp, e0 + width, n, h, masks) if full else \
                simdup_next_block(y32, ny, lp, e0 + width, n, h, masks)
        j0 += ny
    return found


# candidates are checked in batches of CAND_BATCH: each needs three random
# reads (its element number, `active`, its full value), and prefetching them
# for a whole batch overlaps the cache misses instead of paying them in turn
cdef enum:
    CAND_BATCH = 256        # at least a block's candidates: 16 entries x 8 values


cdef int _check_candidates(int64_t nc, const int64_t *ce, const int64_t *cj,
                           const uint8_t *swept,
                           const uint32_t[::1] idx, const uint64_t[::1] q_values,
                           const uint64_t[::1] chunk, uint8_t[::1] active, int h,
                           bint first_only, const uint8_t *qsk, const uint8_t *ysk,
                           int64_t qstride, int64_t ystride, int needed,
                           const uint64_t *qp, const uint64_t *yp, int pair_limit,
                           PairBuf *buf) noexcept nogil:
    """Check candidates ``(probe entry ce[c], chunk entry cj[c])`` in order;
    matches go to ``buf``. ``swept[c]``: 1 for a candidate the pair sweep
    checked in full (key and pair rule: its distance is computed if it
    matches), 0 for one whose distance is not checked yet (the low-bit
    sweep's, or the gathered sweep's without partner keys). With
    partner keys (``qp`` not NULL), an unchecked pair within ``h`` whose two
    key distances add up to more than ``pair_limit`` is dropped before its
    sketches are read. With sketches (``qsk`` not NULL), a pair within ``h`` is a match
    when at least ``needed`` bins agree.
    Returns 0, 1 (out of memory) or 2 (bad element)."""
    cdef int agree = 0
    cdef uint32_t qs[CAND_BATCH]
    cdef int64_t c, n_active = active.shape[0]
    cdef uint32_t qi
    cdef int dist
    for c in range(nc):
        __builtin_prefetch(&idx[ce[c]])
    for c in range(nc):
        qs[c] = idx[ce[c]]
        if qs[c] < n_active:
            __builtin_prefetch(&active[qs[c]])
            if not swept[c] or qsk == NULL:     # (without sketches: every one matches)
                __builtin_prefetch(&q_values[qs[c]])
            if not swept[c] and qp != NULL:
                __builtin_prefetch(&qp[qs[c]])
            if qsk != NULL and swept[c]:
                # both sketches (32 bytes each, a cache line at most two) of a
                # candidate the pair sweep checked in full: it reads them
                __builtin_prefetch(qsk + <int64_t>qs[c] * qstride)
                __builtin_prefetch(qsk + <int64_t>qs[c] * qstride + SIMDUP_SKETCH_BINS - 1)
                __builtin_prefetch(ysk + cj[c] * ystride)
                __builtin_prefetch(ysk + cj[c] * ystride + SIMDUP_SKETCH_BINS - 1)
    for c in range(nc):
        qi = qs[c]
        if qi >= n_active:
            return 2
        if not active[qi]:
            continue
        if not swept[c]:
            dist = simdup_popcount64(q_values[qi] ^ chunk[cj[c]])
            if dist > h:
                continue
            if qp != NULL and dist + simdup_popcount64(qp[qi] ^ yp[cj[c]]) > pair_limit:
                continue
        if qsk != NULL:
            agree = simdup_sketch_matches(qsk + <int64_t>qi * qstride, ysk + cj[c] * ystride)
            if agree < needed:
                continue
        if swept[c]:
            dist = simdup_popcount64(q_values[qi] ^ chunk[cj[c]])
        if _push(buf, qi, cj[c], <uint8_t>dist, <uint8_t>agree) != 0:
            return 1
        if first_only:
            active[qi] = 0
    return 0


def join_chunk(const uint64_t[::1] chunk, const int64_t[::1] chunk_offsets,
               const int64_t[::1] probe_offsets, const uint32_t[::1] low,
               const uint32_t[::1] idx, const uint64_t[::1] q_values, int h,
               uint8_t[::1] active, bint first_only, q_sketch=None, chunk_sketch=None,
               int needed=0, gather=None, q_partner=None, chunk_partner=None,
               int pair_limit=128):
    """Match a batch against one sorted chunk by walking both header-ordered tables.

    Same result set as :func:`scan_chunk` with the same probes (within one
    chunk; with ``first_only`` the one reported match of an element may
    differ). A chunk entry ``y`` is a candidate when the low 32 bits differ
    in at most ``h`` positions (a lower bound of the distance; ``h - r`` in
    run ``r`` of a table built with runs, whose probe flipped ``r`` header
    bits), found by a SIMD sweep of ``low`` (:func:`join_kernel`); only then
    is the element's full value read (but see ``gather`` below).
    ``probe_offsets`` comes from
    :func:`probe_table` (its number of runs per bucket is read from its
    length; a table without its low bits has every bucket gathered).
    Returns ``(qi int64, yi int64, distance uint8)``.

    With ``q_sketch`` (uint8 ``(len(q_values), 32)``) and ``chunk_sketch``
    (uint8 ``(len(chunk), 32)``; rows may be strided, as the sketch field of
    a structured array, but each row's bytes contiguous), a pair within ``h`` is kept only when at
    least ``needed`` sketch bins agree (PSM-F deactivates an element at its
    first *verified* match), and a fourth array gives each pair's equal bins
    (uint8).

    At a wide radius the low bits are no filter (at ``h = 22`` they pass
    almost every entry), so a bucket whose low-bit sweep would pass many
    candidates has its elements' full values gathered once and swept for
    the exact distance instead: the same candidates that pass, in the same
    order, without reading each element's value once per chunk value.
    ``gather``: -1 when that pays (the expected candidates per entry and
    chunk value), 0 never, 1 always (tests, benchmarks; None:
    :func:`join_gather`'s mode); the result is the same, but for a table
    naming an element beyond ``q_values``, which a gathered bucket finds in
    any entry, not only in a candidate.

    ``q_partner`` and ``chunk_partner`` (uint64, aligned with ``q_values``
    and ``chunk``): each page's other key; a pair whose two key distances
    add up to more than ``pair_limit`` is dropped before its sketches are
    read (the verified rule's pair rule, ``_limits.pair_limit``).
    """
    cdef const uint64_t[::1] qp_view
    cdef const uint64_t[::1] yp_view
    cdef const uint64_t *qp = NULL
    cdef const uint64_t *yp = NULL
    if (q_partner is None) != (chunk_partner is None):
        raise ValueError("give both q_partner and chunk_partner, or neither")
    if q_partner is not None:
        qp_view = q_partner
        yp_view = chunk_partner
        if qp_view.shape[0] != q_values.shape[0] or yp_view.shape[0] != chunk.shape[0]:
            raise ValueError("a partner array differs in length from its keys")
        qp = &qp_view[0] if qp_view.shape[0] else NULL
        yp = &yp_view[0] if yp_view.shape[0] else NULL
        if qp == NULL or yp == NULL:
            qp = yp = NULL          # an empty side: nothing to check
    if pair_limit < 0 or pair_limit > 128:
        raise ValueError(f"pair_limit must be in 0..128, got {pair_limit}")
    cdef const uint8_t[:, :] qs_view
    cdef const uint8_t[:, :] ys_view
    cdef int64_t qstride = 0, ystride = 0
    cdef const uint8_t *qsk = NULL
    cdef const uint8_t *ysk = NULL
    cdef bint verified = q_sketch is not None or chunk_sketch is not None
    if verified:
        if q_sketch is None or chunk_sketch is None:
            raise ValueError("give both q_sketch and chunk_sketch, or neither")
        qs_view = q_sketch
        ys_view = chunk_sketch
        if qs_view.shape[0] != q_values.shape[0] or qs_view.shape[1] != SIMDUP_SKETCH_BINS:
            raise ValueError(f"q_sketch must have shape ({q_values.shape[0]}, "
                             f"{SIMDUP_SKETCH_BINS})")
        if ys_view.shape[0] != chunk.shape[0] or ys_view.shape[1] != SIMDUP_SKETCH_BINS:
            raise ValueError(f"chunk_sketch must have shape ({chunk.shape[0]}, "
                             f"{SIMDUP_SKETCH_BINS})")
        if (qs_view.shape[0] and qs_view.strides[1] != 1) or \
                (ys_view.shape[0] and ys_view.strides[1] != 1):
            raise ValueError("each sketch's bytes must be contiguous")
        qstride = qs_view.strides[0]
        ystride = ys_view.strides[0]
        if needed < 0 or needed > SIMDUP_SKETCH_BINS:
            raise ValueError(f"needed must be in 0..{SIMDUP_SKETCH_BINS}, got {needed}")
        qsk = &qs_view[0, 0] if qs_view.shape[0] else NULL
        ysk = &ys_view[0, 0] if ys_view.shape[0] else NULL
        if qsk == NULL or ysk == NULL:      # an empty side: nothing can match
            z = np.zeros(0, dtype=np.int64)
            return z, z.copy(), np.zeros(0, np.uint8), np.zeros(0, np.uint8)
    cdef int64_t nb = chunk_offsets.shape[0] - 1
    if nb < 1 or (probe_offsets.shape[0] - 1) % nb:
        raise ValueError("chunk and probe tables use different header lengths")
    cdef int64_t R = (probe_offsets.shape[0] - 1) // nb
    if (low.shape[0] and low.shape[0] != idx.shape[0]) or idx.shape[0] < probe_offsets[nb * R]:
        raise ValueError("the probe table is shorter than its offsets say")
    cdef int64_t k
    if probe_offsets[0] < 0 or chunk_offsets[0] < 0 or chunk_offsets[nb] > chunk.shape[0]:
        raise ValueError("an offset is out of range")
    for k in range(nb * R):
        if probe_offsets[k] > probe_offsets[k + 1]:
            raise ValueError("the probe table's offsets decrease")
    for k in range(nb):
        if chunk_offsets[k] > chunk_offsets[k + 1]:
            raise ValueError("the chunk's offsets decrease")
    if active.shape[0] != q_values.shape[0]:
        raise ValueError("active and q_values differ in length")
    if h < 0 or h > 64:
        raise ValueError(f"h must be in 0..64, got {h}")
    if gather is None:
        gather = _gather_mode
    elif gather not in (-1, 0, 1):
        raise ValueError(f"gather must be -1, 0 or 1, got {gather!r}")
    cdef int gather_mode = gather
    if low.shape[0] == 0:
        gather_mode = 1         # (a table without its low bits)
    simdup_join_level()
    # one kernel for the whole chunk, even if join_kernel() is called meanwhile
    cdef simdup_block_fn next_block = simdup_next_block
    cdef simdup_block64_fn next_block64 = simdup_next_block64
    cdef simdup_collect64_fn collect_pair64 = simdup_collect_pair64
    cdef int64_t width = simdup_block_width
    cdef int64_t slots = simdup_block_slots
    if width * slots > CAND_BATCH:      # (a block's candidates must fit a queue)
        raise RuntimeError(f"join kernel blocks of {width} x {slots} exceed {CAND_BATCH}")
    cdef PairBuf buf
    _init_buf(&buf)
    cdef int64_t b, lo, hi, j0, e0, plo, phi, r
    cdef int hr
    cdef uint32_t ys[8]
    cdef uint32_t masks[8]
    cdef uint32_t mk
    cdef int s, ny, failed = 0
    cdef int64_t ce[CAND_BATCH]
    cdef int64_t cj[CAND_BATCH]
    cdef uint8_t cs[CAND_BATCH]
    cdef uint8_t swept[CAND_BATCH]
    cdef int64_t nc = 0
    cdef int got
    cdef const uint32_t *lp = &low[0] if low.shape[0] else NULL
    # the gathered full values of a bucket's entries (from entry p0 on),
    # allocated at the first gathered bucket and grown as needed
    cdef uint64_t ys64[8]
    cdef uint64_t ysp64[8]
    cdef uint64_t *gv = NULL
    cdef uint64_t *gp = NULL          # their other keys (the pair rule)
    cdef uint64_t *grown
    cdef int64_t p0 = 0, p1, e, gcap = 0, m = q_values.shape[0]
    cdef uint32_t qi
    cdef double passed
    cdef bint gathered = False
    with nogil:
        for b in range(nb):
            lo = chunk_offsets[b]
            hi = chunk_offsets[b + 1]
            if lo == hi or probe_offsets[b * R] == probe_offsets[b * R + R]:
                continue
            p0 = probe_offsets[b * R]
            p1 = probe_offsets[b * R + R]
            gathered = gather_mode == 1
            if gather_mode < 0:
                # expected low-bit candidates, against one gathered read an
                # entry and the dearer sweep of its pairs
                passed = 0
                for r in range(R):
                    hr = h - <int>r if R > 1 else h
                    if hr < 0:
                        break
                    passed += (probe_offsets[b * R + r + 1] - probe_offsets[b * R + r]) \
                        * _LOW_PASS[hr]
                gathered = passed * (hi - lo) >= \
                    (GATHER_AT + GATHER_PAIR_AT * (hi - lo)) * (p1 - p0)
            if gathered and p1 - p0 > gcap:
                grown = <uint64_t *>realloc(gv, (p1 - p0) * sizeof(uint64_t))
                if grown == NULL:
                    failed = 3
                    break
                gv = grown
                if qp != NULL:
                    grown = <uint64_t *>realloc(gp, (p1 - p0) * sizeof(uint64_t))
                    if grown == NULL:
                        failed = 3
                        break
                    gp = grown
                gcap = p1 - p0
            if gathered:
                for e in range(p0, p1):
                    qi = idx[e]
                    if qi >= m:
                        failed = 2
                        break
                    gv[e - p0] = q_values[qi]
                    if qp != NULL:
                        gp[e - p0] = qp[qi]
                if failed:
                    break
            # chunk values outer, `slots` at a time; a SIMD sweep of the bucket's
            # probe entries inner, run by run (run r: the probe flipped r
            # header bits, so the low bits may differ in at most h - r);
            # candidates are queued for _check_candidates
            j0 = lo
            while j0 < hi:
                ny = <int>(hi - j0) if hi - j0 < slots else <int>slots
                for s in range(ny):
                    ys[s] = <uint32_t>chunk[j0 + s]
                    ys64[s] = chunk[j0 + s]
                    if yp != NULL:
                        ysp64[s] = yp[j0 + s]
                for r in range(R):
                    hr = h - <int>r if R > 1 else h
                    if hr < 0:
                        break
                    plo = probe_offsets[b * R + r]
                    phi = probe_offsets[b * R + r + 1]
                    if plo == phi:
                        continue
                    if gathered and qp != NULL:
                        # the full distance, h, and the pair rule with the
                        # partners; the sweep queues its candidates itself
                        e = plo - p0
                        while e < phi - p0:
                            if CAND_BATCH - nc < width * ny:
                                failed = _check_candidates(nc, ce, cj, swept, idx, q_values, chunk,
                                                           active, h, first_only, qsk, ysk,
                                                           qstride, ystride, needed,
                                                           qp, yp, pair_limit, &buf)
                                nc = 0
                                if failed:
                                    break
                            e = collect_pair64(ys64, ysp64, ny, gv, gp, e, phi - p0,
                                               <uint32_t>h, <uint32_t>pair_limit, <int>width,
                                               &ce[nc], &cs[nc], CAND_BATCH - nc, &got)
                            for k in range(nc, nc + got):
                                ce[k] += p0
                                cj[k] = j0 + cs[k]
                                swept[k] = 1
                            nc += got
                        if failed:
                            break
                        continue
                    # (gathered: the full distance, h; the same blocks as the
                    # low bits')
                    if gathered:
                        e0 = p0 + next_block64(ys64, ny, gv, plo - p0, phi - p0, <uint32_t>h,
                                               masks)
                    else:
                        e0 = next_block(ys, ny, lp, plo, phi, <uint32_t>hr, masks)
                    while e0 < phi:
                        for s in range(ny):
                            mk = masks[s]
                            while mk:
                                if nc == CAND_BATCH:
                                    failed = _check_candidates(nc, ce, cj, swept, idx, q_values,
                                                               chunk, active, h, first_only,
                                                               qsk, ysk, qstride, ystride,
                                                               needed, qp, yp, pair_limit,
                                                               &buf)
                                    nc = 0
                                    if failed:
                                        break
                                ce[nc] = e0 + ctz32(mk)
                                cj[nc] = j0 + s
                                swept[nc] = 0
                                nc += 1
                                mk &= mk - 1
                            if failed:
                                break
                        if failed:
                            break
                        if gathered:
                            e0 = p0 + next_block64(ys64, ny, gv, e0 + width - p0, phi - p0,
                                                   <uint32_t>h, masks)
                        else:
                            e0 = next_block(ys, ny, lp, e0 + width, phi, <uint32_t>hr, masks)
                    if failed:
                        break
                if failed:
                    break
                j0 += ny
            if failed:
                break
        if not failed and nc:
            failed = _check_candidates(nc, ce, cj, swept, idx, q_values, chunk, active, h,
                                       first_only, qsk, ysk, qstride, ystride, needed,
                                       qp, yp, pair_limit, &buf)
    free(gv)
    free(gp)
    try:
        if failed == 2:
            raise ValueError("the probe table names an element beyond `active`")
        if failed == 3:
            raise MemoryError("join_chunk: out of memory for a bucket's values")
        if failed:
            raise MemoryError("join_chunk: out of memory for the result pairs")
        qa = np.empty(buf.n, dtype=np.int64)
        ya = np.empty(buf.n, dtype=np.int64)
        da = np.empty(buf.n, dtype=np.uint8)
        aa = np.empty(buf.n, dtype=np.uint8)
        if buf.n:
            qa[:] = <int64_t[:buf.n]>buf.q
            ya[:] = <int64_t[:buf.n]>buf.y
            da[:] = <uint8_t[:buf.n]>buf.d
            aa[:] = <uint8_t[:buf.n]>buf.a
        return (qa, ya, da, aa) if verified else (qa, ya, da)
    finally:
        _free_buf(&buf)


def sketch_agree(const uint8_t[:, ::1] a, const int64_t[::1] ai, const uint8_t[:, ::1] b,
                 const int64_t[::1] bi):
    """Equal bins of the sketches ``a[ai[k]]`` and ``b[bi[k]]`` for every ``k``
    (uint8): the verification of candidate pairs found without the join
    (``--exact``, the index engine)."""
    cdef Py_ssize_t n = ai.shape[0], k
    if bi.shape[0] != n:
        raise ValueError("ai and bi differ in length")
    if a.shape[1] != SIMDUP_SKETCH_BINS or b.shape[1] != SIMDUP_SKETCH_BINS:
        raise ValueError(f"sketches must have {SIMDUP_SKETCH_BINS} columns")
    out = np.empty(n, dtype=np.uint8)
    if n == 0:
        return out
    if np.min(ai) < 0 or np.max(ai) >= a.shape[0] or np.min(bi) < 0 or np.max(bi) >= b.shape[0]:
        raise ValueError("a row number is out of range")
    cdef uint8_t[::1] ov = out
    with nogil:
        for k in range(n):
            ov[k] = <uint8_t>simdup_sketch_matches(&a[ai[k], 0], &b[bi[k], 0])
    return out
