"""The URL a page declares canonical: ``<link rel="canonical" href="...">`` in
its head, else an HTTP ``Link: <...>; rel="canonical"`` header.

Read from the first :data:`HEAD_BYTES` of the body without parsing the page
(a huge page costs no more than a small one): a compiled scan
(``htmlscan.head_link_tags``) finds the ``<base>`` tags and the ``<link>``
tags that mention ``canonical`` up to the end of the head, and only their
attributes are decoded and read. The URL is resolved against ``<base href>``
and the page's URL as a browser would. Only ``http``/``https`` URLs count;
anything else is None.
"""
from __future__ import annotations

import codecs
import functools
import html
import re
from urllib.parse import urljoin, urlsplit

from scrapy_simdup._ext import htmlscan

__all__ = ["declared_canonical", "HEAD_BYTES"]

#: how much of the body is searched (a head is rarely longer)
HEAD_BYTES = 256 * 1024
#: longer hrefs are not URLs a page declares on purpose
MAX_URL = 4096

_ATTR = re.compile(r"""([^\s"'>/=]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?""")
_LINK_VALUE = re.compile(r"<([^>]*)>((?:\s*;\s*[^;,]*)*)")
_PARAM = re.compile(r"""\s*;\s*([^\s=;,]+)\s*=\s*(?:"([^"]*)"|([^\s;,]*))""")


def _attributes(text: str) -> dict[str, str]:
    attrs: dict[str, str] = {}
    for m in _ATTR.finditer(text):
        name = m.group(1).lower()
        if name not in attrs:
            value = next((g for g in m.group(2, 3, 4) if g is not None), "")
            attrs[name] = html.unescape(value)
    return attrs


def _is_canonical(rel: str) -> bool:
    return "canonical" in rel.lower().split()


def _resolve(href: str, base: str) -> str | None:
    href = href.strip()
    if not href or len(href) > MAX_URL:
        return None
    try:
        url = urljoin(base, href)
        scheme = urlsplit(url).scheme
    except ValueError:          # a malformed URL (an unbalanced IPv6 bracket, ...)
        return None
    return url if scheme in ("http", "https") else None


@functools.lru_cache(maxsize=64)
def _codec_name(encoding: str) -> str:
    try:
        return codecs.lookup(encoding).name
    except LookupError:
        return "utf-8"


def _head_bytes(body: bytes | str, encoding: str | None) -> tuple[bytes, int, str]:
    """``(data, limit, codec)``: bytes in an ASCII-compatible ``codec`` whose
    first ``limit`` bytes hold the head (a str, or a page in UTF-16/32, is
    re-encoded in UTF-8: only its first HEAD_BYTES characters)."""
    if isinstance(body, str):
        data = body[:HEAD_BYTES].encode("utf-8", "surrogatepass")
        return data, len(data), "utf-8"
    name = _codec_name(encoding or "utf-8")
    if name.startswith(("utf-16", "utf-32")):
        data = body[:HEAD_BYTES].decode(name, "replace").encode("utf-8", "surrogatepass")
        return data, len(data), "utf-8"
    return body, HEAD_BYTES, name


def declared_canonical(body: bytes | str, url: str, encoding: str | None = None,
                       link_header: bytes | str | None = None) -> str | None:
    """The canonical URL ``body`` (the page at ``url``, in ``encoding``)
    declares, or its ``Link`` header; None when neither declares one."""
    data, limit, codec = _head_bytes(body, encoding)
    base = url
    found = None
    for start, end in htmlscan.head_link_tags(data, limit):
        # only the attributes are decoded: in an ASCII-compatible encoding
        # '<' and '>' are never part of another character
        attrs = _attributes(data[start + 5:end - 1].decode(codec, "replace"))
        if data[start + 1:start + 5].lower() == b"base":
            if "href" in attrs and base is url:     # the first <base href> counts
                base = _resolve(attrs["href"], url) or url
        elif found is None and _is_canonical(attrs.get("rel", "")) and "href" in attrs:
            found = attrs["href"]
    if found is not None:
        resolved = _resolve(found, base)
        if resolved is not None:
            return resolved
    if link_header:
        if isinstance(link_header, bytes):
            link_header = link_header.decode("latin-1")
        for m in _LINK_VALUE.finditer(link_header):
            for p in _PARAM.finditer(m.group(2)):
                if p.group(1).lower() == "rel" and _is_canonical(p.group(2) or p.group(3) or ""):
                    return _resolve(m.group(1), url)
    return None
