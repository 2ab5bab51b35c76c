"""The URL a page declares canonical: ``<link rel="canonical" href="...">`` in
its head, else an HTTP ``Link: <...>; rel="canonical"`` header.

Read from the first :data:`HEAD_BYTES` of the body with a small scan of the
``<link>`` and ``<base>`` tags (no parse of the page: a huge page costs no
more than a small one), resolved against ``<base href>`` and the page's URL
as a browser would. Only ``http``/``https`` URLs count; anything else is
None.
"""
from __future__ import annotations

import codecs
import html
import re
from urllib.parse import urljoin, urlsplit

__all__ = ["declared_canonical", "HEAD_BYTES"]

#: how much of the body is searched (a head is rarely longer)
HEAD_BYTES = 256 * 1024
#: longer hrefs are not URLs a page declares on purpose
MAX_URL = 4096

_TAG = re.compile(r"<(link|base)\b([^>]*)>", re.IGNORECASE)
_END_OF_HEAD = re.compile(r"</head\b|<body\b", re.IGNORECASE)
_END_OF_HEAD_BYTES = re.compile(rb"</head\b|<body\b", re.IGNORECASE)
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


def _decode(body: bytes, encoding: str | None) -> str:
    """The head of ``body`` (at most its first HEAD_BYTES) as text."""
    try:
        name = codecs.lookup(encoding or "utf-8").name
    except LookupError:
        name = "utf-8"
    head = None
    if not name.startswith(("utf-16", "utf-32")):
        # ASCII-compatible: the head ends at the same tag in the bytes, and
        # only the head is copied and decoded (a page's body is most of it)
        end = _END_OF_HEAD_BYTES.search(body, 0, HEAD_BYTES)
        if end is not None:
            head = body[:end.end()]
    return (body[:HEAD_BYTES] if head is None else head).decode(name, "replace")


def declared_canonical(body: bytes | str, url: str, encoding: str | None = None,
                       link_header: bytes | str | None = None) -> str | None:
    """The canonical URL ``body`` (the page at ``url``, in ``encoding``)
    declares, or its ``Link`` header; None when neither declares one."""
    text = body[:HEAD_BYTES] if isinstance(body, str) else _decode(body, encoding)
    end = _END_OF_HEAD.search(text)
    if end is not None:
        text = text[:end.start()]
    base = url
    found = None
    for m in _TAG.finditer(text):
        is_base = m.group(1).lower() == "base"
        if not is_base and (found is not None or "canonical" not in m.group(2).lower()):
            continue        # most <link>s are stylesheets and icons
        attrs = _attributes(m.group(2))
        if is_base:
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
