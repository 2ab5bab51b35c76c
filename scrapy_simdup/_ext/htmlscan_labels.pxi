# class/id labels: the C cache of their verdicts and the text of an attribute.

# The verdicts on class/id labels, kept in C: the label's UTF-8 bytes (read
# from libxml2's attribute text, no Python string) -> unlikely or not. Exact
# (keys are compared byte for byte) and bounded: emptied when full. A label
# not in it is judged by the LabelRule below when unlikely_label is one and
# the label is ASCII, else it goes through unlikely_label(); the cache then
# keeps the answer. The verdict is a function of the label alone, so what
# the cache holds never changes a result.
cdef enum:
    LABEL_SLOTS = 1 << 15           # a power of two, kept at most half full
    LABEL_ARENA = 1 << 20
    LABEL_MAX = 240                 # longer labels take the Python path

cdef struct LabelSlot:
    uint64_t hash
    uint32_t offset
    uint16_t length
    uint8_t used
    uint8_t unlikely

cdef LabelSlot _label_slots[LABEL_SLOTS]
cdef char _label_arena[LABEL_ARENA]
cdef Py_ssize_t _label_arena_used = 0
cdef Py_ssize_t _labels_held = 0
# a seed of this process's own: a page cannot pick labels that collide in it
cdef uint32_t _label_seed = int.from_bytes(_urandom(4), "little")
# the verdict function the cached verdicts came from (another one empties it)
cdef object _label_owner = None


cdef void _label_clear() noexcept:
    global _label_arena_used, _labels_held
    memset(_label_slots, 0, sizeof(_label_slots))
    _label_arena_used = 0
    _labels_held = 0


def clear_label_cache():
    """Forget the cached class/id verdicts (after changing what makes a label
    unlikely; a scan with another ``unlikely_label`` does it by itself)."""
    _label_clear()


cdef int _label_find(const char *key, Py_ssize_t n, uint64_t h) noexcept:
    """The cached verdict of a label (0 or 1), or -1 if it is not cached."""
    cdef Py_ssize_t i = h & (LABEL_SLOTS - 1)
    while _label_slots[i].used:
        if (_label_slots[i].hash == h and _label_slots[i].length == n
                and memcmp(&_label_arena[_label_slots[i].offset], key, n) == 0):
            return _label_slots[i].unlikely
        i = (i + 1) & (LABEL_SLOTS - 1)
    return -1


cdef void _label_keep(const char *key, Py_ssize_t n, uint64_t h, bint unlikely) noexcept:
    global _label_arena_used, _labels_held
    cdef Py_ssize_t i
    if 2 * (_labels_held + 1) > LABEL_SLOTS or _label_arena_used + n > LABEL_ARENA:
        _label_clear()
    i = h & (LABEL_SLOTS - 1)
    while _label_slots[i].used:
        i = (i + 1) & (LABEL_SLOTS - 1)
    memcpy(&_label_arena[_label_arena_used], key, n)
    _label_slots[i].hash = h
    _label_slots[i].offset = <uint32_t>_label_arena_used
    _label_slots[i].length = <uint16_t>n
    _label_slots[i].used = 1
    _label_slots[i].unlikely = unlikely
    _label_arena_used += n
    _labels_held += 1


cdef inline bint _attr_text(xmlAttr *attr, const char **text, Py_ssize_t *n) noexcept:
    """The value of ``attr`` (NULL: absent, empty) as libxml2's own UTF-8, when
    it is one text node (what lxml's attributeValue then returns); False if
    it is not (entity references, no value), for the Python path."""
    cdef xmlNode *child
    if attr is NULL:
        text[0] = NULL
        n[0] = 0
        return True
    child = attr.children
    if child is NULL or child.next is not NULL or child.type != tree.XML_TEXT_NODE \
            or child.content is NULL:
        return False
    text[0] = <const char *>child.content
    n[0] = strlen(text[0])
    return True


# ------------------------------------------------------------------ the rule itself
# fingerprint.extract's unlikely_label is a LabelRule: an ASCII label is judged
# here, from its bytes (a page's ids are mostly its own, so most labels are new
# to the cache); any other label goes to the rule's regular expressions.

cdef inline unsigned char _lower(unsigned char c) noexcept nogil:
    return c | 0x20 if 65 <= c <= 90 else c


cdef inline bint _label_sep(unsigned char c) noexcept nogil:
    """``[\\s_-]`` of a str regex, on ASCII."""
    return c == 32 or c == 45 or c == 95 or 9 <= c <= 13 or 28 <= c <= 31


cdef inline bint _ascii_word(unsigned char c) noexcept nogil:
    """An ASCII letter, digit or '_' (``\\w`` of a str regex, on ASCII)."""
    return c == 95 or 48 <= c <= 57 or 97 <= (c | 0x20) <= 122


cdef class LabelRule:
    """Does a ``class``/``id`` label say boilerplate (and not content)?

    ``rule(label)`` is True when one of ``words`` (or a word starting with
    one of ``prefixes``) stands in ``label`` between separators (start, end,
    white space, '_' or '-'), any case, and none of ``likely`` occurs in it
    anywhere. ASCII labels are judged in C; any other label by
    ``fallback(label)``, the same rule as regular expressions (which also
    knows Unicode's case and space rules).
    """
    cdef readonly tuple words, prefixes, likely
    cdef readonly object fallback
    cdef const unsigned char **_ptr
    cdef Py_ssize_t *_len
    cdef Py_ssize_t n_words, n_prefixes, n_likely
    # the words (not prefixes, not likely words) by their first byte: words
    # _order[_first[c]:_first[c + 1]] start with c
    cdef Py_ssize_t *_order
    cdef Py_ssize_t _first[257]

    def __cinit__(self, words, prefixes, likely, fallback):
        self.words = tuple(w.lower().encode("ascii") for w in words)
        self.prefixes = tuple(w.lower().encode("ascii") for w in prefixes)
        self.likely = tuple(w.lower().encode("ascii") for w in likely)
        self.fallback = fallback
        self.n_words, self.n_prefixes = len(self.words), len(self.prefixes)
        self.n_likely = len(self.likely)
        cdef Py_ssize_t total = self.n_words + self.n_prefixes + self.n_likely, i = 0
        cdef bytes w
        self._ptr = <const unsigned char **>PyMem_Malloc(max(total, 1) * sizeof(char *))
        self._len = <Py_ssize_t *>PyMem_Malloc(max(total, 1) * sizeof(Py_ssize_t))
        if self._ptr is NULL or self._len is NULL:
            raise MemoryError()
        for w in self.words + self.prefixes + self.likely:
            if not w:
                raise ValueError("a label rule's words must not be empty")
            self._ptr[i] = <const unsigned char *><const char *>w
            self._len[i] = len(w)
            i += 1
        self._order = <Py_ssize_t *>PyMem_Malloc(max(self.n_words, 1) * sizeof(Py_ssize_t))
        if self._order is NULL:
            raise MemoryError()
        order = sorted(range(self.n_words), key=lambda j: self.words[j][0])
        for i in range(self.n_words):
            self._order[i] = order[i]
        cdef int c
        i = 0
        for c in range(257):
            while i < self.n_words and self.words[order[i]][0] < c:
                i += 1
            self._first[c] = i

    def __dealloc__(self):
        PyMem_Free(self._ptr)
        PyMem_Free(self._len)
        PyMem_Free(self._order)

    cdef inline bint _at(self, Py_ssize_t w, const unsigned char *s, Py_ssize_t n) noexcept nogil:
        """Word ``w`` (lower case) starts ``s[:n]``, in any case."""
        cdef Py_ssize_t k = self._len[w], j
        cdef const unsigned char *p = self._ptr[w]
        if k > n:
            return False
        for j in range(k):
            if _lower(s[j]) != p[j]:
                return False
        return True

    cdef int judge_ascii(self, const unsigned char *s, Py_ssize_t n) noexcept nogil:
        """The verdict (0 or 1) on the label ``s[:n]``, or -1 if it is not ASCII."""
        cdef Py_ssize_t i, w, j, k, c
        cdef bint unlikely = False
        for i in range(n):
            if s[i] > 127:
                return -1
        for i in range(n):
            if i and not _label_sep(s[i - 1]):
                continue
            c = _lower(s[i])
            for j in range(self._first[c], self._first[c + 1]):
                w = self._order[j]
                k = self._len[w]
                if self._at(w, s + i, n - i) and (i + k == n or _label_sep(s[i + k])):
                    unlikely = True
                    break
            if unlikely:
                break
            for w in range(self.n_words, self.n_words + self.n_prefixes):
                if not self._at(w, s + i, n - i):
                    continue
                # the prefix, word characters, then a separator or the end
                # (an '_' is both: the word may stop before it)
                j = i + self._len[w]
                while j < n and _ascii_word(s[j]) and s[j] != 95:
                    j += 1
                if j == n or _label_sep(s[j]):
                    unlikely = True
                    break
            if unlikely:
                break
        if not unlikely:
            return 0
        for w in range(self.n_words + self.n_prefixes,
                       self.n_words + self.n_prefixes + self.n_likely):
            for i in range(n - self._len[w] + 1):
                if self._at(w, s + i, n - i):
                    return 0
        return 1

    def __call__(self, label):
        cdef int verdict
        if isinstance(label, str) and (<str>label).isascii():
            data = (<str>label).encode("ascii")
            verdict = self.judge_ascii(<const unsigned char *><const char *>data, len(data))
            return verdict == 1
        return bool(self.fallback(label))
