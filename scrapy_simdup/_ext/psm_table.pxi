# The bucketed table PSMCore (inserts, merges, PSM-F and PSM-A queries) and its helpers.

cdef inline int auto_header_bits(Py_ssize_t n, int drop=2) noexcept nogil:
    """t = floor(log2 n) - drop, within [4, 30]. ``drop`` 2: 4..8
    fingerprints per bucket on average (one or two cache lines), offsets cost
    at most 1 byte per fingerprint. The paper's t = log2 n gives smaller
    buckets but needs more probes for the same recall; a probe costs a cache
    miss whatever its size, so slightly larger buckets are faster overall
    (bench_index.py). The verified index's wide radius drops more
    (``_set_header_drop``): loose pairs flip a third of the header bits, and
    fewer header bits need far fewer probes than the larger buckets cost."""
    cdef int t = 0
    while (<Py_ssize_t>1 << (t + 1)) <= n:
        t += 1
    t -= drop
    if t < 4:
        t = 4
    if t > 30:
        t = 30
    return t


cdef inline int _next_batch(vosh_gen *g, uint64_t x, int shift, const uint32_t *off,
                            uint32_t *hq, long *k, long maxk, int *rc) noexcept nogil:
    """The headers of up to BATCH more flip sets (fewer at the budget or when
    the sets run out: ``rc`` <= 0), their bucket offsets requested."""
    cdef int nb = 0, size
    cdef uint64_t m
    while nb < BATCH and k[0] < maxk:
        rc[0] = vosh_next(g, &m, &size)
        if rc[0] <= 0:
            break
        hq[nb] = <uint32_t>((x ^ m) >> shift)
        __builtin_prefetch(&off[hq[nb]])
        nb += 1
        k[0] += 1
    return nb


cdef inline void _load_buckets(const uint32_t *off, const uint64_t *vals,
                               const int32_t *bhead, int bshift, const uint32_t *hq,
                               uint32_t *lo, uint32_t *hi, int nb) noexcept nogil:
    """Bucket bounds of a batch, and a request for every cache line of its
    buckets (a large bucket is scanned at the memory's bandwidth, not its
    latency) and for the write buffer's chain heads."""
    cdef int i
    cdef uint32_t j
    for i in range(nb):
        lo[i] = off[hq[i]]
        hi[i] = off[hq[i] + 1]
        for j in range(lo[i], hi[i], 8):
            __builtin_prefetch(&vals[j])
        if bhead != NULL:
            __builtin_prefetch(&bhead[hq[i] >> bshift])


cdef inline void _request_entry(PSMCore core, int32_t c) noexcept nogil:
    """Request what walking a write-buffer chain reads of its entry ``c``."""
    __builtin_prefetch(&core.bvals[c])
    __builtin_prefetch(&core.bnext[c])
    if core.paired:
        __builtin_prefetch(&core.bids[c])


cdef inline bint _partner_fails(const uint64_t *pk, Py_ssize_t pk_rows, int64_t row,
                                int d, uint64_t x2, int plim) noexcept nogil:
    """A paired table's test: is the row unknown, or its other key too far?
    (``pk``: the row keys, already offset to the other key's column)"""
    if not 0 <= row < pk_rows:
        return True
    return d + simdup_popcount64(pk[2 * row] ^ x2) > plim


cdef inline uint32_t _main_id(const uint64_t *vals, const uint8_t *idhi, int idw,
                              int lob, Py_ssize_t j) noexcept nogil:
    """The id of main entry ``j``: its low ``lob`` bits from the key's header
    bits, the rest from ``idhi`` (``idw`` bytes an entry)."""
    cdef uint32_t hi = 0
    if idw == 4:
        hi = (<const uint32_t *>idhi)[j]
    elif idw == 2:
        hi = (<const uint16_t *>idhi)[j]
    elif idw == 1:
        hi = idhi[j]
    if lob == 0:
        return hi
    return <uint32_t>(vals[j] >> (64 - lob)) | (hi << lob)


cdef inline int _candidate_agree(PSMCore t, const resvec *res, Py_ssize_t i,
                                 const uint8_t *q) noexcept nogil:
    """Bins candidate ``i`` of ``res`` agrees in with sketch ``q`` (-1: its row
    has no sketch). The sketches are scattered: the one a few candidates
    ahead is requested meanwhile."""
    cdef int64_t row
    if i + VERIFY_AHEAD < res.n:
        row = res.ids[i + VERIFY_AHEAD]
        if 0 <= row < t.vsk_rows:
            __builtin_prefetch(t.vsk + SIMDUP_SKETCH_BINS * row)
    row = res.ids[i]
    if not 0 <= row < t.vsk_rows:
        return -1
    return simdup_sketch_matches(q, t.vsk + SIMDUP_SKETCH_BINS * row)


cdef class PSMCore:
    """Bucketed single-copy table with compiled PSM-F / PSM-A queries."""
    cdef public int distance
    cdef int t, tb, fixed_t
    cdef long _maxk                  # probes per query, -1 = all
    cdef _Model _model
    # main table. A packed table (``_set_packed``) keeps the low ``lob`` (=
    # t) bits of each id in its key's header bits, which the bucket already
    # says, and the rest of the id in ``idhi``; otherwise ``lob`` is 0 and
    # ``idhi`` holds the whole ids (4 bytes each).
    cdef object _vals_arr, _idhi_arr, _off_arr
    cdef const uint64_t *vals
    cdef const uint8_t *idhi         # ``idw`` bytes per entry (0: none)
    cdef int idw, lob
    cdef uint64_t vmask              # the key bits a main entry holds
    cdef uint32_t max_main_id
    cdef bint packed
    cdef const uint32_t *off
    cdef Py_ssize_t n_main
    # buffer
    cdef object _bvals_arr, _bids_arr, _bnext_arr, _bhead_arr
    cdef uint64_t *bvals
    cdef uint32_t *bids
    cdef int32_t *bnext
    cdef int32_t *bhead
    cdef Py_ssize_t n_buf, buf_cap
    # verification (index/verified.py): sketch rows indexed by id, and the
    # bins a candidate must agree in
    cdef object _vsk_arr
    cdef const uint8_t *vsk
    cdef Py_ssize_t vsk_rows
    cdef int vneed
    # a paired table (index/verified.py): its ids are rows of the caller's
    # row keys (``pk``: row r's keys at pk[2 r], pk[2 r + 1]), and a candidate
    # also needs its distance and its other key's (column ``pcol``) to add up
    # to at most pair_limit: checked in the scan, before its sketch is read
    cdef bint paired
    cdef int _pair_limit
    cdef int pcol
    cdef object _pk_arr
    cdef const uint64_t *pk
    cdef Py_ssize_t pk_rows
    cdef int header_drop             # t = floor(log2 n) - header_drop
    # while a whole index is loaded (``_set_bulk``): the write buffer grows to
    # a quarter of the main table, so that the merges' total work stays linear
    cdef bint bulk

    def __cinit__(self, *args, **kwargs):
        self.n_main = 0
        self.n_buf = 0
        self.buf_cap = 0
        self._maxk = -1
        self.t = 4
        self.tb = 0
        self.fixed_t = 0
        self.vsk = NULL
        self.vsk_rows = 0
        self.paired = False
        self._pair_limit = 128
        self.header_drop = 2
        self.bulk = False
        self.pcol = 1
        self.pk = NULL
        self.pk_rows = 0
        self.packed = False
        self.idw = 4
        self.lob = 0
        self.vmask = ~(<uint64_t>0)
        self.max_main_id = 0

    # -- state --------------------------------------------------------
    def _core_init(self, int distance, int header_bits, _Model model):
        self.distance = distance
        self.fixed_t = header_bits
        self._model = model
        self._set_main(np.zeros(0, np.uint64), np.zeros(0, np.uint32),
                       header_bits if header_bits > 0 else auto_header_bits(0))

    def _set_model(self, _Model model):
        self._model = model

    def _set_header_drop(self, int drop):
        """Headers of ``floor(log2 n) - drop`` bits (2 by default), and a
        write buffer of at most 2 pages per header, so that its chains stay
        short with large buckets. Only on an empty table."""
        if self.n_main or self.n_buf:
            raise ValueError("a table's header policy is set before anything is added")
        if not 2 <= drop <= 12:
            raise ValueError(f"drop must be in 2..12, got {drop}")
        self.header_drop = drop
        if self.fixed_t == 0:
            self._set_main(np.zeros(0, np.uint64), np.zeros(0, np.uint32),
                           auto_header_bits(0, drop))

    def _set_paired(self, int pair_limit, int column):
        """Ids are rows of the row keys given by ``_set_partners``, and a
        candidate needs its distance and that of its key in ``column`` (0 or
        1) to add up to at most ``pair_limit``. Only on an empty table."""
        if self.n_main or self.n_buf:
            raise ValueError("a table is paired before anything is added")
        if column not in (0, 1):
            raise ValueError(f"column must be 0 or 1, got {column}")
        self.paired = True
        self._pair_limit = pair_limit
        self.pcol = column

    def _set_packed(self):
        """Keep each id's low ``t`` bits in its key's header bits (the
        bucket holds the header) and only the rest beside it: 9 bytes an entry
        instead of 12 while the ids are below ``2**(t + 8)``, as rows of an
        index are (``t`` grows with them). Only on an empty table."""
        if self.n_main or self.n_buf:
            raise ValueError("a table is packed before anything is added")
        self.packed = True

    def _set_partners(self, const uint64_t[:, ::1] keys, Py_ssize_t rows):
        """A paired table's row keys (the first ``rows`` rows valid): a
        candidate whose id is not one of them is left out."""
        if keys.shape[1] != 2 or rows > keys.shape[0]:
            raise ValueError("bad row key array")
        self._pk_arr = keys
        self.pk = &keys[0, 0] if keys.shape[0] else NULL
        self.pk_rows = rows

    @property
    def pair_limit(self):
        return self._pair_limit if self.paired else None

    def _set_main(self, vals, ids, int t, offsets=None):
        """Install a main table of whole keys grouped by t-bit header and
        their uint32 ids (a packed table stores them packed)."""
        if self.packed and vals.shape[0]:
            self._install(np.zeros(0, np.uint64), np.zeros(0, np.uint8), 0, 0, t,
                          np.zeros((1 << t) + 1, np.uint32), 0)
            self._build([vals], [ids], t)
            return
        if offsets is None:
            offsets = _bucket_offsets(vals, t)
        if self.packed:
            self._install(vals, np.zeros(0, np.uint8), 0, t, t, offsets, 0)
        else:       # (max_main_id only sizes a packed table's ids)
            self._install(vals, ids, 4, 0, t, offsets, 0)

    cdef _install(self, vals, idhi, int idw, int lob, int t, offsets, uint32_t max_id):
        """The main table's arrays: keys (their header bits holding ids' low
        ``lob`` bits), ids' other bits (``idw`` bytes each) and offsets."""
        cdef Py_ssize_t n = vals.shape[0]
        self._vals_arr = vals
        self._idhi_arr = idhi
        self._off_arr = offsets
        self.t = t
        self.n_main = n
        self.idw = idw
        self.lob = lob
        self.vmask = ((<uint64_t>1 << (64 - lob)) - 1) if lob else ~(<uint64_t>0)
        self.max_main_id = max_id
        cdef const uint64_t[::1] vv = vals
        cdef const uint32_t[::1] ov = offsets
        self.vals = &vv[0] if n else NULL
        self.idhi = <const uint8_t *> <size_t> idhi.ctypes.data if idw and n else NULL
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

    def _set_bulk(self, bint on):
        """Bulk loading on or off. While on, the buffer's chains may grow
        long; turning it off merges a buffer past the usual limit, so that
        queries find short chains again."""
        self.bulk = on
        if not on and self.n_buf > self.buffer_limit():
            self._merge()

    cpdef Py_ssize_t buffer_limit(self):
        lim = self.n_main // 4
        if self.header_drop > 2 and not self.bulk and lim > (<Py_ssize_t>2 << self.t):
            # large buckets: chains of at most 2 per header (a chain is walked
            # one dependent load at a time, a bucket scanned at bandwidth)
            lim = <Py_ssize_t>2 << self.t
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
        for a in (self._vals_arr, self._idhi_arr, self._off_arr, self._bvals_arr,
                  self._bids_arr, self._bnext_arr, self._bhead_arr):
            if a is not None:
                total += a.nbytes
        return total

    def _arrays(self):
        """(vals, ids) of everything stored, main first then buffer."""
        vals, ids, _ = self._main_arrays()
        if self.n_buf == 0:
            return vals, ids
        return (np.concatenate([vals, self._bvals_arr[:self.n_buf]]),
                np.concatenate([ids, self._bids_arr[:self.n_buf]]))

    def _main_arrays(self):
        """(vals uint64, ids uint32, offsets) of the main table, whole keys
        (unpacked into new arrays when the table is packed)."""
        if self.lob == 0 and self.idw == 4:
            return self._vals_arr, self._idhi_arr.view(np.uint32), self._off_arr
        cdef Py_ssize_t n = self.n_main
        vals = np.empty(n, np.uint64)
        ids = np.empty(n, np.uint32)
        cdef uint64_t[::1] vv = vals
        cdef uint32_t[::1] iv = ids
        cdef uint64_t b, nbk = (<uint64_t>1) << self.t
        cdef int shift = 64 - self.t
        cdef uint32_t j
        with nogil:
            for b in range(nbk):
                for j in range(self.off[b], self.off[b + 1]):
                    vv[j] = (b << shift) | (self.vals[j] & self.vmask)
                    iv[j] = _main_id(self.vals, self.idhi, self.idw, self.lob, j)
        return vals, ids, self._off_arr

    # -- insert -------------------------------------------------------
    def _add_arrays(self, const uint64_t[::1] values, const uint32_t[::1] ids):
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
        for i in range(m):
            self._push(values[i], ids[i])

    def _add_one(self, uint64_t value, uint32_t id):
        """``_add_arrays`` of one value (a crawl's page: no arrays to make)."""
        if self.n_main + self.n_buf + 1 >= 4294967295:
            raise ValueError("PSMIndex holds at most 2**32 - 1 fingerprints")
        if self.n_buf + 1 > self.buffer_limit():
            self._merge(np.array([value], np.uint64), np.array([id], np.uint32))
            return
        if self.n_buf + 1 > self.buf_cap:
            self._grow_buffer(self.n_buf + 1)
        self._push(value, id)

    cdef inline void _push(self, uint64_t v, uint32_t id) noexcept:
        """Append to the buffer (room made) and chain under its header."""
        cdef int32_t b = <int32_t>(v >> (64 - self.tb)) if self.tb > 0 else 0
        self.bvals[self.n_buf] = v
        self.bids[self.n_buf] = id
        self.bnext[self.n_buf] = self.bhead[b]
        self.bhead[b] = <int32_t>self.n_buf
        self.n_buf += 1

    def _grow_buffer(self, Py_ssize_t need):
        cdef Py_ssize_t cap = 64 if self.buf_cap == 0 else self.buf_cap
        while cap < need:
            cap *= 2
        lim = self.buffer_limit()
        if cap > lim:
            cap = lim
        bv = mapped.empty(cap, np.uint64)
        bi = mapped.empty(cap, np.uint32)
        bn = mapped.empty(cap, np.int32)
        if self.n_buf:
            bv[:self.n_buf] = self._bvals_arr[:self.n_buf]
            bi[:self.n_buf] = self._bids_arr[:self.n_buf]
            bn[:self.n_buf] = self._bnext_arr[:self.n_buf]
        if self._bhead_arr is None:
            self._bhead_arr = mapped.full(1 << self.tb, -1, np.int32)
        self._bvals_arr, self._bids_arr, self._bnext_arr = bv, bi, bn
        cdef uint64_t[::1] bvv = bv
        cdef uint32_t[::1] biv = bi
        cdef int32_t[::1] bnv = bn
        cdef int32_t[::1] bhv = self._bhead_arr
        self.bvals = &bvv[0]
        self.bids = &biv[0]
        self.bnext = &bnv[0]
        self.bhead = &bhv[0]
        self.buf_cap = cap

    def _merge(self, extra_vals=None, extra_ids=None):
        """Merge main + buffer (+ extra) into a new main table."""
        parts_v, parts_i = [], []
        if self.n_buf:
            parts_v.append(self._bvals_arr[:self.n_buf])
            parts_i.append(self._bids_arr[:self.n_buf])
        if extra_vals is not None:
            parts_v.append(extra_vals)
            parts_i.append(extra_ids)
        n = self.n_main + sum(p.shape[0] for p in parts_v)
        t = self.fixed_t if self.fixed_t > 0 else auto_header_bits(n, self.header_drop)
        self._build(parts_v, parts_i, t)
        self._on_rebuild()

    def _build(self, parts_v, parts_i, int t):
        """A new main table with a t-bit header: the main table's entries
        then the parts' (whole keys, uint32 ids), in order within a bucket."""
        cdef Py_ssize_t n = self.n_main + sum(p.shape[0] for p in parts_v)
        cdef uint32_t max_id = 0
        cdef int lob = 0, idw = 4
        if self.packed:     # the ids' bits beside the keys, by the largest id
            max_id = self.max_main_id if self.n_main else 0
            for p in parts_i:
                if p.shape[0]:
                    max_id = max(max_id, int(p.max()))
            lob = t
            hi = max_id >> t
            idw = 0 if hi == 0 else 1 if hi < 256 else 2 if hi < 65536 else 4
        # (in mappings of their own: the arrays they replace go back to the system)
        # the table's arrays, written in full and read at random: huge pages
        vals = mapped.empty(n, np.uint64, huge=True)
        idhi = mapped.empty(n * idw, np.uint8, huge=True)
        offsets = mapped.zeros((1 << t) + 1, np.uint32, huge=True)
        _counting_sort(self, parts_v, parts_i, t, lob, idw, vals, idhi, offsets)
        self._install(vals, idhi, idw, lob, t, offsets, max_id)

    def _on_rebuild(self):
        pass

    # -- query --------------------------------------------------------
    cdef int _search(self, uint64_t x, const double *W, bint first, long maxk,
                     int64_t qi, resvec *res, vosh_node *heap,
                     long heapcap, uint64_t x2=0) noexcept nogil:
        """Probe buckets in VOSH order (``x2``: the partner key of a paired
        table's query). Returns the number of matches found, -1 for a bad W,
        -2 for out of memory.

        Buckets are probed in batches of BATCH, and the next batch's loads are
        started before the current one is read: its sets are generated and its
        bucket offsets requested first, then its buckets while the current
        batch's candidates are still arriving."""
        cdef double lw[MAX_T]
        cdef uint64_t mk[MAX_T]
        cdef vosh_gen g
        cdef uint32_t hq[2 * BATCH]
        cdef uint32_t lo[2 * BATCH]
        cdef uint32_t hi[2 * BATCH]
        cdef uint32_t cand[CAND_CAP]
        cdef int cend[BATCH]
        cdef int32_t chain[BATCH]
        cdef int ncand, spill, ci, cur, nxt, nb_next
        cdef int t = self.t, h = self.distance, shift = 64 - self.t
        cdef int bshift = self.t - self.tb
        cdef int nb, i, rc = 1, d
        cdef long k = 0
        cdef int found = 0
        cdef uint32_t j
        cdef int32_t c
        cdef uint64_t v, hdr
        cdef const uint32_t *off = self.off
        cdef const uint64_t *vals = self.vals
        cdef const uint8_t *idhi = self.idhi
        cdef int idw = self.idw, lob = self.lob
        cdef uint64_t vmask = self.vmask
        cdef int hd[BATCH]               # header bits flipped, packed tables
        cdef const uint64_t *pk = self.pk + self.pcol if self.pk != NULL else NULL
        cdef Py_ssize_t pk_rows = self.pk_rows
        cdef const int32_t *bhead = self.bhead if self.n_buf else NULL
        cdef bint paired = self.paired
        cdef int plim = self._pair_limit
        cdef int64_t row
        cdef int keep = t if maxk >= t else <int>maxk
        if prepare(&self._model.m, W, t, keep, lw, mk) < 0:
            return -1
        vosh_init(&g, lw, mk, keep, h, heap, heapcap)
        vosh_limit(&g, maxk)            # the query takes at most maxk sets
        cur = 0
        nb = _next_batch(&g, x, shift, off, hq, &k, maxk, &rc)
        _load_buckets(off, vals, bhead, bshift, hq, lo, hi, nb)
        while nb > 0:
            nxt = BATCH - cur
            nb_next = 0
            if rc > 0 and k < maxk:
                nb_next = _next_batch(&g, x, shift, off, &hq[nxt], &k, maxk, &rc)
            # Passes over the batch's buckets. The first finds the entries
            # within h on this key and starts loading their ids; a paired
            # table then starts loading their rows' keys (random reads in
            # arrays of the whole index); the last checks them in the same
            # order, by which time the loads have arrived. Candidates past
            # CAND_CAP fall back to checking in place, from the bucket that
            # overflowed.
            ncand = 0
            spill = nb
            if bhead != NULL:
                # the write buffer's chains: their heads were requested with
                # the buckets; request each chain's first entry now
                for i in range(nb):
                    chain[i] = bhead[hq[cur + i] >> bshift]
                    if chain[i] >= 0:
                        _request_entry(self, chain[i])
            for i in range(nb):
                # a packed table's keys hold no header: its distance is the
                # probe's flips in the header plus the rest
                hd[i] = simdup_popcount64(hq[cur + i] ^ (x >> shift)) if lob else 0
                for j in range(lo[cur + i], hi[cur + i]):
                    if simdup_popcount64((vals[j] ^ x) & vmask) + hd[i] <= h:
                        if ncand == CAND_CAP:
                            spill = i
                            break
                        cand[ncand] = j
                        ncand += 1
                        if idw:
                            __builtin_prefetch(&idhi[j * idw])
                if spill < nb:
                    break
                cend[i] = ncand
            if bhead != NULL:
                for i in range(nb):     # and each chain's second entry
                    if chain[i] >= 0 and self.bnext[chain[i]] >= 0:
                        _request_entry(self, self.bnext[chain[i]])
            _load_buckets(off, vals, bhead, bshift, &hq[nxt], &lo[nxt], &hi[nxt], nb_next)
            if paired:
                for ci in range(ncand):
                    row = _main_id(vals, idhi, idw, lob, cand[ci])
                    if 0 <= row < pk_rows:
                        __builtin_prefetch(&pk[2 * row])
            ci = 0
            for i in range(nb):
                if i < spill:
                    while ci < cend[i]:     # the batch's candidates, in order
                        j = cand[ci]
                        ci += 1
                        d = simdup_popcount64((vals[j] ^ x) & vmask) + hd[i]
                        row = _main_id(vals, idhi, idw, lob, j)
                        if paired and _partner_fails(pk, pk_rows, row, d, x2, plim):
                            continue
                        if res_push(res, qi, row, d) < 0:
                            return -2
                        found += 1
                        if first:
                            return found
                else:
                    if i > spill:
                        hd[i] = simdup_popcount64(hq[cur + i] ^ (x >> shift)) if lob else 0
                    for j in range(lo[cur + i], hi[cur + i]):
                        d = simdup_popcount64((vals[j] ^ x) & vmask) + hd[i]
                        if d <= h:
                            row = _main_id(vals, idhi, idw, lob, j)
                            if paired and _partner_fails(pk, pk_rows, row, d, x2, plim):
                                continue
                            if res_push(res, qi, row, d) < 0:
                                return -2
                            found += 1
                            if first:
                                return found
                if bhead != NULL:
                    hdr = hq[cur + i]
                    c = chain[i]
                    while c >= 0:
                        v = self.bvals[c]
                        if (v >> shift) == hdr:
                            d = simdup_popcount64(v ^ x)
                            if d <= h and not (paired and _partner_fails(
                                    pk, pk_rows, self.bids[c], d, x2, plim)):
                                if res_push(res, qi, self.bids[c], d) < 0:
                                    return -2
                                found += 1
                                if first:
                                    return found
                        c = self.bnext[c]
            cur = nxt
            nb = nb_next
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
        cdef uint64_t vmask = self.vmask
        cdef int lob = self.lob, hd
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
                    hd = simdup_popcount64(hq[g][k] ^ (x >> shift)) if lob else 0
                    for j in range(lo[g][k], hi[g][k]):
                        d = simdup_popcount64((vals[j] ^ x) & vmask) + hd
                        if d <= h:
                            if res_push(res, q0 + g, _main_id(
                                    vals, self.idhi, self.idw, lob, j), d) < 0:
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

    def _set_sketches(self, const uint8_t[:, ::1] sketches, Py_ssize_t rows, int needed):
        """Verify candidates against ``sketches[id]`` (the first ``rows`` rows):
        ids are rows of that array."""
        if sketches.shape[1] != SIMDUP_SKETCH_BINS or rows > sketches.shape[0]:
            raise ValueError("bad sketch array")
        self._vsk_arr = sketches
        self.vsk = &sketches[0, 0] if sketches.shape[0] else NULL
        self.vsk_rows = rows
        self.vneed = needed

    def _query_verified(self, value, W, const uint8_t[::1] sketch, long own_bucket_only=0,
                        value2=0):
        """PSM-A of one value keeping only the candidates whose sketch agrees
        in the needed bins: ``(ids int64[k], distances int8[k])``.
        ``own_bucket_only``: probe the value's own bucket alone. ``value2``:
        the query's partner key (paired tables)."""
        cdef uint64_t x = value
        cdef uint64_t x2 = value2
        cdef const double *wp = NULL
        cdef const double[::1] wv
        if sketch.shape[0] != SIMDUP_SKETCH_BINS:
            raise ValueError(f"a sketch is {SIMDUP_SKETCH_BINS} bytes")
        if W is not None:
            wv = _check_W1(W)
            if wv.shape[0] != 64:
                raise ValueError(f"W must have shape (64,), got ({wv.shape[0]},)")
            wp = &wv[0]
        cdef long maxk = 1 if own_bucket_only else self._probes()
        cdef resvec res
        res.n = 0; res.cap = 0; res.q = NULL; res.ids = NULL; res.d = NULL
        cdef long heapcap = self.distance + maxk + 2
        cdef vosh_node *heap = <vosh_node *>malloc(heapcap * sizeof(vosh_node))
        cdef int rc
        if heap == NULL:
            raise MemoryError()
        cdef Py_ssize_t i, kept = 0
        cdef const uint8_t *qsk = &sketch[0]
        try:
            with nogil:
                rc = self._search(x, wp, False, maxk, 0, &res, heap, heapcap, x2)
                if rc >= 0:
                    for i in range(res.n):
                        if _candidate_agree(self, &res, i, qsk) >= self.vneed:
                            res.ids[kept] = res.ids[i]
                            res.d[kept] = res.d[i]
                            kept += 1
            if rc == -1:
                raise ValueError("W must be finite (no NaN or infinity)")
            if rc == -2:
                raise MemoryError()
            ids = np.empty(kept, dtype=np.int64)
            dist = np.empty(kept, dtype=np.int8)
            for i in range(kept):
                ids[i] = res.ids[i]
                dist[i] = res.d[i]
            return ids, dist
        finally:
            free(heap)
            res_free(&res)

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


cdef inline void _put(uint64_t *vals, uint8_t *idhi, int idw, int lob, uint64_t mask,
                      uint32_t pos, uint64_t v, uint32_t id) noexcept nogil:
    """Write entry ``pos`` of a main table in its layout (``_main_id``'s)."""
    cdef uint32_t hi = id >> lob
    if lob:
        v = (v & mask) | (<uint64_t>id << (64 - lob))
    vals[pos] = v
    if idw == 4:
        (<uint32_t *>idhi)[pos] = hi
    elif idw == 2:
        (<uint16_t *>idhi)[pos] = <uint16_t>hi
    elif idw == 1:
        idhi[pos] = <uint8_t>hi


def _counting_sort(PSMCore table, parts_v, parts_i, int t, int lob, int idw,
                   uint64_t[::1] vals, uint8_t[::1] idhi, uint32_t[::1] offsets):
    """Stable counting sort by t-bit header of ``table``'s main entries then
    the parts' (whole keys, uint32 ids), written with ``lob`` id bits in the
    header and ``idw`` bytes of the rest per entry."""
    cdef int shift = 64 - t, oshift = 64 - table.t
    cdef uint64_t mask = ((<uint64_t>1 << (64 - lob)) - 1) if lob else ~(<uint64_t>0)
    cdef const uint64_t[::1] pv
    cdef const uint32_t[::1] pi
    cdef Py_ssize_t i, n
    cdef uint64_t b, nb = (<uint64_t>1) << t, ob, onb = (<uint64_t>1) << table.t, v
    cdef uint32_t pos, j
    cdef uint8_t *hp = &idhi[0] if idhi.shape[0] else NULL
    # the old main table, read in its own layout
    cdef const uint64_t *ovals = table.vals
    cdef const uint8_t *oidhi = table.idhi
    cdef const uint32_t *ooff = table.off
    cdef uint64_t omask = table.vmask
    cdef int oidw = table.idw, olob = table.lob
    offsets[:] = 0
    with nogil:
        if table.n_main:
            for ob in range(onb):
                for j in range(ooff[ob], ooff[ob + 1]):
                    v = (ob << oshift) | (ovals[j] & omask)
                    offsets[(v >> shift) + 1] += 1
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
    with nogil:
        if table.n_main:
            for ob in range(onb):
                for j in range(ooff[ob], ooff[ob + 1]):
                    v = (ob << oshift) | (ovals[j] & omask)
                    b = v >> shift
                    pos = cur[b]
                    cur[b] = pos + 1
                    _put(&vals[0], hp, idw, lob, mask, pos, v,
                         _main_id(ovals, oidhi, oidw, olob, j))
    for k in range(len(parts_v)):
        pv = parts_v[k]
        pi = parts_i[k]
        n = pv.shape[0]
        with nogil:
            for i in range(n):
                b = pv[i] >> shift
                pos = cur[b]
                cur[b] = pos + 1
                _put(&vals[0], hp, idw, lob, mask, pos, pv[i], pi[i])
