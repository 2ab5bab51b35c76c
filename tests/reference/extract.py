"""Pure Python references of the compiled extraction (``scrapy_simdup._ext.htmlscan``).

* ``walk_lxml``: the event walker that feeds an lxml tree to a
  :class:`~scrapy_simdup.fingerprint.extract.BlockBuilder`, as the
  BeautifulSoup walker does;
* ``scan_lxml_py``: the same logic inlined over ``etree.iterwalk`` (the
  reference of ``scan_lxml``);
* ``main_text_py``: the main-content selection (``BlockBuilder.main_text``);
* ``extract_lxml_py``: ``extract_lxml`` made of the two above;
* ``long_tag_bytes_py`` and ``tame_html_py``: the byte scans over raw HTML.

The tag sets, class/id verdicts and thresholds are the package's own, so a
difference is a difference of the code, never of the configuration.
"""
from __future__ import annotations

from lxml import etree

from scrapy_simdup.fingerprint.extract import (
    _MAIN_INVISIBLE,
    _NEVER_UNLIKELY,
    BLOCK_TAGS,
    BOILERPLATE_TAGS,
    INVISIBLE_TAGS,
    TIGHT_SHARE_DEN,
    TIGHT_SHARE_NUM,
    BlockBuilder,
    unlikely_label_re,
    visible_len,
)


def walk_lxml(root, builder: BlockBuilder) -> BlockBuilder:
    """Feed the events of an lxml tree (element or document) to ``builder``.

    An explicit stack (no recursion, so arbitrarily deep pages are fine);
    comments and processing instructions are skipped but their tails kept.
    """
    if hasattr(root, "getroot"):
        root = root.getroot()
    start = builder.start
    data = builder.data
    finish = builder.finish
    tag = root.tag
    if not isinstance(tag, str):
        builder.close()
        return builder
    get = root.get
    if start(tag.lower(), get("class"), get("id"),
             get("hidden") is not None or get("aria-hidden") == "true"):
        builder.close()
        return builder
    if root.text:
        data(root.text)
    elems = [root]
    iters = [iter(root)]
    while iters:
        child = next(iters[-1], None)
        if child is None:
            iters.pop()
            el = elems.pop()
            finish()
            if iters and el.tail:
                data(el.tail)
            continue
        tag = child.tag
        if not isinstance(tag, str):                 # comment, PI, entity
            if child.tail:
                data(child.tail)
            continue
        get = child.get
        if start(tag if tag.islower() else tag.lower(), get("class"), get("id"),
                 get("hidden") is not None or get("aria-hidden") == "true"):
            finish()
            if child.tail:
                data(child.tail)
            continue
        if child.text:
            data(child.text)
        if len(child):
            elems.append(child)
            iters.append(iter(child))
        else:
            finish()
            if child.tail:
                data(child.tail)
    builder.close()
    return builder


def scan_lxml_py(root, mode: str = "main", want_tags: bool = False) -> BlockBuilder:
    """``walk_lxml(root, BlockBuilder(mode, want_tags))`` inlined in one function
    over ``etree.iterwalk``: the reference of ``scan_lxml``. Comments and
    processing instructions come as ``comment``/``pi`` events; only their
    tails are text.
    """
    if hasattr(root, "getroot"):
        root = root.getroot()
    b = BlockBuilder(mode, want_tags)
    if not isinstance(root.tag, str):
        return b
    main = mode == "main"
    texts, nchars, lchars, owner = b.texts, b.nchars, b.lchars, b.owner
    parent, end, unl = b.parent, b.end, b.unl
    tags = b.tags
    kinds: list[int] = []
    push_kind = kinds.append
    pop_kind = kinds.pop
    parts: list[str] = []
    cur = 0
    link_chars = 0
    link_depth = 0
    invisible = _MAIN_INVISIBLE if main else INVISIBLE_TAGS
    blocks = BLOCK_TAGS
    boiler = BOILERPLATE_TAGS
    never = _NEVER_UNLIKELY
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
                push_kind(2)
                if tag in blocks and parts:
                    text = "".join(parts)
                    n = visible_len(text)
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
                        unlikely = unlikely_label_re(f"{cls} {eid}" if cls and eid else cls or eid)
            if unlikely or tag in blocks:
                if parts:
                    text = "".join(parts)
                    n = visible_len(text)
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
                push_kind(1)
            elif tag == "a":
                link_depth += 1
                push_kind(3)
            else:
                push_kind(0)
            t = el.text
            if t:
                parts.append(t)
                if link_depth:
                    link_chars += visible_len(t)
        elif event == "end":
            kind = pop_kind()
            if kind == 1:
                if parts:
                    text = "".join(parts)
                    n = visible_len(text)
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
                        link_chars += visible_len(t)
        else:                                  # comment / PI: only its tail is text
            t = el.tail
            if t:
                parts.append(t)
                if link_depth:
                    link_chars += visible_len(t)
    if parts:
        text = "".join(parts)
        n = visible_len(text)
        if n:
            texts.append(text)
            nchars.append(n)
            lchars.append(link_chars if link_chars < n else n)
            owner.append(cur)
    end[0] = len(parent)
    return b


# ---------------------------------------------------------------- selection

def main_text_py(b: BlockBuilder, min_block_chars: int = 40, max_link_density: float = 0.33,
                 min_main_chars: int = 200, keep_block_chars: int = 20) -> tuple[str, bool]:
    """``b.main_text(...)``: ``(text, found)``, the main content of the blocks
    of ``b``, or all block text if none found.

    Pass 1 scores only text outside unlikely regions; if that finds no main
    block (the whole page sits in a flagged wrapper), pass 2 ignores the
    flags. Either way the main text drops the blocks that lie in an unlikely
    region *inside* the chosen container.
    """
    if not b.texts:
        return "", False
    ok = [n >= min_block_chars and b.lchars[i] <= n * max_link_density
          for i, n in enumerate(b.nchars)]
    best, good = _select(b, ok, True, min_main_chars)
    if good < min_main_chars:
        best, good = _select(b, ok, False, min_main_chars)
    if good < min_main_chars:
        return "\n".join(b.texts), False
    lo, hi = best, b.end[best]
    level = b.unl[best]
    unl = b.unl
    out = []
    for i, n in enumerate(b.nchars):
        c = b.owner[i]
        if lo <= c < hi and unl[c] == level and n >= keep_block_chars and b.lchars[i] <= n * 0.5:
            out.append(b.texts[i])
    if sum(map(len, out)) < min_main_chars:
        return "\n".join(b.texts), False
    return "\n".join(out), True


def _select(b: BlockBuilder, ok, use_flags: bool, min_main_chars: int = 0) -> tuple[int, int]:
    """The main container and the content characters it holds."""
    n_cont = len(b.parent)
    good = [0] * n_cont
    bad = [0] * n_cont
    blocks = [0] * n_cont       # content blocks
    unl = b.unl
    for i, n in enumerate(b.nchars):
        c = b.owner[i]
        if ok[i] and (not use_flags or unl[c] == 0):
            good[c] += n
            blocks[c] += 1
        else:
            bad[c] += n
    parent = b.parent
    for c in range(n_cont - 1, 0, -1):     # children have larger ids
        p = parent[c]
        good[p] += good[c]
        bad[p] += bad[c]
        blocks[p] += blocks[c]
    best = 0
    best_score = good[0] - bad[0]
    for c in range(1, n_cont):
        s = good[c] - bad[c]
        if s > best_score:
            best, best_score = c, s
    end = b.end
    while True:     # narrow to the child holding most of the content (TIGHT_SHARE)
        child, top, c = -1, -1, best + 1
        while c < end[best]:     # the direct children: skip each one's subtree
            if good[c] > top:
                child, top = c, good[c]
            c = end[c]
        if child < 0 or top * TIGHT_SHARE_DEN < good[best] * TIGHT_SHARE_NUM \
                or top <= bad[child] or blocks[child] < 2 or top < min_main_chars:
            break
        best = child
    return best, good[best]


def extract_lxml_py(root, mode: str = "main", want_tags: bool = False,
                    **params) -> tuple[str, bool, list[str]]:
    """``extract_lxml(root, mode, want_tags=want_tags, **params)`` (no content
    selector) by the references: ``(text, main_found, tags)``."""
    builder = scan_lxml_py(root, mode, want_tags)
    if mode == "main":
        text, found = main_text_py(builder, **params)
    else:
        text, found = builder.all_text(), False
    return text, found, builder.tags


# ---------------------------------------------------------------- byte scans

_KEPT_ATTRIBUTES = frozenset({b"class", b"id", b"hidden", b"aria-hidden", b"charset",
                               b"http-equiv", b"content"})
_SPACE = b" \t\n\x0c\r"


def _tag_end_py(data: bytes, lt: int) -> int:
    """Index of the '>' that ends the tag at ``lt`` (-1: none); in a start
    tag a quoted attribute value (after '=') may hold '>'."""
    nxt = data[lt + 1:lt + 2]
    if not nxt or not 97 <= (nxt[0] | 0x20) <= 122:      # not a start tag
        return data.find(b">", lt)
    after_eq = False
    p, n = lt + 1, len(data)
    while p < n:
        c = data[p]
        if c == 62:                                     # '>'
            return p
        if c in (34, 39) and after_eq:                  # a quoted value
            p = data.find(data[p:p + 1], p + 1)
            if p < 0:
                return -1
            after_eq = False
        elif c == 61:                                   # '='
            after_eq = True
        elif c not in _SPACE:
            after_eq = False
        p += 1
    return -1


def _comment_end_py(data: bytes, lt: int) -> int:
    """Index of the '>' of the '-->' closing the comment at ``lt`` (-1: none)."""
    p = lt + 4
    while True:
        gt = data.find(b">", p)
        if gt < 0 or (gt - 2 >= lt + 4 and data[gt - 2:gt] == b"--"):
            return gt
        p = gt + 1


def _raw_text_py(data: bytes, lt: int) -> bytes | None:
    """b"script" or b"style" when the tag at ``lt`` starts such a raw-text body."""
    for name in (b"script", b"style"):
        if _name_is_py(data, lt + 1, name):
            return name
    return None


def long_tag_bytes_py(html, min_length: int) -> int:
    """The total length of the tags at least ``min_length`` long, outside
    script and style bodies and comments (reference of ``htmlscan.long_tag_bytes``,
    which measures a str beyond Latin-1 in UTF-8 bytes, as here)."""
    if isinstance(html, str):
        html = html.encode("utf-8" if not html.isascii() and max(html) > "\xff" else "latin-1",
                           "surrogatepass")
    total, i, n = 0, 0, len(html)
    while True:
        lt = html.find(b"<", i)
        if lt < 0:
            return total
        if html[lt + 1:lt + 4] == b"!--":
            gt = _comment_end_py(html, lt)
            if gt < 0:
                return total
            i = gt + 1
            continue
        raw = _raw_text_py(html, lt)
        gt = _tag_end_py(html, lt)
        if gt < 0:
            return total + (n - lt if n - lt >= min_length else 0)
        if gt - lt >= min_length:
            total += gt - lt
        i = gt + 1
        if raw is not None:
            i = _raw_end_py(html, i, raw)
            if i >= n:
                return total


def _raw_end_py(data: bytes, i: int, name: bytes) -> int:
    """Where the end tag of the script/style body starting at ``i`` is (len: none)."""
    while True:
        p = data.find(b"<", i)
        if p < 0:
            return len(data)
        if data[p + 1:p + 2] == b"/" and _name_is_py(data, p + 2, name):
            return p
        i = p + 1


def _name_is_py(data: bytes, at: int, name: bytes) -> bool:
    k = len(name)
    if len(data) - at <= k or data[at:at + k].lower() != name:
        return False
    c = data[at + k]
    return not (c in b"-:_" or 48 <= c <= 57 or 97 <= (c | 0x20) <= 122)


def tame_html_py(data: bytes) -> bytes:
    """Reference of ``htmlscan.tame_html``: ``data`` without comments and
    script/style bodies, start tags keeping only the attributes the
    extraction reads or that declare the encoding (values over 1 KiB emptied)."""
    out, i, n = [], 0, len(data)
    while i < n:
        lt = data.find(b"<", i)
        if lt < 0:
            out.append(data[i:])
            break
        out.append(data[i:lt])
        if data[lt + 1:lt + 4] == b"!--":
            gt = _comment_end_py(data, lt)
            if gt < 0:
                break
            i = gt + 1
            continue
        nxt = data[lt + 1:lt + 2]
        if not nxt or not 97 <= (nxt[0] | 0x20) <= 122:
            if nxt in (b"/", b"!", b"?"):
                gt = data.find(b">", lt)
                if gt < 0:
                    out.append(data[lt:])
                    break
                out.append(data[lt:gt + 1])
                i = gt + 1
            else:
                out.append(b"<")
                i = lt + 1
            continue
        gt = _tag_end_py(data, lt)
        if gt < 0:
            out.append(data[lt:])
            break
        q = lt + 1
        while q < gt and data[q] not in _SPACE and data[q] != 47:
            q += 1
        out.append(data[lt:q])
        raw = _raw_text_py(data, lt)
        slash, p = False, q
        while p < gt:
            if data[p] in _SPACE:
                p += 1
                continue
            if data[p] == 47:
                slash, p = True, p + 1
                continue
            slash, a0 = False, p
            while p < gt and data[p] not in _SPACE and data[p] not in b"=/":
                p += 1
            a1, value, q = p, None, p
            while q < gt and data[q] in _SPACE:
                q += 1
            if q < gt and data[q] == 61:
                q += 1
                while q < gt and data[q] in _SPACE:
                    q += 1
                if q < gt and data[q] in b"\"'":
                    v1 = data.find(data[q:q + 1], q + 1, gt)
                    v1 = gt if v1 < 0 else v1 + 1
                else:
                    v1 = q
                    while v1 < gt and data[v1] not in _SPACE:
                        v1 += 1
                value, p = data[q:v1], v1
            elif a1 == a0:
                p += 1
            if a1 > a0 and data[a0:a1].lower() in _KEPT_ATTRIBUTES:
                out.append(b" " + data[a0:a1])
                if value is not None:
                    out.append(b'=""' if len(value) > 1024 else b"=" + value)
        out.append(b"/>" if slash else b">")
        i = gt + 1
        if raw is not None:
            i = _raw_end_py(data, i, raw)
    return b"".join(out)
