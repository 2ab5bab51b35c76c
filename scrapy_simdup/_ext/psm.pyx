# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled PSM core: VOSH flip-set generation and the bucketed online table.

Layout (one copy of the data, DESIGN.md "PSM online"):

* ``main``: ``vals`` uint64[n_main] and ``ids`` int64[n_main] grouped by the
  ``t``-bit header (the top ``t`` bits), plus ``offsets`` uint32[2**t + 1]:
  bucket ``b`` is ``vals[offsets[b]:offsets[b+1]]``.
* ``buffer``: recent inserts, appended in O(1) and chained per header
  (``head`` int32[2**tb], ``next`` int32[]), ``tb <= t`` bits. A query walks the
  chain of every bucket it probes, so it sees every value added so far. When
  the buffer holds more than a quarter of ``main`` it is merged with a
  counting sort by header (O(n + 2**t)), so inserts are amortised O(1); ``t``
  is re-chosen from the new size at each merge.

The Python facade (``_index.py``) validates arguments that are not on the hot
path; the query entry points here validate their own (W shape, NaN) in C so a
single ``query`` stays a few microseconds.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t, int32_t, int8_t
from libc.stdlib cimport malloc, free
from libc.math cimport fabs, sqrt, log, isfinite

import numpy as np

cdef extern from "_murmur3.h" nogil:
    int simdup_popcount64(uint64_t x)

cdef extern from *:
    void __builtin_prefetch(const void *addr) nogil

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
    int VOSH_MAX_H


cdef enum:
    MAX_T = 32
    STACK_HEAP = 600
    BATCH = 8
    GROUP = 8       # queries pipelined together in query_many
    FIRST_STAGE = 4 # PSM-F probes of the first pipelined stage
    KPIPE = 64      # probes per query up to which query_many pipelines


# ---------------------------------------------------------------- the model
cdef struct model_t:
    double dc           # grid step of normalised |W|
    double inv_dc
    int K               # grid points 0..K-1
    const double *tab   # log-odds of p at each grid point
    double slope        # log-odds slope beyond the grid
    double slope_grid   # the same per grid step
    double uniform      # log-odds used when W is None


cdef inline double model_lw_grid(const model_t *m, double x) noexcept nogil:
    """log-odds at x grid steps (x = c / dc)."""
    cdef int i
    if x >= m.K - 1:
        return m.tab[m.K - 1] + (x - (m.K - 1)) * m.slope_grid
    i = <int>x
    return m.tab[i] + (x - i) * (m.tab[i + 1] - m.tab[i])


cdef inline double model_lw(const model_t *m, double c) noexcept nogil:
    return model_lw_grid(m, c * m.inv_dc)


cdef int prepare(const model_t *m, const double *W, int t, int keep,
                 double *lw, uint64_t *mask) noexcept nogil:
    """The ``keep`` most volatile header bits ranked: lw[r] non-increasing,
    mask[r] the bit. Returns -1 if W holds NaN or infinity.

    ``keep = min(t, probes)`` is enough: every flip set has a key below each
    of its members' singletons (all log-odds are < 0 since p < 1/2), so
    before any set containing rank r all singletons of ranks <= r come out,
    and the first ``probes`` sets (empty set included) use ranks < probes - 1.
    Bits are selected by smallest |W| (lw is decreasing in |W|), so only the
    kept ones go through the model."""
    cdef int r, j, bit, n = 0
    cdef double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0, ss, scale, a, big
    cdef double aw[MAX_T]
    cdef uint64_t mk
    if keep > t:
        keep = t
    if W == NULL:
        for r in range(keep):
            lw[r] = m.uniform
            mask[r] = (<uint64_t>1) << (63 - r)
        return 0
    for j in range(0, 64, 4):
        s0 += W[j] * W[j]
        s1 += W[j + 1] * W[j + 1]
        s2 += W[j + 2] * W[j + 2]
        s3 += W[j + 3] * W[j + 3]
    ss = (s0 + s1) + (s2 + s3)
    if not isfinite(ss):
        # NaN/inf in W, or finite weights so large their squares overflow
        big = 0.0
        for j in range(64):
            if not isfinite(W[j]):
                return -1
            if fabs(W[j]) > big:
                big = fabs(W[j])
        ss = 0.0
        for j in range(64):
            ss += (W[j] / big) * (W[j] / big)
        scale = m.inv_dc / (big * sqrt(ss / 64.0))
    elif ss == 0.0:
        scale = 0.0
    else:
        scale = m.inv_dc / sqrt(ss / 64.0)
    # rank of each header bit by |W| (stable: the higher bit first on ties),
    # counted without data-dependent branches (vectorises; an insertion sort
    # mispredicts on every element)
    cdef double a_all[MAX_T]
    cdef int cnt
    for r in range(t):
        a_all[r] = fabs(W[63 - r])
    for r in range(t):
        a = a_all[r]
        cnt = 0
        for j in range(r):
            cnt += a_all[j] <= a
        for j in range(r + 1, t):
            cnt += a_all[j] < a
        if cnt < keep:
            aw[cnt] = a
            mask[cnt] = (<uint64_t>1) << (63 - r)
    for r in range(keep):
        lw[r] = model_lw_grid(m, aw[r] * scale)
    return 0


cdef class _Model:
    """The calibrated volatility model as C-readable arrays."""
    cdef model_t m
    cdef double[::1] _tab

    def __init__(self, double dc, tab, double slope, double uniform):
        self._tab = np.ascontiguousarray(tab, dtype=np.float64).copy()
        if self._tab.shape[0] < 2 or dc <= 0:
            raise ValueError("model table needs at least 2 points and dc > 0")
        self.m.dc = dc
        self.m.inv_dc = 1.0 / dc
        self.m.K = self._tab.shape[0]
        self.m.tab = &self._tab[0]
        self.m.slope = slope
        self.m.slope_grid = slope * dc
        self.m.uniform = uniform

    def log_odds(self, c):
        c = np.ascontiguousarray(c, dtype=np.float64)
        cdef double[::1] cv = c.ravel()
        out = np.empty(cv.shape[0], dtype=np.float64)
        cdef double[::1] ov = out
        cdef Py_ssize_t i
        for i in range(cv.shape[0]):
            ov[i] = model_lw(&self.m, cv[i])
        return out.reshape(c.shape)


# ------------------------------------------------------------- flip sets
def flip_masks_c(_Model model, W, int header_bits, int distance, long max_probes):
    """Header XOR masks in non-increasing p(S), mask 0 first (see _index)."""
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


# ------------------------------------------------------------ result vector
from scrapy_simdup._ext.resvec cimport res_free, res_push, resvec


cdef inline int auto_header_bits(Py_ssize_t n) noexcept nogil:
    """t = floor(log2 n) - 2, within [4, 30]: 4..8 fingerprints per bucket
    on average (one or two cache lines), offsets cost at most 1 byte per
    fingerprint. The paper's t = log2 n gives smaller buckets but needs more
    probes for the same recall; a probe costs a cache miss whatever its size,
    and t = log2 n - 2 measured fastest at n = 10M (bench_index.py)."""
    cdef int t = 0
    while (<Py_ssize_t>1 << (t + 1)) <= n:
        t += 1
    t -= 2
    if t < 4:
        t = 4
    if t > 30:
        t = 30
    return t


# --------------------------------------------------------------- the table
cdef class PSMCore:
    """Bucketed single-copy table with compiled PSM-F / PSM-A queries."""
    cdef public int distance
    cdef int t, tb, fixed_t
    cdef long _maxk                  # probes per query, -1 = all
    cdef _Model _model
    # main table
    cdef object _vals_arr, _ids_arr, _off_arr
    cdef const uint64_t *vals
    cdef const int64_t *ids
    cdef const uint32_t *off
    cdef Py_ssize_t n_main
    # buffer
    cdef object _bvals_arr, _bids_arr, _bnext_arr, _bhead_arr
    cdef uint64_t *bvals
    cdef int64_t *bids
    cdef int32_t *bnext
    cdef int32_t *bhead
    cdef Py_ssize_t n_buf, buf_cap

    def __cinit__(self, *args, **kwargs):
        self.n_main = 0
        self.n_buf = 0
        self.buf_cap = 0
        self._maxk = -1
        self.t = 4
        self.tb = 0
        self.fixed_t = 0

    # -- state --------------------------------------------------------
    def _core_init(self, int distance, int header_bits, _Model model):
        self.distance = distance
        self.fixed_t = header_bits
        self._model = model
        self._set_main(np.zeros(0, np.uint64), np.zeros(0, np.int64),
                       header_bits if header_bits > 0 else auto_header_bits(0))

    def _set_model(self, _Model model):
        self._model = model

    def _set_main(self, vals, ids, int t, offsets=None):
        """Install a main table (values grouped by t-bit header)."""
        cdef Py_ssize_t n = vals.shape[0]
        if offsets is None:
            offsets = _bucket_offsets(vals, t)
        self._vals_arr = vals
        self._ids_arr = ids
        self._off_arr = offsets
        self.t = t
        self.n_main = n
        cdef const uint64_t[::1] vv = vals
        cdef const int64_t[::1] iv = ids
        cdef const uint32_t[::1] ov = offsets
        self.vals = &vv[0] if n else NULL
        self.ids = &iv[0] if n else NULL
        self.off = &ov[0]
        self._reset_buffer()

    def _reset_buffer(self):
        self.n_buf = 0
        self.buf_cap = 0
        self._bvals_arr = self._bids_arr = self._bnext_arr = self._bhead_arr = None
        self.bvals = NULL
        self.bids = NULL
        self.bnext = NULL
        self.bhead = NULL
        cdef int tb = auto_header_bits(self.buffer_limit())
        self.tb = tb if tb < self.t else self.t

    cpdef Py_ssize_t buffer_limit(self):
        lim = self.n_main // 4
        return lim if lim > 256 else 256

    @property
    def header_bits(self):
        return self.t

    @property
    def max_probes(self):
        return None if self._maxk < 0 else self._maxk

    @max_probes.setter
    def max_probes(self, value):
        if value is None:
            self._maxk = -1
        else:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"max_probes must be an int >= 1 or None, got {value!r}")
            v = int(value)
            if v < 1:
                raise ValueError(f"max_probes must be >= 1 or None, got {value!r}")
            self._maxk = min(v, 1 << 62)    # more than every flip set is every flip set

    def __len__(self):
        return self.n_main + self.n_buf

    def _n_buffered(self):
        return self.n_buf

    def _fixed_header_bits(self):
        return self.fixed_t

    @property
    def nbytes(self):
        """Bytes held by the table's arrays (values, ids, offsets, buffer)."""
        total = 0
        for a in (self._vals_arr, self._ids_arr, self._off_arr, self._bvals_arr,
                  self._bids_arr, self._bnext_arr, self._bhead_arr):
            if a is not None:
                total += a.nbytes
        return total

    def _arrays(self):
        """(vals, ids) of everything stored, main first then buffer."""
        if self.n_buf == 0:
            return self._vals_arr, self._ids_arr
        return (np.concatenate([self._vals_arr, self._bvals_arr[:self.n_buf]]),
                np.concatenate([self._ids_arr, self._bids_arr[:self.n_buf]]))

    def _main_arrays(self):
        return self._vals_arr, self._ids_arr, self._off_arr

    # -- insert -------------------------------------------------------
    def _add_arrays(self, const uint64_t[::1] values, const int64_t[::1] ids):
        cdef Py_ssize_t m = values.shape[0], i
        cdef Py_ssize_t total = self.n_main + self.n_buf + m
        if total >= 4294967295:
            raise ValueError("PSMIndex holds at most 2**32 - 1 fingerprints")
        if m == 0:
            return
        if self.n_buf + m > self.buffer_limit():
            self._merge(np.asarray(values), np.asarray(ids))
            return
        if self.n_buf + m > self.buf_cap:
            self._grow_buffer(self.n_buf + m)
        cdef int shift = 64 - self.tb
        cdef uint64_t v
        cdef int32_t b
        for i in range(m):
            v = values[i]
            b = <int32_t>(v >> shift) if self.tb > 0 else 0
            self.bvals[self.n_buf] = v
            self.bids[self.n_buf] = ids[i]
            self.bnext[self.n_buf] = self.bhead[b]
            self.bhead[b] = <int32_t>self.n_buf
            self.n_buf += 1
        return

    def _grow_buffer(self, Py_ssize_t need):
        cdef Py_ssize_t cap = 64 if self.buf_cap == 0 else self.buf_cap
        while cap < need:
            cap *= 2
        lim = self.buffer_limit()
        if cap > lim:
            cap = lim
        bv = np.empty(cap, np.uint64)
        bi = np.empty(cap, np.int64)
        bn = np.empty(cap, np.int32)
        if self.n_buf:
            bv[:self.n_buf] = self._bvals_arr[:self.n_buf]
            bi[:self.n_buf] = self._bids_arr[:self.n_buf]
            bn[:self.n_buf] = self._bnext_arr[:self.n_buf]
        if self._bhead_arr is None:
            self._bhead_arr = np.full(1 << self.tb, -1, np.int32)
        self._bvals_arr, self._bids_arr, self._bnext_arr = bv, bi, bn
        cdef uint64_t[::1] bvv = bv
        cdef int64_t[::1] biv = bi
        cdef int32_t[::1] bnv = bn
        cdef int32_t[::1] bhv = self._bhead_arr
        self.bvals = &bvv[0]
        self.bids = &biv[0]
        self.bnext = &bnv[0]
        self.bhead = &bhv[0]
        self.buf_cap = cap

    def _merge(self, extra_vals=None, extra_ids=None):
        """Merge main + buffer (+ extra) into a new main table."""
        parts_v = [self._vals_arr]
        parts_i = [self._ids_arr]
        if self.n_buf:
            parts_v.append(self._bvals_arr[:self.n_buf])
            parts_i.append(self._bids_arr[:self.n_buf])
        if extra_vals is not None:
            parts_v.append(extra_vals)
            parts_i.append(extra_ids)
        n = sum(p.shape[0] for p in parts_v)
        t = self.fixed_t if self.fixed_t > 0 else auto_header_bits(n)
        vals = np.empty(n, np.uint64)
        ids = np.empty(n, np.int64)
        offsets = np.zeros((1 << t) + 1, np.uint32)
        _counting_sort(parts_v, parts_i, t, vals, ids, offsets)
        self._set_main(vals, ids, t, offsets)
        self._on_rebuild()

    def _on_rebuild(self):
        pass

    # -- query --------------------------------------------------------
    cdef int _search(self, uint64_t x, const double *W, bint first, long maxk,
                     int64_t qi, resvec *res, vosh_node *heap,
                     long heapcap) noexcept nogil:
        """Probe buckets in VOSH order. Returns the number of matches found,
        -1 for a bad W, -2 for out of memory."""
        cdef double lw[MAX_T]
        cdef uint64_t mk[MAX_T]
        cdef vosh_gen g
        cdef uint64_t masks[BATCH]
        cdef uint32_t hq[BATCH]
        cdef uint32_t lo[BATCH]
        cdef uint32_t hi[BATCH]
        cdef int t = self.t, h = self.distance, shift = 64 - self.t
        cdef int bshift = self.t - self.tb
        cdef int nb, i, size, rc, d
        cdef long k = 0
        cdef int found = 0
        cdef uint32_t j
        cdef int32_t c
        cdef uint64_t v, hdr
        cdef const uint32_t *off = self.off
        cdef const uint64_t *vals = self.vals
        cdef int keep = t if maxk >= t else <int>maxk
        if prepare(&self._model.m, W, t, keep, lw, mk) < 0:
            return -1
        vosh_init(&g, lw, mk, keep, h, heap, heapcap)
        vosh_limit(&g, maxk)            # the query takes at most maxk sets
        while k < maxk:
            nb = 0
            while nb < BATCH and k < maxk:
                rc = vosh_next(&g, &masks[nb], &size)
                if rc <= 0:
                    break
                nb += 1
                k += 1
            if nb == 0:
                break
            for i in range(nb):
                hq[i] = <uint32_t>((x ^ masks[i]) >> shift)
                __builtin_prefetch(&off[hq[i]])
            for i in range(nb):
                lo[i] = off[hq[i]]
                hi[i] = off[hq[i] + 1]
                __builtin_prefetch(&vals[lo[i]])
            for i in range(nb):
                for j in range(lo[i], hi[i]):
                    d = simdup_popcount64(vals[j] ^ x)
                    if d <= h:
                        if res_push(res, qi, self.ids[j], d) < 0:
                            return -2
                        found += 1
                        if first:
                            return found
                if self.n_buf:
                    hdr = hq[i]
                    c = self.bhead[hdr >> bshift]
                    while c >= 0:
                        v = self.bvals[c]
                        if (v >> shift) == hdr:
                            d = simdup_popcount64(v ^ x)
                            if d <= h:
                                if res_push(res, qi, self.bids[c], d) < 0:
                                    return -2
                                found += 1
                                if first:
                                    return found
                        c = self.bnext[c]
            if rc <= 0:
                break
        return found

    cdef Py_ssize_t _search_group(self, const uint64_t *xs, const double *Ws,
                                  int G, bint first, long maxk, int64_t q0,
                                  resvec *res, vosh_node *heap,
                                  long heapcap) noexcept nogil:
        """G queries (maxk <= KPIPE) with their bucket loads overlapped: flip
        sets of all queries first, then all offset loads, then all scans.
        PSM-F does this in two stages (the first FIRST_STAGE probes, then the
        rest for the queries still unmatched), so a query matched early does
        not pay for generating the flip sets it will not probe. ``heap`` holds
        G * heapcap nodes. Returns 0, -2 for out of memory, or -(3 + g) for a
        bad W in query g."""
        cdef double lw[GROUP][MAX_T]
        cdef uint64_t mk[GROUP][MAX_T]
        cdef vosh_gen gen[GROUP]
        cdef uint32_t hq[GROUP][KPIPE]
        cdef uint32_t lo[GROUP][KPIPE]
        cdef uint32_t hi[GROUP][KPIPE]
        cdef int nk[GROUP]
        cdef int start[GROUP]
        cdef bint live[GROUP]
        cdef int t = self.t, h = self.distance, shift = 64 - self.t
        cdef int bshift = self.t - self.tb
        cdef int g, k, size, d, stage, limit, nlive
        cdef uint64_t m, x, v, hdr
        cdef uint32_t j
        cdef int32_t c
        cdef bint done
        cdef const uint32_t *off = self.off
        cdef const uint64_t *vals = self.vals
        cdef int keep = t if maxk >= t else <int>maxk
        for g in range(G):
            if prepare(&self._model.m, (Ws + 64 * g) if Ws != NULL else NULL,
                       t, keep, lw[g], mk[g]) < 0:
                return -(3 + g)
            vosh_init(&gen[g], lw[g], mk[g], keep, h, heap + g * heapcap, heapcap)
            vosh_limit(&gen[g], maxk)
            nk[g] = 0
            live[g] = True
        for stage in range(2):
            if stage == 0:
                limit = FIRST_STAGE if first and maxk > FIRST_STAGE else <int>maxk
            else:
                if limit >= maxk:
                    break
                limit = <int>maxk
            nlive = 0
            for g in range(G):
                if not live[g]:
                    continue
                nlive += 1
                x = xs[g]
                start[g] = nk[g]
                k = nk[g]
                while k < limit:
                    if vosh_next(&gen[g], &m, &size) <= 0:
                        live[g] = False  # every flip set generated
                        break
                    hq[g][k] = <uint32_t>((x ^ m) >> shift)
                    __builtin_prefetch(&off[hq[g][k]])
                    k += 1
                nk[g] = k
            if nlive == 0:
                break
            for g in range(G):
                for k in range(start[g], nk[g]):
                    lo[g][k] = off[hq[g][k]]
                    hi[g][k] = off[hq[g][k] + 1]
                    __builtin_prefetch(&vals[lo[g][k]])
            for g in range(G):
                x = xs[g]
                done = False
                for k in range(start[g], nk[g]):
                    for j in range(lo[g][k], hi[g][k]):
                        d = simdup_popcount64(vals[j] ^ x)
                        if d <= h:
                            if res_push(res, q0 + g, self.ids[j], d) < 0:
                                return -2
                            if first:
                                done = True
                                break
                    if done:
                        break
                    if self.n_buf:
                        hdr = hq[g][k]
                        c = self.bhead[hdr >> bshift]
                        while c >= 0:
                            v = self.bvals[c]
                            if (v >> shift) == hdr:
                                d = simdup_popcount64(v ^ x)
                                if d <= h:
                                    if res_push(res, q0 + g, self.bids[c], d) < 0:
                                        return -2
                                    if first:
                                        done = True
                                        break
                            c = self.bnext[c]
                        if done:
                            break
                if done:
                    live[g] = False
                start[g] = nk[g]
        return 0

    cdef long _probes(self):
        cdef long total = vosh_total(self.t, self.distance)
        if self._maxk < 0 or self._maxk > total:
            return total
        return self._maxk

    cpdef list query(self, value, W=None, bint first=True):
        """Fingerprints within ``distance`` of ``value``: list of (id, distance).

        ``first=True`` is PSM-F (stop at the first match), ``first=False`` is
        PSM-A (all matches found, sorted by distance then id)."""
        cdef uint64_t x
        cdef const double *wp = NULL
        cdef const double[::1] wv
        if type(value) is not int and (isinstance(value, bool) or
                                       not isinstance(value, np.integer)):
            # (a float or a bool would be truncated by the C conversion)
            raise ValueError(f"value must be an int in [0, 2**64), got {value!r}")
        try:
            x = value
        except (OverflowError, TypeError):
            raise ValueError(
                f"value must be an int in [0, 2**64), got {value!r}") from None
        if W is not None:
            try:
                wv = W
            except (ValueError, TypeError):
                wv = _check_W1(W)
            if wv.shape[0] != 64:
                raise ValueError(f"W must have shape (64,), got ({wv.shape[0]},)")
            wp = &wv[0]
        cdef long maxk = self._probes()
        cdef resvec res
        res.n = 0; res.cap = 0; res.q = NULL; res.ids = NULL; res.d = NULL
        cdef vosh_node stack_heap[STACK_HEAP]
        cdef vosh_node *heap = stack_heap
        cdef long heapcap = self.distance + maxk + 2
        cdef int rc
        if heapcap > STACK_HEAP:
            heap = <vosh_node *>malloc(heapcap * sizeof(vosh_node))
            if heap == NULL:
                raise MemoryError()
        try:
            if maxk <= KPIPE:
                rc = <int>self._search_group(&x, wp, 1, first, maxk, 0, &res,
                                             heap, heapcap)
                if rc == -3:
                    rc = -1
            else:
                rc = self._search(x, wp, first, maxk, 0, &res, heap, heapcap)
            if rc == -1:
                raise ValueError("W must be finite (no NaN or infinity)")
            if rc == -2:
                raise MemoryError()
            if res.n == 0:
                return []
            if res.n == 1:
                return [(res.ids[0], res.d[0])]
            out = [(res.ids[i], res.d[i]) for i in range(res.n)]
            out.sort(key=_by_distance)
            return out
        finally:
            if heap != stack_heap:
                free(heap)
            res_free(&res)

    def _query_many(self, const uint64_t[::1] values, W, bint first):
        cdef Py_ssize_t n = values.shape[0], i
        cdef const double[:, ::1] wv
        cdef bint has_w = W is not None
        if has_w:
            wv = W
        cdef long maxk = self._probes()
        cdef long heapcap = self.distance + maxk + 2
        cdef vosh_node *heap = <vosh_node *>malloc(GROUP * heapcap * sizeof(vosh_node))
        if heap == NULL:
            raise MemoryError()
        cdef resvec res
        res.n = 0; res.cap = 0; res.q = NULL; res.ids = NULL; res.d = NULL
        cdef int rc = 0
        cdef int64_t[::1] oid
        cdef int8_t[::1] odist
        cdef Py_ssize_t before
        if first:
            out_ids = np.full(n, -1, np.int64)
            out_d = np.full(n, -1, np.int8)
            oid = out_ids
            odist = out_d
        cdef Py_ssize_t g0, G, k
        i = 0
        cdef bint pipe = maxk <= KPIPE
        try:
            with nogil:
                if pipe:
                    g0 = 0
                    while g0 < n:
                        G = n - g0 if n - g0 < GROUP else GROUP
                        rc = self._search_group(&values[g0],
                                                &wv[g0, 0] if has_w else NULL,
                                                <int>G, first, maxk, g0, &res,
                                                heap, heapcap)
                        if rc < 0:
                            if rc <= -3:
                                i = g0 + (-rc - 3)
                                rc = -1
                            break
                        if first:
                            for k in range(res.n):
                                oid[res.q[k]] = res.ids[k]
                                odist[res.q[k]] = res.d[k]
                            res.n = 0
                        g0 += G
                else:
                    for i in range(n):
                        before = res.n
                        rc = self._search(values[i], &wv[i, 0] if has_w else NULL,
                                          first, maxk, i, &res, heap, heapcap)
                        if rc < 0:
                            break
                        if first:
                            if res.n > before:
                                oid[i] = res.ids[before]
                                odist[i] = res.d[before]
                            res.n = 0
            if rc == -1:
                raise ValueError(f"W[{i}] must be finite (no NaN or infinity)")
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
            free(heap)
            res_free(&res)



def _by_distance(item):
    return (item[1], item[0])


def _check_W1(W):
    try:
        a = np.ascontiguousarray(W, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"W must be a float64 array of shape (64,): {exc}") from None
    if a.ndim != 1:
        raise ValueError(f"W must have shape (64,), got {a.shape}")
    return a


def _bucket_offsets(const uint64_t[::1] vals, int t):
    """offsets[b] = first index with header >= b, for vals grouped by header."""
    cdef Py_ssize_t n = vals.shape[0], i
    offsets = np.zeros((1 << t) + 1, np.uint32)
    cdef uint32_t[::1] ov = offsets
    cdef int shift = 64 - t
    cdef uint64_t b
    with nogil:
        for i in range(n):
            ov[(vals[i] >> shift) + 1] += 1
        for b in range(1, (<uint64_t>1 << t) + 1):
            ov[b] += ov[b - 1]
    return offsets


def _counting_sort(parts_v, parts_i, int t, uint64_t[::1] vals, int64_t[::1] ids,
                   uint32_t[::1] offsets):
    """Stable counting sort of the concatenated parts by t-bit header."""
    cdef int shift = 64 - t
    cdef const uint64_t[::1] pv
    cdef const int64_t[::1] pi
    cdef Py_ssize_t i, n
    cdef uint64_t b, nb = (<uint64_t>1) << t
    cdef uint32_t pos
    offsets[:] = 0
    for p in parts_v:
        pv = p
        n = pv.shape[0]
        with nogil:
            for i in range(n):
                offsets[(pv[i] >> shift) + 1] += 1
    with nogil:
        for b in range(1, nb + 1):
            offsets[b] += offsets[b - 1]
    cursor = np.array(offsets[:nb], dtype=np.uint32)
    cdef uint32_t[::1] cur = cursor
    for k in range(len(parts_v)):
        pv = parts_v[k]
        pi = parts_i[k]
        n = pv.shape[0]
        with nogil:
            for i in range(n):
                b = pv[i] >> shift
                pos = cur[b]
                cur[b] = pos + 1
                vals[pos] = pv[i]
                ids[pos] = pi[i]
