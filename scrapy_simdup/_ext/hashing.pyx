# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled fingerprint core: feature hashing, weighted simhash, Hamming distance.

No Scrapy here and no argument checking beyond what keeps C memory-safe: the
Python facade (``fingerprint/simhash.py``) validates user input and gives the errors.

Conventions (DESIGN.md): bit ``j`` of a fingerprint is ``(value >> j) & 1`` and
corresponds to ``W[j]``; it is set iff ``W[j] >= 0``. A feature's hash is the
first word of MurmurHash3_x64_128 of its UTF-8 bytes with seed 0.
"""
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memset
from cpython.mem cimport PyMem_Free, PyMem_Realloc
from cpython.unicode cimport PyUnicode_AsUTF8AndSize
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.ref cimport PyObject

from scrapy_simdup._ext.cbuiltins cimport __builtin_prefetch
from scrapy_simdup._ext.murmur3 cimport simdup_fmix64, simdup_murmur3_64
from scrapy_simdup._ext.popcount cimport simdup_popcount64
from scrapy_simdup._ext.sketch cimport SIMDUP_SKETCH_BINS, simdup_sketch, simdup_sketch_matches
# Compact ASCII strings are their own UTF-8: hash the buffer in place.
from scrapy_simdup._ext.pyapi cimport (PyBytes_Check, PyUnicode_Check, PyUnicode_DATA,
                                       PyUnicode_GET_LENGTH, PyUnicode_IS_COMPACT_ASCII)
# The weighted accumulation runs in _simhash_kernel.h (scalar, AVX2 or
# AVX-512F, picked at run time; bit-identical W).
from scrapy_simdup._ext.simhash_kernel cimport (simdup_accumulate, simdup_simhash_select,
                                                simdup_simhash_tables)

import numpy as np

# SPREAD_TABLE[b] puts bit k of byte b into byte k of a 64-bit word, so one
# addition bumps 8 byte-wide counters at once (unit-weight fast path).
cdef uint64_t SPREAD_TABLE[256]


cdef void _init_tables() noexcept:
    cdef int b, k
    cdef uint64_t spread
    for b in range(256):
        spread = 0
        for k in range(8):
            if (b >> k) & 1:
                spread |= (<uint64_t>1) << (8 * k)
        SPREAD_TABLE[b] = spread
    simdup_simhash_tables()
    simdup_simhash_select(-1)


_init_tables()


def simhash_kernel(int level=-1):
    """Pick the weighted simhash kernel: 2 AVX-512F, 1 AVX2, 0 scalar, -1 the
    best this CPU has. Returns the level in use (a level the CPU lacks falls
    back to the best one below it). For tests and benchmarks; every kernel
    gives the same ``W``, bit for bit."""
    return simdup_simhash_select(level)


cdef inline uint64_t _hash_object(object feature) except? 0:
    """Hash one str or bytes feature (the caller has checked its type)."""
    cdef const char *data
    cdef Py_ssize_t size
    if PyUnicode_Check(feature):
        if PyUnicode_IS_COMPACT_ASCII(feature):
            return simdup_murmur3_64(PyUnicode_DATA(feature), PyUnicode_GET_LENGTH(feature), 0)
        data = PyUnicode_AsUTF8AndSize(feature, &size)
    else:
        data = PyBytes_AS_STRING(feature)
        size = PyBytes_GET_SIZE(feature)
    return simdup_murmur3_64(data, size, 0)


def hash64(feature):
    """64-bit hash of one ``str`` (UTF-8) or ``bytes`` feature."""
    if not isinstance(feature, (str, bytes)):
        raise TypeError(f"a feature must be str or bytes, not {type(feature).__name__}")
    return _hash_object(feature)


cdef int _hash_list_into(list features, Py_ssize_t n, uint64_t *out, Py_ssize_t doc) except -1:
    """Hash ``features[:n]`` (n <= its length) into ``out``; TypeError naming
    the first element that is neither str nor bytes (``features[i]``, or
    ``docs[doc][i]`` when ``doc >= 0``)."""
    cdef Py_ssize_t i
    cdef object feature
    cdef Py_ssize_t ahead = 8   # prefetch distance: strings are scattered in memory
    for i in range(n):
        if i + ahead < n:
            __builtin_prefetch(PyList_GET_ITEM(features, i + ahead))
        feature = <object>PyList_GET_ITEM(features, i)
        if not (PyUnicode_Check(feature) or PyBytes_Check(feature)):
            name = f"docs[{doc}]" if doc >= 0 else "features"
            raise TypeError(
                f"{name}[{i}] must be str or bytes, not {type(feature).__name__}")
        out[i] = _hash_object(feature)
    return 0


cpdef hash_features(list features):
    """Hash a list of str/bytes features into a uint64 array.

    Raises TypeError naming the first element that is neither str nor bytes.
    """
    cdef Py_ssize_t n = len(features)
    out = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] view = out
    if n:
        _hash_list_into(features, n, &view[0], -1)
    return out


cdef void _accumulate_unit(const uint64_t *hashes, Py_ssize_t n, double *W) noexcept nogil:
    """W[j] = (#hashes with bit j set) - (#hashes without it)."""
    cdef uint64_t lanes[8]      # 8 x 8 byte-wide counters, flushed before overflow
    cdef int64_t ones[64]
    cdef Py_ssize_t i, start = 0, stop
    cdef uint64_t h
    cdef int b, k
    memset(ones, 0, sizeof(ones))
    while start < n:
        stop = start + 255 if n - start > 255 else n
        memset(lanes, 0, sizeof(lanes))
        for i in range(start, stop):
            h = hashes[i]
            lanes[0] += SPREAD_TABLE[h & 0xFF]
            lanes[1] += SPREAD_TABLE[(h >> 8) & 0xFF]
            lanes[2] += SPREAD_TABLE[(h >> 16) & 0xFF]
            lanes[3] += SPREAD_TABLE[(h >> 24) & 0xFF]
            lanes[4] += SPREAD_TABLE[(h >> 32) & 0xFF]
            lanes[5] += SPREAD_TABLE[(h >> 40) & 0xFF]
            lanes[6] += SPREAD_TABLE[(h >> 48) & 0xFF]
            lanes[7] += SPREAD_TABLE[h >> 56]
        for b in range(8):
            for k in range(8):
                ones[8 * b + k] += (lanes[b] >> (8 * k)) & 0xFF
        start = stop
    for k in range(64):
        W[k] = <double>(2 * ones[k] - n)


cdef void _accumulate_weighted(const uint64_t *hashes, const double *weights,
                               Py_ssize_t n, double *W) noexcept nogil:
    """W[j] = sum_i w_i * (+1 if bit j of hash_i else -1)."""
    simdup_accumulate(hashes, weights, n, W)


cdef inline uint64_t _value_from_weights(const double *W) noexcept nogil:
    cdef uint64_t value = 0
    cdef int k
    for k in range(64):
        if W[k] >= 0.0:
            value |= (<uint64_t>1) << k
    return value


cdef uint64_t _simhash_into(const uint64_t *hashes, const double *weights,
                            Py_ssize_t n, double *W) noexcept nogil:
    if weights == NULL:
        _accumulate_unit(hashes, n, W)
    else:
        _accumulate_weighted(hashes, weights, n, W)
    return _value_from_weights(W)


def simhash_hashes(const uint64_t[::1] hashes, const double[::1] weights=None):
    """Simhash of already hashed features: returns ``(value, W)``.

    ``weights`` (same length as ``hashes``) or None for weight 1 each.
    """
    cdef Py_ssize_t n = hashes.shape[0]
    if weights is not None and weights.shape[0] != n:
        raise ValueError(f"weights has {weights.shape[0]} entries for {n} features")
    W = np.empty(64, dtype=np.float64)
    cdef double[::1] w_view = W
    cdef uint64_t value
    cdef const double *wptr = NULL
    cdef const uint64_t *hptr = &hashes[0] if n > 0 else NULL
    if weights is not None and n > 0:
        wptr = &weights[0]
    with nogil:
        if n == 0:
            for k in range(64):
                w_view[k] = 0.0
            value = _value_from_weights(&w_view[0])
        elif wptr == NULL:
            value = _simhash_into(hptr, NULL, n, &w_view[0])
        else:
            value = _simhash_into(hptr, wptr, n, &w_view[0])
    return value, W


cdef int _remixed_into(const uint64_t *hashes, const double *weights, Py_ssize_t n,
                       uint64_t xor, double *W, uint64_t *value) noexcept nogil:
    """``_simhash_into`` of ``fmix64(hashes ^ xor)`` (``n`` > 0) into ``W`` and
    ``value``: 0, or -1 when out of memory."""
    cdef uint64_t *mixed = <uint64_t *>malloc(n * sizeof(uint64_t))
    cdef Py_ssize_t i
    if mixed == NULL:
        return -1
    for i in range(n):
        mixed[i] = simdup_fmix64(hashes[i] ^ xor)
    value[0] = _simhash_into(mixed, weights, n, W)
    free(mixed)
    return 0


def simhash_remixed(const uint64_t[::1] hashes, const double[::1] weights, uint64_t xor):
    """``simhash_hashes(fmix64(hashes ^ xor), weights)`` in one pass, without
    the remixed array: the second key (``fingerprint.sketch.second_key``)."""
    cdef Py_ssize_t n = hashes.shape[0]
    if weights is not None and weights.shape[0] != n:
        raise ValueError(f"weights has {weights.shape[0]} entries for {n} features")
    if n == 0:
        return simhash_hashes(hashes, weights)
    W = np.empty(64, dtype=np.float64)
    cdef double[::1] w_view = W
    cdef const double *wptr = &weights[0] if weights is not None else NULL
    cdef uint64_t value
    cdef int rc
    with nogil:
        rc = _remixed_into(&hashes[0], wptr, n, xor, &w_view[0], &value)
    if rc < 0:
        raise MemoryError()
    return value, W


def page_keys(const uint64_t[::1] hashes, const double[::1] weights, uint64_t xor):
    """A page's two keys and its sketch from its distinct feature hashes in
    one call: ``(value, W, value2, W2, sketch)``, as ``simhash_hashes``,
    ``simhash_remixed(..., xor)`` and ``sketch_hashes`` give them."""
    cdef Py_ssize_t n = hashes.shape[0]
    if n == 0:
        return (*simhash_hashes(hashes, weights), *simhash_remixed(hashes, weights, xor),
                sketch_hashes(hashes))
    if weights is not None and weights.shape[0] != n:
        raise ValueError(f"weights has {weights.shape[0]} entries for {n} features")
    W = np.empty(64, dtype=np.float64)
    W2 = np.empty(64, dtype=np.float64)
    cdef double[::1] w1 = W
    cdef double[::1] w2 = W2
    cdef bytes sketch = bytes(SIMDUP_SKETCH_BINS)
    cdef uint8_t *dest = <uint8_t *>PyBytes_AS_STRING(sketch)
    cdef const double *wptr = &weights[0] if weights is not None else NULL
    cdef uint64_t value, value2
    cdef int rc
    with nogil:
        value = _simhash_into(&hashes[0], wptr, n, &w1[0])
        rc = _remixed_into(&hashes[0], wptr, n, xor, &w2[0], &value2)
        simdup_sketch(&hashes[0], n, dest)
    if rc < 0:
        raise MemoryError()
    return value, W, value2, W2, sketch


def simhash_hashes_many(const uint64_t[::1] hashes, const int64_t[::1] offsets,
                        const double[::1] weights=None):
    """Simhash of many documents whose hashes are concatenated.

    Document ``d`` owns ``hashes[offsets[d]:offsets[d + 1]]``; ``offsets`` has
    ``n_docs + 1`` non-decreasing entries starting at 0 and ending at
    ``len(hashes)``. Returns ``(values uint64[n], W float64[n, 64])``.
    """
    cdef Py_ssize_t n_docs = offsets.shape[0] - 1, d
    cdef Py_ssize_t total = hashes.shape[0]
    if n_docs < 0:
        raise ValueError("offsets must have at least one entry")
    if offsets[0] != 0 or offsets[n_docs] != total:
        raise ValueError("offsets must start at 0 and end at len(hashes)")
    for d in range(n_docs):
        if offsets[d + 1] < offsets[d]:
            raise ValueError("offsets must be non-decreasing")
    if weights is not None and weights.shape[0] != total:
        raise ValueError(f"weights has {weights.shape[0]} entries for {total} features")
    values = np.empty(n_docs, dtype=np.uint64)
    W = np.zeros((n_docs, 64), dtype=np.float64)
    cdef uint64_t[::1] v_view = values
    cdef double[:, ::1] w_view = W
    cdef const uint64_t *hptr = &hashes[0] if total > 0 else NULL
    cdef const double *wptr = NULL
    if weights is not None and total > 0:
        wptr = &weights[0]
    cdef Py_ssize_t lo, hi
    with nogil:
        for d in range(n_docs):
            lo = offsets[d]
            hi = offsets[d + 1]
            if hi == lo:
                v_view[d] = _value_from_weights(&w_view[d, 0])
            elif wptr == NULL:
                v_view[d] = _simhash_into(hptr + lo, NULL, hi - lo, &w_view[d, 0])
            else:
                v_view[d] = _simhash_into(hptr + lo, wptr + lo, hi - lo, &w_view[d, 0])
    return values, W


def simhash_docs(list docs, weights, check_features, check_weights):
    """``simhash_many``'s core: ``(values uint64[n], W float64[n, 64])`` of a
    list of documents, each hashed into one reused buffer and accumulated
    while its hashes are in cache (no list or array of every feature is built).

    The caller owns ``docs`` (no other code may resize it). A document that is
    not a list goes through ``check_features(doc, "docs[d]")`` (the facade's
    checks and errors) first. ``weights``: None, or a list with one entry per
    document, each turned into float64 by ``check_weights(w, n, "weights[d]")``.
    Each document gives the same ``value`` and ``W``, bit for bit, as
    ``simhash_hashes(hash_features(doc), w)``.
    """
    cdef Py_ssize_t n_docs = len(docs), d, n, capacity = 0
    if weights is not None and len(weights) != n_docs:
        raise ValueError(f"weights has {len(weights)} entries for {n_docs} docs")
    values = np.empty(n_docs, dtype=np.uint64)
    W = np.empty((n_docs, 64), dtype=np.float64)
    cdef uint64_t[::1] v_view = values
    cdef double[:, ::1] w_view = W
    cdef const double[::1] doc_weights
    cdef uint64_t *hashes = NULL
    cdef uint64_t *grown
    cdef list doc
    cdef int k
    try:
        for d in range(n_docs):
            item = docs[d]
            doc = item if type(item) is list else check_features(item, f"docs[{d}]")
            if weights is not None:
                # may run user code (array conversion): the length is read after it
                doc_weights = check_weights(weights[d], len(doc), f"weights[{d}]")
            n = PyList_GET_SIZE(doc)
            if weights is not None and doc_weights.shape[0] != n:
                raise ValueError(f"weights[{d}] has {doc_weights.shape[0]} entries "
                                 f"for {n} features")
            if n == 0:
                for k in range(64):
                    w_view[d, k] = 0.0
                v_view[d] = _value_from_weights(&w_view[d, 0])
                continue
            if n > capacity:
                grown = <uint64_t *>PyMem_Realloc(hashes, n * sizeof(uint64_t))
                if grown is NULL:
                    raise MemoryError()
                hashes, capacity = grown, n
            _hash_list_into(doc, n, hashes, d)
            if weights is None:
                v_view[d] = _simhash_into(hashes, NULL, n, &w_view[d, 0])
            else:
                v_view[d] = _simhash_into(hashes, &doc_weights[0], n, &w_view[d, 0])
    finally:
        PyMem_Free(hashes)
    return values, W


cpdef int hamming(uint64_t a, uint64_t b) noexcept:
    """Number of differing bits between two 64-bit fingerprints."""
    return simdup_popcount64(a ^ b)


def hamming_many(const uint64_t[::1] values, uint64_t query):
    """Hamming distance of every element of ``values`` to ``query`` (uint8 array)."""
    cdef Py_ssize_t n = values.shape[0], i
    out = np.empty(n, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    with nogil:
        for i in range(n):
            o[i] = <uint8_t>simdup_popcount64(values[i] ^ query)
    return out


def hamming_pairs(const uint64_t[::1] a, const uint64_t[::1] b):
    """Element-wise Hamming distance of two equal-length uint64 arrays."""
    cdef Py_ssize_t n = a.shape[0], i
    if b.shape[0] != n:
        raise ValueError(f"arrays differ in length: {n} and {b.shape[0]}")
    out = np.empty(n, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    with nogil:
        for i in range(n):
            o[i] = <uint8_t>simdup_popcount64(a[i] ^ b[i])
    return out


# ------------------------------------------------------------ verification sketch

def sketch_hashes(const uint64_t[::1] hashes):
    """The verification sketch (``_sketch.h``) of a page's feature hashes: bytes."""
    cdef bytes out = bytes(SIMDUP_SKETCH_BINS)
    cdef Py_ssize_t n = hashes.shape[0]
    cdef uint8_t *dest = <uint8_t *>PyBytes_AS_STRING(out)
    with nogil:
        simdup_sketch(&hashes[0] if n > 0 else NULL, n, dest)
    return out


def sketch_matches(const uint8_t[::1] query, const uint8_t[:, ::1] stored, const int64_t[::1] rows):
    """Bins of ``query`` that each ``stored[rows[i]]`` agrees with: uint8[len(rows)].

    The caller guarantees ``0 <= rows[i] < len(stored)``."""
    if query.shape[0] != SIMDUP_SKETCH_BINS or stored.shape[1] != SIMDUP_SKETCH_BINS:
        raise ValueError(f"sketches must be {SIMDUP_SKETCH_BINS} bytes")
    cdef Py_ssize_t n = rows.shape[0], i
    out = np.empty(n, dtype=np.uint8)
    cdef uint8_t[::1] o = out
    if n:
        with nogil:
            for i in range(n):
                o[i] = <uint8_t>simdup_sketch_matches(&query[0], &stored[rows[i], 0])
    return out


# ------------------------------------------------------------ the shared index's log

def hash_tails(list blobs, Py_ssize_t offset):
    """64-bit hash (as :func:`hash64`) of ``blob[offset:]`` for each bytes
    ``blob`` of ``blobs``: uint64 array (an empty tail hashes as b"")."""
    cdef Py_ssize_t n = len(blobs), i, size
    out = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef object blob
    if offset < 0:
        raise ValueError("offset must be >= 0")
    for i in range(n):
        blob = <object>PyList_GET_ITEM(blobs, i)
        if not PyBytes_Check(blob):
            raise TypeError(f"blobs[{i}] must be bytes, not {type(blob).__name__}")
        size = PyBytes_GET_SIZE(blob)
        if size < offset:
            raise ValueError(f"blobs[{i}] is {size} bytes, shorter than {offset}")
        o[i] = simdup_murmur3_64(PyBytes_AS_STRING(blob) + offset, size - offset, 0)
    return out


def gap_matches(const uint64_t[:, ::1] keys, const uint8_t[:, ::1] sketches, Py_ssize_t first, const int64_t[::1] starts,
                int distance, int needed, int pair_limit=128):
    """The best earlier page of each row ``first + i`` among rows
    ``starts[i] .. first + i - 1`` (``keys``: a row's two keys side by
    side), checked exactly: within ``distance`` of
    either key, the two distances adding up to at most ``pair_limit``, and at
    least ``needed`` equal sketch bins. Best: the most equal
    bins, then the smaller key distance, then the earlier row.

    Returns ``(rows, agree, dist)``: int64 (-1: none), uint8, uint8 arrays of
    ``len(starts)``. A start below 0 counts from 0; ``starts[i] < 0`` is the
    caller's business (rows before 0 are gone)."""
    cdef Py_ssize_t k = starts.shape[0], i, r, row, lo
    if sketches.shape[1] != SIMDUP_SKETCH_BINS:
        raise ValueError(f"sketches must be {SIMDUP_SKETCH_BINS} bytes")
    if keys.shape[1] != 2:
        raise ValueError("keys must be two a row")
    if first < 0 or first + k > keys.shape[0] or first + k > sketches.shape[0]:
        raise ValueError("rows past the arrays")
    best_rows = np.full(k, -1, dtype=np.int64)
    best_agree = np.zeros(k, dtype=np.uint8)
    best_dist = np.zeros(k, dtype=np.uint8)
    cdef int64_t[::1] br = best_rows
    cdef uint8_t[::1] ba = best_agree
    cdef uint8_t[::1] bd = best_dist
    cdef int d, d2, agree
    with nogil:
        for i in range(k):
            row = first + i
            lo = starts[i] if starts[i] > 0 else 0
            for r in range(lo, row):
                d = simdup_popcount64(keys[r, 0] ^ keys[row, 0])
                d2 = simdup_popcount64(keys[r, 1] ^ keys[row, 1])
                if d + d2 > pair_limit:
                    continue
                if d2 < d:
                    d = d2
                if d > distance:
                    continue
                agree = simdup_sketch_matches(&sketches[row, 0], &sketches[r, 0])
                if agree < needed:
                    continue
                if br[i] < 0 or agree > ba[i] or (agree == ba[i] and d < bd[i]):
                    br[i] = r
                    ba[i] = <uint8_t>agree
                    bd[i] = <uint8_t>d
    return best_rows, best_agree, best_dist
