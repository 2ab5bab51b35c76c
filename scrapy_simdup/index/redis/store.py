"""The Redis store of the shared PSM index.

``RedisIndexStore`` keeps the bucket layout, the pipelined snapshot read, the
local Hamming check (compiled, ``_ext.redisbuckets``) and the atomic Lua
check-and-insert (``index.redis.lua``, which documents the layout and proves
the protocol). It takes probe masks, not volatility: it knows nothing of
PSM's flip-set order (``index.redis.backend`` turns pages into probe masks).

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
    DEFAULT_REDIS_HEADER_BITS,
    MAX_DISTANCE,
    MAX_REDIS_HEADER_BITS,
    MIN_REDIS_HEADER_BITS,
)
from scrapy_simdup.exceptions import IndexConflictError, IndexUnavailableError, ParameterError
from scrapy_simdup.index.redis.lua import CHECK_AND_INSERT, KEYS_AT, SETTINGS_MISMATCH

__all__ = ["RedisIndexStore", "StoreMatch", "safe_url", "stored_key"]

_HEXDIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)



class _Snapshot(NamedTuple):
    """What round trip 1 read and the local check found, for one chunk."""
    values: np.ndarray          # the candidates
    counts: np.ndarray          # probes per candidate
    probe_start: np.ndarray     # candidate c's probes: probe_start[c] .. probe_start[c + 1] - 1
    headers: np.ndarray         # per probe: the bucket header (the first is the candidate's own)
    lens: np.ndarray            # per probe: its bucket's byte length in the snapshot
    entries: np.ndarray         # the fingerprints of the distinct buckets read, concatenated
    idx: np.ndarray             # per candidate: position in entries of its first match, or -1
    dist: np.ndarray            # ... and its distance
    n_snap: int                 # B:n at the snapshot
    id_snap: bytes              # B:id at the snapshot
    buckets: np.ndarray         # the distinct bucket headers read
    bucket_offsets: np.ndarray  # bucket b's entries: entries[bucket_offsets[b] : [b + 1]]


@dataclass(frozen=True)
class StoreMatch:
    """A stored fingerprint within the distance of a candidate."""
    value: int
    distance: int
    key: str | None



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
    override the bounded timeouts set here. A bad value is a
    :class:`ParameterError` naming the parameter (``"url"``, ``"key_prefix"``,
    ``"header_bits"``, ``"distance"``, ``"params"``).
    """

    def __init__(self, url: str, base: str, header_bits: int = DEFAULT_REDIS_HEADER_BITS,
                 distance: int = 3, params: dict | None = None, fingerprint: str | None = None):
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
        if params is not None and not isinstance(params, dict):
            raise ParameterError("params", f"the connection options must be a dict, "
                                           f"got {params!r}")
        self.url = url
        self.base = base
        self.header_bits = header_bits
        self.fingerprint = fingerprint   # Fingerprinter.version, kept at <base>:fingerprint
        self.distance = distance
        self.shift = 64 - header_bits
        self.hex_digits = (header_bits + 3) // 4
        self._bprefix = (base + ":b:").encode()
        self._fmt = b"%s%0" + str(self.hex_digits).encode() + b"x"
        self._keytab = None
        self._resp_tab = None
        if header_bits <= 16:   # all bucket names once (<= 65,536 short bytes)
            p, f = self._bprefix, self._fmt
            self._keytab = [f % (p, i) for i in range(1 << header_bits)]
            # ... and each as a RESP bulk string: one row per bucket (all bucket
            # names have the same length), so an MGET of thousands of buckets
            # is one NumPy gather instead of packing thousands of arguments
            self._resp_tab = np.frombuffer(b"".join(
                b"$%d\r\n%s\r\n" % (len(k), k) for k in self._keytab),
                dtype=np.uint8).reshape(1 << header_bits, -1)
        # MGET's first two arguments, B:n and B:id, packed once
        self._resp_head = b"".join(b"$%d\r\n%s\r\n" % (len(k), k) for k in
                                   ((base + ":n").encode(), (base + ":id").encode()))
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
        (``"fingerprint"``), or the prefix holds other data (``"key_prefix"``).
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
            pipe = client.pipeline(transaction=True)
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

    def _keys(self, headers):
        tab = self._keytab
        if tab is not None:
            return [tab[h] for h in headers]
        p, f = self._bprefix, self._fmt
        return [f % (p, h) for h in headers]

    async def check_and_add_many(self, values, masks, keys: Sequence | None = None,
                                 chunk: int = 2048, ahead: int = 2):
        """PSM-F check and insert for a batch.

        ``values``: uint64 fingerprints; ``masks[i]``: uint64 header XOR masks
        for ``values[i]`` in probe order (mask 0 first, then the most likely
        flip sets), already shifted into the top header bits (or a callable
        ``masks(a, b)`` giving them for ``values[a:b]``, as a list or as a
        tuple ``(all masks, count per value)``, computed while Redis works on
        earlier chunks); ``keys[i]``: the page's key (URL)
        or None. Returns, per value, ``None`` (new: inserted) or a
        :class:`StoreMatch`, as if the values were checked one after the
        other. Raises :class:`IndexUnavailableError` on Redis faults (nothing is
        half-done for a value: the script is atomic).

        Chunks of ``chunk`` values are pipelined: the snapshots of the next
        ``ahead`` chunks are read while this one is checked and its script
        runs, so the client and Redis work at the same time; the scripts run
        in order, one at a time, and a script sees every insertion made after
        its snapshot (``index.redis.lua``): the client flags the candidates that an
        insertion of this call's own chunks not yet committed when their
        snapshot was sent may match.
        """
        values = np.ascontiguousarray(values, dtype=np.uint64).ravel()
        n = values.shape[0]
        if not callable(masks) and len(masks) != n:
            raise ValueError(f"masks must have one array per value ({n}), got {len(masks)}")
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
        inserted_by: list = []       # per chunk checked: (values, own headers) of its new ones
        committed = 0                # chunks whose script has returned
        reads: deque = deque()       # (snapshot task, chunks committed when it was started)
        pending = None               # the script of the previous chunk

        def read(k):
            a, b = bounds[k]
            m = masks(a, b) if callable(masks) else masks[a:b]
            reads.append((asyncio.ensure_future(self._snapshot(values[a:b], m)), committed))

        try:
            for k in range(len(bounds)):
                while len(reads) < max(1, ahead) and k + len(reads) < len(bounds):
                    read(k + len(reads))
                task, seen = reads.popleft()
                state = await task
                # chunks seen..k-1 may have inserted after this snapshot was read
                flags = self._own_flags(state, inserted_by[seen:k])
                if pending is not None:
                    out.extend(await pending)
                    pending = None
                    committed = k
                is_new = state.idx < 0
                own = state.headers[state.probe_start[:-1]]     # each one's own bucket
                inserted_by.append((state.values[is_new], own[is_new]))
                a, b = bounds[k]
                pending = asyncio.ensure_future(
                    self._commit(state, None if keys is None else keys[a:b], flags, token))
                await asyncio.sleep(0)          # let it send its commands now
            out.extend(await pending)
            pending = None
        finally:
            for task in [t for t, _ in reads] + ([pending] if pending is not None else []):
                task.cancel()
                try:
                    await task
                except BaseException:  # noqa: BLE001 (the first error is the one raised)
                    pass
        return out

    def _own_flags(self, state, earlier) -> np.ndarray:
        """Per candidate, 1 if an insertion of this call that the snapshot may
        miss (an earlier new candidate of this chunk, or one of the chunks in
        ``earlier``: ``(values, own headers)`` of those not committed when the
        snapshot was read) lands in one of its probed buckets *within distance
        h*: only then must the script re-check this call's own insertions for
        it. Insertions of other writers are always re-checked (``index.redis.lua``)."""
        earlier = [e for e in earlier if e[0].shape[0]]
        ev = np.concatenate([e[0] for e in earlier]) if earlier else np.zeros(0, np.uint64)
        eh = np.concatenate([e[1] for e in earlier]) if earlier else np.zeros(0, np.uint64)
        return redisbuckets.own_flags(state.values, state.probe_start, state.headers, state.idx,
                                      ev, eh, self.distance)

    async def _snapshot(self, values, masks) -> _Snapshot:
        """Round trip 1: MGET the probed buckets; local check (compiled)."""
        RedisError = _redis().exceptions.RedisError
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
        # candidates of a chunk share many buckets: each is read once
        buckets, probe_bucket = np.unique(headers, return_inverse=True)
        try:
            # 1. snapshot: one atomic MGET
            res = await self._read_buckets(buckets)
            n_snap = int(res[0] or 0)
            id_snap = res[1] or b""
            parts = [b if b is not None else b"" for b in res[2:]]
            bucket_lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
            if (bucket_lens & 7).any():
                bad = int(buckets[int(np.flatnonzero(bucket_lens & 7)[0])])
                raise ParameterError("key_prefix", f"Redis key {self._keys([bad])[0]!r} is not "
                                     f"a simdup bucket (length not a multiple of 8): is the key "
                                     f"prefix {self.base!r} shared with something else?")
            entries = np.frombuffer(b"".join(parts), dtype="<u8")
            bucket_offsets = np.zeros(len(parts) + 1, dtype=np.int64)
            np.cumsum(bucket_lens >> 3, out=bucket_offsets[1:])
            # 2. local check
            idx, dist = redisbuckets.scan_first_buckets(entries, bucket_offsets, probe_bucket,
                                                        probe_start, values, self.distance)
        except RedisError as exc:
            raise self._failed(exc) from exc
        return _Snapshot(values, counts, probe_start, headers, bucket_lens[probe_bucket],
                         entries, idx, dist, n_snap, id_snap, buckets, bucket_offsets)

    async def _read_buckets(self, buckets) -> list:
        """``MGET B:n B:id <buckets>``: one atomic command."""
        base = self.base
        if self._resp_tab is not None and _packs_resp(self._client):
            return await self._client.execute_command("MGET", PackedCommand(
                self._resp_head + self._resp_tab[buckets.astype(np.intp)].tobytes(),
                2 + buckets.shape[0]))
        return await self._client.mget([base + ":n", base + ":id"] +
                                       self._keys(buckets.tolist()))

    async def _commit(self, state: _Snapshot, keys, flags=None, token=b"\0" * 8):
        """Round trip 2: the atomic script for the new ones, the keys of the matches."""
        exceptions = _redis().exceptions
        NoScriptError, RedisError = exceptions.NoScriptError, exceptions.RedisError
        values, counts, headers, lens, idx, dist = (state.values, state.counts, state.headers,
                                                    state.lens, state.idx, state.dist)
        entries, n_snap, id_snap = state.entries, state.n_snap, state.id_snap
        buckets, bucket_offsets = state.buckets, state.bucket_offsets
        n = values.shape[0]
        base = self.base
        is_new = idx < 0
        new = np.flatnonzero(is_new).tolist()
        local = np.flatnonzero(~is_new).tolist()
        try:
            # 3. one pipeline: atomic check-and-insert of the new ones, keys of the matches
            script_args = None
            if new:
                sel = np.repeat(is_new, counts)
                if keys is None:
                    argv_keys = [b""] * len(new)
                else:
                    argv_keys = [_key_bytes(keys[i]) for i in new]
                script_args = (0, base, self.distance, n_snap, id_snap, self.hex_digits,
                               values[is_new].astype("<u8").tobytes(),
                               counts[is_new].astype("<u2").tobytes(),
                               self._hex(headers[sel]),
                               lens[sel].astype("<u4").tobytes(),
                               self._id_new,
                               (np.ones(n, np.uint8) if flags is None else flags)[is_new]
                               .tobytes(), token, *argv_keys)
            match_values = entries[idx[~is_new]]
            if local:
                # the bucket and the position in it of each match: its key is
                # entry `pos` of the bucket's key list
                m_idx = idx[~is_new]
                m_bucket = np.searchsorted(bucket_offsets, m_idx, "right") - 1
                m_pos = m_idx - bucket_offsets[m_bucket]
                # one request per distinct (bucket, position), grouped by bucket
                asked, where = np.unique(np.stack((m_bucket, m_pos)), axis=1,
                                         return_inverse=True)
                ub, per_bucket = np.unique(asked[0], return_counts=True)
                keys_args = (0, base + ":u:", self.hex_digits, self._hex(buckets[ub]),
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
                if item != 0:
                    val = struct.unpack("<Q", item[0])[0]
                    out[i] = StoreMatch(val, int(item[1]), _text(item[2]))
                else:
                    inserted += 1
            r = 1
        self.last_size = n_snap + inserted
        if local:
            found_keys = replies[r]
            for i, v, k in zip(local, match_values.tolist(), np.ravel(where).tolist()):
                out[i] = StoreMatch(v, int(dist[i]), _text(found_keys[k]))
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
        for pattern in (":b:*", ":u:*"):
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


def _key_bytes(key) -> bytes:
    """A page key as stored: UTF-8, at most 65,535 bytes (longer ones cut)."""
    if key is None:
        return b""
    if isinstance(key, str):
        key = key.encode("utf-8", "surrogatepass")
    elif not isinstance(key, (bytes, bytearray)):
        raise TypeError(f"keys must be str, bytes or None, got {type(key).__name__}")
    return bytes(key[:65535])


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
