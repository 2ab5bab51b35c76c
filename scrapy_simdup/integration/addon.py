"""Addon: ``ADDONS = {"scrapy_simdup.Addon": 0}`` turns the plugin on in one line."""
from __future__ import annotations

from scrapy_simdup.integration.logstats import SimdupLogStats
from scrapy_simdup.integration.middleware import SimdupDownloaderMiddleware
from scrapy_simdup.integration.pipeline import SimdupPipeline

__all__ = ["Addon", "MIDDLEWARE_PRIORITY", "PIPELINE_PRIORITY", "EXTENSION_PRIORITY"]

#: Below HttpCompressionMiddleware (590) and RedirectMiddleware (600): their
#: process_response runs first, so the middleware sees the final, decompressed
#: response.
MIDDLEWARE_PRIORITY = 585
#: Early, so that duplicates are dropped before storage pipelines.
PIPELINE_PRIORITY = 200
EXTENSION_PRIORITY = 500


class Addon:
    """Enables the downloader middleware, the item pipeline and the log line.

    Sets ``SIMDUP_ENABLED = True`` and ``SIMDUP_URL_RULES = True`` at add-on
    priority (a project or command line setting ``False`` still turns them
    off) and registers the components unless the project already lists them
    (its priority wins).
    """

    def update_settings(self, settings) -> None:
        settings.set("SIMDUP_ENABLED", True, "addon")
        # URL rules: on with the add-on, as measured by benchmarks/bench_url_rules.py
        # (no unique page lost); off for the components enabled by hand
        settings.set("SIMDUP_URL_RULES", True, "addon")
        settings.setdefault_in_component_priority_dict(
            "DOWNLOADER_MIDDLEWARES", SimdupDownloaderMiddleware, MIDDLEWARE_PRIORITY)
        settings.setdefault_in_component_priority_dict(
            "ITEM_PIPELINES", SimdupPipeline, PIPELINE_PRIORITY)
        settings.setdefault_in_component_priority_dict(
            "EXTENSIONS", SimdupLogStats, EXTENSION_PRIORITY)
