# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Local check over the buckets fetched from Redis (two keys, verified).

The Redis backend fetches, for a batch of candidates, every probed bucket of
both keys in one MGET (``index.redis.lua`` documents the records). This module
finds, for each candidate, its best verified match among them
(:func:`scan_verified`), and which of its own insertions a chunk in flight
may hide from the snapshot (:func:`own_flags`). No Scrapy, no Redis here.
"""
from libc.stdint cimport int64_t, uint32_t, uint64_t, uint8_t

from scrapy_simdup._ext.popcount cimport simdup_popcount64
from scrapy_simdup._ext.sorted cimport simdup_find_u64
from scrapy_simdup._ext.sketch cimport SIMDUP_SKETCH_BINS, simdup_sketch_matches

import numpy as np

# record sizes: key 1 + sketch; key 2 + header and position of the key-1 record
cdef enum:
    REC1 = 40
    REC2 = 14


cdef inline uint64_t _le64(const uint8_t *p) noexcept nogil:
    # records are little-endian whatever the host
    return (<uint64_t>p[0] | <uint64_t>p[1] << 8 | <uint64_t>p[2] << 16 |
            <uint64_t>p[3] << 24 | <uint64_t>p[4] << 32 | <uint64_t>p[5] << 40 |
            <uint64_t>p[6] << 48 | <uint64_t>p[7] << 56)


cdef inline uint32_t _le24(const uint8_t *p) noexcept nogil:
    return <uint32_t>p[0] | <uint32_t>p[1] << 8 | <uint32_t>p[2] << 16


cdef inline Py_ssize_t _find(const uint64_t[::1] sorted_, uint64_t x) noexcept nogil:
    """Position of ``x`` in the ascending ``sorted_``, or -1."""
    return simdup_find_u64(&sorted_[0] if sorted_.shape[0] else NULL, sorted_.shape[0], x)


cdef inline void _own_seen(short[::1] oa, short[::1] od, uint64_t[::1] ok, Py_ssize_t c,
                           int a, int d, uint64_t k1) noexcept nogil:
    # the own record, met by key 1 and/or key 2: the smaller distance
    oa[c] = <short>a
    if d < od[c]:
        od[c] = <short>d
    ok[c] = k1


def _check_probes(const int64_t[::1] offsets, Py_ssize_t size, const int64_t[::1] probe_bucket,
                  const int64_t[::1] probe_start, Py_ssize_t n, int rec, str family):
    cdef Py_ssize_t nb = offsets.shape[0] - 1, p, b, c
    if probe_start.shape[0] != n + 1:
        raise ValueError(f"probe_start{family} must have len(values) + 1 = {n + 1} items, "
                         f"got {probe_start.shape[0]}")
    if probe_start[0] != 0 or probe_start[n] != probe_bucket.shape[0]:
        raise ValueError(f"probe_start{family} must start at 0 and end at the number of probes")
    for c in range(n):
        if probe_start[c + 1] < probe_start[c]:
            raise ValueError(f"probe_start{family} must be non-decreasing")
    if nb < 0 or offsets[0] != 0 or offsets[nb] != size:
        raise ValueError(f"offsets{family} must start at 0 and end at len(data{family})")
    for b in range(nb):
        if offsets[b + 1] < offsets[b] or (offsets[b + 1] - offsets[b]) % rec:
            raise ValueError(f"offsets{family} must be non-decreasing, whole records of "
                             f"{rec} bytes")
    for p in range(probe_bucket.shape[0]):
        if not 0 <= probe_bucket[p] < nb:
            raise ValueError(f"probe_bucket{family} must name buckets "
                             f"0 .. len(offsets{family}) - 2")


def scan_verified(const uint8_t[::1] data1, const int64_t[::1] offsets1,
                  const uint64_t[::1] buckets1, const int64_t[::1] probe_bucket1,
                  const int64_t[::1] probe_start1,
                  const uint8_t[::1] data2, const int64_t[::1] offsets2,
                  const int64_t[::1] probe_bucket2, const int64_t[::1] probe_start2,
                  const uint64_t[::1] values1, const uint64_t[::1] values2,
                  const uint8_t[:, ::1] sketches, int h, int needed,
                  own_header=None, own_pos=None):
    """Best verified match per candidate over the fetched buckets of both keys.

    Key-1 buckets (``data1``; bucket ``b`` is ``data1[offsets1[b]:offsets1[b + 1]]``,
    header ``buckets1[b]``, ascending) hold 40-byte records: key 1 (uint64 LE)
    and the sketch. Key-2 buckets (``data2``, ``offsets2``) hold 14-byte
    records: key 2, then the header of the page's key-1 bucket and the
    position of its record there (uint24 LE each). Candidate ``c`` probes the
    key-1 buckets ``probe_bucket1[probe_start1[c]:probe_start1[c + 1]]``
    (likewise for key 2). A stored page within ``h`` of ``values1[c]`` by key 1
    or of ``values2[c]`` by key 2 is a match when at least ``needed`` bytes of
    its sketch equal ``sketches[c]``. Best: most equal bytes, then the smaller
    distance (of key 1; for a page found by key 2, the smaller of the two,
    key 1 being read with the sketch), then the first in probe order (key 1
    first).

    A page found by key 2 whose key-1 bucket was not fetched cannot be
    verified here: ``missing[c]`` is 1 then (fetch those buckets and scan
    again). ``own_header[c]``, ``own_pos[c]`` (uint64, int64; position -1 or
    None: none) name the record stored under the candidate's own key: it is
    never its match (a key is not its own near-duplicate), it is reported
    apart. Returns ``(agree int16, distance int16, header uint64, position
    int64, key1 uint64, missing uint8, own_agree int16, own_distance int16,
    own_key1 uint64)`` per candidate; ``agree`` is -1 when no match was
    found, ``own_agree`` -1 when the own record is not a candidate (within
    ``h`` by a probed key) in the buckets read, else its equal sketch bytes.
    """
    cdef Py_ssize_t n = values1.shape[0], c, p, b, o, end, b1
    if values2.shape[0] != n or sketches.shape[0] != n or sketches.shape[1] != SIMDUP_SKETCH_BINS:
        raise ValueError(f"values2 and sketches must have one row per value ({n}); "
                         f"sketches {SIMDUP_SKETCH_BINS} bytes each")
    if buckets1.shape[0] != offsets1.shape[0] - 1:
        raise ValueError("buckets1 must have one header per key-1 bucket")
    for b in range(1, buckets1.shape[0]):
        if buckets1[b] <= buckets1[b - 1]:
            raise ValueError("buckets1 must be ascending")
    _check_probes(offsets1, data1.shape[0], probe_bucket1, probe_start1, n, REC1, "1")
    _check_probes(offsets2, data2.shape[0], probe_bucket2, probe_start2, n, REC2, "2")
    if own_pos is None:
        own_pos = np.full(n, -1, dtype=np.int64)
        own_header = np.zeros(n, dtype=np.uint64)
    cdef const int64_t[::1] opos = np.ascontiguousarray(own_pos, dtype=np.int64)
    cdef const uint64_t[::1] ohdr = np.ascontiguousarray(own_header, dtype=np.uint64)
    if opos.shape[0] != n or ohdr.shape[0] != n:
        raise ValueError(f"own_header and own_pos must have one item per value ({n})")
    own_agree = np.full(n, -1, dtype=np.int16)
    own_dist = np.full(n, 99, dtype=np.int16)
    own_key1 = np.zeros(n, dtype=np.uint64)
    cdef short[::1] own_agree_v = own_agree
    cdef short[::1] own_dist_v = own_dist
    cdef uint64_t[::1] own_key1_v = own_key1
    agree = np.full(n, -1, dtype=np.int16)
    dist = np.full(n, -1, dtype=np.int16)
    header = np.zeros(n, dtype=np.uint64)
    position = np.full(n, -1, dtype=np.int64)
    key1 = np.zeros(n, dtype=np.uint64)
    missing = np.zeros(n, dtype=np.uint8)
    cdef short[::1] agree_v = agree
    cdef short[::1] dist_v = dist
    cdef uint64_t[::1] header_v = header
    cdef int64_t[::1] position_v = position
    cdef uint64_t[::1] key1_v = key1
    cdef uint8_t[::1] missing_v = missing
    cdef const uint8_t *d1 = &data1[0] if data1.shape[0] else NULL
    cdef const uint8_t *d2 = &data2[0] if data2.shape[0] else NULL
    cdef const uint8_t *q
    cdef const uint8_t *rec
    cdef uint64_t v1, v2, k1, hd
    cdef int d, dd, a, best_a, best_d
    cdef int64_t pos
    with nogil:
        for c in range(n):
            v1 = values1[c]
            v2 = values2[c]
            q = &sketches[c, 0]
            best_a = -1
            best_d = 65
            for p in range(probe_start1[c], probe_start1[c + 1]):
                b = probe_bucket1[p]
                end = offsets1[b + 1]
                o = offsets1[b]
                while o < end:
                    d = simdup_popcount64(_le64(d1 + o) ^ v1)
                    if d <= h:
                        a = simdup_sketch_matches(q, d1 + o + 8)
                        if buckets1[b] == ohdr[c] and (o - offsets1[b]) // REC1 == opos[c]:
                            _own_seen(own_agree_v, own_dist_v, own_key1_v, c, a, d,
                                      _le64(d1 + o))
                        elif a >= needed and (a > best_a or (a == best_a and d < best_d)):
                            best_a, best_d = a, d
                            header_v[c] = buckets1[b]
                            position_v[c] = (o - offsets1[b]) // REC1
                            key1_v[c] = _le64(d1 + o)
                    o += REC1
            for p in range(probe_start2[c], probe_start2[c + 1]):
                b = probe_bucket2[p]
                end = offsets2[b + 1]
                o = offsets2[b]
                while o < end:
                    dd = simdup_popcount64(_le64(d2 + o) ^ v2)
                    if dd <= h:
                        hd = _le24(d2 + o + 8)
                        pos = _le24(d2 + o + 11)
                        b1 = _find(buckets1, hd)
                        if b1 < 0 or offsets1[b1] + (pos + 1) * REC1 > offsets1[b1 + 1]:
                            missing_v[c] = 1
                        else:
                            rec = d1 + offsets1[b1] + pos * REC1
                            k1 = _le64(rec)
                            d = simdup_popcount64(k1 ^ v1)
                            if dd < d:
                                d = dd
                            a = simdup_sketch_matches(q, rec + 8)
                            if hd == ohdr[c] and pos == opos[c]:
                                _own_seen(own_agree_v, own_dist_v, own_key1_v, c, a, d, k1)
                            elif a >= needed and (a > best_a or (a == best_a and d < best_d)):
                                best_a, best_d = a, d
                                header_v[c] = hd
                                position_v[c] = pos
                                key1_v[c] = k1
                    o += REC2
            if best_a >= 0:
                agree_v[c] = <short>best_a
                dist_v[c] = <short>best_d
    return agree, dist, header, position, key1, missing, own_agree, own_dist, own_key1


def missing_buckets(const uint8_t[::1] data2, const int64_t[::1] offsets2,
                    const int64_t[::1] probe_bucket2, const int64_t[::1] probe_start2,
                    const uint64_t[::1] values2, const uint8_t[::1] which,
                    const uint64_t[::1] buckets1, int h):
    """The key-1 bucket headers (sorted, distinct) that the key-2 matches of
    the candidates with ``which[c]`` set lie in and that are not among
    ``buckets1``: what :func:`scan_verified` needs fetched to verify them."""
    cdef Py_ssize_t n = values2.shape[0], c, p, b, o, end, m = 0
    _check_probes(offsets2, data2.shape[0], probe_bucket2, probe_start2, n, REC2, "2")
    if which.shape[0] != n:
        raise ValueError("which must have one flag per value")
    cdef Py_ssize_t cap = 0
    for c in range(n):
        if which[c]:
            for p in range(probe_start2[c], probe_start2[c + 1]):
                b = probe_bucket2[p]
                cap += (offsets2[b + 1] - offsets2[b]) // REC2
    out = np.zeros(cap, dtype=np.uint64)
    cdef uint64_t[::1] out_v = out
    cdef const uint8_t *d2 = &data2[0] if data2.shape[0] else NULL
    cdef uint64_t v2, hd
    with nogil:
        for c in range(n):
            if not which[c]:
                continue
            v2 = values2[c]
            for p in range(probe_start2[c], probe_start2[c + 1]):
                b = probe_bucket2[p]
                end = offsets2[b + 1]
                o = offsets2[b]
                while o < end:
                    if simdup_popcount64(_le64(d2 + o) ^ v2) <= h:
                        hd = _le24(d2 + o + 8)
                        if _find(buckets1, hd) < 0:
                            out_v[m] = hd
                            m += 1
                    o += REC2
    return np.unique(out[:m])


cdef struct OwnTable:
    # this call's own insertions, chained by bucket header (multiplicative hash)
    int64_t *slot       # per slot: the last entry there, or -1
    int64_t *nxt        # per entry: the previous entry in its slot, or -1
    uint64_t *hdr
    uint64_t *value
    uint64_t mask
    int shift
    Py_ssize_t used


cdef inline Py_ssize_t _own_slot(const OwnTable *t, uint64_t hd) noexcept nogil:
    return <Py_ssize_t>(((hd * 0x9E3779B97F4A7C15ULL) >> t.shift) & t.mask)


cdef inline void _own_add(OwnTable *t, uint64_t hd, uint64_t v) noexcept nogil:
    cdef Py_ssize_t s = _own_slot(t, hd)
    t.hdr[t.used] = hd
    t.value[t.used] = v
    t.nxt[t.used] = t.slot[s]
    t.slot[s] = t.used
    t.used += 1


cdef inline bint _own_hit(const OwnTable *t, uint64_t hd, uint64_t v, int h) noexcept nogil:
    cdef int64_t j = t.slot[_own_slot(t, hd)]
    while j >= 0:
        if t.hdr[j] == hd and simdup_popcount64(t.value[j] ^ v) <= h:
            return True
        j = t.nxt[j]
    return False


def own_flags(const uint64_t[::1] values, const int64_t[::1] probe_start,
              const uint64_t[::1] headers, const int64_t[::1] idx,
              const uint64_t[::1] earlier_values, const uint64_t[::1] earlier_headers, int h):
    """Per candidate ``c``, 1 if one of this call's own insertions that its
    snapshot may miss lies in one of its probed buckets within distance
    ``h``: an earlier chunk's new value (``earlier_values``, in the buckets
    ``earlier_headers``) or a new candidate ``j < c`` of this chunk (``idx[j]
    < 0``; its bucket is its first probe). One pass with a hash table of the
    own insertions by bucket."""
    cdef Py_ssize_t n = values.shape[0], ne = earlier_values.shape[0], c, p, e
    if probe_start.shape[0] != n + 1 or idx.shape[0] != n:
        raise ValueError("probe_start must have len(values) + 1 items, idx len(values)")
    if earlier_headers.shape[0] != ne:
        raise ValueError("earlier_values and earlier_headers differ in length")
    if probe_start[0] != 0 or probe_start[n] != headers.shape[0]:
        raise ValueError("probe_start must start at 0 and end at len(headers)")
    for c in range(n):
        if probe_start[c + 1] <= probe_start[c]:
            raise ValueError("every candidate needs at least one probe (its own bucket)")
    flags = np.zeros(n, dtype=np.uint8)
    cdef uint8_t[::1] fv = flags
    cdef Py_ssize_t cap = max(ne + n, 1), nslots = 16
    cdef OwnTable t
    t.shift = 60                # the top log2(nslots) bits of the product
    while nslots < 2 * cap:
        nslots <<= 1
        t.shift -= 1
    slot_arr = np.full(nslots, -1, dtype=np.int64)
    next_arr = np.empty(cap, dtype=np.int64)
    hdr_arr = np.empty(cap, dtype=np.uint64)
    val_arr = np.empty(cap, dtype=np.uint64)
    cdef int64_t[::1] slot_v = slot_arr
    cdef int64_t[::1] next_v = next_arr
    cdef uint64_t[::1] hdr_v = hdr_arr
    cdef uint64_t[::1] val_v = val_arr
    t.slot, t.nxt, t.hdr, t.value = &slot_v[0], &next_v[0], &hdr_v[0], &val_v[0]
    t.mask = nslots - 1
    t.used = 0
    with nogil:
        for e in range(ne):
            _own_add(&t, earlier_headers[e], earlier_values[e])
        for c in range(n):
            if t.used:
                for p in range(probe_start[c], probe_start[c + 1]):
                    if _own_hit(&t, headers[p], values[c], h):
                        fv[c] = 1
                        break
            if idx[c] < 0:          # new: inserted by this chunk's script, before c + 1
                _own_add(&t, headers[probe_start[c]], values[c])
    return flags
