"""Page bytes or str to the lxml tree a fingerprint is made from.

What of a page is read at all (``LOOK_FACTOR``), binary sniffing, taming of
the invisible bulk of a page over ``max_bytes`` (``strip_invisible_bulk``),
decoding as Scrapy does (w3lib; clean UTF-8 is parsed from its own bytes),
parsing as parsel does, and telling a tree lxml cut at its depth limit.
"""
from __future__ import annotations

import codecs
import threading

from lxml import etree
from w3lib.encoding import (
    html_body_declared_encoding,
    html_to_unicode,
    http_content_type_encoding,
    read_bom,
)

from scrapy_simdup._ext import htmlscan, textfeat
from scrapy_simdup.exceptions import SkippedPage

# ----------------------------------------------------------------- input checks

_MAGIC = (b"%PDF", b"\x89PNG", b"GIF87a", b"GIF89a", b"\xff\xd8\xff", b"PK\x03\x04",
          b"\x1f\x8b", b"BZh", b"\xfd7zXZ", b"7z\xbc\xaf", b"RIFF", b"OggS", b"ID3",
          b"fLaC", b"\x7fELF", b"MZ", b"\x00\x00\x01\x00", b"wOFF", b"wOF2",
          b"\x00\x01\x00\x00\x00", b"\xca\xfe\xba\xbe", b"Rar!", b"\x1a\x45\xdf\xa3",
          b"ftyp", b"\x00\x00\x00")
_MAGIC_NO_NUL = tuple(m for m in _MAGIC if not m.startswith(b"\x00"))
_BOMS = (codecs.BOM_UTF8, codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE,
         codecs.BOM_UTF32_LE, codecs.BOM_UTF32_BE)
_CONTROL = bytes(c for c in range(32) if c not in (9, 10, 12, 13)) + b"\x7f"


def looks_binary(head: bytes, encoding: str | None = None) -> bool:
    """True for bytes that are not text (magic numbers, NULs, control chars).
    In a declared UTF-16/32 ``encoding`` (every other byte of ASCII text is
    NUL) the decoded text is tested instead."""
    if not head or head.startswith(_BOMS):
        return False
    wide = wide_encoding(head, encoding)
    if wide is None:
        if head.startswith(_MAGIC) or head[4:8] == b"ftyp":
            return True
    else:
        # (UTF-32-BE text starts with NULs, as some magic numbers do)
        if head.startswith(_MAGIC_NO_NUL):
            return True
        head = _decode_wide(head, wide).encode("utf-8", "surrogatepass")
    if head.count(b"\x00") > len(head) // 100:     # a stray NUL in a page is not binary
        return True
    n_control = len(head) - len(head.translate(None, _CONTROL))
    return n_control > len(head) * 0.05


# what w3lib (Scrapy's decoding) resolves an encoding to, for the encodings
# in which ASCII text has NULs
_WIDE = frozenset(("utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-le", "utf-32-be"))


def wide_encoding(raw: bytes, encoding: str | None) -> str | None:
    """The UTF-16/32 encoding ``raw`` is decoded in as Scrapy decodes it
    (w3lib's ``html_to_unicode``: a byte-order mark first, then the declared
    ``encoding``), else None."""
    bom = read_bom(raw)[0]
    if bom is not None:
        return bom if bom in _WIDE else None
    if not encoding or not isinstance(encoding, str):
        return None
    declared = http_content_type_encoding(f"text/html; charset={encoding}")
    return declared if declared in _WIDE else None


def _decode_wide(raw: bytes, encoding: str) -> str:
    """``raw`` decoded as Scrapy decodes it in ``encoding`` (UTF-16/32, from
    :func:`wide_encoding`); a code unit cut at the end of ``raw`` is left
    out."""
    unit = 4 if "32" in encoding else 2
    raw = raw[:len(raw) - len(raw) % unit]
    return html_to_unicode(f"text/html; charset={encoding}", raw)[1]


# ----------------------------------------------------------------- bounds and taming

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


def is_blank(text) -> bool:
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


def needs_taming(html, max_bytes: int) -> bool:
    """Whether ``html`` is over ``max_bytes`` or has too much in long tags."""
    # (a page shorter than HUGE_TAGS cannot hold that much: most pages
    # are not scanned at all)
    return len(html) > max_bytes or (len(html) > HUGE_TAGS and
                                     htmlscan.long_tag_bytes(html, LONG_TAG, HUGE_TAGS) > HUGE_TAGS)


def page_head(html, max_bytes: int):
    """``(head, cut)``: ``html`` (str, or bytes-like, returned as bytes)
    up to its first ``LOOK_FACTOR * max_bytes`` characters or bytes, and
    whether that left some out. Only the head is copied: nothing past it
    is read."""
    limit = LOOK_FACTOR * max_bytes
    if isinstance(html, (bytearray, memoryview)):
        view = memoryview(html)
        if view.ndim != 1 or view.itemsize != 1:
            html = bytes(view)
        else:
            return bytes(view[:limit]), view.nbytes > limit
    if len(html) > limit:
        return html[:limit], True
    return html, False


def tame(html, max_bytes: int):
    """``(html, truncated)``: a page over ``max_bytes`` or with too much in
    long tags without its invisible bulk (:func:`strip_invisible_bulk`),
    then cut at ``max_bytes`` if still over it."""
    if not needs_taming(html, max_bytes):
        return html, False
    html = strip_invisible_bulk(html)
    if len(html) > max_bytes:
        return html[:max_bytes], True
    return html, False


# ----------------------------------------------------------------- decoding

def decode_page(html, encoding, *, max_bytes: int, on_too_large: str, need_text: bool = True):
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
    head, cut = page_head(html, max_bytes)
    return decode_head(head, size, cut, unit, encoding, max_bytes=max_bytes,
                       on_too_large=on_too_large, need_text=need_text)


def decode_head(html, size: int, cut: bool, unit: str, encoding, *, max_bytes: int,
                on_too_large: str, need_text: bool):
    """``decode_page`` of a page's head (``page_head``), ``size`` long in all."""
    too_large = size > max_bytes and on_too_large == "skip"
    # (a blank head of a longer page is "too_large" when such pages are
    # skipped: what lies past the head is not read)
    if is_blank(html) and not (cut and too_large):
        raise SkippedPage("empty")
    if too_large:
        raise SkippedPage("too_large", f"{size} {unit}")
    if unit == "bytes":
        wide = wide_encoding(html, encoding)
        if wide is not None:
            # UTF-16/32 (a BOM or declared): decoded first, then tamed and
            # checked as text (its ASCII bytes are NUL-separated)
            if looks_binary(html[:1024], wide):
                raise SkippedPage("binary")
            html, unit = _decode_wide(html, wide), "characters"
            _check_decoded(html, wide)
    html, truncated = tame(html, max_bytes)
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
    _check_decoded(text, chosen)
    return text, truncated, utf8


def _check_decoded(text: str, chosen: str) -> None:
    """A SkippedPage("decode_error") when most of ``text`` did not decode."""
    if text.count("\ufffd") * 2 > len(text):    # e.g. latin-1 bytes read as UTF-32
        raise SkippedPage("decode_error", f"most of the page does not decode as {chosen}")


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


# ----------------------------------------------------------------- parsing

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


def parse_html_text(text: str, utf8: bytes | None = None):
    """Parse decoded HTML like parsel (Scrapy's selectors) does, minus comments.

    ``utf8``: the same text as clean UTF-8 bytes (``decode_page``),
    which saves encoding it again."""
    body = utf8 or text.strip().replace("\x00", "").encode("utf-8", "surrogatepass") or b"<html/>"
    try:
        root = etree.fromstring(body, parser=_html_parser())
    except (etree.XMLSyntaxError, etree.ParserError, ValueError) as exc:
        raise SkippedPage("parse_error", str(exc)[:200]) from None
    if root is None:
        root = etree.fromstring(b"<html/>", parser=_html_parser())
    return root


# ----------------------------------------------------------------- lxml's depth limit

# Skip reasons of a page without (enough) text, which may come from a tree
# that libxml2 stopped building at its depth limit: such a page is skipped as
# "too_deep" instead (parser="bs4" has no such limit).
NO_TEXT = frozenset(("empty", "too_few_features"))
# libxml2 stops at a depth of 256, or 2048 with huge_tree (parsel's setting
# and ours); a reused tree whose last branch is this deep is parsed again to
# read the parser's log.
DEEP_BRANCH = 255


def depth_limit_error() -> str | None:
    """A detail naming libxml2's message if this thread's last
    ``parse_html_text`` stopped at the depth limit ("Excessive depth in
    document: 2048, use XML_PARSE_HUGE option"), else None."""
    for error in _html_parser().error_log:
        if "Excessive depth" in error.message:
            return (f"lxml stopped parsing at its nesting depth limit "
                    f"(libxml2: {error.message.strip()})")
    return None


def last_branch_depth(root) -> int:
    """Depth of the last element of ``root`` in document order. When libxml2
    stops at its depth limit, the element it was opening is the last one
    parsed, so the tree ends in a branch as deep as the limit."""
    depth = 0
    while len(root) and depth < DEEP_BRANCH:
        root = root[-1]
        depth += 1
    return depth
