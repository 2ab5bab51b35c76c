"""Per-page counters written into the crawler's stats, at the cost of a dict write.

Scrapy's ``StatsCollector`` routes every attribute look-up through a
``__getattribute__`` hook and wraps its methods to warn about a deprecated
``spider`` argument: one ``inc_value`` costs several microseconds, and the
plugin writes a few counters per page. When the collector is one whose
writing methods are ``StatsCollector``'s own (Scrapy's default
``MemoryStatsCollector`` is), :func:`stat_writers` writes into the dict those
methods write into, the same way; any other collector (``DummyStatsCollector``,
one that sends stats elsewhere) gets its own methods called. Either way the
stats are live: a value written is there for the next reader.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from scrapy.statscollectors import StatsCollector

__all__ = ["StatWriters", "stat_writers"]

#: the methods whose behaviour the direct writes copy
_COPIED = ("inc_value", "set_value", "get_stats", "set_stats")


class StatWriters:
    """``inc(key, count=1)`` and ``set(key, value)`` of one stats collector."""

    __slots__ = ("inc", "set", "direct")

    def __init__(self, inc: Callable[..., None], set_: Callable[[str, Any], None],
                 direct: bool) -> None:
        self.inc = inc
        self.set = set_
        #: whether they write into the collector's dict (else call its methods)
        self.direct = direct


def stat_writers(stats) -> StatWriters:
    """The cheapest writers of ``stats`` that do what its ``inc_value`` and
    ``set_value`` do."""
    live = _live_dict(stats)
    if live is None:
        return StatWriters(stats.inc_value, stats.set_value, False)

    def inc(key: str, count: int = 1) -> None:
        live[key] = live.get(key, 0) + count

    def set_(key: str, value: Any) -> None:
        live[key] = value

    return StatWriters(inc, set_, True)


def _live_dict(stats) -> dict | None:
    """The dict ``stats`` keeps its values in, when its writing methods are
    ``StatsCollector``'s own (so that writing into it is what they do)."""
    cls = type(stats)
    if not isinstance(stats, StatsCollector) or any(
            getattr(cls, name, None) is not getattr(StatsCollector, name) for name in _COPIED):
        return None
    live = stats.get_stats()
    # (the same dict twice: the collector's own, not a copy)
    return live if type(live) is dict and live is stats.get_stats() else None
