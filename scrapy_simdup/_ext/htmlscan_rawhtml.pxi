# Raw HTML bytes before libxml2 sees them: long_tag_bytes and tame_html.

cdef inline bint _name_is(const unsigned char *p, const unsigned char *end,
                          const char *name, Py_ssize_t k) noexcept nogil:
    """``p`` starts with ``name`` (lower case, ``k`` chars), any case, and
    the name ends there."""
    cdef Py_ssize_t j
    if end - p <= k:
        return False
    for j in range(k):
        if (p[j] | 0x20) != <unsigned char>name[j]:
            return False
    return not (p[k] == 45 or p[k] == 58 or p[k] == 95 or 48 <= p[k] <= 57
                or 97 <= (p[k] | 0x20) <= 122)


cdef inline bint _space(unsigned char c) noexcept nogil:
    return c == 32 or c == 9 or c == 10 or c == 12 or c == 13


cdef inline bint _is_comment(const unsigned char *lt, const unsigned char *end) noexcept nogil:
    return end - lt >= 4 and lt[1] == 33 and lt[2] == 45 and lt[3] == 45     # '<!--'


cdef const unsigned char *_comment_end(const unsigned char *lt,
                                       const unsigned char *end) noexcept nogil:
    """The '>' of the '-->' closing the comment at ``lt`` (NULL: it runs to the end)."""
    cdef const unsigned char *p = lt + 4
    cdef const unsigned char *gt
    while True:
        gt = <const unsigned char *>memchr(p, 62, end - p)
        if gt is NULL or (gt - 2 >= lt + 4 and (gt - 1)[0] == 45 and (gt - 2)[0] == 45):
            return gt
        p = gt + 1


cdef const char *_raw_text(const unsigned char *lt, const unsigned char *end,
                           Py_ssize_t *k) noexcept nogil:
    """"script" or "style" when the tag at ``lt`` starts such a raw-text body
    (its name's length in ``k``), else NULL."""
    if _name_is(lt + 1, end, "script", 6):
        k[0] = 6
        return "script"
    if _name_is(lt + 1, end, "style", 5):
        k[0] = 5
        return "style"
    return NULL


cdef const unsigned char *_raw_text_end(const unsigned char *p, const unsigned char *end,
                                        const char *raw, Py_ssize_t k) noexcept nogil:
    """The '<' of the end tag of the ``raw`` body starting at ``p`` (NULL: none)."""
    cdef const unsigned char *q
    while True:
        q = <const unsigned char *>memchr(p, 60, end - p)
        if q is NULL or (end - q > 1 and q[1] == 47 and _name_is(q + 2, end, raw, k)):
            return q
        p = q + 1


cdef const unsigned char *_tag_end(const unsigned char *lt,
                                   const unsigned char *end) noexcept nogil:
    """The '>' that ends the tag at ``lt`` (NULL: none): in a start tag a
    quoted attribute value (a quote after '=' and spaces) may hold '>'."""
    cdef const unsigned char *p = lt + 1
    cdef unsigned char c
    if p >= end or not 97 <= (p[0] | 0x20) <= 122:      # not a start tag
        return <const unsigned char *>memchr(lt, 62, end - lt)
    while p < end:
        c = p[0]
        if c == 62:                                     # '>'
            return p
        if c == 61:                                     # '=': a value may follow
            p += 1
            while p < end and (p[0] == 61 or _space(p[0])):
                p += 1
            if p == end:
                return NULL
            c = p[0]
            if c == 62:
                return p
            if c == 34 or c == 39:                      # a quoted value: skip it whole
                p = <const unsigned char *>memchr(p + 1, c, end - p - 1)
                if p is NULL:
                    return NULL
        p += 1
    return NULL


cdef Py_ssize_t _long_tags_1(const unsigned char *data, Py_ssize_t n,
                              Py_ssize_t min_len, Py_ssize_t limit) noexcept nogil:
    """Total length of the tags of at least ``min_len`` characters (from '<'
    to the '>' ending the tag), one byte per character, not counting script
    and style bodies and comments (their '<' are not tags). With ``limit``
    >= 0 the scan stops as soon as the total is known to be over ``limit``
    (it returns more than ``limit``) or known not to be (what is left to
    scan could not take it over: it returns at most ``limit``)."""
    cdef Py_ssize_t i = 0, total = 0, k = 0
    cdef const unsigned char *end = data + n
    cdef const unsigned char *lt
    cdef const unsigned char *gt
    cdef const char *raw
    while True:
        if limit >= 0 and (total > limit or total + (n - i) <= limit):
            return total
        lt = <const unsigned char *>memchr(data + i, 60, n - i)         # '<'
        if lt is NULL:
            return total
        if _is_comment(lt, end):
            gt = _comment_end(lt, end)
            if gt is NULL:
                return total         # the rest is a comment
            i = gt + 1 - data
            continue
        raw = _raw_text(lt, end, &k)
        gt = _tag_end(lt, end)
        if gt is NULL:
            return total + (end - lt if end - lt >= min_len else 0)
        if gt - lt >= min_len:
            total += gt - lt
        i = gt + 1 - data
        if raw is not NULL:          # skip to its end tag
            lt = _raw_text_end(data + i, end, raw, k)
            if lt is NULL:
                return total
            i = lt - data


def long_tag_bytes(html, Py_ssize_t min_length, limit=None) -> int:
    """The total length of the tags of ``html`` (str or bytes) that are at
    least ``min_length`` long, from ``<`` to the ``>`` ending the tag (not
    one in a quoted attribute value), outside script and style bodies and
    comments. libxml2 parses a tag's attributes in quadratic time, so the
    fingerprinter does not hand pages with much of it to libxml2 as they
    are. With ``limit``, only whether the total is over it is exact: the scan
    stops once the total is over, or once the rest could not take it over."""
    cdef Py_ssize_t cap = -1 if limit is None else max(<Py_ssize_t>limit, 0)
    cdef const unsigned char[::1] view
    if isinstance(html, str):
        if PyUnicode_KIND(html) == 1:        # Latin-1 storage: scan it in place
            return _long_tags_1(<const unsigned char *>PyUnicode_DATA(html),
                                PyUnicode_GET_LENGTH(html), min_length, cap)
        html = (<str>html).encode("utf-8", "surrogatepass")
    if not isinstance(html, bytes):
        raise TypeError(f"html must be str or bytes, not {type(html).__name__}")
    if not len(<bytes>html):
        return 0
    view = html
    return _long_tags_1(&view[0], view.shape[0], min_length, cap)


# ------------------------------------------------------------------ taming
# A page over the byte cap, or with too much in long tags, is rewritten before
# libxml2 sees it (see fingerprint.fingerprinter.strip_invisible_bulk): comments go,
# script and style bodies go (their tags stay), and start tags keep only the
# attributes the extraction reads or that declare the encoding. One pass, no
# backtracking: linear in the page whatever it holds.

cdef const char *_KEPT[7]
_KEPT[:] = [b"class", b"id", b"hidden", b"aria-hidden", b"charset", b"http-equiv", b"content"]
cdef Py_ssize_t _KEPT_LEN[7]
_KEPT_LEN[:] = [5, 2, 6, 11, 7, 10, 7]
#: a kept attribute value longer than this is written as ""
DEF LONG_VALUE = 1024


cdef bint _kept(const unsigned char *p, Py_ssize_t k) noexcept nogil:
    cdef int a
    cdef Py_ssize_t j
    for a in range(7):
        if _KEPT_LEN[a] != k:
            continue
        for j in range(k):
            if (p[j] | 0x20) != <unsigned char>_KEPT[a][j]:     # the names are lower case
                break
        else:
            return True
    return False


cdef inline void _put(unsigned char *out, Py_ssize_t *w, const void *p, Py_ssize_t k) noexcept nogil:
    memcpy(out + w[0], p, k)
    w[0] += k


cdef Py_ssize_t _tame_1(const unsigned char *data, Py_ssize_t n, unsigned char *out) noexcept nogil:
    """Write the tamed ``data`` to ``out`` (room for 2 n + 16); return its length."""
    cdef const unsigned char *end = data + n
    cdef const unsigned char *lt
    cdef const unsigned char *gt
    cdef const unsigned char *p
    cdef const unsigned char *q
    cdef const unsigned char *a0
    cdef const unsigned char *a1
    cdef const unsigned char *v0
    cdef const unsigned char *v1
    cdef const char *raw
    cdef Py_ssize_t i = 0, w = 0, k = 0
    cdef bint slash
    while i < n:
        lt = <const unsigned char *>memchr(data + i, 60, n - i)           # '<'
        if lt is NULL:
            _put(out, &w, data + i, n - i)
            break
        _put(out, &w, data + i, lt - (data + i))
        if _is_comment(lt, end):            # dropped
            gt = _comment_end(lt, end)
            if gt is NULL:
                break                       # the rest is a comment
            i = gt + 1 - data
            continue
        if end - lt < 2 or not 97 <= (lt[1] | 0x20) <= 122:                 # not a start tag
            if end - lt >= 2 and (lt[1] == 47 or lt[1] == 33 or lt[1] == 63):    # '</', '<!', '<?'
                gt = <const unsigned char *>memchr(lt, 62, end - lt)
                if gt is NULL:
                    _put(out, &w, lt, end - lt)
                    break
                _put(out, &w, lt, gt + 1 - lt)
                i = gt + 1 - data
            else:                           # a '<' in text
                _put(out, &w, lt, 1)
                i = lt + 1 - data
            continue
        gt = _tag_end(lt, end)
        if gt is NULL:                      # an unterminated tag: left as it is
            _put(out, &w, lt, end - lt)
            break
        q = lt + 1
        while q < gt and not _space(q[0]) and q[0] != 47:
            q += 1
        _put(out, &w, lt, q - lt)           # '<name'
        raw = _raw_text(lt, end, &k)
        slash = False
        p = q
        while p < gt:
            if _space(p[0]):
                p += 1
                continue
            if p[0] == 47:                  # '/'
                slash = True
                p += 1
                continue
            slash = False
            a0 = p
            while p < gt and not _space(p[0]) and p[0] != 61 and p[0] != 47:
                p += 1
            a1 = p
            v0 = v1 = NULL
            q = p
            while q < gt and _space(q[0]):
                q += 1
            if q < gt and q[0] == 61:       # '=' value
                q += 1
                while q < gt and _space(q[0]):
                    q += 1
                if q < gt and (q[0] == 34 or q[0] == 39):
                    v1 = <const unsigned char *>memchr(q + 1, q[0], gt - q - 1)
                    v1 = gt if v1 is NULL else v1 + 1
                else:
                    v1 = q
                    while v1 < gt and not _space(v1[0]):
                        v1 += 1
                v0 = q
                p = v1
            elif a1 == a0:                  # a stray '='
                p += 1
            if a1 > a0 and _kept(a0, a1 - a0):
                _put(out, &w, b" ", 1)
                _put(out, &w, a0, a1 - a0)
                if v0 is not NULL:
                    _put(out, &w, b"=", 1)
                    if v1 - v0 > LONG_VALUE:
                        _put(out, &w, b'""', 2)
                    else:
                        _put(out, &w, v0, v1 - v0)
        if slash:
            _put(out, &w, b"/", 1)
        _put(out, &w, b">", 1)
        i = gt + 1 - data
        if raw is not NULL:                 # the body goes; its end tag is copied next
            p = _raw_text_end(data + i, end, raw, k)
            i = n if p is NULL else p - data
    return w


def tame_html(bytes data) -> bytes:
    """``data`` without comments and script/style bodies, its start tags
    keeping only class, id, hidden, aria-hidden, charset, http-equiv and
    content (values over 1 KiB emptied); linear time on any input."""
    cdef Py_ssize_t n = len(data), w
    cdef const unsigned char *src = <const unsigned char *><const char *>data
    cdef unsigned char *out = <unsigned char *>PyMem_Malloc(2 * n + 16)
    if out is NULL:
        raise MemoryError()
    try:
        with nogil:
            w = _tame_1(src, n, out)
        return (<char *>out)[:w]
    finally:
        PyMem_Free(out)


# ------------------------------------------------------------------ the head's tags
# fingerprint.canonical reads <link rel=canonical> and <base href> from the head
# of the raw bytes. Finding them is a scan of every '<' up to the end of the head
# (often tens of kilobytes of inline script and style): done here, the
# attributes of the few tags found are read in Python.

cdef inline bint _starts_name(const unsigned char *p, const unsigned char *end,
                              const char *name, Py_ssize_t k) noexcept nogil:
    """``p`` starts with ``name`` (lower case, ``k`` chars), its letters in any case."""
    cdef Py_ssize_t j
    if end - p < k:
        return False
    for j in range(k):
        if _lower(p[j]) != <unsigned char>name[j]:
            return False
    return True


cdef Py_ssize_t _head_end(const unsigned char *data, Py_ssize_t n) noexcept nogil:
    """Where the head of ``data[:n]`` ends: the first ``</head`` or ``<body``
    (any case) not followed by an ASCII letter, digit or '_'; else ``n``."""
    cdef const unsigned char *end = data + n
    cdef const unsigned char *p = data
    cdef const unsigned char *lt
    cdef const unsigned char *after
    while True:
        lt = <const unsigned char *>memchr(p, 60, end - p)       # '<'
        if lt is NULL:
            return n
        after = NULL
        if _starts_name(lt + 1, end, "/head", 5):
            after = lt + 6
        elif _starts_name(lt + 1, end, "body", 4):
            after = lt + 5
        if after is not NULL and (after == end or not _ascii_word(after[0])):
            return lt - data
        p = lt + 1


cdef bint _holds_canonical(const unsigned char *p, const unsigned char *end) noexcept nogil:
    """``canonical`` (any case) occurs in ``p[:end - p]``."""
    while end - p >= 9:
        if (p[0] | 0x20) == 99 and _starts_name(p, end, "canonical", 9):
            return True
        p += 1
    return False


def head_link_tags(data, Py_ssize_t limit) -> list:
    """``[(start, end), ...]``: the ``<base ...>`` tags, and the ``<link ...>``
    tags that hold ``canonical`` (any case), in the head of ``data[:limit]``
    (bytes), in order. A tag is ``<link`` or ``<base`` (any case) not followed
    by an ASCII letter, digit, '_' or a byte over 127, up to its first '>';
    the head ends at the first ``</head`` or ``<body`` (any case) not followed
    by an ASCII letter, digit or '_'. Not an HTML parse: quotes, comments and
    scripts are not told apart (a reference in ``tests/reference/canonical.py``)."""
    cdef const unsigned char[::1] view = data
    cdef Py_ssize_t n = min(<Py_ssize_t>view.shape[0], max(limit, 0))
    cdef list found = []
    if n == 0:
        return found
    cdef const unsigned char *base = &view[0]
    cdef const unsigned char *end
    cdef const unsigned char *p = base
    cdef const unsigned char *lt
    cdef const unsigned char *gt
    cdef bint is_base
    with nogil:
        end = base + _head_end(base, n)
    while True:
        lt = <const unsigned char *>memchr(p, 60, end - p)           # '<'
        if lt is NULL or end - lt < 6:
            return found
        is_base = _starts_name(lt + 1, end, "base", 4)
        if (not is_base and not _starts_name(lt + 1, end, "link", 4)) \
                or _ascii_word(lt[5]) or lt[5] > 127:
            p = lt + 1
            continue
        gt = <const unsigned char *>memchr(lt + 5, 62, end - lt - 5)  # '>'
        if gt is NULL:
            return found        # no tag can end before the head does
        if is_base or _holds_canonical(lt + 5, gt):
            found.append((lt - base, gt + 1 - base))
        p = gt + 1
