"""The Redis index backend (in a crawl, ``SIMDUP_INDEX = "redis://..."``).

``RedisBackend`` is the index backend (:class:`IndexBackend`) on a
:class:`RedisIndexStore` (``index.redis.store``): it turns ``(value, W)``
into probe masks with the index's VOSH generator (``flip_masks``); Redis
faults are raised as :class:`IndexUnavailableError` for the caller to count.
``probes_for`` picks its probe budget.

It takes plain values (URL, key prefix, header bits...: in a crawl, from the
``SIMDUP_*`` settings). Its errors name the value at fault; a
:class:`ParameterError` also names the parameter.
"""
from __future__ import annotations

import asyncio

import numpy as np

from scrapy_simdup._ext import psm
from scrapy_simdup._limits import DEFAULT_REDIS_HEADER_BITS, DEFAULT_REDIS_RECALL, MIN_PROBES
from scrapy_simdup.exceptions import ParameterError
from scrapy_simdup.index.backend import IndexBackend, Match
from scrapy_simdup.index.memory import flip_masks
from scrapy_simdup.index.redis.store import RedisIndexStore, stored_key
from scrapy_simdup.index.volatility import VolatilityModel

__all__ = ["RedisBackend", "probes_for"]

_MASK64 = (1 << 64) - 1

#: probe budget when the volatility model has no calibration for the distance
DEFAULT_REDIS_PROBES = 16
#: most pages checked in one round trip when concurrent checks are coalesced
MAX_BATCH = 2048


def probes_for(header_bits: int, distance: int, max_probes: int | None = None,
               recall: float | None = None) -> int | None:
    """Probes per lookup: ``max_probes`` when given, else the budget that
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
             distance: int = 3, max_probes: int | None = DEFAULT_REDIS_PROBES,
             params: dict | None = None, fingerprint: str | None = None) -> RedisBackend:
        """A backend on the index under ``key_prefix`` at ``url``, checked
        (:meth:`RedisIndexStore.check_server`): created if new, else the same
        header bits and fingerprint recipe (``Fingerprinter.version``) as the
        processes that use it."""
        store = RedisIndexStore(url, key_prefix, header_bits=header_bits, distance=distance,
                                params=params, fingerprint=fingerprint)
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
        """Header XOR masks of one page, mask 0 first (VOSH order)."""
        flip = self._flip
        if flip is None:
            flip = self._flip = flip_masks
        masks, _ = flip(W, self.store.header_bits, self.store.distance,
                        max_probes=self.max_probes, model=self.model)
        return masks

    async def check_and_add_many(self, values, W, keys) -> list:
        values = np.ascontiguousarray(values, dtype=np.uint64).ravel()
        W = np.asarray(W, dtype=np.float64)
        if W.shape != (values.shape[0], 64):
            raise ValueError(f"W must have shape ({values.shape[0]}, 64), got {W.shape}")
        if len(keys) != values.shape[0]:
            raise ValueError(f"keys must have one key per value ({values.shape[0]}), "
                             f"got {len(keys)}")
        out: list = []
        for a in range(0, values.shape[0], MAX_BATCH):
            out.extend(await self._check(values[a:a + MAX_BATCH], W[a:a + MAX_BATCH],
                                         keys[a:a + MAX_BATCH]))
        return out

    async def check_and_add(self, value, W, key):
        value = int(value)
        if not 0 <= value <= _MASK64:
            raise ValueError(f"value must be a 64-bit unsigned integer, got {value}")
        W = np.asarray(W, dtype=np.float64)
        if W.shape != (64,):
            raise ValueError(f"W must have shape (64,), got {W.shape}")
        fut = asyncio.get_running_loop().create_future()
        self._pending.append((value, W, key, fut))
        if not self._flushing:
            self._flushing = True
            asyncio.ensure_future(self._drain())
        return await fut

    async def _drain(self):
        try:
            while self._pending:
                await asyncio.sleep(0)      # let the callers of this tick join the batch
                batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
                values = np.array([b[0] for b in batch], dtype=np.uint64)
                W = np.stack([b[1] for b in batch])
                try:
                    results = await self._check(values, W, [b[2] for b in batch])
                except BaseException as exc:
                    for b in batch:
                        if not b[3].done():
                            b[3].set_exception(exc)
                    if not isinstance(exc, Exception):
                        raise
                else:
                    for b, r in zip(batch, results):
                        if not b[3].done():
                            b[3].set_result(r)
        finally:
            self._flushing = False

    async def _check(self, values, W, keys) -> list:
        W = np.ascontiguousarray(W, dtype=np.float64)
        if not np.isfinite(W).all():
            raise ValueError("W must be finite (no NaN or infinity)")
        fast = self._fast_flip()

        def masks(a, b):
            if fast is not None:    # all pages of the chunk in one compiled call
                flip_many, model_c, t, h, k = fast
                flat, counts = flip_many(model_c, W[a:b], t, h, k)
                self._probes += int(flat.shape[0])
                return flat, counts
            out = [self.masks_for(W[i]) for i in range(a, b)]
            self._probes += sum(m.shape[0] for m in out)
            return out
        found = await self.store.check_and_add_many(values, masks, keys)
        self._size = self.store.last_size
        return [None if m is None else
                Match(m.key if m.key is not None else f"simhash:{m.value:016x}", m.distance)
                for m in found]

    async def close(self):
        await self.store.close()
