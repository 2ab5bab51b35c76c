"""Page fingerprints: HTML / Scrapy responses / text -> (value, W).

Pipeline (the same for every entry point): decode -> parse (lxml, exactly as
Scrapy/parsel do, or reuse ``response.selector.root``) -> main-content text
(``extract``) -> tokens (``tokens``) -> features + weights (``features``)
-> 64-bit weighted simhash in compiled code (``hashing``).

Fingerprints are a pure function of the page bytes and the options, so the
same page gives the same ``(value, W)`` in every run and on every machine.
The one exception is ``weighting="idf"``, which learns document frequencies
from the crawl's first pages (``idf``) and then freezes them; its table is
stored with the index and named in the version. ``Fingerprinter.version``
names the pipeline version; store it with a persisted index and refuse to
mix versions.
"""
from __future__ import annotations

import codecs
import functools
import threading

import numpy as np
from lxml import etree
from w3lib.encoding import (
    html_body_declared_encoding,
    html_to_unicode,
    http_content_type_encoding,
    read_bom,
)

from scrapy_simdup._ext import hashing, htmlscan, textfeat
from scrapy_simdup.exceptions import ParameterError, SkippedPage
from scrapy_simdup.fingerprint.extract import EXTRACTOR_VERSION, extract_lxml
from scrapy_simdup.fingerprint.features import (
    FEATURE_SETS,
    FEATURES_VERSION,
    WEIGHTINGS,
    text_token_hashes,
    weighted_features,
)
from scrapy_simdup.fingerprint.idf import DEFAULT_LEARN_PAGES, MAX_LEARN_PAGES, IdfTable
from scrapy_simdup.fingerprint.tokens import TOKENIZER_VERSION

__all__ = ["Fingerprint", "Fingerprinter", "SkippedPage", "fingerprint_html",
           "fingerprint_response", "SKIP_REASONS"]

# Chosen on the tune half by benchmarks/eval_quality.py: the best page F1 at a
# distance that stays precise in a million-page crawl (word 3-shingles plus
# spot signatures, log-tf, main content, at least 16 distinct features, at
# SIMDUP_DISTANCE 9).
DEFAULT_FEATURES = "shingles+spots"
DEFAULT_WEIGHTING = "logtf"
DEFAULT_SHINGLE_SIZE = 3
DEFAULT_MIN_FEATURES = 16
DEFAULT_MAX_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_TOKENS = 100_000
EXTRACT_MODES = ("main", "visible")
PARSERS = ("lxml", "bs4")

SKIP_REASONS = ("empty", "too_few_features", "binary", "not_html", "too_large",
                "parse_error", "decode_error", "too_deep")


class Fingerprint:
    """A page fingerprint; unpacks as ``value, W``.

    ``value`` (int in [0, 2**64)), ``W`` (float64[64] bit weights, bit ``j`` set
    iff ``W[j] >= 0``), ``n_features`` (distinct features), ``main_found``
    (main-content block found, or the visible-text fallback was used),
    ``truncated`` (the page was cut at ``max_bytes``/``max_tokens``),
    ``features`` (the distinct feature hashes, kept only with
    ``weighting="idf"`` for ``Fingerprinter.learn``).
    """

    __slots__ = ("value", "W", "n_features", "main_found", "truncated", "features")

    def __init__(self, value: int, W: np.ndarray, n_features: int,
                 main_found: bool = False, truncated: bool = False,
                 features: np.ndarray | None = None):
        self.value = value
        self.W = W
        self.n_features = n_features
        self.main_found = main_found
        self.truncated = truncated
        self.features = features

    def __iter__(self):
        yield self.value
        yield self.W

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i):
        return (self.value, self.W)[i]

    def __eq__(self, other):
        if not isinstance(other, Fingerprint):
            return NotImplemented
        return self.value == other.value and np.array_equal(self.W, other.W)

    __hash__ = None

    def __repr__(self) -> str:
        return (f"Fingerprint(value=0x{self.value:016x}, n_features={self.n_features}, "
                f"main_found={self.main_found}, truncated={self.truncated})")


# ----------------------------------------------------------------- input checks

_MAGIC = (b"%PDF", b"\x89PNG", b"GIF87a", b"GIF89a", b"\xff\xd8\xff", b"PK\x03\x04",
          b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"7z\xbc\xaf", b"RIFF", b"OggS", b"ID3",
          b"fLaC", b"\x7fELF", b"MZ", b"\x00\x00\x01\x00", b"wOFF", b"wOF2",
          b"\x00\x01\x00\x00\x00", b"\xca\xfe\xba\xbe", b"Rar!", b"\x1a\x45\xdf\xa3",
          b"ftyp", b"\x00\x00\x00")
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE,
         codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13)) + b"\x7f"


def looks_binary(head: bytes) -> bool:
    """True for bytes that are not text (magic numbers, NULs, control chars)."""
    if not head or head.startswith(_BOMS):
        return False
    if head.startswith(_MAGIC) or head[4:8] == b"ftyp":
        return True
    if head.count(b"\x00") > len(head) // 100:     # a stray NUL in a page is not binary
        return True
    n_control = len(head) - len(head.translate(None, _CONTROL))
    return n_control > len(head) * 0.05


_local = threading.local()


def _html_parser():
    parser = getattr(_local, "parser", None)
    if parser is None:
        # parsel's settings (recover, utf-8, huge_tree), plus: no comments or
        # PIs and no id hash table. Comments hold no text and their tails
        # merge into the neighbouring text, so the extracted text is identical
        # to that of parsel's tree, and parsing does less work.
        parser = _local.parser = etree.HTMLParser(
            recover=True, encoding="utf-8", huge_tree=True, collect_ids=False,
            remove_comments=True, remove_pis=True)
    return parser


# str.strip() removes these at the ends, bytes.strip() does not.
_STR_ONLY_SPACE = bytes(range(0x1C, 0x20))


def _utf8_parse_bytes(raw: bytes, encoding: str | None) -> bytes | None:
    """The bytes ``parse_html_text`` would parse for ``raw``, when w3lib's
    ``html_to_unicode`` (Scrapy's decoding) would decode it as clean UTF-8:
    then decoding and re-encoding the page can be skipped. None otherwise.

    The encoding is chosen as ``html_to_unicode`` chooses it (BOM, the given
    encoding, a ``<meta>``/XML declaration, else UTF-8); the bytes must then be
    valid UTF-8 without NULs, and their ends must strip like the text's.
    """
    if read_bom(raw)[0] is not None:
        return None
    chosen = http_content_type_encoding(f"text/html; charset={encoding}") if encoding else None
    if chosen is None:
        chosen = html_body_declared_encoding(raw)
    if chosen is not None and chosen not in ("utf-8", "utf8"):
        return None
    if b"\x00" in raw:
        return None
    body = raw.strip()
    # str.strip() also removes \x1c-\x1f and non-ASCII spaces at the ends
    if (not body or body[0] >= 0x80 or body[-1] >= 0x80 or body[0] in _STR_ONLY_SPACE
            or body[-1] in _STR_ONLY_SPACE):
        return None
    if not body.isascii() and not textfeat.utf8_valid(body):
        return None
    return body


def parse_html_text(text: str, utf8: bytes | None = None):
    """Parse decoded HTML like parsel (Scrapy's selectors) does, minus comments.

    ``utf8``: the same text as clean UTF-8 bytes (``Fingerprinter._decode``),
    which saves encoding it again."""
    body = utf8 or text.strip().replace("\x00", "").encode("utf-8", "surrogatepass") or b"<html/>"
    try:
        root = etree.fromstring(body, parser=_html_parser())
    except (etree.XMLSyntaxError, etree.ParserError, ValueError) as exc:
        raise SkippedPage("parse_error", str(exc)[:200]) from None
    if root is None:
        root = etree.fromstring(b"<html/>", parser=_html_parser())
    return root


# Skip reasons of a page without (enough) text, which may come from a tree
# that libxml2 stopped building at its depth limit: such a page is skipped as
# "too_deep" instead (parser="bs4" has no such limit).
_NO_TEXT = frozenset(("empty", "too_few_features"))
# libxml2 stops at a depth of 256, or 2048 with huge_tree (parsel's setting
# and ours); a reused tree whose last branch is this deep is parsed again to
# read the parser's log.
_DEEP_BRANCH = 255


def _depth_limit_error() -> str | None:
    """A detail naming libxml2's message if this thread's last
    ``parse_html_text`` stopped at the depth limit ("Excessive depth in
    document: 2048, use XML_PARSE_HUGE option"), else None."""
    for error in _html_parser().error_log:
        if "Excessive depth" in error.message:
            return (f"lxml stopped parsing at its nesting depth limit "
                    f"(libxml2: {error.message.strip()})")
    return None


def _last_branch_depth(root) -> int:
    """Depth of the last element of ``root`` in document order. When libxml2
    stops at its depth limit, the element it was opening is the last one
    parsed, so the tree ends in a branch as deep as the limit."""
    depth = 0
    while len(root) and depth < _DEEP_BRANCH:
        root = root[-1]
        depth += 1
    return depth


def _check_option(name, value, allowed):
    if value not in allowed:
        raise ParameterError(name, f"{name} must be one of {', '.join(map(repr, allowed))}, got {value!r}")


# What a page over max_bytes (or with too much in long tags, below) loses
# before it is parsed, and cut if still over max_bytes: comments, script and
# style bodies (their tags stay, for structure features), and every attribute
# but the four the extraction reads (class, id, hidden, aria-hidden) and the
# three that declare the encoding (charset, http-equiv, content), whose values
# over 1 KiB are emptied too. None of it is visible text, so such a page is
# fingerprinted whole when its text fits instead of by its first bytes (pages
# sharing a huge inline image or mass of small SVG paths would otherwise be
# cut to that alone and dropped as copies), and no tag keeps the thousands of
# attributes libxml2 parses in quadratic time. A page is treated so when it
# is over max_bytes, or when its tags of LONG_TAG characters or more add up
# to over HUGE_TAGS: that bounds what libxml2 may spend on the attributes of
# a page handed to it as it is (at most one HUGE_TAGS-long tag; a tag under
# LONG_TAG holds at most some 800 attributes). Pages up to HUGE_TAGS long are
# not scanned, so a typical page pays nothing.
LONG_TAG = 1 << 12
HUGE_TAGS = 1 << 17

# Of a page over max_bytes, no more than its first LOOK_FACTOR * max_bytes
# (bytes, or characters of a str) is read, tamed and cut: the work on any page
# is bounded by the setting, not by the body (a compressed body may inflate
# to a gigabyte), and no copy of a whole body is made. A page up to that long
# is fingerprinted as if there were no bound; a longer one loses text that it
# would otherwise keep only when invisible bulk (inline images, scripts, SVG,
# comments) fills more than 7/8 of its head, so that the head tames to less
# than max_bytes. 8 keeps that rare (at the default cap, text behind 28 MiB
# of inline data is still read) while taming the head stays one linear pass
# over a few times the cap.
LOOK_FACTOR = 8


def _is_blank(text) -> bool:
    """``not text.strip()`` for str or bytes, without copying ``text``
    (``isspace`` tests the same white space as ``strip`` removes)."""
    return not text or text.isspace()


def strip_invisible_bulk(html):
    """``html`` (str or bytes) tamed as described above (compiled
    ``htmlscan.tame_html``, one linear pass: no input can make it backtrack)."""
    if isinstance(html, str):
        return htmlscan.tame_html(html.encode("utf-8", "surrogatepass")).decode(
            "utf-8", "surrogatepass")
    return htmlscan.tame_html(html)


def _bs4_extraction():
    """The BeautifulSoup extraction module (``parser="bs4"``)."""
    # imported on first use: BeautifulSoup is loaded only by crawls that use it
    from scrapy_simdup.fingerprint import extract_bs4  # noqa: PLC0415
    return extract_bs4


def _scrapy_response_classes(response) -> frozenset:
    """Names of the Scrapy classes ``response`` is an instance of: the
    fingerprint layer does not import Scrapy, so ``TextResponse``,
    ``HtmlResponse`` and ``XmlResponse`` (or subclasses of them) are told
    apart by the class names in the response's MRO."""
    return frozenset(cls.__name__ for cls in type(response).__mro__
                     if cls.__module__ == "scrapy" or cls.__module__.startswith("scrapy."))


def has_text_features(features: str) -> bool:
    """Whether a ``features`` option (``"shingles+structure"``, ...) has a
    feature set made of the text (items and ``fingerprint_text`` need one)."""
    return bool({s.strip() for s in features.split("+")} - {"structure"})


class Fingerprinter:
    """Turns pages into fingerprints with one fixed set of options.

    ``features``: ``"shingles"`` (default), ``"spots"``, ``"structure"`` or a
    ``+`` combination. ``shingle_size``: words per shingle (default 2).
    ``weighting``: ``"logtf"`` (default), ``"count"``, ``"binary"`` or
    ``"idf"`` (log-tf times the IDF learned from the first ``idf_pages`` kept
    pages through :meth:`learn`; ``idf``: a saved ``IdfTable`` to go on with).
    ``extract``: ``"main"`` (main content, visible-text fallback; default) or
    ``"visible"``. ``content_xpath``/``content_css``: a selector whose matches
    are the content (overrides ``extract``; a page where it matches nothing
    falls back to ``extract``). ``min_features``: pages with fewer distinct
    features are skipped (``too_few_features``). ``parser``: ``"lxml"``
    (default) or ``"bs4"``. ``max_bytes``: larger HTML loses its invisible
    bulk and is then cut to its first ``max_bytes`` bytes
    (``on_too_large="truncate"``, default; the fingerprint says
    ``truncated``) or skipped (``"skip"``); of any page, no more than the
    first ``LOOK_FACTOR * max_bytes`` (8 x, bytes or characters of a str) is
    read at all, so the work per page is bounded by ``max_bytes``, not by the
    body (a longer page is ``truncated``). ``max_tokens`` caps the text that
    is fingerprinted. A page whose text lxml lost to its nesting depth limit
    is skipped as ``too_deep`` (``parser="bs4"`` reads it).
    """

    def __init__(self, features: str = DEFAULT_FEATURES, shingle_size: int = DEFAULT_SHINGLE_SIZE,
                 weighting: str = DEFAULT_WEIGHTING, extract: str = "main",
                 content_xpath: str | None = None, content_css: str | None = None,
                 min_features: int = DEFAULT_MIN_FEATURES, parser: str = "lxml",
                 max_bytes: int = DEFAULT_MAX_BYTES, on_too_large: str = "truncate",
                 max_tokens: int = DEFAULT_MAX_TOKENS, idf_pages: int = DEFAULT_LEARN_PAGES,
                 idf: IdfTable | None = None):
        if not isinstance(features, str) or not features:
            raise ParameterError("features",
                                 f"features must be a non-empty str such as 'shingles', got {features!r}")
        sets = tuple(s.strip() for s in features.split("+"))
        for s in sets:
            if s not in FEATURE_SETS:
                raise ParameterError("features",
                                     f"unknown feature set {s!r} in features "
                                     f"(choose from {', '.join(FEATURE_SETS)}, joined with '+')")
            if sets.count(s) > 1:
                raise ParameterError("features", f"features names {s!r} twice: {features!r}")
        if isinstance(shingle_size, bool) or not isinstance(shingle_size, int) or not 1 <= shingle_size <= 16:
            raise ParameterError("shingle_size",
                                 f"shingle_size must be an int in 1..16, got {shingle_size!r}")
        _check_option("weighting", weighting, WEIGHTINGS)
        if weighting == "idf":
            if isinstance(idf_pages, bool) or not isinstance(idf_pages, int) \
                    or not 1 <= idf_pages <= MAX_LEARN_PAGES:
                raise ParameterError("idf_pages",
                                     f"idf_pages must be an int in 1..{MAX_LEARN_PAGES}, got {idf_pages!r}")
            if idf is None:
                idf = IdfTable(idf_pages)
            elif idf.learn_pages != idf_pages:
                raise ParameterError("idf_pages",
                                     f"idf_pages is {idf_pages}, but the saved IDF table learns from "
                                     f"{idf.learn_pages} pages (set it back, or start a new table)")
        elif idf is not None:
            raise ParameterError("weighting",
                                 f"an IDF table needs weighting='idf', got weighting={weighting!r}")
        _check_option("extract", extract, EXTRACT_MODES)
        _check_option("parser", parser, PARSERS)
        _check_option("on_too_large", on_too_large, ("truncate", "skip"))
        if content_xpath is not None and content_css is not None:
            raise ParameterError("content_xpath,content_css",
                                 "content_xpath and content_css are exclusive: give one of them")
        self._content = None
        if content_css is not None:
            if not isinstance(content_css, str) or not content_css.strip():
                raise ParameterError("content_css",
                                     f"content_css must be a non-empty CSS selector, got {content_css!r}")
            # cssselect (parsel's CSS translator) is only needed for content_css
            from cssselect import HTMLTranslator  # noqa: PLC0415
            from cssselect.parser import SelectorError  # noqa: PLC0415
            try:
                xpath = HTMLTranslator().css_to_xpath(content_css)
            except SelectorError as exc:
                raise ParameterError("content_css",
                                     f"content_css is not a valid CSS selector: {exc}") from None
            self._content = etree.XPath(xpath)
        elif content_xpath is not None:
            if not isinstance(content_xpath, str) or not content_xpath.strip():
                raise ParameterError("content_xpath",
                                     f"content_xpath must be a non-empty XPath, got {content_xpath!r}")
            try:
                self._content = etree.XPath(content_xpath)
            except etree.XPathSyntaxError as exc:
                raise ParameterError("content_xpath", f"content_xpath is not a valid XPath: {exc}") from None
            # evaluated once now: an expression that cannot select nodes
            # (count(), an unknown $variable or prefix) would fail on every page
            try:
                probe = self._content(etree.fromstring("<html><body><p>x</p></body></html>"))
            except etree.XPathError as exc:
                raise ParameterError("content_xpath", f"content_xpath cannot be evaluated: {exc}") from None
            if not isinstance(probe, list):
                raise ParameterError("content_xpath",
                                     f"content_xpath must select elements, but {content_xpath!r} "
                                     f"gives a {type(probe).__name__}")
        for name, value, low in (("min_features", min_features, 1), ("max_bytes", max_bytes, 1024),
                                 ("max_tokens", max_tokens, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ParameterError(name, f"{name} must be an int >= {low}, got {value!r}")
        self.features = "+".join(sets)
        self.feature_sets = frozenset(sets)
        self.shingle_size = shingle_size
        self.weighting = weighting
        self.extract = extract
        self.content_xpath = content_xpath
        self.content_css = content_css
        self.min_features = min_features
        self.parser = parser
        self.max_bytes = max_bytes
        self.on_too_large = on_too_large
        self.max_tokens = max_tokens
        self.idf = idf
        self._want_tags = "structure" in self.feature_sets
        self._text_sets = self.feature_sets - {"structure"}   # see has_text_features

    # ----------------------------------------------------------------- identity

    @property
    def version(self) -> str:
        """Pipeline version + options: equal strings give equal fingerprints."""
        weighting = self.weighting
        if self.idf is not None:     # each table learns its own weights
            weighting += f"{self.idf.learn_pages}-{self.idf.table_id:016x}"
        return (f"simdup-fp/t{TOKENIZER_VERSION}.x{EXTRACTOR_VERSION}.f{FEATURES_VERSION}"
                f":{self.features}:k{self.shingle_size}:{weighting}:{self.extract}"
                f":{self.content_xpath or ''}:{self.content_css or ''}:{self.parser}")

    def options(self) -> dict:
        return dict(features=self.features, shingle_size=self.shingle_size,
                    weighting=self.weighting, extract=self.extract,
                    content_xpath=self.content_xpath, content_css=self.content_css,
                    min_features=self.min_features, parser=self.parser,
                    max_bytes=self.max_bytes, on_too_large=self.on_too_large,
                    max_tokens=self.max_tokens,
                    **({"idf_pages": self.idf.learn_pages} if self.idf is not None else {}))

    def state(self) -> dict:
        """JSON-serialisable state to store with an index (no learned parameters)."""
        return {"version": self.version, "options": self.options()}

    def load_state(self, state: dict) -> None:
        """Check that a stored state matches this fingerprinter (ValueError if not)."""
        if not isinstance(state, dict) or state.get("version") != self.version:
            got = state.get("version") if isinstance(state, dict) else state
            raise ValueError(f"fingerprint state is for {got!r}, this fingerprinter is {self.version!r}")

    def __repr__(self) -> str:
        return f"Fingerprinter({self.version})"

    # ----------------------------------------------------------------- decoding

    def _needs_taming(self, html) -> bool:
        # (a page shorter than HUGE_TAGS cannot hold that much: most pages
        # are not scanned at all)
        return len(html) > self.max_bytes or (len(html) > HUGE_TAGS and
                                              htmlscan.long_tag_bytes(html, LONG_TAG) > HUGE_TAGS)

    def _head(self, html):
        """``(head, cut)``: ``html`` (str, or bytes-like, returned as bytes)
        up to its first ``LOOK_FACTOR * max_bytes`` characters or bytes, and
        whether that left some out. Only the head is copied: nothing past it
        is read."""
        limit = LOOK_FACTOR * self.max_bytes
        if isinstance(html, (bytearray, memoryview)):
            view = memoryview(html)
            if view.ndim != 1 or view.itemsize != 1:
                html = bytes(view)
            else:
                return bytes(view[:limit]), view.nbytes > limit
        if len(html) > limit:
            return html[:limit], True
        return html, False

    def _tame(self, html):
        """``(html, truncated)``: a page over ``max_bytes`` or with too much in
        long tags without its invisible bulk (:func:`strip_invisible_bulk`),
        then cut at ``max_bytes`` if still over it."""
        if not self._needs_taming(html):
            return html, False
        html = strip_invisible_bulk(html)
        if len(html) > self.max_bytes:
            return html[: self.max_bytes], True
        return html, False

    def _decode(self, html, encoding, need_text: bool = True):
        """``(text, truncated, utf8)`` from str/bytes; raises SkippedPage.

        Only the page's first ``LOOK_FACTOR * max_bytes`` are read (see
        LOOK_FACTOR; a page cut there is ``truncated``). ``utf8``: the bytes
        ``parse_html_text(text)`` would parse, taken from the input when it
        is clean UTF-8 (else None); then, unless ``need_text``, the page is
        not decoded at all and ``text`` is None.
        """
        if isinstance(html, str):
            unit = "characters"
        elif isinstance(html, (bytes, bytearray, memoryview)):
            unit = "bytes"
        else:
            raise TypeError(f"html must be str or bytes, not {type(html).__name__}")
        size = html.nbytes if isinstance(html, memoryview) else len(html)
        head, cut = self._head(html)
        return self._decode_head(head, size, cut, unit, encoding, need_text)

    def _decode_head(self, html, size: int, cut: bool, unit: str, encoding, need_text: bool):
        """``_decode`` of a page's head (``_head``), ``size`` long in all."""
        too_large = size > self.max_bytes and self.on_too_large == "skip"
        # (a blank head of a longer page is "too_large" when such pages are
        # skipped: what lies past the head is not read)
        if _is_blank(html) and not (cut and too_large):
            raise SkippedPage("empty")
        if too_large:
            raise SkippedPage("too_large", f"{size} {unit}")
        html, truncated = self._tame(html)
        truncated = truncated or cut
        if unit == "characters":
            if looks_binary(html[:1024].encode("utf-8", "surrogatepass")):
                raise SkippedPage("binary")
            return html, truncated, None
        if looks_binary(html[:1024]):
            raise SkippedPage("binary")
        if encoding is not None:
            if not isinstance(encoding, str):
                raise TypeError(f"encoding must be str or None, not {type(encoding).__name__}")
            try:
                codec = codecs.lookup(encoding)
            except LookupError:
                raise SkippedPage("decode_error", f"unknown encoding {encoding!r}") from None
            if not getattr(codec, "_is_text_encoding", True):    # base64, rot13, zlib, ...
                raise SkippedPage("decode_error", f"{encoding!r} is not a text encoding")
        utf8 = _utf8_parse_bytes(html, encoding)
        if utf8 is not None and not need_text:
            return None, truncated, utf8
        content_type = f"text/html; charset={encoding}" if encoding is not None else None
        try:
            chosen, text = html_to_unicode(content_type, html)
        except (LookupError, UnicodeError) as exc:   # a <meta charset> naming no text codec
            raise SkippedPage("decode_error", str(exc)[:200]) from None
        if text.count("\ufffd") * 2 > len(text):    # e.g. latin-1 bytes read as UTF-32
            raise SkippedPage("decode_error", f"most of the page does not decode as {chosen}")
        return text, truncated, utf8

    # ----------------------------------------------------------------- text

    def _text_from_root(self, root):
        if self._content is not None:
            try:
                nodes = [n for n in self._content(root) if isinstance(n, etree._Element)]
            except etree.XPathError as exc:
                raise SkippedPage("parse_error", f"content selector failed: {exc}") from None
            if nodes:
                text, found, tags = extract_lxml(root, content_nodes=nodes, want_tags=self._want_tags)
                if self._want_tags:   # structure features describe the whole page
                    _, _, tags = extract_lxml(root, "visible", want_tags=True)
                return text, found, tags
        return extract_lxml(root, self.extract, want_tags=self._want_tags)

    def _text_from_soup(self, soup):
        extract_soup = _bs4_extraction().extract_soup
        if self._content is not None and self.content_css is not None:
            nodes = soup.select(self.content_css)
            if nodes:
                return extract_soup(soup, content_nodes=nodes, want_tags=self._want_tags)
        elif self._content is not None:
            raise ValueError("content_xpath needs parser='lxml' (BeautifulSoup has no XPath); "
                             "use content_css")
        return extract_soup(soup, self.extract, want_tags=self._want_tags)

    def _finish(self, text: str, tags, main_found: bool, truncated: bool) -> Fingerprint:
        hashes, weights, truncated2 = self._features(text, tags)
        return self._simhash(hashes, weights, main_found, truncated or truncated2)

    def _features(self, text: str, tags):
        th = text_token_hashes(text) if self._text_sets else np.empty(0, np.uint64)
        truncated = False
        if th.shape[0] > self.max_tokens:
            th, truncated = th[: self.max_tokens], True
        if not th.shape[0] and not (self._want_tags and tags):
            raise SkippedPage("empty")
        hashes, weights = weighted_features(th, self.feature_sets, self.shingle_size, tags,
                                            self.weighting, self.idf)
        return hashes, weights, truncated

    def _simhash(self, hashes, weights, main_found, truncated) -> Fingerprint:
        n = int(hashes.shape[0])
        if n < self.min_features:
            raise SkippedPage("too_few_features", f"{n} < {self.min_features}")
        value, W = hashing.simhash_hashes(hashes, weights)
        return Fingerprint(int(value), W, n, main_found, truncated,
                           hashes if self.idf is not None else None)

    def learn(self, fingerprint: Fingerprint) -> bool:
        """Let ``weighting="idf"`` learn from a page the crawl keeps (not a
        duplicate); True if the table changed (False once it is frozen, or
        with another weighting)."""
        if self.idf is None or fingerprint.features is None:
            return False
        return self.idf.learn(fingerprint.features)

    # ----------------------------------------------------------------- public

    def extract_text_html(self, html, url=None, encoding=None) -> tuple[str, bool, list]:
        """``(text, main_found, tags)``: the text the fingerprint is made of."""
        text, _, utf8 = self._decode(html, encoding, need_text=self.parser == "bs4")
        if self.parser == "bs4":
            return self._text_from_soup(_bs4_extraction().parse_soup(text))
        return self._text_from_root(parse_html_text(text, utf8))

    def features_html(self, html, url=None, encoding=None) -> tuple[np.ndarray, np.ndarray]:
        """Distinct feature hashes (uint64) and their weights (float64)."""
        text, found, tags = self.extract_text_html(html, url, encoding)
        hashes, weights, _ = self._features(text, tags)
        return hashes, weights

    def features_text(self, text: str) -> tuple[np.ndarray, np.ndarray]:
        text = self._check_text(text)
        hashes, weights, _ = self._features(text, None)
        return hashes, weights

    def fingerprint_html(self, html, url=None, encoding=None) -> Fingerprint:
        """Fingerprint an HTML page given as ``bytes`` (decoded like Scrapy
        does: BOM, ``encoding``, ``<meta charset>``, then UTF-8) or ``str``.
        ``url`` is accepted for symmetry and logging; it does not change the
        fingerprint (the same page at two URLs must match)."""
        return self._fingerprint_decoded(
            *self._decode(html, encoding, need_text=self.parser == "bs4"))

    def _fingerprint_decoded(self, text, truncated: bool, utf8) -> Fingerprint:
        """The fingerprint of ``_decode``'s ``(text, truncated, utf8)``."""
        if self.parser == "bs4":
            ptext, found, tags = self._text_from_soup(_bs4_extraction().parse_soup(text))
            return self._finish(ptext, tags, found, truncated)
        root = parse_html_text(text, utf8)
        try:
            ptext, found, tags = self._text_from_root(root)
            return self._finish(ptext, tags, found, truncated)
        except SkippedPage as exc:
            # a page with no text may have lost it to lxml's depth limit
            depth_error = _depth_limit_error() if exc.reason in _NO_TEXT else None
            if depth_error is None:
                raise
            raise SkippedPage("too_deep", depth_error) from None

    def fingerprint_soup(self, soup) -> Fingerprint:
        """Fingerprint a BeautifulSoup document the spider already holds."""
        text, found, tags = self._text_from_soup(soup)
        return self._finish(text, tags, found, False)

    def fingerprint_tree(self, root) -> Fingerprint:
        """Fingerprint an already parsed lxml tree (never modified)."""
        text, found, tags = self._text_from_root(root)
        return self._finish(text, tags, found, False)

    def fingerprint_response(self, response) -> Fingerprint:
        """Fingerprint a Scrapy response, reusing its cached selector tree.

        Non-text responses and text responses that are not HTML (XML, JSON,
        plain text) raise ``SkippedPage("not_html")``.
        """
        kinds = _scrapy_response_classes(response)
        if "TextResponse" not in kinds or "XmlResponse" in kinds:
            raise SkippedPage("not_html", type(response).__name__)
        if "HtmlResponse" not in kinds:
            ctype = response.headers.get(b"Content-Type", b"") or b""
            if b"html" not in ctype.lower():
                raise SkippedPage("not_html", ctype.decode("latin-1")[:60])
        body = response.body
        head, cut = self._head(body)     # a body over the bound: only its head is read
        if _is_blank(head) and not (cut and self.on_too_large == "skip"):
            raise SkippedPage("empty")
        if looks_binary(body[:1024]):
            raise SkippedPage("binary")
        if self._needs_taming(body):
            # the byte path (invisible bulk stripped, then cut at max_bytes or
            # skipped), even when a tree exists: the same page, the same fingerprint
            return self._fingerprint_decoded(*self._decode_head(
                head, len(body), cut, "bytes", response.encoding, self.parser == "bs4"))
        if self.parser == "bs4":
            text, found, tags = self._text_from_soup(_bs4_extraction().parse_soup(response.text))
            return self._finish(text, tags, found, False)
        root = response.selector.root
        if not isinstance(root, etree._Element):
            raise SkippedPage("not_html", "selector has no lxml tree")
        try:
            text, found, tags = self._text_from_root(root)
            return self._finish(text, tags, found, False)
        except SkippedPage as exc:
            if exc.reason not in _NO_TEXT or _last_branch_depth(root) < _DEEP_BRANCH:
                raise
        # a tree that may have been cut by lxml's depth limit (which says so
        # only in the log of the parser that built it): parse the body again,
        # as fingerprint_html does, to tell "too_deep" from a page with no text
        return self.fingerprint_html(body, url=response.url, encoding=response.encoding)

    def fingerprint_text(self, text: str) -> Fingerprint:
        """Fingerprint plain text (item fields); no extraction, same features."""
        text = self._check_text(text)
        hashes, weights, truncated = self._features(text, None)
        return self._simhash(hashes, weights, True, truncated)

    def _check_text(self, text) -> str:
        if not isinstance(text, str):
            raise TypeError(f"text must be str, not {type(text).__name__}")
        if not self._text_sets:
            raise ValueError(f"features={self.features!r} has no text features; "
                             "fingerprint_text needs 'shingles' or 'spots'")
        if not text.strip():
            raise SkippedPage("empty")
        return text


@functools.lru_cache(maxsize=32)
def _cached(items: tuple) -> Fingerprinter:
    return Fingerprinter(**dict(items))


def get_fingerprinter(**options) -> Fingerprinter:
    """A cached Fingerprinter for these options."""
    if options.get("weighting") == "idf":
        raise ValueError("weighting='idf' learns from the pages of a crawl, so a one-off "
                         "fingerprint has no table to use: make a Fingerprinter("
                         "weighting='idf') and call its learn() with the pages it keeps")
    try:
        return _cached(tuple(sorted(options.items())))
    except TypeError:        # unhashable option value: let the constructor complain
        return Fingerprinter(**options)


def fingerprint_html(html, url=None, encoding=None, **options) -> Fingerprint:
    """``value, W`` of an HTML page with the default pipeline (see Fingerprinter)."""
    return get_fingerprinter(**options).fingerprint_html(html, url=url, encoding=encoding)


def fingerprint_response(response, **options) -> Fingerprint:
    """``value, W`` of a Scrapy response, reusing its cached selector tree."""
    return get_fingerprinter(**options).fingerprint_response(response)
