# Helpers of the walk: growable buffers, the nodes iterwalk visits, visible-character counts.

cdef struct TagSlot:
    const char *name        # libxml2 interns names per document: key by pointer
    int flags
    Py_ssize_t tag_index    # into the list of tag strings (for want_tags)


cdef struct Bytes:
    char *data
    Py_ssize_t size
    Py_ssize_t cap


cdef struct Ints:
    Py_ssize_t *data
    Py_ssize_t size
    Py_ssize_t cap


cdef int _bytes_add(Bytes *b, const char *src, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef char *grown
    if b.size + n > b.cap:
        cap = max(2 * b.cap, b.size + n, 4096)
        grown = <char *>PyMem_Realloc(b.data, cap)
        if grown is NULL:
            raise MemoryError()
        b.data = grown
        b.cap = cap
    memcpy(b.data + b.size, src, n)
    b.size += n
    return 0


cdef int _ints_push(Ints *a, Py_ssize_t value) except -1:
    cdef Py_ssize_t cap
    cdef Py_ssize_t *grown
    if a.size == a.cap:
        cap = max(2 * a.cap, 64)
        grown = <Py_ssize_t *>PyMem_Realloc(a.data, cap * sizeof(Py_ssize_t))
        if grown is NULL:
            raise MemoryError()
        a.data = grown
        a.cap = cap
    a.data[a.size] = value
    a.size += 1
    return 0


cdef list _ints_list(Ints *a):
    return [a.data[i] for i in range(a.size)]


cdef inline bint _is_walked(xmlNode *node) noexcept:
    # the nodes iterwalk visits: elements, comments, PIs, entity references
    return (node.type == tree.XML_ELEMENT_NODE or node.type == tree.XML_COMMENT_NODE
            or node.type == tree.XML_PI_NODE or node.type == tree.XML_ENTITY_REF_NODE)


cdef inline xmlNode *_walked_from(xmlNode *node) noexcept:
    while node is not NULL and not _is_walked(node):
        node = node.next
    return node


cdef Py_ssize_t _utf8_visible(const char *s, Py_ssize_t n) noexcept:
    """Code points of valid UTF-8 that are not white space (``visible_len``)."""
    cdef Py_ssize_t points
    return _utf8_visible_points(s, n, &points)


cdef uint64_t _HIGH_BITS = 0x8080808080808080ULL
cdef uint64_t _ONES = 0x0101010101010101ULL


cdef inline uint64_t _at_least(uint64_t w, uint64_t b) noexcept nogil:
    """The high bit of each byte of ``w`` (all under 0x80) that is >= ``b`` (< 0x80)."""
    return ((w | _HIGH_BITS) - b * _ONES) & _HIGH_BITS


cdef inline int _ascii_spaces(uint64_t w) noexcept nogil:
    """White space (str.isspace: 0x09-0x0D, 0x1C-0x20) among the eight ASCII bytes of ``w``."""
    return simdup_popcount64((_at_least(w, 0x09) & ~_at_least(w, 0x0E))
                             | (_at_least(w, 0x1C) & ~_at_least(w, 0x21)))


cdef Py_ssize_t _utf8_visible_points(const char *s, Py_ssize_t n,
                                     Py_ssize_t *points) noexcept:
    """``_utf8_visible``, and the number of code points in ``points``."""
    cdef Py_ssize_t i = 0, count = 0, total = 0
    cdef unsigned char c
    cdef Py_UCS4 cp
    cdef uint64_t w
    while i < n:
        if i + 8 <= n:
            memcpy(&w, s + i, 8)
            if not w & _HIGH_BITS:          # eight ASCII characters at once
                count += 8 - _ascii_spaces(w)
                total += 8
                i += 8
                continue
        c = <unsigned char>s[i]
        total += 1
        if c < 0x80:
            count += not _SPACE_LATIN1[c]
            i += 1
            continue
        elif c < 0xE0:
            cp = ((c & 0x1F) << 6) | (<unsigned char>s[i + 1] & 0x3F) if i + 1 < n else 0xFFFD
            i += 2
        elif c < 0xF0:
            cp = (((c & 0x0F) << 12) | ((<unsigned char>s[i + 1] & 0x3F) << 6)
                  | (<unsigned char>s[i + 2] & 0x3F)) if i + 2 < n else 0xFFFD
            i += 3
        else:
            cp = 0xFFFD     # 4-byte sequences are never white space
            i += 4
        count += not Py_UNICODE_ISSPACE(cp)
    points[0] = total
    return count


cdef Py_ssize_t _visible_len(str text):
    """``visible_len(text)``: characters that are not white space."""
    cdef int kind = PyUnicode_KIND(text)
    cdef void *data = PyUnicode_DATA(text)
    cdef Py_ssize_t i, n = PyUnicode_GET_LENGTH(text), count = 0
    cdef const unsigned char *latin1
    if kind == 1:           # Latin-1 storage (most pages): a byte test per character
        latin1 = <const unsigned char *>data
        for i in range(n):
            count += not _SPACE_LATIN1[latin1[i]]
        return count
    for i in range(n):
        count += not Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, i))
    return count


# Py_UNICODE_ISSPACE for the code points 0..255
cdef bint _SPACE_LATIN1[256]
for _c in range(256):
    _SPACE_LATIN1[_c] = chr(_c).isspace()


def utf8_visible_points(const unsigned char[::1] data):
    """``(visible, points)`` of valid UTF-8 ``data``: code points that are not
    white space, and all code points (what the one-pass main text counts)."""
    cdef Py_ssize_t points = 0
    cdef Py_ssize_t visible = _utf8_visible_points(<const char *>&data[0], data.shape[0],
                                                   &points) if data.shape[0] else 0
    return visible, points
