"""The Redis store of the shared PSM index.

``RedisIndexStore`` keeps the bucket layout (two keys per page, the sketch
beside key 1), the pipelined snapshot read, the local verified check
(compiled, ``_ext.redisbuckets``) and the atomic Lua check-and-insert
(``index.redis.lua``, which documents the layout and proves the protocol). It
takes probe masks, not volatility: it knows nothing of PSM's flip-set order
(``index.redis.backend`` turns pages into probe masks).

It takes plain values (URL, key prefix, header bits...: in a crawl, from the
``SIMDUP_*`` settings). Its errors name the value at fault; a
:class:`ParameterError` also names the parameter.

Layout choice: the header size ``t`` (usually ``SIMDUP_REDIS_HEADER_BITS``,
default 14) is fixed when the index is created and stored in ``<key>:t``;
every process must agree (a mismatch is a start-up ``ParameterError``).
Growing ``t`` online in a store shared by running writers would need every
bucket rewritten under a global lock, so it is not done. ``t`` = 14 gives 16,384 buckets: from 128k to
4M fingerprints a bucket holds 8 to 256 of them, so Redis' per-key overhead
(about 70 bytes) is small against 8 bytes per fingerprint, and fewer header
bits mean a near-duplicate's header is more often among the first probes.
An index written by an older layout (no ``<key>:v``: buckets without
sketches; or layout 2: no kept flags) is refused at start-up.
"""
from __future__ import annotations

import asyncio
import os
import re
import struct
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from scrapy_simdup._ext import redisbuckets
from scrapy_simdup._limits import (
    DEFAULT_DISTANCE,
    DEFAULT_MIN_SIMILARITY,
    DEFAULT_REDIS_HEADER_BITS,
    MAX_DISTANCE,
    MAX_REDIS_HEADER_BITS,
    MIN_REDIS_HEADER_BITS,
)
from scrapy_simdup.exceptions import IndexConflictError, IndexUnavailableError, ParameterError
from scrapy_simdup.fingerprint.sketch import (
    SKETCH_BYTES,
    check_min_similarity,
    matches_needed,
    similarity,
)
from scrapy_simdup.index.redis.lua import (
    CHECK_AND_INSERT,
    FORMAT,
    KEYS_AT,
    MAX_KEY_BYTES,
    OWN_AT,
    RECORD1,
    RECORD2,
    SETTINGS_MISMATCH,
)

__all__ = ["RedisIndexStore", "StoreMatch", "safe_url", "stored_key"]

_HEXDIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)



class _Snapshot(NamedTuple):
    """What round trip 1 read and the local check found, for one chunk."""
    values: np.ndarray          # key 1 of the candidates
    values2: np.ndarray         # key 2
    sketches: np.ndarray        # uint8[n, SKETCH_BYTES]
    counts: tuple               # probes per candidate, per key
    probe_start: tuple          # per key: candidate c's probes are [c] .. [c + 1] - 1
    headers: tuple              # per key, per probe: the bucket header (own bucket first)
    probe_bucket: tuple         # per key, per probe: index in buckets[key]
    buckets: tuple              # per key: the bucket headers read (ascending)
    lens: tuple                 # per key: their byte lengths when read
    agree: np.ndarray           # per candidate: agreeing sketch bytes of its best match, or -1
    dist: np.ndarray            # ... its distance
    where: np.ndarray           # ... its key-1 bucket header
    pos: np.ndarray             # ... and position (record) there
    key1: np.ndarray            # ... and its key 1
    own_hd: np.ndarray          # per candidate: the bucket of its own entry (its own key-1
                                # bucket, or where its old record is when checked again)
    own_pos: np.ndarray         # ... the entry's position there (OWN_AT, after the
                                # snapshot), or -1
    own_dup: np.ndarray         # ... 1 if that page was stored as a near-duplicate
    own_agree: np.ndarray       # ... its record's agreeing bytes if a candidate, else -1
    own_dist: np.ndarray        # ... its distance
    own_key1: np.ndarray        # ... its key 1
    n_snap: int                 # B:n at the snapshot
    id_snap: bytes              # B:id at the snapshot


@dataclass(frozen=True)
class StoreMatch:
    """A stored page that verifies as a match of a candidate: its key 1, the
    smaller key distance, its key (URL) and the estimated similarity."""
    value: int
    distance: int
    key: str | None
    similarity: float = 1.0


class _Moved(NamedTuple):
    """The script's answer for a page whose best match is a near-duplicate
    record of its own key in another key-1 bucket: check it again with that
    record (``header``, ``position``) as its own entry."""
    header: int
    position: int
    match: StoreMatch


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


class RedisIndexStore:
    """Packed-bucket fingerprint store in Redis with atomic check-and-insert.

    ``url`` is a ``redis://``, ``rediss://`` or ``unix://`` URL; ``base`` the key
    prefix (in a crawl ``SIMDUP_REDIS_KEY`` filled in); ``header_bits`` in
    4..24 and ``distance`` in 0..16 (``scrapy_simdup._limits``); ``params``
    extra keyword arguments for ``redis.asyncio.Redis.from_url``, which
    override the bounded timeouts set here; ``min_similarity`` the estimated
    Jaccard similarity a candidate needs (0: the keys alone decide);
    ``store_duplicates``: a near-duplicate is stored too, under its own key
    (as ``MemoryBackend`` does; a revisit is not). A bad value is a
    :class:`ParameterError` naming the parameter (``"url"``, ``"key_prefix"``,
    ``"header_bits"``, ``"distance"``, ``"params"``).
    """

    def __init__(self, url: str, base: str, header_bits: int = DEFAULT_REDIS_HEADER_BITS,
                 distance: int = DEFAULT_DISTANCE, params: dict | None = None,
                 fingerprint: str | None = None,
                 min_similarity: float = DEFAULT_MIN_SIMILARITY,
                 store_duplicates: bool = True):
        if not isinstance(url, str) or not url.startswith(("redis://", "rediss://", "unix://")):
            raise ParameterError("url", f"the Redis URL must start with redis://, rediss:// "
                                        f"or unix://, got {url!r}")
        if not isinstance(base, str) or not base:
            raise ParameterError("key_prefix", f"the key prefix must be a non-empty string, "
                                               f"got {base!r}")
        if isinstance(header_bits, bool) or not isinstance(header_bits, int) \
                or not MIN_REDIS_HEADER_BITS <= header_bits <= MAX_REDIS_HEADER_BITS:
            raise ParameterError("header_bits", f"header bits must be an integer in "
                                 f"{MIN_REDIS_HEADER_BITS}..{MAX_REDIS_HEADER_BITS}, "
                                 f"got {header_bits!r}")
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
        self.url = url
        self.base = base
        self.header_bits = header_bits
        self.fingerprint = fingerprint   # Fingerprinter.version, kept at <base>:fingerprint
        self.distance = distance
        self.min_similarity = min_similarity
        # a near-duplicate joins the index under its own key, as in memory
        self.store_duplicates = bool(store_duplicates)
        self.needed = matches_needed(min_similarity)
        self.shift = 64 - header_bits
        self.hex_digits = (header_bits + 3) // 4
        # bucket families: key 1 (with the sketches), key 2
        self._prefixes = ((base + ":b:").encode(), (base + ":c:").encode())
        self._fmt = b"%s%0" + str(self.hex_digits).encode() + b"x"
        self._resp_tab = None
        if header_bits <= 16:   # all bucket names once, as RESP bulk strings:
            # one row per bucket (all bucket names of a family have the same
            # length), so an MGET of thousands of buckets is one NumPy gather
            # instead of packing thousands of arguments
            f = self._fmt
            self._resp_tab = tuple(np.frombuffer(b"".join(
                b"$%d\r\n%s\r\n" % (len(f % (p, i)), f % (p, i))
                for i in range(1 << header_bits)), dtype=np.uint8).reshape(1 << header_bits, -1)
                for p in self._prefixes)
        # MGET's first two arguments, B:n and B:id, packed once
        self._resp_head = b"".join(b"$%d\r\n%s\r\n" % (len(k), k) for k in
                                   ((base + ":n").encode(), (base + ":id").encode()))
        self._resp_id = b"$%d\r\n%s\r\n" % (len(base) + 3, (base + ":id").encode())
        # 32 hex digits, then what CHECK_AND_INSERT checks against the index
        self._id_new = f"{uuid.uuid4().hex}{header_bits:02d}{fingerprint or ''}"
        opts = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0,
                "health_check_interval": 30, "retry_on_timeout": False}
        opts.update(params or {})
        self._params = opts
        self._client = None
        self._loop = None
        self._sha = None
        self._keys_sha = None
        self._own_sha = None
        self.last_size = 0

    # -- life cycle -------------------------------------------------------------
    def _make_client(self, module):
        params = self._params
        if module.__name__ == "redis.asyncio" and self.url.startswith("redis://") \
                and "connection_class" not in params:
            packer = _hiredis_connection_class()
            if packer is not None:
                params = dict(params, connection_class=packer)
        try:
            return module.Redis.from_url(self.url, **params)
        except (ValueError, TypeError) as exc:
            raise ParameterError("url, params", f"the Redis URL or connection options are not "
                                 f"usable: {safe_url(self.url)}: {exc}") from None

    def check_server(self):
        """Start-up check (blocking, once): reachable, script loaded, same layout.

        Raises :class:`IndexUnavailableError` naming the URL when Redis cannot
        be reached, :class:`ParameterError` when the index was created with
        another ``t`` (``"header_bits"``), from fingerprints of another recipe
        (``"fingerprint"``), by an older version of this store (no sketches:
        ``"key_prefix"``, the message says what to do), or the prefix holds
        other data (``"key_prefix"``).
        """
        redis = _redis()
        client = self._make_client(redis)
        try:
            try:
                client.ping()
            except (TypeError, ValueError) as exc:  # a connection option redis-py refuses
                raise ParameterError("params", f"the connection options are not usable for "
                                               f"{safe_url(self.url)}: {exc}") from None
            base = self.base
            # an index of an older layout has B:t or B:n but no B:v
            layout, old_t, old_n = client.mget(base + ":v", base + ":t", base + ":n")
            if layout is None and (old_t is not None or old_n is not None):
                try:
                    int(old_t or 0), int(old_n or 0)
                except ValueError:
                    raise ParameterError("key_prefix", f"{self.base!r} already holds keys that "
                                         f"are not a scrapy-simdup index ({self.base}:t = "
                                         f"{old_t!r}, {self.base}:n = {old_n!r}); use another "
                                         f"key prefix") from None
                layout = b"1"
            if layout is not None and _text(layout) != FORMAT:
                raise ParameterError("key_prefix", _old_layout_message(
                    base, safe_url(self.url), _text(layout)))
            pipe = client.pipeline(transaction=True)
            pipe.set(base + ":v", FORMAT, nx=True)
            pipe.set(base + ":t", self.header_bits, nx=True)
            pipe.set(base + ":id", self._id_new, nx=True)
            if self.fingerprint:   # the first process to start records its recipe
                pipe.set(base + ":fingerprint", self.fingerprint, nx=True)
            pipe.get(base + ":t")
            pipe.get(base + ":n")
            pipe.get(base + ":fingerprint")
            stored_t, n, stored_fp = pipe.execute()[-3:]
            self._sha = client.script_load(CHECK_AND_INSERT)
            self._keys_sha = client.script_load(KEYS_AT)
            self._own_sha = client.script_load(OWN_AT)
        except redis.ResponseError as exc:
            if "WRONGTYPE" not in str(exc):
                raise IndexUnavailableError(f"cannot use Redis at {safe_url(self.url)}: "
                                            f"{exc}") from exc
            raise ParameterError("key_prefix", f"{self.base!r} already holds keys that are not "
                                 f"a scrapy-simdup index ({exc}); use another key prefix"
                                 ) from None
        except redis.RedisError as exc:
            raise IndexUnavailableError(f"cannot use Redis at {safe_url(self.url)}: "
                                        f"{exc}") from exc
        finally:
            client.close()
        try:
            stored_t = int(stored_t)
            self.last_size = int(n or 0)
        except (TypeError, ValueError):
            raise ParameterError("key_prefix", f"{self.base!r} already holds keys that are not "
                                 f"a scrapy-simdup index ({self.base}:t = {stored_t!r}, "
                                 f"{self.base}:n = {n!r}); use another key prefix") from None
        if stored_t != self.header_bits:
            raise ParameterError("header_bits", f"{self.header_bits} header bits, but the index "
                                 f"at {self.base!r} was created with {stored_t}; use {stored_t} "
                                 f"or another key prefix")
        stored_fp = stored_fp.decode("utf-8", "replace") if isinstance(stored_fp, bytes) \
            else stored_fp
        if self.fingerprint and stored_fp and stored_fp != self.fingerprint:
            raise ParameterError("fingerprint", f"the index at {self.base!r} holds fingerprints "
                                 f"made with {_short(stored_fp)!r}, this process makes "
                                 f"{_short(self.fingerprint)!r}; they cannot be compared: use "
                                 f"the same fingerprint recipe in every process, or another "
                                 f"key prefix")
        return self

    def size_sync(self) -> int:
        return self.last_size

    async def connect(self):
        """:meth:`check_server`, then the asyncio client (used by every query)."""
        self.check_server()
        self._ensure_client()
        return self

    def _ensure_client(self):
        # asyncio connections belong to one event loop: a new loop (another
        # asyncio.run) gets a new client; the old one died with its loop
        loop = asyncio.get_running_loop()
        if self._client is None or self._loop is not loop:
            self._client = self._make_client(_redis().asyncio)
            self._loop = loop
        return self._client

    async def _close_client(self):
        if self._client is not None and self._loop is asyncio.get_running_loop():
            client, self._client = self._client, None
            try:
                await client.aclose()
            except Exception:  # noqa: BLE001 (closing a broken connection)  # pragma: no cover
                pass

    async def close(self):
        await self._close_client()
        self._client = None        # (a client of a finished event loop is just dropped)

    # -- queries ---------------------------------------------------------------
    def _hex(self, headers) -> bytes:
        """Headers as the concatenation of their bucket-name hex digits."""
        d = self.hex_digits
        shifts = np.arange(4 * (d - 1), -1, -4, dtype=np.uint64)
        digits = (headers[:, None] >> shifts) & np.uint64(15)
        return _HEXDIGITS[digits.astype(np.intp)].tobytes()

    def _keys(self, family: int, headers):
        p, f = self._prefixes[family], self._fmt
        return [f % (p, h) for h in headers]

    async def check_and_add_many(self, values, values2, sketches, masks,
                                 keys: Sequence | None = None, chunk: int = 2048,
                                 ahead: int = 2, _own=None):
        """PSM check (two keys, verified) and insert for a batch.

        ``values``, ``values2``: the pages' two uint64 keys; ``sketches``:
        uint8[n, SKETCH_BYTES] (or a sequence of bytes). ``masks``: the header
        XOR masks of each key in probe order (mask 0 first, then the most
        likely flip sets), already shifted into the top header bits: a pair
        ``(masks1, masks2)`` of per-page lists, or a callable ``masks(a, b)``
        giving that pair for pages ``a:b`` (each item of the pair a list of
        arrays, or a tuple ``(all masks, count per page)``), computed while
        Redis works on earlier chunks. ``keys[i]``: the page's key (URL) or
        None. Returns, per page, ``None`` (new: inserted) or a
        :class:`StoreMatch` (the best verified match), as if the pages were
        checked one after the other. Raises :class:`IndexUnavailableError` on
        Redis faults (nothing is half-done for a page: the script is atomic).

        Chunks of ``chunk`` pages are pipelined: the snapshots of the next
        ``ahead`` chunks are read while this one is checked and its script
        runs, so the client and Redis work at the same time; the scripts run
        in order, one at a time, and a script sees every insertion made after
        its snapshot (``index.redis.lua``): the client flags the candidates that an
        insertion of this call's own chunks not yet committed when their
        snapshot was sent may match.

        A page whose key 1 moved to another bucket since its key was stored
        as a near-duplicate, and whose best match is that old record, is
        checked again (a second call, ``_own``: per page, the header and
        position of the record to set apart as its own entry).
        """
        values = np.ascontiguousarray(values, dtype=np.uint64).ravel()
        values2 = np.ascontiguousarray(values2, dtype=np.uint64).ravel()
        n = values.shape[0]
        if values2.shape[0] != n:
            raise ValueError(f"values2 must have one key per value ({n}), got {values2.shape[0]}")
        sketches = _as_sketches(sketches, n)
        if not callable(masks) and (len(masks) != 2 or any(len(m) != n for m in masks)):
            raise ValueError(f"masks must be a pair of lists with one array per value ({n})")
        if keys is not None and len(keys) != n:
            raise ValueError(f"keys must have one key per value ({n}), got {len(keys)}")
        if not 1 <= chunk <= 65535:     # (per-bucket counts travel as uint16)
            raise ValueError(f"chunk must be in 1..65535, got {chunk}")
        if n == 0:
            return []
        if self._sha is None:
            raise IndexUnavailableError("the Redis index is not connected (call connect() first)")
        self._ensure_client()
        bounds = [(a, min(n, a + chunk)) for a in range(0, n, chunk)]
        out: list = []
        token = os.urandom(8)        # names this call's insertions in the log
        inserted_by: list = []       # per chunk checked: (keys, own headers) of its new ones
        committed = 0                # chunks whose script has returned
        reads: deque = deque()       # (snapshot task, chunks committed when it was started)
        pending = None               # the script of the previous chunk

        def read(k):
            a, b = bounds[k]
            m = masks(a, b) if callable(masks) else (masks[0][a:b], masks[1][a:b])
            reads.append((asyncio.ensure_future(self._snapshot(
                values[a:b], values2[a:b], sketches[a:b], m,
                None if keys is None else keys[a:b],
                None if _own is None else (_own[0][a:b], _own[1][a:b]))), committed))

        try:
            for k in range(len(bounds)):
                a, b = bounds[k]
                while len(reads) < max(1, ahead) and k + len(reads) < len(bounds):
                    read(k + len(reads))
                task, seen = reads.popleft()
                state = await task
                # chunks seen..k-1 may have inserted after this snapshot was read
                flags = self._own_flags(state, inserted_by[seen:k],
                                        None if keys is None else keys[a:b])
                if pending is not None:
                    out.extend(await pending)
                    pending = None
                    committed = k
                is_new = state.agree < 0
                if self.store_duplicates:   # (every page but a revisit may be inserted)
                    is_new = np.ones_like(is_new)
                is_new &= ~self._revisits(state, None if keys is None else keys[a:b])
                own = [hd[ps[:-1]][is_new] for hd, ps in zip(state.headers, state.probe_start)]
                inserted_by.append((state.values[is_new], own[0], state.values2[is_new], own[1]))
                pending = asyncio.ensure_future(
                    self._commit(state, None if keys is None else keys[a:b], flags, token))
                await asyncio.sleep(0)          # let it send its commands now
            out.extend(await pending)
            pending = None
            moved = [i for i, m in enumerate(out) if isinstance(m, _Moved)]
            if moved and _own is None:
                sel = np.array(moved, dtype=np.intp)
                again = await self.check_and_add_many(
                    values[sel], values2[sel], sketches[sel], _masks_of(masks, moved),
                    None if keys is None else [keys[i] for i in moved], chunk, ahead,
                    _own=(np.array([out[i].header for i in moved], dtype=np.uint64),
                          np.array([out[i].position for i in moved], dtype=np.int64)))
                for i, m in zip(moved, again):
                    out[i] = m
            for i in moved if _own is not None else ():
                out[i] = out[i].match       # (a key stored three times: as found)
        finally:
            for task in [t for t, _ in reads] + ([pending] if pending is not None else []):
                task.cancel()
                try:
                    await task
                except BaseException:  # noqa: BLE001 (the first error is the one raised)
                    pass
        return out

    def _revisits(self, state, keys) -> np.ndarray:
        """Per candidate, whether it is a revisit decided in the snapshot: its
        own entry (``OWN_AT``) was a kept page whose record verifies, and its
        key is not met twice in the chunk (an earlier copy may store it anew)."""
        rev = (state.own_pos >= 0) & (state.own_dup == 0) & (state.own_agree >= self.needed)
        if rev.any() and keys is not None:
            seen = set()
            for i, k in enumerate(keys):
                kb = _key_bytes(k)
                if kb in seen:
                    rev[i] = False
                seen.add(kb)
        return rev

    def _own_flags(self, state, earlier, state_keys=None) -> np.ndarray:
        """Per candidate, 1 if an insertion of this call that the snapshot may
        miss (an earlier new candidate of this chunk, or one of the chunks in
        ``earlier``: ``(keys 1, headers 1, keys 2, headers 2)`` of those not
        committed when the snapshot was read) lands in one of its probed
        buckets of either key *within distance h* of that key: only then must
        the script re-check this call's own insertions for it. Insertions of
        other writers are always re-checked (``index.redis.lua``)."""
        earlier = [e for e in earlier if e[0].shape[0]]
        flags = None
        idx = np.where((state.agree < 0) | self.store_duplicates, -1, 0).astype(np.int64)
        idx[self._revisits(state, state_keys)] = 0      # never inserted
        for f, vals in enumerate((state.values, state.values2)):
            ev = np.concatenate([e[2 * f] for e in earlier]) if earlier else np.zeros(0, np.uint64)
            eh = np.concatenate([e[2 * f + 1] for e in earlier]) if earlier else \
                np.zeros(0, np.uint64)
            got = redisbuckets.own_flags(vals, state.probe_start[f], state.headers[f], idx,
                                         ev, eh, self.distance)
            flags = got if flags is None else flags | got
        return flags

    def _probes(self, values, masks):
        """(counts, probe_start, headers) of one key's masks."""
        n = values.shape[0]
        if isinstance(masks, tuple):    # (all masks, count per value): already flat
            allmasks = np.ascontiguousarray(masks[0], dtype=np.uint64)
            counts = np.asarray(masks[1], dtype=np.int64)
            if counts.shape != (n,) or allmasks.ndim != 1 or counts.sum() != allmasks.shape[0]:
                raise ValueError("flat masks must come with one count per value")
        else:
            if len(masks) != n:
                raise ValueError(f"masks must have one array per value ({n}), got {len(masks)}")
            counts = np.fromiter(map(len, masks), dtype=np.int64, count=n)
            allmasks = np.concatenate(masks).astype(np.uint64, copy=False) if n else \
                np.zeros(0, np.uint64)
            if allmasks.ndim != 1:
                raise ValueError("masks must be 1-d arrays")
        if counts.min() < 1 or counts.max() > 65535:
            raise ValueError("masks must be 1-d arrays of 1 to 65,535 masks")
        probe_start = np.zeros(n + 1, dtype=np.int64)
        np.cumsum(counts, out=probe_start[1:])
        if allmasks[probe_start[:-1]].any():
            raise ValueError("every masks[i] must start with 0 (the page's own bucket)")
        headers = (np.repeat(values, counts) ^ allmasks) >> np.uint64(self.shift)
        return counts, probe_start, headers

    def _parts(self, family, buckets, res):
        """Bucket strings read (None: empty) -> (data uint8, offsets, lengths)."""
        rec = (RECORD1, RECORD2)[family]
        parts = [b if b is not None else b"" for b in res]
        lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
        if (lens % rec).any():
            bad = int(buckets[int(np.flatnonzero(lens % rec)[0])])
            raise ParameterError("key_prefix", f"Redis key {self._keys(family, [bad])[0]!r} is "
                                 f"not a simdup bucket (length not a multiple of {rec}): is the "
                                 f"key prefix {self.base!r} shared with something else?")
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(lens, out=offsets[1:])
        return np.frombuffer(b"".join(parts), dtype=np.uint8), offsets, lens

    async def _snapshot(self, values, values2, sketches, masks, keys=None,
                        own=None) -> _Snapshot:
        """Round trip 1: MGET the probed buckets of both keys, then (same
        pipeline) OWN_AT: each page's own entry; local check (compiled); a
        second read when a key-2 match's sketch is in a key-1 bucket not read."""
        RedisError = _redis().exceptions.RedisError
        probes = [self._probes(v, m) for v, m in zip((values, values2), masks)]
        counts = tuple(p[0] for p in probes)
        probe_start = tuple(p[1] for p in probes)
        headers = tuple(p[2] for p in probes)
        # candidates of a chunk share many buckets: each is read once
        (b1, pb1), (b2, pb2) = (np.unique(h, return_inverse=True) for h in headers)
        pb1, pb2 = pb1.astype(np.int64).ravel(), pb2.astype(np.int64).ravel()
        n = values.shape[0]
        own_hd = headers[0][probe_start[0][:-1]]
        key_bytes = None if keys is None else [_key_bytes(k) for k in keys]
        if own is not None or (key_bytes is not None and not any(key_bytes)):
            key_bytes = None
        try:
            # 1. snapshot: one atomic MGET, then the own entries
            res, found_own = await self._read_buckets(
                (b1, b2), own=None if key_bytes is None else (own_hd, key_bytes))
            if own is not None:     # checked again: its old near-duplicate record
                own_hd = np.asarray(own[0], dtype=np.uint64)
                own_pos = np.asarray(own[1], dtype=np.int64)
                own_dup = np.ones(n, dtype=bool)
            else:
                found_own = np.full(n, -1, np.int64) if found_own is None else \
                    np.asarray(found_own, dtype=np.int64)
                own_pos = np.where(found_own >= 0, found_own >> 1, -1)
                own_dup = (found_own >= 0) & (found_own & 1 == 1)
            n_snap = int(res[0] or 0)
            id_snap = res[1] or b""
            data1, off1, lens1 = self._parts(0, b1, res[2:2 + b1.shape[0]])
            data2, off2, lens2 = self._parts(1, b2, res[2 + b1.shape[0]:])
            # 2. local check
            h, need = self.distance, self.needed
            found = redisbuckets.scan_verified(data1, off1, b1, pb1, probe_start[0], data2, off2,
                                               pb2, probe_start[1], values, values2, sketches,
                                               h, need, own_hd, own_pos)
            if found[5].any():
                # key-2 matches whose sketches lie in key-1 buckets not read yet
                extra = redisbuckets.missing_buckets(data2, off2, pb2, probe_start[1], values2,
                                                     found[5], b1, h)
                more, _ = await self._read_buckets((extra, extra[:0]), head=False)
                if (more[0] or b"") == id_snap:     # else reset meanwhile: the script checks
                    d_x, _, lens_x = self._parts(0, extra, more[1:])
                    allb = np.concatenate((b1, extra))
                    order = np.argsort(allb, kind="stable")
                    rank = np.empty_like(order)
                    rank[order] = np.arange(order.shape[0])
                    lens_all = np.concatenate((lens1, lens_x))[order]
                    starts = np.concatenate((off1[:-1], off1[-1] + np.cumsum(lens_x) - lens_x))
                    data_all = np.concatenate((data1, d_x))
                    pieces = [data_all[starts[i]:starts[i] + lens_all[k]]
                              for k, i in enumerate(order.tolist())]
                    b1, lens1, pb1 = allb[order], lens_all, rank[pb1]
                    data1 = np.concatenate(pieces) if pieces else data1[:0]
                    off1 = np.zeros(b1.shape[0] + 1, dtype=np.int64)
                    np.cumsum(lens1, out=off1[1:])
                    found = redisbuckets.scan_verified(
                        data1, off1, b1, pb1, probe_start[0], data2, off2, pb2, probe_start[1],
                        values, values2, sketches, h, need, own_hd, own_pos)
        except RedisError as exc:
            raise self._failed(exc) from exc
        agree, dist, where, pos, key1, _, own_agree, own_dist, own_key1 = found
        return _Snapshot(values, values2, sketches, counts, probe_start, headers, (pb1, pb2),
                         (b1, b2), (lens1, lens2), agree, dist, where, pos, key1,
                         own_hd, own_pos, own_dup.astype(np.uint8), own_agree, own_dist,
                         own_key1,
                         n_snap, id_snap)

    async def _read_buckets(self, buckets, head: bool = True, own=None):
        """``MGET B:n B:id <key-1 buckets> <key-2 buckets>``: one atomic
        command (``head=False``: ``B:id`` only); with ``own`` (the pages' own
        key-1 headers and keys), OWN_AT after it in the same pipeline.
        Returns (MGET reply, OWN_AT reply or None)."""
        base = self.base
        names = [base + ":n", base + ":id"] if head else [base + ":id"]
        client = self._client
        target = client if own is None else client.pipeline(transaction=False)
        if self._resp_tab is not None and _packs_resp(client):
            head_resp = self._resp_head if head else self._resp_id
            reply = target.execute_command("MGET", PackedCommand(
                head_resp + b"".join(tab[b.astype(np.intp)].tobytes()
                                     for tab, b in zip(self._resp_tab, buckets)),
                len(names) + sum(b.shape[0] for b in buckets)))
        else:
            reply = target.mget(names + self._keys(0, buckets[0].tolist()) +
                                self._keys(1, buckets[1].tolist()))
        if own is None:
            return await reply, None
        own_args = (0, base + ":u:", self.hex_digits, self._hex(own[0]), *own[1])
        target.evalsha(self._own_sha, *own_args)
        res, found = await target.execute(raise_on_error=False)
        if isinstance(res, Exception):
            raise res
        if isinstance(found, _redis().exceptions.NoScriptError):
            # not in the server's script cache (a restart, SCRIPT FLUSH): still after the MGET
            self._own_sha = await client.script_load(OWN_AT)
            found = await client.evalsha(self._own_sha, *own_args)
        elif isinstance(found, Exception):
            raise found
        return res, found

    @staticmethod
    def _local_own(state: _Snapshot, sel) -> bytes:
        """Per selected candidate, its own entry for the script: its record's
        agreeing bytes + 1 (0: not a candidate in the snapshot), distance,
        key 1 (LE), position + 1 (0: none), 1 if a near-duplicate."""
        rec = np.zeros(int(sel.sum()), dtype=[("a", "u1"), ("d", "u1"), ("k", "<u8"),
                                              ("p", "<u4"), ("f", "u1")])
        seen = (state.own_agree[sel] >= 0) & (state.own_pos[sel] >= 0)
        rec["a"] = np.where(seen, state.own_agree[sel] + 1, 0)
        rec["d"] = np.where(seen, state.own_dist[sel], 0)
        rec["k"] = state.own_key1[sel]
        rec["p"] = state.own_pos[sel] + 1
        rec["f"] = state.own_dup[sel]
        return rec.tobytes()

    @staticmethod
    def _local_best(state: _Snapshot, sel) -> bytes:
        """Per selected candidate, its best match in the snapshot for the
        script: agreeing bytes + 1 (0: none), distance, key 1 (LE), position."""
        rec = np.zeros(int(sel.sum()), dtype=[("a", "u1"), ("d", "u1"), ("k", "<u8"),
                                              ("p", "<u4")])
        found = state.agree[sel] >= 0
        rec["a"] = np.where(found, state.agree[sel] + 1, 0)
        rec["d"] = np.where(found, state.dist[sel], 0)
        rec["k"] = state.key1[sel]
        rec["p"] = np.where(found, state.pos[sel], 0)
        return rec.tobytes()

    async def _commit(self, state: _Snapshot, keys, flags=None, token=b"\0" * 8):
        """Round trip 2: the atomic script for the new ones, the keys of the matches."""
        exceptions = _redis().exceptions
        NoScriptError, RedisError = exceptions.NoScriptError, exceptions.RedisError
        n = state.values.shape[0]
        base = self.base
        # to the script: the new ones, and the matched ones that an earlier
        # page of this call (not in the snapshot) may match better
        is_new = state.agree < 0
        if flags is not None:
            is_new = is_new | (flags != 0)
        if self.store_duplicates:   # every page may be inserted (unless a revisit)
            is_new = np.ones_like(is_new)
        # a kept page met again that still verifies: decided in the snapshot
        revisit = self._revisits(state, keys)
        is_new &= ~revisit
        new = np.flatnonzero(is_new).tolist()
        local = np.flatnonzero(~is_new & ~revisit).tolist()
        try:
            # 3. one pipeline: atomic check-and-insert of the new ones, keys of the matches
            script_args = None
            if new:
                if keys is None:
                    argv_keys = [b""] * len(new)
                else:
                    argv_keys = [_key_bytes(keys[i]) for i in new]
                fam = []
                for f in range(2):
                    sel = np.repeat(is_new, state.counts[f])
                    fam += [self._hex(state.buckets[f]),
                            state.lens[f].astype("<u4").tobytes(),
                            state.probe_bucket[f][sel].astype("<u4").tobytes()]
                script_args = (0, base, self.distance, state.n_snap, state.id_snap,
                               self.hex_digits,
                               state.values[is_new].astype("<u8").tobytes(),
                               state.values2[is_new].astype("<u8").tobytes(),
                               state.sketches[is_new].tobytes(),
                               state.counts[0][is_new].astype("<u2").tobytes(),
                               state.counts[1][is_new].astype("<u2").tobytes(),
                               *fam, self._id_new,
                               (np.ones(n, np.uint8) if flags is None else flags)[is_new]
                               .tobytes(), token, self.needed,
                               self._local_best(state, is_new),
                               self._hex(state.where[is_new]),
                               self._local_own(state, is_new),
                               self._hex(state.own_hd[is_new]),
                               b"1" if self.store_duplicates else b"0", *argv_keys)
            if local:
                # each match's key is entry `pos` of its key-1 bucket's key list:
                # one request per distinct (bucket, position), grouped by bucket
                m_where, m_pos = state.where[~is_new], state.pos[~is_new].astype(np.uint64)
                asked, where = np.unique(np.stack((m_where, m_pos)), axis=1,
                                         return_inverse=True)
                ub, per_bucket = np.unique(asked[0], return_counts=True)
                keys_args = (0, base + ":u:", self.hex_digits, self._hex(ub),
                             per_bucket.astype("<u2").tobytes(),
                             asked[1].astype("<u4").tobytes())
            replies = []
            if new or local:
                pipe = self._client.pipeline(transaction=False)
                if new:
                    pipe.evalsha(self._sha, *script_args)
                if local:
                    pipe.evalsha(self._keys_sha, *keys_args)
                replies = await pipe.execute(raise_on_error=False)
                # A script missing from the server's cache (a restart that kept
                # the data, a failover, SCRIPT FLUSH) did not run: load it and run
                # that one again, never one that ran (the insert must run once).
                for i, (attr, source, args) in enumerate(
                        ([("_sha", CHECK_AND_INSERT, script_args)] if new else []) +
                        ([("_keys_sha", KEYS_AT, keys_args)] if local else [])):
                    if isinstance(replies[i], NoScriptError):
                        setattr(self, attr, await self._client.script_load(source))
                        replies[i] = await self._client.evalsha(getattr(self, attr), *args)
                    elif isinstance(replies[i], Exception):
                        raise replies[i]
        except RedisError as exc:
            if SETTINGS_MISMATCH in str(exc):
                theirs = _short(str(exc).split(SETTINGS_MISMATCH + " ", 1)[1])
                if theirs.startswith("layout"):
                    raise IndexConflictError("key_prefix", _old_layout_message(
                        base, safe_url(self.url), theirs.split(" ", 1)[1])) from exc
                raise IndexConflictError(
                    "header_bits" if theirs.startswith("header bits") else "fingerprint",
                    f"the index at {base!r} ({safe_url(self.url)}) was re-created with other "
                    f"settings than this process's ({theirs}): its fingerprints cannot be "
                    f"compared with this process's; restart the crawls with the same "
                    f"settings") from exc
            raise self._failed(exc) from exc
        out: list = [None] * n
        r = 0
        inserted = 0
        if new:
            for i, item in zip(new, replies[0]):
                if item == -1:      # its only match was itself, stored as a near-duplicate
                    continue
                if item != 0:
                    val = struct.unpack("<Q", item[0])[0]
                    out[i] = StoreMatch(val, int(item[1]), _text(item[2]),
                                        similarity(int(item[3])))
                    if int(item[4]) == 2:   # its own old record: checked again
                        out[i] = _Moved(int(_text(item[5]), 16), int(item[6]), out[i])
                    else:
                        inserted += int(item[4])
                else:
                    inserted += 1
            r = 1
        self.last_size = state.n_snap + inserted
        for i in np.flatnonzero(revisit).tolist():
            out[i] = StoreMatch(int(state.own_key1[i]), int(state.own_dist[i]),
                                _text(_key_bytes(keys[i])), similarity(int(state.own_agree[i])))
        if local:
            found_keys = replies[r]
            for i, k in zip(local, np.ravel(where).tolist()):
                out[i] = StoreMatch(int(state.key1[i]), int(state.dist[i]), _text(found_keys[k]),
                                    similarity(int(state.agree[i])))
        return out

    def _failed(self, exc) -> IndexUnavailableError:
        """The error for a Redis command that failed mid-crawl (another type of
        key under the prefix is named, like at start-up)."""
        if "WRONGTYPE" in str(exc):
            return IndexConflictError("key_prefix", f"Redis index at {safe_url(self.url)} "
                                      f"failed: a key under the key prefix {self.base!r} was "
                                      f"replaced by a key of another type ({exc}); is the prefix "
                                      f"shared with something else?")
        return IndexUnavailableError(f"Redis index at {safe_url(self.url)} failed: {exc}")

    async def size(self) -> int:
        RedisError = _redis().exceptions.RedisError
        try:
            return int(await self._client.get(self.base + ":n") or 0)
        except RedisError as exc:
            raise self._failed(exc) from exc

    async def clear(self):
        """Delete the whole index (all buckets and bookkeeping keys)."""
        client = self._client
        batch = []
        for pattern in (":b:*", ":c:*", ":u:*"):
            async for k in client.scan_iter(match=self.base + pattern, count=1000):
                batch.append(k)
                if len(batch) >= 1000:
                    await client.unlink(*batch)
                    batch = []
        if batch:
            await client.unlink(*batch)
        await client.delete(self.base + ":n", self.base + ":log", self.base + ":id")
        await client.set(self.base + ":id", uuid.uuid4().hex)


_HIREDIS_CONN = []


class PackedCommand:
    """The arguments of a command after its name, already RESP-encoded
    (``count`` bulk strings): sent as they are by the connection class below."""

    __slots__ = ("data", "count")

    def __init__(self, data: bytes, count: int):
        self.data = data
        self.count = count


def _packs_resp(client) -> bool:
    cls = _HIREDIS_CONN[0] if _HIREDIS_CONN else None
    return cls is not None and client.connection_pool.connection_class is cls


def _hiredis_connection_class():
    """redis.asyncio's TCP connection packing commands with hiredis (C), if present.

    redis-py's asyncio client packs commands in Python, which costs more than
    the whole Redis round trip for an MGET of thousands of buckets.
    """
    if not _HIREDIS_CONN:
        try:    # optional dependencies, loaded by crawls with a Redis index only
            import hiredis  # noqa: PLC0415
            Connection = _redis().asyncio.connection.Connection
        except ImportError:
            _HIREDIS_CONN.append(None)
        else:
            pack = hiredis.pack_command

            class HiredisPackedConnection(Connection):
                def pack_command(self, *args):
                    if len(args) == 2 and type(args[1]) is PackedCommand:
                        name = args[0].encode()
                        return [b"*%d\r\n$%d\r\n%s\r\n" % (args[1].count + 1, len(name),
                                                                name) + args[1].data]
                    if isinstance(args[0], str) and " " in args[0]:
                        args = tuple(args[0].split()) + args[1:]
                    return [pack(args)]

            _HIREDIS_CONN.append(HiredisPackedConnection)
    return _HIREDIS_CONN[0]


def _masks_of(masks, idx):
    """The masks of pages ``idx`` only, as a pair of per-page lists."""
    if not callable(masks):
        return ([masks[0][i] for i in idx], [masks[1][i] for i in idx])
    out = ([], [])
    for i in idx:
        for f, m in enumerate(masks(i, i + 1)):
            out[f].append(np.asarray(m[0]))   # (all masks, count) or [masks]
    return out


def _as_sketches(sketches, n: int) -> np.ndarray:
    """bytes of each page, or uint8[n, SKETCH_BYTES] -> uint8[n, SKETCH_BYTES]."""
    if not isinstance(sketches, np.ndarray):
        items = [bytes(x) for x in sketches]
        if any(len(x) != SKETCH_BYTES for x in items):
            raise ValueError(f"each sketch must be {SKETCH_BYTES} bytes")
        sketches = np.frombuffer(b"".join(items), dtype=np.uint8).reshape(-1, SKETCH_BYTES)
    if sketches.dtype != np.uint8 or sketches.shape != (n, SKETCH_BYTES):
        raise ValueError(f"sketches must have shape ({n}, {SKETCH_BYTES}) and dtype uint8")
    return np.ascontiguousarray(sketches)


def _old_layout_message(base: str, url: str, layout) -> str:
    why = ("its key lists do not record which pages were kept, so a near-duplicate met again "
           "would pass as a revisit" if str(layout) == "2" else
           "its buckets hold no verification sketches, so its pages cannot be checked by "
           "this version's match rule")
    return (f"the index at {base!r} ({url}) was written by an older scrapy-simdup (bucket "
            f"layout {layout}, this version needs {FORMAT}): {why}. Use a new "
            f"key prefix (SIMDUP_REDIS_KEY), or delete the old index's keys (redis-cli --scan "
            f"--pattern '{base}:*' | xargs redis-cli unlink) and crawl again")


def _key_bytes(key) -> bytes:
    """A page key as stored: UTF-8, at most 65,535 bytes (longer ones cut)."""
    if key is None:
        return b""
    if isinstance(key, str):
        key = key.encode("utf-8", "surrogatepass")
    elif not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"keys must be str, bytes or None, got {type(key).__name__}")
    return bytes(key[:MAX_KEY_BYTES])


def _text(v):
    if v is None or v == b"":
        return None
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)


def _short(text: str, limit: int = 200) -> str:
    """``text`` cut for a message (a recipe holds the user's content XPath)."""
    text = text.replace("\x00", "\\0")
    return text if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


def safe_url(url: str) -> str:
    """The URL without a password (``user:pass@`` or a ``password=`` query)."""
    if "@" in url and "://" in url:
        scheme, rest = url.split("://", 1)
        url = scheme + "://***@" + rest.rsplit("@", 1)[1]
    return re.sub(r"(?i)([?&]password=)[^&#]*", r"\1***", url)


def stored_key(key) -> str | None:
    """A page key as the store gives it back (UTF-8, cut at 65,535 bytes)."""
    return _text(_key_bytes(key))
