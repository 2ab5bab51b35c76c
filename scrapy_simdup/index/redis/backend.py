"""The Redis index backend (in a crawl, ``SIMDUP_INDEX = "redis://..."``).

``RedisBackend`` is the index backend (:class:`IndexBackend`) on a
:class:`RedisIndexStore` (``index.redis.store``): it turns each page's two
keys and weights (``value, W, value2, W2``) into probe masks with the index's
VOSH generator (``flip_masks``), and the store verifies candidates with the
page's sketch; Redis faults are raised as :class:`IndexUnavailableError` for
the caller to count. ``probes_for`` picks its probe budget (per key).

It takes plain values (URL, key prefix, header bits...: in a crawl, from the
``SIMDUP_*`` settings). Its errors name the value at fault; a
:class:`ParameterError` also names the parameter.
"""
from __future__ import annotations

import asyncio

import numpy as np

from scrapy_simdup._ext import psm
from scrapy_simdup._limits import (
    DEFAULT_DISTANCE,
    DEFAULT_MIN_SIMILARITY,
    DEFAULT_PROBES_PER_KEY,
    DEFAULT_REDIS_HEADER_BITS,
    DEFAULT_REDIS_RECALL,
    MIN_PROBES,
)
from scrapy_simdup.exceptions import ParameterError
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES
from scrapy_simdup.index.backend import IndexBackend, Match
from scrapy_simdup.index.memory import flip_masks
from scrapy_simdup.index.redis.store import RedisIndexStore, stored_key
from scrapy_simdup.index.volatility import VolatilityModel

__all__ = ["RedisBackend", "probes_for"]

_MASK64 = (1 << 64) - 1


def _key(value) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or not 0 <= int(value) <= _MASK64:
        raise ValueError(f"a key must be a 64-bit unsigned integer, got {value!r}")
    return int(value)

#: probe budget per key when the volatility model has no calibration for the
#: distance (it is calibrated up to 16; the default radius is 22)
# Buckets per key and look-up when no recall applies (a radius past the
# calibrated 16): over the network a probe is a bucket read, and half the
# memory index's budget keeps most of its recall (benchmarks/bench_redis.py).
DEFAULT_REDIS_PROBES = DEFAULT_PROBES_PER_KEY // 2
#: most pages checked in one round trip when concurrent checks are coalesced
MAX_BATCH = 2048


def probes_for(header_bits: int, distance: int, max_probes: int | None = None,
               recall: float | None = None) -> int | None:
    """Probes per key and lookup: ``max_probes`` when given, else the budget that
    reaches ``recall`` (default ``DEFAULT_REDIS_RECALL``) in the calibrated
    volatility model; None means every flip set of at most ``distance``
    header bits."""
    if max_probes is not None:
        return int(max_probes)
    recall = recall if recall is not None else DEFAULT_REDIS_RECALL
    model = VolatilityModel.default()
    if not model.probes.get(int(distance)):
        return DEFAULT_REDIS_PROBES
    return model.probes_for_recall(recall, header_bits, distance)


class RedisBackend(IndexBackend):
    """Index backend on a :class:`RedisIndexStore` (in a crawl, ``SIMDUP_INDEX =
    "redis://..."``).

    ``check_and_add`` calls made while a round trip is in flight are coalesced
    into the next batch (at most ``MAX_BATCH``), so a crawl with many
    concurrent responses pays one round trip per batch, not per page.
    ``__len__`` is the index size as of the last round trip (all processes).
    Redis faults raise :class:`IndexUnavailableError`, for the caller to count
    and act on. The client reconnects by itself once Redis is back; every
    command is bounded by ``socket_timeout`` (5 s unless ``params`` say
    otherwise).
    """

    def __init__(self, store: RedisIndexStore, max_probes: int | None = DEFAULT_REDIS_PROBES,
                 model=None, flip_masks=None):
        if max_probes is not None and (isinstance(max_probes, bool) or
                                       not isinstance(max_probes, int) or
                                       max_probes < MIN_PROBES):
            raise ParameterError("max_probes", f"the probe budget must be an integer >= "
                                               f"{MIN_PROBES}, got {max_probes!r}")
        self.store = store
        self.max_probes = max_probes
        self.model = model
        self._flip = flip_masks
        self._size = 0
        self._probes = 0
        self._pending: list = []
        self._flushing = False

    @classmethod
    def open(cls, url: str, key_prefix: str, header_bits: int = DEFAULT_REDIS_HEADER_BITS,
             distance: int = DEFAULT_DISTANCE, max_probes: int | None = DEFAULT_REDIS_PROBES,
             params: dict | None = None, fingerprint: str | None = None,
             min_similarity: float = DEFAULT_MIN_SIMILARITY,
             store_duplicates: bool = True) -> RedisBackend:
        """A backend on the index under ``key_prefix`` at ``url``, checked
        (:meth:`RedisIndexStore.check_server`): created if new, else the same
        layout, header bits and fingerprint recipe (``Fingerprinter.version``)
        as the processes that use it. ``distance``: search radius of each key;
        ``min_similarity``: estimated Jaccard similarity a candidate needs
        (0: the keys alone decide); ``max_probes``: buckets probed per key;
        ``store_duplicates``: a near-duplicate is stored too, under its own
        key (as ``MemoryBackend`` does; a revisit is not)."""
        store = RedisIndexStore(url, key_prefix, header_bits=header_bits, distance=distance,
                                params=params, fingerprint=fingerprint,
                                min_similarity=min_similarity,
                                store_duplicates=store_duplicates)
        backend = cls(store, max_probes=max_probes)
        store.check_server()
        backend._size = store.size_sync()
        return backend

    @property
    def probes(self) -> int:
        return self._probes

    def same_key(self, stored: str, key: str) -> bool:
        # keys come back as stored: UTF-8, cut at 65,535 bytes
        return stored == key or stored == stored_key(key)

    def __len__(self) -> int:
        return self._size

    @property
    def size(self) -> int:
        return self._size

    def _fast_flip(self):
        """The compiled VOSH generator with its arguments checked once per
        batch (what ``flip_masks`` checks per call), or None for a custom one."""
        if self._flip is not None:
            return None
        model = self.model if self.model is not None else VolatilityModel.default()
        model_c = model.compiled
        k = -1 if self.max_probes is None else int(self.max_probes)
        return psm.flip_masks_many_c, model_c, self.store.header_bits, self.store.distance, k

    def masks_for(self, W) -> np.ndarray:
        """Header XOR masks of one key of a page, mask 0 first (VOSH order;
        W None: uniform weights)."""
        flip = self._flip
        if flip is None:
            flip = self._flip = flip_masks
        masks, _ = flip(W, self.store.header_bits, self.store.distance,
                        max_probes=self.max_probes, model=self.model)
        return masks

    @staticmethod
    def _arrays(pages):
        """(values, W, values2, W2, sketches) of the pages; W None -> NaN rows
        (uniform weights: ``flip_masks`` with W None)."""
        n = len(pages)
        values = np.fromiter((_key(p.value) for p in pages), dtype=np.uint64, count=n)
        values2 = np.fromiter((_key(p.value2) for p in pages), dtype=np.uint64, count=n)
        Ws = []
        for attr in ("W", "W2"):
            W = np.full((n, 64), np.nan)
            for i, p in enumerate(pages):
                w = getattr(p, attr)
                if w is not None:
                    w = np.asarray(w, dtype=np.float64)
                    if w.shape != (64,):
                        raise ValueError(f"{attr} must have shape (64,), got {w.shape}")
                    if not np.isfinite(w).all():
                        raise ValueError(f"{attr} must be finite (no NaN or infinity)")
                    W[i] = w
            Ws.append(W)
        sketches = []
        for p in pages:
            sk = bytes(p.sketch)
            if len(sk) != SKETCH_BYTES:
                raise ValueError(f"a sketch must be {SKETCH_BYTES} bytes, got {len(sk)}")
            sketches.append(sk)
        sk = np.frombuffer(b"".join(sketches), dtype=np.uint8).reshape(n, SKETCH_BYTES)
        return values, Ws[0], values2, Ws[1], sk

    async def check_and_add_many(self, pages, keys) -> list:
        pages = list(pages)
        if len(keys) != len(pages):
            raise ValueError(f"keys must have one key per page ({len(pages)}), got {len(keys)}")
        if not pages:
            return []
        arrays = self._arrays(pages)
        out: list = []
        for a in range(0, len(pages), MAX_BATCH):
            out.extend(await self._check(*(x[a:a + MAX_BATCH] for x in arrays),
                                         keys[a:a + MAX_BATCH]))
        return out

    async def check_and_add(self, page, key):
        arrays = self._arrays([page])       # bad input fails here, in the caller's task
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((arrays, key, fut))
        if not self._flushing:
            self._flushing = True
            asyncio.ensure_future(self._drain())
        return await fut

    async def _drain(self):
        try:
            while self._pending:
                await asyncio.sleep(0)      # let the callers of this tick join the batch
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                arrays = [np.concatenate([b[0][j] for b in batch]) for j in range(5)]
                try:
                    results = await self._check(*arrays, [b[1] for b in batch])
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

    def _masks(self, W, a, b):
        """Probe masks of pages a:b of one key: (flat masks, count per page)."""
        fast = self._fast_flip()
        rows = W[a:b]
        uniform = np.isnan(rows[:, 0])
        if fast is not None and not uniform.any():
            flip_many, model_c, t, h, k = fast
            flat, counts = flip_many(model_c, np.ascontiguousarray(rows), t, h, k)
        else:
            parts = [self.masks_for(None if uniform[i] else rows[i]) for i in range(b - a)]
            counts = np.fromiter(map(len, parts), dtype=np.int64, count=b - a)
            flat = np.concatenate(parts)
        self._probes += int(flat.shape[0])
        return flat, counts

    async def _check(self, values, W, values2, W2, sketches, keys) -> list:
        def masks(a, b):
            return self._masks(W, a, b), self._masks(W2, a, b)
        found = await self.store.check_and_add_many(values, values2, sketches, masks, keys)
        self._size = self.store.last_size
        return [None if m is None else
                Match(m.key if m.key is not None else f"simhash:{m.value:016x}", m.distance,
                      m.similarity)
                for m in found]

    async def close(self):
        await self.store.close()
