"""A Scrapy crawler for tests that need its settings and stats but no crawl."""
from __future__ import annotations

from scrapy import Spider
from scrapy.crawler import Crawler
from scrapy.statscollectors import MemoryStatsCollector
from scrapy.utils.test import get_crawler


def make_crawler(settings: dict) -> Crawler:
    try:
        return get_crawler(settings_dict=settings)
    except RuntimeError:  # Scrapy 2.13's get_crawler wants an installed reactor; we need none
        crawler = Crawler(Spider, settings)
        crawler.stats = MemoryStatsCollector(crawler)
        return crawler
