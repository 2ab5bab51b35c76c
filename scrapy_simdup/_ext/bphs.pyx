# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled Block-Permuted Hamming Search (Manku, Jain, Das Sarma, WWW 2007).

The 64 bits are split into G blocks (block 0 the most significant). Two
fingerprints within distance h agree on at least g = G - h blocks, so one of
the T = C(G, g) tables, each a copy of the data permuted so that one choice of
g blocks leads and sorted, holds the match under the query's header. Every
table has bucket offsets over its top ``tb = min(header, floor(log2 n) - 1)``
bits (the same lookup PSM uses, instead of a binary search); a candidate counts
only if its whole g-block header equals the query's, and it is reported only by
the first table whose header it matches, so results need no de-duplication.

Recent inserts sit in a pending list scanned linearly (exact); it is merged
(all tables rebuilt) when it exceeds max(1024, n/8).
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t, int32_t, int8_t
from libc.stdlib cimport realloc, free

from scrapy_simdup._ext.cbuiltins cimport __builtin_prefetch
from scrapy_simdup._ext.popcount cimport simdup_popcount64
from scrapy_simdup._ext.resvec cimport res_free, res_push, resvec

from itertools import combinations

import numpy as np

cdef enum:
    MAX_T = 256
    MAX_G = 24


cdef inline int auto_bits(Py_ssize_t n) noexcept nogil:
    cdef int t = 0
    while (<Py_ssize_t>1 << (t + 1)) <= n:
        t += 1
    t -= 1
    if t < 4:
        t = 4
    if t > 30:
        t = 30
    return t


cdef struct table_t:
    int nblk
    int src[MAX_G]      # source shift of each block, in permuted order
    int wid[MAX_G]
    int dst[MAX_G]
    int hb              # header bits (g leading blocks)
    int tb              # bucket bits (<= hb)
    const uint64_t *pv  # permuted values, sorted
    const uint32_t *row # row in the shared ids array
    const uint32_t *off # bucket offsets [2**tb + 1]
    uint64_t earlier[MAX_T]  # header masks of tables j < i, in i's layout


cdef inline uint64_t permute(const table_t *tb, uint64_t x) noexcept nogil:
    cdef uint64_t out = 0
    cdef int k
    for k in range(tb.nblk):
        out |= ((x >> tb.src[k]) & ((~(<uint64_t>0)) >> (64 - tb.wid[k]))) << tb.dst[k]
    return out


cdef class BPHSCore:
    cdef public int distance
    cdef public int blocks, tables
    cdef public bint binary     # paper's lookup: binary search, no offsets
    cdef int g
    cdef table_t *tabs
    cdef list _keep
    cdef object _ids_arr
    cdef const int64_t *ids
    cdef Py_ssize_t n_main
    cdef object _pv, _pi
    cdef Py_ssize_t n_pend

    def __cinit__(self, *args, **kwargs):
        self.tabs = NULL
        self.n_main = 0
        self.n_pend = 0
        self.binary = False
        self._keep = []

    def __dealloc__(self):
        free(self.tabs)

    def _core_init(self, int distance, int G):
        cdef table_t *tb
        if G > MAX_G:
            raise ValueError(f"blocks must be at most {MAX_G}")
        self.distance = distance
        self.blocks = G
        self.g = G - distance
        combos = list(combinations(range(G), self.g))
        if len(combos) > MAX_T:
            raise ValueError(f"{len(combos)} tables is more than {MAX_T}")
        self.tables = len(combos)
        self.tabs = <table_t *>realloc(NULL, self.tables * sizeof(table_t))
        if self.tabs == NULL:
            raise MemoryError()
        # block b covers bits [lo[b], lo[b] + w[b]); block 0 is the top
        q, r = divmod(64, G)
        widths = [q + 1 if b < r else q for b in range(G)]
        lo = []
        top = 64
        for w in widths:
            top -= w
            lo.append(top)
        orig_masks = []
        for i, combo in enumerate(combos):
            order = list(combo) + [b for b in range(G) if b not in combo]
            tb = &self.tabs[i]
            tb.nblk = G
            dst = 64
            for k, b in enumerate(order):
                dst -= widths[b]
                tb.src[k] = lo[b]
                tb.wid[k] = widths[b]
                tb.dst[k] = dst
            tb.hb = sum(widths[b] for b in combo)
            m = 0
            for b in combo:
                m |= ((1 << widths[b]) - 1) << lo[b]
            orig_masks.append(m)
        for i in range(self.tables):
            for j in range(i):
                self.tabs[i].earlier[j] = permute(&self.tabs[i], orig_masks[j])
        self._install(np.zeros(0, np.uint64), np.zeros(0, np.int64))

    def _install(self, vals, ids):
        """Build all tables over (vals, ids); clears the pending list."""
        cdef Py_ssize_t n = vals.shape[0]
        cdef int i
        cdef int t_auto = auto_bits(n)
        keep = []
        cdef const uint64_t[::1] pvv
        cdef const uint32_t[::1] rv
        cdef const uint32_t[::1] ov
        cdef const int64_t[::1] iv = ids
        cdef table_t *tb
        for i in range(self.tables):
            tb = &self.tabs[i]
            pv = _permute_all(vals, self, i)
            order = np.argsort(pv, kind="stable").astype(np.uint32)
            pv = pv[order]
            tb.tb = min(tb.hb, t_auto)
            off = np.searchsorted(
                pv >> np.uint64(64 - tb.tb),
                np.arange((1 << tb.tb) + 1, dtype=np.uint64)).astype(np.uint32)
            keep += [pv, order, off]
            pvv = pv
            rv = order
            ov = off
            tb.pv = &pvv[0] if n else NULL
            tb.row = &rv[0] if n else NULL
            tb.off = &ov[0]
        self._keep = keep
        self._ids_arr = ids
        self.ids = &iv[0] if n else NULL
        self.n_main = n
        self._pv = np.zeros(0, np.uint64)
        self._pi = np.zeros(0, np.int64)
        self.n_pend = 0

    def _values(self):
        """Stored values of the built tables, recovered from table 0 (row
        order), so no separate unpermuted copy is kept."""
        cdef Py_ssize_t n = self.n_main, k
        out = np.empty(n, np.uint64)
        cdef uint64_t[::1] ov = out
        cdef const table_t *tb = &self.tabs[0]
        cdef uint64_t p, x
        cdef int b
        with nogil:
            for k in range(n):
                p = tb.pv[k]
                x = 0
                for b in range(tb.nblk):
                    x |= ((p >> tb.dst[b]) & ((~(<uint64_t>0)) >> (64 - tb.wid[b]))) << tb.src[b]
                ov[tb.row[k]] = x
        return out

    def __len__(self):
        return self.n_main + self.n_pend

    @property
    def nbytes(self):
        total = sum(a.nbytes for a in self._keep) + self._ids_arr.nbytes
        return total + self._pv.nbytes + self._pi.nbytes

    def _add_arrays(self, values, ids):
        if values.shape[0] == 0:
            return
        if len(self) + values.shape[0] >= 4294967295:
            raise ValueError("BPHSIndex holds at most 2**32 - 1 fingerprints")
        self._pv = np.concatenate([self._pv, values])
        self._pi = np.concatenate([self._pi, ids])
        self.n_pend = self._pv.shape[0]
        if self.n_pend > max(1024, self.n_main // 8):
            # the original values are only needed for rebuilds
            self._install(np.concatenate([self._values(), self._pv]),
                          np.concatenate([self._ids_arr, self._pi]))

    cdef int _search(self, uint64_t x, bint first, int64_t qi, resvec *res,
                     const uint64_t *pend, const int64_t *pend_ids,
                     Py_ssize_t n_pend) noexcept nogil:
        cdef int i, j, d, h = self.distance, found = 0
        cdef uint64_t p[MAX_T]
        cdef uint32_t b, k, lo, hi
        cdef uint64_t y, diff
        cdef const table_t *tb
        cdef bint skip
        cdef Py_ssize_t c
        if self.n_main:
            for i in range(self.tables):
                tb = &self.tabs[i]
                p[i] = permute(tb, x)
                __builtin_prefetch(&tb.off[p[i] >> (64 - tb.tb)])
            for i in range(self.tables):
                tb = &self.tabs[i]
                if self.binary:
                    # first entry whose g-block header is >= the query's, then
                    # scan while the header matches (Manku et al.; the paper)
                    lo = 0
                    hi = <uint32_t>self.n_main
                    y = (p[i] >> (64 - tb.hb)) << (64 - tb.hb) if tb.hb < 64 else p[i]
                    while lo < hi:
                        k = lo + (hi - lo) // 2
                        if tb.pv[k] < y:
                            lo = k + 1
                        else:
                            hi = k
                    hi = lo
                    while hi < self.n_main and ((tb.pv[hi] ^ p[i]) >> (64 - tb.hb)) == 0 \
                            if tb.hb < 64 else (hi < self.n_main and tb.pv[hi] == p[i]):
                        hi += 1
                else:
                    b = <uint32_t>(p[i] >> (64 - tb.tb))
                    lo = tb.off[b]
                    hi = tb.off[b + 1]
                for k in range(lo, hi):
                    diff = tb.pv[k] ^ p[i]
                    d = simdup_popcount64(diff)
                    if d > h or (diff >> (64 - tb.hb)) != 0:
                        continue
                    skip = False
                    for j in range(i):
                        if (diff & tb.earlier[j]) == 0:
                            skip = True
                            break
                    if skip:
                        continue
                    if res_push(res, qi, self.ids[tb.row[k]], d) < 0:
                        return -2
                    found += 1
                    if first:
                        return found
        for c in range(n_pend):
            d = simdup_popcount64(pend[c] ^ x)
            if d <= h:
                if res_push(res, qi, pend_ids[c], d) < 0:
                    return -2
                found += 1
                if first:
                    return found
        return found

    def _query1(self, uint64_t x, bint first):
        cdef resvec res
        res.n = 0; res.cap = 0; res.q = NULL; res.ids = NULL; res.d = NULL
        cdef const uint64_t[::1] pv = self._pv
        cdef const int64_t[::1] pi = self._pi
        cdef int rc
        try:
            rc = self._search(x, first, 0, &res, &pv[0] if self.n_pend else NULL,
                              &pi[0] if self.n_pend else NULL, self.n_pend)
            if rc == -2:
                raise MemoryError()
            out = [(res.ids[i], res.d[i]) for i in range(res.n)]
            out.sort(key=_by_distance)
            return out
        finally:
            res_free(&res)

    def _query_many(self, const uint64_t[::1] values, bint first):
        cdef Py_ssize_t n = values.shape[0], i, before
        cdef resvec res
        res.n = 0; res.cap = 0; res.q = NULL; res.ids = NULL; res.d = NULL
        cdef const uint64_t[::1] pv = self._pv
        cdef const int64_t[::1] pi = self._pi
        cdef const uint64_t *pp = &pv[0] if self.n_pend else NULL
        cdef const int64_t *pip = &pi[0] if self.n_pend else NULL
        cdef Py_ssize_t npend = self.n_pend
        cdef int rc = 0
        cdef int64_t[::1] oid
        cdef int8_t[::1] odist
        if first:
            out_ids = np.full(n, -1, np.int64)
            out_d = np.full(n, -1, np.int8)
            oid = out_ids
            odist = out_d
        try:
            with nogil:
                for i in range(n):
                    before = res.n
                    rc = self._search(values[i], first, i, &res, pp, pip, npend)
                    if rc < 0:
                        break
                    if first:
                        if res.n > before:
                            oid[i] = res.ids[before]
                            odist[i] = res.d[before]
                        res.n = 0
            if rc == -2:
                raise MemoryError()
            if first:
                return out_ids, out_d
            q = np.empty(res.n, np.int64)
            ids = np.empty(res.n, np.int64)
            d = np.empty(res.n, np.int8)
            for i in range(res.n):
                q[i] = res.q[i]
                ids[i] = res.ids[i]
                d[i] = res.d[i]
            order = np.lexsort((ids, d, q))
            return q[order], ids[order], d[order]
        finally:
            res_free(&res)


def _by_distance(item):
    return (item[1], item[0])


def _permute_all(const uint64_t[::1] vals, BPHSCore core, int i):
    cdef Py_ssize_t n = vals.shape[0], k
    out = np.empty(n, np.uint64)
    cdef uint64_t[::1] ov = out
    cdef const table_t *tb = &core.tabs[i]
    with nogil:
        for k in range(n):
            ov[k] = permute(tb, vals[k])
    return out
