"""Index backends, writers and saved state for the Scrapy components.

The one place that maps a :class:`SimdupConfig` and a crawler to the plain
values the index layer takes (:mod:`scrapy_simdup.index.backend` describes
the backend interface): :func:`make_backend` picks the backend
``SIMDUP_INDEX`` asks for, :func:`make_index` builds the in-memory index,
:func:`make_batch_writer` the writer the middleware feeds every checked
fingerprint to (None: no writer), :func:`load_idf_table` the saved IDF table.
Counters go to the crawler's stats under ``simdup/`` (pages) or
``simdup/items/``; errors of the layers below, which name values, are
re-raised or logged naming the setting the value came from.
"""
from __future__ import annotations

import logging
import re
from typing import Any

from scrapy_simdup.exceptions import CorruptFileError, IndexUnavailableError, ParameterError
from scrapy_simdup.index.backend import IndexBackend, MemoryBackend
from scrapy_simdup.index.crawldir import namespace_dir
from scrapy_simdup.index.persist import PersistentBatchWriter, load_idf, restore
from scrapy_simdup.index.redis.backend import RedisBackend
from scrapy_simdup.index.redis.log import safe_url
from scrapy_simdup.index.redis.reset import reset_redis_index
from scrapy_simdup.index.reset import reset_snapshot
from scrapy_simdup.index.verified import VerifiedIndex
from scrapy_simdup.integration.config import SimdupConfig

__all__ = ["make_backend", "make_index", "make_batch_writer", "load_idf_table",
           "reset_index", "stats_prefix", "setting_message", "PARAMETER_SETTINGS"]

logger = logging.getLogger("scrapy_simdup")

#: The setting each parameter of the layers below comes from (ParameterError.parameter).
PARAMETER_SETTINGS = {
    "url": "SIMDUP_INDEX",
    "key_prefix": "SIMDUP_REDIS_KEY",
    "max_pages": "SIMDUP_REDIS_MAX_PAGES",
    "on_reset": "SIMDUP_REDIS_ON_RESET",
    "params": "SIMDUP_REDIS_PARAMS",
    "distance": "SIMDUP_DISTANCE",
    "min_similarity": "SIMDUP_MIN_SIMILARITY",
    "recall": "SIMDUP_RECALL",
    "max_probes": "SIMDUP_MAX_PROBES",
    "bands": "SIMDUP_BANDS",
    "fingerprint": "SIMDUP_INDEX",
}
#: What a user can change besides, when the value does not match a stored index.
_REMEDIES = {
    "distance": "another SIMDUP_REDIS_KEY makes a new index",
    "min_similarity": "another SIMDUP_REDIS_KEY makes a new index",
    "fingerprint": "the recipe comes from the feature settings (SIMDUP_FEATURES, "
                   "SIMDUP_SHINGLE_SIZE, ...), the key prefix from SIMDUP_REDIS_KEY",
}


def setting_message(exc: Exception) -> str:
    """The message of an error of the layers below, naming the setting its
    value came from when it says (a ``parameter`` attribute)."""
    parameter = getattr(exc, "parameter", None)
    if not parameter:
        return str(exc)
    names = [p.strip() for p in parameter.split(",")]
    settings = " / ".join(dict.fromkeys(PARAMETER_SETTINGS.get(p, p) for p in names))
    remedies = [_REMEDIES[p] for p in names if p in _REMEDIES]
    return f"{settings}: {exc}" + "".join(f"; {r}" for r in remedies)


def stats_prefix(namespace: str) -> str:
    """The stats prefix of a namespace: ``simdup/`` for pages, ``simdup/<ns>/`` else."""
    return "simdup/" if namespace == "pages" else f"simdup/{namespace}/"


def _on_stat(crawler, namespace: str):
    """``on_stat(name, value)`` setting ``<prefix><name>`` in the crawler's stats."""
    stats = getattr(crawler, "stats", None)
    if stats is None:
        return None
    prefix = stats_prefix(namespace)

    def on_stat(name: str, value) -> None:
        stats.set_value(prefix + name, value)
    return on_stat


def _corrupt_and_stopping(what: str, exc: CorruptFileError) -> None:
    # the layer below raises it (SIMDUP_ON_ERROR = "stop") and leaves the files
    # as they are; the component ends the crawl without a traceback
    logger.error("Simdup: the saved %s is corrupt: %s (SIMDUP_ON_ERROR=stop)", what, exc)


# Settings the index constructor takes, for error messages naming the setting.
_INDEX_OPTIONS = {"distance": "SIMDUP_DISTANCE", "min_similarity": "SIMDUP_MIN_SIMILARITY",
                  "recall": "SIMDUP_RECALL", "max_probes": "SIMDUP_MAX_PROBES",
                  "bands": "SIMDUP_BANDS"}


def _index_error(exc: Exception, options: dict) -> ValueError:
    message = str(exc)
    for option, setting in _INDEX_OPTIONS.items():
        if re.search(rf"(?<!\w){option}(?!\w)", message) and options.get(option) is not None:
            return ValueError(f"{setting}: {message}")
    return ValueError(f"invalid index settings (SIMDUP_SEARCH, SIMDUP_DISTANCE, "
                      f"SIMDUP_MIN_SIMILARITY, SIMDUP_RECALL, SIMDUP_MAX_PROBES, "
                      f"SIMDUP_BANDS): {message}")


def make_index(config: SimdupConfig) -> VerifiedIndex:
    """A fresh in-memory index for ``config``: SIMDUP_BANDS sketch bands,
    and SIMDUP_MAX_PROBES buckets per key (``SimdupConfig.probes_per_key``),
    the budget of SIMDUP_RECALL, or every flip set with SIMDUP_SEARCH =
    "exact"."""
    options: dict[str, Any] = {"distance": config.distance,
                               "min_similarity": config.min_similarity,
                               "bands": config.bands}
    if config.search == "exact":
        options["max_probes"] = None
    elif config.recall is not None:
        options["recall"] = config.recall
    else:
        options["max_probes"] = config.probes_per_key
    try:
        return VerifiedIndex(**options)
    except (TypeError, ValueError) as exc:
        raise _index_error(exc, options) from exc


def _redis_key_prefix(config: SimdupConfig, crawler, namespace: str) -> str:
    spider = getattr(crawler, "spider", None)
    key_prefix = config.redis_key_for(getattr(spider, "name", None) or "default")
    return key_prefix if namespace == "pages" else f"{key_prefix}:{namespace}"


def reset_index(config: SimdupConfig, crawler=None, namespace: str = "pages") -> None:
    """``SIMDUP_RESET``: clear the index this crawl would go on with, before
    it is opened, and log what was removed. The memory index: its snapshot
    in ``SIMDUP_DIR`` (the batch files and the IDF table stay: they are the
    crawls' record for ``simdup merge``). Redis: every key of the index
    under its key prefix (the pages' reset leaves the items' index alone)."""
    prefix = stats_prefix(namespace)
    spider = getattr(crawler, "spider", None)
    if config.index == "memory":
        if not config.dir:
            return      # nothing is saved: every crawl starts afresh
        directory = namespace_dir(config.dir, namespace)
        count, removed = reset_snapshot(directory)
        what = (f"{count:,} fingerprints" if count is not None
                else "a damaged snapshot") if removed else "nothing was saved"
        logger.info("Simdup: SIMDUP_RESET: removed the saved %s index in %s (%s%s); its batch "
                    "files are kept for simdup merge", namespace, directory, what,
                    f": {', '.join(removed)}" if removed else "", extra={"spider": spider})
    else:
        key_prefix = _redis_key_prefix(config, crawler, namespace)
        try:
            count, keys = reset_redis_index(config.index, key_prefix, config.redis_params,
                                            keep=("items",) if namespace == "pages" else ())
        except IndexUnavailableError as exc:
            raise IndexUnavailableError(f"SIMDUP_INDEX: {exc}") from exc
        except ImportError as exc:      # the redis client is not installed
            raise ImportError(f"SIMDUP_INDEX = {config.index!r}: {exc}") from exc
        logger.info("Simdup: SIMDUP_RESET: removed the Redis %s index %r at %s (%s fingerprints, "
                    "%s keys)", namespace, key_prefix, safe_url(config.index), f"{count:,}",
                    f"{keys:,}", extra={"spider": spider})
    stats = getattr(crawler, "stats", None)
    if stats is not None:
        stats.set_value(prefix + "index_reset", count or 0)


def make_backend(config: SimdupConfig, crawler=None, namespace: str = "pages",
                 fingerprint: str | None = None) -> IndexBackend:
    """The backend ``SIMDUP_INDEX`` asks for; ``namespace`` separates pages from items.
    ``fingerprint``: the ``Fingerprinter.version`` of the pages it will hold
    (default: the settings' recipe)."""
    if config.index == "memory":
        backend = MemoryBackend(make_index(config))
        if config.dir:  # restore the index saved in SIMDUP_DIR
            try:
                restore(backend, namespace_dir(config.dir, namespace), config.on_error,
                        _on_stat(crawler, namespace),
                        fingerprint=fingerprint or config.make_fingerprinter().version)
            except CorruptFileError as exc:
                _corrupt_and_stopping("index", exc)
                raise
            except ParameterError as exc:   # another fingerprint recipe, an older format
                if exc.parameter != "fingerprint":
                    raise ValueError(f"{config.dir_setting}: {exc}") from exc
                raise ValueError(f"SIMDUP_DIR: {exc}. Use a new SIMDUP_DIR, or the feature "
                                 f"settings (SIMDUP_FEATURES, SIMDUP_SHINGLE_SIZE, ...) that "
                                 f"index was built with.") from exc
        return backend
    key_prefix = _redis_key_prefix(config, crawler, namespace)
    try:
        backend = RedisBackend.open(
            config.index, key_prefix, make_index(config), params=config.redis_params,
            fingerprint=fingerprint or config.make_fingerprinter().version,
            max_pages=config.redis_max_pages, on_reset=config.redis_on_reset)
    except ParameterError as exc:
        raise ValueError(setting_message(exc)) from exc
    except IndexUnavailableError as exc:
        raise IndexUnavailableError(f"SIMDUP_INDEX: {exc}") from exc
    except ImportError as exc:      # the redis client is not installed
        raise ImportError(f"SIMDUP_INDEX = {config.index!r}: {exc}") from exc
    except ValueError as exc:       # an entry of the log that is not a page record
        raise ValueError(f"SIMDUP_INDEX / SIMDUP_REDIS_KEY: {exc}") from exc
    on_stat = _on_stat(crawler, namespace)
    if on_stat is not None:
        on_stat("replica_pages", len(backend))
        on_stat("replica_bytes", backend.nbytes)
        on_stat("replica_load_ms", round(backend.load_seconds * 1000))
    logger.info("Simdup: Redis index %s: loaded %s pages into this process's replica in %.1f s "
                "(%s MiB, about %.0f bytes a page in every process)", backend.log.where,
                f"{len(backend):,}", backend.load_seconds, f"{backend.nbytes / 2**20:,.0f}",
                backend.bytes_per_page())
    return backend


def make_batch_writer(config: SimdupConfig, crawler=None, namespace: str = "pages",
                      backend=None, fingerprint: str | None = None, idf=None):
    """The writer fed every checked fingerprint (``SIMDUP_DIR``), or None.

    The middleware calls ``writer.add(page, key, match, revisit=...)`` for
    every page checked and ``await writer.close()`` at the end. With a memory
    ``backend`` the writer also snapshots its index at every batch flush.
    ``fingerprint`` (``Fingerprinter.version``) is recorded with the snapshot,
    and ``idf`` (the Fingerprinter's IdfTable, if any) saved beside it.
    """
    if not config.dir:
        return None
    return PersistentBatchWriter(
        namespace_dir(config.dir, namespace), config.batch_size,
        backend=backend if isinstance(backend, MemoryBackend) else None,
        index_meta={"search": config.search, "distance": config.distance,
                    "min_similarity": config.min_similarity, "fingerprint": fingerprint},
        on_stat=_on_stat(crawler, namespace), idf=idf)


def load_idf_table(config: SimdupConfig, crawler=None, namespace: str = "pages"):
    """The IDF table saved in ``SIMDUP_DIR`` to go on with (``SIMDUP_WEIGHTING =
    "idf"``), or None (a new crawl, or a corrupt table moved aside)."""
    try:
        return load_idf(namespace_dir(config.dir, namespace), config.on_error,
                        _on_stat(crawler, namespace))
    except CorruptFileError as exc:
        _corrupt_and_stopping("IDF table (the index and batches need it)", exc)
        raise
