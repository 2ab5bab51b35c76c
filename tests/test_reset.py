"""SIMDUP_RESET: a crawl that starts afresh, on the memory index's SIMDUP_DIR
and on a real redis-server."""
from __future__ import annotations

import asyncio
import logging
import uuid

import numpy as np
import pytest
from scrapy.http import HtmlResponse, Request

from scrapy_simdup import SimdupDownloaderMiddleware, SimdupPipeline
from scrapy_simdup.storage.batchfile import list_batches
from tests.scrapy_crawler import make_crawler


def _text(i: int) -> str:
    rng = np.random.default_rng(i)
    return " ".join(f"w{int(w)}" for w in rng.integers(0, 5000, 120))


def _crawl(settings: dict, pages=range(5), items: bool = False):
    """A crawl of ``pages`` through the middleware (and the pipeline); its stats."""
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_LOG_INTERVAL": 0, **settings})
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    pipeline = SimdupPipeline.from_crawler(crawler) if items else None
    for i in pages:
        url = f"http://site.example/p{i}"
        request = Request(url)
        html = f"<html><body><article><p>{_text(i)}</p></article></body></html>".encode()
        asyncio.run(middleware.process_response(
            request, HtmlResponse(url, body=html, encoding="utf-8", request=request)))
        if pipeline is not None:
            asyncio.run(pipeline.process_item({"url": url, "text": _text(i)}))
    asyncio.run(middleware._spider_closed(None, "finished"))
    if pipeline is not None:
        asyncio.run(pipeline._spider_closed(None, "finished"))
    return crawler.stats.get_stats()


def test_reset_removes_the_saved_index_and_keeps_the_batches(tmp_path, caplog):
    d = tmp_path / "simdup"
    first = _crawl({"SIMDUP_DIR": str(d)}, items=True)
    assert first["simdup/checked"] == 5 and len(list_batches(d)) == 1
    again = _crawl({"SIMDUP_DIR": str(d), "SIMDUP_ON_REVISIT": "tag"})
    assert again["simdup/index_restored"] == 5 and again["simdup/revisits"] == 5
    caplog.set_level(logging.INFO, "scrapy_simdup")
    fresh = _crawl({"SIMDUP_DIR": str(d), "SIMDUP_RESET": True, "SIMDUP_ON_REVISIT": "tag"},
                   items=True)
    assert fresh["simdup/index_reset"] == 5         # (revisits are not stored again)
    assert fresh["simdup/items/index_reset"] == 5
    assert "simdup/index_restored" not in fresh and "simdup/revisits" not in fresh
    assert "simdup/duplicates" not in fresh and fresh["simdup/checked"] == 5
    lines = [r.getMessage() for r in caplog.records if "SIMDUP_RESET" in r.getMessage()]
    assert len(lines) == 2 and all(r.levelno == logging.INFO for r in caplog.records
                                   if "SIMDUP_RESET" in r.getMessage())
    assert lines[0] == (f"Simdup: SIMDUP_RESET: removed the saved pages index in {d} "
                        f"(5 fingerprints: index.json, index.values, index.keys); its batch "
                        f"files are kept for simdup merge")
    assert "items index" in lines[1] and "(5 fingerprints" in lines[1]
    assert len(list_batches(d)) == 3                # the batches of all three crawls
    # the next crawl goes on from the reset one
    assert _crawl({"SIMDUP_DIR": str(d)})["simdup/index_restored"] == 5


def test_reset_of_a_directory_with_nothing_saved(tmp_path, caplog):
    caplog.set_level(logging.INFO, "scrapy_simdup")
    stats = _crawl({"SIMDUP_DIR": str(tmp_path / "new"), "SIMDUP_RESET": True})
    assert stats["simdup/index_reset"] == 0 and stats["simdup/checked"] == 5
    assert "(nothing was saved)" in caplog.text


def test_reset_of_a_damaged_snapshot(tmp_path, caplog):
    d = tmp_path / "simdup"
    _crawl({"SIMDUP_DIR": str(d)})
    (d / "index.json").write_text("{ damaged")
    caplog.set_level(logging.INFO, "scrapy_simdup")
    stats = _crawl({"SIMDUP_DIR": str(d), "SIMDUP_RESET": True})
    assert "(a damaged snapshot: index.json, index.values, index.keys)" in caplog.text
    assert "simdup/index_corrupt" not in stats and stats["simdup/checked"] == 5


def test_reset_on_redis_clears_the_index_under_its_prefix_only(redis_server, caplog):
    redis = pytest.importorskip("redis")
    prefix = f"reset-test-{uuid.uuid4().hex[:8]}"
    settings = {"SIMDUP_INDEX": redis_server.url, "SIMDUP_REDIS_KEY": prefix}
    client = redis.Redis.from_url(redis_server.url)
    client.set(prefix + "x:other", "not ours")          # a key that only starts alike
    first = _crawl(settings, items=True)
    assert first["simdup/index_size"] == 5
    assert _crawl(settings)["simdup/revisits"] == 5     # the index is shared: all seen
    caplog.set_level(logging.INFO, "scrapy_simdup")
    fresh = _crawl({**settings, "SIMDUP_RESET": True})
    assert "simdup/revisits" not in fresh and fresh["simdup/index_size"] == 5
    assert fresh["simdup/index_reset"] == 5
    (line,) = [r.getMessage() for r in caplog.records if "SIMDUP_RESET" in r.getMessage()]
    assert line.startswith(f"Simdup: SIMDUP_RESET: removed the Redis pages index {prefix!r} at "
                           f"{redis_server.url} (5 fingerprints, ")
    # the items' index and the other key are still there
    assert int(client.hget(prefix + ":items:meta", "n")) == 5
    assert client.get(prefix + "x:other") == b"not ours"
    assert _crawl(settings, items=True)["simdup/items/revisits"] == 5
    client.close()
