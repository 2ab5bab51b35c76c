"""The middleware and pipeline without a crawl: revisits, failed checks,
fingerprints lost at close, tag fields in use, the start-up line, and damage
in the saved state that the storage layer does not name."""
from __future__ import annotations

import asyncio
import errno
import logging

import numpy as np
import pytest
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Request

from scrapy_simdup import SimdupConfig, SimdupDownloaderMiddleware, SimdupPipeline
from scrapy_simdup.exceptions import CorruptFileError, IndexUnavailableError
from scrapy_simdup.fingerprint.fingerprinter import fingerprint_features
from scrapy_simdup.fingerprint.sketch import SKETCH_BYTES, matches_needed, similarity
from scrapy_simdup.index.backend import IndexBackend, MemoryBackend, Page
from scrapy_simdup.index.persist import PersistentBatchWriter, load_idf, restore
from scrapy_simdup.index.snapshot import IndexStore, records
from scrapy_simdup.index.verified import VerifiedIndex
from scrapy_simdup.integration.logstats import SimdupLogStats
from scrapy_simdup.integration.pipeline import NearDuplicateItem
from scrapy_simdup.storage import batchwriter
from tests.scrapy_crawler import make_crawler


def _text(seed: int, n: int = 120) -> str:
    rng = np.random.default_rng(seed)
    return " ".join(f"w{int(w)}" for w in rng.integers(0, 5000, n))


def _response(url: str, seed: int, meta=None):
    html = f"<html><body><article><p>{_text(seed)}</p></article></body></html>".encode()
    request = Request(url, meta=meta or {})
    return request, HtmlResponse(url, body=html, encoding="utf-8", request=request)


def _check(middleware, url, seed, meta=None):
    request, response = _response(url, seed, meta)
    asyncio.run(middleware.process_response(request, response))
    return request.meta.get("simdup")


class _DownBackend(IndexBackend):
    async def check_and_add(self, page, key):
        raise IndexUnavailableError("Redis index at redis://***@h:6379/0 failed: "
                                    "Connection refused")

    def __len__(self):
        return 0


# -- revisits ---------------------------------------------------------------------

def test_memory_backend_knows_its_keys_as_restored():
    backend = MemoryBackend(VerifiedIndex())
    assert backend.same_key("http://a/", "http://a/")
    assert not backend.same_key("http://a/", "http://b/")
    # index.keys stores a key with a newline escaped: a restored key is compared so
    assert backend.same_key("id%0A1", "id\n1") and not backend.same_key("id%0A1", "id 1")


@pytest.mark.parametrize("bands", [0, 12])
def test_memory_backend_remembers_the_entry_it_stored_exactly(bands):
    """The entry a check remembers for its key (looked up again by
    note_checked and checked_here) is the one a fresh look-up finds, for
    new, copied, restored and re-stored keys alike, with and without sketch
    bands (the backend reads the two keys by row from the index)."""
    backend = MemoryBackend(VerifiedIndex(bands=bands))
    # three distinct pages, each met three times (copies, revisits)
    fps = [fingerprint_features([f"w{j + 1000 * (i % 3)}" for j in range(40)]) for i in range(9)]
    backend.load([fps[0].value], [fps[0].value2], [fps[0].sketch], ["id%0A1"])
    keys = ["http://a/1", "http://a/2", "http://a/1", "id\n1", "x" * 70_000,
            "http://a/3", "http://a/2", "id\n1", "http://a/1"]
    for fp, key in zip(fps, keys):
        asyncio.run(backend.check_and_add(fp, key))
        for other in (key, *keys):
            remembered = backend._entry(other)
            backend._last_entry = None
            assert backend._entry(other) == remembered, other
        row, v1, v2, _ = backend._entry(key)[1]
        assert (v1, v2) == (backend.index.arrays()[0][row], backend.index.arrays()[1][row])
        backend.note_checked(key)
        assert backend.checked_here(key)


def test_redis_backend_knows_its_keys_as_stored():
    from scrapy_simdup.index.redis.backend import RedisBackend
    backend = RedisBackend.__new__(RedisBackend)
    assert backend.same_key("http://a/", "http://a/")
    long_key = "x" * 70_000                 # the log keeps the whole URL
    assert backend.same_key(long_key, long_key)
    assert not backend.same_key("x" * 65_535, long_key)
    assert not backend.same_key("http://a/", "http://a/b")


def _carry_over(old, new) -> None:
    """What a restore from SIMDUP_DIR gives a new crawl: the old one's entries
    (near-duplicates included)."""
    values, values2, sketches, ids = old.backend.index.arrays()
    new.backend.load(values, values2, sketches, [old.backend.keys[int(i)] for i in ids])


def _recrawl(settings, first_urls, seed=1):
    """A middleware whose index holds what an earlier crawl stored for ``first_urls``."""
    earlier = SimdupDownloaderMiddleware.from_crawler(make_crawler(settings))
    for url in first_urls:
        _check(earlier, url, seed)
    crawler = make_crawler(settings)
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    _carry_over(earlier, middleware)
    return crawler, middleware


def test_a_revisit_is_counted_apart_and_kept_by_default():
    crawler, middleware = _recrawl({"SIMDUP_ENABLED": True}, ["http://a/"])
    tag = _check(middleware, "http://a/", 1)          # the page the last crawl stored
    assert tag == {"simhash": tag["simhash"], "duplicate_of": None, "distance": None,
                   "similarity": None, "canonical": None}
    assert len(middleware.backend) == 1                # a revisit is not stored again
    with pytest.raises(IgnoreRequest):                 # another URL: a near-duplicate
        _check(middleware, "http://b/", 1)
    stats = crawler.stats.get_stats()
    assert stats["simdup/revisits"] == 1 and stats["simdup/duplicates"] == 1
    # the near-duplicate is stored too, under its own key
    assert stats["simdup/dropped"] == 1 and stats["simdup/index_size"] == 2
    assert sorted(middleware.backend.keys.values()) == ["http://a/", "http://b/"]


def test_the_same_url_twice_in_one_crawl_is_a_copy_not_a_revisit():
    crawler = make_crawler({"SIMDUP_ENABLED": True})
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    _check(middleware, "http://a/", 1)
    with pytest.raises(IgnoreRequest, match="near-duplicate of http://a/"):
        _check(middleware, "http://a/", 1)            # dont_filter, or a second link
    stats = crawler.stats.get_stats()
    assert stats["simdup/duplicates"] == 1 and "simdup/revisits" not in stats


def _key(rng) -> int:
    return int(rng.integers(0, 2**63, dtype=np.int64)) * 2 + 1


MIX = 0x9E3779B97F4A7C15


@pytest.mark.parametrize("bands", [0, 12])
def test_a_page_is_a_revisit_even_when_another_stored_page_is_found_first(bands):
    """The look-up returns the best match (the most agreeing sketch bins): the
    page's own entry is looked up by key, and is found when it verifies."""
    rng = np.random.default_rng(5)
    agree_with_a = matches_needed(0.15) + 3
    misses = 0
    for _ in range(300):
        a = _key(rng)
        bits = rng.choice(64, 12, replace=False)
        c = a
        for b in bits:
            c ^= 1 << int(b)
        a2 = a
        for b in bits[:4]:                            # 4 bits from A, 8 from C
            a2 ^= 1 << int(b)
        sketch_a = rng.integers(0, 128, SKETCH_BYTES, dtype=np.uint8)
        sketch_c = sketch_a + 128                     # no bin agrees: C is no copy of A
        # A2's sketch agrees with C's in more bins than with A's: C is the best match
        sketch_a2 = sketch_c.copy()
        sketch_a2[:agree_with_a] = sketch_a[:agree_with_a]
        backend = MemoryBackend(VerifiedIndex(bands=bands))
        # the second key moves with the first (the pair rule reads both)
        assert asyncio.run(backend.check_and_add(
            Page(a, rng.normal(size=64), a ^ MIX, rng.normal(size=64), sketch_a.tobytes()),
            "A")) is None
        assert asyncio.run(backend.check_and_add(
            Page(c, rng.normal(size=64), c ^ MIX, rng.normal(size=64), sketch_c.tobytes()),
            "C")) is None
        a2_page = Page(a2, rng.normal(size=64), a2 ^ MIX, rng.normal(size=64),
                       sketch_a2.tobytes())
        best = backend.index.query(a2_page.value, a2_page.value2, a2_page.sketch)
        assert best is not None and backend.keys[best.id] == "C"
        match = asyncio.run(backend.check_and_add(a2_page, "A"))
        misses += match is None or match != ("A", 4, similarity(agree_with_a))
    assert misses == 0


def _restored(backend) -> MemoryBackend:
    """A new crawl's backend, restored from what ``backend`` stored."""
    values, values2, sketches, ids = backend.index.arrays()
    keys = [backend.keys[int(i)] for i in ids]
    # what the snapshot records of each page: kept, or stored as a near-duplicate
    kept = [backend._entry(k)[1][3] for k in keys]
    again = MemoryBackend(VerifiedIndex())
    again.load(values, values2, sketches, keys, kept)
    return again


def _kept_and_copy():
    words = [f"w{i}" for i in range(300)]
    return (fingerprint_features(words),
            fingerprint_features(words[:200] + [f"x{i}" for i in range(100)]))


def _first_crawl(kept, copy) -> MemoryBackend:
    backend = MemoryBackend(VerifiedIndex())
    assert asyncio.run(backend.check_and_add(kept, "A")) is None
    match = asyncio.run(backend.check_and_add(copy, "B"))
    assert match.duplicate_of == "A" and match.similarity < 0.6
    assert len(backend) == 2
    return backend


def test_a_near_duplicate_met_again_in_a_recrawl_is_not_stored_again():
    kept, copy = _kept_and_copy()
    backend = _first_crawl(kept, copy)
    for _ in range(3):          # the same two pages, crawled again and again
        backend = _restored(backend)
        assert asyncio.run(backend.check_and_add(kept, "A")).duplicate_of == "A"  # a revisit
        assert asyncio.run(backend.check_and_add(copy, "B")) is not None
        assert len(backend) == 2


def test_a_near_duplicate_met_again_in_a_recrawl_is_still_a_near_duplicate():
    """A page dropped as a copy of A must not come back as a revisit of itself
    (SIMDUP_ON_REVISIT keeps revisits by default) when the site is crawled again."""
    kept, copy = _kept_and_copy()
    backend = _restored(_first_crawl(kept, copy))
    match = asyncio.run(backend.check_and_add(copy, "B"))
    assert match is not None and not backend.same_key(match.duplicate_of, "B")
    assert match.duplicate_of == "A"


@pytest.mark.parametrize("on_revisit", ["tag", "drop"])
def test_on_revisit_tag_and_drop(on_revisit):
    crawler, middleware = _recrawl({"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag",
                                    "SIMDUP_ON_REVISIT": on_revisit}, ["http://a/"])
    if on_revisit == "tag":
        tag = _check(middleware, "http://a/", 1)
        assert tag["revisit"] is True and tag["duplicate_of"] == "http://a/"
        assert tag["distance"] == 0 and tag["similarity"] == 1.0
    else:       # dropped, whatever SIMDUP_ACTION is
        with pytest.raises(IgnoreRequest, match="near-duplicate of http://a/"):
            _check(middleware, "http://a/", 1)
        assert crawler.stats.get_value("simdup/dropped") == 1
    assert crawler.stats.get_value("simdup/revisits") == 1
    assert crawler.stats.get_value("simdup/tagged") is None


def test_start_requests_are_checked_but_not_dropped():
    crawler = make_crawler({"SIMDUP_ENABLED": True})
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    _check(middleware, "http://a/", 1)
    tag = _check(middleware, "http://b/", 1, meta={"is_start_request": True})
    assert tag["duplicate_of"] == "http://a/" and tag["distance"] == 0
    assert tag["similarity"] == 1.0
    assert crawler.stats.get_value("simdup/duplicates") == 1
    assert crawler.stats.get_value("simdup/start_requests_kept") == 1
    strict = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_DROP_START_REQUESTS": True})
    middleware = SimdupDownloaderMiddleware.from_crawler(strict)
    _check(middleware, "http://a/", 1)
    with pytest.raises(IgnoreRequest):
        _check(middleware, "http://b/", 1, meta={"is_start_request": True})


def test_items_with_a_made_up_key_are_never_revisits():
    """``item-<n>`` numbers items that have no id: item-1 of another crawl is
    not this item-1."""
    earlier = SimdupPipeline.from_crawler(make_crawler({"SIMDUP_ENABLED": True}))
    asyncio.run(earlier.process_item({"url": "u1", "text": _text(1)}))
    crawler = make_crawler({"SIMDUP_ENABLED": True})
    pipeline = SimdupPipeline.from_crawler(crawler)
    _carry_over(earlier, pipeline)
    asyncio.run(pipeline.process_item({"url": "u1", "text": _text(1)}))     # revisit: kept
    assert crawler.stats.get_value("simdup/items/revisits") == 1
    # a key that is the stored one only by numbering: a near-duplicate
    pipeline.backend.keys[0] = "item-3"
    with pytest.raises(NearDuplicateItem):
        asyncio.run(pipeline.process_item({"text": _text(1)}))
    assert crawler.stats.get_value("simdup/items/duplicates") == 1


# -- failed checks ----------------------------------------------------------------

def test_a_page_whose_check_failed_carries_the_error():
    crawler = make_crawler({"SIMDUP_ENABLED": True})
    config = SimdupConfig.from_crawler(crawler)
    middleware = SimdupDownloaderMiddleware(crawler, config, backend=_DownBackend())
    tag = _check(middleware, "http://a/", 1)
    assert tag["duplicate_of"] is None and tag["distance"] is None
    assert tag["similarity"] is None
    assert isinstance(tag["simhash"], int)      # fingerprinted, the look-up failed
    assert tag["error"] == ("index lookup failed: Redis index at redis://***@h:6379/0 "
                            "failed: Connection refused")
    assert crawler.stats.get_value("simdup/errors") == 1


def test_with_on_error_stop_a_failed_page_does_not_reach_the_spider():
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_ON_ERROR": "stop"})
    config = SimdupConfig.from_crawler(crawler)
    middleware = SimdupDownloaderMiddleware(crawler, config, backend=_DownBackend())
    closed = []
    middleware._close_spider = closed.append
    request, response = _response("http://a/", 1)
    with pytest.raises(IgnoreRequest, match="could not check http://a/"):
        asyncio.run(middleware.process_response(request, response))
    assert "simdup" not in request.meta and closed == ["simdup_error"]
    pipeline = SimdupPipeline(crawler, config, backend=_DownBackend())
    pipeline._close_spider = closed.append
    with pytest.raises(Exception, match="could not check item u1") as err:
        asyncio.run(pipeline.process_item({"url": "u1", "text": _text(1)}))
    assert type(err.value).__name__ == "DropItem"


def test_an_item_whose_check_failed_is_tagged_with_the_error():
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag"})
    config = SimdupConfig.from_crawler(crawler)
    pipeline = SimdupPipeline(crawler, config, backend=_DownBackend())
    item = asyncio.run(pipeline.process_item({"url": "u1", "text": _text(1)}))
    assert item["simdup"]["error"].startswith("index lookup failed: ")


# -- tag field in use ---------------------------------------------------------------

def test_tag_mode_never_replaces_a_value_of_the_item(caplog):
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag"})
    pipeline = SimdupPipeline.from_crawler(crawler)
    caplog.set_level(logging.WARNING, "scrapy_simdup")
    plain = asyncio.run(pipeline.process_item({"url": "u0", "text": _text(0)}))
    assert plain["simdup"]["duplicate_of"] is None and "SIMDUP_TAG_FIELD" not in caplog.text
    # the spider copied a page's meta["simdup"] into its item: it stays, with one warning
    page_tag = {"simhash": 5, "duplicate_of": None, "distance": None, "similarity": None,
                "canonical": "http://c/"}
    item = asyncio.run(pipeline.process_item({"url": "u0b", "text": _text(0),
                                              "simdup": dict(page_tag)}))
    assert item["simdup"] == page_tag
    item = asyncio.run(pipeline.process_item({"url": "u2", "text": _text(2), "simdup": 7}))
    assert item["simdup"] == 7
    warnings = [r for r in caplog.records if "SIMDUP_TAG_FIELD" in r.getMessage()]
    assert len(warnings) == 1
    message = warnings[0].getMessage()
    assert "'simdup'" in message and "meta['simdup']" in message and "leaves it" in message
    assert crawler.stats.get_value("simdup/items/tag_field_in_use") == 2
    assert crawler.stats.get_value("simdup/items/duplicates") == 1     # checked all the same
    # a declared field left None is the tag's to fill
    item = asyncio.run(pipeline.process_item({"url": "u3", "text": _text(3), "simdup": None}))
    assert item["simdup"]["simhash"] is not None


@pytest.mark.parametrize("action", ["tag", "drop"])
@pytest.mark.parametrize("item", [{"url": "u1", "title": "no text field"},
                                  {"url": "u1", "text": ""},
                                  {"url": "u1", "text": "too few words"}])
def test_an_item_that_is_not_fingerprinted_comes_out_unchanged(item, action):
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_ACTION": action})
    pipeline = SimdupPipeline.from_crawler(crawler)
    out = asyncio.run(pipeline.process_item(dict(item)))
    assert out == item
    assert sum(v for k, v in crawler.stats.get_stats().items()
               if k.startswith("simdup/items/skipped/")) == 1


def test_items_without_text_get_one_info_line_and_no_summary(caplog):
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag",
                            "SIMDUP_LOG_INTERVAL": 0})
    pipeline = SimdupPipeline.from_crawler(crawler)
    caplog.set_level(logging.INFO, "scrapy_simdup")
    for i in range(20):
        asyncio.run(pipeline.process_item({"url": f"u{i}", "title": "a title"}))
    pipeline.logstats.spider_closed(None, "finished")
    lines = [r for r in caplog.records if r.name == "scrapy_simdup"]
    assert len(lines) == 1 and lines[0].levelno == logging.INFO, [r.getMessage() for r in lines]
    message = lines[0].getMessage()
    assert "SIMDUP_ITEM_FIELDS ['text']" in message and "20 items" in message
    assert "summary" not in message and "skipped 20" not in message


# -- lost at close ------------------------------------------------------------------

def _full_disk(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_fingerprints_not_written_at_close_are_reported_lost(tmp_path, monkeypatch, caplog):
    d = tmp_path / "simdup"
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_DIR": str(d), "SIMDUP_BATCH_SIZE": 2})
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    monkeypatch.setattr(batchwriter, "write_batch", _full_disk)
    caplog.set_level(logging.INFO, "scrapy_simdup")
    for i in range(3):      # the batch of 2 fails mid-crawl: kept, tried again later
        _check(middleware, f"http://p{i}/", i)
    mid = [r for r in caplog.records if "tried again later" in r.getMessage()]
    assert len(mid) == 1 and mid[0].levelno == logging.ERROR
    assert crawler.stats.get_value("simdup/lost") is None
    caplog.clear()
    asyncio.run(middleware._spider_closed(None, "finished"))
    (record,) = [r for r in caplog.records if "at close" in r.getMessage()]
    message = record.getMessage()
    assert record.levelno == logging.ERROR
    assert "3 checked fingerprints" in message and "are lost" in message and str(d) in message
    assert "No space left on device" in message and "tried again later" not in message
    assert crawler.stats.get_value("simdup/lost") == 3


def test_a_snapshot_that_fails_at_close_counts_its_fingerprints_lost(tmp_path, monkeypatch):
    d = tmp_path / "simdup"
    backend = MemoryBackend(VerifiedIndex())
    writer = PersistentBatchWriter(d, 10, backend=backend)
    for i in range(4):
        page = fingerprint_features(_text(i).split())
        writer.add(page, f"k{i}", asyncio.run(backend.check_and_add(page, f"k{i}")))
    monkeypatch.setattr(IndexStore, "append", _full_disk)
    with pytest.raises(OSError, match="4 stored fingerprints could not be added to the index "
                                      "snapshot") as err:
        asyncio.run(writer.close())
    assert writer.lost == 4 and err.value.errno == errno.ENOSPC
    assert "No space left on device" in str(err.value)


# -- damage the storage layer does not name ------------------------------------------

@pytest.mark.parametrize("error", [IsADirectoryError(errno.EISDIR, "Is a directory"),
                                   PermissionError(errno.EACCES, "Permission denied")])
def test_any_os_error_reading_the_saved_state_is_corruption(tmp_path, monkeypatch, error):
    IndexStore(tmp_path).append(records(np.arange(1, 4)), ["a", "b", "c"])

    def read_json(path, kind="file"):
        raise error
    monkeypatch.setattr("scrapy_simdup.storage.atomic.open_regular", read_json)
    with pytest.raises(CorruptFileError, match="index.json") as err:
        restore(MemoryBackend(VerifiedIndex()), tmp_path, on_error="stop")
    assert err.value.path == str(tmp_path / "index.json")
    assert load_idf(tmp_path) is None        # no table named: a new crawl
    stats = {}
    assert restore(MemoryBackend(VerifiedIndex()), tmp_path, "keep",
                   stats.__setitem__) == 0
    assert stats == {"index_corrupt": 1} and list(tmp_path.glob("index.json.corrupt-*"))


@pytest.mark.parametrize("on_error", ["keep", "stop"])
def test_an_index_json_that_is_a_directory(tmp_path, on_error, caplog):
    d = tmp_path / "simdup"
    (d / "index.json").mkdir(parents=True)
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_DIR": str(d),
                        "SIMDUP_ON_ERROR": on_error})
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    assert crawler.stats.get_value("simdup/index_corrupt") == 1
    assert "index.json" in caplog.text and "directory" in caplog.text
    if on_error == "keep":      # moved aside, a fresh index
        assert middleware.refused is None and list(d.glob("index.json.corrupt-*"))
    else:                       # the crawl stops at once, the directory left as it is
        assert middleware.refused == "simdup_corrupt_index" and (d / "index.json").is_dir()


# -- the start-up line -----------------------------------------------------------------

@pytest.mark.parametrize("settings, expected", [
    ({}, "Simdup: drop near-duplicate pages within 22 bits of either key and similarity >= "
         "0.18 (PSM, 128 probes per key and 12 sketch bands), memory index, no SIMDUP_DIR "
         "(nothing is kept after "
         "the crawl); revisits kept, start requests not dropped"),
    ({"SIMDUP_ACTION": "tag", "SIMDUP_SEARCH": "exact", "SIMDUP_DISTANCE": 4,
      "SIMDUP_MIN_SIMILARITY": 0},
     "Simdup: tag near-duplicate pages within 4 bits of either key (every flip set), memory "
     "index, no SIMDUP_DIR (nothing is kept after the crawl); revisits kept"),
    ({"SIMDUP_INDEX": "redis://user:secret@h:6379/0", "SIMDUP_MAX_PROBES": 20,
      "SIMDUP_DIR": "/data/x", "SIMDUP_ON_REVISIT": "drop", "SIMDUP_DROP_START_REQUESTS": True},
     "Simdup: drop near-duplicate pages within 22 bits of either key and similarity >= 0.18 "
     "(PSM, 20 probes per key and 12 sketch bands), Redis index redis://***@h:6379/0 key "
     "'simdup:news', "
     "SIMDUP_DIR=/data/x (batch files); revisits dropped, start requests dropped like other "
     "pages"),
    ({"SIMDUP_INDEX": "redis://h:6379/0", "SIMDUP_DISTANCE": 12, "SIMDUP_RECALL": 0.98},
     "(PSM, recall 0.98 and 12 sketch bands), Redis index"),
    ({"SIMDUP_BANDS": 0}, "(PSM, 512 probes per key), memory index"),
    ({"SIMDUP_BANDS": 4, "SIMDUP_MAX_PROBES": 256},
     "(PSM, 256 probes per key and 4 sketch bands), memory index"),
])
def test_the_start_up_line_gives_the_effective_setup(settings, expected):
    crawler = make_crawler({"SIMDUP_ENABLED": True, **settings})
    logstats = SimdupLogStats.from_crawler(crawler)
    logstats.register("pages")
    assert expected in logstats.setup("news")


def test_the_start_up_line_says_what_was_restored(tmp_path):
    d = tmp_path / "simdup"
    store = IndexStore(d)
    store.append(records(np.arange(1, 1235)), [f"http://p/{i}" for i in range(1234)])
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_DIR": str(d)})
    middleware = SimdupDownloaderMiddleware.from_crawler(crawler)
    SimdupPipeline.from_crawler(crawler)
    assert middleware.logstats.setup("news").startswith(
        f"Simdup: drop near-duplicate pages and items within 22 bits of either key and "
        f"similarity >= 0.18 (PSM, 128 probes per key and 12 sketch bands, expected recall 1.000 "
        f"at this size), "
        f"memory index, SIMDUP_DIR={d}: restored 1,234 fingerprints and 0 items; ")


def test_summary_counts_in_words_and_leaves_items_without_text_out():
    crawler = make_crawler({"SIMDUP_ENABLED": True})
    stats = crawler.stats
    logstats = SimdupLogStats(crawler, SimdupConfig.from_crawler(crawler))
    stats.set_value("simdup/checked", 3)
    stats.set_value("simdup/duplicates", 1)
    stats.set_value("simdup/revisits", 1)
    stats.set_value("simdup/items/skipped/no_text", 4)
    summary = logstats.summary()
    assert "pages: checked 3, 1 near-duplicate (33.3%" in summary
    assert "1 revisit," in summary
    # items that never have text are said once, apart, not in the summary
    assert "items" not in summary
    stats.set_value("simdup/items/skipped/unreadable_field", 1)
    assert "items: none checked, skipped 5 (no_text 4, unreadable_field 1)" in logstats.summary()


def test_a_target_recall_that_cannot_be_held_is_said_once_naming_the_setting(caplog):
    """SIMDUP_RECALL = 1.0 with the 20-bit header of an index of a hundred
    million pages, where no budget up to the look-up's reaches 1.0: one
    WARNING at start-up naming the setting, the recall it gets in the start-up
    line and the stats."""
    crawler = make_crawler({"SIMDUP_ENABLED": True, "SIMDUP_RECALL": 1.0})
    config = SimdupConfig.from_settings(crawler.settings)
    index = VerifiedIndex(recall=1.0, header_bits=20)
    assert not index.recall_held
    with caplog.at_level(logging.WARNING, logger="scrapy_simdup"):
        middleware = SimdupDownloaderMiddleware(crawler, config, backend=MemoryBackend(index))
        for seed in range(3):
            request, response = _response(f"http://a/{seed}", seed)
            asyncio.run(middleware.process_response(request, response))
    warnings = [r.getMessage() for r in caplog.records if "SIMDUP_RECALL" in r.getMessage()]
    assert len(warnings) == 1 and "cannot be held" in warnings[0]
    stated = crawler.stats.get_value("simdup/expected_recall")
    assert 0.9 < stated < 1.0
    assert f"expected recall {stated:.3f} at this size" in middleware.logstats.setup("news")


# -- per-page DEBUG lines -----------------------------------------------------------

def test_per_page_debug_lines_are_made_only_where_a_handler_keeps_them(monkeypatch):
    """Scrapy leaves its loggers at NOTSET and filters in the root handler:
    a tagged near-duplicate's DEBUG line is made when a handler keeps DEBUG,
    and not built at all under LOG_LEVEL = INFO."""
    made = []

    class Keep(logging.Handler):
        def emit(self, record):
            made.append(record.getMessage())

    root, ours = logging.getLogger(), logging.getLogger("scrapy_simdup")
    handler = Keep(logging.INFO)
    monkeypatch.setattr(root, "handlers", [handler])
    monkeypatch.setattr(root, "level", logging.NOTSET)
    monkeypatch.setattr(ours, "level", logging.NOTSET)
    monkeypatch.setattr(ours, "handlers", [])
    monkeypatch.setattr(ours, "propagate", True)
    for logger in (root, ours):
        monkeypatch.setattr(logger, "_cache", {})
    built = []
    real = logging.Logger.makeRecord
    monkeypatch.setattr(logging.Logger, "makeRecord",
                        lambda self, name, level, fn, lno, msg, *a, **k:
                        built.append(msg) or real(self, name, level, fn, lno, msg, *a, **k))

    def crawl_two_copies():
        middleware = SimdupDownloaderMiddleware.from_crawler(make_crawler(
            {"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag", "SIMDUP_LOG_INTERVAL": 0}))
        _check(middleware, "http://a/", 7)
        return _check(middleware, "http://b/", 7)

    assert crawl_two_copies()["duplicate_of"] == "http://a/"
    assert not any("Tagged near-duplicate" in str(msg) for msg in built)
    handler.setLevel(logging.DEBUG)
    assert crawl_two_copies()["duplicate_of"] == "http://a/"
    assert "Tagged near-duplicate http://b/ of http://a/ (distance 0)" in made
    assert any("Tagged near-duplicate" in msg for msg in built)
    # a logger that does not propagate, and no handler on the way: nothing shown
    ours.propagate = False
    from scrapy_simdup.integration.component import debug_shown
    assert not debug_shown(ours)
    ours.handlers = [logging.NullHandler(logging.DEBUG)]
    assert debug_shown(ours)


# -- stats written per page ---------------------------------------------------------

def test_per_page_counters_go_into_scrapys_own_collector_and_through_any_other():
    """Scrapy's default collector is written into directly (its methods cost
    microseconds each), live and as its own methods would; a collector that
    is not StatsCollector's own (DummyStatsCollector, or one that overrides
    inc_value) gets its methods called."""
    from scrapy.statscollectors import DummyStatsCollector, MemoryStatsCollector

    from scrapy_simdup.integration.statswriter import stat_writers

    crawler = make_crawler({})
    stats = MemoryStatsCollector(crawler)
    stats.set_value("simdup/checked", 4)
    writers = stat_writers(stats)
    assert writers.direct
    writers.inc("simdup/checked")
    writers.inc("simdup/duplicates", 3)
    writers.set("simdup/index_size", 12)
    assert stats.get_value("simdup/checked") == 5      # read back at once: live
    assert stats.get_value("simdup/duplicates") == 3
    assert stats.get_value("simdup/index_size") == 12
    stats.set_stats({"item_scraped_count": 2})      # a new dict: followed
    writers.inc("simdup/checked")
    assert stats.get_stats() == {"item_scraped_count": 2, "simdup/checked": 1}

    class Counting(MemoryStatsCollector):
        def inc_value(self, key, count=1, start=0, spider=None):
            super().inc_value(key, count * 10, start)

    stats = Counting(crawler)
    writers = stat_writers(stats)
    assert not writers.direct
    writers.inc("simdup/checked")
    assert stats.get_value("simdup/checked") == 10     # the override ran
    dummy = stat_writers(DummyStatsCollector(crawler))
    assert not dummy.direct
    dummy.inc("simdup/checked")     # (a collector that keeps nothing: nothing to see, no error)


def test_a_crawl_with_the_default_collector_counts_every_page():
    middleware = SimdupDownloaderMiddleware.from_crawler(make_crawler(
        {"SIMDUP_ENABLED": True, "SIMDUP_ACTION": "tag", "SIMDUP_LOG_INTERVAL": 0}))
    assert _check(middleware, "http://a/", 7)["duplicate_of"] is None
    assert _check(middleware, "http://b/", 7)["duplicate_of"] == "http://a/"
    assert _check(middleware, "http://c/", 8)["duplicate_of"] is None
    get = middleware.stats.get_value
    assert (get("simdup/checked"), get("simdup/duplicates"), get("simdup/tagged"),
            get("simdup/index_size")) == (3, 1, 1, 3)
