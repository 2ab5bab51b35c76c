# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled sketch bands: exact-match tables over pairs of sketch bins.

Band ``b`` of a sketch is its bins ``2b`` and ``2b + 1`` read as one 16-bit
value; a table per band groups the stored rows by that value. A page and a
near-duplicate of Jaccard similarity ``J`` agree on a band with probability
about ``J**2`` whatever the number of stored pages, an unrelated page one time
in 65,536, so a look-up reads ``bands`` buckets of ``n / 65,536`` rows.

Layout, per band (rows are added in order: 0, 1, 2, ...):

* ``main``: rows ``0 .. n_main`` grouped by band value, in row order within a
  value, with ``offsets`` uint32[bands, 65,537]. A bucket holds about one row
  in 65,536, so its rows are Elias-Fano coded with 16 low bits: ``low``
  uint16[bands, cap] holds each row's low 16 bits, and ``high`` a bit vector
  per band where the ``i``-th row of bucket ``v`` sets bit ``offsets[v] +
  v * H + i + (row >> 16)`` (``H = ceil(n_main / 65,536)``: each bucket owns
  ``rows + H`` bits). About 2.25 bytes a row instead of 4.
* ``buffer``: rows ``n_main .. n``, chained per value (``head`` int32[bands,
  65,536], ``nxt`` int32[bands, buffer cap], newest first) and counted
  (``bcount``). It is merged when it holds more than ``n_main / 32`` rows (at
  least 32,768): the low bits in place, buckets moved up from the last value
  down, and the bit vectors written anew, so a merge moves ``n`` rows per band
  and reads no sketch.

The rows' sketches and keys stay in the caller's row-indexed arrays
(``_set_rows``): a candidate is checked against them.
"""
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memmove
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from scrapy_simdup._ext.bestmatch cimport better_match
from scrapy_simdup._ext.cbuiltins cimport __builtin_prefetch, ctz64
from scrapy_simdup._ext.popcount cimport simdup_popcount64
from scrapy_simdup._ext.sketch cimport SIMDUP_SKETCH_BINS, simdup_sketch_matches

import numpy as np

from scrapy_simdup._ext import mapped

cdef enum:
    VALUES = 65536          # 16-bit band values
    LOW_BITS = 16           # a row's bits kept in ``low``
    MAX_BANDS = SIMDUP_SKETCH_BINS // 2
    MIN_BUFFER = VALUES // 2
    AHEAD = 16              # candidates whose keys are prefetched ahead


cdef inline uint32_t band_value(const uint8_t *sketch, int b) noexcept nogil:
    return sketch[2 * b] | (<uint32_t>sketch[2 * b + 1] << 8)


cdef inline Py_ssize_t next_one(const uint64_t *bits, Py_ssize_t p) noexcept nogil:
    """The first set bit at or after ``p`` (there is one)."""
    cdef Py_ssize_t w = p >> 6
    cdef uint64_t word = bits[w] >> (p & 63)
    if word:
        return p + ctz64(word)
    w += 1
    while bits[w] == 0:
        w += 1
    return (w << 6) + ctz64(bits[w])


cdef inline void set_bit(uint64_t *bits, Py_ssize_t p) noexcept nogil:
    bits[p >> 6] |= (<uint64_t>1) << (p & 63)


cdef inline Py_ssize_t high_words(Py_ssize_t n) noexcept nogil:
    """Words of one band's bit vector over ``n`` rows (a spare word at the end)."""
    cdef Py_ssize_t h = ((n - 1) >> LOW_BITS) + 1 if n else 0
    return (n + VALUES * h + 63) // 64 + 1


cdef class SketchBands:
    """``bands`` (1..16) exact-match tables over pairs of sketch bins."""
    cdef readonly int bands
    cdef readonly Py_ssize_t n_main, n_buf
    cdef Py_ssize_t cap, buf_cap, H, hwords
    cdef bint bulk
    cdef object _low, _high, _offsets, _head, _nxt, _bcount
    cdef uint16_t *low
    cdef uint64_t *high
    cdef uint32_t *offsets
    cdef int32_t *head
    cdef int32_t *nxt
    cdef uint32_t *bcount
    # the caller's row-indexed arrays
    cdef object _sk_arr, _keys_arr
    cdef const uint8_t *sk
    cdef const uint64_t *keys     # row r: keys[2 r], keys[2 r + 1]
    cdef Py_ssize_t known

    def __cinit__(self, int bands):
        if not 1 <= bands <= MAX_BANDS:
            raise ValueError(f"bands must be 1..{MAX_BANDS}, got {bands}")
        self.bands = bands
        self.n_main = self.n_buf = self.cap = self.buf_cap = self.known = 0
        self._offsets = np.zeros((bands, VALUES + 1), np.uint32)
        self._head = np.full((bands, VALUES), -1, np.int32)
        self._bcount = np.zeros((bands, VALUES), np.uint32)
        self._set_low(np.zeros((bands, 0), np.uint16))
        self._set_high(np.zeros((bands, high_words(0)), np.uint64), 0)
        self._set_buffer(np.zeros((bands, 0), np.int32))
        self.offsets = <uint32_t *> <size_t> self._offsets.ctypes.data
        self.head = <int32_t *> <size_t> self._head.ctypes.data
        self.bcount = <uint32_t *> <size_t> self._bcount.ctypes.data
        self.sk = NULL
        self.keys = NULL

    cdef int _set_low(self, arr) except -1:
        self._low = arr
        self.cap = arr.shape[1]
        self.low = <uint16_t *> <size_t> arr.ctypes.data
        return 0

    cdef int _set_high(self, arr, Py_ssize_t n) except -1:
        self._high = arr
        self.hwords = arr.shape[1]
        self.H = ((n - 1) >> LOW_BITS) + 1 if n else 0
        self.high = <uint64_t *> <size_t> arr.ctypes.data
        return 0

    cdef int _set_buffer(self, arr) except -1:
        self._nxt = arr
        self.buf_cap = arr.shape[1]
        self.nxt = <int32_t *> <size_t> arr.ctypes.data
        return 0

    def __len__(self):
        return self.n_main + self.n_buf

    @property
    def nbytes(self) -> int:
        """Bytes held: the row tables (with their room to grow), offsets and buffer."""
        return int(self._low.nbytes + self._high.nbytes + self._offsets.nbytes
                   + self._head.nbytes + self._nxt.nbytes + self._bcount.nbytes)

    def _set_rows(self, const uint8_t[:, ::1] sketches, const uint64_t[:, ::1] keys,
                  Py_ssize_t known):
        """The rows' sketches and two keys (row-indexed, the first ``known``
        rows valid; a row's two keys side by side, one read)."""
        if sketches.shape[1] != SIMDUP_SKETCH_BINS or keys.shape[1] != 2 \
                or known > sketches.shape[0] or known > keys.shape[0]:
            raise ValueError("bad row arrays")
        self._sk_arr, self._keys_arr = sketches, keys
        self.sk = &sketches[0, 0] if sketches.shape[0] else NULL
        self.keys = &keys[0, 0] if keys.shape[0] else NULL
        self.known = known

    def _set_bulk(self, bint on):
        """While on, the buffer may grow to the size of the main table (a
        whole index loaded: the merges' total work stays linear)."""
        self.bulk = on
        if not on and self.n_buf > self._limit():
            self._merge()

    cdef Py_ssize_t _limit(self) noexcept:
        cdef Py_ssize_t lim = self.n_main if self.bulk else self.n_main // 32
        return lim if lim > MIN_BUFFER else MIN_BUFFER

    def add(self, Py_ssize_t n):
        """Rows ``len(self) .. len(self) + n`` (their sketches given by
        ``_set_rows`` already)."""
        cdef Py_ssize_t first = self.n_main + self.n_buf, chunk
        if n < 0 or first + n > self.known:
            raise ValueError("rows to add must be in the row arrays")
        if first + n >= (<Py_ssize_t>1 << 31):
            raise OverflowError("sketch bands hold fewer than 2**31 rows")
        while n > 0:      # a buffer's worth at a time: the chains never outgrow it
            chunk = min(n, self._limit() + 1 - self.n_buf)
            self._chain(chunk)
            n -= chunk
            if self.n_buf > self._limit():
                self._merge()

    cdef int _chain(self, Py_ssize_t n) except -1:
        """The next ``n`` rows into the buffer's chains."""
        cdef Py_ssize_t first = self.n_main + self.n_buf, r, i
        cdef int b
        cdef uint32_t v
        if self.n_buf + n > self.buf_cap:
            self._grow_buffer(self.n_buf + n)
        with nogil:
            for r in range(first, first + n):
                i = r - self.n_main
                for b in range(self.bands):
                    v = band_value(self.sk + r * SIMDUP_SKETCH_BINS, b)
                    self.nxt[b * self.buf_cap + i] = self.head[b * VALUES + v]
                    self.head[b * VALUES + v] = <int32_t>i
                    self.bcount[b * VALUES + v] += 1
            self.n_buf += n
        return 0

    cdef int _grow_buffer(self, Py_ssize_t need) except -1:
        cap = max(need, min(2 * self.buf_cap, self._limit() + 1), 1024)
        grown = np.empty((self.bands, cap), np.int32)
        if self.n_buf:
            grown[:, : self.n_buf] = self._nxt[:, : self.n_buf]
        self._set_buffer(grown)
        return 0

    def _merge(self):
        """The buffer into the main tables: low bits in place, bit vectors anew."""
        cdef Py_ssize_t total = self.n_main + self.n_buf, words = high_words(total)
        cdef int b
        cdef uint64_t *high
        if not self.n_buf:
            return
        if total > self.cap:
            # grown by an eighth: a merge adds a thirty-second, so every fourth one copies
            cap = max(total, self.cap + self.cap // 8)
            grown = mapped.empty((self.bands, cap), np.uint16, huge=True)
            if self.n_main:
                grown[:, : self.n_main] = self._low[:, : self.n_main]
            self._set_low(grown)
        high_arr = mapped.zeros((self.bands, words), np.uint64, huge=True)
        high = <uint64_t *> <size_t> high_arr.ctypes.data
        with nogil:
            for b in range(self.bands):
                self._encode_high(b, high + b * words, ((total - 1) >> LOW_BITS) + 1)
                self._place(b)
                self.offsets[b * (VALUES + 1) + VALUES] = <uint32_t>total
            self.n_main = total
            self.n_buf = 0
        self._set_high(high_arr, total)
        self._head.fill(-1)
        self._bcount.fill(0)
        if self.buf_cap > 2 * (self._limit() + 1):      # (after a bulk load)
            self._set_buffer(np.empty((self.bands, self._limit() + 1), np.int32))

    cdef void _encode_high(self, int b, uint64_t *out, Py_ssize_t H) noexcept nogil:
        """Band ``b``'s bit vector after the merge into ``out`` (zeroed), from
        its old bit vector and the buffer's chains (before ``_place`` moves
        the offsets)."""
        cdef const uint32_t *off = self.offsets + b * (VALUES + 1)
        cdef const uint32_t *cnt = self.bcount + b * VALUES
        cdef const uint64_t *old = self.high + b * self.hwords
        cdef Py_ssize_t shift = 0, lo, k, i, p, start, old_start
        cdef Py_ssize_t v
        cdef int32_t j
        for v in range(VALUES):
            lo = off[v]
            k = (off[v + 1] if v + 1 < VALUES else self.n_main) - lo
            start = lo + shift + v * H
            old_start = lo + v * self.H
            p = old_start
            for i in range(k):
                p = next_one(old, p)
                set_bit(out, start + i + (p - old_start - i))
                p += 1
            i = k + cnt[v] - 1
            j = self.head[b * VALUES + v]
            while j >= 0:                       # newest first: from the end
                set_bit(out, start + i + ((self.n_main + j) >> LOW_BITS))
                i -= 1
                j = self.nxt[b * self.buf_cap + j]
            shift += cnt[v]

    cdef void _place(self, int b) noexcept nogil:
        """Band ``b``'s low bits: old bucket ``v`` moved up by the buffer rows
        of lower values, then the buffer rows of ``v`` after it (in row order)."""
        cdef uint16_t *low = self.low + b * self.cap
        cdef uint32_t *off = self.offsets + b * (VALUES + 1)
        cdef uint32_t *cnt = self.bcount + b * VALUES
        cdef Py_ssize_t shift = self.n_buf, old_start, old_end, new_start, end
        cdef int64_t v = VALUES - 1
        cdef int32_t i
        old_end = self.n_main
        while v >= 0:
            shift -= cnt[v]
            old_start = off[v]
            new_start = old_start + shift
            end = new_start + (old_end - old_start) + cnt[v]
            if old_end > old_start and shift:
                memmove(low + new_start, low + old_start,
                        (old_end - old_start) * sizeof(uint16_t))
            i = self.head[b * VALUES + v]
            while i >= 0:                       # newest first: fill from the end
                end -= 1
                low[end] = <uint16_t>(self.n_main + i)
                i = self.nxt[b * self.buf_cap + i]
            off[v] = <uint32_t>new_start
            old_end = old_start
            v -= 1

    cdef Py_ssize_t _gather(self, const uint8_t *q, uint32_t **out) noexcept nogil:
        """The rows sharing a band with sketch ``q`` (a row once per band it
        shares), in a malloc'ed array in ``out``: their number, or -1 when out
        of memory."""
        cdef Py_ssize_t n_cand = 0, cap = 256, j, p, start
        cdef uint32_t *cand = <uint32_t *> malloc(cap * sizeof(uint32_t))
        cdef uint32_t *tmp
        cdef const uint16_t *low
        cdef const uint64_t *high
        cdef int b
        cdef uint32_t v, lo, hi
        cdef int32_t i
        out[0] = NULL
        if cand == NULL:
            return -1
        for b in range(self.bands):
            v = band_value(q, b)
            if self.n_main:
                lo = self.offsets[b * (VALUES + 1) + v]
                hi = self.offsets[b * (VALUES + 1) + v + 1]
            else:
                lo = hi = 0
            if n_cand + (hi - lo) + self.bcount[b * VALUES + v] > cap:
                cap = 2 * (n_cand + (hi - lo) + self.bcount[b * VALUES + v])
                tmp = <uint32_t *> realloc(cand, cap * sizeof(uint32_t))
                if tmp == NULL:
                    free(cand)
                    return -1
                cand = tmp
            low = self.low + b * self.cap
            high = self.high + b * self.hwords
            start = lo + v * self.H
            p = start
            for j in range(hi - lo):
                p = next_one(high, p)
                cand[n_cand] = (<uint32_t>(p - start - j) << LOW_BITS) | low[lo + j]
                n_cand += 1
                p += 1
            i = self.head[b * VALUES + v]
            while i >= 0:
                cand[n_cand] = <uint32_t>(self.n_main + i)
                n_cand += 1
                i = self.nxt[b * self.buf_cap + i]
        out[0] = cand
        return n_cand

    cdef inline int _check(self, const uint32_t *cand, Py_ssize_t k, Py_ssize_t n_cand,
                           const uint8_t *q, uint64_t value, uint64_t value2, int pair_limit,
                           int64_t exclude) noexcept nogil:
        """Candidate ``k`` of ``_gather``'s rows against a page: ``(agreeing
        bins << 8) | the smaller key distance``, or -1 when it is ``exclude`` or
        its two key distances add up to more than ``pair_limit``. The keys of
        the candidates a few ahead are requested meanwhile."""
        if k + AHEAD < n_cand:
            __builtin_prefetch(self.keys + 2 * <Py_ssize_t>cand[k + AHEAD])
        cdef uint32_t r = cand[k]
        if <int64_t>r == exclude:
            return -1
        cdef int d1 = simdup_popcount64(self.keys[2 * <Py_ssize_t>r] ^ value)
        cdef int d2 = simdup_popcount64(self.keys[2 * <Py_ssize_t>r + 1] ^ value2)
        if d1 + d2 > pair_limit:
            return -1
        return (simdup_sketch_matches(q, self.sk + <Py_ssize_t>r * SIMDUP_SKETCH_BINS) << 8) \
            | (d1 if d1 < d2 else d2)

    def query(self, const uint8_t[::1] sketch, uint64_t value, uint64_t value2,
              int pair_limit, int needed, int64_t exclude=-1):
        """Stored rows agreeing with ``sketch`` on a band, whose two key
        distances add up to at most ``pair_limit`` and whose sketch agrees in
        at least ``needed`` bins: ``(rows int64, agree uint8, distance int16)``
        (the smaller key distance); a row found by several bands comes once
        per band. ``exclude``: a row left out."""
        if sketch.shape[0] != SIMDUP_SKETCH_BINS:
            raise ValueError(f"a sketch must be {SIMDUP_SKETCH_BINS} bytes")
        if self.n_main + self.n_buf > self.known:
            raise ValueError("the row arrays do not hold every stored row")
        cdef Py_ssize_t n_cand, k, n_out = 0
        cdef uint32_t *cand
        cdef int checked
        cdef const uint8_t *q = &sketch[0]
        with nogil:
            n_cand = self._gather(q, &cand)
        if n_cand < 0:
            raise MemoryError()
        # the rows that pass go back into cand (never ahead of the one read),
        # their bins and distance into found: the few that pass are copied out
        cdef uint16_t *found = <uint16_t *> malloc((n_cand + 1) * sizeof(uint16_t))
        if found == NULL:
            free(cand)
            raise MemoryError()
        with nogil:
            for k in range(n_cand):
                checked = self._check(cand, k, n_cand, q, value, value2, pair_limit, exclude)
                if checked < 0 or (checked >> 8) < needed:
                    continue
                cand[n_out] = cand[k]
                found[n_out] = <uint16_t>checked
                n_out += 1
        out_rows = np.empty(n_out, np.int64)
        out_agree = np.empty(n_out, np.uint8)
        out_dist = np.empty(n_out, np.int16)
        cdef int64_t[::1] o_rows = out_rows
        cdef uint8_t[::1] o_agree = out_agree
        cdef int16_t[::1] o_dist = out_dist
        for k in range(n_out):
            o_rows[k] = cand[k]
            o_agree[k] = <uint8_t>(found[k] >> 8)
            o_dist[k] = <int16_t>(found[k] & 255)
        free(cand)
        free(found)
        return out_rows, out_agree, out_dist

    def best(self, bytes sketch, uint64_t value, uint64_t value2, int pair_limit, int needed,
             int64_t exclude=-1, best=None):
        """``query``'s best row, or ``best`` (a ``(row, agree, distance)``
        found elsewhere) when that is better: the most agreeing bins, then the
        smaller distance, then the earlier row. One call, no arrays: the
        crawl's look-up of one page."""
        if sketch is None or PyBytes_GET_SIZE(sketch) != SIMDUP_SKETCH_BINS:
            raise ValueError(f"a sketch must be {SIMDUP_SKETCH_BINS} bytes")
        if self.n_main + self.n_buf > self.known:
            raise ValueError("the row arrays do not hold every stored row")
        cdef int best_agree = -1, best_dist = 0, checked, agree, dist
        cdef int64_t best_row = -1
        cdef Py_ssize_t n_cand, k
        cdef uint32_t *cand
        cdef uint32_t r
        cdef const uint8_t *q = <const uint8_t *>PyBytes_AS_STRING(sketch)
        if best is not None:
            best_row, best_agree, best_dist = best
        with nogil:
            n_cand = self._gather(q, &cand)
            for k in range(n_cand):
                checked = self._check(cand, k, n_cand, q, value, value2, pair_limit, exclude)
                if checked < 0:
                    continue
                agree, dist, r = checked >> 8, checked & 255, cand[k]
                if agree >= needed and better_match(agree, dist, r, best_agree, best_dist, best_row):
                    best_agree, best_dist, best_row = agree, dist, r
            free(cand)
        if n_cand < 0:
            raise MemoryError()
        if best_row < 0:
            return None
        return best_row, best_agree, best_dist
