"""Pure Python reference of ``htmlscan.head_link_tags`` (the scan behind
``fingerprint.canonical``), with byte regexes."""
from __future__ import annotations

import re

_END_OF_HEAD = re.compile(rb"</head(?![A-Za-z0-9_])|<body(?![A-Za-z0-9_])", re.IGNORECASE)
_TAG = re.compile(rb"<(link|base)(?![A-Za-z0-9_\x80-\xff])([^>]*)>", re.IGNORECASE)


def head_link_tags_py(data: bytes, limit: int) -> list[tuple[int, int]]:
    """The ``(start, end)`` of the ``<base>`` tags and of the ``<link>`` tags
    holding ``canonical`` (any case) before the end of the head of ``data[:limit]``."""
    data = data[:max(limit, 0)]
    end = _END_OF_HEAD.search(data)
    head = data if end is None else data[:end.start()]
    return [m.span() for m in _TAG.finditer(head)
            if m.group(1).lower() == b"base" or b"canonical" in m.group(2).lower()]
