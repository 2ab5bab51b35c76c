# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Local Hamming check over the buckets fetched from Redis (PSM-F).

The Redis backend fetches, for a batch of candidates, every probed bucket in
one MGET; the buckets are concatenated into one ``uint64`` array of packed
fingerprints. This module finds, for each candidate, the first stored
fingerprint within Hamming distance ``h`` in probe order (most likely flip set
first), which is what PSM-F answers. No Scrapy, no Redis here.
"""
from libc.stdint cimport int64_t, uint64_t, uint8_t

from scrapy_simdup._ext.popcount cimport simdup_popcount64

import numpy as np


def scan_first_buckets(const uint64_t[::1] entries, const int64_t[::1] bucket_offsets,
                       const int64_t[::1] probe_bucket, const int64_t[::1] probe_start,
                       const uint64_t[::1] values, int h):
    """First match per candidate (PSM-F over the fetched buckets).

    ``values[c]`` is candidate ``c``; its probes are ``probe_start[c] ..
    probe_start[c + 1] - 1`` (in probe order); probe ``p`` reads bucket
    ``probe_bucket[p]``, whose entries are ``entries[bucket_offsets[b] :
    bucket_offsets[b + 1]]`` (a bucket probed by many candidates is fetched
    once). Returns ``(index int64[n], distance int16[n])``: the position in
    ``entries`` of the first stored fingerprint within distance ``h`` of
    ``values[c]`` and its distance, or ``-1`` / ``-1`` when there is none.
    """
    cdef Py_ssize_t n = values.shape[0], nb = bucket_offsets.shape[0] - 1
    cdef Py_ssize_t nprobes = probe_bucket.shape[0], c, p, i, b
    if probe_start.shape[0] != n + 1:
        raise ValueError(f"probe_start must have len(values) + 1 = {n + 1} items, "
                         f"got {probe_start.shape[0]}")
    if probe_start[0] != 0 or probe_start[n] != nprobes:
        raise ValueError("probe_start must start at 0 and end at the number of probes")
    if nb < 0 or bucket_offsets[0] != 0 or bucket_offsets[nb] != entries.shape[0]:
        raise ValueError("bucket_offsets must start at 0 and end at len(entries)")
    for b in range(nb):
        if bucket_offsets[b + 1] < bucket_offsets[b]:
            raise ValueError("bucket_offsets must be non-decreasing")
    for p in range(nprobes):
        if not 0 <= probe_bucket[p] < nb:
            raise ValueError("probe_bucket must name buckets 0 .. len(bucket_offsets) - 2")
    for c in range(n):
        if probe_start[c + 1] < probe_start[c]:
            raise ValueError("probe_start must be non-decreasing")
    index = np.full(n, -1, dtype=np.int64)
    dist = np.full(n, -1, dtype=np.int16)
    cdef int64_t[::1] index_v = index
    cdef short[::1] dist_v = dist
    cdef uint64_t v
    cdef int d
    with nogil:
        for c in range(n):
            v = values[c]
            for p in range(probe_start[c], probe_start[c + 1]):
                b = probe_bucket[p]
                for i in range(bucket_offsets[b], bucket_offsets[b + 1]):
                    d = simdup_popcount64(entries[i] ^ v)
                    if d <= h:
                        index_v[c] = i
                        dist_v[c] = <short>d
                        break
                if index_v[c] >= 0:
                    break
    return index, dist


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
