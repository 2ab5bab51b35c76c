"""Index backends: where the Scrapy components look fingerprints up and add them.

The backend interface
---------------------
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

    __len__() / size           number of fingerprints stored
    probes                     cumulative number of buckets probed (int), or
                               None when the backend cannot tell
    async def close()          flush/persist and release resources

:func:`make_backend` is the one place that picks a backend from
``SIMDUP_INDEX``; :func:`make_batch_writer` the one place that builds the
writer the middleware feeds every checked fingerprint to (None: no writer).
"""
from __future__ import annotations

import abc
import functools
import re
from math import comb
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from scrapy_simdup._limits import DEFAULT_RECALL

if TYPE_CHECKING:
    from scrapy_simdup.integration.config import SimdupConfig

__all__ = ["Match", "IndexBackend", "MemoryBackend", "make_backend", "make_batch_writer"]


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

    @abc.abstractmethod
    def __len__(self) -> int:
        ...

    @property
    def size(self) -> int:
        return len(self)

    async def close(self) -> None:  # noqa: B027 (optional hook)
        pass


# Settings the index constructors take, for error messages naming the setting.
_INDEX_OPTIONS = {"distance": "SIMDUP_DISTANCE", "recall": "SIMDUP_RECALL",
                  "max_probes": "SIMDUP_MAX_PROBES"}


def _index_error(exc: Exception, options: dict) -> ValueError:
    message = str(exc)
    for option, setting in _INDEX_OPTIONS.items():
        if re.search(rf"(?<!\w){option}(?!\w)", message) and options.get(option) is not None:
            return ValueError(f"{setting}: {message}")
    return ValueError(f"invalid index settings (SIMDUP_SEARCH, SIMDUP_DISTANCE, "
                      f"SIMDUP_RECALL, SIMDUP_MAX_PROBES): {message}")


def make_index(config: SimdupConfig):
    """A fresh in-memory index for ``config`` (PSMIndex, or BPHSIndex when exact)."""
    from scrapy_simdup import BPHSIndex
    from scrapy_simdup import PSMIndex  # noqa: PLC0415 (import cycle with the package)

    if config.search == "exact":
        options: dict[str, Any] = {"distance": config.distance}
    else:
        recall = config.recall
        if recall is None and config.max_probes is None:
            recall = DEFAULT_RECALL
        options = {"distance": config.distance, "recall": recall,
                   "max_probes": config.max_probes}
    cls = BPHSIndex if config.search == "exact" else PSMIndex
    try:
        return cls(**options)
    except (TypeError, ValueError) as exc:
        raise _index_error(exc, options) from exc


@functools.lru_cache(maxsize=256)
def _psm_budget(t: int, h: int, cap) -> int:
    # flip sets of at most 8 header bits (_vosh.h VOSH_MAX_H), own header included
    total = sum(comb(t, i) for i in range(min(h, t, 8) + 1))
    return min(int(cap), total) if cap is not None else total


class MemoryBackend(IndexBackend):
    """In-process backend over a :class:`PSMIndex` or :class:`BPHSIndex`.

    ``check_and_add`` never awaits between the query and the add, so it is
    atomic under the event loop.
    """

    def __init__(self, index, keys: dict[int, str] | None = None) -> None:
        self.index = index
        self.keys: dict[int, str] = {} if keys is None else keys
        self._probes = 0

    @classmethod
    def from_config(cls, config: SimdupConfig, crawler=None, namespace: str = "pages"):
        return cls(make_index(config))

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
        self._probes += self._budget()
        hits = self.index.query(value, W, first=True)
        if hits:
            best_id, distance = min(hits, key=lambda hit: hit[1])
            return Match(self.keys.get(int(best_id), f"#{int(best_id)}"), int(distance))
        ids = self.index.add(np.array([value], dtype=np.uint64))
        self.keys[int(ids[0])] = key
        return None

    async def check_and_add(self, value: int, W, key: str) -> Match | None:
        return self._check_and_add(value, W, key)

    async def check_and_add_many(self, values, W, keys) -> list[Match | None]:
        W = np.asarray(W, dtype=np.float64)
        return [self._check_and_add(int(v), W[i], k)
                for i, (v, k) in enumerate(zip(values, keys))]

    def __len__(self) -> int:
        return len(self.index)


def make_backend(config: SimdupConfig, crawler=None, namespace: str = "pages",
                 fingerprint: str | None = None) -> IndexBackend:
    """The backend ``SIMDUP_INDEX`` asks for; ``namespace`` separates pages from items.
    ``fingerprint``: the ``Fingerprinter.version`` of the pages it will hold
    (default: the settings' recipe)."""
    if config.index == "memory":
        backend = MemoryBackend.from_config(config, crawler, namespace)
        if config.dir:  # restore the index saved in SIMDUP_DIR (see _persist)
            from scrapy_simdup.index.persist import namespace_dir, restore  # noqa: PLC0415
            restore(backend, namespace_dir(config.dir, namespace), config.on_error,
                    getattr(crawler, "stats", None), "simdup/" if namespace == "pages"
                    else f"simdup/{namespace}/",
                    fingerprint=fingerprint or config.make_fingerprinter().version)
        return backend
    try:
        from scrapy_simdup.index.redis.backend import RedisBackend  # noqa: PLC0415 (optional)
    except ImportError as exc:
        raise ValueError(f"SIMDUP_INDEX={config.index!r} needs the Redis backend, which is "
                         f"not available: {exc}") from exc
    return RedisBackend.from_config(config, crawler, namespace)


def make_batch_writer(config: SimdupConfig, crawler=None, namespace: str = "pages",
                      backend=None, fingerprint: str | None = None, idf=None):
    """The writer fed every checked fingerprint (``SIMDUP_DIR``), or None.

    The middleware calls ``writer.add(value, W, key, match)`` for every page
    checked and ``await writer.close()`` at the end. With a memory ``backend``
    the writer also snapshots its index at every batch flush (see _persist).
    ``fingerprint`` (``Fingerprinter.version``) is recorded with the snapshot,
    and ``idf`` (the Fingerprinter's IdfTable, if any) saved beside it.
    """
    if not config.dir:
        return None
    from scrapy_simdup.index.persist import PersistentBatchWriter, namespace_dir  # noqa: PLC0415

    return PersistentBatchWriter(
        namespace_dir(config.dir, namespace), config.batch_size,
        backend=backend if isinstance(backend, MemoryBackend) else None,
        settings={"search": config.search, "distance": config.distance,
                  "fingerprint": fingerprint},
        stats=getattr(crawler, "stats", None),
        prefix="simdup/" if namespace == "pages" else f"simdup/{namespace}/", idf=idf)
