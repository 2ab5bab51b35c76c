"""The index backend interface, and the in-memory backend.

A backend keeps the fingerprints of the pages (or items) kept so far, and the
mapping between the index's integer ids and the caller's keys (the page URL,
or the item id). It exposes::

    async def check_and_add(value, W, key) -> Match | None
        Look ``value`` (a 64-bit simhash, int) up with its bit weights ``W``
        (float64[64]); if a stored fingerprint is within the distance, return
        ``Match(duplicate_of=<its key>, distance=<int>)`` and store nothing;
        otherwise store ``value`` under ``key`` and return None. Within one
        process this is atomic: two concurrent copies never both get None.

    async def check_and_add_many(values, W, keys) -> list[Match | None]
        The same for a batch (``W`` of shape (n, 64)), in order: a later
        element of the batch is matched against the earlier ones too. One call
        per batch, so a networked backend can pipeline it.

    same_key(stored, key)      whether ``stored`` (a ``Match.duplicate_of``) is
                               ``key`` as the backend stores it: the page met
                               again (a revisit), not another page
    __len__() / size           number of fingerprints stored
    probes                     cumulative number of buckets probed (int), or
                               None when the backend cannot tell
    async def close()          flush/persist and release resources

Backends take plain values (an index, a URL, a key prefix, header bits...);
the Scrapy integration builds them from its settings. Their errors name the
value at fault, and :class:`ParameterError` also names the parameter, so that
a caller can say where the value came from.
"""
from __future__ import annotations

import abc
import functools
from collections.abc import Callable
from math import comb
from typing import NamedTuple

import numpy as np

from scrapy_simdup.storage.batchfile import escape_url

__all__ = ["Match", "IndexBackend", "MemoryBackend", "StatCallback"]

#: ``on_stat(name, value)``: set a counter (``"index_restored"``, ...); the
#: caller decides where it goes (the Scrapy integration: its stats collector).
StatCallback = Callable[[str, int], None]


class Match(NamedTuple):
    """The stored page a fingerprint duplicates, and the Hamming distance."""

    duplicate_of: str
    distance: int


class IndexBackend(abc.ABC):
    """Interface every index backend implements (see the module docstring)."""

    #: cumulative buckets probed by lookups, or None if unknown
    probes: int | None = None

    @abc.abstractmethod
    async def check_and_add(self, value: int, W, key: str) -> Match | None:
        ...

    async def check_and_add_many(self, values, W, keys) -> list[Match | None]:
        return [await self.check_and_add(int(v), w, k) for v, w, k in zip(values, W, keys)]

    def same_key(self, stored: str, key: str) -> bool:
        """Whether ``stored``, the key of a match, is ``key`` as this backend
        stores and returns keys."""
        return stored == key

    @abc.abstractmethod
    def __len__(self) -> int:
        ...

    @property
    def size(self) -> int:
        return len(self)

    async def close(self) -> None:  # noqa: B027 (optional hook)
        pass


@functools.lru_cache(maxsize=256)
def _psm_budget(t: int, h: int, cap) -> int:
    # flip sets of at most 8 header bits (_vosh.h VOSH_MAX_H), own header included
    total = sum(comb(t, i) for i in range(min(h, t, 8) + 1))
    return min(int(cap), total) if cap is not None else total


class MemoryBackend(IndexBackend):
    """In-process backend over a :class:`PSMIndex` or :class:`BPHSIndex`.

    ``keys`` maps the index's ids to the callers' keys (restored ones, or
    None). ``check_and_add`` never awaits between the query and the add, so
    it is atomic under the event loop.
    """

    def __init__(self, index, keys: dict[int, str] | None = None) -> None:
        self.index = index
        self.keys: dict[int, str] = {} if keys is None else keys
        # key -> stored value: a page's own entry is found even when PSM's
        # first hit is another page within the distance
        self._value_of_key: dict[str, int] = {}
        self._probes = 0

    def load(self, values, keys) -> None:
        """Add entries saved by an earlier crawl (``keys`` as the snapshot stores them)."""
        values = np.asarray(values, dtype=np.uint64)
        if not len(values):
            return
        ids = self.index.add(values)
        for i, value, key in zip(np.asarray(ids).tolist(), values.tolist(), keys):
            self.keys[int(i)] = key
            self._value_of_key[key] = int(value)

    def _own_entry(self, value: int, key: str) -> Match | None:
        """The entry stored under ``key`` (as given, or escaped as a snapshot
        keeps it) when it is within the distance of ``value``."""
        for stored_key in (key, _escaped(key)):
            stored = self._value_of_key.get(stored_key) if stored_key is not None else None
            if stored is not None:
                distance = (stored ^ int(value)).bit_count()
                if distance <= int(self.index.distance):
                    return Match(stored_key, distance)
        return None

    @property
    def probes(self) -> int | None:  # type: ignore[override]
        """Buckets probed so far: the index's own counter when it has one, else
        the sum of the per-lookup probe budgets (an upper bound: PSM-F stops at
        the first match). BPHS probes one range per table."""
        value = getattr(self.index, "probes", None)
        return int(value) if isinstance(value, (int, np.integer)) else self._probes

    def _budget(self) -> int:
        index = self.index
        if hasattr(index, "tables"):  # BPHS: one range lookup per table
            return int(index.tables)
        return _psm_budget(int(getattr(index, "header_bits", 0)),
                           int(getattr(index, "distance", 0)), getattr(index, "max_probes", None))

    def _check_and_add(self, value: int, W, key: str) -> Match | None:
        own = self._own_entry(value, key)
        if own is not None:
            return own
        self._probes += self._budget()
        hits = self.index.query(value, W, first=True)
        if hits:
            best_id, distance = min(hits, key=lambda hit: hit[1])
            return Match(self.keys.get(int(best_id), f"#{int(best_id)}"), int(distance))
        ids = self.index.add(np.array([value], dtype=np.uint64))
        self.keys[int(ids[0])] = key
        self._value_of_key[key] = int(value)
        return None

    async def check_and_add(self, value: int, W, key: str) -> Match | None:
        return self._check_and_add(value, W, key)

    def same_key(self, stored: str, key: str) -> bool:
        # keys restored from a snapshot come back as index.keys stores them
        return stored == key or stored == _escaped(key)

    async def check_and_add_many(self, values, W, keys) -> list[Match | None]:
        W = np.asarray(W, dtype=np.float64)
        return [self._check_and_add(int(v), W[i], k)
                for i, (v, k) in enumerate(zip(values, keys))]

    def __len__(self) -> int:
        return len(self.index)


def _escaped(key: str) -> str | None:
    """``key`` as a snapshot stores it, or None if it cannot be stored."""
    try:
        return escape_url(key)
    except TypeError:
        return None
