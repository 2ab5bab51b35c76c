"""What the downloader middleware and the item pipeline share: set-up from the
crawler, the fingerprint -> lookup -> verdict step, stats, errors and shutdown.
"""
from __future__ import annotations

import logging
import sys
import time
import weakref
from collections.abc import Callable
from typing import Any

from scrapy import signals
from scrapy.exceptions import NotConfigured
from scrapy.utils.defer import deferred_from_coro

from scrapy_simdup._limits import MAX_RECALL_PROBES
from scrapy_simdup.exceptions import CorruptFileError, SkippedPage
from scrapy_simdup.index.backend import Match, MemoryBackend
from scrapy_simdup.index.crawldir import lock_crawl_directory, namespace_dir, prepare_directory
from scrapy_simdup.index.redis.log import IndexResetError
from scrapy_simdup.integration import logstats
from scrapy_simdup.integration.backends import (
    load_idf_table,
    make_backend,
    make_batch_writer,
    make_index,
    reset_index,
    setting_message,
)
from scrapy_simdup.integration.config import SimdupConfig
from scrapy_simdup.integration.statswriter import stat_writers

logger = logging.getLogger("scrapy_simdup")

#: crawlers whose refusal to start was logged: once, not once per component
_REFUSALS_LOGGED: weakref.WeakSet[Any] = weakref.WeakSet()


def debug_shown(log: logging.Logger = logger) -> bool:
    """Whether a DEBUG record of ``log`` would reach a handler that keeps it.

    Scrapy leaves the loggers at NOTSET and filters by ``LOG_LEVEL`` in its
    root handler, so ``isEnabledFor(DEBUG)`` is true in every crawl and each
    per-page ``logger.debug`` call would build a record only to drop it.
    """
    if not log.isEnabledFor(logging.DEBUG):
        return False
    node: logging.Logger | None = log
    while node is not None:
        for handler in node.handlers:
            if handler.level <= logging.DEBUG:
                return True
        if not node.propagate:
            return False
        node = node.parent
    return False    # (no handler at all: logging's last resort shows WARNING and up)


class Verdict:
    """The outcome of checking one page or item.

    ``revisit``: ``match`` is the page itself, stored before (same key), not
    another page. ``error``: why the check failed (``match`` is then None).
    """

    __slots__ = ("simhash", "match", "skipped", "revisit", "error")

    def __init__(self, simhash: int | None = None, match: Match | None = None,
                 skipped: str | None = None, revisit: bool = False,
                 error: str | None = None) -> None:
        self.simhash = simhash
        self.match = match
        self.skipped = skipped
        self.revisit = revisit
        self.error = error

    def as_tag(self, with_match: bool = True) -> dict[str, Any]:
        """The ``meta["simdup"]`` / item tag dict; ``with_match=False``: as
        for a new page (a revisit kept as one)."""
        match = self.match if with_match else None
        tag = {"simhash": self.simhash,
               "duplicate_of": match.duplicate_of if match else None,
               "distance": match.distance if match else None,
               "similarity": round(match.similarity, 3) if match else None}
        if match is not None and self.revisit:
            tag["revisit"] = True
        if self.skipped is not None:
            tag["skipped"] = self.skipped
        if self.error is not None:
            tag["error"] = self.error
        return tag


#: keys of the dicts ``Verdict.as_tag`` makes (to tell them from a user's value)
TAG_KEYS = frozenset(("simhash", "duplicate_of", "distance", "similarity", "revisit", "skipped",
                      "error", "canonical"))


class SimdupComponent:
    """Base of SimdupDownloaderMiddleware and SimdupPipeline (not public)."""

    #: "pages" or "items": backend namespace and stats prefix
    kind = "pages"
    prefix = "simdup/"

    def __init__(self, crawler, config: SimdupConfig, fingerprinter=None, backend=None) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        # (the counters written on every page: see statswriter)
        writers = stat_writers(self.stats)
        self._inc_stat, self._set_stat = writers.inc, writers.set
        self._stat_keys = {name: self.prefix + name for name in (
            "checked", "truncated", "index_size", "probes", "revisits", "duplicates")}
        self._recorded_recall: float | None = None
        #: the crawl's close reason when the component refuses to work (a
        #: corrupt saved index with SIMDUP_ON_ERROR = "stop", Redis unreachable)
        self.refused: str | None = None
        try:
            self._open(config, crawler, fingerprinter, backend)
        except (CorruptFileError, ConnectionError) as exc:
            if isinstance(exc, CorruptFileError):
                if config.on_error != "stop":
                    raise
                self.refused = "simdup_corrupt_index"    # already logged by file name
            else:   # the shared index cannot be reached (IndexUnavailableError)
                self.refused = "simdup_index_unavailable"
                if crawler not in _REFUSALS_LOGGED:
                    _REFUSALS_LOGGED.add(crawler)
                    logger.error("Simdup: %s; the crawl stops (%s)", exc, self.refused)
            # stop the crawl without a traceback and without letting a page
            # through unchecked
            self.fingerprinter = config.make_fingerprinter()
            self.backend = MemoryBackend(make_index(config))
            self.writer = None
            crawler.signals.connect(self._refuse, signal=signals.spider_opened)
        self.logstats = logstats.attach(crawler, config)
        self.logstats.register(self.kind)
        self._skipped_exc = SkippedPage
        self._stopping = False
        self._logged_first_drop = False
        self._recall_warned = False
        self._record_recall()
        crawler.signals.connect(self._spider_closed, signal=signals.spider_closed)

    def _record_recall(self) -> None:
        """``<prefix>expected_recall``: the share of near-duplicates a look-up
        finds at the index's size and budget; one WARNING when SIMDUP_RECALL
        can no longer be held within the look-up's time budget."""
        recall = self.backend.expected_recall
        if recall is None or recall == self._recorded_recall:
            return
        self._recorded_recall = recall
        self._set_stat(self.prefix + "expected_recall", round(recall, 3))
        target = self.config.recall
        if target is not None and recall < target - 0.0005 and not self._recall_warned:
            self._recall_warned = True
            logger.warning("Simdup: SIMDUP_RECALL = %g cannot be held at %s pages within "
                           "%s probes per key (the look-up's time budget): expected recall "
                           "%.3f. A smaller SIMDUP_DISTANCE, or a crawl split by site, needs "
                           "fewer probes", target, f"{len(self.backend):,}",
                           f"{MAX_RECALL_PROBES:,}", recall,
                           extra={"spider": self.crawler.spider})

    def _open(self, config, crawler, fingerprinter, backend) -> None:
        if config.dir:
            setting = config.dir_setting
            try:
                prepare_directory(config.dir)
            except ValueError as exc:
                raise ValueError(f"{setting} = {exc}") from None
            if self.kind != "pages":     # items keep their files in a folder of their own
                try:
                    prepare_directory(namespace_dir(config.dir, self.kind))
                except ValueError as exc:
                    raise ValueError(f"{setting} ({self.kind} folder) = {exc}") from None
            try:
                self._dir_lock = lock_crawl_directory(namespace_dir(config.dir, self.kind))
            except ValueError as exc:
                raise ValueError(f"{setting} = {exc}") from None
        try:
            self._open_index(config, crawler, fingerprinter, backend)
        except BaseException:
            # this crawl does not go on with the directory: another one may use it
            lock = getattr(self, "_dir_lock", None)
            if lock is not None:
                lock.close()
            raise

    def _open_index(self, config, crawler, fingerprinter, backend) -> None:
        if config.reset and backend is None:
            reset_index(config, crawler, self.kind)
        idf = None
        if config.dir and fingerprinter is None and \
                config.feature_options.get("weighting") == "idf":
            idf = load_idf_table(config, crawler, self.kind)
        self.fingerprinter = fingerprinter if fingerprinter is not None else \
            config.make_fingerprinter(idf=idf)
        self.backend = backend if backend is not None else make_backend(
            config, crawler, self.kind, fingerprint=self.fingerprinter.version)
        self.writer = make_batch_writer(config, crawler, self.kind, backend=self.backend,
                                        fingerprint=self.fingerprinter.version,
                                        idf=self.fingerprinter.idf)

    def _refuse(self, spider) -> None:
        self._stopping = True
        self._close_spider(self.refused)

    @classmethod
    def from_crawler(cls, crawler):
        config = SimdupConfig.from_crawler(crawler)
        if not config.enabled or not cls.applies(config):
            raise NotConfigured
        return cls(crawler, config)

    @classmethod
    def applies(cls, config) -> bool:
        """Whether this component has work under ``config`` (else NotConfigured)."""
        return True

    # -- the one step ---------------------------------------------------------
    def skip(self, reason: str, key: str) -> Verdict:
        self.stats.inc_value(f"{self.prefix}skipped/{reason}")
        skipped = getattr(self.writer, "skipped", None)     # (the crawl record in SIMDUP_DIR)
        if skipped is not None:
            skipped(reason)
        if self.config.debug:
            logger.debug("Simdup skipped %s %s: %s", self.kind[:-1], key, reason,
                         extra={"spider": self.crawler.spider})
        return Verdict(skipped=reason)

    async def check(self, fingerprint: Callable[[], Any], key: str,
                    own_key: bool = True, canonical: str | None = None) -> Verdict:
        """Fingerprint (``fingerprint()``), look up and add. A failure is
        counted and logged, and gives a verdict with ``error`` set.
        ``own_key``: ``key`` names the page or item (not a made-up
        ``item-<n>``), so a match stored under it is a revisit.
        ``canonical``: the page's declared canonical URL, for the batch files."""
        t0 = time.perf_counter()
        try:
            fp = fingerprint()
        except self._skipped_exc as exc:
            return self.skip(getattr(exc, "reason", None) or "other", key)
        except Exception:  # noqa: BLE001 (any failure: count, log, keep or stop)
            return self._failed(key, "fingerprinting")
        value = fp.value
        t1 = time.perf_counter()
        try:
            match = await self.backend.check_and_add(fp, key)
        except IndexResetError as exc:
            self._index_reset(exc)      # (said once there: counted here, not logged again)
            return self._failed(key, "index lookup", int(value), log=False)
        except Exception:  # noqa: BLE001
            return self._failed(key, "index lookup", int(value))
        t2 = time.perf_counter()
        # the page met again (a re-crawl with SIMDUP_DIR, another process of a
        # shared index), not a copy; the same key twice in this crawl is a copy
        # (a key checked before in this crawl: a copy under it, not a revisit)
        revisit = (match is not None and own_key and self.backend.same_key(match.duplicate_of, key)
                   and not self.backend.checked_here(key))
        if own_key:
            self.backend.note_checked(key)
        self.logstats.record(self.kind, t1 - t0, t2 - t1)
        inc, keys = self._inc_stat, self._stat_keys
        inc(keys["checked"])
        if fp.truncated:     # from a cut text (SIMDUP_MAX_BYTES/MAX_TOKENS)
            inc(keys["truncated"])
        self._set_stat(keys["index_size"], len(self.backend))
        probes = self.backend.probes
        if probes is not None:
            self._set_stat(keys["probes"], probes)
        self._record_recall()
        if match is None and self.fingerprinter.idf is not None:
            # weighting "idf": learn from kept pages, before the writer may
            # snapshot the index with this page in it
            self.fingerprinter.learn(fp)
        if self.writer is not None:
            try:
                self.writer.add(fp, key, match, revisit=revisit, canonical=canonical)
            except Exception:  # noqa: BLE001 (disk full, SIMDUP_DIR gone: the page goes on)
                self.error(key, "writing to SIMDUP_DIR")
        if revisit:
            inc(keys["revisits"])
        elif match is not None:
            inc(keys["duplicates"])
        if self.config.debug:
            logger.debug("Simdup checked %s %s: simhash %016x, %s", self.kind[:-1], key, value,
                         f"revisit (stored before, distance {match.distance})" if revisit else
                         f"duplicate of {match.duplicate_of} at distance {match.distance}, "
                         f"similarity {match.similarity:.2f}"
                         if match else "new", extra={"spider": self.crawler.spider})
        return Verdict(int(value), match, revisit=revisit)

    def log_drop(self, what: str, key: str, match: Match, note: str = "") -> None:
        """Log a dropped near-duplicate (or revisit): the first one of the
        crawl at INFO, with how to see the others; the others at DEBUG."""
        noun = self.kind[:-1]
        if self._logged_first_drop:
            if self.kind == "items" or not debug_shown():   # (Scrapy logs dropped items)
                return
            logger.debug("Dropped %s %s %s of %s (distance %d%s)", what, noun, key,
                         match.duplicate_of, match.distance, note,
                         extra={"spider": self.crawler.spider})
            return
        self._logged_first_drop = True
        logger.info("Filtered %s %s %s of %s (distance %d, similarity %.2f%s); the copy "
                    "checked first is the one kept - no more dropped %ss will be shown "
                    "(LOG_LEVEL = 'DEBUG' shows every one; %sdropped counts them)",
                    what, noun, key, match.duplicate_of, match.distance, match.similarity,
                    note, noun, self.prefix, extra={"spider": self.crawler.spider})
    def _index_reset(self, exc: IndexResetError) -> None:
        """The shared index was emptied under the crawl: going on would keep
        again pages kept before. Say so once and stop, whatever SIMDUP_ON_ERROR."""
        if not self._stopping:
            self._stopping = True
            logger.error("Simdup: %s. The crawl stops (simdup_index_reset): restart it to go on "
                         "with a new index, or restore Redis from its saved data first",
                         exc, extra={"spider": self.crawler.spider})
            self._close_spider("simdup_index_reset")

    def _failed(self, key: str, what: str, simhash: int | None = None,
                log: bool = True) -> Verdict:
        """Count and log (unless ``log`` is false) the exception being handled; its verdict."""
        exc = sys.exc_info()[1]
        if log:
            self.error(key, what)
        else:
            self.stats.inc_value(self.prefix + "errors")
        reason = setting_message(exc) if exc is not None else ""
        reason = reason or type(exc).__name__
        if len(reason) > 200:
            reason = reason[:200] + "..."
        return Verdict(simhash, error=f"{what} failed: {reason}")

    def error(self, key: str, what: str) -> None:
        self.stats.inc_value(self.prefix + "errors")
        # an index outage fails every page: log once per SIMDUP_LOG_INTERVAL
        # (with the traceback), and say how many were not logged in between
        now = time.monotonic()
        last = getattr(self, "_error_logged_at", None)
        interval = self.config.log_interval or 60.0
        if last is not None and now - last < interval:
            self._errors_unlogged = getattr(self, "_errors_unlogged", 0) + 1
            return self._on_error()
        unlogged, self._errors_unlogged, self._error_logged_at = \
            getattr(self, "_errors_unlogged", 0), 0, now
        exc = sys.exc_info()[1]
        more = f"; {unlogged} more errors since the last one logged" if unlogged else ""
        if isinstance(exc, OSError):
            # disk full, SIMDUP_DIR gone, Redis down: the message says it all
            logger.error("Simdup error in %s of %s (SIMDUP_ON_ERROR=%s): %s%s", what, key,
                         self.config.on_error, setting_message(exc), more,
                         extra={"spider": self.crawler.spider})
        else:       # anything else is a bug worth its traceback
            # (a value the index refuses mid-crawl also says which setting it came from)
            detail = f": {setting_message(exc)}" if getattr(exc, "parameter", None) else ""
            logger.exception("Simdup error in %s of %s (SIMDUP_ON_ERROR=%s)%s%s", what, key,
                             self.config.on_error, detail, more,
                             extra={"spider": self.crawler.spider})
        self._on_error()

    def _on_error(self) -> None:
        if self.config.on_error == "stop" and not self._stopping:
            self._stopping = True
            self._close_spider("simdup_error")

    def _close_spider(self, reason: str) -> None:
        engine = self.crawler.engine
        if hasattr(engine, "close_spider_async"):
            deferred_from_coro(engine.close_spider_async(reason=reason))
        else:  # pragma: no cover (Scrapy < 2.14)
            engine.close_spider(self.crawler.spider, reason)

    async def _spider_closed(self, spider, reason) -> None:
        try:
            if self.writer is not None:
                try:
                    await self.writer.close()
                except Exception as exc:  # noqa: BLE001 (reported, not a signal traceback)
                    self.stats.inc_value(self.prefix + "errors")
                    # nothing is tried again after close: the process ends
                    lost = getattr(self.writer, "lost", 0)
                    if lost:
                        self.stats.inc_value(self.prefix + "lost", lost)
                    message = exc.strerror if isinstance(exc, OSError) and exc.strerror \
                        else str(exc)
                    logger.error("Simdup could not write to %s at close: %s", self.config.dir_setting,
                                 message, extra={"spider": self.crawler.spider})
        finally:
            await self.backend.close()
            lock = getattr(self, "_dir_lock", None)
            if lock is not None:        # another crawl may use SIMDUP_DIR from now on
                lock.close()
