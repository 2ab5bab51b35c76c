"""Trap budgets: URL patterns that keep producing near-duplicates.

A *pattern* is a URL's host, its path with every run of digits generalised
to ``N``, and the sorted names of its query parameters (``/calendar/N/N``,
``/shop?color&size``). Once a pattern has produced ``budget`` checked pages
of which at least ``min_share`` were near-duplicates, it is *cut*: the
integration drops (or deprioritises) its further requests. A cut is final for
the crawl. Memory is bounded by ``max_patterns`` (least recently seen first).
"""
from __future__ import annotations

import re
from collections import OrderedDict
from urllib.parse import urlsplit

__all__ = ["PatternBudget", "pattern_of"]

_DIGITS = re.compile(r"\d+")


def pattern_of(url: str) -> str | None:
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if not parts.netloc:
        return None
    names = sorted({p.split("=", 1)[0] for p in parts.query.split("&") if p})
    path = _DIGITS.sub("N", parts.path or "/")
    return (f"{parts.scheme.lower()}://{parts.netloc.lower()}{path}"
            + ("?" + "&".join(_DIGITS.sub("N", n) for n in names) if names else ""))


class PatternBudget:
    """Counts per pattern: ``[pages, near-duplicates, requests cut]``."""

    def __init__(self, budget: int, min_share: float = 0.8, max_patterns: int = 10_000):
        self.budget = budget
        self.min_share = min_share
        self.max_patterns = max_patterns
        self.counts: OrderedDict[str, list[int]] = OrderedDict()
        self.cut: set[str] = set()

    def observe(self, url: str, duplicate: bool) -> str | None:
        """A checked page; returns its pattern when this page cut it."""
        pattern = pattern_of(url)
        if pattern is None or pattern in self.cut:
            return None
        counts = self.counts.get(pattern)
        if counts is None:
            counts = self.counts[pattern] = [0, 0, 0]
            if len(self.counts) > self.max_patterns:
                old, _ = self.counts.popitem(last=False)
                self.cut.discard(old)
        else:
            self.counts.move_to_end(pattern)
        counts[0] += 1
        counts[1] += bool(duplicate)
        if counts[0] >= self.budget and counts[1] >= self.min_share * counts[0]:
            self.cut.add(pattern)
            return pattern
        return None

    def over_budget(self, url: str) -> str | None:
        """The cut pattern of ``url`` (counted), or None."""
        if not self.cut:
            return None
        pattern = pattern_of(url)
        if pattern in self.cut:
            self.counts[pattern][2] += 1
            return pattern
        return None
