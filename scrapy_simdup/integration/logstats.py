"""The periodic ``Simdup:`` log line (like Scrapy's LogStats) and the close summary.

One :class:`SimdupLogStats` exists per crawler: the extension entry and the
middleware/pipeline all get the same instance from :func:`attach`, so the line
appears however the plugin was enabled.
"""
from __future__ import annotations

import logging
import time

from scrapy import signals
from scrapy.exceptions import NotConfigured

from scrapy_simdup.index.redis.log import safe_url
from scrapy_simdup.integration.config import SimdupConfig

try:  # Scrapy >= 2.13: asyncio-native looping call when the asyncio reactor runs
    from scrapy.utils.asyncio import create_looping_call as _looping_call
except ImportError:  # pragma: no cover (older Scrapy)
    from twisted.internet.task import LoopingCall as _looping_call

__all__ = ["SimdupLogStats", "attach"]

logger = logging.getLogger("scrapy_simdup")

_ATTR = "_simdup_logstats"


class SimdupLogStats:
    """Logs the effective setup when the spider opens, the dedup counters
    every ``SIMDUP_LOG_INTERVAL`` seconds and a summary at close.

    Besides the Scrapy stats it keeps the time spent fingerprinting and in
    index lookups (``record_page``/``record_item``), for the per-lookup means.
    """

    def __init__(self, crawler, config: SimdupConfig) -> None:
        self.crawler = crawler
        self.config = config
        self.stats = crawler.stats
        self.interval = config.log_interval
        self.kinds: set[str] = set()      # "pages" / "items": the components at work
        self.task = None
        self.checked_prev = 0
        self.started = None
        self.fingerprint_seconds = {"pages": 0.0, "items": 0.0}
        self.lookup_seconds = {"pages": 0.0, "items": 0.0}
        self.lookups = {"pages": 0, "items": 0}
        #: more parts of the close summary (the URL rules'): callables returning str or None
        self.summaries: list = []
        crawler.signals.connect(self.spider_opened, signal=signals.spider_opened)
        crawler.signals.connect(self.spider_closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler) -> SimdupLogStats:
        config = SimdupConfig.from_crawler(crawler)
        if not config.enabled:
            raise NotConfigured
        return attach(crawler, config)

    def register(self, kind: str) -> None:
        """The middleware (``"pages"``) or the pipeline (``"items"``) is at work."""
        self.kinds.add(kind)

    # -- timing, fed by the middleware and the pipeline ----------------------
    def record(self, kind: str, fingerprint_seconds: float, lookup_seconds: float) -> None:
        self.fingerprint_seconds[kind] += fingerprint_seconds
        self.lookup_seconds[kind] += lookup_seconds
        self.lookups[kind] += 1

    # -- signals -------------------------------------------------------------
    def spider_opened(self, spider) -> None:
        self.started = time.monotonic()
        if self.kinds:
            logger.info(self.setup(getattr(spider, "name", None)), extra={"spider": spider})
        if self.interval > 0:
            self.task = _looping_call(self.log)
            self.task.start(self.interval, now=False)

    def spider_closed(self, spider, reason) -> None:
        if self.task is not None and self.task.running:
            self.task.stop()
        self.task = None
        if self.stats.get_value("simdup/checked", 0) or self.stats.get_value(
                "simdup/items/checked", 0) or _skipped(self.stats, "simdup/skipped/"):
            logger.info(self.summary(), extra={"spider": spider})
        if self._items_without_text():
            # the add-on enables the pipeline for every spider: one line, not
            # a skip count in the summary
            n = self.stats.get_value("simdup/items/skipped/no_text", 0)
            logger.info("Simdup: no item had text in a field of SIMDUP_ITEM_FIELDS %s "
                        "(%d items passed on unchecked and unchanged): set SIMDUP_ITEM_FIELDS "
                        "to the fields that hold your items' text to check them",
                        list(self.config.item_fields), n,
                        extra={"spider": spider or self.crawler.spider})

    def _items_without_text(self) -> bool:
        """No item was checked, and every one skipped had no text."""
        prefix = "simdup/items/"
        return not self.stats.get_value(prefix + "checked", 0) and \
            set(_skipped(self.stats, prefix + "skipped/")) == {prefix + "skipped/no_text"}

    # -- formatting ------------------------------------------------------------
    def setup(self, spider_name: str | None = None) -> str:
        """The effective setup, e.g. ``Simdup: drop near-duplicate pages
        within 22 bits of either key and similarity >= 0.18 (PSM, 512 probes
        per key), memory index, SIMDUP_DIR=/x: restored 1,234 fingerprints;
        revisits kept, start requests not dropped``. The restored counts are
        read from the stats the components set when they opened the index."""
        config, get = self.config, self.stats.get_value
        memory = config.index == "memory"
        if config.search == "exact":
            search = "every flip set"
        elif config.recall is not None:
            search = f"PSM, recall {config.recall:g}"
        else:
            search = f"PSM, {config.probes_per_key} probes per key"
        if config.bands:
            search += f" and {config.bands} sketch bands"
        recall = get("simdup/expected_recall")
        if recall is not None and config.search != "exact":
            search += f", expected recall {recall:.3f} at this size"
        things = " and ".join(k for k in ("pages", "items") if k in self.kinds)
        verify = f" and similarity >= {config.min_similarity:g}" if config.min_similarity else ""
        line = (f"Simdup: {config.action} near-duplicate {things} within {config.distance} "
                f"bits of either key{verify} ({search}), ")
        if memory:
            line += "memory index"
        else:
            line += (f"Redis index {safe_url(config.index)} key "
                     f"{config.redis_key_for(spider_name or 'default')!r}")
            replica = get("simdup/replica_pages")
            if replica is not None:
                line += (f" (replica of {replica:,} pages, "
                         f"{get('simdup/replica_bytes', 0) / 2**20:,.0f} MiB in this process, "
                         f"loaded in {get('simdup/replica_load_ms', 0) / 1000:.1f} s)")
        if not config.dir:
            line += ", no SIMDUP_DIR (nothing is kept after the crawl)"
        elif not memory:
            line += f", {config.dir_setting}={config.dir} (batch files)"
        else:
            restored = []
            for kind, prefix in (("pages", "simdup/"), ("items", "simdup/items/")):
                if kind in self.kinds:
                    n = get(prefix + "index_restored", 0)
                    corrupt = " (the damaged saved index was moved aside)" \
                        if get(prefix + "index_corrupt") else ""
                    restored.append(f"{n:,} {'fingerprints' if kind == 'pages' else kind}"
                                    f"{corrupt}")
            line += f", {config.dir_setting}={config.dir}: restored {' and '.join(restored)}"
        line += {"keep": "; revisits kept", "drop": "; revisits dropped",
                 "tag": "; revisits tagged"}[config.on_revisit]
        if "pages" in self.kinds and "drop" in (config.action, config.on_revisit):
            line += (", start requests dropped like other pages" if config.drop_start_requests
                     else ", start requests not dropped")
        return line

    def _means(self, kind: str) -> tuple[float, float, float]:
        n = self.lookups[kind]
        probes_key = "simdup/probes" if kind == "pages" else "simdup/items/probes"
        probes = self.stats.get_value(probes_key)
        mean_probes = probes / n if (n and probes is not None) else float("nan")
        mean_lookup_us = 1e6 * self.lookup_seconds[kind] / n if n else 0.0
        mean_fp_us = 1e6 * self.fingerprint_seconds[kind] / n if n else 0.0
        return mean_probes, mean_lookup_us, mean_fp_us

    def log(self) -> None:
        get = self.stats.get_value
        checked = get("simdup/checked", 0)
        rate = (checked - self.checked_prev) * 60.0 / self.interval
        self.checked_prev = checked
        duplicates = get("simdup/duplicates", 0)
        mean_probes, lookup_us, fp_us = self._means("pages")
        message = f"Simdup: checked {checked} pages (at {rate:.0f} pages/min)"
        if checked:
            message += (f", {duplicates} duplicates ({_share(duplicates, checked)}), "
                        f"index {get('simdup/index_size', 0)}, "
                        f"{_fmt(mean_probes)} probes and {lookup_us:.0f} us per lookup")
            recall = get("simdup/expected_recall")
            if recall is not None:
                message += f", expected recall {recall:.3f}"
        items = get("simdup/items/checked", 0)
        if items:
            item_dups = get("simdup/items/duplicates", 0)
            message += f"; items: checked {items}, {item_dups} duplicates ({_share(item_dups, items)})"
        logger.info(message, extra={"spider": self.crawler.spider})

    def summary(self) -> str:
        get = self.stats.get_value
        parts = []
        for kind, prefix in (("pages", "simdup/"), ("items", "simdup/items/")):
            checked = get(prefix + "checked", 0)
            skipped = _skipped(self.stats, prefix + "skipped/")
            if not checked and not skipped:     # e.g. the pipeline alone: no pages part
                continue
            if kind == "items" and self._items_without_text():   # a line of its own
                continue
            reasons = ", ".join(f"{k.rsplit('/', 1)[1]} {v}" for k, v in sorted(skipped.items()))
            if not checked:
                parts.append(f"{kind}: none checked, skipped {sum(skipped.values())} ({reasons})")
                continue
            duplicates = get(prefix + "duplicates", 0)
            mean_probes, lookup_us, fp_us = self._means(kind)
            revisits = get(prefix + "revisits", 0)
            kept_start = get(prefix + "start_requests_kept", 0)
            parts.append(
                f"{kind}: checked {checked}, {_plural(duplicates, 'near-duplicate')} "
                f"({_share(duplicates, checked)}; dropped {get(prefix + 'dropped', 0)}, "
                f"tagged {get(prefix + 'tagged', 0)}), "
                + (f"{_plural(revisits, 'revisit')}, " if revisits else "")
                + (f"{_plural(kept_start, 'start page')} kept, " if kept_start else "")
                + f"skipped {sum(skipped.values())}"
                + (f" ({reasons})" if reasons else "")
                + f", errors {get(prefix + 'errors', 0)}, index size {get(prefix + 'index_size', 0)}, "
                f"{_fmt(mean_probes)} probes, {lookup_us:.0f} us per lookup, "
                f"{fp_us:.0f} us per fingerprint")
        parts += [part for part in (summary() for summary in self.summaries) if part]
        return "Simdup summary: " + "; ".join(parts)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _skipped(stats, prefix: str) -> dict:
    return {k: v for k, v in stats.get_stats().items()
            if k.startswith(prefix) and k.count("/") == prefix.count("/")}


def _share(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "0.0%"


def _fmt(x: float) -> str:
    return "n/a" if x != x else f"{x:.1f}"


def attach(crawler, config: SimdupConfig) -> SimdupLogStats:
    """The crawler's one SimdupLogStats, created on first use."""
    existing = getattr(crawler, _ATTR, None)
    if existing is None:
        existing = SimdupLogStats(crawler, config)
        setattr(crawler, _ATTR, existing)
    return existing
