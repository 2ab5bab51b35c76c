# class/id labels: the C cache of their verdicts and the text of an attribute.

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
