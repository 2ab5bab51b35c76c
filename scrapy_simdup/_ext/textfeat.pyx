# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Compiled fast path of tokenising and text features.

Exactly the same results as the pure Python reference, which the tests
compare it with:

* ``token_hashes(text)`` == ``hashing.hash_features(tokens.split_tokens(text))``
  for an already normalised text: tokens are ``\\w+(?:'\\w+)*`` with Python's
  Unicode ``\\w``, runs of no-space scripts split into single characters;
  each token is hashed from its UTF-8 bytes in place, without making token
  strings.
* ``text_features`` == the shingle and spot-signature hashes of
  ``fingerprint.features.shingle_hashes``/``spot_hashes`` (concatenated).
* ``unique_counts(sorted_hashes)`` == ``np.unique(..., return_counts=True)``.
* ``weighted_features(...)`` == ``fingerprint.features.weigh(text_features(...), weighting)``
  for the count, logtf and binary weightings, in one call.
* ``fold_text(text, table, segments)`` == ``tokens.normalize(text)`` in one
  pass over the text, or None when a character needs the full normalisation
  (see ``tokens.fold_table``).
* ``fold_token_hashes(text, table, segments)`` == ``token_hashes(fold_text(...))``
  in one pass, without making the folded text (None where ``fold_text`` is).
* ``utf8_valid(data)``: whether ``data.decode("utf-8")`` would succeed.
"""
from libc.stdint cimport uint16_t, uint32_t, uint64_t, int64_t
from libc.string cimport memcpy, memset
from libc.stdlib cimport calloc, free, qsort
from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from cpython.unicode cimport PyUnicode_AsUTF8AndSize

from scrapy_simdup._ext.murmur3 cimport simdup_murmur3_64
from scrapy_simdup._ext.pyapi cimport (Py_UNICODE_ISALNUM, PyUnicode_4BYTE_KIND, PyUnicode_DATA,
                                       PyUnicode_FromKindAndData, PyUnicode_GET_LENGTH,
                                       PyUnicode_IS_COMPACT_ASCII, PyUnicode_KIND,
                                       PyUnicode_READ)
from scrapy_simdup._ext.utf8 cimport simdup_utf8_valid

import numpy as np

cdef uint64_t M = 0x9E3779B97F4A7C15ULL


cdef inline uint64_t fmix64(uint64_t x) noexcept nogil:
    x ^= x >> 33
    x *= 0xFF51AFD7ED558CCDULL
    x ^= x >> 33
    x *= 0xC4CEB9FE1A85EC53ULL
    x ^= x >> 33
    return x


cdef inline bint is_word(Py_UCS4 c) noexcept:
    """``re``'s Unicode ``\\w``: alphanumeric (str.isalnum) or underscore."""
    if c < 128:
        return (c >= 97 and c <= 122) or (c >= 65 and c <= 90) or (c >= 48 and c <= 57) or c == 95
    return Py_UNICODE_ISALNUM(c)


cdef inline bint is_nospace(Py_UCS4 c) noexcept:
    """Scripts written without spaces (the ranges of ``tokens._NOSPACE``)."""
    return ((0x0E00 <= c <= 0x0EFF) or (0x1000 <= c <= 0x109F) or (0x1780 <= c <= 0x17FF)
            or (0x3040 <= c <= 0x30FF) or (0x3400 <= c <= 0x4DBF) or (0x4E00 <= c <= 0x9FFF)
            or (0xF900 <= c <= 0xFAFF) or (0x20000 <= c <= 0x2FA1F))


cdef inline Py_ssize_t utf8_len(Py_UCS4 c) noexcept:
    return 1 if c < 0x80 else 2 if c < 0x800 else 3 if c < 0x10000 else 4


def token_hashes(str text):
    """uint64 hashes of the tokens of a normalised text, in order.

    Returns None when the text has no UTF-8 form (lone surrogates): the
    caller then takes the Python path.
    """
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text)
    cdef int kind = PyUnicode_KIND(text)
    cdef void *data = PyUnicode_DATA(text)
    cdef const char *utf8
    cdef Py_ssize_t size
    if PyUnicode_IS_COMPACT_ASCII(text):
        return _ascii_token_hashes(<const unsigned char *>data, n)
    else:
        try:
            utf8 = PyUnicode_AsUTF8AndSize(text, &size)
        except UnicodeError:
            return None
    out = np.empty(n + 1, dtype=np.uint64)   # at most one token per character
    cdef uint64_t[::1] h = out
    cdef Py_ssize_t count = 0, i = 0, b = 0, run_b
    cdef Py_UCS4 c
    while i < n:
        c = PyUnicode_READ(kind, data, i)
        if not is_word(c):
            i += 1
            b += utf8_len(c)
            continue
        # a token: \w+ (' \w+)* ; runs of no-space characters inside it are
        # cut into one token per character
        run_b = b           # start of the current run of ordinary characters
        while True:
            while i < n:
                c = PyUnicode_READ(kind, data, i)
                if not is_word(c):
                    break
                if is_nospace(c):
                    count += _emit_run(utf8, run_b, b, &h[count])
                    h[count] = simdup_murmur3_64(utf8 + b, utf8_len(c), 0)
                    count += 1
                    b += utf8_len(c)
                    run_b = b
                else:
                    b += utf8_len(c)
                i += 1
            if i + 1 < n and PyUnicode_READ(kind, data, i) == 39 and is_word(
                    PyUnicode_READ(kind, data, i + 1)):
                i += 1      # an inner apostrophe: the token goes on
                b += 1
                continue
            break
        count += _emit_run(utf8, run_b, b, &h[count])
    return out[:count]


cdef bint _ASCII_WORD[128]
for _c in range(128):
    _ASCII_WORD[_c] = chr(_c).isalnum() or _c == 95


cdef object _ascii_token_hashes(const unsigned char *p, Py_ssize_t n):
    """token_hashes of an ASCII text, byte by byte: \\w+('\\w+)* (no
    no-space scripts here, so no cuts and no apostrophes left at an end)."""
    out = np.empty(n // 2 + 1, dtype=np.uint64)   # a token and a separator at least
    cdef uint64_t[::1] h = out
    cdef Py_ssize_t count = 0, i = 0, start
    while i < n:
        if not _ASCII_WORD[p[i]]:
            i += 1
            continue
        start = i
        while True:
            while i < n and _ASCII_WORD[p[i]]:
                i += 1
            if i + 1 < n and p[i] == 39 and _ASCII_WORD[p[i + 1]]:
                i += 1      # an inner apostrophe: the token goes on
                continue
            break
        h[count] = simdup_murmur3_64(p + start, i - start, 0)
        count += 1
    return out[:count]


cdef inline Py_ssize_t _emit_run(const char *utf8, Py_ssize_t lo, Py_ssize_t hi,
                                 uint64_t *out) noexcept:
    """Hash the run ``utf8[lo:hi]`` into ``out``, without the apostrophes a
    cut at a no-space character left at its ends; 1 if a token was made."""
    while lo < hi and utf8[lo] == 39:
        lo += 1
    while hi > lo and utf8[hi - 1] == 39:
        hi -= 1
    if hi == lo:
        return 0
    out[0] = simdup_murmur3_64(utf8 + lo, hi - lo, 0)
    return 1


cdef Py_ssize_t _features_into(const uint64_t[::1] th, Py_ssize_t shingle_size, bint shingles,
                               bint spots, const uint64_t[::1] stop_hashes,
                               uint64_t shingle_salt, uint64_t spot_salt,
                               uint64_t *o) except -1:
    """Shingle then spot-signature hashes of ``th`` into ``o`` (room for
    ``2 * len(th)``); returns how many."""
    cdef Py_ssize_t n = th.shape[0], k = 0, m = 0, i, j, c, q, n_stop = stop_hashes.shape[0]
    cdef Py_ssize_t n_content = 0, n_spots = 0, chain = 2, n_stops = 0
    cdef uint64_t s
    cdef int64_t *content
    cdef int64_t *stops
    if shingles and shingle_size < 1:
        raise ValueError(f"shingle_size must be >= 1, got {shingle_size}")
    if shingles and n > 0:
        k = shingle_size if shingle_size < n else n
        m = n - k + 1
    for i in range(m):
        s = th[i] ^ shingle_salt
        for j in range(1, k):
            s = s * M + th[i + j]
        o[i] = fmix64(s)
    if not spots or n < chain + 1:
        return m
    # positions of stopword tokens (as np.isin with the stopword hashes) and
    # of content tokens, both in text order
    cdef Py_ssize_t slots = 64, mask, slot
    while slots < 4 * n_stop:
        slots *= 2
    mask = slots - 1
    content = <int64_t *>PyMem_Malloc(2 * n * sizeof(int64_t) + slots * sizeof(uint64_t))
    if content is NULL:
        raise MemoryError()
    stops = content + n
    # the stopwords in an open-addressing table (0: an empty slot; a stopword
    # hash 0 is kept apart), behind a bitmap of their top 12 bits: most
    # tokens are not stopwords, and the bitmap turns them away
    cdef uint64_t *table = <uint64_t *>(stops + n)
    cdef uint64_t x
    cdef bint zero_stop = False, stop
    cdef uint64_t stop_bits[64]
    memset(stop_bits, 0, sizeof(stop_bits))
    memset(table, 0, slots * sizeof(uint64_t))
    for q in range(n_stop):
        x = stop_hashes[q]
        stop_bits[x >> 58] |= (<uint64_t>1) << ((x >> 52) & 63)
        if x == 0:
            zero_stop = True
            continue
        slot = (x >> 20) & mask
        while table[slot] != 0 and table[slot] != x:
            slot = (slot + 1) & mask
        table[slot] = x
    try:
        for i in range(n):
            x = th[i]
            stop = False
            if (stop_bits[x >> 58] >> ((x >> 52) & 63)) & 1:
                if x == 0:
                    stop = zero_stop
                else:
                    slot = (x >> 20) & mask
                    while table[slot] != 0:
                        if table[slot] == x:
                            stop = True
                            break
                        slot = (slot + 1) & mask
            if stop:
                stops[n_stops] = i
                n_stops += 1
            else:
                content[n_content] = i
                n_content += 1
        if n_stops == 0 or n_content < chain:
            return m
        j = 0
        for q in range(n_stops):
            i = stops[q]
            while j < n_content and content[j] <= i:     # first content token after i
                j += 1
            if j + chain > n_content:
                break
            s = th[i] ^ spot_salt
            for c in range(chain):
                s = s * M + th[content[j + c]]
            o[m + n_spots] = fmix64(s)
            n_spots += 1
        return m + n_spots
    finally:
        PyMem_Free(content)


def text_features(const uint64_t[::1] th, Py_ssize_t shingle_size, bint shingles, bint spots,
                  const uint64_t[::1] stop_hashes, uint64_t shingle_salt, uint64_t spot_salt):
    """Shingle hashes then spot-signature hashes (chain 2) of token hashes."""
    out = np.empty(2 * th.shape[0], dtype=np.uint64)
    cdef uint64_t[::1] o = out
    cdef Py_ssize_t count = _features_into(th, shingle_size, shingles, spots, stop_hashes,
                                           shingle_salt, spot_salt,
                                           &o[0] if o.shape[0] else NULL)
    return out[:count]


cdef int _cmp_u64(const void *a, const void *b) noexcept nogil:
    cdef uint64_t x = (<const uint64_t *>a)[0], y = (<const uint64_t *>b)[0]
    return (x > y) - (x < y)


cdef void _sort_hashes(uint64_t *a, uint64_t *tmp, Py_ssize_t n) noexcept nogil:
    """Sort ``n`` hash values ascending (``tmp``: room for ``n``). Feature
    hashes are uniform, so a counting pass on the top bits leaves about one
    value per bucket and one insertion pass finishes the job; if that pass
    shifts far more than expected (crafted input), qsort does it instead."""
    cdef Py_ssize_t i, j, b, nb, shifts = 0
    cdef int bits = 1
    cdef uint64_t x
    cdef Py_ssize_t *start
    if n < 2:
        return
    while bits < 16 and (<Py_ssize_t>1 << bits) < n:
        bits += 1
    nb = <Py_ssize_t>1 << bits
    start = <Py_ssize_t *>calloc(nb + 1, sizeof(Py_ssize_t))
    if start is NULL:
        qsort(a, n, sizeof(uint64_t), _cmp_u64)
        return
    for i in range(n):
        start[(a[i] >> (64 - bits)) + 1] += 1
    for b in range(nb):
        start[b + 1] += start[b]
    for i in range(n):
        b = a[i] >> (64 - bits)
        tmp[start[b]] = a[i]
        start[b] += 1
    free(start)
    for i in range(n):
        x = tmp[i]
        j = i
        while j > 0 and a[j - 1] > x:
            a[j] = a[j - 1]
            j -= 1
        a[j] = x
        shifts += i - j
        if shifts > 8 * n + 64:
            # a[0..i] holds tmp[0..i], sorted; the rest is still in tmp
            memcpy(a + i + 1, tmp + i + 1, (n - i - 1) * sizeof(uint64_t))
            qsort(a, n, sizeof(uint64_t), _cmp_u64)
            return


def weighted_features(const uint64_t[::1] th, Py_ssize_t shingle_size, bint shingles,
                      bint spots, const uint64_t[::1] stop_hashes, uint64_t shingle_salt,
                      uint64_t spot_salt, int weighting, const double[::1] weight_of_count):
    """``fingerprint.features.weigh(text_features(...), weighting)`` in one call: the
    distinct feature hashes, ascending, and their weights, from
    ``weight_of_count[count]`` (``weighting`` 1: the log-tf table) or the count
    itself (0) or 1.0 (2). None when a count is beyond the table (the caller
    takes the NumPy path). Fewer NumPy calls per page matter in a crawl,
    where each one runs with cold caches."""
    cdef Py_ssize_t n = th.shape[0], count
    cdef uint64_t *buf = <uint64_t *>PyMem_Malloc((4 * n + 1) * sizeof(uint64_t))
    if buf is NULL:
        raise MemoryError()
    cdef uint64_t *tmp = buf + 2 * n
    try:
        count = _features_into(th, shingle_size, shingles, spots, stop_hashes, shingle_salt,
                               spot_salt, buf)
        _sort_hashes(buf, tmp, count)
        return _count_and_weigh(buf, count, weighting, weight_of_count)
    finally:
        PyMem_Free(buf)


cdef object _count_and_weigh(const uint64_t *sorted_hashes, Py_ssize_t count, int weighting,
                             const double[::1] weight_of_count):
    """Distinct values of a sorted array and their weights (see weighted_features)."""
    uniq = np.empty(count, dtype=np.uint64)
    weights = np.empty(count, dtype=np.float64)
    cdef uint64_t[::1] uv = uniq
    cdef double[::1] wv = weights
    cdef Py_ssize_t i = 0, j, u = 0, c, table = weight_of_count.shape[0]
    while i < count:
        j = i + 1
        while j < count and sorted_hashes[j] == sorted_hashes[i]:
            j += 1
        c = j - i
        uv[u] = sorted_hashes[i]
        if weighting == 0:
            wv[u] = <double>c
        elif weighting == 1:
            if c >= table:
                return None
            wv[u] = weight_of_count[c]
        else:
            wv[u] = 1.0
        u += 1
        i = j
    return uniq[:u], weights[:u]


def unique_counts(const uint64_t[::1] sorted_hashes):
    """(distinct values, their counts) of a sorted uint64 array."""
    cdef Py_ssize_t n = sorted_hashes.shape[0], i, u = 0
    uniq = np.empty(n, dtype=np.uint64)
    counts = np.empty(n, dtype=np.int64)
    cdef uint64_t[::1] uv = uniq
    cdef int64_t[::1] cv = counts
    for i in range(n):
        if u and uv[u - 1] == sorted_hashes[i]:
            cv[u - 1] += 1
        else:
            uv[u] = sorted_hashes[i]
            cv[u] = 1
            u += 1
    return uniq[:u], counts[:u]


# a fold table row's length for "the character itself" (tokens.FOLD_SELF)
cdef uint16_t FOLD_SELF = 0x8000


cdef inline Py_ssize_t _fold_row(uint32_t c, const uint32_t[:, ::1] segments) noexcept:
    """The table row of ``c`` (rows follow ``segments``, ``[start, stop)``
    code point ranges in order), or -1 when the table has none."""
    cdef Py_ssize_t k, row = 0
    for k in range(segments.shape[0]):
        if c < segments[k, 1]:
            return row + <Py_ssize_t>(c - segments[k, 0]) if c >= segments[k, 0] else -1
        row += segments[k, 1] - segments[k, 0]
    return -1


cdef inline uint16_t _fold(uint32_t c, const uint16_t[:, ::1] table,
                           const uint32_t[:, ::1] segments, Py_ssize_t *row) noexcept:
    """How many characters non-ASCII ``c`` folds to: 0 when it needs the full
    normalisation; else ``row`` is its table row, or -1 when it maps to
    itself (FOLD_SELF, and CJK ideographs and Hangul syllables, which are
    outside the table)."""
    row[0] = _fold_row(c, segments)
    if row[0] < 0:
        return 1 if (0x4E00 <= c <= 0x9FFF or 0x3400 <= c <= 0x4DBF
                     or 0xAC00 <= c <= 0xD7A3) else 0
    if table[row[0], 0] == FOLD_SELF:
        row[0] = -1
        return 1
    return table[row[0], 0]


cdef int _check_table(const uint16_t[:, ::1] table, const uint32_t[:, ::1] segments) except -1:
    cdef Py_ssize_t k, rows = 0
    for k in range(segments.shape[0]):
        rows += segments[k, 1] - segments[k, 0]
    if table.shape[0] != rows or segments.shape[1] != 2 or table.shape[1] < 2:
        raise ValueError(f"the fold table has {table.shape[0]} rows, its segments {rows}")
    return 0


def fold_text(str text, const uint16_t[:, ::1] table, const uint32_t[:, ::1] segments):
    """``normalize(text)`` for a text whose every character maps on its own
    (its ``table`` row's length is not 0; CJK ideographs and Hangul syllables
    map to themselves); None as soon as one does not."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), i, k, row, size = 0
    cdef Py_ssize_t width = table.shape[1] - 1
    cdef int kind = PyUnicode_KIND(text)
    cdef void *data = PyUnicode_DATA(text)
    cdef uint32_t c        # not Py_UCS4: Cython would treat c + 32 as str arithmetic
    cdef uint16_t length
    _check_table(table, segments)
    cdef Py_UCS4 *out = <Py_UCS4 *>PyMem_Malloc((n * width + 1) * sizeof(Py_UCS4))
    if out is NULL:
        raise MemoryError()
    try:
        for i in range(n):
            c = PyUnicode_READ(kind, data, i)
            if c < 128:
                out[size] = c + 32 if 65 <= c <= 90 else c
                size += 1
                continue
            length = _fold(c, table, segments, &row)
            if length == 0:
                return None
            if row < 0:
                out[size] = c
                size += 1
            else:
                for k in range(length):
                    out[size + k] = table[row, 1 + k]
                size += length
        return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, out, size)
    finally:
        PyMem_Free(out)


# ``re``'s Unicode ``\\w`` over the Basic Multilingual Plane, one bit per
# code point (the characters above it that fold_token_hashes meets are few)
cdef unsigned char _BMP_WORD[8192]


cdef void _fill_bmp_word() noexcept:
    cdef uint32_t c
    memset(_BMP_WORD, 0, sizeof(_BMP_WORD))
    for c in range(65536):
        if Py_UNICODE_ISALNUM(c) or c == 95:
            _BMP_WORD[c >> 3] |= 1 << (c & 7)


_fill_bmp_word()


cdef struct _Tokens:
    uint64_t *hashes            # the token hashes made so far
    Py_ssize_t count, room
    unsigned char *run          # UTF-8 of the current run of the current token
    Py_ssize_t run_len, run_room
    bint in_token               # the last character was part of a token
    bint apostrophe             # ... followed by an apostrophe, not yet known to be inside it


cdef int _grow(void **buf, Py_ssize_t *room, Py_ssize_t need, size_t item) except -1:
    cdef Py_ssize_t new_room = room[0]
    while new_room < need:
        new_room *= 2
    cdef void *new = PyMem_Realloc(buf[0], new_room * item)
    if new is NULL:
        raise MemoryError()
    buf[0] = new
    room[0] = new_room
    return 0


cdef int _end_run(_Tokens *t) except -1:
    """Hash the current run (``_emit_run``) and start a new one."""
    if t.count == t.room:
        _grow(<void **>&t.hashes, &t.room, t.count + 1, sizeof(uint64_t))
    t.count += _emit_run(<const char *>t.run, 0, t.run_len, &t.hashes[t.count])
    t.run_len = 0
    return 0


cdef inline int _append_utf8(_Tokens *t, uint32_t c) except -1:
    if t.run_len + 4 > t.run_room:
        _grow(<void **>&t.run, &t.run_room, t.run_len + 4, 1)
    cdef unsigned char *p = t.run + t.run_len
    if c < 0x80:
        p[0] = c
        t.run_len += 1
    elif c < 0x800:
        p[0] = 0xC0 | (c >> 6)
        p[1] = 0x80 | (c & 0x3F)
        t.run_len += 2
    elif c < 0x10000:
        p[0] = 0xE0 | (c >> 12)
        p[1] = 0x80 | ((c >> 6) & 0x3F)
        p[2] = 0x80 | (c & 0x3F)
        t.run_len += 3
    else:
        p[0] = 0xF0 | (c >> 18)
        p[1] = 0x80 | ((c >> 12) & 0x3F)
        p[2] = 0x80 | ((c >> 6) & 0x3F)
        p[3] = 0x80 | (c & 0x3F)
        t.run_len += 4
    return 0


cdef inline int _token_char(_Tokens *t, uint32_t c) except -1:
    """Feed one character of the normalised text to the tokenizer (the
    states of ``token_hashes``' loop, without looking ahead)."""
    cdef bint word
    if c < 128:
        word = _ASCII_WORD[c]
    elif c < 0x10000:
        word = (_BMP_WORD[c >> 3] >> (c & 7)) & 1
    else:
        word = Py_UNICODE_ISALNUM(c)
    if t.apostrophe:
        t.apostrophe = False
        if word:                # an inner apostrophe: the token goes on
            _append_utf8(t, 39)
        else:
            _end_run(t)
            t.in_token = False
    if not word:
        if t.in_token:
            if c == 39:
                t.apostrophe = True
            else:
                _end_run(t)
                t.in_token = False
        return 0
    t.in_token = True
    if c >= 0x0E00 and is_nospace(c):   # its own token; the run before it ends
        _end_run(t)
        _append_utf8(t, c)
        _end_run(t)
    else:
        _append_utf8(t, c)
    return 0


def fold_token_hashes(str text, const uint16_t[:, ::1] table,
                      const uint32_t[:, ::1] segments):
    """``token_hashes(fold_text(text, table, segments))`` in one pass, without
    making the folded text or its UTF-8 form; None when ``fold_text`` gives
    None (a character that needs the full normalisation)."""
    cdef Py_ssize_t n = PyUnicode_GET_LENGTH(text), i, k, row
    cdef int kind = PyUnicode_KIND(text)
    cdef void *data = PyUnicode_DATA(text)
    cdef uint32_t c
    cdef uint16_t length
    cdef _Tokens t
    cdef uint64_t[::1] o
    _check_table(table, segments)
    memset(&t, 0, sizeof(t))
    t.room = n // 2 + 16        # a token and a separator at least, mostly
    t.run_room = 256
    t.hashes = <uint64_t *>PyMem_Malloc(t.room * sizeof(uint64_t))
    t.run = <unsigned char *>PyMem_Malloc(t.run_room)
    try:
        if t.hashes is NULL or t.run is NULL:
            raise MemoryError()
        for i in range(n):
            c = PyUnicode_READ(kind, data, i)
            if c < 128:
                if _ASCII_WORD[c] and not t.apostrophe and t.run_len < t.run_room:
                    # the common case, inline: a letter or digit of a token
                    t.run[t.run_len] = c + 32 if 65 <= c <= 90 else c
                    t.run_len += 1
                    t.in_token = True
                else:
                    _token_char(&t, c + 32 if 65 <= c <= 90 else c)
            else:
                length = _fold(c, table, segments, &row)
                if length == 0:
                    return None
                if row < 0:
                    _token_char(&t, c)
                else:
                    for k in range(length):
                        _token_char(&t, table[row, 1 + k])
        if t.in_token:
            _end_run(&t)
        out = np.empty(t.count, dtype=np.uint64)
        o = out
        if t.count:
            memcpy(&o[0], t.hashes, t.count * sizeof(uint64_t))
        return out
    finally:
        PyMem_Free(t.hashes)
        PyMem_Free(t.run)


def utf8_valid(const unsigned char[::1] data):
    """Whether ``bytes(data).decode("utf-8")`` succeeds (strict UTF-8: no
    overlong forms, surrogates or code points above U+10FFFF)."""
    cdef Py_ssize_t n = data.shape[0]
    return bool(simdup_utf8_valid(&data[0] if n else NULL, n))
