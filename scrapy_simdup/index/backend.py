"""The index backend interface, and the in-memory backend.

A backend keeps the fingerprints of the pages (or items) kept so far, and the
mapping between the index's integer ids and the caller's keys (the page URL,
or the item id). It exposes::

    async def check_and_add(page, key) -> Match | None
        Look ``page`` up: any object with the attributes of a
        :class:`~scrapy_simdup.Fingerprint` that an index uses (``value``,
        ``W``, ``value2``, ``W2``, ``sketch``: the two 64-bit keys, their bit
        weights and the verification sketch; :class:`Page` builds one from
        plain values). If a stored page is a verified match (within the
        distance of either key, its sketch agreeing enough), return
        ``Match(duplicate_of=<its key>, distance=<int>, similarity=<float>)``
        and store nothing; otherwise store the page under ``key`` and return
        None. Within one process this is atomic: two concurrent copies never
        both get None.

    async def check_and_add_many(pages, keys) -> list[Match | None]
        The same for a batch, in order: a later element of the batch is
        matched against the earlier ones too. One call per batch, so a
        networked backend can pipeline it.

    same_key(stored, key)      whether ``stored`` (a ``Match.duplicate_of``) is
                               ``key`` as the backend stores it: the page met
                               again (a revisit), not another page
    note_checked(key)          this process looked a page up under ``key``
    checked_here(key)          whether it did (a second match under one key in
                               one crawl is a copy, not a revisit)
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
from collections.abc import Callable
from typing import NamedTuple

import numpy as np

from scrapy_simdup.index.columns import ChunkedColumn, KeyColumn, KeySet
from scrapy_simdup.storage.batchfile import escape_url

__all__ = ["Match", "Page", "IndexBackend", "MemoryBackend", "StatCallback"]

#: ``on_stat(name, value)``: set a counter (``"index_restored"``, ...); the
#: caller decides where it goes (the Scrapy integration: its stats collector).
StatCallback = Callable[[str, int], None]


class Match(NamedTuple):
    """The stored page a page duplicates: its key, the smaller Hamming
    distance of the two keys, and the estimated similarity of the pages'
    feature sets (``fingerprint.sketch.similarity``)."""

    duplicate_of: str
    distance: int
    similarity: float = 1.0


class Page(NamedTuple):
    """What an index looks a page up by (a :class:`Fingerprint` has the same
    attributes): the two keys, their bit weights (float64[64] or None) and the
    ``SKETCH_BYTES``-byte sketch."""

    value: int
    W: object
    value2: int
    W2: object
    sketch: bytes


class IndexBackend(abc.ABC):
    """Interface every index backend implements (see the module docstring)."""

    #: cumulative buckets probed by lookups, or None if unknown
    probes: int | None = None
    #: the share of near-duplicates a look-up finds at the index's current size
    #: and budget (``VerifiedIndex.expected_recall``), or None
    expected_recall: float | None = None
    #: the keys of note_checked (a backend with its own record overrides both)
    _checked: KeySet | None = None

    @abc.abstractmethod
    async def check_and_add(self, page, key: str) -> Match | None:
        ...

    async def check_and_add_many(self, pages, keys) -> list[Match | None]:
        return [await self.check_and_add(page, k) for page, k in zip(pages, keys)]

    def same_key(self, stored: str, key: str) -> bool:
        """Whether ``stored``, the key of a match, is ``key`` as this backend
        stores and returns keys."""
        return stored == key

    def note_checked(self, key: str) -> None:
        """Remember that this process looked a page up under ``key``."""
        if self._checked is None:
            self._checked = KeySet()
        self._checked.add(key)

    def checked_here(self, key: str) -> bool:
        """Whether :meth:`note_checked` was told ``key``."""
        return self._checked is not None and key in self._checked

    @abc.abstractmethod
    def __len__(self) -> int:
        ...

    @property
    def size(self) -> int:
        return len(self)

    async def close(self) -> None:  # noqa: B027 (optional hook)
        pass


class MemoryBackend(IndexBackend):
    """In-process backend over a :class:`VerifiedIndex`.

    ``keys`` maps the index's ids to the callers' keys (restored ones, or
    None). ``check_and_add`` never awaits between the query and the add, so
    it is atomic under the event loop.

    A near-duplicate joins the index too, under its own key: a loose copy
    that resembles an earlier copy more than the first one is still found
    (copies of one story drift apart from site to site), and a match names
    the stored page it resembles most. A key is stored once: met again, a
    kept page is a revisit (its own entry matches) and a near-duplicate is
    matched against the other pages again, never against itself.
    """

    def __init__(self, index) -> None:
        self.index = index
        # by row: the key stored (and from a key its newest row), and
        # _KEPT / _CHECKED; compact, for long crawls (the index keeps the two
        # keys by row)
        self.keys = KeyColumn()
        self._flags = ChunkedColumn(np.uint8)
        # what was stored since the last take_stored(), when logging
        self._stored_log: list | None = None
        # (key, _entry(key)) of the last key looked up or stored: a check looks
        # its key up again right after (note_checked, checked_here)
        self._last_entry: tuple | None = None

    def log_stored(self) -> None:
        """Keep what is stored from now on for :meth:`take_stored` (a snapshot writer)."""
        if self._stored_log is None:
            self._stored_log = []

    def take_stored(self) -> list[tuple[int, int, bytes, str, bool]]:
        """``(value, value2, sketch, key, kept)`` of each page stored since the
        last call, in order; ``kept``: it matched nothing."""
        if self._stored_log is None:
            return []
        taken, self._stored_log = self._stored_log, []
        return taken

    def put_back_stored(self, taken: list) -> None:
        """Return what :meth:`take_stored` gave (its snapshot failed)."""
        if self._stored_log is not None:
            self._stored_log = list(taken) + self._stored_log

    @property
    def stored_pending(self) -> int:
        return len(self._stored_log or ())

    def load(self, values, values2, sketches, keys, kept=None) -> None:
        """Add entries saved by an earlier crawl (``keys`` as the snapshot
        stores them; ``kept``: which were kept pages, all when None)."""
        if not len(keys):
            return
        self._last_entry = None
        ids = self.index.add(values, values2, sketches)
        flags = np.full(len(keys), _KEPT, np.uint8) if kept is None else \
            np.asarray(kept, dtype=bool).astype(np.uint8) * _KEPT
        for i, key in zip(np.asarray(ids).tolist(), keys):
            self.keys[i] = key
        self._fill(int(ids[0]), flags)

    def _fill(self, first: int, flags) -> None:
        """The flags of rows ``first..`` (rows before it that were added to
        the index directly get zeros)."""
        column = self._flags
        if column.n < first:
            column.extend(np.zeros(first - column.n, column.dtype))
        if len(flags) == 1:      # a crawl's page
            column.append(flags[0])
        else:
            column.extend(np.asarray(flags))

    def _entry(self, key: str):
        """``(stored key, (row, value, value2, kept))`` of the page stored under
        ``key`` as given or as a snapshot keeps it, or ``(None, None)``."""
        last = self._last_entry
        if last is not None and last[0] == key:
            return last[1]
        found = None, None
        escaped = _escaped(key)
        for stored_key in (key,) if escaped == key else (key, escaped):
            row = self.keys.row_of(stored_key) if stored_key is not None else None
            if row is not None and row < self._flags.n:
                keys = self.index.keys_of(row)
                found = stored_key, (row, *keys, bool(self._flags[row] & _KEPT))
                break
        self._last_entry = (key, found)
        return found

    def note_checked(self, key: str) -> None:
        _, entry = self._entry(key)
        if entry is None:           # (not stored: never after a check)
            super().note_checked(key)
        else:
            self._flags[entry[0]] = self._flags[entry[0]] | _CHECKED

    def checked_here(self, key: str) -> bool:
        _, entry = self._entry(key)
        if entry is None:
            return super().checked_here(key)
        return bool(self._flags[entry[0]] & _CHECKED)

    @property
    def expected_recall(self) -> float | None:  # type: ignore[override]
        return self.index.expected_recall

    @property
    def probes(self) -> int | None:  # type: ignore[override]
        """Buckets probed so far by the index's look-ups."""
        return int(self.index.probes)

    def _check_and_add(self, page, key: str) -> Match | None:
        stored_key, entry = self._entry(key)
        store = entry is None
        if entry is not None and entry[3]:      # a kept page met again: a revisit?
            own = self.index.verify(page, entry[1:3], entry[0])
            if own is not None:
                return Match(stored_key, own.distance, own.similarity)
            store = True                        # it changed: store what it is now
        best = self.index.query(page.value, page.value2, page.sketch, page.W, page.W2,
                                exclude=entry[0] if entry is not None else None)
        if store:
            kept = best is None
            self._last_entry = None
            row = self.index.add_fingerprint(page)
            self.keys[row] = key
            self._fill(row, [_KEPT if kept else 0])
            self._last_entry = (key, (key, (row, int(page.value), int(page.value2), kept)))
            if self._stored_log is not None:
                self._stored_log.append((int(page.value), int(page.value2), page.sketch, key, kept))
        if best is not None:
            return Match(self.keys.get(best.id, f"#{best.id}"), best.distance, best.similarity)
        return None

    @property
    def nbytes(self) -> int:
        """Bytes held: the index, the keys and the flags."""
        return self.index.nbytes + self.keys.nbytes + self._flags.nbytes

    async def check_and_add(self, page, key: str) -> Match | None:
        return self._check_and_add(page, key)

    def same_key(self, stored: str, key: str) -> bool:
        # keys restored from a snapshot come back as index.keys stores them
        return stored == key or stored == _escaped(key)

    async def check_and_add_many(self, pages, keys) -> list[Match | None]:
        return [self._check_and_add(page, k) for page, k in zip(pages, keys)]

    def __len__(self) -> int:
        return len(self.index)


#: the per-row flags of a MemoryBackend: the page was kept (matched nothing);
#: this process checked a page under its key
_KEPT = 1
_CHECKED = 2


def _escaped(key: str) -> str | None:
    """``key`` as a snapshot stores it, or None if it cannot be stored."""
    try:
        return escape_url(key)
    except TypeError:
        return None
