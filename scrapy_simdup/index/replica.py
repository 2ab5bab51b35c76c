"""A replica of a shared index: the verified index of every page of a log.

The shared index is a log of stored pages (``index.redis``: a Redis Stream),
and every process that checks pages keeps a :class:`Replica` of it: a
:class:`VerifiedIndex` of the log's pages in log order, each page's two keys
by row, whether it was *kept* (it matched no earlier page), and its URL's hash.
Pages are looked up in the replica, next to the data, and the log only
carries what was stored.

A page of the log is a :data:`RECORD` followed by its URL. ``base`` is how
many log entries the writer's replica held when it looked the page up, and
``flags`` says whether that look-up found a match (:data:`MATCHED`). Entries
appended by other processes between the writer's look-up and its own entry
(sequence numbers ``base + 1 .. seq - 1``) were not in its replica: applying
the entry checks them exactly (``hashing.gap_matches``). So whether a page was
kept is decided by the log alone, the same in every replica, and of two
near-duplicates appended at once the earlier entry is kept.

No Redis here: ``index.redis`` reads and writes the log.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

import numpy as np

from scrapy_simdup._ext import hashing
from scrapy_simdup._limits import MAX_REPLICA_PAGES
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES, similarity
from scrapy_simdup.index.verified import VerifiedIndex, VerifiedMatch

__all__ = ["RECORD", "RECORD_BYTES", "MATCHED", "KeyMap", "Replica", "Applied", "url_hash",
           "pack_entry"]

#: One page of the log, before its URL (little-endian).
RECORD = np.dtype([("value", "<u8"), ("value2", "<u8"), ("sketch", "u1", (SKETCH_BYTES,)),
                   ("base", "<u4"), ("flags", "<u4")])
RECORD_BYTES = RECORD.itemsize
_PACK = struct.Struct(f"<QQ{SKETCH_BYTES}sII").pack
#: the URLs of the last entries applied, for the matches that name them
RECENT_KEYS = 1 << 16
#: ``flags`` bit: the writer's look-up found a match (the page was not kept)
MATCHED = 1
#: ``base`` is 32 bits: the most entries a log can hold
MAX_ENTRIES = MAX_REPLICA_PAGES


def url_hash(key: str) -> int:
    """The 64-bit hash a replica finds a page's URL (its key) by."""
    return int(hashing.hash64(key.encode("utf-8", "surrogatepass")))


def pack_entry(page, key: str, base: int, matched: bool) -> bytes:
    """The log entry of ``page`` stored under ``key``: a :data:`RECORD` and the URL."""
    if not 0 <= base <= MAX_ENTRIES:
        raise OverflowError(f"the log holds at most {MAX_ENTRIES} entries")
    return _PACK(int(page.value), int(page.value2), bytes(page.sketch), base,
                 MATCHED if matched else 0) + key.encode("utf-8", "surrogatepass")


class Applied(NamedTuple):
    """What applying entries found, one element per entry: ``rows`` of the
    entries in the replica, ``kept``, and the best earlier page of the gap
    (``gap_rows``: -1 none, ``gap_agree`` equal bins, ``gap_dist``)."""

    rows: np.ndarray
    kept: np.ndarray
    gap_rows: np.ndarray
    gap_agree: np.ndarray
    gap_dist: np.ndarray

    def gap_match(self, i: int) -> VerifiedMatch | None:
        row = int(self.gap_rows[i])
        if row < 0:
            return None
        return VerifiedMatch(row, similarity(int(self.gap_agree[i])), int(self.gap_dist[i]))


class _Column:
    """A growable 1-d array (amortised doubling)."""

    def __init__(self, dtype) -> None:
        self._a = np.zeros(64, dtype)
        self.n = 0

    def extend(self, values) -> None:
        need = self.n + len(values)
        if need > self._a.shape[0]:
            grown = np.zeros(max(need, 2 * self._a.shape[0]), self._a.dtype)
            grown[: self.n] = self._a[: self.n]
            self._a = grown
        self._a[self.n: need] = values
        self.n = need

    @property
    def array(self) -> np.ndarray:
        """The stored values (a view: valid until the next extend)."""
        return self._a[: self.n]

    @property
    def nbytes(self) -> int:
        return self._a.nbytes


class KeyMap:
    """uint64 hash -> row, the latest row winning: a sorted array for the
    bulk, a dict for what came since its last merge."""

    def __init__(self) -> None:
        self._keys = np.zeros(0, np.uint64)
        self._rows = np.zeros(0, np.int64)
        self._recent: dict[int, int] = {}

    def __len__(self) -> int:
        return self._keys.shape[0] + sum(1 for h in self._recent if self._find(h) < 0)

    def _find(self, h: int) -> int:
        i = int(np.searchsorted(self._keys, np.uint64(h)))
        return i if i < self._keys.shape[0] and int(self._keys[i]) == h else -1

    def get(self, h: int) -> int | None:
        row = self._recent.get(h)
        if row is not None:
            return row
        i = self._find(h)
        return int(self._rows[i]) if i >= 0 else None

    def put_many(self, hashes: np.ndarray, rows: np.ndarray) -> None:
        if hashes.shape[0] > 4096:
            self._merge(hashes, rows)
            return
        self._recent.update(zip(hashes.tolist(), rows.tolist()))
        if len(self._recent) > max(65536, min(self._keys.shape[0] // 32, 1 << 20)):
            self._merge(np.zeros(0, np.uint64), np.zeros(0, np.int64))

    def _merge(self, hashes: np.ndarray, rows: np.ndarray) -> None:
        if self._recent:
            hashes = np.concatenate((np.fromiter(self._recent.keys(), np.uint64,
                                                 len(self._recent)), hashes))
            rows = np.concatenate((np.fromiter(self._recent.values(), np.int64,
                                               len(self._recent)), rows))
            self._recent = {}
        # the latest row of each hash: unique over the reversed arrays
        keys, first = np.unique(hashes[::-1], return_index=True)
        new_rows = rows[::-1][first]
        pos = np.searchsorted(self._keys, keys)
        inside = pos < self._keys.shape[0]
        found = np.zeros(keys.shape[0], bool)
        found[inside] = self._keys[pos[inside]] == keys[inside]
        self._rows[pos[found]] = new_rows[found]
        self._keys = np.insert(self._keys, pos[~found], keys[~found])
        self._rows = np.insert(self._rows, pos[~found], new_rows[~found])

    @property
    def nbytes(self) -> int:
        # a dict entry with its two ints: about 100 bytes
        return self._keys.nbytes + self._rows.nbytes + 100 * len(self._recent)


class Replica:
    """The pages of a log in a :class:`VerifiedIndex`, in log order.

    ``n`` is the sequence number of the last entry applied (entries are
    numbered from 1). Row ``r`` of the index holds entry ``r + 1``.
    """

    def __init__(self, index: VerifiedIndex) -> None:
        if len(index):
            raise ValueError("a replica starts from an empty index")
        self.index = index
        self._values = _Column(np.uint64)
        self._values2 = _Column(np.uint64)
        self._kept = _Column(np.bool_)
        self.keys = KeyMap()
        self._recent: list = [None] * RECENT_KEYS   # row % RECENT_KEYS -> (row, URL bytes)

    @property
    def n(self) -> int:
        return len(self.index)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def nbytes(self) -> int:
        """Bytes the replica holds: the index, the keys by row, the kept flags
        and the URL hashes."""
        return (self.index.nbytes + self._values.nbytes + self._values2.nbytes
                + self._kept.nbytes + self.keys.nbytes)

    def kept(self, row: int) -> bool:
        return bool(self._kept.array[row])

    def recent_key(self, row: int) -> str | None:
        """The key of ``row`` if it is among the last entries applied, else
        None (the log has it)."""
        slot = self._recent[row % RECENT_KEYS]
        if slot is None or slot[0] != row:
            return None
        return slot[1].decode("utf-8", "surrogatepass")

    # -- look-up -----------------------------------------------------------
    def lookup(self, page, key_hash: int):
        """Look ``page`` (stored under a key of hash ``key_hash``) up, as
        :class:`MemoryBackend` does, without storing it.

        Returns ``(store, match, own)``: ``own`` the row stored under the
        same key (or None); ``store`` whether the page goes into the log (a
        key met first, or a kept page that changed); ``match`` a
        :class:`VerifiedMatch` or None. A kept page met again and still
        matching its own entry is a revisit: ``(False, <match of own>, own)``.
        """
        own = self.keys.get(key_hash)
        store = True
        if own is not None:
            if self._kept.array[own]:
                stored = (int(self._values.array[own]), int(self._values2.array[own]))
                match = self.index.verify(page, stored, own)
                if match is not None:
                    return False, match, own
            else:       # a near-duplicate stored before: matched against the others again
                store = False
        best = self.index.query(page.value, page.value2, page.sketch, page.W, page.W2,
                                exclude=own)
        return store, best, own

    # -- apply -------------------------------------------------------------
    def apply(self, blobs: list[bytes]) -> Applied:
        """Apply the log entries ``n + 1, n + 2, ...`` (``blobs``: a record and
        a URL each), in order."""
        k = len(blobs)
        for i, blob in enumerate(blobs):
            if not isinstance(blob, bytes) or len(blob) < RECORD_BYTES:
                raise ValueError(f"log entry {self.n + i + 1} is not a page record "
                                 f"({len(blob) if isinstance(blob, bytes) else type(blob)})")
        if self.n + k > MAX_ENTRIES:
            raise OverflowError(f"a replica holds at most {MAX_ENTRIES} entries")
        recs = np.frombuffer(b"".join([b[:RECORD_BYTES] for b in blobs]), RECORD)
        hashes = hashing.hash_tails(blobs, RECORD_BYTES)
        first = self.n
        starts = recs["base"].astype(np.int64)
        if (starts > first + np.arange(k)).any():
            bad = int(np.flatnonzero(starts > first + np.arange(k))[0])
            raise ValueError(f"log entry {first + bad + 1} names a base after itself "
                             f"({int(starts[bad])})")
        v1 = np.ascontiguousarray(recs["value"])
        v2 = np.ascontiguousarray(recs["value2"])
        self._values.extend(v1)
        self._values2.extend(v2)
        self.index.add(v1, v2, np.ascontiguousarray(recs["sketch"]))
        gap_rows, agree, dist = hashing.gap_matches(
            self._values.array, self._values2.array, self.index._sketches, first, starts,
            self.index.distance, self.index.needed)
        matched = (recs["flags"] & MATCHED) != 0
        kept = ~matched & (gap_rows < 0)
        self._kept.extend(kept)
        rows = np.arange(first, first + k, dtype=np.int64)
        # a page appended by two processes at once (both met its URL first):
        # the later entry, a copy of the earlier under the same key, does not
        # replace it as the page stored under that key
        again = np.array([gap_rows[i] >= 0 and self.keys.get(int(hashes[i])) == gap_rows[i]
                          for i in np.flatnonzero(~kept)], dtype=bool)
        update = np.ones(k, bool)
        update[np.flatnonzero(~kept)[again]] = False
        self.keys.put_many(hashes[update], rows[update])
        recent = self._recent
        for i in range(max(0, k - RECENT_KEYS), k):
            recent[(first + i) % RECENT_KEYS] = (first + i, blobs[i][RECORD_BYTES:])
        return Applied(rows, kept, gap_rows, agree, dist)
