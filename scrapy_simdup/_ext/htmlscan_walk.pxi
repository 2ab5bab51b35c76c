# The tree walk: _Scanner (blocks and containers of an lxml tree) and scan_lxml_raw.

cdef class _Scanner:
    """State of one scan; see ``scan_lxml_raw``."""
    cdef bint main, want_tags
    cdef frozenset invisible, blocks, boiler, never
    cdef dict label_cache
    cdef object unlikely_label
    cdef LabelRule rule         # unlikely_label when it is a LabelRule (else None)
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
                    if verdict < 0 and self.rule is not None:
                        verdict = self.rule.judge_ascii(<const unsigned char *>key, klen)
                        if verdict >= 0:
                            _label_keep(key, klen, kh, verdict)
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
    s.rule = unlikely_label if isinstance(unlikely_label, LabelRule) else None
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
