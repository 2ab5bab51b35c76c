# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled fast path of ``scrapy_simdup.fingerprint.extract.scan_lxml_py``.

It walks the libxml2 nodes under an lxml element directly (through lxml's
public C API, the ``_c_node`` of an element), instead of creating one Python
proxy per element as ``etree.iterwalk`` does: text is gathered as UTF-8 bytes
per block and decoded once per block (``main_text_lxml``: once for the text
it returns), tag names are classified once per distinct name, and
``class``/``id`` labels are judged once per distinct label (a C cache; a
Python string only for a label not seen before). The tree is only read,
never modified.

It must give exactly the same blocks as the pure Python version in
``_extract.py`` (the tests compare both on every shared page). The event
order is that of ``iterwalk(events=("start", "end", "comment", "pi"))``:
an element's text at its start, its tail after its end (not for the root);
comments and processing instructions contribute only their tails.
"""
from cpython.mem cimport PyMem_Malloc, PyMem_Realloc, PyMem_Free
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.string cimport memcpy, memcmp, memset, strlen, strcmp
from libc.stdint cimport uintptr_t, uint8_t, uint16_t, uint32_t, uint64_t

from os import urandom as _urandom

from lxml.includes cimport tree
from lxml.includes.tree cimport xmlNode, xmlAttr
cimport lxml.includes.etreepublic as cetree

cdef extern from "Python.h":
    bint Py_UNICODE_ISSPACE(Py_UCS4 ch)
    int PyUnicode_KIND(object o)
    void *PyUnicode_DATA(object o)
    Py_UCS4 PyUnicode_READ(int kind, void *data, Py_ssize_t index)
    Py_ssize_t PyUnicode_GET_LENGTH(object o)

cetree.import_lxml__etree()

# Tag classes, computed once per distinct tag name from the sets given.
cdef enum:
    F_INVISIBLE = 1
    F_BLOCK = 2
    F_BOILER = 4
    F_NEVER = 8
    F_LINK = 16
    F_KNOWN = 32        # set in every filled cache slot (an empty slot is 0)

# element kinds on the stack (as in the Python version)
cdef enum:
    K_INLINE = 0
    K_BLOCK = 1
    K_SKIPPED = 2
    K_LINK = 3

cdef enum:
    TAG_CACHE = 256     # slots of the tag-name cache (direct mapped)

# _extract.TIGHT_SHARE_NUM / _DEN (the main container's narrowing; a test
# checks the two agree)
cdef enum:
    TIGHT_SHARE_NUM = 7
    TIGHT_SHARE_DEN = 10
TIGHT_SHARE = (TIGHT_SHARE_NUM, TIGHT_SHARE_DEN)


cdef extern from "_murmur3.h" nogil:
    uint64_t simdup_murmur3_64(const void *key, Py_ssize_t length, uint32_t seed)

cdef extern from "_utf8.h" nogil:
    int simdup_utf8_valid(const unsigned char *p, Py_ssize_t n)

# The verdicts on class/id labels, kept in C: the label's UTF-8 bytes (read
# from libxml2's attribute text, no Python string) -> unlikely or not. Exact
# (keys are compared byte for byte) and bounded: emptied when full. A label
# not in it, or one it cannot hold, goes through unlikely_label(), whose
# answer it then keeps; the verdict is a function of the label alone, so
# what the cache holds never changes a result.
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


cdef Py_ssize_t _utf8_visible_points(const char *s, Py_ssize_t n,
                                     Py_ssize_t *points) noexcept:
    """``_utf8_visible``, and the number of code points in ``points``."""
    cdef Py_ssize_t i = 0, count = 0, total = 0
    cdef unsigned char c
    cdef Py_UCS4 cp
    while i < n:
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


cdef class _Scanner:
    """State of one scan; see ``scan_lxml_raw``."""
    cdef bint main, want_tags
    cdef frozenset invisible, blocks, boiler, never
    cdef dict label_cache
    cdef object unlikely_label
    cdef list texts, nchars, lchars, owner, tags, tag_strs
    cdef Ints parent, end, unl, stack_kind
    cdef Bytes text
    cdef Py_ssize_t cur, link_chars, link_depth
    cdef TagSlot cache[TAG_CACHE]
    # lean scan (main_text_lxml): blocks stay UTF-8 bytes in one buffer, with
    # their start, size, visible and link characters, owner and code points
    cdef bint lean, bad_utf8
    cdef Bytes block_bytes
    cdef Ints b_start, b_size, b_nchars, b_lchars, b_owner, b_points

    def __dealloc__(self):
        PyMem_Free(self.text.data)
        PyMem_Free(self.parent.data)
        PyMem_Free(self.end.data)
        PyMem_Free(self.unl.data)
        PyMem_Free(self.stack_kind.data)
        PyMem_Free(self.block_bytes.data)
        PyMem_Free(self.b_start.data)
        PyMem_Free(self.b_size.data)
        PyMem_Free(self.b_nchars.data)
        PyMem_Free(self.b_lchars.data)
        PyMem_Free(self.b_owner.data)
        PyMem_Free(self.b_points.data)

    cdef int _add_text(self, xmlNode *node) except -1:
        """Append the text of consecutive text nodes from ``node`` (lxml's
        ``_collectText``: text and CDATA, XInclude markers skipped)."""
        cdef Py_ssize_t n
        while node is not NULL:
            if node.type == tree.XML_TEXT_NODE or node.type == tree.XML_CDATA_SECTION_NODE:
                if node.content is not NULL:
                    n = strlen(<const char *>node.content)
                    if n:
                        _bytes_add(&self.text, <const char *>node.content, n)
                        if self.link_depth:
                            self.link_chars += _utf8_visible(<const char *>node.content, n)
            elif node.type != tree.XML_XINCLUDE_START and node.type != tree.XML_XINCLUDE_END:
                break
            node = node.next
        return 0

    cdef int _flush(self) except -1:
        cdef str text
        cdef Py_ssize_t n
        if self.text.size == 0:
            return 0
        if self.lean:
            return self._flush_lean()
        text = PyUnicode_DecodeUTF8(self.text.data, self.text.size, "replace")
        n = _visible_len(text)
        if n:
            self.texts.append(text)
            self.nchars.append(n)
            self.lchars.append(self.link_chars if self.link_chars < n else n)
            self.owner.append(self.cur)
        self.text.size = 0
        self.link_chars = 0
        return 0

    cdef int _flush_lean(self) except -1:
        """``_flush`` without a Python string: on valid UTF-8 (all libxml2
        gives, normally) the visible count of the bytes is that of the
        decoded text; invalid bytes end the lean scan (``bad_utf8``)."""
        cdef Py_ssize_t n, points
        cdef const unsigned char *p = <const unsigned char *>self.text.data
        if not simdup_utf8_valid(p, self.text.size):
            self.bad_utf8 = True
        else:
            n = _utf8_visible_points(self.text.data, self.text.size, &points)
            if n:
                _ints_push(&self.b_start, self.block_bytes.size)
                _ints_push(&self.b_size, self.text.size)
                _ints_push(&self.b_nchars, n)
                _ints_push(&self.b_lchars, self.link_chars if self.link_chars < n else n)
                _ints_push(&self.b_owner, self.cur)
                _ints_push(&self.b_points, points)
                _bytes_add(&self.block_bytes, self.text.data, self.text.size)
        self.text.size = 0
        self.link_chars = 0
        return 0

    cdef int _tag_flags(self, xmlNode *node, Py_ssize_t *tag_index) except -1:
        cdef TagSlot *slot = NULL
        cdef int flags = F_KNOWN
        cdef str tag
        if node.ns is NULL:
            slot = &self.cache[(<uintptr_t>node.name >> 3) % TAG_CACHE]
            if slot.name == <const char *>node.name and slot.flags:
                tag_index[0] = slot.tag_index
                return slot.flags
        tag = cetree.namespacedName(node)
        if tag in self.invisible:
            flags |= F_INVISIBLE
        if tag in self.blocks:
            flags |= F_BLOCK
        if tag in self.boiler:
            flags |= F_BOILER
        if tag in self.never:
            flags |= F_NEVER
        if tag == "a":
            flags |= F_LINK
        tag_index[0] = len(self.tag_strs)
        self.tag_strs.append(tag)
        if node.ns is NULL:
            slot.name = <const char *>node.name
            slot.flags = flags
            slot.tag_index = tag_index[0]
        return flags

    cdef int _start(self, xmlNode *node) except -1:
        """An element starts: returns its kind (K_SKIPPED: do not descend)."""
        cdef Py_ssize_t tag_index, cid
        cdef int flags = self._tag_flags(node, &tag_index)
        cdef xmlAttr *attr = node.properties
        cdef xmlAttr *a_class = NULL
        cdef xmlAttr *a_id = NULL
        cdef bint hidden = False, unlikely = False, aria_seen = False
        cdef object cls = None, eid = None, label, hit
        cdef const char *ctext
        cdef const char *itext
        cdef Py_ssize_t clen, ilen, klen
        cdef char key[LABEL_MAX + 1]
        cdef uint64_t kh
        cdef int verdict
        while attr is not NULL:     # xmlGetNoNsProp: the first attribute without namespace
            if attr.ns is NULL:
                if a_class is NULL and strcmp(<const char *>attr.name, "class") == 0:
                    a_class = attr
                elif a_id is NULL and strcmp(<const char *>attr.name, "id") == 0:
                    a_id = attr
                elif strcmp(<const char *>attr.name, "hidden") == 0:
                    hidden = True
                elif not aria_seen and strcmp(<const char *>attr.name, "aria-hidden") == 0:
                    aria_seen = True
                    if cetree.attributeValue(node, attr) == "true":
                        hidden = True
            attr = attr.next
        if self.want_tags:
            tag = self.tag_strs[tag_index]
            if a_class is not NULL:
                cls = cetree.attributeValue(node, a_class)
            self.tags.append(tag + "." + cls.split(None, 1)[0] if cls and cls.strip() else tag)
        if flags & F_INVISIBLE or hidden:
            if flags & F_BLOCK:
                self._flush()
            return K_SKIPPED
        if self.main and not flags & F_NEVER:
            if flags & F_BOILER:
                unlikely = True
            elif (a_class is not NULL or a_id is not NULL) and cls is None \
                    and _attr_text(a_class, &ctext, &clen) and _attr_text(a_id, &itext, &ilen) \
                    and clen + ilen < LABEL_MAX:
                # the label "class id" (or the one that is not empty) as bytes
                if clen:
                    memcpy(key, ctext, clen)
                if clen and ilen:
                    key[clen] = 32
                    clen += 1
                if ilen:
                    memcpy(key + clen, itext, ilen)
                klen = clen + ilen
                if klen:
                    kh = simdup_murmur3_64(key, klen, _label_seed)
                    verdict = _label_find(key, klen, kh)
                    if verdict < 0:
                        label = PyUnicode_DecodeUTF8(key, klen, NULL)
                        hit = self.label_cache.get(label)
                        if hit is None:
                            hit = self.unlikely_label(label)
                        verdict = 1 if hit else 0
                        _label_keep(key, klen, kh, verdict)
                    unlikely = verdict
            elif a_class is not NULL or a_id is not NULL:
                if cls is None and a_class is not NULL:
                    cls = cetree.attributeValue(node, a_class)
                if a_id is not NULL:
                    eid = cetree.attributeValue(node, a_id)
                if cls or eid:
                    label = f"{cls} {eid}" if cls and eid else cls or eid
                    hit = self.label_cache.get(label)
                    if hit is None:
                        hit = self.unlikely_label(label)
                    unlikely = hit
        if unlikely or flags & F_BLOCK:
            self._flush()
            cid = self.parent.size
            _ints_push(&self.parent, self.cur)
            _ints_push(&self.end, cid + 1)
            _ints_push(&self.unl, self.unl.data[self.cur] + unlikely)
            self.cur = cid
            return K_BLOCK
        if flags & F_LINK:
            self.link_depth += 1
            return K_LINK
        return K_INLINE

    cdef int _finish(self, int kind) except -1:
        if kind == K_BLOCK:
            self._flush()
            self.end.data[self.cur] = self.parent.size
            self.cur = self.parent.data[self.cur]
        elif kind == K_LINK:
            self.link_depth -= 1
        return 0

    cdef int walk(self, xmlNode *root) except -1:
        cdef xmlNode **nodes = NULL
        cdef xmlNode **grown
        cdef Py_ssize_t depth = 0, cap = 0
        cdef xmlNode *nxt
        cdef xmlNode *node
        cdef int kind
        try:
            nxt = root
            while True:
                if nxt is not NULL:
                    if nxt.type == tree.XML_ELEMENT_NODE:
                        kind = self._start(nxt)
                        if depth == cap:
                            cap = max(2 * cap, 64)
                            grown = <xmlNode **>PyMem_Realloc(nodes, cap * sizeof(xmlNode *))
                            if grown is NULL:
                                raise MemoryError()
                            nodes = grown
                        nodes[depth] = nxt
                        depth += 1
                        _ints_push(&self.stack_kind, kind)
                        if kind == K_SKIPPED:
                            nxt = NULL
                        else:
                            self._add_text(nxt.children)
                            nxt = _walked_from(nxt.children)
                    else:           # comment, PI, entity reference: only its tail
                        self._add_text(nxt.next)
                        nxt = _walked_from(nxt.next)
                    continue
                if depth == 0:
                    break
                depth -= 1
                node = nodes[depth]
                self.stack_kind.size -= 1
                self._finish(self.stack_kind.data[self.stack_kind.size])
                if depth == 0:      # the root's tail is not its text
                    break
                self._add_text(node.next)
                nxt = _walked_from(node.next)
        finally:
            PyMem_Free(nodes)
        return 0


cdef _Scanner _scan_tree(root, bint main, bint want_tags, bint lean, frozenset invisible,
                         frozenset blocks, frozenset boiler, frozenset never,
                         dict label_cache, unlikely_label):
    """A scanner that has walked ``root``, or None when ``root`` is not an
    element (a comment, PI or entity: no text)."""
    global _label_owner
    cdef _Scanner s = _Scanner.__new__(_Scanner)
    cdef xmlNode *c_root
    if not isinstance(root, cetree._Element):
        raise TypeError(f"an lxml element is needed, not {type(root).__name__}")
    if unlikely_label is not _label_owner:
        _label_clear()
        _label_owner = unlikely_label
    s.main, s.want_tags, s.lean = main, want_tags, lean
    s.invisible, s.blocks, s.boiler, s.never = invisible, blocks, boiler, never
    s.label_cache = label_cache
    s.unlikely_label = unlikely_label
    s.tags, s.tag_strs = [], []
    if not lean:
        s.texts, s.nchars, s.lchars, s.owner = [], [], [], []
    _ints_push(&s.parent, -1)
    _ints_push(&s.end, 0)
    _ints_push(&s.unl, 0)
    c_root = (<cetree._Element>root)._c_node
    if c_root is NULL or c_root.type != tree.XML_ELEMENT_NODE:
        return None
    s.walk(c_root)
    s._flush()
    s.end.data[0] = s.parent.size
    return s


def scan_lxml_raw(root, bint main, bint want_tags, frozenset invisible, frozenset blocks,
                  frozenset boiler, frozenset never, dict label_cache, unlikely_label):
    """Returns (texts, nchars, lchars, owner, parent, end, unl, tags)."""
    cdef _Scanner s = _scan_tree(root, main, want_tags, False, invisible, blocks, boiler,
                                 never, label_cache, unlikely_label)
    if s is None:
        return [], [], [], [], [-1], [0], [0], []
    return (s.texts, s.nchars, s.lchars, s.owner, _ints_list(&s.parent),
            _ints_list(&s.end), _ints_list(&s.unl), s.tags)


cdef Py_ssize_t _select(Py_ssize_t n_blocks, Py_ssize_t n_cont, const Py_ssize_t *nchars,
                        const Py_ssize_t *owner, const Py_ssize_t *parent,
                        const Py_ssize_t *ends, const Py_ssize_t *unl, const char *ok,
                        bint use_flags, Py_ssize_t min_main_chars, Py_ssize_t *good,
                        Py_ssize_t *bad, Py_ssize_t *blocks, Py_ssize_t *best_good) noexcept:
    """The container maximising good - bad text, narrowed to the child holding
    most of its content (``BlockBuilder._select``, ``TIGHT_SHARE``)."""
    cdef Py_ssize_t i, c, p, best = 0, score, best_score, child, top
    for c in range(n_cont):
        good[c] = 0
        bad[c] = 0
        blocks[c] = 0
    for i in range(n_blocks):
        c = owner[i]
        if ok[i] and (not use_flags or unl[c] == 0):
            good[c] += nchars[i]
            blocks[c] += 1
        else:
            bad[c] += nchars[i]
    for c in range(n_cont - 1, 0, -1):     # children have larger ids
        p = parent[c]
        good[p] += good[c]
        bad[p] += bad[c]
        blocks[p] += blocks[c]
    best_score = good[0] - bad[0]
    for c in range(1, n_cont):
        score = good[c] - bad[c]
        if score > best_score:
            best, best_score = c, score
    while True:
        child, top, c = -1, -1, best + 1
        while c < ends[best]:       # the direct children: skip each one's subtree
            if good[c] > top:
                child, top = c, good[c]
            c = ends[c]
        if child < 0 or top * TIGHT_SHARE_DEN < good[best] * TIGHT_SHARE_NUM \
                or top <= bad[child] or blocks[child] < 2 or top < min_main_chars:
            break
        best = child
    best_good[0] = good[best]
    return best


cdef bint _choose(Py_ssize_t n_blocks, Py_ssize_t n_cont, const Py_ssize_t *nch,
                  const Py_ssize_t *lch, const Py_ssize_t *own, const Py_ssize_t *points,
                  const Py_ssize_t *par, const Py_ssize_t *ends, const Py_ssize_t *un,
                  Py_ssize_t min_block_chars, double max_link_density,
                  Py_ssize_t min_main_chars, Py_ssize_t keep_block_chars,
                  char *keep) except -1:
    """The main-content selection of ``BlockBuilder.main_text`` on C arrays:
    marks the blocks of the main text in ``keep`` and returns True, or False
    when there is no main content (the caller then takes every block).
    ``points``: each block's length in code points."""
    cdef Py_ssize_t i, c, best, good_chars, lo, hi, level, kept_chars = 0
    cdef Py_ssize_t *buf = <Py_ssize_t *>PyMem_Malloc(3 * n_cont * sizeof(Py_ssize_t) + n_blocks)
    if buf is NULL:
        raise MemoryError()
    cdef Py_ssize_t *good = buf
    cdef Py_ssize_t *bad = good + n_cont
    cdef Py_ssize_t *blocks = bad + n_cont
    cdef char *ok = <char *>(blocks + n_cont)
    try:
        for i in range(n_blocks):
            ok[i] = nch[i] >= min_block_chars and lch[i] <= nch[i] * max_link_density
        # pass 1 scores text outside unlikely regions; pass 2 ignores the flags
        best = _select(n_blocks, n_cont, nch, own, par, ends, un, ok, True, min_main_chars,
                       good, bad, blocks, &good_chars)
        if good_chars < min_main_chars:
            best = _select(n_blocks, n_cont, nch, own, par, ends, un, ok, False, min_main_chars,
                           good, bad, blocks, &good_chars)
        if good_chars < min_main_chars:
            return False
        lo, hi, level = best, ends[best], un[best]
        for i in range(n_blocks):
            c = own[i]
            keep[i] = (lo <= c < hi and un[c] == level and nch[i] >= keep_block_chars
                       and lch[i] <= nch[i] * 0.5)
            if keep[i]:
                kept_chars += points[i]
        return kept_chars >= min_main_chars
    finally:
        PyMem_Free(buf)


def main_text_raw(list texts, list nchars, list lchars, list owner, list parent, list end,
                  list unl, Py_ssize_t min_block_chars, double max_link_density,
                  Py_ssize_t min_main_chars, Py_ssize_t keep_block_chars):
    """``BlockBuilder.main_text`` on its lists, compiled: ``(text, found)``."""
    cdef Py_ssize_t n_blocks = len(texts), n_cont = len(parent), i, c
    if not (len(nchars) == len(lchars) == len(owner) == n_blocks
            and len(end) == len(unl) == n_cont):
        raise ValueError("the block lists and the container lists must have equal lengths")
    if n_blocks == 0:
        return "", False
    if n_cont == 0 or parent[0] != -1:
        raise ValueError("container 0 (the root, parent -1) is missing")
    cdef Py_ssize_t *buf = <Py_ssize_t *>PyMem_Malloc(
        (4 * n_blocks + 3 * n_cont) * sizeof(Py_ssize_t) + n_blocks)
    if buf is NULL:
        raise MemoryError()
    cdef Py_ssize_t *nch = buf
    cdef Py_ssize_t *lch = nch + n_blocks
    cdef Py_ssize_t *own = lch + n_blocks
    cdef Py_ssize_t *points = own + n_blocks
    cdef Py_ssize_t *par = points + n_blocks
    cdef Py_ssize_t *ends = par + n_cont
    cdef Py_ssize_t *un = ends + n_cont
    cdef char *keep = <char *>(un + n_cont)
    try:
        for i in range(n_blocks):
            nch[i] = nchars[i]
            lch[i] = lchars[i]
            own[i] = owner[i]
            if not 0 <= own[i] < n_cont:
                raise ValueError(f"owner[{i}] = {own[i]} is not a container")
            if not isinstance(texts[i], str):
                raise TypeError(f"texts[{i}] is not a str")
            points[i] = PyUnicode_GET_LENGTH(texts[i])
        for c in range(n_cont):
            par[c] = parent[c]
            if c and not 0 <= par[c] < c:
                raise ValueError(f"parent[{c}] = {par[c]} is not an earlier container")
            ends[c] = end[c]
            un[c] = unl[c]
            # a container's subtree ends after it and inside the list (the
            # narrowing walks children by these ends)
            if not c < ends[c] <= n_cont:
                raise ValueError(f"end[{c}] = {ends[c]} is not in {c + 1}..{n_cont}")
        if not _choose(n_blocks, n_cont, nch, lch, own, points, par, ends, un, min_block_chars,
                       max_link_density, min_main_chars, keep_block_chars, keep):
            return "\n".join(texts), False
        return "\n".join([texts[i] for i in range(n_blocks) if keep[i]]), True
    finally:
        PyMem_Free(buf)


def main_text_lxml(root, frozenset invisible, frozenset blocks, frozenset boiler,
                   frozenset never, dict label_cache, unlikely_label,
                   Py_ssize_t min_block_chars, double max_link_density,
                   Py_ssize_t min_main_chars, Py_ssize_t keep_block_chars):
    """``scan_lxml_raw`` (main mode, no tags) then ``main_text_raw`` in one
    pass that keeps the blocks as UTF-8 and decodes only the text returned:
    ``(text, found)``, the same as the two; None when a block is not valid
    UTF-8 (then the two give the answer)."""
    cdef _Scanner s = _scan_tree(root, True, False, True, invisible, blocks, boiler, never,
                                 label_cache, unlikely_label)
    cdef Py_ssize_t n_blocks, n_cont, i, size = 0
    cdef char *keep
    cdef char *out
    cdef bint found
    if s is None:
        return "", False
    if s.bad_utf8:
        return None
    n_blocks, n_cont = s.b_start.size, s.parent.size
    if n_blocks == 0:
        return "", False
    keep = <char *>PyMem_Malloc(n_blocks)
    out = <char *>PyMem_Malloc(s.block_bytes.size + n_blocks + 1)
    if keep is NULL or out is NULL:
        PyMem_Free(keep)
        PyMem_Free(out)
        raise MemoryError()
    try:
        found = _choose(n_blocks, n_cont, s.b_nchars.data, s.b_lchars.data, s.b_owner.data,
                        s.b_points.data, s.parent.data, s.end.data, s.unl.data,
                        min_block_chars, max_link_density, min_main_chars, keep_block_chars,
                        keep)
        for i in range(n_blocks):      # the blocks kept (or all), joined by newlines
            if found and not keep[i]:
                continue
            if size:
                out[size] = 10
                size += 1
            memcpy(out + size, s.block_bytes.data + s.b_start.data[i], s.b_size.data[i])
            size += s.b_size.data[i]
        return PyUnicode_DecodeUTF8(out, size, NULL), found
    finally:
        PyMem_Free(keep)
        PyMem_Free(out)


cdef extern from "string.h" nogil:
    const void *memchr(const void *s, int c, size_t n)


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
    quoted attribute value (after '=') may hold '>'."""
    cdef const unsigned char *p = lt + 1
    cdef unsigned char c
    cdef bint after_eq = False
    if p >= end or not 97 <= (p[0] | 0x20) <= 122:      # not a start tag
        return <const unsigned char *>memchr(lt, 62, end - lt)
    while p < end:
        c = p[0]
        if c == 62:                                     # '>'
            return p
        if (c == 34 or c == 39) and after_eq:           # a quoted value
            p = <const unsigned char *>memchr(p + 1, c, end - p - 1)
            if p is NULL:
                return NULL
            after_eq = False
        elif c == 61:                                   # '='
            after_eq = True
        elif not _space(c):
            after_eq = False
        p += 1
    return NULL


cdef Py_ssize_t _long_tags_1(const unsigned char *data, Py_ssize_t n,
                              Py_ssize_t min_len) noexcept nogil:
    """Total length of the tags of at least ``min_len`` characters (from '<'
    to the '>' ending the tag), one byte per character, not counting script
    and style bodies and comments (their '<' are not tags)."""
    cdef Py_ssize_t i = 0, total = 0, k = 0
    cdef const unsigned char *end = data + n
    cdef const unsigned char *lt
    cdef const unsigned char *gt
    cdef const char *raw
    while True:
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


def long_tag_bytes(html, Py_ssize_t min_length) -> int:
    """The total length of the tags of ``html`` (str or bytes) that are at
    least ``min_length`` long, from ``<`` to the ``>`` ending the tag (not
    one in a quoted attribute value), outside script and style bodies and
    comments. libxml2 parses a tag's attributes in quadratic time (one 2 MB
    tag of 200 000 attributes takes minutes), so the fingerprinter does not
    hand pages with much of it to libxml2 as they are."""
    cdef const unsigned char[::1] view
    if isinstance(html, str):
        if PyUnicode_KIND(html) == 1:        # Latin-1 storage: scan it in place
            return _long_tags_1(<const unsigned char *>PyUnicode_DATA(html),
                                PyUnicode_GET_LENGTH(html), min_length)
        html = (<str>html).encode("utf-8", "surrogatepass")
    if not isinstance(html, bytes):
        raise TypeError(f"html must be str or bytes, not {type(html).__name__}")
    if not len(<bytes>html):
        return 0
    view = html
    return _long_tags_1(&view[0], view.shape[0], min_length)


# ------------------------------------------------------------------ taming
# A page over the byte cap, or with too much in long tags, is rewritten before
# libxml2 sees it (see _fingerprinter.strip_invisible_bulk): comments go,
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
