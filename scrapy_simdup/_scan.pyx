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
    cdef dict extra_tail = {}, extra_text = {}
    if not isinstance(root.tag, str):
        return texts, nchars, lchars, owner, parent, end, unl, tags
    for c in root.iter(etree.Comment, etree.ProcessingInstruction):
        tail = c.tail
        if not tail or c is root:
            continue
        prev = c.getprevious()
        while prev is not None and not isinstance(prev.tag, str):
            prev = prev.getprevious()
        if prev is not None:
            extra_tail[prev] = extra_tail.get(prev, "") + tail
        else:
            par = c.getparent()
            if par is not None:
                extra_text[par] = extra_text.get(par, "") + tail
    walker = etree.iterwalk(root, events=("start", "end"))
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
            if extra_text and el in extra_text:
                t = extra_text[el]
                parts.append(t)
                if link_depth:
                    link_chars += len(t)
        else:
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
                if extra_tail and el in extra_tail:
                    t = extra_tail[el]
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
