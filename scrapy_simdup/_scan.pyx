# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""Compiled fast path of ``scrapy_simdup._extract.scan_lxml_py``.

The same Python-object code compiled with Cython (typed counters and
locals). It must give exactly the same blocks as the pure Python version in
``_extract.py``, which the tests use as the reference.
"""
from lxml import etree


def scan_lxml_raw(root, bint main, bint want_tags, frozenset invisible, frozenset blocks,
                  frozenset boiler, frozenset never, dict label_cache, unlikely_label):
    """Returns (texts, nchars, lchars, owner, parent, end, unl, tags)."""
    cdef list texts = [], nchars = [], lchars = [], owner = []
    cdef list parent = [-1], end = [0], unl = [0], tags = [], kinds = [], parts = []
    cdef Py_ssize_t cur = 0, link_chars = 0, link_depth = 0, n, cid, kind
    cdef bint unlikely
    if not isinstance(root.tag, str):
        return texts, nchars, lchars, owner, parent, end, unl, tags
    walker = etree.iterwalk(root, events=("start", "end", "comment", "pi"))
    skip = walker.skip_subtree
    for event, el in walker:
        if event == "start":
            tag = el.tag
            cls = el.get("class")
            if want_tags:
                tags.append(tag + "." + cls.split(None, 1)[0] if cls and cls.strip() else tag)
            if tag in invisible or el.get("hidden") is not None or el.get("aria-hidden") == "true":
                skip()
                kinds.append(2)
                if tag in blocks and parts:
                    text = "".join(parts)
                    n = len(text.strip())
                    if n:
                        texts.append(text)
                        nchars.append(n)
                        lchars.append(link_chars if link_chars < n else n)
                        owner.append(cur)
                    parts = []
                    link_chars = 0
                continue
            unlikely = False
            if main and tag not in never:
                if tag in boiler:
                    unlikely = True
                else:
                    eid = el.get("id")
                    if cls or eid:
                        label = f"{cls} {eid}" if cls and eid else cls or eid
                        hit = label_cache.get(label)
                        if hit is None:
                            hit = unlikely_label(label)
                        unlikely = hit
            if unlikely or tag in blocks:
                if parts:
                    text = "".join(parts)
                    n = len(text.strip())
                    if n:
                        texts.append(text)
                        nchars.append(n)
                        lchars.append(link_chars if link_chars < n else n)
                        owner.append(cur)
                    parts = []
                    link_chars = 0
                cid = len(parent)
                parent.append(cur)
                end.append(cid + 1)
                unl.append(unl[cur] + unlikely)
                cur = cid
                kinds.append(1)
            elif tag == "a":
                link_depth += 1
                kinds.append(3)
            else:
                kinds.append(0)
            t = el.text
            if t:
                parts.append(t)
                if link_depth:
                    link_chars += len(t)
        elif event == "end":
            kind = kinds.pop()
            if kind == 1:
                if parts:
                    text = "".join(parts)
                    n = len(text.strip())
                    if n:
                        texts.append(text)
                        nchars.append(n)
                        lchars.append(link_chars if link_chars < n else n)
                        owner.append(cur)
                    parts = []
                    link_chars = 0
                end[cur] = len(parent)
                cur = parent[cur]
            elif kind == 3:
                link_depth -= 1
            if el is not root:
                t = el.tail
                if t:
                    parts.append(t)
                    if link_depth:
                        link_chars += len(t)
        else:                                  # comment / PI: only its tail is text
            t = el.tail
            if t:
                parts.append(t)
                if link_depth:
                    link_chars += len(t)
    if parts:
        text = "".join(parts)
        n = len(text.strip())
        if n:
            texts.append(text)
            nchars.append(n)
            lchars.append(link_chars if link_chars < n else n)
            owner.append(cur)
    end[0] = len(parent)
    return texts, nchars, lchars, owner, parent, end, unl, tags
