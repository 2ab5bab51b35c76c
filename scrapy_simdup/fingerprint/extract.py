"""Main-content extraction from an lxml tree (read-only, one pass).

The tree is walked once, in compiled code (``scrapy_simdup._ext.htmlscan``,
over libxml2's nodes); it is never modified, so the tree Scrapy caches for
``response.css()``/``xpath()`` can be reused.

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
walker (``extract_bs4``) produces exactly the same blocks as the compiled
walk. Their pure Python references (the lxml walker, the selection, the
byte scans) are in ``tests/reference/extract.py``.
"""
from __future__ import annotations

import re

from scrapy_simdup._ext import htmlscan

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
# extract different texts. The share was chosen on the tune half of
# benchmarks/eval_quality.py (page recall and token F1 against the reference
# article bodies, also on the held-out half).
TIGHT_SHARE_NUM, TIGHT_SHARE_DEN = 7, 10


# Never visible: always skipped.
INVISIBLE_TAGS = frozenset(
    "script style noscript template head title meta link iframe frame frameset "
    "object embed applet svg math canvas video audio map area source track "
    "select option optgroup textarea input button datalist".split())
# Skipped in "main" mode: navigation, headers, footers and asides do not hold
# the main content (skipping them extracts the same text as flagging them,
# with less walking: benchmarks/eval_quality.py).
MAIN_SKIP_TAGS = frozenset(("nav", "footer", "header", "aside"))
_MAIN_INVISIBLE = INVISIBLE_TAGS | MAIN_SKIP_TAGS
# Boilerplate regions: flagged in "main" mode (see BlockBuilder).
BOILERPLATE_TAGS = frozenset("nav header footer aside form dialog menu".split())
BLOCK_TAGS = frozenset(
    "address article aside blockquote body center dd details dir div dl dt fieldset "
    "figcaption figure footer h1 h2 h3 h4 h5 h6 header hgroup hr html li main nav "
    "ol p pre section summary table tbody td tfoot th thead tr ul br caption legend".split())

# class/id words that say boilerplate: each stands between separators (start,
# end, white space, '_' or '-'), in any case; a prefix takes any word
# characters after it ("advertisement", "sponsored")
UNLIKELY_WORDS = (
    "comment", "comments", "commentlist", "disqus", "sidebar", "side-bar", "footer", "nav",
    "navbar", "navigation", "menu", "breadcrumb", "breadcrumbs", "share", "sharing", "social",
    "related", "recommended", "promo", "ad", "ads", "adslot", "cookie", "cookies", "consent",
    "newsletter", "subscribe", "subscription", "signup", "popup", "modal", "masthead",
    "widget", "pagination", "pager", "outbrain", "taboola", "skip-link", "sr-only",
    "visually-hidden", "print-only")
UNLIKELY_PREFIXES = ("advert", "sponsor")
# ... unless the label also holds one of these anywhere (any case)
LIKELY_WORDS = ("article", "content", "main", "story", "entry", "post-body", "body", "text")

UNLIKELY = re.compile(
    r"(?:^|[\s_-])(?:" + "|".join(map(re.escape, UNLIKELY_WORDS)) + "|"
    + "|".join(re.escape(p) + r"\w*" for p in UNLIKELY_PREFIXES) + r")(?:$|[\s_-])", re.I)
LIKELY = re.compile("|".join(map(re.escape, LIKELY_WORDS)), re.I)

_NEVER_UNLIKELY = frozenset(("html", "body", "article", "main"))


_label_cache: dict = {}


def visible_len(text: str) -> int:
    """Characters that are not white space: what block and link sizes count,
    so that re-indenting a page (or BeautifulSoup's whitespace handling)
    does not change which block is the main content."""
    return len("".join(text.split()))


def unlikely_label_re(label: str) -> bool:
    """``unlikely_label`` by the regular expressions (any label; cached)."""
    hit = _label_cache.get(label)
    if hit is None:
        hit = bool(UNLIKELY.search(label)) and not LIKELY.search(label)
        if len(_label_cache) > 50_000:
            _label_cache.clear()
        _label_cache[label] = hit
    return hit


#: Does a ``class``/``id`` label say boilerplate (and not content)? A
#: callable; ASCII labels are judged in compiled code (the same rule as
#: :func:`unlikely_label_re`, which judges the others).
unlikely_label = htmlscan.LabelRule(UNLIKELY_WORDS, UNLIKELY_PREFIXES, LIKELY_WORDS,
                                    unlikely_label_re)


class BlockBuilder:
    """Turns start/text/end events into text blocks and a container tree.

    Boilerplate regions (``BOILERPLATE_TAGS``, unlikely class/id) are not
    skipped while walking (a whole page is sometimes wrapped in a ``<form>``
    or a ``class="widget"``): they open a container flagged *unlikely*, and the
    selection step decides, relative to the chosen main container, which
    flagged text to drop.
    """

    __slots__ = ("mode", "texts", "nchars", "lchars", "owner", "parent", "end", "unl",
                 "stack", "cur", "parts", "part_chars", "link_chars", "link_depth",
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
        """``(text, found)``: the main content, or all block text if none found.

        Pass 1 scores only text outside unlikely regions; if that finds no main
        block (the whole page sits in a flagged wrapper), pass 2 ignores the
        flags. Either way the main text drops the blocks that lie in an unlikely
        region *inside* the chosen container (compiled ``htmlscan.main_text_raw``).
        """
        return htmlscan.main_text_raw(self.texts, self.nchars, self.lchars, self.owner, self.parent,
                                      self.end, self.unl, min_block_chars, max_link_density,
                                      min_main_chars, keep_block_chars)

    def all_text(self) -> str:
        return "\n".join(self.texts)


# BlockBuilder.main_text's defaults (min_block_chars, max_link_density,
# min_main_chars, keep_block_chars), for the compiled one-pass main text
_MAIN_TEXT_DEFAULTS = BlockBuilder.main_text.__defaults__


def scan_lxml(root, mode: str = "main", want_tags: bool = False) -> BlockBuilder:
    """Blocks of an lxml tree (compiled ``htmlscan.scan_lxml_raw``)."""
    if hasattr(root, "getroot"):
        root = root.getroot()
    b = BlockBuilder(mode, want_tags)
    (b.texts, b.nchars, b.lchars, b.owner, b.parent, b.end, b.unl, b.tags) = htmlscan.scan_lxml_raw(
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
    if mode == "main" and not want_tags and not params:
        # the fingerprinter's case: one compiled pass that decodes only the
        # text it returns (the same as the two steps below)
        lean = htmlscan.main_text_lxml(root.getroot() if hasattr(root, "getroot") else root,
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
