# One page's best verified candidate in two paired tables, in one call.
#
# A crawl checks one page at a time between parsing others, so every
# NumPy call and every typed memoryview a look-up goes through runs with
# cold caches; this path takes plain values and allocates nothing the
# caller sees but the result.

from cpython.buffer cimport PyBUF_ANY_CONTIGUOUS, PyBUF_FORMAT, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from scrapy_simdup._ext.bestmatch cimport better_match


cdef inline bint _is_f64x64(const Py_buffer *view) noexcept:
    cdef const char *f = view.format
    if view.ndim != 1 or view.itemsize != 8 or view.len != 64 * 8 or f == NULL:
        return False
    if f[0] == c'<' or f[0] == c'=' or f[0] == c'@':
        f += 1
    return f[0] == c'd' and f[1] == 0


cdef int _get_W(object W, Py_buffer *view, const double **out) except -1:
    """``out``: the 64 weights of ``W`` (NULL for None). Returns 1 when
    ``view`` holds a buffer to release with PyBuffer_Release, else 0."""
    out[0] = NULL
    if W is None:
        return 0
    try:
        PyObject_GetBuffer(W, view, PyBUF_ANY_CONTIGUOUS | PyBUF_FORMAT)
    except (TypeError, BufferError):
        pass
    else:
        if _is_f64x64(view):
            out[0] = <const double *>view.buf
            return 1
        PyBuffer_Release(view)
    # not a float64[64] buffer: the general path's conversion and errors
    a = _check_W1(W)
    if a.shape[0] != 64:
        raise ValueError(f"W must have shape (64,), got ({a.shape[0]},)")
    PyObject_GetBuffer(a, view, PyBUF_ANY_CONTIGUOUS)
    out[0] = <const double *>view.buf
    return 1


cdef inline int _exact_in(PSMCore t, uint64_t x, uint64_t partner, const uint8_t *q,
                          int64_t exclude, resvec *res, vosh_node *heap, long heapcap,
                          int64_t *best_row) noexcept nogil:
    """The earliest exact copy (distance 0, every bin equal) in the own
    bucket of ``x``, into ``best_row`` when earlier; ``_search``'s code."""
    cdef Py_ssize_t i
    cdef int64_t row
    res.n = 0
    cdef int rc = t._search(x, NULL, False, 1, 0, res, heap, heapcap, partner)
    for i in range(res.n if rc >= 0 else 0):
        row = res.ids[i]
        if res.d[i] == 0 and row != exclude and 0 <= row < t.vsk_rows \
                and (best_row[0] < 0 or row < best_row[0]) and simdup_sketch_matches(
                    q, t.vsk + SIMDUP_SKETCH_BINS * row) == SIMDUP_SKETCH_BINS:
            best_row[0] = row
    return rc


cdef inline int _best_in(PSMCore t, uint64_t x, uint64_t partner, const double *W, long maxk,
                         const uint8_t *q, int64_t exclude, resvec *res, vosh_node *heap,
                         long heapcap, int *best_agree, int *best_dist,
                         int64_t *best_row) noexcept nogil:
    """The best verified candidate of a full search of ``x``, into ``best_*``
    when better; ``_search``'s code."""
    cdef Py_ssize_t i
    cdef int64_t row
    cdef int agree
    res.n = 0
    cdef int rc = t._search(x, W, False, maxk, 0, res, heap, heapcap, partner)
    if rc < 0:
        return rc
    for i in range(res.n):
        row = res.ids[i]
        agree = _candidate_agree(t, res, i, q)
        if row != exclude and agree >= t.vneed and better_match(
                agree, res.d[i], row, best_agree[0], best_dist[0], best_row[0]):
            best_agree[0], best_dist[0], best_row[0] = agree, res.d[i], row
    return rc


def best_verified(PSMCore t0, PSMCore t1, uint64_t value, uint64_t value2, bytes sketch,
                  W=None, W2=None, int64_t exclude=-1):
    """The best verified candidate of one page in two paired tables with
    sketches (``t0`` searched with ``value``, ``t1`` with ``value2``), picked
    as ``VerifiedIndex.query`` picks it: ``(row, agreeing bins, distance)``,
    or None. An exact copy (a key at distance 0, every bin equal) in either
    table's own bucket is returned without a search. ``exclude``: a row left
    out."""
    if sketch is None or PyBytes_GET_SIZE(sketch) != SIMDUP_SKETCH_BINS:
        raise ValueError(f"a sketch is {SIMDUP_SKETCH_BINS} bytes")
    if not (t0.paired and t1.paired):
        raise ValueError("best_verified needs paired tables")
    cdef const uint8_t *q = <const uint8_t *>PyBytes_AS_STRING(sketch)
    cdef Py_buffer wview, wview2
    cdef const double *wp = NULL
    cdef const double *wp2 = NULL
    cdef long maxk0 = t0._probes(), maxk1 = t1._probes()
    cdef long heapcap = max(t0.distance + maxk0, t1.distance + maxk1) + 2
    cdef vosh_node stack_heap[STACK_HEAP]
    cdef vosh_node *heap = stack_heap
    cdef resvec res
    res.n = 0; res.cap = 0; res.q = NULL; res.ids = NULL; res.d = NULL
    cdef int rc = 0, best_agree = -1, best_dist = 0
    cdef int64_t best_row = -1
    cdef int held = _get_W(W, &wview, &wp), held2 = 0
    try:
        held2 = _get_W(W2, &wview2, &wp2)
        if heapcap > STACK_HEAP:
            heap = <vosh_node *>malloc(heapcap * sizeof(vosh_node))
            if heap == NULL:
                raise MemoryError()
        with nogil:
            rc = _exact_in(t0, value, value2, q, exclude, &res, heap, heapcap, &best_row)
            if rc >= 0:
                rc = _exact_in(t1, value2, value, q, exclude, &res, heap, heapcap, &best_row)
            if rc >= 0 and best_row >= 0:
                best_agree = SIMDUP_SKETCH_BINS
            elif rc >= 0:
                rc = _best_in(t0, value, value2, wp, maxk0, q, exclude, &res, heap, heapcap,
                              &best_agree, &best_dist, &best_row)
                if rc >= 0:
                    rc = _best_in(t1, value2, value, wp2, maxk1, q, exclude, &res, heap,
                                  heapcap, &best_agree, &best_dist, &best_row)
        if rc == -1:
            raise ValueError("W must be finite (no NaN or infinity)")
        if rc == -2:
            raise MemoryError()
        if best_row < 0:
            return None
        return best_row, best_agree, best_dist
    finally:
        if heap != stack_heap and heap != NULL:
            free(heap)
        res_free(&res)
        if held:
            PyBuffer_Release(&wview)
        if held2:
            PyBuffer_Release(&wview2)
