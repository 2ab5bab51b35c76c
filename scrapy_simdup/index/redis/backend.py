"""The shared index backend (in a crawl, ``SIMDUP_INDEX = "redis://..."``).

Every process keeps a :class:`Replica` of the whole index and follows the
index's log in Redis (:class:`RedisLog`). A check is a look-up in the replica;
a page to store is appended to the log, and the entries other processes
appended since the replica's position come back with it and are applied in
log order, the page's own entry among them, which decides whether it was kept
(``index.replica``). So the search runs next to a copy of the data, the
network carries one record per stored page, and every process reaches the
same verdicts from the same log.

Checks made while a round trip is in flight are coalesced into the next
batch (at most ``MAX_BATCH``). Between checks, a follower applies what the
other processes append (every ``follow_interval`` seconds). Redis faults are
raised as :class:`IndexUnavailableError` for the caller to count; the replica
catches up from its position once Redis answers again. An index emptied
under the process (Redis restarted without its data) is re-seeded from a
replica or is an :class:`IndexResetError`, every time, until the process
stops (``on_reset``).
"""
from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import numpy as np

from scrapy_simdup.exceptions import IndexConflictError, IndexUnavailableError, ParameterError
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES
from scrapy_simdup.index.backend import IndexBackend, Match
from scrapy_simdup.index.redis.log import IndexResetError, RedisLog, reseed_abandoned
from scrapy_simdup.index.replica import RECENT_KEYS, Replica, entry_key, pack_entry, url_hash
from scrapy_simdup.index.verified import VerifiedIndex

__all__ = ["RedisBackend", "MAX_BATCH", "READ_COUNT", "ON_RESET"]

logger = logging.getLogger("scrapy_simdup")

#: what a process does when the index is emptied under it: stop (every check
#: fails with IndexResetError), or re-seed it from its replica
ON_RESET = ("stop", "reseed")
#: most pages appended in one round trip
MAX_BATCH = 2048
#: most log entries read (or returned by an append) in one round trip
READ_COUNT = 20_000
#: seconds without word from the log after which a check catches up first
STALE_AFTER = 1.0
#: a replica's bytes per page, said before it holds any (index/replica.py)
REPLICA_BYTES_PER_PAGE = 120.0


class RedisBackend(IndexBackend):
    """Index backend on a log in Redis and a replica in this process.

    ``max_pages``: the most pages the replica may hold (None: no limit); a
    log that outgrows it is refused at start-up and stops the checks
    mid-crawl with a :class:`ParameterError` naming ``max_pages``.
    ``on_reset`` (:data:`ON_RESET`): when the index is emptied under the
    process (Redis restarted without its data), ``"stop"``: every check
    fails with :class:`IndexResetError`; ``"reseed"``: the first process to
    notice writes its replica back as the log, and the processes whose
    replica it holds go on. A process whose replica holds more than the
    re-seeded log stops either way.
    """

    def __init__(self, log: RedisLog, replica: Replica, follow_interval: float = 0.2,
                 max_pages: int | None = None, on_reset: str = "stop") -> None:
        if on_reset not in ON_RESET:
            raise ParameterError("on_reset", f"on_reset must be one of {ON_RESET}, "
                                             f"got {on_reset!r}")
        self.on_reset = on_reset
        #: pages this process wrote back to an emptied index
        self.reseeded = 0
        self.log = log
        self.replica = replica
        self.follow_interval = follow_interval
        self.max_pages = max_pages
        self._pending: list = []
        self._flushing = False
        self._lock: asyncio.Lock | None = None
        self._drainer: asyncio.Future | None = None
        #: when the replica last heard from the log (monotonic seconds)
        self._synced_at = time.monotonic()
        self._follower: asyncio.Task | None = None
        #: why this process stopped checking (an emptied index, entries it
        #: cannot apply, a log past max_pages): raised by every check
        self._reset: Exception | None = None
        #: seconds the start-up load took, and the entries it applied
        self.load_seconds = 0.0
        self.loaded = 0
        #: bytes of the log entries applied (records and URLs), and the pages
        #: this process appended
        self.bytes_in = 0
        self.appended = 0

    @classmethod
    def open(cls, url: str, key_prefix: str, index: VerifiedIndex, params: dict | None = None,
             fingerprint: str | None = None, max_pages: int | None = None,
             follow_interval: float = 0.2, on_reset: str = "stop") -> RedisBackend:
        """A backend on the index under ``key_prefix`` at ``url`` (created if
        new), with ``index`` (empty: it becomes the replica) loaded from the
        whole log. ``fingerprint``: the recipe of the pages it will hold."""
        log = RedisLog(url, key_prefix, params=params, fingerprint=fingerprint,
                       distance=index.distance, min_similarity=index.min_similarity)
        backend = cls(log, Replica(index), follow_interval=follow_interval, max_pages=max_pages,
                      on_reset=on_reset)
        try:
            size = log.open()
            backend._check_room(size)
            backend._load()
        except BaseException:
            log.close_sync()
            raise
        return backend

    def _check_room(self, size: int) -> None:
        if self.max_pages is not None and size > self.max_pages:
            raise ParameterError("max_pages", f"the Redis index {self.log.where} holds {size:,} "
                                 f"pages, more than this process may hold ({self.max_pages:,}); "
                                 f"raise the limit (about {self.bytes_per_page():.0f} bytes a "
                                 f"page in every process), or use another key prefix")

    def bytes_per_page(self) -> float:
        """The replica's bytes per page so far (or its fixed cost when empty)."""
        n = len(self.replica)
        return self.replica.nbytes / n if n else REPLICA_BYTES_PER_PAGE

    def _load(self) -> None:
        """Apply the whole log (blocking: start-up)."""
        t0 = time.perf_counter()
        # only the last entries' URLs are kept (Replica.recent_key)
        remember_from = self.log.size - RECENT_KEYS
        with self.replica.index.bulk_load():
            while True:
                entries = self.log.read_sync(self.replica.n + 1, READ_COUNT)
                if not entries:
                    break
                self._apply(entries, remember_from)
        self.load_seconds = time.perf_counter() - t0
        self.loaded = self.replica.n
        self.log.close_sync()

    # -- the interface ---------------------------------------------------------
    @property
    def probes(self) -> int:
        return self.replica.index.probes

    @property
    def expected_recall(self) -> float | None:  # type: ignore[override]
        return self.replica.index.expected_recall

    def __len__(self) -> int:
        return len(self.replica)

    @property
    def nbytes(self) -> int:
        return self.replica.nbytes

    async def check_and_add_many(self, pages, keys) -> list:
        pages = list(pages)
        if len(keys) != len(pages):
            raise ValueError(f"keys must have one key per page ({len(pages)}), got {len(keys)}")
        out: list = []
        for a in range(0, len(pages), MAX_BATCH):
            out.extend(await self._check(pages[a:a + MAX_BATCH], list(keys[a:a + MAX_BATCH])))
        return out

    async def check_and_add(self, page, key):
        _check_input(page, key)         # a bad page fails alone, not its batch
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((page, key, fut))
        if not self._flushing:
            self._flushing = True
            self._drainer = asyncio.ensure_future(self._drain())
        return await fut

    async def _drain(self):
        try:
            while self._pending:
                await asyncio.sleep(0)      # let the callers of this tick join the batch
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                try:
                    results = await self._check([b[0] for b in batch], [b[1] for b in batch])
                except BaseException as exc:
                    for b in batch:
                        if not b[2].done():
                            b[2].set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                else:
                    for b, r in zip(batch, results):
                        if not b[2].done():
                            b[2].set_result(r)
        finally:
            self._flushing = False
            # (cancelled: the checks queued behind the batch are not left waiting)
            pending, self._pending = self._pending, []
            for b in pending:
                if not b[2].done():
                    b[2].set_exception(IndexUnavailableError(
                        f"the Redis index {self.log.where} stopped checking pages "
                        f"(its batch was cancelled)"))

    # -- a check -------------------------------------------------------------
    def _ensure_started(self) -> asyncio.Lock:
        if self._lock is None:
            self._lock = asyncio.Lock()
        if self._follower is None and self.follow_interval:
            self._follower = asyncio.ensure_future(self._follow())
        return self._lock

    async def _check(self, pages, keys) -> list:
        if self._reset is not None:
            raise self._reset
        for page, key in zip(pages, keys):
            _check_input(page, key)
        async with self._ensure_started():
            if time.monotonic() - self._synced_at > STALE_AFTER:
                # back from an outage or a stall: catch up first, or every
                # replica would check these pages against the whole gap
                try:
                    await self._read_all()
                except IndexResetError as exc:
                    if not await self._recover(exc):
                        raise self._reset from None
            replica = self.replica
            base = replica.n
            out: list = [None] * len(pages)
            rows: dict[int, object] = {}        # i -> VerifiedMatch of a stored page
            own: list[int] = []                 # pages appended, in order
            blobs: list[bytes] = []
            for i, (page, key) in enumerate(zip(pages, keys)):
                store, match, own_row = replica.lookup(page, url_hash(key))
                if store:
                    own.append(i)
                    blobs.append(pack_entry(page, key, base, match is not None))
                if match is not None:
                    if match.id == own_row:     # a revisit: its own entry, under its key
                        out[i] = Match(key, match.distance, match.similarity)
                    else:
                        rows[i] = match
            if blobs:
                self._check_room(base + len(blobs))
                await self._append(blobs, own, rows)
            await self._resolve(rows, out)
            return out

    async def _append(self, blobs, own, rows) -> None:
        """Append the pages ``own`` (their ``blobs``) and apply the log up to
        them; a page kept locally but not in the log gets its gap match."""
        try:
            n, entries = await self.log.append(self.replica.n + 1, blobs, READ_COUNT,
                                                 self.replica.anchor())
        except IndexResetError as exc:
            if not await self._recover(exc):
                raise self._reset from None
            n, entries = await self.log.append(self.replica.n + 1, blobs, READ_COUNT,
                                                 self.replica.anchor())
        self.appended += len(blobs)
        self._synced_at = time.monotonic()
        first_own = n - len(blobs) + 1
        gaps: dict[int, object] = {}
        while True:
            applied = self._apply(entries)
            if applied is not None:
                start = applied.rows[0] + 1
                for j, seq in enumerate(range(start, start + len(applied.rows))):
                    if seq >= first_own:
                        gaps[seq] = applied.gap_match(j)
            if self.replica.n >= n:
                break
            entries = await self.log.read(self.replica.n + 1, READ_COUNT,
                                                 self.replica.anchor())
            if not entries:
                raise IndexUnavailableError(f"the Redis index {self.log.where} lost entries "
                                            f"{self.replica.n + 1}..{n} it had just appended")
        for j, i in enumerate(own):
            gap = gaps.get(first_own + j)
            # the better of the look-up's match and the gap's (its batch-mates
            # are there), as a look-up among them all would rank them; a tie
            # names the look-up's, the earlier page
            if gap is not None and (i not in rows or (gap.similarity, -gap.distance)
                                    > (rows[i].similarity, -rows[i].distance)):
                rows[i] = gap

    def _apply(self, entries, remember_from: int = 0):
        """Apply the entries not applied yet (they follow the replica's position)."""
        n = self.replica.n
        if not entries or entries.last <= n:
            return None
        if entries.first > n + 1:
            raise IndexUnavailableError(f"the Redis index {self.log.where} has a gap in its log "
                                        f"after entry {n}: entries were deleted under it")
        blobs = entries.blobs[n + 1 - entries.first:]
        if self.max_pages is not None and n + len(blobs) > self.max_pages:
            self._reset = ParameterError(
                "max_pages", f"the Redis index {self.log.where} grew to {n + len(blobs):,} pages, "
                f"more than this process may hold ({self.max_pages:,}): it stops checking")
            raise self._reset
        try:
            applied = self.replica.apply(blobs, remember_from=remember_from)
        except (ValueError, OverflowError) as exc:
            # every later append would add a page no replica can apply
            self._reset = IndexConflictError("key_prefix", f"the Redis index {self.log.where} "
                                             f"cannot be applied: {exc}; use another "
                                             f"SIMDUP_REDIS_KEY, or clear it with SIMDUP_RESET")
            raise self._reset from None
        self.bytes_in += sum(map(len, blobs))
        return applied

    async def _resolve(self, rows: dict, out: list) -> None:
        """The URLs of the stored pages matched: the replica's recent ones, the
        others read from the log (one round trip for all)."""
        keys = {m.id: self.replica.recent_key(m.id) for m in rows.values()}
        missing = [row + 1 for row, key in keys.items() if key is None]
        if missing:
            for seq, blob in (await self.log.blobs_at(missing)).items():
                keys[seq - 1] = entry_key(seq, blob)
        for i, m in rows.items():
            out[i] = Match(keys[m.id] or f"#{m.id + 1}", m.distance, m.similarity)

    async def _follow(self) -> None:
        """Apply what other processes append while this one has no check in flight."""
        while True:
            await asyncio.sleep(self.follow_interval)
            if self._reset is not None:
                return
            lock = self._lock
            if lock.locked():
                continue
            async with lock:
                try:
                    entries = await self.log.read(self.replica.n + 1, READ_COUNT,
                                                 self.replica.anchor())
                    self._synced_at = time.monotonic()
                    self._apply(entries)
                except IndexResetError as exc:
                    try:
                        if not await self._recover(exc):
                            return
                    except IndexUnavailableError:
                        continue
                except (IndexConflictError, ParameterError):
                    return          # fatal (self._reset): the next check says it
                except (IndexUnavailableError, ValueError):
                    continue        # the next check says it, and counts it

    async def _recover(self, exc: IndexResetError) -> bool:
        """After the index was emptied: go on if it was re-seeded from a
        replica holding this one's pages, or re-seed it (``on_reset``). False
        (and every check fails from now on) when neither is possible."""
        meta = await self.log.meta()
        if reseed_abandoned(meta.get("reseeding")):
            if await self.log.drop_abandoned(meta):
                logger.warning("Simdup: the Redis index %s was a re-seed its writer abandoned; "
                               "it was deleted", self.log.where)
            meta = await self.log.meta()
        if meta.get("parent") == self.log.epoch and meta.get("epoch"):
            reseed_n = int(meta.get("reseed_n") or -1)
            if self.replica.n <= reseed_n:
                logger.warning("Simdup: the Redis index %s was emptied and re-seeded by another "
                               "process with %s pages; this process goes on with it",
                               self.log.where, f"{reseed_n:,}")
                self.log.epoch = meta["epoch"]
                return True
            self._reset = IndexResetError(
                f"{exc}; another process re-seeded it with {reseed_n:,} pages, fewer than "
                f"this process holds ({self.replica.n:,})")
            return False
        if self.on_reset == "reseed" and not meta:
            n = self.replica.n
            if await self.log.reseed(n, self.replica.export):
                logger.error("Simdup: the Redis index %s was emptied under this process (Redis "
                             "restarted without its data?); re-seeded it with the %s pages of "
                             "this process's replica", self.log.where, f"{n:,}")
                self.reseeded += n
                return True
            return await self._recover(exc)     # another process claimed it first
        self._reset = exc
        return False

    async def catch_up(self) -> int:
        """Apply everything in the log now; returns the replica's size."""
        async with self._ensure_started():
            await self._read_all()
            return self.replica.n

    async def _read_all(self) -> None:
        """Apply the log to its end (the lock held)."""
        while True:
            entries = await self.log.read(self.replica.n + 1, READ_COUNT, self.replica.anchor())
            self._synced_at = time.monotonic()
            if not entries:
                return
            self._apply(entries)

    async def close(self):
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._follower
            self._follower = None
        await self.log.close()


def _check_input(page, key) -> None:
    """A page and key the backend can store (checked before they join a batch)."""
    if not isinstance(key, str):
        raise TypeError(f"keys must be str, got {type(key).__name__}")
    for value in (page.value, page.value2):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
                or not 0 <= int(value) < 1 << 64:
            raise ValueError(f"a key must be an int in [0, 2**64), got {value!r}")
    if not isinstance(page.sketch, bytes) or len(page.sketch) != SKETCH_BYTES:
        raise ValueError(f"a sketch must be {SKETCH_BYTES} bytes")
