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

#: the methods whose behaviour the direct writes copy, or that read what they write
_COPIED = ("inc_value", "set_value", "get_value", "get_stats", "set_stats")


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
    attrs = _own_attributes(stats)
    if attrs is None:
        return StatWriters(stats.inc_value, stats.set_value, False)

    # (the dict is looked up on each write, as the methods do: set_stats may replace it)
    def inc(key: str, count: int = 1) -> None:
        values = attrs["_stats"]
        values[key] = values.get(key, 0) + count

    def set_(key: str, value: Any) -> None:
        attrs["_stats"][key] = value

    return StatWriters(inc, set_, True)


def _own_attributes(stats) -> dict | None:
    """The instance attributes of ``stats`` (its ``_stats`` dict among them),
    when its methods are ``StatsCollector``'s own: then writing into
    ``_stats`` is what they do."""
    cls = type(stats)
    if not isinstance(stats, StatsCollector) or any(
            getattr(cls, name, None) is not getattr(StatsCollector, name) for name in _COPIED):
        return None
    attrs = getattr(stats, "__dict__", None)
    if not isinstance(attrs, dict) or type(attrs.get("_stats")) is not dict:
        return None
    return attrs
