"""Run one real Scrapy crawl in a fresh process and report what happened as JSON.

Usage: python tests/crawl_runner.py <job.json> <result.json>

job: {"settings": {...}, "requests": [{"url": ..., "meta": {...}}, ...],
      "mode": "pages" | "items", "item_class": "dict" | "scrapy" | "frozen" | "copy_meta"
      | "no_text" | ..., "follow": bool,
      "block_path": {"path": P, "from": i, "to": j}}   (optional: a disk fault)
result: {"stats": {...}, "responses": [{"url", "status", "simdup"}],
         "items": [...], "dropped": [{"url", "duplicate_of", "distance", "type"}],
         "warnings": [...], "error": str | null, "log": [...]}

A fresh process per crawl keeps the reactor out of pytest's way: Scrapy installs
its default asyncio reactor here, as it would for a user.
"""
from __future__ import annotations

import json
import logging
import sys
import traceback
import warnings


def main(job_path: str, result_path: str) -> None:
    warnings.simplefilter("always")
    captured: list[str] = []
    old_showwarning = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        captured.append(f"{category.__name__}: {message} ({filename}:{lineno})")
        old_showwarning(message, category, filename, lineno, file, line)
    warnings.showwarning = showwarning

    import dataclasses

    import scrapy
    from itemadapter import ItemAdapter
    from scrapy.crawler import CrawlerProcess

    with open(job_path) as f:
        job = json.load(f)
    result = {"responses": [], "items": [], "dropped": [], "error": None, "log": []}

    class Record(logging.Handler):
        def emit(self, record):
            if record.name.startswith("scrapy_simdup") or record.levelno >= logging.WARNING:
                result["log"].append(f"{record.levelname} {record.name}: {record.getMessage()}")

    class Item(scrapy.Item):
        url = scrapy.Field()
        text = scrapy.Field()
        title = scrapy.Field()

    @dataclasses.dataclass(frozen=True)
    class FrozenItem:
        url: str
        text: str
        title: str | None
        simdup: dict | None = None

    class Unprintable:
        def __str__(self):
            raise RuntimeError("this field cannot be read as text")

    class TestSpider(scrapy.Spider):
        name = "simdup_test"

        async def start(self):
            for spec in job["requests"]:
                yield scrapy.Request(spec["url"], meta=spec.get("meta", {}),
                                     dont_filter=True, callback=self.parse,
                                     errback=self.errback)

        def parse(self, response):
            block = job.get("block_path")
            if block:   # the directory is replaced by a file between responses i and j
                import os
                import shutil
                path, away = block["path"], block["path"] + ".away"
                if len(result["responses"]) == block["from"]:
                    os.rename(path, away)
                    with open(path, "w") as f:
                        f.write("not a directory")
                elif len(result["responses"]) == block["to"]:
                    os.remove(path)
                    shutil.move(away, path)
            result["responses"].append({"url": response.url, "status": response.status,
                                        "simdup": response.meta.get("simdup"),
                                        "redirect_urls": response.meta.get("redirect_urls")})
            if job.get("mode") == "items":
                text = "\n".join(t.strip() for t in response.xpath("//p//text()").getall())
                fields = {"url": response.url, "text": text,
                          "title": response.xpath("//title/text()").get()}
                kind = job.get("item_class")
                if kind == "scrapy":
                    yield Item(**fields)
                elif kind == "frozen":         # a frozen dataclass: cannot be tagged
                    yield FrozenItem(**fields)
                elif kind == "unreadable":     # a field whose str() fails
                    yield {**fields, "text": Unprintable()}
                elif kind == "unreadable_id":  # an id whose str() fails
                    yield {**fields, "url": Unprintable()}
                elif kind == "copy_meta":      # the spider keeps the page's verdict
                    yield {**fields, "simdup": response.meta.get("simdup")}
                elif kind == "no_text":        # no field of SIMDUP_ITEM_FIELDS
                    yield {"url": response.url, "title": fields["title"]}
                else:
                    yield fields
            if job.get("follow"):   # a crawl that follows the links of its pages
                yield from response.follow_all(css="a", callback=self.parse, errback=self.errback)

        def errback(self, failure):
            exc = failure.value
            result["dropped"].append({
                "url": failure.request.url, "type": type(exc).__name__,
                "duplicate_of": getattr(exc, "duplicate_of", None),
                "distance": getattr(exc, "distance", None),
                "similarity": getattr(exc, "similarity", None)})

    def item_scraped(item, response, spider):
        result["items"].append(ItemAdapter(item).asdict())

    def item_dropped(item, response, exception, spider):
        result["dropped"].append({"url": ItemAdapter(item).get("url"), "type": type(exception).__name__,
                                  "duplicate_of": getattr(exception, "duplicate_of", None),
                                  "distance": getattr(exception, "distance", None),
                                  "similarity": getattr(exception, "similarity", None)})

    settings = {"LOG_LEVEL": "DEBUG", "TELNETCONSOLE_ENABLED": False,
                "ROBOTSTXT_OBEY": False, **job["settings"]}
    process = CrawlerProcess(settings, install_root_handler=True)
    logging.getLogger().addHandler(Record())
    crawler = process.create_crawler(TestSpider)
    crawler.signals.connect(item_scraped, signal=scrapy.signals.item_scraped)
    crawler.signals.connect(item_dropped, signal=scrapy.signals.item_dropped)
    deferred = process.crawl(crawler)

    def failed(failure):
        result["error"] = f"{failure.type.__name__}: {failure.value}"
        result["traceback"] = "".join(traceback.format_exception(failure.value))
    deferred.addErrback(failed)
    process.start()
    result["stats"] = {k: (v if isinstance(v, (int, float, str)) else str(v))
                       for k, v in (crawler.stats.get_stats() if crawler.stats else {}).items()}
    result["warnings"] = captured
    from twisted.internet import reactor
    result["reactor"] = type(reactor).__name__
    result["scrapy_version"] = scrapy.__version__
    with open(result_path, "w") as f:
        json.dump(result, f, default=repr)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
