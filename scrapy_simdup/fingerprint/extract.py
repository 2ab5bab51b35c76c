"""Main-content extraction from an lxml tree (read-only, one pass).

The tree is walked once with ``lxml.etree.iterwalk``; it is never modified,
so the tree Scrapy caches for ``response.css()``/``xpath()`` can be reused.

1. Invisible regions are skipped as whole subtrees (script, style, head,
   form controls, ``hidden``/``aria-hidden`` elements; in "main" mode also
   ``nav``, ``header``, ``footer``, ``aside``). Boilerplate regions (form, menu,
   elements whose class or id says comments/sidebar/share/related/ad/cookie/
   newsletter/..., unless it also says article/content/main/story/body, the
   usual readability exception) are *flagged*, not skipped: a whole page is
   sometimes wrapped in a ``<form>`` or a ``class="widget"``.
2. Text is cut into *blocks* at block-level tags; each block records its
   character count and how much of it is link text, and belongs to the
   innermost block element (its *container*).
3. A block is *good* (content-like) when it has at least ``min_block_chars``
   characters and a link density below ``max_link_density``; other text is
   *bad*. Scores are summed up the container tree and the main container is
   the one maximising ``good - bad`` (text density minus boilerplate).
4. The main text is every block inside the main container that is long
   enough and not link-dominated. If the main container holds fewer than
   ``min_main_chars`` good characters (no main block), the text of all
   non-boilerplate blocks is used instead (the visible text).

The event logic lives in :class:`BlockBuilder` so that the BeautifulSoup
walker (``_extract_bs4``) produces exactly the same blocks.
"""
from __future__ import annotations

import re

from lxml import etree

EXTRACTOR_VERSION = 3   # 2: block sizes count visible (non-space) characters
                        # 3: the main container is narrowed (TIGHT_SHARE)

# The main container is then narrowed: while its child with the most content
# text holds at least TIGHT_SHARE_NUM / TIGHT_SHARE_DEN of the container's
# content text, more content than other text, at least two content blocks
# (never one long paragraph alone) and enough text to count as main content
# (min_main_chars), that child is the container. A wrapper
# that also holds an author bio, a byline table or a comment section
# otherwise wins or loses against the article's own element by a few hundred
# characters, so a page and its copy with a comment block added could
# extract different texts. Chosen on the tune half of
# benchmarks/eval_quality.py (0.6, 0.7, 0.8, 0.9 and off compared): page
# recall at h = 9 0.914 -> 0.925 there (held out: 0.923 -> 0.935); token F1
# against the 181 reference article bodies median 0.962 -> 0.985, mean
# 0.926 -> 0.944.
TIGHT_SHARE_NUM, TIGHT_SHARE_DEN = 7, 10


# Never visible: always skipped.
INVISIBLE_TAGS = frozenset(
    "script style noscript template head title meta link iframe frame frameset "
    "object embed applet svg math canvas video audio map area source track "
    "select option optgroup textarea input button datalist".split())
# Skipped in "main" mode: navigation, headers, footers and asides do not hold
# the main content (measured: same token F1 on the 311 reference pages, and
# 40% less walking than flagging them).
MAIN_SKIP_TAGS = frozenset(("nav", "footer", "header", "aside"))
_MAIN_INVISIBLE = INVISIBLE_TAGS | MAIN_SKIP_TAGS
# Boilerplate regions: flagged in "main" mode (see BlockBuilder).
BOILERPLATE_TAGS = frozenset("nav header footer aside form dialog menu".split())
BLOCK_TAGS = frozenset(
    "address article aside blockquote body center dd details dir div dl dt fieldset "
    "figcaption figure footer h1 h2 h3 h4 h5 h6 header hgroup hr html li main nav "
    "ol p pre section summary table tbody td tfoot th thead tr ul br caption legend".split())

UNLIKELY = re.compile(
    r"(?:^|[\s_-])(?:comments?|commentlist|disqus|sidebar|side-?bar|footer|nav|navbar|"
    r"navigation|menu|breadcrumbs?|share|sharing|social|related|recommended|"
    r"promo|advert\w*|ads?|adslot|sponsor\w*|cookies?|consent|newsletter|subscribe|"
    r"subscription|signup|popup|modal|masthead|widget|pagination|pager|outbrain|"
    r"taboola|skip-link|sr-only|visually-hidden|print-only)(?:$|[\s_-])", re.I)
LIKELY = re.compile(r"article|content|main|story|entry|post-body|body|text", re.I)

_WS = re.compile(r"\s+")
_NEVER_UNLIKELY = frozenset(("html", "body", "article", "main"))


_label_cache: dict = {}


def visible_len(text: str) -> int:
    """Characters that are not white space: what block and link sizes count,
    so that re-indenting a page (or BeautifulSoup's whitespace handling)
    does not change which block is the main content."""
    return len("".join(text.split()))


def unlikely_label(label: str) -> bool:
    """Does a ``class``/``id`` label say boilerplate (and not content)?"""
    hit = _label_cache.get(label)
    if hit is None:
        hit = bool(UNLIKELY.search(label)) and not LIKELY.search(label)
        if len(_label_cache) > 50_000:
            _label_cache.clear()
        _label_cache[label] = hit
    return hit


class BlockBuilder:
    """Turns start/text/end events into text blocks and a container tree.

    Boilerplate regions (``BOILERPLATE_TAGS``, unlikely class/id) are not
    skipped while walking (a whole page is sometimes wrapped in a ``<form>``
    or a ``class="widget"``): they open a container flagged *unlikely*, and the
    selection step decides, relative to the chosen main container, which
    flagged text to drop.
    """

    __slots__ = ("mode", "texts", "nchars", "lchars", "owner", "parent", "end", "unl",
                 "stack", "cur", "_good", "parts", "part_chars", "link_chars", "link_depth",
                 "tags", "want_tags")

    def __init__(self, mode: str = "main", want_tags: bool = False):
        self.mode = mode
        self.texts: list[str] = []      # block texts
        self.nchars: list[int] = []     # visible (non-space) chars per block
        self.lchars: list[int] = []     # link chars per block
        self.owner: list[int] = []      # container id per block
        self.parent: list[int] = [-1]   # container parent (container 0 = root)
        self.end: list[int] = [0]       # one past the last descendant container id
        self.unl: list[int] = [0]       # unlikely containers on the path root..container
        self.stack: list[int] = []      # per open element: 0 inline, 1 block, 2 skipped, 3 link
        self.cur = 0
        self.parts: list[str] = []
        self.part_chars = 0
        self.link_chars = 0
        self.link_depth = 0
        self.want_tags = want_tags
        self.tags: list[str] = []

    def start(self, tag: str, cls: str | None, eid: str | None, hidden: bool) -> bool:
        """An element starts; returns True if its subtree must be skipped."""
        if self.want_tags:
            self.tags.append(tag + "." + cls.split(None, 1)[0] if cls and cls.strip() else tag)
        if tag in INVISIBLE_TAGS or hidden or (self.mode == "main" and tag in MAIN_SKIP_TAGS):
            self.stack.append(2)
            if tag in BLOCK_TAGS:
                self.flush()
            return True
        unlikely = False
        if self.mode == "main" and tag not in _NEVER_UNLIKELY:
            if tag in BOILERPLATE_TAGS:
                unlikely = True
            elif cls or eid:
                unlikely = unlikely_label(f"{cls} {eid}" if cls and eid else cls or eid)
        if unlikely or tag in BLOCK_TAGS:
            self.flush()
            cid = len(self.parent)
            self.parent.append(self.cur)
            self.end.append(cid + 1)
            self.unl.append(self.unl[self.cur] + unlikely)
            self.cur = cid
            self.stack.append(1)
        elif tag == "a":
            self.link_depth += 1
            self.stack.append(3)
        else:
            self.stack.append(0)
        return False

    def data(self, text: str) -> None:
        n = len(text)
        if n:
            self.parts.append(text)
            self.part_chars += n
            if self.link_depth:
                self.link_chars += visible_len(text)

    def finish(self) -> None:
        """An element ends (after its subtree, before its tail)."""
        kind = self.stack.pop()
        if kind == 1:
            self.flush()
            cid = self.cur
            self.end[cid] = len(self.parent)
            self.cur = self.parent[cid]
        elif kind == 3:
            self.link_depth -= 1

    def flush(self) -> None:
        if not self.parts:
            return
        text = "".join(self.parts)
        n = visible_len(text)
        if n:
            self.texts.append(text)
            self.nchars.append(n)
            self.lchars.append(min(self.link_chars, n))
            self.owner.append(self.cur)
        self.parts = []
        self.part_chars = 0
        self.link_chars = 0

    def close(self) -> None:
        while self.stack:
            self.finish()
        self.flush()
        self.end[0] = len(self.parent)

    # ------------------------------------------------------------------ selection

    def main_text(self, min_block_chars: int = 40, max_link_density: float = 0.33,
                  min_main_chars: int = 200, keep_block_chars: int = 20) -> tuple[str, bool]:
        """``(text, found)``: the main content, or all block text if none found
        (compiled ``_scan.main_text_raw`` if built, else ``main_text_py``)."""
        if _main_text_raw is None:
            return self.main_text_py(min_block_chars, max_link_density, min_main_chars,
                                     keep_block_chars)
        return _main_text_raw(self.texts, self.nchars, self.lchars, self.owner, self.parent,
                              self.end, self.unl, min_block_chars, max_link_density,
                              min_main_chars, keep_block_chars)

    def main_text_py(self, min_block_chars: int = 40, max_link_density: float = 0.33,
                     min_main_chars: int = 200, keep_block_chars: int = 20) -> tuple[str, bool]:
        """``(text, found)``: the main content, or all block text if none found.

        Pass 1 scores only text outside unlikely regions; if that finds no main
        block (the whole page sits in a flagged wrapper), pass 2 ignores the
        flags. Either way the main text drops the blocks that lie in an unlikely
        region *inside* the chosen container.
        """
        if not self.texts:
            return "", False
        ok = [n >= min_block_chars and self.lchars[i] <= n * max_link_density
              for i, n in enumerate(self.nchars)]
        best = self._select(ok, True, min_main_chars)
        good = self._good
        if good < min_main_chars:
            best = self._select(ok, False, min_main_chars)
            good = self._good
        if good < min_main_chars:
            return "\n".join(self.texts), False
        lo, hi = best, self.end[best]
        level = self.unl[best]
        unl = self.unl
        out = []
        for i, n in enumerate(self.nchars):
            c = self.owner[i]
            if lo <= c < hi and unl[c] == level and n >= keep_block_chars and self.lchars[i] <= n * 0.5:
                out.append(self.texts[i])
        if sum(map(len, out)) < min_main_chars:
            return "\n".join(self.texts), False
        return "\n".join(out), True

    def _select(self, ok, use_flags: bool, min_main_chars: int = 0) -> int:
        n_cont = len(self.parent)
        good = [0] * n_cont
        bad = [0] * n_cont
        blocks = [0] * n_cont       # content blocks
        unl = self.unl
        for i, n in enumerate(self.nchars):
            c = self.owner[i]
            if ok[i] and (not use_flags or unl[c] == 0):
                good[c] += n
                blocks[c] += 1
            else:
                bad[c] += n
        parent = self.parent
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
        end = self.end
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
        self._good = good[best]
        return best

    def all_text(self) -> str:
        return "\n".join(self.texts)


# BlockBuilder.main_text's defaults (min_block_chars, max_link_density,
# min_main_chars, keep_block_chars), for the compiled one-pass main text
_MAIN_TEXT_DEFAULTS = BlockBuilder.main_text.__defaults__


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
    """Pure Python fast path of ``walk_lxml(root, BlockBuilder(mode, want_tags))``.

    The same logic inlined in one function over ``etree.iterwalk`` (a C-level
    walk); the tests check that both give identical blocks on real pages.
    Comments and processing instructions come as ``comment``/``pi`` events;
    only their tails are text.
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
    label_cache = _label_cache
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
                        label = f"{cls} {eid}" if cls and eid else cls or eid
                        hit = label_cache.get(label)
                        if hit is None:
                            hit = unlikely_label(label)
                        unlikely = hit
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
    script and style bodies and comments (reference of ``_scan.long_tag_bytes``,
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
    """Reference of ``_scan.tame_html``: ``data`` without comments and
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


try:
    from scrapy_simdup._ext.htmlscan import long_tag_bytes, tame_html
    from scrapy_simdup._ext.htmlscan import main_text_lxml as _main_text_lxml
    from scrapy_simdup._ext.htmlscan import main_text_raw as _main_text_raw
    from scrapy_simdup._ext.htmlscan import scan_lxml_raw as _scan_raw
except ImportError:  # not compiled (source checkout without build): pure Python
    _scan_raw = _main_text_raw = _main_text_lxml = None
    long_tag_bytes = long_tag_bytes_py
    tame_html = tame_html_py


def scan_lxml(root, mode: str = "main", want_tags: bool = False) -> BlockBuilder:
    """Blocks of an lxml tree: compiled ``_scan`` if built, else ``scan_lxml_py``."""
    if _scan_raw is None:
        return scan_lxml_py(root, mode, want_tags)
    if hasattr(root, "getroot"):
        root = root.getroot()
    b = BlockBuilder(mode, want_tags)
    (b.texts, b.nchars, b.lchars, b.owner, b.parent, b.end, b.unl, b.tags) = _scan_raw(
        root, mode == "main", want_tags, _MAIN_INVISIBLE if mode == "main" else INVISIBLE_TAGS,
        BLOCK_TAGS, BOILERPLATE_TAGS,
        _NEVER_UNLIKELY, _label_cache, unlikely_label)
    return b


def extract_lxml(root, mode: str = "main", content_nodes=None, want_tags: bool = False,
                 **params) -> tuple[str, bool, list[str]]:
    """Text of an lxml tree: ``(text, main_found, tags)``.

    ``mode``: ``"main"`` (main-content extraction with visible-text fallback)
    or ``"visible"`` (all visible text). ``content_nodes``: elements chosen by
    a per-spider selector; their visible text is used as is.
    """
    if content_nodes is not None:
        texts = []
        tags: list[str] = []
        for node in content_nodes:
            b = scan_lxml(node, "visible", want_tags)
            texts.append(b.all_text())
            tags.extend(b.tags)
        return "\n".join(t for t in texts if t), True, tags
    if mode == "main" and not want_tags and not params and _main_text_lxml is not None:
        # the fingerprinter's case: one compiled pass that decodes only the
        # text it returns (the same as the two steps below)
        lean = _main_text_lxml(root.getroot() if hasattr(root, "getroot") else root,
                               _MAIN_INVISIBLE, BLOCK_TAGS, BOILERPLATE_TAGS,
                               _NEVER_UNLIKELY, _label_cache, unlikely_label,
                               *_MAIN_TEXT_DEFAULTS)
        if lean is not None:
            return lean[0], lean[1], []
    builder = scan_lxml(root, mode, want_tags)
    if mode == "main":
        text, found = builder.main_text(**params)
    else:
        text, found = builder.all_text(), False
    return text, found, builder.tags
