"""The shared index's log in Redis: one Stream of stored pages.

Layout under the key prefix ``P`` (``SIMDUP_REDIS_KEY`` filled in):

``P:meta`` (hash)
    ``layout`` (:data:`LAYOUT`), ``epoch`` (a random id made when the index
    is created), ``fingerprint`` (the recipe of its fingerprints),
    ``distance`` and ``min_similarity`` (the match rule every replica applies)
    and ``n``, the number of entries appended so far.
``P:log`` (stream)
    Entry ``<seq>-0`` (``seq`` = 1, 2, ...) has one field ``r``: a page
    record and its URL (``index.replica.RECORD``).

Pages are appended by :data:`APPEND`, a script that checks the epoch
(a Redis restarted empty, or the index cleared, has none or another), numbers
the entries and returns the entries the caller's replica has not applied
yet, its own among them. Everything else is read with ``XRANGE``. The
search itself runs in each process, on its replica (``index.replica``).

For Redis Cluster, the two keys must be on one hash slot: give the prefix a
hash tag (``{simdup}:%(spider)s``).
"""
from __future__ import annotations

import asyncio
import contextlib
import re
import time
import uuid
from typing import NamedTuple

from scrapy_simdup._limits import DEFAULT_DISTANCE, DEFAULT_MIN_SIMILARITY, MAX_DISTANCE
from scrapy_simdup.exceptions import IndexConflictError, IndexUnavailableError, ParameterError
from scrapy_simdup.fingerprint.sketch import check_min_similarity

__all__ = ["RedisLog", "Entries", "LAYOUT", "IndexResetError", "safe_url", "stored_size",
           "reseed_abandoned", "RESEED_LEASE", "CONNECTION_DEFAULTS"]

LAYOUT = "log-2"
#: the options every client of the shared index's server starts from (the
#: user's SIMDUP_REDIS_PARAMS override them): no command waits for Redis
#: without bound, so an unresponsive server fails a check instead of hanging it
CONNECTION_DEFAULTS = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0,
                       "health_check_interval": 30, "retry_on_timeout": False}

#: KEYS: meta, log. ARGV: layout, epoch, fingerprint, distance, min_similarity.
#: Creates the index if there is none; returns what P:meta holds.
OPEN = """
if redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('HSET', KEYS[1], 'layout', ARGV[1], 'epoch', ARGV[2], 'fingerprint', ARGV[3],
             'distance', ARGV[4], 'min_similarity', ARGV[5], 'n', 0)
end
return redis.call('HMGET', KEYS[1], 'layout', 'epoch', 'fingerprint', 'distance',
                  'min_similarity', 'n', 'reseeding')
"""

#: KEYS: meta, log. ARGV: epoch, the first sequence number the caller has not
#: applied, the most entries to return, the two keys (16 bytes) of the last
#: entry the caller applied ('' for none), then one record per page.
#: Returns {-1} when the index is not the one of that epoch, {-2} while it is
#: being re-seeded, {-3, last id} when the log does not end with entry n
#: (entries added or deleted by something else), {-4, n} when it does not
#: hold the entries the caller applied (Redis restarted from older data,
#: fewer entries or other ones): nothing is written then. Else {n, entries
#: from that sequence number on (at most the count)}. ``n`` is written after
#: the entries, so a failed XADD leaves a log whose end is not n (-3).
APPEND = """
local meta = redis.call('HMGET', KEYS[1], 'epoch', 'reseeding', 'n')
if meta[1] ~= ARGV[1] then return {-1} end
if meta[2] then return {-2, meta[2]} end
local n0 = tonumber(meta[3] or '')
local top = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local last = ''
if #top > 0 then last = top[1][1] end
if not n0 or (n0 == 0 and last ~= '') or (n0 > 0 and last ~= n0 .. '-0') then
  return {-3, last}
end
local had = tonumber(ARGV[2]) - 1
if n0 < had then return {-4, n0} end
if ARGV[4] ~= '' then
  local prev = redis.call('XRANGE', KEYS[2], had .. '-0', had .. '-0')
  if #prev == 0 or string.sub(prev[1][2][2], 1, 16) ~= ARGV[4] then return {-4, n0} end
end
local k = #ARGV - 4
for i = 1, k do
  redis.call('XADD', KEYS[2], (n0 + i) .. '-0', 'r', ARGV[4 + i])
end
redis.call('HSET', KEYS[1], 'n', n0 + k)
return {n0 + k, redis.call('XRANGE', KEYS[2], ARGV[2] .. '-0', '+', 'COUNT', ARGV[3])}
"""

#: KEYS: meta, log. ARGV: layout, epoch, fingerprint, distance, min_similarity,
#: the epoch it replaces, the entries it will hold, the lease's end (Unix
#: seconds). Claims an emptied index for a re-seed: 1 if claimed, 0 if the
#: index exists (another process claimed it, or started a new one).
RESEED_CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 or redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'layout', ARGV[1], 'epoch', ARGV[2], 'fingerprint', ARGV[3],
           'distance', ARGV[4], 'min_similarity', ARGV[5], 'n', 0, 'parent', ARGV[6],
           'reseed_n', ARGV[7], 'reseeding', ARGV[8])
return 1
"""

#: KEYS: meta, log. ARGV: epoch, the lease's new end, the first sequence
#: number, then records. -1 if the index is not that epoch's any more.
RESEED_WRITE = """
if redis.call('HGET', KEYS[1], 'epoch') ~= ARGV[1] then return -1 end
local first = tonumber(ARGV[3])
for i = 4, #ARGV do
  redis.call('XADD', KEYS[2], (first + i - 4) .. '-0', 'r', ARGV[i])
end
redis.call('HSET', KEYS[1], 'n', first + #ARGV - 4, 'reseeding', ARGV[2])
return first + #ARGV - 4
"""

#: KEYS: meta, log. ARGV: an epoch, its ``reseeding`` value. Deletes the index
#: if it is still that epoch's re-seed, with that lease (an abandoned one, or
#: this process's own that failed): 1 if deleted.
RESEED_DROP = """
local meta = redis.call('HMGET', KEYS[1], 'epoch', 'reseeding')
if meta[1] ~= ARGV[1] or meta[2] ~= ARGV[2] then return 0 end
redis.call('DEL', KEYS[1], KEYS[2])
return 1
"""

#: seconds a re-seed may go without writing before the others take it as
#: abandoned (its writer died or lost Redis)
RESEED_LEASE = 60.0

#: keys of the bucket layouts of earlier versions (refused at start-up)
_OLD_LAYOUT_SUFFIXES = (":v", ":t", ":n", ":id", ":fingerprint")


class IndexResetError(IndexConflictError):
    """The shared index was emptied or re-created under this process (Redis
    restarted without its data, or the index cleared): what this process's
    replica holds is no longer in it."""

    def __init__(self, message: str) -> None:
        super().__init__("url", message)

    def __reduce__(self):
        return (type(self), (self.args[0],))


def _redis():
    """The redis client (``redis``, with ``redis.asyncio`` loaded), imported on
    first use: it is an install extra that only a Redis index needs."""
    try:
        import redis.asyncio  # noqa: PLC0415 (optional: the redis install extra)
    except ImportError:  # pragma: no cover - redis is an install extra
        raise ImportError('the Redis index needs the redis client: '
                          'pip install "scrapy-simdup[redis]" or, from a checkout, '
                          'pip install -e ".[redis]"') from None
    return redis


def safe_url(url: str) -> str:
    """The URL without a password (``user:pass@`` or a ``password=`` query)."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        url = scheme + "://***@" + rest.rsplit("@", 1)[1]
    return re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)


def _text(v) -> str | None:
    if v is None:
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _short(text: str, limit: int = 200) -> str:
    """``text`` cut for a message (a recipe holds the user's content XPath)."""
    text = text.replace("\x00", "\\0")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


class RedisLog:
    """The log of one shared index (see the module docstring).

    ``url``: a ``redis://``, ``rediss://`` or ``unix://`` URL; ``prefix``: the
    key prefix; ``params``: keyword arguments for ``redis.Redis.from_url``
    (they override the bounded timeouts set here); ``fingerprint``,
    ``distance``, ``min_similarity``: what every process of the index must
    share. A bad value is a :class:`ParameterError` naming the parameter.
    """

    def __init__(self, url: str, prefix: str, params: dict | None = None,
                 fingerprint: str | None = None, distance: int = DEFAULT_DISTANCE,
                 min_similarity: float = DEFAULT_MIN_SIMILARITY) -> None:
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ParameterError("url", f"the Redis URL must start with redis://, rediss:// "
                                        f"or unix://, got {url!r}")
        if not isinstance(prefix, str) or not prefix:
            raise ParameterError("key_prefix", f"the key prefix must be a non-empty string, "
                                               f"got {prefix!r}")
        if isinstance(distance, bool) or not isinstance(distance, int) \
                or not 0 <= distance <= MAX_DISTANCE:
            raise ParameterError("distance", f"the distance must be an integer in "
                                             f"0..{MAX_DISTANCE}, got {distance!r}")
        try:
            min_similarity = check_min_similarity(min_similarity)
        except ValueError as exc:
            raise ParameterError("min_similarity", str(exc)) from None
        if params is not None and not isinstance(params, dict):
            raise ParameterError("params", f"the connection options must be a dict, "
                                           f"got {params!r}")
        if params and params.get("decode_responses"):
            raise ParameterError("params", "decode_responses must be off: the index stores "
                                           "binary records")
        self.url = url
        self.prefix = prefix
        self.meta_key = prefix + ":meta"
        self.log_key = prefix + ":log"
        self.fingerprint = fingerprint or ""
        self.distance = distance
        self.min_similarity = min_similarity
        self._params = {**CONNECTION_DEFAULTS, **(params or {})}
        self.epoch: str | None = None
        self.size = 0
        self._client = None
        self._loop = None
        self._sync = None
        self._append = None

    @property
    def where(self) -> str:
        return f"{self.prefix!r} at {safe_url(self.url)}"

    # -- connections ------------------------------------------------------
    def _make_client(self, module):
        try:
            return module.Redis.from_url(self.url, **self._params)
        except (ValueError, TypeError) as exc:
            raise ParameterError("url, params", f"the Redis URL or connection options are not "
                                 f"usable: {safe_url(self.url)}: {exc}") from None

    def sync_client(self):
        """A blocking client (start-up, the command line); closed by :meth:`close`."""
        if self._sync is None:
            self._sync = self._make_client(_redis())
            self._sync.response_callbacks.pop("XRANGE", None)
        return self._sync

    def _aclient(self):
        # asyncio connections belong to one event loop: a new loop (another
        # asyncio.run) gets a new client; the old one died with its loop
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = self._make_client(_redis().asyncio)
            self._client.response_callbacks.pop("XRANGE", None)
            self._loop = loop
        return self._client

    def _unavailable(self, exc) -> IndexUnavailableError:
        if "WRONGTYPE" in str(exc):
            return IndexConflictError("key_prefix", f"the Redis index {self.where} failed: a key "
                                      f"under its prefix is of another type ({exc}); is the "
                                      f"prefix shared with something else?")
        return IndexUnavailableError(f"Redis index {self.where} failed: {exc}")

    # -- start-up -----------------------------------------------------------
    def open(self) -> int:
        """Check the server and the index (blocking, once); create the index if
        there is none. Returns the number of entries in the log.

        Raises :class:`IndexUnavailableError` when Redis cannot be reached, and
        :class:`ParameterError` when the prefix holds an older layout or other
        data (``"key_prefix"``), the server evicts keys (``"url"``), or the
        index was made with another recipe or match rule (``"fingerprint"``,
        ``"distance"``, ``"min_similarity"``).
        """
        redis = _redis()
        client = self.sync_client()
        try:
            try:
                info = client.info("server")
            except (TypeError, ValueError) as exc:  # a connection option redis-py refuses
                raise ParameterError("params", f"the connection options are not usable for "
                                               f"{safe_url(self.url)}: {exc}") from None
            version = tuple(int(x) for x in re.findall(r"\d+", str(info.get("redis_version",
                                                                             "0")))[:2])
            if version < (5, 0):
                raise ParameterError("url", f"Redis at {safe_url(self.url)} is version "
                                            f"{info.get('redis_version')}; the index needs "
                                            f"Redis 5.0 or newer (streams)")
            self._check_eviction(client, redis)
            old = [k for k in (self.prefix + s for s in _OLD_LAYOUT_SUFFIXES) if client.exists(k)]
            if old:
                raise ParameterError("key_prefix", f"the Redis index {self.where} was written by "
                                     f"an older scrapy-simdup (its keys {', '.join(old)}); this "
                                     f"version keeps a log instead. Clear it and start afresh with "
                                     f"SIMDUP_RESET = True (for one run: scrapy crawl <spider> -s "
                                     f"SIMDUP_RESET=1), or use another SIMDUP_REDIS_KEY")
            for key, kind in ((self.meta_key, b"hash"), (self.log_key, b"stream")):
                found = client.type(key)
                if found not in (b"none", kind):
                    raise ParameterError("key_prefix", f"{key!r} at {safe_url(self.url)} is a "
                                         f"{_text(found)}, not the index's {_text(kind)}: the "
                                         f"prefix holds other data; use another SIMDUP_REDIS_KEY")
            meta = client.eval(OPEN, 2, self.meta_key, self.log_key, LAYOUT, uuid.uuid4().hex,
                               self.fingerprint, self.distance, repr(self.min_similarity))
        except redis.ResponseError as exc:
            raise ParameterError("key_prefix", f"cannot use the Redis index {self.where}: "
                                               f"{exc}") from None
        except redis.RedisError as exc:
            raise IndexUnavailableError(f"cannot use Redis at {safe_url(self.url)}: "
                                        f"{exc}") from exc
        layout, epoch, fingerprint, distance, min_similarity, n, reseeding = \
            (_text(v) for v in meta)
        if layout != LAYOUT or epoch is None or n is None or not n.isdigit():
            raise ParameterError("key_prefix", f"{self.meta_key!r} at {safe_url(self.url)} is not "
                                 f"a scrapy-simdup index of this version (layout {layout!r}); "
                                 f"use another SIMDUP_REDIS_KEY, or clear it with SIMDUP_RESET = "
                                 f"True (scrapy crawl <spider> -s SIMDUP_RESET=1)")
        if self.fingerprint and fingerprint and fingerprint != self.fingerprint:
            raise ParameterError("fingerprint", f"the index {self.where} holds fingerprints made "
                                 f"with {_short(fingerprint)!r}, this process makes "
                                 f"{_short(self.fingerprint)!r}; they cannot be compared: use the "
                                 f"same fingerprint recipe in every process, or another key "
                                 f"prefix")
        if distance != str(self.distance):
            raise ParameterError("distance", f"the index {self.where} matches within distance "
                                 f"{distance}, this process {self.distance}: every process of an "
                                 f"index applies one rule")
        if min_similarity != repr(self.min_similarity):
            raise ParameterError("min_similarity", f"the index {self.where} matches at similarity "
                                 f"{min_similarity}, this process at {self.min_similarity}: "
                                 f"every process of an index applies one rule")
        if reseeding is not None:       # its pages are being written: not all there
            if reseed_abandoned(reseeding):
                raise IndexUnavailableError(
                    f"the Redis index {self.where} is a re-seed that its writer abandoned; "
                    f"clear it with SIMDUP_RESET = True (scrapy crawl <spider> -s "
                    f"SIMDUP_RESET=1), or let a running process of the fleet re-seed it")
            raise IndexUnavailableError(f"the Redis index {self.where} is being re-seeded "
                                        f"from a replica; start again once it is done")
        self.epoch = epoch
        self.size = int(n)
        return self.size

    def _check_eviction(self, client, redis) -> None:
        try:
            policy = _text(client.config_get("maxmemory-policy").get("maxmemory-policy"))
        except redis.ResponseError:     # CONFIG refused (a managed Redis): cannot tell
            return
        if policy and policy.startswith("allkeys-"):
            raise ParameterError("url", f"Redis at {safe_url(self.url)} evicts any key when full "
                                 f"(maxmemory-policy {policy}): the index would lose pages "
                                 f"without a word. Set maxmemory-policy to noeviction (or a "
                                 f"volatile-* policy), or use another Redis")

    def read_sync(self, start: int, count: int) -> Entries:
        """Entries ``start, start + 1, ...`` (at most ``count``): :class:`Entries`."""
        redis = _redis()
        try:
            raw = self.sync_client().execute_command("XRANGE", self.log_key, f"{start}-0", "+",
                                                     "COUNT", count)
        except redis.RedisError as exc:
            raise self._unavailable(exc) from exc
        return _entries(raw)

    # -- during the crawl ---------------------------------------------------------
    async def append(self, start: int, blobs: list[bytes], count: int,
                     anchor: bytes = b"") -> tuple[int, Entries]:
        """Append ``blobs``; returns ``(n, entries)``: the log's size after them
        and the entries from ``start`` on (at most ``count``; they end with
        these unless more than ``count`` were missing). ``anchor``: the two
        keys (16 bytes) of entry ``start - 1`` as the caller applied it; a
        log that holds another page there is a reset (older saved data)."""
        redis = _redis()
        client = self._aclient()
        if self._append is None or self._append.registered_client is not client:
            self._append = client.register_script(APPEND)     # EVALSHA, loaded once
        try:
            res = await self._append(keys=[self.meta_key, self.log_key],
                                     args=[self.epoch, start, count, anchor, *blobs])
        except redis.RedisError as exc:
            raise self._unavailable(exc) from exc
        if int(res[0]) == -2:
            self._reseeding(_text(res[1]))
        if int(res[0]) == -3:
            raise IndexConflictError("key_prefix", f"the log of the Redis index {self.where} "
                                     f"does not end with the entry its count says (its last "
                                     f"entry is {_text(res[1]) or 'none'!r}): entries "
                                     f"not written by scrapy-simdup were added to it, or "
                                     f"entries deleted; use another SIMDUP_REDIS_KEY, or clear "
                                     f"it with SIMDUP_RESET = True")
        if int(res[0]) == -4:
            raise IndexResetError(self._lost_message(start - 1, int(res[1])))
        if int(res[0]) < 0:
            raise IndexResetError(self._reset_message())
        self.size = int(res[0])
        return self.size, self._entries(res[1])

    def _entries(self, raw) -> Entries:
        try:
            return _entries(raw)
        except ValueError as exc:
            raise IndexConflictError("key_prefix", str(exc)) from None

    def _reseeding(self, lease: str | None):
        """Raise for an index being re-seeded: an outage while its lease runs,
        a reset once it ran out (the re-seed was abandoned)."""
        if reseed_abandoned(lease):
            raise IndexResetError(f"the Redis index {self.where} was being re-seeded from "
                                  f"another process's replica, which stopped writing it (its "
                                  f"lease ran out)")
        raise IndexUnavailableError(f"the Redis index {self.where} is being re-seeded from "
                                    f"another process's replica")

    def _lost_message(self, had: int, holds: int) -> str:
        return (f"the Redis index {self.where} does not hold the {had:,} entries this process "
                f"applied (it holds {holds:,}: Redis restarted from older saved data, or "
                f"entries were deleted): the pages of the lost entries are no longer shared")

    def _reset_message(self) -> str:
        return (f"the Redis index {self.where} was emptied or re-created under this process "
                f"(Redis restarted without its data, or the index was cleared): the pages "
                f"this process holds are no longer shared")

    async def read(self, start: int, count: int, anchor: bytes = b"") -> Entries:
        """:meth:`read_sync` in the crawl; also checks the epoch and the anchor
        (as :meth:`append`): a reset is an :class:`IndexResetError`."""
        redis = _redis()
        client = self._aclient()
        try:
            async with client.pipeline(transaction=False) as pipe:
                pipe.hmget(self.meta_key, "epoch", "reseeding", "n")
                pipe.execute_command("XRANGE", self.log_key, f"{start}-0", "+", "COUNT", count)
                if anchor:
                    pipe.execute_command("XRANGE", self.log_key, f"{start - 1}-0",
                                         f"{start - 1}-0")
                (epoch, reseeding, n), raw, *prev = await pipe.execute()
        except redis.RedisError as exc:
            raise self._unavailable(exc) from exc
        if _text(epoch) != self.epoch:
            raise IndexResetError(self._reset_message())
        if reseeding is not None:
            self._reseeding(_text(reseeding))
        n = _text(n)
        if n is not None and n.isdigit() and int(n) < start - 1:
            raise IndexResetError(self._lost_message(start - 1, int(n)))
        if prev and (not prev[0] or prev[0][0][1][-1][:16] != anchor):
            raise IndexResetError(self._lost_message(start - 1, int(n or 0)))
        return self._entries(raw)

    async def meta(self) -> dict:
        """What ``P:meta`` holds now (``{}``: no index)."""
        redis = _redis()
        try:
            raw = await self._aclient().hgetall(self.meta_key)
        except redis.RedisError as exc:
            raise self._unavailable(exc) from exc
        return {_text(k): _text(v) for k, v in raw.items()}

    async def reseed(self, n: int, export, chunk: int = 5000) -> bool:
        """Re-create an emptied index with ``n`` entries (``export(a, b)``: the
        blobs of entries ``a + 1 .. b``) under a new epoch naming this one as
        its parent, under a lease renewed at every chunk. False if the index
        exists (another process re-seeded it, or a new one was started). A
        re-seed that fails is deleted again (when Redis still answers), so
        that the next process to notice can claim it."""
        redis = _redis()
        client = self._aclient()
        epoch = uuid.uuid4().hex
        lease = repr(time.time() + RESEED_LEASE)
        try:
            claimed = await client.eval(RESEED_CLAIM, 2, self.meta_key, self.log_key, LAYOUT,
                                        epoch, self.fingerprint, self.distance,
                                        repr(self.min_similarity), self.epoch, n, lease)
        except redis.RedisError as exc:
            raise self._unavailable(exc) from exc
        if not int(claimed):
            return False
        try:
            for a in range(0, n, chunk):
                blobs = export(a, min(n, a + chunk))
                renewed = repr(time.time() + RESEED_LEASE)
                if int(await client.eval(RESEED_WRITE, 2, self.meta_key, self.log_key, epoch,
                                         renewed, a + 1, *blobs)) < 0:
                    raise IndexResetError(self._reset_message())
                lease = renewed
            await client.hdel(self.meta_key, "reseeding")
        except BaseException as exc:
            with contextlib.suppress(redis.RedisError, OSError):
                await client.eval(RESEED_DROP, 2, self.meta_key, self.log_key, epoch, lease)
            if isinstance(exc, redis.RedisError):
                raise self._unavailable(exc) from exc
            raise
        self.epoch = epoch
        self.size = n
        return True

    async def drop_abandoned(self, meta: dict) -> bool:
        """Delete the index ``meta`` describes if it is a re-seed whose lease
        ran out (its writer died or lost Redis); True if deleted."""
        if not reseed_abandoned(meta.get("reseeding")):
            return False
        redis = _redis()
        try:
            return bool(int(await self._aclient().eval(
                RESEED_DROP, 2, self.meta_key, self.log_key, meta.get("epoch") or "",
                meta["reseeding"])))
        except redis.RedisError as exc:
            raise self._unavailable(exc) from exc

    async def blobs_at(self, seqs) -> dict[int, bytes]:
        """The entries ``seqs`` (that are in the log): ``{seq: blob}``."""
        seqs = sorted(set(seqs))
        if not seqs:
            return {}
        redis = _redis()
        client = self._aclient()
        try:
            async with client.pipeline(transaction=False) as pipe:
                for s in seqs:
                    pipe.execute_command("XRANGE", self.log_key, f"{s}-0", f"{s}-0")
                raws = await pipe.execute()
        except redis.RedisError as exc:
            raise self._unavailable(exc) from exc
        out = {}
        for raw in raws:
            entries = _entries(raw)
            out.update(zip(range(entries.first, entries.first + len(entries)), entries.blobs))
        return out

    async def close(self) -> None:
        if self._client is not None and self._loop is asyncio.get_running_loop():
            client, self._client = self._client, None
            try:
                await client.aclose()
            except Exception:  # noqa: BLE001 (closing a broken connection)  # pragma: no cover
                pass
        self._client = None
        self.close_sync()

    def close_sync(self) -> None:
        if self._sync is not None:
            sync, self._sync = self._sync, None
            sync.close()


def stored_size(client, prefix: str) -> int:
    """The pages of the index under ``prefix`` (this layout's or an older
    one's), 0 if it cannot tell (sync client)."""
    for read in (lambda: client.hget(prefix + ":meta", "n"), lambda: client.get(prefix + ":n")):
        try:
            n = _text(read())
        except _redis().ResponseError:      # a key of another type
            continue
        if n and n.isdigit():
            return int(n)
    return 0


class Entries(NamedTuple):
    """Consecutive log entries: the first one's sequence number and the
    blobs (a record and a URL each)."""

    first: int
    blobs: list

    def __len__(self) -> int:
        return len(self.blobs)

    @property
    def last(self) -> int:
        return self.first + len(self.blobs) - 1


def reseed_abandoned(lease: str | None) -> bool:
    """Whether a ``reseeding`` value is a lease that ran out."""
    try:
        return lease is not None and float(lease) < time.time()
    except ValueError:
        return True


def _entries(raw) -> Entries:
    """XRANGE's reply -> :class:`Entries`; entries not of this layout (not
    ``<seq>-0`` ids, consecutive, with one field ``r``) are a ValueError
    naming one. Checked with a few comprehensions: a start-up reads millions."""
    if not raw:
        return Entries(0, [])
    ids = [entry_id for entry_id, _ in raw]
    fields = [f for _, f in raw]
    bad = None
    if any(not i.endswith(b"-0") for i in ids) or any(len(f) != 2 or f[0] != b"r" for f in fields):
        bad = next(k for k, (i, f) in enumerate(zip(ids, fields))
                   if not i.endswith(b"-0") or len(f) != 2 or f[0] != b"r")
    else:
        first, last = ids[0][:-2], ids[-1][:-2]
        if not (first.isdigit() and last.isdigit()) or int(last) - int(first) + 1 != len(ids):
            bad = 0 if not first.isdigit() else len(ids) - 1
    if bad is not None:
        raise ValueError(f"the index log holds an entry not written by scrapy-simdup "
                         f"({_text(ids[bad])!r}: {[_text(f)[:40] for f in fields[bad][::2]]})")
    return Entries(int(first), [f[1] for f in fields])
