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

from scrapy_simdup._ext import hashing, keymap
from scrapy_simdup._limits import MAX_REPLICA_PAGES
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES, similarity
from scrapy_simdup.index.columns import Column
from scrapy_simdup.index.verified import VerifiedIndex, VerifiedMatch

__all__ = ["RECORD", "RECORD_BYTES", "MATCHED", "HASHED", "KeyMap", "RowMap", "Replica", "Applied",
           "url_hash", "pack_entry", "entry_key"]

KeyMap = keymap.KeyMap
RowMap = keymap.RowMap

#: One page of the log, before its URL (little-endian).
RECORD = np.dtype([("value", "<u8"), ("value2", "<u8"), ("sketch", "u1", (SKETCH_BYTES,)),
                   ("base", "<u4"), ("flags", "<u4")])
RECORD_BYTES = RECORD.itemsize
_PACK = struct.Struct(f"<QQ{SKETCH_BYTES}sII").pack
#: the URLs of the last entries applied, for the matches that name them
RECENT_KEYS = 1 << 16
#: ``flags`` bit: the writer's look-up found a match (the page was not kept)
MATCHED = 1
#: ``flags`` bit: the entry carries its URL's 64-bit hash (8 bytes), not the
#: URL (an entry re-seeded from a replica, which keeps hashes only)
HASHED = 2
#: ``flags`` bit: the entry does not become the page stored under its URL (a
#: re-seeded entry whose URL's page is a later one, or an earlier copy)
NO_KEY = 4
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


def entry_key(seq: int, blob: bytes) -> str:
    """The key (URL) of the log entry ``seq``: ``#<seq>`` when the entry only
    carries its hash (re-seeded)."""
    if int.from_bytes(blob[RECORD_BYTES - 4:RECORD_BYTES], "little") & HASHED:
        return f"#{seq}"
    return blob[RECORD_BYTES:].decode("utf-8", "surrogatepass")


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


class Replica:
    """The pages of a log in a :class:`VerifiedIndex`, in log order.

    ``n`` is the sequence number of the last entry applied (entries are
    numbered from 1). Row ``r`` of the index holds entry ``r + 1``.
    """

    def __init__(self, index: VerifiedIndex) -> None:
        if len(index):
            raise ValueError("a replica starts from an empty index")
        self.index = index
        self._kept = Column(np.bool_)
        self._hashes = Column(np.uint64)         # each row's URL hash (a re-seed)
        self._rows = RowMap()                    # URL hash -> row, through _hashes
        self._recent: list = [None] * RECENT_KEYS   # row % RECENT_KEYS -> (row, URL bytes)

    @property
    def n(self) -> int:
        return len(self.index)

    def __len__(self) -> int:
        return len(self.index)

    @property
    def nbytes(self) -> int:
        """Bytes the replica holds: the index, the kept flags, the URL hashes
        and the URL map."""
        return (self.index.nbytes + self._kept.nbytes + self._hashes.nbytes + self._rows.nbytes)

    def row_of(self, key_hash: int) -> int | None:
        """The row stored under the key of hash ``key_hash`` (None: none)."""
        return self._rows.get(key_hash, self._hashes.array)

    def kept(self, row: int) -> bool:
        return bool(self._kept.array[row])

    def anchor(self) -> bytes:
        """The two keys of the last entry applied (16 bytes, as its record
        starts), b"" when there is none: what the log must still hold there."""
        if not self.n:
            return b""
        row = self.n - 1
        return struct.pack("<QQ", *(int(v) for v in self.index.keys[row]))

    def recent_key(self, row: int) -> str | None:
        """The key of ``row`` if it is among the last entries applied (and
        not re-seeded without it), else None (the log has it)."""
        slot = self._recent[row % RECENT_KEYS]
        if slot is None or slot[0] != row or slot[1] is None:
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
        own = self.row_of(key_hash)
        store = True
        if own is not None:
            if self._kept.array[own]:
                stored = tuple(int(v) for v in self.index.keys[own])
                match = self.index.verify(page, stored, own)
                if match is not None:
                    return False, match, own
            else:       # a near-duplicate stored before: matched against the others again
                store = False
        best = self.index.query(page.value, page.value2, page.sketch, page.W, page.W2,
                                exclude=own)
        return store, best, own

    # -- apply -------------------------------------------------------------
    def apply(self, blobs: list[bytes], remember_from: int = 0) -> Applied:
        """Apply the log entries ``n + 1, n + 2, ...`` (``blobs``: a record and
        a URL each), in order. The URLs of rows from ``remember_from`` on are
        kept for :meth:`recent_key` (the last :data:`RECENT_KEYS` of them)."""
        k = len(blobs)
        for i, blob in enumerate(blobs):
            if not isinstance(blob, bytes) or len(blob) < RECORD_BYTES:
                raise ValueError(f"log entry {self.n + i + 1} is not a page record "
                                 f"({len(blob) if isinstance(blob, bytes) else type(blob)})")
        if self.n + k > MAX_ENTRIES:
            raise OverflowError(f"a replica holds at most {MAX_ENTRIES} entries")
        recs = np.frombuffer(b"".join([b[:RECORD_BYTES] for b in blobs]), RECORD)
        hashes = hashing.hash_tails(blobs, RECORD_BYTES)
        hashed = np.flatnonzero(recs["flags"] & HASHED)
        for i in hashed.tolist():
            tail = blobs[i][RECORD_BYTES:]
            if len(tail) != 8:
                raise ValueError(f"log entry {self.n + i + 1} has a hashed URL of "
                                 f"{len(tail)} bytes, not 8")
            hashes[i] = int.from_bytes(tail, "little")
        first = self.n
        starts = recs["base"].astype(np.int64)
        if (starts > first + np.arange(k)).any():
            bad = int(np.flatnonzero(starts > first + np.arange(k))[0])
            raise ValueError(f"log entry {first + bad + 1} names a base after itself "
                             f"({int(starts[bad])})")
        v1 = np.ascontiguousarray(recs["value"])
        v2 = np.ascontiguousarray(recs["value2"])
        self.index.add(v1, v2, np.ascontiguousarray(recs["sketch"]))
        gap_rows, agree, dist = hashing.gap_matches(
            self.index.keys, self.index.sketches, first, starts,
            self.index.distance, self.index.needed, self.index.pair_limit)
        matched = (recs["flags"] & MATCHED) != 0
        kept = ~matched & (gap_rows < 0)
        self._kept.extend(kept)
        self._hashes.extend(hashes)
        rows = np.arange(first, first + k, dtype=np.int64)
        # a page appended by two processes at once (both met its URL first):
        # the later entry, a copy of the earlier under the same key, does not
        # replace it as the page stored under that key
        # (in entry order: the URL's page may have changed earlier in the batch)
        update = np.ones(k, bool)
        copies = np.flatnonzero(~kept & (gap_rows >= 0))
        if copies.shape[0]:
            stored: dict[int, int] = {}     # URL hash -> row, of this batch so far
            for i in np.flatnonzero(np.isin(hashes, hashes[copies])).tolist():
                h = int(hashes[i])
                current = stored[h] if h in stored else self.row_of(h)
                if not kept[i] and gap_rows[i] >= 0 and current == gap_rows[i]:
                    update[i] = False
                else:
                    stored[h] = first + i
        update &= (recs["flags"] & NO_KEY) == 0
        self._rows.put_many(rows[update], self._hashes.array)
        recent = self._recent
        for i in range(max(0, k - RECENT_KEYS, remember_from - first), k):
            tail = blobs[i][RECORD_BYTES:] if not recs["flags"][i] & HASHED else None
            recent[(first + i) % RECENT_KEYS] = (first + i, tail)
        return Applied(rows, kept, gap_rows, agree, dist)

    def export(self, start: int, stop: int) -> list[bytes]:
        """Log entries ``start + 1 .. stop`` as this replica holds them, to
        re-seed an emptied log: each decided (``base`` its own position, not
        kept ones flagged :data:`MATCHED`), with its URL when the replica
        still has it, else its URL's hash (:data:`HASHED`), and flagged
        :data:`NO_KEY` unless it is the page stored under its URL now, so that
        the re-seeded log maps every URL to the row this replica does."""
        if not 0 <= start <= stop <= self.n:
            raise ValueError(f"rows {start}..{stop} are not all in the replica ({self.n})")
        rec = np.zeros(stop - start, RECORD)
        rec["value"] = self.index.keys[start:stop, 0]
        rec["value2"] = self.index.keys[start:stop, 1]
        rec["sketch"] = self.index.sketches[start:stop]
        rec["base"] = np.arange(start, stop)
        rec["flags"] = np.where(self._kept.array[start:stop], 0, MATCHED)
        raw = rec.tobytes()
        out = []
        hashes = self._hashes.array
        for i, row in enumerate(range(start, stop)):
            slot = self._recent[row % RECENT_KEYS]
            if slot is not None and slot[0] == row and slot[1] is not None:
                tail, flags = slot[1], 0
            else:
                tail, flags = int(hashes[row]).to_bytes(8, "little"), HASHED
            if self._rows.get(int(hashes[row]), hashes) != row:
                flags |= NO_KEY
            head = raw[i * RECORD_BYTES:(i + 1) * RECORD_BYTES]
            if flags:
                head = head[:-4] + (int(rec["flags"][i]) | flags).to_bytes(4, "little")
            out.append(head + tail)
        return out
